#include "reformer/attention/lsh.hpp"
#include "reformer/attention/shared_qk.hpp"
#include "reformer/core/error.hpp"
#include "reformer/core/workspace.hpp"
#include "support/attention_reference.hpp"
#include "support/checks.hpp"
#include "support/chunk_settings.hpp"
#include "support/gradcheck.hpp"
#include "support/kernel_settings.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

namespace reformer {
namespace {

using namespace reformer::testing;
using attention::LshAttentionConfig;

// The whole LSH algorithm written as plainly as possible on the host.
std::vector<double> reference_lsh(const Dims& dm, const std::vector<double>& qk,
                                  const std::vector<double>& v, const std::vector<double>& rot,
                                  const LshAttentionConfig& cfg, bool causal,
                                  const std::vector<int>& valid) {
  const long L = dm.length, R = cfg.n_hashes, d = dm.d;
  std::vector<long> factors(cfg.n_buckets.begin(), cfg.n_buckets.end());
  if (factors.empty()) factors = {2 * std::max<long>(1, L / std::min<long>(cfg.chunk, L))};
  long width = 0, nb = 1;
  for (long f : factors) width += f / 2, nb *= f;
  auto rot_at = [&](long h, long x, long r, long c) {
    return rot[((h * d + x) * R + r) * width + c];
  };
  std::vector<double> out(qk.size(), 0.0);
  for (long b = 0; b < dm.batch; ++b)
    for (long h = 0; h < dm.heads; ++h) {
      // Hash.
      std::vector<long> bucket(R * L);
      for (long r = 0; r < R; ++r)
        for (long i = 0; i < L; ++i) {
          if (!valid.empty() && valid[b * L + i] == 0) {
            bucket[r * L + i] = nb;
            continue;
          }
          long combined = 0, stride = 1, column = 0;
          for (long f : factors) {
            std::vector<double> proj;
            for (long c = 0; c < f / 2; ++c) {
              double p = 0;
              for (long x = 0; x < d; ++x) p += qk[dm.at(b, i, h, x)] * rot_at(h, x, r, column + c);
              proj.push_back(p);
            }
            for (long c = 0; c < f / 2; ++c) proj.push_back(-proj[c]);
            combined += (std::max_element(proj.begin(), proj.end()) - proj.begin()) * stride;
            stride *= f;
            column += f / 2;
          }
          bucket[r * L + i] = combined;
        }
      // Sort items (round, bucket, position).
      std::vector<long> order(R * L);
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(), [&](long x, long y) {
        return std::make_pair(x / L, bucket[x]) < std::make_pair(y / L, bucket[y]);
      });
      // Normalised keys.
      std::vector<double> key(L * d);
      for (long i = 0; i < L; ++i) {
        double sq = 0;
        for (long x = 0; x < d; ++x) sq += qk[dm.at(b, i, h, x)] * qk[dm.at(b, i, h, x)];
        for (long x = 0; x < d; ++x)
          key[i * d + x] = qk[dm.at(b, i, h, x)] / std::sqrt(sq / d + 1e-6) / std::sqrt(double(d));
      }
      const long chunk = std::min<long>(cfg.chunk, L), n_chunks = R * L / chunk;
      const long back = cfg.chunk >= L ? 0 : std::min<long>(cfg.n_before, n_chunks - 1);
      std::vector<double> o(R * L * d), lse(R * L);
      for (long s = 0; s < R * L; ++s) {
        const long pq = order[s] % L, qc = s / chunk;
        std::vector<double> sc;
        std::vector<long> keys;
        for (long w = back; w >= 0; --w) {
          const long kc = ((qc - w) % n_chunks + n_chunks) % n_chunks;
          for (long t = kc * chunk; t < (kc + 1) * chunk; ++t) {
            const long pk = order[t] % L;
            double score;
            if (pk == pq)
              score = -1e5;
            else if ((causal && pk > pq) || (!valid.empty() && valid[b * L + pk] == 0))
              score = -1e9;
            else {
              score = 0;
              for (long x = 0; x < d; ++x) score += qk[dm.at(b, pq, h, x)] * key[pk * d + x];
            }
            sc.push_back(score);
            keys.push_back(pk);
          }
        }
        const double m = *std::max_element(sc.begin(), sc.end());
        double sum = 0;
        for (double x : sc) sum += std::exp(x - m);
        lse[s] = m + std::log(sum);
        for (size_t n = 0; n < keys.size(); ++n)
          for (long x = 0; x < d; ++x)
            o[s * d + x] += std::exp(sc[n] - lse[s]) * v[dm.at(b, keys[n], h, x)];
      }
      // Unsort and combine rounds.
      std::vector<long> where(R * L);
      for (long s = 0; s < R * L; ++s) where[order[s]] = s;
      for (long i = 0; i < L; ++i) {
        double m = -1e300, total = 0;
        for (long r = 0; r < R; ++r) m = std::max(m, lse[where[r * L + i]]);
        for (long r = 0; r < R; ++r) total += std::exp(lse[where[r * L + i]] - m);
        for (long r = 0; r < R; ++r) {
          const long s = where[r * L + i];
          const double w = std::exp(lse[s] - m) / total;
          for (long x = 0; x < d; ++x) out[dm.at(b, i, h, x)] += w * o[s * d + x];
        }
      }
    }
  return out;
}

// D = 4 pads the kernels' scratch tiles (rows, slots and head columns);
// D = 16 with chunks of 8 fills them exactly (double: blocks of 8 x 16).
template <Index D, Index L = 16>
struct LshCaseOf {
  static constexpr Index batch = 2, length = L, heads = 2, d = D;
  LshAttentionConfig config;
  attention::AttentionCall call;
  Workspace workspace;
  View3<double> lse{"lse", batch, length, heads};
  View4<double> qk{"qk", batch, length, heads, d}, v{"v", batch, length, heads, d},
      out{"out", batch, length, heads, d}, r{"r", batch, length, heads, d},
      dqk{"dqk", batch, length, heads, d}, dv{"dv", batch, length, heads, d}, rot;
  Kokkos::View<int**, Layout, MemSpace> valid{"valid", batch, length};
  attention::LshPlan plan;

