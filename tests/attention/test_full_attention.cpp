#include "reformer/attention/full.hpp"
#include "reformer/core/error.hpp"
#include "reformer/core/workspace.hpp"
#include "support/attention_reference.hpp"
#include "support/gradcheck.hpp"

#include <gtest/gtest.h>

namespace reformer {
namespace {

using namespace reformer::testing;
using attention::FullAttentionConfig;

// Lengths of both host paths: at most 32 positions take the fused one-launch
// kernel, longer sequences the batched products (one path each on GPUs); 100
// spans more than one 96-row host tile, where causal products skip the tiles
// above the diagonal (as a GPU's 24-row tiles do at every length here).
constexpr Index kLengths[] = {9, 40, 100};

struct FullCase {
  Index batch = 2, lq = 9, lk = 9, heads = 3, d = 4;
  FullAttentionConfig config;
  attention::AttentionCall call;
  Workspace workspace;
  View4<double> q, k, v, out, r, dq, dk, dv;
  Kokkos::View<int**, Layout, MemSpace> valid;
  attention::FullAttentionSaved<double> saved;

  explicit FullCase(bool causal, Index length = 9, Index key_length = 0)
      : lq(length), lk(key_length > 0 ? key_length : length) {
    call.masks.causal = causal;
    q = View4<double>("q", batch, lq, heads, d);
    k = View4<double>("k", batch, lk, heads, d);
    v = View4<double>("v", batch, lk, heads, d);
    out = View4<double>("out", batch, lq, heads, d);
    r = View4<double>("r", batch, lq, heads, d);
    dq = View4<double>("dq", batch, lq, heads, d);
    dk = View4<double>("dk", batch, lk, heads, d);
    dv = View4<double>("dv", batch, lk, heads, d);
    valid = Kokkos::View<int**, Layout, MemSpace>("valid", batch, lk);
    fill_uniform(q, 1);
    fill_uniform(k, 2);
    fill_uniform(v, 3);
    fill_uniform(r, 4);
  }
  void pad(std::vector<std::pair<int, int>> padded) {
    mark_padding(valid, padded);
    call.masks.key_valid = valid;
  }
  double loss() {
    attention::full_attention_forward<double>(q, k, v, config, call, out, saved, workspace);
    return dot(out, r);
  }
  void backward() {
    loss();
    attention::full_attention_backward<double>(q, k, v, saved, r, config, call, dq, dk, dv,
                                               workspace);
  }
  std::vector<double> reference() const {
    std::vector<int> hv(batch * lk, 1);
    if (call.masks.key_valid.extent(0)) {
      auto h = Kokkos::create_mirror_view_and_copy(HostSpace(), valid);
      hv.assign(h.data(), h.data() + h.size());
    }
    const auto cfg = config;
    const bool causal = call.masks.causal;
    const Index len_k = lk;
    auto rule = [cfg, causal, hv, len_k](long b, long, long i, long j) {
      if (j >= len_k) return RefScore{RefScore::Absent};
      if (cfg.self_mask && i == j) return RefScore{RefScore::Constant, -1e5};
      if ((causal && j > i) || hv[b * len_k + j] == 0) return RefScore{RefScore::Constant, -1e9};
      return RefScore{};
    };
    // The reference iterates j over max(lq, lk) positions; pad k and v to that length.
    const long n = std::max(lq, lk);
    Dims dq_dims{batch, lq, heads, d}, dk_dims{batch, lk, heads, d}, big{batch, n, heads, d};
    auto widen = [&](const std::vector<double>& x, const Dims& from) {
      std::vector<double> y(batch * n * heads * d, 0.0);
      for (long b = 0; b < batch; ++b)
        for (long i = 0; i < from.length; ++i)
          for (long h = 0; h < heads; ++h)
            for (long c = 0; c < d; ++c) y[big.at(b, i, h, c)] = x[from.at(b, i, h, c)];
      return y;
    };
    const auto full =
        reference_attention(big, widen(to_host(q), dq_dims), widen(to_host(k), dk_dims),
                            widen(to_host(v), dk_dims), 1 / std::sqrt(double(d)), rule);
    std::vector<double> out_ref(batch * lq * heads * d);
    for (long b = 0; b < batch; ++b)
      for (long i = 0; i < lq; ++i)
        for (long h = 0; h < heads; ++h)
          for (long c = 0; c < d; ++c) out_ref[dq_dims.at(b, i, h, c)] = full[big.at(b, i, h, c)];
    return out_ref;
  }
};

TEST(FullAttention, ForwardMatchesDenseReference) {
  for (const Index length : kLengths)
    for (bool causal : {false, true}) {
      FullCase c(causal, length);
      c.loss();
      EXPECT_LT(relative_error(to_host(c.out), c.reference()), 1e-13) << causal << length;
    }
}

TEST(FullAttention, GradientsWithCausalAndPaddingMasks) {
  for (const Index length : kLengths)
    for (bool causal : {false, true})
      for (bool padded : {false, true}) {
        FullCase c(causal, length);
        if (padded) c.pad({{0, 0}, {1, 4}});
        c.backward();
        EXPECT_LT(relative_error(to_host(c.out), c.reference()), 1e-13);
        auto loss = [&] { return c.loss(); };
        EXPECT_LT(gradient_error(c.q, c.dq, loss), 1e-6) << causal << padded << length;
        EXPECT_LT(gradient_error(c.k, c.dk, loss), 1e-6) << causal << padded << length;
        EXPECT_LT(gradient_error(c.v, c.dv, loss), 1e-6) << causal << padded << length;
      }
}

TEST(FullAttention, CrossAttentionWithOtherKeyLength) {
  // Short queries and keys, and long queries over short keys (the batched path).
  for (const Index length : kLengths) {
    FullCase c(false, length, 6);
    c.pad({{1, 5}});
    c.backward();
    EXPECT_LT(relative_error(to_host(c.out), c.reference()), 1e-13) << length;
    auto loss = [&] { return c.loss(); };
    EXPECT_LT(gradient_error(c.q, c.dq, loss), 1e-6) << length;
    EXPECT_LT(gradient_error(c.k, c.dk, loss), 1e-6) << length;
    EXPECT_LT(gradient_error(c.v, c.dv, loss), 1e-6) << length;
  }
}

TEST(FullAttention, SelfMaskAndDropoutGradients) {
  for (const Index length : kLengths) {
    FullCase c(true, length);
    c.config.self_mask = true;
    c.call.dropout = {0.25, {4, 2}};
    c.backward();
    auto loss = [&] { return c.loss(); };
    EXPECT_LT(gradient_error(c.q, c.dq, loss), 1e-6) << length;
    EXPECT_LT(gradient_error(c.k, c.dk, loss), 1e-6) << length;
    EXPECT_LT(gradient_error(c.v, c.dv, loss), 1e-6) << length;
    // Without dropout the self-masked output matches the reference, and position
    // 0 (nothing else allowed) attends to itself.
    c.call.dropout.rate = 0;
    c.loss();
    EXPECT_LT(relative_error(to_host(c.out), c.reference()), 1e-13) << length;
    const auto out = to_host(c.out), v = to_host(c.v);
    Dims dm{c.batch, c.lq, c.heads, c.d};
    for (long x = 0; x < c.d; ++x)
      EXPECT_NEAR(out[dm.at(1, 0, 2, x)], v[dm.at(1, 0, 2, x)], 1e-12) << length;
  }
}

TEST(FullAttention, CausalOutputsIgnoreLaterTokens) {
  FullCase c(true);
  c.loss();
  const auto before = to_host(c.out);
  const Index t = 5;
  for (auto* view : {&c.q, &c.k, &c.v}) {
    auto host = Kokkos::create_mirror_view_and_copy(HostSpace(), *view);
    for (Index b = 0; b < c.batch; ++b)
      for (Index h = 0; h < c.heads; ++h)
        for (Index x = 0; x < c.d; ++x) host(b, t, h, x) += 0.7;
    Kokkos::deep_copy(*view, host);
  }
  c.loss();
  const auto after = to_host(c.out);
  Dims dm{c.batch, c.lq, c.heads, c.d};
  for (Index b = 0; b < c.batch; ++b)
    for (Index i = 0; i < t; ++i)
      for (Index h = 0; h < c.heads; ++h)
        for (Index x = 0; x < c.d; ++x)
          EXPECT_EQ(before[dm.at(b, i, h, x)], after[dm.at(b, i, h, x)]) << i;
  EXPECT_NE(before[dm.at(0, t, 0, 0)], after[dm.at(0, t, 0, 0)]);
}

TEST(FullAttention, ReportsTheMemoryItWouldNeed) {
  // 1M x 1M float scores for 4 heads need 32 TiB: never available.
  try {
    attention::check_full_attention_fits(1, 4, 1 << 20, 1 << 20, 4, false);
    FAIL() << "no error";
  } catch (const MemoryError& e) {
    EXPECT_NE(std::string(e.what()).find("needs 32.00 TiB"), std::string::npos) << e.what();
  }
  EXPECT_EQ(attention::full_attention_score_bytes(2, 4, 1024, 512, 4, true),
            2LL * 4 * 1024 * 512 * 4 * 3);
  EXPECT_NO_THROW(attention::check_full_attention_fits(1, 1, 16, 16, 4, false));
}

TEST(FullAttention, RejectsMismatchedHeads) {
  FullCase c(false);
  View4<double> k("k", c.batch, c.lk, c.heads + 1, c.d);
  EXPECT_THROW(attention::full_attention_forward<double>(c.q, k, k, c.config, c.call, c.out,
                                                         c.saved, c.workspace),
               ShapeError);
  FullCase cross(true, 9, 6);
  EXPECT_THROW(cross.loss(), ShapeError);  // causal needs equal lengths
}

}  // namespace
}  // namespace reformer
