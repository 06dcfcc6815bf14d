// Local, exact and full attention on bf16 tensors against their float32 kernels
// on the same values (issue 34). Inputs are float values rounded to bf16, so
// both sides read identical numbers; scores, softmaxes, logsumexps and every
// product are float32 on both sides, in the same order. Each backward pass is
// given the same saved values on both sides (the bf16 output widened, the
// float32 lse of the bf16 forward; for full attention the bf16 probabilities
// widened), so the results differ only by the bf16 roundings of results, with
// u = 2^-8 (core/bfloat16.hpp):
//   rounded once, element-wise |bf16 - float| <= u |float| (+ float32
//   round-off): every output, full attention's saved probabilities, exact
//   attention's dq, dk, dv (both backward schedules; the one-pass schedule sums
//   dq in float32), full attention's dq, dk, dv, and local attention's dq (a
//   query chunk is in one launch of the chunked backward);
//   local dk, dv: a key is in the windows of W = n_before + 1 query chunks,
//   each in its own launch, which adds into the bf16 row and rounds it: W
//   roundings of partial sums (dk one more, for the key scale 1/sqrt(d_head)).
//   Partial sums may cancel, so that bound is norm-wise: W u (dv), (W + 1) u (dk);
//   lse: float32 from the same scores, within float32 round-off (1e-6).
#include "reformer/attention/exact.hpp"
#include "reformer/attention/full.hpp"
#include "reformer/attention/local.hpp"
#include "reformer/core/tile_multiply.hpp"
#include "support/attention_reference.hpp"
#include "support/bf16_checks.hpp"

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

namespace reformer {
namespace {

using namespace reformer::testing;
using attention::AttentionCall;
using attention::ExactBackwardSchedule;
using attention::FullAttentionConfig;

// One problem: rounded float inputs and their bf16 copies.
struct Problem {
  Index batch, lq, lk, heads, d;
  View4<float> q, k, v, dout;
  View4<bf16> q16, k16, v16, dout16;
  AttentionCall call;
  Kokkos::View<int**, Layout, MemSpace> valid;
  bool shared = false;  // k = q (the self mask applies)