  LshCaseOf(Index chunk, Index n_hashes, std::vector<Index> buckets, bool causal) {
    config.chunk = chunk;
    config.n_hashes = n_hashes;
    config.n_buckets = buckets;
    call.masks.causal = causal;
    fill_uniform(qk, 1);
    fill_uniform(v, 2);
    fill_uniform(r, 3);
    rot = View4<double>("rot", heads, d, n_hashes, attention::lsh_rotation_width(config, length));
    attention::lsh_random_rotations<double>({5, 6}, rot);
  }
  void pad(std::vector<std::pair<int, int>> padded) {
    mark_padding(valid, padded);
    call.masks.key_valid = valid;
  }
  double loss() {
    attention::lsh_build_plan<double>(qk, rot, config, call.masks, plan, workspace);
    attention::lsh_attention_forward<double>(qk, v, plan, config, call, out, lse, workspace);
    return dot(out, r);
  }
  void backward() {
    loss();
    attention::lsh_attention_backward<double>(qk, v, plan, out, lse, r, config, call, dqk, dv,
                                              workspace);
  }
  std::vector<double> reference() const {
    std::vector<int> host_valid;
    if (call.masks.key_valid.extent(0)) {
      auto hv = Kokkos::create_mirror_view_and_copy(HostSpace(), valid);
      host_valid.assign(hv.data(), hv.data() + hv.size());
    }
    const Dims dims{batch, length, heads, d};
    return reference_lsh(dims, to_host(qk), to_host(v), to_host(rot), config, call.masks.causal,
                         host_valid);
  }
};

using LshCase = LshCaseOf<4>;

struct Variant {
  Index chunk, n_hashes;
  std::vector<Index> buckets;
  bool causal;
};
const Variant kVariants[] = {{4, 1, {4}, false},    {4, 2, {4}, true}, {4, 3, {8}, true},
                             {2, 2, {2, 4}, false}, {8, 2, {}, true},  {4, 1, {6}, true}};

TEST(LshAttention, ForwardMatchesPlainReference) {
  for (const auto& var : kVariants) {
    LshCase c(var.chunk, var.n_hashes, var.buckets, var.causal);
    c.loss();
    EXPECT_LT(relative_error(to_host(c.out), c.reference()), 1e-12)
        << "chunk " << var.chunk << " hashes " << var.n_hashes << " causal " << var.causal;
  }
}

TEST(LshAttention, GradientsMatchFiniteDifferences) {
  for (const auto& var : kVariants) {
    LshCase c(var.chunk, var.n_hashes, var.buckets, var.causal);
    c.backward();
    auto loss = [&] { return c.loss(); };
    EXPECT_LT(gradient_error(c.qk, c.dqk, loss), 1e-6) << "hashes " << var.n_hashes;
    EXPECT_LT(gradient_error(c.v, c.dv, loss), 1e-6) << "hashes " << var.n_hashes;
  }
}

TEST(LshAttention, WholeScratchTilesMatchReferenceAndFiniteDifferences) {
  for (const bool causal : {false, true}) {
    LshCaseOf<16> c(8, 2, {}, causal);
    c.backward();
    EXPECT_LT(relative_error(to_host(c.out), c.reference()), 1e-12) << causal;
    auto loss = [&] { return c.loss(); };
    EXPECT_LT(gradient_error(c.qk, c.dqk, loss), 1e-6) << causal;
    EXPECT_LT(gradient_error(c.v, c.dv, loss), 1e-6) << causal;
  }
}

TEST(LshAttention, PaddingIncludingPositionZero) {
  LshCase c(4, 2, {4}, true);
  c.pad({{0, 0}, {1, 7}, {1, 15}});
  c.backward();
  EXPECT_LT(relative_error(to_host(c.out), c.reference()), 1e-12);
  auto loss = [&] { return c.loss(); };
  EXPECT_LT(gradient_error(c.qk, c.dqk, loss), 1e-6);
  EXPECT_LT(gradient_error(c.v, c.dv, loss), 1e-6);
}

TEST(LshAttention, DuplicateCorrectionAndDropoutGradients) {
  LshCase c(4, 3, {4}, false);
  c.config.duplicate_correction = true;
  c.call.dropout = {0.2, {3, 3}};
  c.backward();
  auto loss = [&] { return c.loss(); };
  EXPECT_LT(gradient_error(c.qk, c.dqk, loss), 1e-6);
  EXPECT_LT(gradient_error(c.v, c.dv, loss), 1e-6);
  const auto corrected = to_host(c.out);
  c.config.duplicate_correction = false;
  c.call.dropout.rate = 0;
  c.loss();
  EXPECT_GT(relative_error(corrected, to_host(c.out)), 1e-4);
}

// The streamed kernels (the GPUs' shape, core/team_scratch.hpp) on the host,
// where their tiles are one register block wide: sequences long enough that a
// window spans several key tiles and a chunk several query tiles (or ends in
// a partial one: chunk 24), head sizes that pad the tiles or fill them. Each
// case matches the plain reference, the finite differences, and the
// whole-window kernels' gradients.
template <class Case>
void check_streamed_lsh(Case& c, const std::string& what) {
  // The fused kernels (GPUs default to the batched products).
  const ScopedChunkProducts fused(attention::ChunkProducts::fused);
  const ScopedChunkedShape whole(ChunkedKernelShape::whole_window);
  c.backward();
  const auto out = to_host(c.out), dqk = to_host(c.dqk), dv = to_host(c.dv);
  const ScopedChunkedShape streamed(ChunkedKernelShape::streamed);
  {
    // The online softmax with a thread per row and per element (core/team_scratch.hpp's
    // TileLoops; elements is the GPUs' default): the same bits.
    const ScopedTileLoops rows(TileLoops::rows);
    c.backward();
    const auto rows_out = to_host(c.out), rows_dqk = to_host(c.dqk);
    const ScopedTileLoops elements(TileLoops::elements);
    c.backward();
    EXPECT_EQ(to_host(c.out), rows_out) << what;
    EXPECT_EQ(to_host(c.dqk), rows_dqk) << what;
  }
  c.backward();
  EXPECT_LT(relative_error(to_host(c.out), out), 1e-13) << what;
  EXPECT_LT(relative_error(to_host(c.dqk), dqk), 1e-13) << what;
  EXPECT_LT(relative_error(to_host(c.dv), dv), 1e-13) << what;
  if (c.call.dropout.rate == 0.0 && !c.config.duplicate_correction)
    EXPECT_LT(relative_error(to_host(c.out), c.reference()), 1e-12) << what;
  auto loss = [&] { return c.loss(); };
  EXPECT_LT(gradient_error(c.qk, c.dqk, loss, kSampledPoints), 1e-6) << what;
  EXPECT_LT(gradient_error(c.v, c.dv, loss, kSampledPoints), 1e-6) << what;
}

TEST(LshAttention, StreamedKernelsMatchReferenceWholeWindowAndFiniteDifferences) {
  for (const bool causal : {false, true}) {
    LshCaseOf<4, 128> c(32, 2, {}, causal);
    check_streamed_lsh(c, std::string("chunk 32, 2 hashes") + (causal ? ", causal" : ""));
  }
  LshCaseOf<4, 128> three(16, 3, {8}, true);
  check_streamed_lsh(three, "chunk 16, 3 hashes, 8 buckets");
  LshCaseOf<20, 96> partial(24, 2, {4}, true);
  check_streamed_lsh(partial, "chunk 24, d_head 20");
  LshCaseOf<16, 64> filled(16, 1, {}, false);
  check_streamed_lsh(filled, "chunk 16, d_head 16");
}

TEST(LshAttention, StreamedKernelsWithPaddingDuplicateCorrectionAndDropout) {
  LshCaseOf<4, 128> padded(32, 2, {}, true);
  padded.pad({{0, 0}, {1, 70}, {1, 127}});
  check_streamed_lsh(padded, "padding");
  LshCaseOf<4, 128> corrected(16, 3, {8}, false);
  corrected.config.duplicate_correction = true;
  corrected.call.dropout = {0.2, {3, 3}};
  check_streamed_lsh(corrected, "duplicate correction, dropout");
}

// The batched shape (ChunkProducts::batched: gathered chunks and strided-
// batched products, the GPUs' alternative to the fused kernels) against the
// fused kernels, in double: the same outputs, logsumexps and gradients to
// 1e-12, with every chunk in one slice, one chunk per slice, and slices of
// three chunks (the last one partial); then the plain reference and the
// finite differences in the batched shape.
template <class Case>
void check_batched_lsh(Case& c, const std::string& what) {
  const ScopedChunkProducts fused(attention::ChunkProducts::fused);
  c.backward();
  const auto out = to_host(c.out), lse = to_host(c.lse), dqk = to_host(c.dqk), dv = to_host(c.dv);
  const ScopedChunkProducts batched(attention::ChunkProducts::batched);
  const auto per_chunk =
      attention::chunk_batched_bytes(c.config.chunk, c.config.n_before, c.d, 1, sizeof(double), 1)
          .per_chunk_backward;
  for (const std::size_t budget : {std::size_t(64) << 20, std::size_t(1), 3 * per_chunk}) {
    const ScopedChunkSlice slice(budget);
    Kokkos::deep_copy(c.out, 7.0);
    Kokkos::deep_copy(c.dqk, 7.0);
    c.backward();
    EXPECT_LT(relative_error(to_host(c.out), out), 1e-12) << what << ", slice " << budget;
    EXPECT_LT(relative_error(to_host(c.lse), lse), 1e-12) << what << ", slice " << budget;
    EXPECT_LT(relative_error(to_host(c.dqk), dqk), 1e-12) << what << ", slice " << budget;
    EXPECT_LT(relative_error(to_host(c.dv), dv), 1e-12) << what << ", slice " << budget;
  }
  if (c.call.dropout.rate == 0.0 && !c.config.duplicate_correction)
    EXPECT_LT(relative_error(to_host(c.out), c.reference()), 1e-12) << what;
  auto loss = [&] { return c.loss(); };
  EXPECT_LT(gradient_error(c.qk, c.dqk, loss, kSampledPoints), 1e-6) << what;
  EXPECT_LT(gradient_error(c.v, c.dv, loss, kSampledPoints), 1e-6) << what;
}

TEST(LshAttention, BatchedChunksMatchFusedKernelsReferenceAndFiniteDifferences) {
  for (const bool causal : {false, true})
    for (const Index hashes : {1, 2, 3, 5, 8}) {
      LshCase c(4, hashes, {4}, causal);
      check_batched_lsh(
          c, "chunk 4, " + std::to_string(hashes) + " hashes" + (causal ? ", causal" : ""));
    }
  LshCaseOf<20, 96> partial(24, 2, {4}, true);
  check_batched_lsh(partial, "chunk 24, d_head 20");
  LshCase two_back(4, 2, {4}, false);
  two_back.config.n_before = 2;
  check_batched_lsh(two_back, "n_before 2");
  LshCase single(16, 2, {}, true);
  check_batched_lsh(single, "one chunk (no look-back)");
}

TEST(LshAttention, BatchedChunksWithPaddingDuplicateCorrectionAndDropout) {
  LshCase c(4, 2, {4}, true);
  c.pad({{0, 0}, {1, 7}, {1, 15}});
  check_batched_lsh(c, "padding");
  LshCaseOf<4, 128> padded(32, 2, {}, true);
  padded.pad({{0, 0}, {1, 70}, {1, 127}});
  check_batched_lsh(padded, "padding, 2 real chunks of 4");
  LshCaseOf<4, 64> tail(8, 3, {4}, false);
  tail.pad({{0, 20}, {0, 21}, {0, 63}, {1, 9}});
  check_batched_lsh(tail, "padding, 3 hashes, a partial real chunk");
  LshCase all(4, 2, {4}, false);
  all.config.duplicate_correction = true;
  all.call.dropout = {0.2, {3, 3}};
  check_batched_lsh(all, "duplicate correction, dropout");
}

// The GPUs' shapes of the kernels around the chunks (hashing by element,
// TileLoops::elements; the rounds' combination, the shared keys' scale and
// gradient and D_i = dout . out on lanes, RowKernels::lanes) on the host
// against the host's shapes: the same buckets, outputs and gradients to
// rounding (the keys' scales sum their squares in another order); then the plain
// reference and finite differences in the GPUs' shapes.
template <class Case>
void check_gpu_row_shapes(Case& c, const std::string& what) {
  std::vector<int> buckets;
  std::vector<double> out, lse, dqk, dv;
  const auto run = [&] {
    Kokkos::deep_copy(c.out, 7.0);
    c.backward();
    auto b = Kokkos::create_mirror_view_and_copy(HostSpace(), c.plan.buckets);
    buckets.assign(b.data(), b.data() + b.size());
    out = to_host(c.out), lse = to_host(c.lse), dqk = to_host(c.dqk), dv = to_host(c.dv);
  };
  {
    const ScopedTileLoops rows(TileLoops::rows);
    const ScopedRowKernels threads(RowKernels::threads);
    run();
  }
  const auto host_buckets = buckets;
  const auto host_out = out, host_lse = lse, host_dqk = dqk, host_dv = dv;
  const ScopedTileLoops elements(TileLoops::elements);
  const ScopedRowKernels lanes(RowKernels::lanes);
  run();
  EXPECT_EQ(buckets, host_buckets) << what;
  EXPECT_LT(relative_error(out, host_out), 1e-13) << what;
  EXPECT_LT(relative_error(lse, host_lse), 1e-13) << what;
  EXPECT_LT(relative_error(dqk, host_dqk), 1e-13) << what;
  EXPECT_LT(relative_error(dv, host_dv), 1e-13) << what;
  if (c.call.dropout.rate == 0.0 && !c.config.duplicate_correction)
    EXPECT_LT(relative_error(out, c.reference()), 1e-12) << what;
  auto loss = [&] { return c.loss(); };
  EXPECT_LT(gradient_error(c.qk, c.dqk, loss, kSampledPoints), 1e-6) << what;
  EXPECT_LT(gradient_error(c.v, c.dv, loss, kSampledPoints), 1e-6) << what;
}

TEST(LshAttention, GpuRowShapesMatchHostShapesReferenceAndFiniteDifferences) {
  for (const bool causal : {false, true})
    for (const Index hashes : {1, 2, 3, 8}) {
      LshCase c(4, hashes, {4}, causal);
      check_gpu_row_shapes(
          c, "chunk 4, " + std::to_string(hashes) + " hashes" + (causal ? ", causal" : ""));
    }
  LshCaseOf<20, 96> partial(24, 2, {4, 6}, true);
  check_gpu_row_shapes(partial, "chunk 24, d_head 20, buckets 4 x 6 (96 positions: 3 blocks)");
  LshCaseOf<4, 128> padded(32, 2, {}, true);
  padded.pad({{0, 0}, {1, 70}, {1, 127}});
  check_gpu_row_shapes(padded, "padding");
  LshCase all(4, 3, {4}, false);
  all.config.duplicate_correction = true;
  all.call.dropout = {0.2, {3, 3}};
  check_gpu_row_shapes(all, "duplicate correction, dropout");
}

// A chunk as long as the sequence, or longer (item 12 of the reference: then
// LSH attention is plain shared-QK attention with the self-mask).
TEST(LshAttention, SingleChunkIsSharedQkFullAttentionWithSelfMask) {
  for (const Index chunk : {16, 64})
    for (bool causal : {false, true}) {
      LshCase c(chunk, 2, {}, causal);
      c.loss();
      // Dense shared-QK attention: keys are the normalised queries.
      const auto qk = to_host(c.qk);
      Dims dm{c.batch, c.length, c.heads, c.d};
      std::vector<double> keys(qk.size());
      for (long b = 0; b < dm.batch; ++b)
        for (long i = 0; i < dm.length; ++i)
          for (long h = 0; h < dm.heads; ++h) {
            double sq = 0;
            for (long x = 0; x < dm.d; ++x) sq += qk[dm.at(b, i, h, x)] * qk[dm.at(b, i, h, x)];
            for (long x = 0; x < dm.d; ++x)
              keys[dm.at(b, i, h, x)] = qk[dm.at(b, i, h, x)] / std::sqrt(sq / dm.d + 1e-6);
          }
      auto rule = [causal](long, long, long i, long j) {
        if (i == j) return RefScore{RefScore::Constant, -1e5};
        if (causal && j > i) return RefScore{RefScore::Constant, -1e9};
        return RefScore{};
      };
      const auto full =
          reference_attention(dm, qk, keys, to_host(c.v), 1 / std::sqrt(double(dm.d)), rule);
      EXPECT_LT(relative_error(to_host(c.out), full), 1e-12) << causal << " chunk " << chunk;
    }
}

TEST(LshAttention, IdenticalRoundsEqualOneRound) {
  LshCase one(4, 1, {4}, true);
  LshCase three(4, 3, {4}, true);
  // Copy round 0's rotation into every round of the 3-round case.
  auto r1 = Kokkos::create_mirror_view_and_copy(HostSpace(), one.rot);
  auto r3 = Kokkos::create_mirror_view_and_copy(HostSpace(), three.rot);
  for (Index h = 0; h < one.heads; ++h)
    for (Index x = 0; x < one.d; ++x)
      for (Index r = 0; r < 3; ++r)
        for (Index c = 0; c < Index(r1.extent(3)); ++c) r3(h, x, r, c) = r1(h, x, 0, c);
  Kokkos::deep_copy(three.rot, r3);
  one.loss();
  three.loss();
  EXPECT_LT(relative_error(to_host(three.out), to_host(one.out)), 1e-14);
}

TEST(LshAttention, CausalOutputsIgnoreLaterTokens) {
  LshCase c(4, 2, {4}, true);
  c.loss();
  const auto before = to_host(c.out);
  const Index t = 9;
  // Scaling qk_t by a positive factor keeps its buckets and normalised key but
  // changes its query; v_t changes too.
  auto hq = Kokkos::create_mirror_view_and_copy(HostSpace(), c.qk);
  auto hv = Kokkos::create_mirror_view_and_copy(HostSpace(), c.v);
  for (Index b = 0; b < c.batch; ++b)
    for (Index h = 0; h < c.heads; ++h)
      for (Index x = 0; x < c.d; ++x) {
        hq(b, t, h, x) *= 2.5;
        hv(b, t, h, x) += 1.0;
      }
  Kokkos::deep_copy(c.qk, hq);
  Kokkos::deep_copy(c.v, hv);
  c.loss();
  const auto after = to_host(c.out);
  Dims dm{c.batch, c.length, c.heads, c.d};
  Index changed_at_t = 0;
  for (Index b = 0; b < c.batch; ++b)
    for (Index h = 0; h < c.heads; ++h)
      for (Index x = 0; x < c.d; ++x) {
        for (Index i = 0; i < t; ++i)
          EXPECT_EQ(before[dm.at(b, i, h, x)], after[dm.at(b, i, h, x)]) << "position " << i;
        changed_at_t += before[dm.at(b, t, h, x)] != after[dm.at(b, t, h, x)];
      }
  EXPECT_GT(changed_at_t, 0);
}

TEST(LshAttention, TokenWithNoAllowedTargetAttendsToItself) {
  LshCase c(4, 2, {4}, true);
  c.loss();
  // Causal: position 0 may attend to nothing but itself.
  const auto out = to_host(c.out), v = to_host(c.v);
  Dims dm{c.batch, c.length, c.heads, c.d};
  for (Index b = 0; b < c.batch; ++b)
    for (Index h = 0; h < c.heads; ++h)
      for (Index x = 0; x < c.d; ++x)
        EXPECT_NEAR(out[dm.at(b, 0, h, x)], v[dm.at(b, 0, h, x)], 1e-12);
}

TEST(LshAttention, BucketsAreSortedStably) {
  LshCase c(4, 2, {8}, false);
  c.loss();
  auto perm = Kokkos::create_mirror_view_and_copy(HostSpace(), c.plan.perm);
  auto undo = Kokkos::create_mirror_view_and_copy(HostSpace(), c.plan.undo);
  auto buckets = Kokkos::create_mirror_view_and_copy(HostSpace(), c.plan.buckets);
  const Index L = c.length;
  for (Index bh = 0; bh < c.batch * c.heads; ++bh)
    for (Index s = 0; s < 2 * L; ++s) {
      const Index r = s / L, i = perm(bh, s);
      EXPECT_EQ(undo(bh, r * L + i), s);
      if (s % L == 0) continue;
      const Index prev = perm(bh, s - 1);
      const auto key = std::make_pair(buckets(bh, r * L + i), i);
      EXPECT_LT(std::make_pair(buckets(bh, r * L + prev), prev), key);
    }
}

TEST(LshAttention, ClearErrors) {
  auto message = [](auto&& f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  LshCase c(4, 1, {4}, true);
  c.config.chunk = 5;
  EXPECT_NE(message([&] { c.loss(); })
                .find("sequence length 16 is not a multiple of the chunk "
                      "length 5"),
            std::string::npos);
  c.config.chunk = 4;
  c.config.n_buckets = {5};
  EXPECT_NE(message([&] { c.loss(); }).find("bucket count 5 must be even"), std::string::npos);
  c.config.n_buckets = {4};
  c.loss();
  View4<double> v_wrong("v", c.batch, c.length, c.heads, c.d + 2);
  EXPECT_NE(message([&] {
              attention::lsh_attention_forward<double>(c.qk, v_wrong, c.plan, c.config, c.call,
                                                       c.out, c.lse, c.workspace);
            }).find("head size mismatch: q has d_head 4 but k has d_head 6"),
            std::string::npos);
  View4<double> rot_wrong("rot", c.heads, c.d, 2, 2);
  EXPECT_NE(message([&] {
              attention::lsh_build_plan<double>(c.qk, rot_wrong, c.config, c.call.masks, c.plan,
                                                c.workspace);
            }).find("rotations have shape [2, 4, 2, 2] but must be [2, 4, 1, 2]"),
            std::string::npos);
  // Hashing alone (cached decoding) checks its output's shape too.
  attention::LshPlan::Ints buckets_wrong("buckets", c.batch * c.heads, c.length + 1);
  EXPECT_NE(message([&] {
              attention::lsh_hash<double>(c.qk, c.rot, c.config, c.call.masks, buckets_wrong);
            }).find("lsh_hash: buckets have shape [4, 17] but must be [4, 16]"),
            std::string::npos);
  // A plan of another shape is refused, naming both shapes.
  c.config.n_hashes = 2;
  EXPECT_NE(message([&] {
              attention::lsh_attention_forward<double>(c.qk, c.v, c.plan, c.config, c.call, c.out,
                                                       c.lse, c.workspace);
            }).find("plan was built for batch 2, length 16, 2 heads and 1 hash rounds"),
            std::string::npos);
  attention::LshPlan empty;
  EXPECT_NE(message([&] {
              attention::lsh_attention_forward<double>(c.qk, c.v, empty, c.config, c.call, c.out,
                                                       c.lse, c.workspace);
            }).find("the LSH plan is empty"),
            std::string::npos);
}

// The automatic bucket count is 2 * L / chunk, split into two even factors
// above 128 buckets (as trax does) so that the rotations stay small.
TEST(LshAttention, AutomaticBucketCountFactorisesAbove128) {
  LshAttentionConfig config;
  config.chunk = 64;
  EXPECT_EQ(attention::lsh_bucket_factors(config, 4096), std::vector<Index>({128}));
  EXPECT_EQ(attention::lsh_bucket_factors(config, 8192), std::vector<Index>({16, 16}));
  EXPECT_EQ(attention::lsh_bucket_factors(config, 65536), std::vector<Index>({32, 64}));
  EXPECT_EQ(attention::lsh_rotation_width(config, 65536), 16 + 32);
  EXPECT_EQ(attention::lsh_bucket_count(config, 65536), 2048);
  // 2 * 3 * 50 = 300 buckets: the even factors closest to sqrt(300).
  EXPECT_EQ(attention::lsh_bucket_factors(config, 64 * 150), std::vector<Index>({10, 30}));
  // Shorter than a chunk: one chunk, 2 buckets.
  EXPECT_EQ(attention::lsh_bucket_factors(config, 16), std::vector<Index>({2}));
}

// The parallel counting sort gives the stable order of (round, bucket,
// position) at a length where each row is cut into several blocks.
TEST(LshAttention, ParallelSortMatchesStableSortOnLongSequences) {
  const Index batch = 1, length = 8192 + 96, heads = 2, d = 4, rounds = 2;  // 4 sort blocks
  LshAttentionConfig config;
  config.chunk = 32;
  config.n_hashes = rounds;
  View4<double> qk("qk", batch, length, heads, d);
  fill_uniform(qk, 21);
  View4<double> rot("rot", heads, d, rounds, attention::lsh_rotation_width(config, length));
  attention::lsh_random_rotations<double>({7, 7}, rot);
  attention::LshPlan plan;
  Workspace workspace;
  attention::lsh_build_plan<double>(qk, rot, config, {}, plan, workspace);
  auto perm = Kokkos::create_mirror_view_and_copy(HostSpace(), plan.perm);
  auto undo = Kokkos::create_mirror_view_and_copy(HostSpace(), plan.undo);
  auto buckets = Kokkos::create_mirror_view_and_copy(HostSpace(), plan.buckets);
  for (Index bh = 0; bh < batch * heads; ++bh) {
    std::vector<Index> order(rounds * length);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](Index x, Index y) {
      return std::make_pair(x / length, buckets(bh, x)) <
             std::make_pair(y / length, buckets(bh, y));
    });
    for (Index s = 0; s < rounds * length; ++s) {
      ASSERT_EQ(perm(bh, s), order[s] % length) << "item " << s;
      ASSERT_EQ(undo(bh, order[s]), s);
    }
  }
}

