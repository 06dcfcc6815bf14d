#include "reformer/core/error.hpp"
#include "reformer/layers/blocks.hpp"
#include "support/batch_share.hpp"
#include "support/checks.hpp"
#include "support/gradcheck.hpp"
#include "support/layer_reference.hpp"

#include <gtest/gtest.h>

#include <optional>

namespace reformer {
namespace {

using namespace reformer::testing;
using attention::AttentionKind;
using attention::AttentionState;
using attention::Save;
using layers::BlockCall;
using layers::BlockConfig;
using layers::BlockState;
using layers::ResidualBlock;
using layers::ReversibleBlock;

constexpr Index B = 2, L = 8, D = 6, F = 10;

BlockConfig small_config(AttentionKind kind, double dropout) {
  BlockConfig c;
  c.attention.kind = kind;
  c.attention.d_model = D;
  c.attention.heads = 2;
  c.attention.d_head = 3;
  c.attention.causal = true;
  c.attention.attention_dropout = dropout;
  c.attention.output_dropout = dropout;
  c.attention.lsh.chunk = 4;
  c.attention.lsh.n_hashes = 2;
  c.attention.lsh.n_buckets = {4};
  c.attention.local.chunk = 4;
  c.feed_forward.d_model = D;
  c.feed_forward.d_ff = F;
  c.feed_forward.dropout = dropout;
  c.feed_forward.chunk = 5;  // does not divide the 16 rows
  return c;
}

void randomise_norms(ParameterSet<double>& params) {
  std::uint64_t seed = 100;
  for (const auto& name : params.names())
    if (name.find("norm.gamma") != std::string::npos)
      fill_uniform(params.get(name).value, ++seed, 0.5, 1.5);
    else if (name.find("norm.beta") != std::string::npos || name.find(".b") != std::string::npos)
      fill_uniform(params.get(name).value, ++seed, -0.2, 0.2);
}

struct ReversibleCase {
  ParameterSet<double> params;
  ReversibleBlock<double> block;
  BlockState<double> state;
  AttentionState<double> scratch;
  Workspace workspace;
  View3<double> x1{"x1", B, L, D}, x2{"x2", B, L, D}, y1{"y1", B, L, D}, y2{"y2", B, L, D};
  View3<double> r1{"r1", B, L, D}, r2{"r2", B, L, D}, d1{"d1", B, L, D}, d2{"d2", B, L, D};
  BlockCall call{{3, 7}, {}, true};