  Problem(Index batch_, Index lq_, Index lk_, Index heads_, Index d_, bool causal)
      : batch(batch_), lq(lq_), lk(lk_), heads(heads_), d(d_) {
    call.masks.causal = causal;
    q = rounded("q", lq, 1, -2, 2);
    k = rounded("k", lk, 2, -2, 2);
    v = rounded("v", lk, 3, -1, 1);
    dout = rounded("dout", lq, 4, -1, 1);
    q16 = copy16(q);
    k16 = copy16(k);
    v16 = copy16(v);
    dout16 = copy16(dout);
  }
  View4<float> rounded(const char* name, Index length, std::uint64_t seed, double lo, double hi) {
    View4<float> x(std::string(name), batch, length, heads, d);
    fill_uniform(x, seed, lo, hi);
    round_to_bf16(x);
    return x;
  }
  View4<bf16> copy16(const View4<float>& x) {
    View4<bf16> out("bf16", x.extent(0), x.extent(1), x.extent(2), x.extent(3));
    copy_to_bf16(x, out);
    return out;
  }
  void pad(const std::vector<std::pair<int, int>>& padded) {
    valid = Kokkos::View<int**, Layout, MemSpace>("valid", batch, lk);
    mark_padding(valid, padded);
    call.masks.key_valid = valid;
  }
  void share_qk() {
    shared = true;
    k = q;
    k16 = q16;
  }
  void dropout() { call.dropout = {0.15, {7, 8}}; }
};

void expect_lse(const View3<float>& lse16, const View3<float>& lse, const std::string& what) {
  EXPECT_LT(relative_error(to_host(lse16), to_host(lse)), 1e-6) << what << ": lse";
}

void compare_local(Problem& p, Index chunk, Index n_before, const std::string& what) {
  const Index b = p.batch, l = p.lq, h = p.heads, d = p.d;
  attention::LocalAttentionConfig config;
  config.chunk = chunk;
  config.n_before = n_before;
  Workspace workspace;
  View4<float> out("out", b, l, h, d), dq("dq", b, l, h, d), dk("dk", b, l, h, d),
      dv("dv", b, l, h, d);
  View4<bf16> out16("out16", b, l, h, d), dq16("dq16", b, l, h, d), dk16("dk16", b, l, h, d),
      dv16("dv16", b, l, h, d);
  View3<float> lse("lse", b, l, h), lse16("lse16", b, l, h);
  attention::local_attention_forward<float>(p.q, p.k, p.v, config, p.call, out, lse);
  attention::local_attention_forward<bf16>(p.q16, p.k16, p.v16, config, p.call, out16, lse16);
  expect_rounded(to_host(out16), to_host(out), what + ": out");
  expect_lse(lse16, lse, what);
  // The same saved values on both sides.
  attention::local_attention_backward<float>(p.q, p.k, p.v, widened<View4<float>>(out16), lse16,
                                             p.dout, config, p.call, dq, dk, dv, workspace);
  attention::local_attention_backward<bf16>(p.q16, p.k16, p.v16, out16, lse16, p.dout16, config,
                                            p.call, dq16, dk16, dv16, workspace);
  const double windows = double(std::min(n_before, l / chunk - 1) + 1);
  expect_rounded(to_host(dq16), to_host(dq), what + ": dq");
  EXPECT_LT(relative_error(to_host(dv16), to_host(dv)), windows * kBf16Unit) << what << ": dv";
  EXPECT_LT(relative_error(to_host(dk16), to_host(dk)), (windows + 1) * kBf16Unit)
      << what << ": dk";
}

TEST(Bf16Attention, LocalMatchesFloatOnTheSameValues) {
  for (bool causal : {false, true})
    for (int options = 0; options < 2; ++options) {
      Problem p(2, 256, 256, 2, 64, causal);
      std::string what = std::string("local") + (causal ? " causal" : "");
      if (options == 1) {
        p.pad({{0, 5}, {1, 200}, {1, 255}});
        p.dropout();
        what += " padding dropout";
      }
      compare_local(p, 32, 1, what);
    }
  // Padded head columns (d_head 24) and a longer look-back.
  Problem p(1, 192, 192, 3, 24, true);
  p.pad({{0, 100}});
  compare_local(p, 32, 2, "local d_head 24 n_before 2 padding");
}

void compare_exact(Problem& p, const std::string& what) {
  const Index b = p.batch, lq = p.lq, lk = p.lk, h = p.heads, d = p.d;
  FullAttentionConfig config;
  config.self_mask = p.shared;
  Workspace workspace;
  View4<float> out("out", b, lq, h, d), dq("dq", b, lq, h, d), dk("dk", b, lk, h, d),
      dv("dv", b, lk, h, d);
  View4<bf16> out16("out16", b, lq, h, d), dq16("dq16", b, lq, h, d), dk16("dk16", b, lk, h, d),
      dv16("dv16", b, lk, h, d);
  View3<float> lse("lse", b, lq, h), lse16("lse16", b, lq, h);
  attention::exact_attention_forward<float>(p.q, p.k, p.v, config, p.call, out, lse, workspace);
  attention::exact_attention_forward<bf16>(p.q16, p.k16, p.v16, config, p.call, out16, lse16,
                                           workspace);
  expect_rounded(to_host(out16), to_host(out), what + ": out");
  expect_lse(lse16, lse, what);
  const auto out_same = widened<View4<float>>(out16);
  for (auto schedule : {ExactBackwardSchedule::OnePass, ExactBackwardSchedule::TwoPass}) {
    const std::string name =
        what + (schedule == ExactBackwardSchedule::OnePass ? " one pass" : " two passes");
    attention::exact_attention_backward<float>(p.q, p.k, p.v, out_same, lse16, p.dout, config,
                                               p.call, dq, dk, dv, workspace, schedule);
    attention::exact_attention_backward<bf16>(p.q16, p.k16, p.v16, out16, lse16, p.dout16, config,
                                              p.call, dq16, dk16, dv16, workspace, schedule);
    expect_rounded(to_host(dq16), to_host(dq), name + ": dq");
    expect_rounded(to_host(dk16), to_host(dk), name + ": dk");
    expect_rounded(to_host(dv16), to_host(dv), name + ": dv");
  }
}

constexpr Index kTile = TileTraits<float>::query_tile;

TEST(Bf16Attention, ExactMatchesFloatOnTheSameValues) {
  const Index length = kTile + 37;  // two query tiles, the second partial
  for (bool causal : {false, true})
    for (Index d : {Index(64), Index(24)}) {  // streamed tiles in place (float) / padded columns
      Problem p(2, length, length, 2, d, causal);
      compare_exact(p,
                    std::string("exact d_head ") + std::to_string(d) + (causal ? " causal" : ""));
    }
  Problem masked(2, length, length, 2, 64, true);
  masked.pad({{0, 0}, {0, 3}, {1, int(length - 1)}});
  masked.dropout();
  compare_exact(masked, "exact causal padding dropout");
  Problem shared(1, length, length, 3, 32, true);
  shared.share_qk();
  compare_exact(shared, "exact shared q/k");
  Problem cross(2, 70, kTile + 50, 2, 64, false);  // cross-attention: Lq != Lk
  cross.pad({{1, 3}});
  cross.dropout();
  compare_exact(cross, "exact cross padding dropout");
}

void compare_full(Problem& p, const std::string& what) {
  const Index b = p.batch, lq = p.lq, lk = p.lk, h = p.heads, d = p.d;
  FullAttentionConfig config;
  config.self_mask = p.shared;
  Workspace workspace;
  View4<float> out("out", b, lq, h, d), dq("dq", b, lq, h, d), dk("dk", b, lk, h, d),
      dv("dv", b, lk, h, d);
  View4<bf16> out16("out16", b, lq, h, d), dq16("dq16", b, lq, h, d), dk16("dk16", b, lk, h, d),
      dv16("dv16", b, lk, h, d);
  attention::FullAttentionSaved<float> saved;
  attention::FullAttentionSaved<bf16> saved16;
  attention::full_attention_forward<float>(p.q, p.k, p.v, config, p.call, out, saved, workspace);
  attention::full_attention_forward<bf16>(p.q16, p.k16, p.v16, config, p.call, out16, saved16,
                                          workspace);
  expect_rounded(to_host(out16), to_host(out), what + ": out");
  expect_rounded(to_host(saved16.probs), to_host(saved.probs), what + ": probs");
  attention::FullAttentionSaved<float> same{widened<View3<float>>(saved16.probs)};
  attention::full_attention_backward<float>(p.q, p.k, p.v, same, p.dout, config, p.call, dq, dk, dv,
                                            workspace);
  attention::full_attention_backward<bf16>(p.q16, p.k16, p.v16, saved16, p.dout16, config, p.call,
                                           dq16, dk16, dv16, workspace);
  expect_rounded(to_host(dq16), to_host(dq), what + ": dq");
  expect_rounded(to_host(dk16), to_host(dk), what + ": dk");
  expect_rounded(to_host(dv16), to_host(dv), what + ": dv");
}

TEST(Bf16Attention, FullMatchesFloatOnTheSameValues) {
  // 20 positions: the fused host kernel for short sequences; 100: batched products.
  for (Index length : {Index(20), Index(100)}) {
    const std::string at = "full L " + std::to_string(length);
    for (bool causal : {false, true}) {
      Problem p(2, length, length, 2, 32, causal);
      compare_full(p, at + (causal ? " causal" : ""));
    }
    Problem masked(2, length, length, 2, 32, true);
    masked.pad({{0, 0}, {0, 3}, {1, int(length - 1)}});
    masked.dropout();
    compare_full(masked, at + " causal padding dropout");
    Problem shared(1, length, length, 2, 16, false);
    shared.share_qk();
    shared.dropout();
    compare_full(shared, at + " shared q/k dropout");
    Problem cross(2, length - 7, length + 5 - length / 4, 2, 32, false);
    cross.pad({{1, 2}});
    compare_full(cross, at + " cross padding");
  }
}

// The score buffers' bytes: bf16 keeps bf16 probabilities and one float32
// buffer, with or without dropout.
TEST(Bf16Attention, FullAttentionScoreBytes) {
  EXPECT_EQ(attention::full_attention_score_bytes(2, 4, 1024, 512, 2, false),
            std::int64_t(2) * 4 * 1024 * 512 * 6);
  EXPECT_EQ(attention::full_attention_score_bytes(2, 4, 1024, 512, 2, true),
            std::int64_t(2) * 4 * 1024 * 512 * 6);
}

}  // namespace
}  // namespace reformer