// The serial cached step (before issue 31) written plainly on the host: per
// round a stable counting sort of the n = t + 1 cached buckets, the query's
// window (its chunk and n_before chunks before it in the cycle of rounds) and
// one softmax over the union of the rounds' windows.
std::vector<double> reference_step(const std::vector<double>& q, const std::vector<double>& k,
                                   const std::vector<double>& v, const std::vector<int>& buckets,
                                   const std::vector<Index>& positions, Index heads, Index dh,
                                   Index capacity, Index bins, const LshAttentionConfig& cfg) {
  const Index batch = Index(positions.size()), R = cfg.n_hashes;
  std::vector<double> out(batch * heads * dh, 0.0);
  for (Index b = 0; b < batch; ++b)
    for (Index h = 0; h < heads; ++h) {
      const Index bh = b * heads + h, t = positions[b], n = t + 1;
      const Index c = std::min(n, cfg.chunk), rc = (n + c - 1) / c, cycle = R * rc;
      const Index reach = rc == 1 ? 0 : std::min(cfg.n_before, cycle - 1);
      std::vector<std::vector<Index>> perm(R, std::vector<Index>(n));
      std::vector<Index> query_rank(R);
      for (Index r = 0; r < R; ++r) {
        std::vector<Index> start(bins + 1, 0);
        for (Index j = 0; j < n; ++j) ++start[buckets[(bh * R + r) * capacity + j] + 1];
        for (Index x = 0; x < bins; ++x) start[x + 1] += start[x];
        for (Index j = 0; j < n; ++j) {
          const Index rank = start[buckets[(bh * R + r) * capacity + j]]++;
          perm[r][rank] = j;
          if (j == t) query_rank[r] = rank;
        }
      }
      std::vector<std::vector<std::pair<Index, double>>> win(R);
      std::vector<double> lse(R);
      for (Index r = 0; r < R; ++r) {
        const Index vq = r * rc + query_rank[r] / c;
        for (Index back = 0; back <= reach; ++back) {
          const Index u = (vq - back + cycle) % cycle, kr = u / rc, first = u % rc * c;
          for (Index i = 0; i < c && first + i < n; ++i) {
            const Index j = perm[kr][first + i];
            double dot = 0;
            for (Index d = 0; d < dh; ++d)
              dot += q[bh * dh + d] * k[(b * capacity + j) * heads * dh + h * dh + d];
            win[r].push_back({j, j == t ? -1e5 : dot});
          }
        }
        double m = -1e300, sum = 0;
        for (auto& e : win[r]) m = std::max(m, e.second);
        for (auto& e : win[r]) sum += std::exp(e.second - m);
        lse[r] = m + std::log(sum);
      }
      const double m = *std::max_element(lse.begin(), lse.end());
      double total = 0;
      for (double x : lse) total += std::exp(x - m);
      const double big = m + std::log(total);
      for (Index r = 0; r < R; ++r)
        for (auto& e : win[r])
          for (Index d = 0; d < dh; ++d)
            out[bh * dh + d] +=
                std::exp(e.second - big) * v[(b * capacity + e.first) * heads * dh + h * dh + d];
    }
  return out;
}

