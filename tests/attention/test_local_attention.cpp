#include "reformer/attention/local.hpp"
#include "reformer/core/error.hpp"
#include "support/attention_reference.hpp"
#include "support/chunk_settings.hpp"
#include "support/gradcheck.hpp"
#include "support/kernel_settings.hpp"

#include <gtest/gtest.h>

#include <string>

namespace reformer {
namespace {

using namespace reformer::testing;
using attention::LocalAttentionConfig;

template <Index L = 12, Index D = 5>
struct LocalCaseOf {
  static constexpr Index batch = 2, length = L, heads = 2, d = D;
  LocalAttentionConfig config;
  attention::AttentionCall call;
  Workspace workspace;
  View4<double> q{"q", batch, length, heads, d}, k{"k", batch, length, heads, d},
      v{"v", batch, length, heads, d}, out{"out", batch, length, heads, d},
      r{"r", batch, length, heads, d}, dq{"dq", batch, length, heads, d},
      dk{"dk", batch, length, heads, d}, dv{"dv", batch, length, heads, d};
  View3<double> lse{"lse", batch, length, heads};
  Kokkos::View<int**, Layout, MemSpace> valid{"valid", batch, length};

  explicit LocalCaseOf(Index chunk = 4, Index n_before = 1, bool causal = true) {
    config.chunk = chunk;
    config.n_before = n_before;
    call.masks.causal = causal;
    fill_uniform(q, 1);
    fill_uniform(k, 2);
    fill_uniform(v, 3);
    fill_uniform(r, 4);
  }
  void pad_positions(std::vector<std::pair<int, int>> padded) {
    mark_padding(valid, padded);
    call.masks.key_valid = valid;
  }
  double loss() {
    attention::local_attention_forward<double>(q, k, v, config, call, out, lse);
    return dot(out, r);
  }
  void backward() {
    loss();
    attention::local_attention_backward<double>(q, k, v, out, lse, r, config, call, dq, dk, dv,
                                                workspace);
  }
  // The window rule of local attention on original positions.
  std::vector<double> reference() const {
    std::vector<int> host_valid(batch * length, 1);
    if (call.masks.key_valid.extent(0)) {
      auto hv = Kokkos::create_mirror_view_and_copy(HostSpace(), valid);
      for (Index i = 0; i < batch * length; ++i) host_valid[i] = hv.data()[i];
    }
    const auto cfg = config;
    const bool causal = call.masks.causal;
    const Index len = length;
    auto rule = [cfg, causal, host_valid, len](long b, long, long i, long j) {
      const long qc = i / cfg.chunk, kc = j / cfg.chunk;
      if (kc > qc || kc < qc - cfg.n_before) return RefScore{RefScore::Absent};
      if ((causal && j > i) || host_valid[b * len + j] == 0)
        return RefScore{RefScore::Constant, -1e9};
      return RefScore{};
    };
    const Dims dims{batch, length, heads, d};
    return reference_attention(dims, to_host(q), to_host(k), to_host(v), 1.0 / std::sqrt(double(d)),
                               rule);
  }
};

using LocalCase = LocalCaseOf<>;

TEST(LocalAttention, ForwardMatchesDenseReference) {
  for (bool causal : {true, false})
    for (Index n_before : {0, 1, 2}) {
      LocalCase c(4, n_before, causal);
      c.loss();
      EXPECT_LT(relative_error(to_host(c.out), c.reference()), 1e-13)
          << "causal " << causal << " n_before " << n_before;
    }
}

TEST(LocalAttention, GradientsMatchFiniteDifferences) {
  for (bool causal : {true, false}) {
    LocalCase c(4, 1, causal);
    c.call.masks.causal = causal;
    c.backward();
    auto loss = [&] { return c.loss(); };
    EXPECT_LT(gradient_error(c.q, c.dq, loss), 1e-6) << causal;
    EXPECT_LT(gradient_error(c.k, c.dk, loss), 1e-6) << causal;
    EXPECT_LT(gradient_error(c.v, c.dv, loss), 1e-6) << causal;
  }
}

TEST(LocalAttention, PaddingMaskIncludingPositionZero) {
  LocalCase c(4, 1, true);
  c.pad_positions({{0, 0}, {1, 5}, {1, 6}});
  c.loss();
  EXPECT_LT(relative_error(to_host(c.out), c.reference()), 1e-13);
  c.backward();
  auto loss = [&] { return c.loss(); };
  EXPECT_LT(gradient_error(c.k, c.dk, loss), 1e-6);
  EXPECT_LT(gradient_error(c.q, c.dq, loss), 1e-6);
  // A padded key receives no gradient from any query that can see a real key.
  const auto dk = to_host(c.dk);
  Dims dm{c.batch, c.length, c.heads, c.d};
  for (long x = 0; x < c.d; ++x) EXPECT_NEAR(dk[dm.at(1, 5, 0, x)], 0.0, 1e-12);
}

TEST(LocalAttention, ChunkCoveringTheSequenceIsFullCausalAttention) {
  LocalCase c(12, 1, true);
  c.loss();
  auto rule = [](long, long, long i, long j) {
    return j > i ? RefScore{RefScore::Constant, -1e9} : RefScore{};
  };
  const Dims dims{c.batch, c.length, c.heads, c.d};
  const auto full =
      reference_attention(dims, to_host(c.q), to_host(c.k), to_host(c.v), 1 / std::sqrt(5.0), rule);
  EXPECT_LT(relative_error(to_host(c.out), full), 1e-13);
}

TEST(LocalAttention, CausalOutputsIgnoreLaterTokens) {
  LocalCase c(4, 1, true);
  c.loss();
  const auto before = to_host(c.out);
  const Index t = 6;
  // Perturb token t's q, k and v in every batch and head.
  auto hq = Kokkos::create_mirror_view_and_copy(HostSpace(), c.k);
  for (Index b = 0; b < c.batch; ++b)
    for (Index h = 0; h < c.heads; ++h)
      for (Index x = 0; x < c.d; ++x) hq(b, t, h, x) += 3.0;
  Kokkos::deep_copy(c.k, hq);
  auto hv = Kokkos::create_mirror_view_and_copy(HostSpace(), c.v);
  for (Index b = 0; b < c.batch; ++b)
    for (Index h = 0; h < c.heads; ++h)
      for (Index x = 0; x < c.d; ++x) hv(b, t, h, x) -= 2.0;
  Kokkos::deep_copy(c.v, hv);
  c.loss();
  const auto after = to_host(c.out);
  Dims dm{c.batch, c.length, c.heads, c.d};
  for (Index b = 0; b < c.batch; ++b)
    for (Index i = 0; i < c.length; ++i)
      for (Index h = 0; h < c.heads; ++h)
        for (Index x = 0; x < c.d; ++x) {
          const long at = dm.at(b, i, h, x);
          if (i < t)
            EXPECT_EQ(before[at], after[at]) << "position " << i;
          else if (i == t && x == 0)
            EXPECT_NE(before[at], after[at]);
        }
}

TEST(LocalAttention, DropoutIsReplayedInBackward) {
  LocalCase c(4, 1, true);
  c.call.dropout = {0.3, {9, 4}};
  c.backward();
  auto loss = [&] { return c.loss(); };
  EXPECT_LT(gradient_error(c.q, c.dq, loss), 1e-6);
  EXPECT_LT(gradient_error(c.v, c.dv, loss), 1e-6);
  // Dropout changes the output.
  const auto dropped = to_host(c.out);
  c.call.dropout.rate = 0;
  c.loss();
  EXPECT_GT(relative_error(dropped, to_host(c.out)), 1e-3);
}

// The streamed kernels (the GPUs' shape, core/team_scratch.hpp) on the host,
// where their tiles are one register block wide: windows of several key
// tiles, chunks of several query tiles or a partial one (chunk 24), padded
// and filled head sizes, padding and dropout. Each case matches the dense
// reference, the whole-window kernels and the finite differences.
template <class Case>
void check_streamed_local(Case& c, const std::string& what) {
  // The fused kernels (GPUs default to the batched products).
  const ScopedChunkProducts fused(attention::ChunkProducts::fused);
  const ScopedChunkedShape whole(ChunkedKernelShape::whole_window);
  c.backward();
  const auto out = to_host(c.out), dq = to_host(c.dq), dk = to_host(c.dk), dv = to_host(c.dv);
  const ScopedChunkedShape streamed(ChunkedKernelShape::streamed);
  {
    // The online softmax with a thread per row and per element (TileLoops): the same bits.
    const ScopedTileLoops rows(TileLoops::rows);
    c.backward();
    const auto rows_out = to_host(c.out);
    const ScopedTileLoops elements(TileLoops::elements);
    c.backward();
    EXPECT_EQ(to_host(c.out), rows_out) << what;
  }
  c.backward();
  EXPECT_LT(relative_error(to_host(c.out), out), 1e-13) << what;
  EXPECT_LT(relative_error(to_host(c.dq), dq), 1e-13) << what;
  EXPECT_LT(relative_error(to_host(c.dk), dk), 1e-13) << what;
  EXPECT_LT(relative_error(to_host(c.dv), dv), 1e-13) << what;
  if (c.call.dropout.rate == 0.0)
    EXPECT_LT(relative_error(to_host(c.out), c.reference()), 1e-13) << what;
  auto loss = [&] { return c.loss(); };
  EXPECT_LT(gradient_error(c.q, c.dq, loss, kSampledPoints), 1e-6) << what;
  EXPECT_LT(gradient_error(c.k, c.dk, loss, kSampledPoints), 1e-6) << what;
  EXPECT_LT(gradient_error(c.v, c.dv, loss, kSampledPoints), 1e-6) << what;
}

TEST(LocalAttention, StreamedKernelsMatchReferenceWholeWindowAndFiniteDifferences) {
  for (const bool causal : {true, false})
    for (const Index n_before : {0, 1, 2}) {
      LocalCaseOf<96, 5> c(24, n_before, causal);
      check_streamed_local(
          c, "chunk 24, n_before " + std::to_string(n_before) + (causal ? ", causal" : ""));
    }
  LocalCaseOf<128, 16> filled(32, 1, true);
  check_streamed_local(filled, "chunk 32, d_head 16");
  LocalCaseOf<96, 5> padded(24, 1, true);
  padded.pad_positions({{0, 0}, {1, 30}, {1, 95}});
  check_streamed_local(padded, "padding");
  LocalCaseOf<96, 5> dropped(24, 1, true);
  dropped.call.dropout = {0.3, {9, 4}};
  check_streamed_local(dropped, "dropout");
}

// The batched shape (ChunkProducts::batched) against the fused kernels in
// double, with every chunk in one slice and with one chunk per slice, then
// the dense reference and the finite differences.
template <class Case>
void check_batched_local(Case& c, const std::string& what) {
  const ScopedChunkProducts fused(attention::ChunkProducts::fused);
  c.backward();
  const auto out = to_host(c.out), lse = to_host(c.lse), dq = to_host(c.dq), dk = to_host(c.dk),
             dv = to_host(c.dv);
  const ScopedChunkProducts batched(attention::ChunkProducts::batched);
  for (const std::size_t budget : {std::size_t(64) << 20, std::size_t(1)}) {
    const ScopedChunkSlice slice(budget);
    Kokkos::deep_copy(c.out, 7.0);
    c.backward();
    EXPECT_LT(relative_error(to_host(c.out), out), 1e-12) << what << ", slice " << budget;
    EXPECT_LT(relative_error(to_host(c.lse), lse), 1e-12) << what << ", slice " << budget;
    EXPECT_LT(relative_error(to_host(c.dq), dq), 1e-12) << what << ", slice " << budget;
    EXPECT_LT(relative_error(to_host(c.dk), dk), 1e-12) << what << ", slice " << budget;
    EXPECT_LT(relative_error(to_host(c.dv), dv), 1e-12) << what << ", slice " << budget;
  }
  if (c.call.dropout.rate == 0.0)
    EXPECT_LT(relative_error(to_host(c.out), c.reference()), 1e-12) << what;
  auto loss = [&] { return c.loss(); };
  EXPECT_LT(gradient_error(c.q, c.dq, loss, kSampledPoints), 1e-6) << what;
  EXPECT_LT(gradient_error(c.k, c.dk, loss, kSampledPoints), 1e-6) << what;
  EXPECT_LT(gradient_error(c.v, c.dv, loss, kSampledPoints), 1e-6) << what;
}

TEST(LocalAttention, BatchedChunksMatchFusedKernelsReferenceAndFiniteDifferences) {
  for (const bool causal : {true, false})
    for (const Index n_before : {0, 1, 2}) {
      LocalCase c(4, n_before, causal);
      check_batched_local(
          c, "chunk 4, n_before " + std::to_string(n_before) + (causal ? ", causal" : ""));
    }
  LocalCase padded(4, 1, true);
  padded.pad_positions({{0, 0}, {1, 5}, {1, 11}});
  check_batched_local(padded, "padding");
  LocalCase dropped(4, 1, true);
  dropped.call.dropout = {0.3, {9, 4}};
  check_batched_local(dropped, "dropout");
  LocalCase whole(12, 1, false);
  check_batched_local(whole, "one chunk");
}

TEST(LocalAttention, ClearErrors) {
  LocalCase c(5, 1, true);  // 12 is not a multiple of 5
  try {
    c.loss();
    FAIL() << "no error";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("sequence length 12 is not a multiple of the chunk "
                                         "length 5"),
              std::string::npos)
        << e.what();
  }
  LocalCase ok(4, 1, true);
  View4<double> wrong_k("k", ok.batch, ok.length, ok.heads, ok.d + 1);
  try {
    attention::local_attention_forward<double>(ok.q, wrong_k, wrong_k, ok.config, ok.call, ok.out,
                                               ok.lse);
    FAIL() << "no error";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("head size mismatch: q has d_head 5 but k has d_head 6"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace reformer
