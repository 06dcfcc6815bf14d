#include "reformer/attention/attention_layer.hpp"
#include "reformer/core/error.hpp"
#include "reformer/core/memory_tracker.hpp"
#include "support/batch_share.hpp"
#include "support/checks.hpp"
#include "support/chunk_settings.hpp"
#include "support/gradcheck.hpp"

#include <gtest/gtest.h>

namespace reformer {
namespace {

using namespace reformer::testing;
using attention::AttentionKind;
using attention::AttentionLayer;
using attention::AttentionLayerConfig;
using attention::AttentionState;
using attention::Save;

AttentionLayerConfig small_config(AttentionKind kind) {
  AttentionLayerConfig c;
  c.kind = kind;
  c.d_model = 6;
  c.heads = 2;
  c.d_head = 3;
  c.causal = true;
  c.attention_dropout = 0.1;
  c.output_dropout = 0.1;
  c.lsh.chunk = 4;
  c.lsh.n_hashes = 2;
  c.lsh.n_buckets = {4};
  c.local.chunk = 4;
  return c;
}

struct LayerCase {
  ParameterSet<double> params;
  AttentionLayer<double> layer;
  AttentionState<double> state;
  Workspace workspace;
  View3<double> x{"x", 2, 8, 6}, y{"y", 2, 8, 6}, r{"r", 2, 8, 6}, dx{"dx", 2, 8, 6};
  attention::AttentionLayerCall call{{3, 7}, {}};