// The team-parallel cached step equals the serial algorithm on long caches:
// many slices of positions, several rounds, many buckets of which some are
// empty, padding buckets, queries in the middle of a chunk, look-back across
// rounds; the order, hence the output, is the same for any number of slices.
TEST(LshAttention, StepSortMatchesSerialReferenceOnLongCaches) {
  const Index batch = 2, heads = 3, dh = 8, capacity = 5000, rounds = 3;
  LshAttentionConfig config;
  config.chunk = 32;
  config.n_hashes = rounds;
  config.n_before = 2;
  config.n_buckets = {16, 8};
  const Index bins = attention::lsh_bucket_count(config, capacity) + 1;  // 129
  const std::vector<Index> positions = {4700, 1234 + 17};                // t % 32 = 28 and 19
  View3<double> q("q", batch, heads, dh), k("k", batch, capacity, heads * dh),
      v("v", batch, capacity, heads * dh);
  fill_uniform(q, 31);
  fill_uniform(k, 32);
  fill_uniform(v, 33);
  // Buckets drawn from 0..127 skipping every multiple of 3 (empty buckets), with
  // 1 in 50 the padding bucket 128.
  std::vector<int> host_buckets(batch * heads * rounds * capacity);
  for (std::size_t i = 0; i < host_buckets.size(); ++i) {
    const double u = random_uniform({34, 1}, i);
    int x = int(u * 128);
    if (x % 3 == 0) x = (x + 1) % 128;
    host_buckets[i] = random_uniform({35, 1}, i) < 0.02 ? int(bins - 1) : x;
  }
  Kokkos::View<int***, Layout, MemSpace> buckets("buckets", batch * heads, rounds, capacity);
  Kokkos::deep_copy(buckets, Kokkos::View<const int***, Layout, HostSpace>(
                                 host_buckets.data(), batch * heads, rounds, capacity));
  Kokkos::View<Index*, Layout, MemSpace> pos("pos", batch);
  Kokkos::deep_copy(pos, Kokkos::View<const Index*, Layout, HostSpace>(positions.data(), batch));
  const auto host = [](const auto& view) {
    auto h = Kokkos::create_mirror_view_and_copy(HostSpace(), view);
    return std::vector<double>(h.data(), h.data() + h.size());
  };
  const auto want = reference_step(host(q), host(k), host(v), host_buckets, positions, heads, dh,
                                   capacity, bins, config);
  Workspace workspace;
  std::vector<double> first;
  for (const Index slices : {Index(0), Index(1), Index(7), Index(64)}) {
    SCOPED_TRACE("sort_slices " + std::to_string(slices));
    View3<double> out("out", batch, heads, dh);
    attention::lsh_attention_step<double>(q, k, v, buckets, pos, positions[0], config, out,
                                          workspace, slices);
    const auto got = host(out);
    double worst = 0, scale = 0;
    for (std::size_t i = 0; i < got.size(); ++i) {
      worst = std::max(worst, std::abs(got[i] - want[i]));
      scale = std::max(scale, std::abs(want[i]));
    }
    EXPECT_LT(worst, 1e-12);
    EXPECT_GT(scale, 1e-3);  // the outputs are not all zero
    if (first.empty())
      first = got;
    else
      EXPECT_EQ(got, first);  // the same order, hence the same sums
  }
}

