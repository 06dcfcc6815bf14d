// LSH attention on bf16 tensors against the float32 kernels on the same values
// (issue 34). Scores, softmaxes and products are float32 on both sides, so the
// buckets are identical and the results differ only by bf16 roundings:
//   out: the per-round outputs are stored in bf16 (one rounding) and combined
//        in float32 into a bf16 output (one more): norm-wise at most 2u;
//   dv, dk: a key is in at most W = (n_before + 1) * n_hashes windows, and each
//        launch that adds into its bf16 row rounds once: at most W u;
//   dqk: a query gets one addition per round plus the key gradient through
//        the normalisation (itself W roundings, then one more): (n_hashes + W + 1) u;
// with u = 2^-8 (core/bfloat16.hpp). Norm-wise errors of independent roundings
// grow more slowly than these sums; the bounds hold with room.
#include "reformer/attention/lsh.hpp"
#include "support/bf16_checks.hpp"
#include "support/kernel_settings.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace reformer {
namespace {

using namespace reformer::testing;
using attention::LshAttentionConfig;

struct Bf16LshCase {
  Index batch = 2, length = 256, heads = 2, d = 64;
  LshAttentionConfig config;
  attention::AttentionCall call;
  Kokkos::View<int**, Layout, MemSpace> valid;
};

void compare_lsh(const Bf16LshCase& c, const std::string& what) {
  const Index b = c.batch, l = c.length, h = c.heads, d = c.d;
  View4<float> qk("qk", b, l, h, d), v("v", b, l, h, d), dout("dout", b, l, h, d);
  fill_uniform(qk, 1, -2, 2);
  fill_uniform(v, 2);
  fill_uniform(dout, 3);
  auto flat = [](const View4<float>& x) { return as_vector(x); };
  round_to_bf16(flat(qk));
  round_to_bf16(flat(v));
  round_to_bf16(flat(dout));
  View4<bf16> qk16("qk16", b, l, h, d), v16("v16", b, l, h, d), dout16("dout16", b, l, h, d);
  copy_to_bf16(qk, qk16);
  copy_to_bf16(v, v16);
  copy_to_bf16(dout, dout16);
  View4<float> rot("rot", h, d, c.config.n_hashes, attention::lsh_rotation_width(c.config, l));
  attention::lsh_random_rotations<float>({5, 6}, rot);
  Workspace workspace;
  attention::LshPlan plan, plan16;
  attention::lsh_build_plan<float>(qk, rot, c.config, c.call.masks, plan, workspace);
  attention::lsh_build_plan<bf16>(qk16, rot, c.config, c.call.masks, plan16, workspace);
  // Hashing reads the same values in float32: the same buckets and sort.
  EXPECT_EQ(to_host(plan16.buckets), to_host(plan.buckets)) << what;
  EXPECT_EQ(to_host(plan16.perm), to_host(plan.perm)) << what;

  View4<float> out("out", b, l, h, d), dqk("dqk", b, l, h, d), dv("dv", b, l, h, d);
  View3<float> lse("lse", b, l, h), lse16("lse16", b, l, h);
  View4<bf16> out16("out16", b, l, h, d), dqk16("dqk16", b, l, h, d), dv16("dv16", b, l, h, d);
  attention::lsh_attention_forward<float>(qk, v, plan, c.config, c.call, out, lse, workspace);
  attention::lsh_attention_forward<bf16>(qk16, v16, plan16, c.config, c.call, out16, lse16,
                                         workspace);
  const double rounds = double(c.config.n_hashes), windows = (c.config.n_before + 1) * rounds;
  EXPECT_LT(relative_error(to_host(out16), to_host(out)), 2 * kBf16Unit) << what;
  // The logsumexps are float32 from the same scores.
  EXPECT_LT(relative_error(to_host(lse16), to_host(lse)), 1e-6) << what;
  attention::lsh_attention_backward<float>(qk, v, plan, out, lse, dout, c.config, c.call, dqk, dv,
                                           workspace);
  attention::lsh_attention_backward<bf16>(qk16, v16, plan16, out16, lse16, dout16, c.config, c.call,
                                          dqk16, dv16, workspace);
  EXPECT_LT(relative_error(to_host(dv16), to_host(dv)), windows * kBf16Unit) << what;
  EXPECT_LT(relative_error(to_host(dqk16), to_host(dqk)), (rounds + windows + 1) * kBf16Unit)
      << what;
}

TEST(Bf16Attention, LshMatchesFloatOnTheSameValues) {
  for (Index n_hashes : {1, 2, 4})
    for (bool causal : {false, true}) {
      Bf16LshCase c;
      c.config.chunk = 32;
      c.config.n_hashes = n_hashes;
      c.call.masks.causal = causal;
      compare_lsh(c, "n_hashes " + std::to_string(n_hashes) + (causal ? " causal" : ""));
    }
}

TEST(Bf16Attention, LshWithPaddingDropoutAndFactoredBuckets) {
  Bf16LshCase c;
  c.config.chunk = 32;
  c.config.n_hashes = 2;
  c.config.n_buckets = {4, 4};
  c.call.masks.causal = true;
  c.call.dropout = {0.1, {9, 9}};
  c.valid = Kokkos::View<int**, Layout, MemSpace>("valid", c.batch, c.length);
  auto host = Kokkos::create_mirror_view(c.valid);
  for (Index b = 0; b < c.batch; ++b)
    for (Index i = 0; i < c.length; ++i) host(b, i) = b == 1 && i >= 200 ? 0 : 1;
  Kokkos::deep_copy(c.valid, host);
  c.call.masks.key_valid = c.valid;
  compare_lsh(c, "padding, dropout, buckets 4 x 4");
}

// The streamed kernels (the GPUs' shape) hold the same bounds: their tiles
// are float32 too, and each gradient row is added into as often.
TEST(Bf16Attention, LshStreamedKernelsMatchFloatOnTheSameValues) {
  const ScopedChunkedShape streamed(ChunkedKernelShape::streamed);
  for (bool causal : {false, true}) {
    Bf16LshCase c;
    c.config.chunk = 32;
    c.config.n_hashes = 2;
    c.call.masks.causal = causal;
    compare_lsh(c, std::string("streamed") + (causal ? ", causal" : ""));
  }
}

}  // namespace
}  // namespace reformer
