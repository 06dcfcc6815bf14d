// The Reformer LM with bf16 activations (train.precision = "bf16", issue 34)
// against the float32 model on the same float32 parameters. The op-level tests
// bound each kernel to one or a few bf16 roundings (tests/ops, tests/attention);
// here those roundings compound through the layers, the head and the backward:
// every stream value carries a relative error of a few u = 2^-8 per layer, so
// after L layers the loss and the gradients are off by O(L u) relative. The
// bounds below are 4 L u (loss) and 8 L u (gradients, norm-wise; cosine
// similarity at least 1 - (8 L u)^2 / 2): far below what a kernel that
// accumulated in bf16 or dropped a term would give (see the checks that run
// the models on different inputs).
#include "reformer/core/error.hpp"
#include "reformer/models/reformer_lm.hpp"
#include "support/bf16_checks.hpp"
#include "support/checks.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <string>

namespace reformer {
namespace {

using namespace reformer::testing;
using attention::AttentionKind;
using models::ModelCall;
using models::ReformerConfig;
using models::ReformerLM;
using models::ReformerState;
using IdView = Kokkos::View<int**, Layout, MemSpace>;

// chunk = length: every round is one chunk of all positions (shared-QK
// attention), so the outputs do not depend on the buckets, which rounding can
// move (see BucketFlipsStayLocal); GELU has no kink for rounding to cross.
ReformerConfig lsh_config(bool reversible, Index chunk = 128) {
  ReformerConfig c;
  c.vocab = 32;
  c.d_model = 64;
  c.d_ff = 128;
  c.heads = 2;
  c.d_head = 32;
  c.layers = 4;
  c.attention = {AttentionKind::Lsh};
  c.positions = models::PositionKind::Axial;
  c.max_length = 128;
  c.ff_chunk = 48;
  c.loss_chunk = 100;
  c.dropout = 0.1;
  c.attention_dropout = 0.1;
  c.label_smoothing = 0.1;
  c.lsh.chunk = chunk;
  c.lsh.n_hashes = 2;
  c.lsh.n_buckets = {8};
  c.reversible = reversible;
  c.ff_activation = ops::Activation::GELU;
  return c;
}

// One model of each precision on the same parameter values.
struct PairCase {
  ReformerConfig config;
  ParameterSet<float> p32, p16;
  ReformerLM<float> m32;
  ReformerLM<bf16> m16;
  ReformerState<float> s32;
  ReformerState<bf16> s16;
  IdView ids, targets;
  ModelCall call{{9, 4}, true};

  explicit PairCase(const ReformerConfig& c, Index batch = 2, Index length = 128)
      : config(c),
        m32(c, p32),
        m16(c, p16),
        ids(random_ids(batch, length, c.vocab, 1)),
        targets(random_ids(batch, length, c.vocab, 2)) {
    m32.init({1, 2});
    Kokkos::deep_copy(p16.values(), p32.values());
  }
  std::pair<ops::CrossEntropyResult, ops::CrossEntropyResult> step() {
    p32.zero_grad();
    p16.zero_grad();
    return {m32.forward_backward(ids, targets, -1, call, s32),
            m16.forward_backward(ids, targets, -1, call, s16)};
  }
};

TEST(ReformerLMBf16, LossAndGradientsFollowFloat32) {
  for (bool reversible : {true, false}) {
    PairCase c(lsh_config(reversible));
    const auto [r32, r16] = c.step();
    const double L = double(c.config.layers), u = kBf16Unit;
    const std::string what = reversible ? "reversible" : "stored";
    EXPECT_EQ(r16.tokens, r32.tokens) << what;
    EXPECT_LT(std::fabs(r16.loss - r32.loss), 4 * L * u * r32.loss) << what;
    const auto g32 = to_host(c.p32.grads()), g16 = to_host(c.p16.grads());
    EXPECT_LT(relative_error(g16, g32), 8 * L * u) << what;
    EXPECT_GT(cosine(g16, g32), 1 - 0.5 * (8 * L * u) * (8 * L * u)) << what;
    // Every parameter's gradient points the same way (a term dropped or
    // mis-scaled on the bf16 path would not). Per parameter the relative error
    // is larger than the whole vector's where a gradient is a small difference
    // of large terms (w_qk's, through the softmax: dS = P (dP - D)); its
    // cosine with the float32 gradient still exceeds 0.95.
    for (const auto& p : c.p16) {
      const auto a = to_host(p.grad), b = to_host(c.p32.get(p.name).grad);
      EXPECT_GT(cosine(a, b), 0.95) << what << " " << p.name;
    }
    // Evaluation (dropout off) agrees as well.
    ModelCall eval = c.call;
    eval.training = false;
    const double e32 = c.m32.evaluate(c.ids, c.targets, -1, eval, c.s32).loss;
    const double e16 = c.m16.evaluate(c.ids, c.targets, -1, eval, c.s16).loss;
    EXPECT_LT(std::fabs(e16 - e32), 4 * L * u * e32) << what;
  }
}

// The bounds above are not loose enough to pass by accident: the float32 model
// on another batch differs from itself by far more than they allow.
TEST(ReformerLMBf16, TheBoundsSeparateDifferentInputs) {
  PairCase c(lsh_config(true));
  c.p32.zero_grad();
  c.m32.forward_backward(c.ids, c.targets, -1, c.call, c.s32);
  const auto g = to_host(c.p32.grads());
  c.p32.zero_grad();
  const auto other = random_ids(2, 128, c.config.vocab, 7);
  c.m32.forward_backward(other, c.targets, -1, c.call, c.s32);
  EXPECT_GT(relative_error(to_host(c.p32.grads()), g), 8 * c.config.layers * kBf16Unit);
}

// A padded, masked batch whose length (100) does not fit the chunks.
TEST(ReformerLMBf16, PaddingAndMasksFollowFloat32) {
  PairCase c(lsh_config(true), 2, 100);
  Kokkos::View<int**, Layout, MemSpace> valid("valid", 2, 100);
  auto host = Kokkos::create_mirror_view(valid);
  for (Index b = 0; b < 2; ++b)
    for (Index i = 0; i < 100; ++i) host(b, i) = b == 1 && i >= 70 ? 0 : 1;
  Kokkos::deep_copy(valid, host);
  c.call.valid = valid;
  const auto [r32, r16] = c.step();
  const double L = double(c.config.layers), u = kBf16Unit;
  EXPECT_EQ(r16.tokens, r32.tokens);
  EXPECT_LT(std::fabs(r16.loss - r32.loss), 4 * L * u * r32.loss);
  EXPECT_LT(relative_error(to_host(c.p16.grads()), to_host(c.p32.grads())), 8 * L * u);
}

// Every attention kind in one stack (LSH, local, exact, full), reversible.
TEST(ReformerLMBf16, EveryAttentionKindFollowsFloat32) {
  auto config = lsh_config(true);
  config.attention = {AttentionKind::Lsh, AttentionKind::Local, AttentionKind::Exact,
                      AttentionKind::Full};
  config.local.chunk = 16;
  PairCase c(config);
  const auto [r32, r16] = c.step();
  const double L = double(config.layers), u = kBf16Unit;
  EXPECT_LT(std::fabs(r16.loss - r32.loss), 4 * L * u * r32.loss);
  const auto g32 = to_host(c.p32.grads()), g16 = to_host(c.p16.grads());
  EXPECT_LT(relative_error(g16, g32), 8 * L * u);
  for (const auto& p : c.p16)
    EXPECT_GT(cosine(to_host(p.grad), to_host(c.p32.get(p.name).grad)), 0.95) << p.name;
}

}  // namespace
}  // namespace reformer