// Cached buckets for the step tests: bucket (i * 7919) % 128 at flat index i.
int pattern_bucket(Index i) { return int((i * 7919) % 128); }
void fill_pattern(Kokkos::View<int***, Layout, MemSpace> buckets) {
  Kokkos::parallel_for(
      "test_buckets", range(buckets.size()),
      KOKKOS_LAMBDA(Index i) { buckets.data()[i] = int((i * 7919) % 128); });
}
// buckets(bh, r, positions(bh / heads)) = planned(bh, r), as the layer's step
// stored them before the step hashed its own query.
void write_query_buckets(Kokkos::View<int***, Layout, MemSpace> buckets,
                         Kokkos::View<const int**, Layout, MemSpace> planned,
                         Kokkos::View<const Index*, Layout, MemSpace> positions, Index heads) {
  const Index rounds = buckets.extent(1);
  Kokkos::parallel_for(
      "test_write_buckets", range(buckets.extent(0) * rounds), KOKKOS_LAMBDA(Index i) {
        const Index bh = i / rounds, r = i % rounds;
        buckets(bh, r, positions(bh / heads)) = planned(bh, r);
      });
}

// The step that hashes its own query (one launch: AttentionLayer::step's form)
// writes the buckets that lsh_hash computes into the cache, and gives the
// output of lsh_hash, a bucket write and the step, bit for bit; wrong
// rotations are refused by name.
TEST(LshAttention, StepHashingItsQueryEqualsHashThenStep) {
  const Index batch = 2, heads = 3, dh = 8, capacity = 3000, rounds = 3;
  LshAttentionConfig config;
  config.chunk = 32;
  config.n_hashes = rounds;
  config.n_before = 1;
  config.n_buckets = {16, 8};
  const std::vector<Index> positions = {2900, 1234 + 17};
  const Index width = attention::lsh_rotation_width(config, capacity);
  View4<double> q4("q", batch, 1, heads, dh), rotations("rotations", heads, dh, rounds, width);
  View3<double> q(q4.data(), batch, heads, dh), k("k", batch, capacity, heads * dh),
      v("v", batch, capacity, heads * dh);
  fill_uniform(q4, 41);
  fill_uniform(k, 42);
  fill_uniform(v, 43);
  attention::lsh_random_rotations<double>({44, 1}, rotations);
  // The cached positions' buckets: any bucket below 128.
  Kokkos::View<int***, Layout, MemSpace> hashed("hashed", batch * heads, rounds, capacity);
  fill_pattern(hashed);
  Kokkos::View<int***, Layout, MemSpace> separate("separate", batch * heads, rounds, capacity);
  Kokkos::deep_copy(separate, hashed);
  Kokkos::View<Index*, Layout, MemSpace> pos("pos", batch);
  Kokkos::deep_copy(pos, Kokkos::View<const Index*, Layout, HostSpace>(positions.data(), batch));
  Workspace workspace;
  // lsh_hash, the bucket write, then the step on the buckets.
  Kokkos::View<int**, Layout, MemSpace> planned("planned", batch * heads, rounds);
  attention::lsh_hash<double>(q4, rotations, config, {}, planned);
  write_query_buckets(separate, planned, pos, heads);
  View3<double> want("want", batch, heads, dh), got("got", batch, heads, dh);
  attention::lsh_attention_step<double>(q, k, v, separate, pos, positions[0], config, want,
                                        workspace);
  attention::lsh_attention_step<double>(q, rotations, k, v, hashed, pos, positions[0], config, got,
                                        workspace);
  const auto ints = [](const auto& view) {
    auto h = Kokkos::create_mirror_view_and_copy(HostSpace(), view);
    return std::vector<int>(h.data(), h.data() + h.size());
  };
  EXPECT_EQ(ints(hashed), ints(separate));
  EXPECT_EQ(to_host(got), to_host(want));
  // The query's buckets were written: they differ from what the cache held
  // there in at least one (bh, round).
  const auto after = ints(hashed);
  int changed = 0;
  for (Index bh = 0; bh < batch * heads; ++bh)
    for (Index r = 0; r < rounds; ++r) {
      const Index at = (bh * rounds + r) * capacity + positions[std::size_t(bh / heads)];
      changed += after[std::size_t(at)] != pattern_bucket(at);
    }
  EXPECT_GT(changed, 0);
  View4<double> wrong("wrong", heads, dh, rounds, width - 1);
  expect_error<ShapeError>(
      [&] {
        attention::lsh_attention_step<double>(q, wrong, k, v, hashed, pos, positions[0], config,
                                              got, workspace);
      },
      {"rotations have shape", "n_hashes"});
}

