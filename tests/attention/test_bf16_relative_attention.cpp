// Transformer-XL's relative attention on bf16 tensors against the float32
// kernel on the same values (issue 34). q, k, v, r and dout are float values
// rounded to bf16, so both sides read identical numbers; u and v_bias are
// parameters (float32 on both sides, the same views). Scores, softmax
// statistics, the logsumexps, every product and every partial sum (dk, dv in
// the key teams' scratch, dq and its u / v parts in the query teams', dr per
// batch entry and then over batch entries and clamped distances) are float32
// on both sides, in the same order. The backward passes are given the same
// saved values (the bf16 output widened, the float32 lse of the bf16 forward).
// With u = 2^-8 (core/bfloat16.hpp) the results then differ by:
//   out, dq, dk, dv, dr: one rounding of the float32 result, element-wise
//     |bf16 - float| <= u |float| (plus float32 round-off);
//   du, dv_bias: no rounding (float32 parameter gradients): float32 round-off,
//     norm-wise 1e-6;
//   lse: float32 from the same scores, within float32 round-off (1e-6).
// (Measured: up to 0.996 u element-wise and about 0.42 u norm-wise for each
// rounded result; lse, du and dv_bias identical to float32.)
// Cases: without memory (M = 0) and with it (the memory's keys and values get
// gradients too), clamp_len (one row of r for every distance above it),
// same_length (every query sees mem_len keys), dropout, padded head columns
// (d_head 24), and rows of r past the distances in use (their dr is zero).
#include "reformer/attention/relative.hpp"
#include "reformer/core/tile_multiply.hpp"
#include "support/bf16_checks.hpp"

#include <gtest/gtest.h>

#include <string>

namespace reformer {
namespace {

using namespace reformer::testing;
using attention::AttentionDropout;
using attention::RelativeAttentionConfig;

// A float view filled from the counter RNG and rounded to bf16 values.
template <class V>
V rounded(V x, std::uint64_t seed, double lo, double hi) {
  fill_uniform(x, seed, lo, hi);
  round_to_bf16(x);
  return x;
}

// The bf16 copy of a rounded float view (the same values).
template <class V16, class V>
V16 narrow(const V& x) {
  V16 out("bf16", x.layout());
  copy_to_bf16(x, out);
  return out;
}
struct RelativeProblem {
  Index batch, length, memory, heads, d;
  RelativeAttentionConfig config;
  AttentionDropout dropout;
};

void compare_relative(const RelativeProblem& p, const std::string& what) {
  const Index b = p.batch, l = p.length, keys = p.memory + p.length, h = p.heads, d = p.d;
  // Two rows of r beyond the ones the kernel reads.
  const Index rows = attention::relative_attention_positions(p.memory, l, p.config) + 2;
  const auto q = rounded(View4<float>("q", b, l, h, d), 1, -1.5, 1.5);
  const auto k = rounded(View4<float>("k", b, keys, h, d), 2, -1.5, 1.5);
  const auto v = rounded(View4<float>("v", b, keys, h, d), 3, -1, 1);
  const auto r = rounded(View3<float>("r", rows, h, d), 4, -1.5, 1.5);
  const auto dout = rounded(View4<float>("dout", b, l, h, d), 7, -1, 1);
  View2<float> u("u", h, d), bv("bv", h, d);
  fill_uniform(u, 5, -0.5, 0.5);
  fill_uniform(bv, 6, -0.5, 0.5);
  const auto q16 = narrow<View4<bf16>>(q), k16 = narrow<View4<bf16>>(k),
             v16 = narrow<View4<bf16>>(v), dout16 = narrow<View4<bf16>>(dout);
  const auto r16 = narrow<View3<bf16>>(r);

  Workspace workspace;
  View4<float> out("out", b, l, h, d);
  View4<bf16> out16("out16", b, l, h, d);
  View3<float> lse("lse", b, l, h), lse16("lse16", b, l, h);
  attention::relative_attention_forward<float>(q, k, v, r, u, bv, p.config, p.dropout, out, lse,
                                               workspace);
  attention::relative_attention_forward<bf16>(q16, k16, v16, r16, u, bv, p.config, p.dropout, out16,
                                              lse16, workspace);
  expect_rounded(to_host(out16), to_host(out), what + ": out");
  EXPECT_LT(relative_error(to_host(lse16), to_host(lse)), 1e-6) << what << ": lse";

  View4<float> dq("dq", b, l, h, d), dk("dk", b, keys, h, d), dv("dv", b, keys, h, d);
  View4<bf16> dq16("dq16", b, l, h, d), dk16("dk16", b, keys, h, d), dv16("dv16", b, keys, h, d);
  View3<float> dr("dr", rows, h, d);
  View3<bf16> dr16("dr16", rows, h, d);
  View2<float> du("du", h, d), dbv("dbv", h, d), du16("du16", h, d), dbv16("dbv16", h, d);
  // The same saved values on both sides.
  attention::relative_attention_backward<float>(q, k, v, r, u, bv, widened<View4<float>>(out16),
                                                lse16, dout, p.config, p.dropout, dq, dk, dv, dr,
                                                du, dbv, workspace);
  attention::relative_attention_backward<bf16>(q16, k16, v16, r16, u, bv, out16, lse16, dout16,
                                               p.config, p.dropout, dq16, dk16, dv16, dr16, du16,
                                               dbv16, workspace);
  expect_rounded(to_host(dq16), to_host(dq), what + ": dq");
  expect_rounded(to_host(dk16), to_host(dk), what + ": dk");
  expect_rounded(to_host(dv16), to_host(dv), what + ": dv");
  expect_rounded(to_host(dr16), to_host(dr), what + ": dr");
  EXPECT_LT(relative_error(to_host(du16), to_host(du)), 1e-6) << what << ": du";
  EXPECT_LT(relative_error(to_host(dbv16), to_host(dbv)), 1e-6) << what << ": dv_bias";
  // The rows of r past the distances in use get zero.
  const auto dr_host = to_host(dr16);
  for (Index n = (rows - 2) * h * d; n < rows * h * d; ++n)
    ASSERT_EQ(dr_host[std::size_t(n)], 0.0) << what << ": dr element " << n;
}

constexpr Index kTile = TileTraits<float>::query_tile;

TEST(Bf16RelativeAttention, MatchesFloatWithoutMemory) {
  // Two query tiles, the second partial.
  compare_relative({2, kTile + 37, 0, 2, 64, {}, {}}, "M = 0");
  compare_relative({1, 70, 0, 3, 24, {}, {0.15, {7, 8}}}, "M = 0 d_head 24 dropout");
}

TEST(Bf16RelativeAttention, MatchesFloatWithMemory) {
  compare_relative({2, kTile + 37, 45, 2, 64, {}, {}}, "M = 45");
  RelativeAttentionConfig clamp;
  clamp.clamp_len = 20;
  compare_relative({2, kTile + 5, 30, 2, 32, clamp, {0.1, {11, 12}}},
                   "M = 30 clamp_len 20 dropout");
  compare_relative({1, 70, 100, 3, 24, clamp, {}}, "M = 100 clamp_len 20 d_head 24");
}

TEST(Bf16RelativeAttention, MatchesFloatWithSameLength) {
  RelativeAttentionConfig same;
  same.same_length = true;
  same.mem_len = 40;
  compare_relative({2, kTile + 13, 40, 2, 64, same, {}}, "same_length mem_len 40");
  same.clamp_len = 17;
  compare_relative({2, 90, 60, 2, 40, same, {0.2, {3, 4}}},
                   "same_length mem_len 40 clamp_len 17 dropout");
}

}  // namespace
}  // namespace reformer