  explicit ReversibleCase(const BlockConfig& config) : block("layers.0", config, params) {
    block.init({1, 2});
    randomise_norms(params);
    fill_uniform(x1, 1);
    fill_uniform(x2, 2);
    fill_uniform(r1, 3);
    fill_uniform(r2, 4);
  }
  void forward(Save save) {
    Kokkos::deep_copy(y1, x1);
    Kokkos::deep_copy(y2, x2);
    block.forward(y1, y2, call, state, workspace, save);
  }
  double loss() {
    forward(Save::PlanOnly);
    return dot(y1, r1) + dot(y2, r2);
  }
  // Gradients of loss() by the reversible path; y1, y2 end up holding x1, x2.
  void backward_reversible() {
    forward(Save::PlanOnly);
    Kokkos::deep_copy(d1, r1);
    Kokkos::deep_copy(d2, r2);
    block.backward_reversible(y1, y2, d1, d2, state, scratch, workspace);
  }
};

class BlockKinds : public ::testing::TestWithParam<AttentionKind> {};

TEST_P(BlockKinds, ReversibleGradientsWithDropout) {
  ReversibleCase c(small_config(GetParam(), 0.1));
  auto loss = [&] { return c.loss(); };
  c.params.zero_grad();
  c.backward_reversible();
  // The inputs were rebuilt from the outputs.
  EXPECT_LT(relative_error(to_host(c.y1), to_host(c.x1)), 1e-12);
  EXPECT_LT(relative_error(to_host(c.y2), to_host(c.x2)), 1e-12);
  EXPECT_LT(gradient_error(c.x1, c.d1, loss), 1e-6);
  EXPECT_LT(gradient_error(c.x2, c.d2, loss), 1e-6);
  for (const auto& name : c.params.names()) {
    auto& p = c.params.get(name);
    EXPECT_LT(gradient_error(p.value, p.grad, loss, 16), 1e-6) << name;
  }
}

// The stored path (what a non-reversible model runs) gives the same gradients.
TEST_P(BlockKinds, StoredBackwardEqualsReversible) {
  ReversibleCase c(small_config(GetParam(), 0.1));
  c.params.zero_grad();
  c.backward_reversible();
  const auto g1 = to_host(c.d1), g2 = to_host(c.d2), gw = to_host(c.params.grads());
  c.params.zero_grad();
  c.forward(Save::All);
  Kokkos::deep_copy(c.d1, c.r1);
  Kokkos::deep_copy(c.d2, c.r2);
  c.block.backward_stored(c.d1, c.d2, c.state, c.workspace);
  EXPECT_LT(relative_error(to_host(c.d1), g1), 1e-12);
  EXPECT_LT(relative_error(to_host(c.d2), g2), 1e-12);
  EXPECT_LT(relative_error(to_host(c.params.grads()), gw), 1e-12);
}

// Data parallelism: rows [2, 4) of the streams, run alone with first_row 2,
// draw the masks the whole batch draws for them in the attention and in the
// feed-forward (each alone), through the reversible block (reversible and
// stored backward) and the residual block: their outputs and input gradients
// are the whole batch's rows, and the parameter gradients of rows [0, 2) and
// [2, 4) sum to the whole batch's. With first_row 0 they draw other masks.
TEST_P(BlockKinds, ShareOfTheBatchDrawsTheWholeBatchMasks) {
  for (const bool in_attention : {true, false})
    for (const int path : {0, 1, 2}) {  // reversible, stored, residual
      SCOPED_TRACE(::testing::Message()
                   << (path == 0   ? "reversible"
                       : path == 1 ? "stored"
                                   : "residual")
                   << ", dropout in the " << (in_attention ? "attention" : "feed-forward"));
      auto config = small_config(GetParam(), in_attention ? 0.3 : 0.0);
      config.feed_forward.dropout = in_attention ? 0.0 : 0.3;
      ParameterSet<double> params;
      std::optional<ReversibleBlock<double>> block;
      std::optional<ResidualBlock<double>> residual;
      if (path == 2)
        residual.emplace("layers.0", config, params).init({1, 2});
      else
        block.emplace("layers.0", config, params).init({1, 2});
      randomise_norms(params);
      View3<double> x1("x1", 4, L, D), x2("x2", 4, L, D), r1("r1", 4, L, D), r2("r2", 4, L, D);
      fill_uniform(x1, 1);
      fill_uniform(x2, 2);
      fill_uniform(r1, 3);
      fill_uniform(r2, 4);
      Workspace workspace;
      struct Run {
        View3<double> y1, y2, d1, d2;
        std::vector<double> grads;
      };
      auto run = [&](Index first, Index count, Index first_row) {
        Run r{share_rows(x1, first, count),
              share_rows(x2, first, count),
              share_rows(r1, first, count),
              share_rows(r2, first, count),
              {}};
        const BlockCall call{{3, 7}, {}, true, first_row};
        BlockState<double> state;
        AttentionState<double> scratch;
        params.zero_grad();
        if (path == 2) {
          residual->forward(r.y1, call, state, workspace);
          residual->backward(r.d1, state, workspace);
        } else {
          block->forward(r.y1, r.y2, call, state, workspace,
                         path == 0 ? Save::PlanOnly : Save::All);
          const auto y1 = share_rows(r.y1, 0, count), y2 = share_rows(r.y2, 0, count);
          if (path == 0)
            block->backward_reversible(y1, y2, r.d1, r.d2, state, scratch, workspace);
          else
            block->backward_stored(r.d1, r.d2, state, workspace);
        }
        r.grads = to_host(params.grads());
        return r;
      };
      const Run whole = run(0, 4, 0), low = run(0, 2, 0), high = run(2, 2, 2);
      for (const auto& [part, all] :
           {std::make_pair(high.y1, whole.y1), std::make_pair(high.y2, whole.y2),
            std::make_pair(high.d1, whole.d1), std::make_pair(high.d2, whole.d2)})
        EXPECT_LT(max_difference(to_host(part), host_rows(all, 2, 2)), 1e-12);
      EXPECT_LT(max_difference(sum_of(low.grads, high.grads), whole.grads), 1e-12);
      const Run unshifted = run(2, 2, 0);
      EXPECT_GT(max_difference(to_host(unshifted.y1), host_rows(whole.y1, 2, 2)) +
                    max_difference(to_host(unshifted.y2), host_rows(whole.y2, 2, 2)),
                1e-3);
    }
}

INSTANTIATE_TEST_SUITE_P(FullLshLocal, BlockKinds,
                         ::testing::Values(AttentionKind::Full, AttentionKind::Lsh,
                                           AttentionKind::Local));

// y1 = x1 + Attention(LayerNorm(x2)), y2 = x2 + G(y1) against plain host loops.
TEST(ReversibleBlock, MatchesPlainReference) {
  ReversibleCase c(small_config(AttentionKind::Full, 0.0));
  c.forward(Save::PlanOnly);
  const auto x1 = to_host(c.x1), x2 = to_host(c.x2);
  const auto n = host_layer_norm(x2, B * L, D, param(c.params, "layers.0.attn_norm.gamma"),
                                 param(c.params, "layers.0.attn_norm.beta"));
  const auto f = host_full_attention_layer(c.params, "layers.0.attn", n, B, L, D, 2, 3);
  std::vector<double> y1(x1.size()), y2(x2.size());
  for (size_t i = 0; i < y1.size(); ++i) y1[i] = x1[i] + f[i];
  const auto g = host_feed_forward(c.params, "layers.0.ff", y1, B * L, D, F, ops::Activation::ReLU);
  for (size_t i = 0; i < y2.size(); ++i) y2[i] = x2[i] + g[i];
  EXPECT_LT(relative_error(to_host(c.y1), y1), 1e-12);
  EXPECT_LT(relative_error(to_host(c.y2), y2), 1e-12);
}

// z = y + G(y), y = x + F(x) against plain host loops, and its gradients.
TEST(ResidualBlock, MatchesReferenceAndGradients) {
  ParameterSet<double> params;
  ResidualBlock<double> block("layers.0", small_config(AttentionKind::Full, 0.0), params);
  block.init({4, 5});
  randomise_norms(params);
  BlockState<double> state;
  Workspace workspace;
  View3<double> x("x", B, L, D), z("z", B, L, D), r("r", B, L, D), dz("dz", B, L, D);
  fill_uniform(x, 1);
  fill_uniform(r, 2);
  BlockCall call{{1, 1}, {}, true};
  auto loss = [&] {
    Kokkos::deep_copy(z, x);
    block.forward(z, call, state, workspace);
    return dot(z, r);
  };
  loss();
  const auto xh = to_host(x);
  const auto n = host_layer_norm(xh, B * L, D, param(params, "layers.0.attn_norm.gamma"),
                                 param(params, "layers.0.attn_norm.beta"));
  const auto f = host_full_attention_layer(params, "layers.0.attn", n, B, L, D, 2, 3);
  std::vector<double> y(xh.size()), want(xh.size());
  for (size_t i = 0; i < y.size(); ++i) y[i] = xh[i] + f[i];
  const auto g = host_feed_forward(params, "layers.0.ff", y, B * L, D, F, ops::Activation::ReLU);
  for (size_t i = 0; i < y.size(); ++i) want[i] = y[i] + g[i];
  EXPECT_LT(relative_error(to_host(z), want), 1e-12);

  params.zero_grad();
  loss();
  Kokkos::deep_copy(dz, r);
  block.backward(dz, state, workspace);
  EXPECT_LT(gradient_error(x, dz, loss), 1e-6);
  for (const auto& name : params.names()) {
    auto& p = params.get(name);
    EXPECT_LT(gradient_error(p.value, p.grad, loss, 16), 1e-6) << name;
  }
}

TEST(ReversibleBlock, ClearErrors) {
  ParameterSet<double> params;
  auto config = small_config(AttentionKind::Local, 0.0);
  config.feed_forward.d_model = 8;
  expect_error<ConfigError>([&] { ReversibleBlock<double>("a", config, params); },
                            {"d_model", "6", "8"});
  ReversibleCase c(small_config(AttentionKind::Local, 0.0));
  c.forward(Save::PlanOnly);
  expect_error<ConfigError>([&] { c.block.backward_stored(c.d1, c.d2, c.state, c.workspace); },
                            {"Save::All"});
}

}  // namespace
}  // namespace reformer