// k(b, pos(b), :) = keys(b, 0, :, :) and v(b, pos(b), :) = values(b, :).
void write_cache_rows(View4<double> keys, View2<double> values,
                      Kokkos::View<const Index*, Layout, MemSpace> pos, View3<double> k,
                      View3<double> v) {
  const Index inner = values.extent(1), dh = keys.extent(3);
  Kokkos::parallel_for(
      "test_write_cache", range(Index(values.extent(0)) * inner), KOKKOS_LAMBDA(Index i) {
        const Index b = i / inner, x = i % inner;
        k(b, pos(b), x) = keys(b, 0, x / dh, x % dh);
        v(b, pos(b), x) = values(b, x);
      });
}

// The form that also writes the caches (AttentionLayer::step's) writes the
// query's key (the query normalised: shared_keys' bits) and its value at its
// position, and gives the hashing form's output on caches written beforehand,
// bit for bit; new values of the wrong shape are refused by name.
TEST(LshAttention, StepWritingTheCachesEqualsWriteThenStep) {
  const Index batch = 2, heads = 3, dh = 8, capacity = 600, rounds = 2;
  LshAttentionConfig config;
  config.chunk = 16;
  config.n_hashes = rounds;
  config.n_before = 1;
  config.n_buckets = {16, 8};  // 128 buckets, as fill_pattern's
  const std::vector<Index> positions = {590, 301};
  const Index width = attention::lsh_rotation_width(config, capacity);
  View4<double> q4("q", batch, 1, heads, dh), keys4("keys", batch, 1, heads, dh);
  View4<double> rotations("rotations", heads, dh, rounds, width);
  View3<double> q(q4.data(), batch, heads, dh), k("k", batch, capacity, heads * dh),
      v("v", batch, capacity, heads * dh);
  View2<double> values("values", batch, heads * dh);
  fill_uniform(q4, 51);
  fill_uniform(k, 52);
  fill_uniform(v, 53);
  fill_uniform(values, 54);
  attention::lsh_random_rotations<double>({55, 1}, rotations);
  Kokkos::View<int***, Layout, MemSpace> buckets("buckets", batch * heads, rounds, capacity);
  fill_pattern(buckets);
  Kokkos::View<int***, Layout, MemSpace> buckets2("buckets2", batch * heads, rounds, capacity);
  Kokkos::deep_copy(buckets2, buckets);
  View3<double> k2("k2", batch, capacity, heads * dh), v2("v2", batch, capacity, heads * dh);
  Kokkos::deep_copy(k2, k);
  Kokkos::deep_copy(v2, v);
  Kokkos::View<Index*, Layout, MemSpace> pos("pos", batch);
  Kokkos::deep_copy(pos, Kokkos::View<const Index*, Layout, HostSpace>(positions.data(), batch));
  Workspace workspace;
  // The caches written first (the key by shared_keys), then the hashing form.
  attention::shared_keys<double>(q4, keys4);
  write_cache_rows(keys4, values, pos, k, v);
  const Index inner = heads * dh;
  View3<double> want("want", batch, heads, dh), got("got", batch, heads, dh);
  attention::lsh_attention_step<double>(q, rotations, k, v, buckets, pos, positions[0], config,
                                        want, workspace);
  attention::lsh_attention_step<double>(q, values, rotations, k2, v2, buckets2, pos, positions[0],
                                        config, got, workspace);
  EXPECT_EQ(to_host(got), to_host(want));
  EXPECT_EQ(to_host(k2), to_host(k));
  EXPECT_EQ(to_host(v2), to_host(v));
  View2<double> wrong("wrong", batch, inner - 1);
  expect_error<ShapeError>(
      [&] {
        attention::lsh_attention_step<double>(q, wrong, rotations, k2, v2, buckets2, pos,
                                              positions[0], config, got, workspace);
      },
      {"new values have shape", "[2, 24]"});
}