  explicit LayerCase(const AttentionLayerConfig& config) : layer("layers.0.attn", config, params) {
    layer.init({1, 2});
    fill_uniform(x, 1);
    fill_uniform(r, 2);
  }
  double loss() {
    layer.forward(x, y, call, state, workspace);
    return dot(y, r);
  }
  void backward(double beta = 0) { layer.backward(x, r, dx, state, workspace, beta); }
};

class AttentionLayerKinds : public ::testing::TestWithParam<AttentionKind> {};

// One interface for every variant: the same calls train full, LSH, local and
// exact attention, and the gradients of the input and of every projection are right.
TEST_P(AttentionLayerKinds, GradientsOfInputAndProjections) {
  LayerCase c(small_config(GetParam()));
  c.loss();
  c.params.zero_grad();
  c.backward();
  auto loss = [&] { return c.loss(); };
  EXPECT_LT(gradient_error(c.x, c.dx, loss), 1e-6);
  for (const auto& name : c.params.names()) {
    auto& p = c.params.get(name);
    EXPECT_LT(gradient_error(p.value, p.grad, loss, 24), 1e-6) << name;
  }
}

// beta = 1 adds the input gradient into the caller's buffer (residual and
// reversible joins need no extra buffer).
TEST_P(AttentionLayerKinds, BackwardAccumulatesIntoInputGradientWithBeta) {
  LayerCase c(small_config(GetParam()));
  c.loss();
  c.backward();
  const auto plain = to_host(c.dx);
  fill_uniform(c.dx, 9);
  const auto before = to_host(c.dx);
  c.backward(1.0);
  const auto summed = to_host(c.dx);
  for (std::size_t i = 0; i < plain.size(); ++i)
    EXPECT_NEAR(summed[i], before[i] + plain[i], 1e-13) << i;
}

// Forward keeping only the plan, then recompute: the same output bit for bit
// (same buckets and dropout masks), and backward after the recompute gives the
// same gradients as backward after a forward that saved everything.
TEST_P(AttentionLayerKinds, RecomputeReproducesForwardAndGradients) {
  LayerCase c(small_config(GetParam()));
  c.loss();
  const auto y_saved = to_host(c.y);
  c.params.zero_grad();
  c.backward();
  const auto dx_saved = to_host(c.dx);
  const auto dw_saved = to_host(c.params.grads());
  AttentionState<double> plan_only;
  c.layer.forward(c.x, c.y, c.call, plan_only, c.workspace, Save::PlanOnly);
  EXPECT_FALSE(plan_only.saved);
  EXPECT_EQ(to_host(c.y), y_saved);
  AttentionState<double> shared;  // the state a reversible stack reuses for every layer
  shared.use_plan_of(plan_only);
  c.layer.recompute(c.x, c.y, shared, c.workspace);
  EXPECT_EQ(to_host(c.y), y_saved);
  c.params.zero_grad();
  c.layer.backward(c.x, c.r, c.dx, shared, c.workspace);
  EXPECT_EQ(to_host(c.dx), dx_saved);
  EXPECT_EQ(to_host(c.params.grads()), dw_saved);
}

TEST_P(AttentionLayerKinds, CausalOutputsIgnoreLaterTokens) {
  auto config = small_config(GetParam());
  config.attention_dropout = config.output_dropout = 0;
  LayerCase c(config);
  c.loss();
  const auto before = to_host(c.y);
  // Scaling x_t scales its projections: LSH buckets and normalised keys stay
  // the same, so only the causal mask decides what earlier positions see.
  auto hx = Kokkos::create_mirror_view_and_copy(HostSpace(), c.x);
  const Index t = 5;
  for (Index b = 0; b < 2; ++b)
    for (Index d = 0; d < 6; ++d) hx(b, t, d) *= 3.0;
  Kokkos::deep_copy(c.x, hx);
  c.loss();
  const auto after = to_host(c.y);
  for (Index b = 0; b < 2; ++b)
    for (Index i = 0; i < t; ++i)
      for (Index d = 0; d < 6; ++d)
        EXPECT_EQ(before[(b * 8 + i) * 6 + d], after[(b * 8 + i) * 6 + d]) << i;
  EXPECT_NE(before[(0 * 8 + t) * 6], after[(0 * 8 + t) * 6]);
}

// After one warm-up step, a forward + backward allocates nothing: the state,
// the LSH plan and the workspace are all reused (counted with the memory
// tracker's allocation events).
TEST_P(AttentionLayerKinds, NoAllocationsAfterWarmUp) {
  AttentionLayerConfig config;
  config.kind = GetParam();
  config.d_model = 32;
  config.heads = 2;
  config.d_head = 16;
  config.attention_dropout = 0.1;
  config.output_dropout = 0.1;
  config.lsh.chunk = 32;
  config.lsh.n_hashes = 2;
  config.local.chunk = 32;
  ParameterSet<float> params;
  AttentionLayer<float> layer("attn", config, params);
  layer.init({1, 1});
  const Index batch = 2, length = 256;
  View3<float> x("x", batch, length, 32), y("y", batch, length, 32), dy("dy", batch, length, 32),
      dx("dx", batch, length, 32);
  fill_uniform(x, 3);
  fill_uniform(dy, 4);
  AttentionState<float> state;
  Workspace workspace;
  auto& tracker = MemoryTracker::instance();
  ASSERT_TRUE(tracker.installed());
  const std::string space = MemSpace::name();
  auto step = [&](std::uint64_t k) {
    layer.forward(x, y, {{5, k}, {}}, state, workspace);
    layer.backward(x, dy, dx, state, workspace);
    Kokkos::fence();
  };
  step(0);
  const auto after_warm_up = tracker.space(space).allocations;
  for (std::uint64_t k = 1; k <= 3; ++k) step(k);
  EXPECT_EQ(tracker.space(space).allocations, after_warm_up)
      << "a warmed-up step of " << attention::to_string(config.kind) << " attention allocated";
  EXPECT_GT(workspace.capacity_bytes(), 0);
}

// Data parallelism: rows [2, 4) of a batch, run alone with first_row 2, draw
// the masks the whole batch draws for them (the probabilities' dropout and the
// output's, each alone), so their outputs and input gradients are the whole
// batch's rows, and the projections' gradients of rows [0, 2) and [2, 4) sum
// to the whole batch's. With first_row 0 the same rows draw other masks.
// Lengths 8 and 40: full attention's short and batched kernels; LSH, local
// and exact attention with the fused and the batched products.
TEST_P(AttentionLayerKinds, ShareOfTheBatchDrawsTheWholeBatchMasks) {
  const AttentionKind kind = GetParam();
  const bool chunked = kind == AttentionKind::Lsh || kind == AttentionKind::Local;
  for (const bool batched : {false, true})
    for (const Index length : {8, 40})
      for (const bool on_probabilities : {true, false}) {
        if (kind == AttentionKind::Full && batched) continue;
        SCOPED_TRACE(::testing::Message() << "length " << length << ", dropout on the "
                                          << (on_probabilities ? "probabilities" : "output")
                                          << (batched ? ", batched products" : ""));
        ScopedChunkProducts pin(batched && chunked ? attention::ChunkProducts::batched
                                                   : attention::ChunkProducts::fused);
        ScopedExactProducts pin_exact(batched && kind == AttentionKind::Exact
                                          ? attention::ExactProducts::batched
                                          : attention::ExactProducts::fused);
        auto config = small_config(kind);
        config.attention_dropout = on_probabilities ? 0.3 : 0.0;
        config.output_dropout = on_probabilities ? 0.0 : 0.3;
        ParameterSet<double> params;
        AttentionLayer<double> layer("attn", config, params);
        layer.init({1, 2});
        View3<double> x("x", 4, length, 6), dy("dy", 4, length, 6);
        fill_uniform(x, 1);
        fill_uniform(dy, 2);
        Workspace workspace;
        struct Run {
          View3<double> y, dx;
          std::vector<double> grads;
        };
        auto run = [&](Index first, Index count, Index first_row) {
          const auto xs = share_rows(x, first, count), dys = share_rows(dy, first, count);
          Run r{View3<double>("y", count, length, 6), View3<double>("dx", count, length, 6), {}};
          AttentionState<double> state;
          params.zero_grad();
          attention::AttentionLayerCall call{{3, 7}, {}, true, first_row};
          layer.forward(xs, r.y, call, state, workspace);
          layer.backward(xs, dys, r.dx, state, workspace);
          r.grads = to_host(params.grads());
          return r;
        };
        const Run whole = run(0, 4, 0), low = run(0, 2, 0), high = run(2, 2, 2);
        EXPECT_LT(max_difference(to_host(high.y), host_rows(whole.y, 2, 2)), 1e-12);
        EXPECT_LT(max_difference(to_host(high.dx), host_rows(whole.dx, 2, 2)), 1e-12);
        EXPECT_LT(max_difference(to_host(low.y), host_rows(whole.y, 0, 2)), 1e-12);
        EXPECT_LT(max_difference(sum_of(low.grads, high.grads), whole.grads), 1e-12);
        const Run unshifted = run(2, 2, 0);
        EXPECT_GT(max_difference(to_host(unshifted.y), host_rows(whole.y, 2, 2)), 1e-3);
      }
}

INSTANTIATE_TEST_SUITE_P(FullLshLocalExact, AttentionLayerKinds,
                         ::testing::Values(AttentionKind::Full, AttentionKind::Lsh,
                                           AttentionKind::Local, AttentionKind::Exact));

TEST(AttentionLayer, SharedQkFullAttentionGradients) {
  auto config = small_config(AttentionKind::Full);
  config.shared_qk = true;
  LayerCase c(config);
  EXPECT_TRUE(c.params.contains("layers.0.attn.w_qk"));
  EXPECT_FALSE(c.params.contains("layers.0.attn.w_k"));
  c.loss();
  c.backward();
  auto loss = [&] { return c.loss(); };
  EXPECT_LT(gradient_error(c.x, c.dx, loss), 1e-6);
  auto& w = c.params.get("layers.0.attn.w_qk");
  EXPECT_LT(gradient_error(w.value, w.grad, loss, 24), 1e-6);
}

// Shared-QK full attention uses LSH's normalised keys and the self-mask, so it
// is LSH attention with one hash round whose one chunk holds the whole
// sequence: same weights, same outputs and gradients. Weights trained with
// one can be evaluated with the other (the paper's Table 2).
TEST(AttentionLayer, SharedQkFullAttentionEqualsOneChunkLsh) {
  for (const bool causal : {true, false}) {
    auto full_config = small_config(AttentionKind::Full);
    full_config.shared_qk = true;
    full_config.causal = causal;
    full_config.attention_dropout = 0;  // the two variants index dropout masks differently
    auto lsh_config = full_config;
    lsh_config.kind = AttentionKind::Lsh;
    lsh_config.lsh.n_hashes = 1;
    lsh_config.lsh.chunk = 8;  // the whole sequence
    lsh_config.lsh.n_buckets = {2};
    LayerCase full(full_config), lsh(lsh_config);
    ASSERT_EQ(full.params.names(), lsh.params.names());
    const double full_loss = full.loss(), lsh_loss = lsh.loss();
    EXPECT_NEAR(full_loss, lsh_loss, 1e-12) << "causal " << causal;
    EXPECT_LT(relative_error(to_host(full.y), to_host(lsh.y)), 1e-12);
    full.params.zero_grad();
    lsh.params.zero_grad();
    full.backward();
    lsh.backward();
    EXPECT_LT(relative_error(to_host(full.dx), to_host(lsh.dx)), 1e-12);
    EXPECT_LT(relative_error(to_host(full.params.grads()), to_host(lsh.params.grads())), 1e-12);
  }
}

TEST(AttentionLayer, CrossAttentionGradients) {
  auto config = small_config(AttentionKind::Full);
  config.causal = false;
  ParameterSet<double> params;
  AttentionLayer<double> layer("decoder.0.cross", config, params);
  layer.init({4, 4});
  View3<double> x("x", 2, 5, 6), memory("memory", 2, 7, 6), y("y", 2, 5, 6), r("r", 2, 5, 6);
  View3<double> dx("dx", 2, 5, 6), dmemory("dmemory", 2, 7, 6);
  fill_uniform(x, 5);
  fill_uniform(memory, 6);
  fill_uniform(r, 7);
  AttentionState<double> state;
  Workspace workspace;
  auto loss = [&] {
    layer.forward_cross(x, memory, y, {{1, 1}, {}}, state, workspace);
    return dot(y, r);
  };
  loss();
  layer.backward_cross(x, memory, r, dx, dmemory, state, workspace);
  EXPECT_LT(gradient_error(x, dx, loss), 1e-6);
  EXPECT_LT(gradient_error(memory, dmemory, loss), 1e-6);
  auto& wk = params.get("decoder.0.cross.w_k");
  EXPECT_LT(gradient_error(wk.value, wk.grad, loss, 24), 1e-6);
}

TEST(AttentionLayer, ClearErrors) {
  ParameterSet<double> params;
  // Contradictory settings name the field instead of being overridden.
  auto config = small_config(AttentionKind::Local);
  config.shared_qk = true;
  expect_error<ConfigError>([&] { AttentionLayer<double>("a", config, params); },
                            {"shared_qk is true but local attention has separate q and k"});
  config = small_config(AttentionKind::Lsh);
  config.shared_qk = false;
  expect_error<ConfigError>([&] { AttentionLayer<double>("a", config, params); },
                            {"shared_qk is false but LSH attention always shares q and k"});
  config = small_config(AttentionKind::Lsh);
  config.lsh.n_hashes = 0;
  expect_error<ConfigError>([&] { AttentionLayer<double>("a", config, params); },
                            {"n_hashes is 0 but must be in [1, 64]"});
  config = small_config(AttentionKind::Full);
  config.output_dropout = 1.5;
  expect_error<ConfigError>([&] { AttentionLayer<double>("a", config, params); },
                            {"output_dropout is 1.5 but must be in [0, 1)"});
  EXPECT_THROW(attention::parse_attention_kind("sparse"), ConfigError);
  EXPECT_EQ(attention::parse_attention_kind("lsh"), AttentionKind::Lsh);
  config = small_config(AttentionKind::Lsh);
  AttentionLayer<double> lsh("b", config, params);
  View3<double> x("x", 1, 8, 6), y("y", 1, 8, 6), memory("m", 1, 4, 6);
  AttentionState<double> state;
  Workspace workspace;
  EXPECT_THROW(lsh.forward_cross(x, memory, y, {}, state, workspace), ConfigError);
  View3<double> wrong("wrong", 1, 8, 5);
  EXPECT_THROW(lsh.forward(wrong, wrong, {}, state, workspace), ShapeError);
  // Backward and recompute need the right state.
  expect_error<ConfigError>([&] { lsh.backward(x, y, y, state, workspace); },
                            {"holds no self-attention forward pass"});
  expect_error<ConfigError>([&] { lsh.recompute(x, y, state, workspace); },
                            {"the state has no LSH plan for an input of shape [1, 8, 6]"});
}

}  // namespace
}  // namespace reformer