// A reversible network rebuilds a layer's input by subtraction, which is not
// bit-identical. Here one position's projections tie between two buckets, so a
// change in the last bits flips its bucket when rehashed; the recompute with
// the forward's plan keeps the forward's buckets, and its output equals the
// forward's up to the size of the perturbation.
TEST(LshAttention, RecomputeWithSavedPlanIgnoresLastBitChanges) {
  LshCase c(4, 2, {4}, true);
  // Rotation columns R0 = (3, 4, 5, 6) and R1 = R0 + (-1.75, 0, 0, 1) in every
  // head and round, and q_3 = (1, 1.25, 1.5, 1.75): both projections are exactly
  // 26 (small dyadic numbers, no rounding), a tie that hashing breaks towards
  // column 0. Raising the last component of q_3 makes column 1 win.
  auto hq = Kokkos::create_mirror_view_and_copy(HostSpace(), c.qk);
  auto hr = Kokkos::create_mirror_view_and_copy(HostSpace(), c.rot);
  for (Index h = 0; h < c.heads; ++h)
    for (Index r = 0; r < 2; ++r)
      for (Index x = 0; x < c.d; ++x) {
        hr(h, x, r, 0) = 3.0 + x;
        hr(h, x, r, 1) = 3.0 + x + (x == 0 ? -1.75 : x == c.d - 1 ? 1.0 : 0.0);
      }
  for (Index b = 0; b < c.batch; ++b)
    for (Index h = 0; h < c.heads; ++h)
      for (Index x = 0; x < c.d; ++x) hq(b, 3, h, x) = 1.0 + 0.25 * x;
  Kokkos::deep_copy(c.qk, hq);
  Kokkos::deep_copy(c.rot, hr);
  c.loss();
  const auto forward_out = to_host(c.out);
  auto saved_buckets = Kokkos::create_mirror_view_and_copy(HostSpace(), c.plan.buckets);
  attention::LshPlan saved = c.plan;  // a handle; rebuilt below into a fresh plan
  c.plan = attention::LshPlan();
  // Perturb position 3 in its last bits so that column 1 wins the argmax.
  for (Index b = 0; b < c.batch; ++b)
    for (Index h = 0; h < c.heads; ++h) hq(b, 3, h, c.d - 1) *= 1.0 + 1e-14;
  Kokkos::deep_copy(c.qk, hq);
  c.loss();  // rehashes into c.plan
  auto rehashed = Kokkos::create_mirror_view_and_copy(HostSpace(), c.plan.buckets);
  Index flipped = 0;
  for (Index bh = 0; bh < c.batch * c.heads; ++bh)
    for (Index s = 0; s < 2 * c.length; ++s) flipped += rehashed(bh, s) != saved_buckets(bh, s);
  EXPECT_GT(flipped, 0) << "the perturbation should move position 3 to another bucket";
  const double rehash_change = relative_error(to_host(c.out), forward_out);
  EXPECT_GT(rehash_change, 1e-6);
  // The recompute with the saved plan.
  attention::lsh_attention_forward<double>(c.qk, c.v, saved, c.config, c.call, c.out, c.lse,
                                           c.workspace);
  EXPECT_LT(relative_error(to_host(c.out), forward_out), 1e-12);
}

}  // namespace
}  // namespace reformer
