#include "reformer/core/error.hpp"
#include "reformer/layers/feed_forward.hpp"
#include "support/batch_share.hpp"
#include "support/checks.hpp"
#include "support/gradcheck.hpp"
#include "support/layer_reference.hpp"

#include <gtest/gtest.h>

namespace reformer {
namespace {

using namespace reformer::testing;
using layers::FeedForward;
using layers::FeedForwardCall;
using layers::FeedForwardConfig;

FeedForwardConfig small_config(Index chunk, double dropout, ops::Activation act) {
  FeedForwardConfig c;
  c.d_model = 6;
  c.d_ff = 10;
  c.activation = act;
  c.dropout = dropout;
  c.chunk = chunk;
  return c;
}

std::vector<double> reference(const ParameterSet<double>& params, const std::vector<double>& x,
                              ops::Activation act) {
  return host_feed_forward(params, "ff", x, 11, 6, 10, act);
}

struct FeedForwardCase {
  ParameterSet<double> params;
  FeedForward<double> layer;
  Workspace workspace;
  View2<double> x{"x", 11, 6}, y{"y", 11, 6}, r{"r", 11, 6}, dx{"dx", 11, 6};
  FeedForwardCall call{{5, 9}, true};

  explicit FeedForwardCase(const FeedForwardConfig& config) : layer("ff", config, params) {
    layer.init({1, 2});
    // Non-trivial LayerNorm parameters and biases.
    fill_uniform(params.get("ff.norm.gamma").value, 11, 0.5, 1.5);
    fill_uniform(params.get("ff.norm.beta").value, 12, -0.2, 0.2);
    fill_uniform(params.get("ff.b1").value, 13, -0.2, 0.2);
    fill_uniform(params.get("ff.b2").value, 14, -0.2, 0.2);
    fill_uniform(x, 1);
    fill_uniform(r, 2);
  }
  double loss() {
    layer.forward(x, y, call, workspace);
    return dot(y, r);
  }
};

class FeedForwardChunks : public ::testing::TestWithParam<Index> {};

TEST_P(FeedForwardChunks, MatchesPlainReference) {
  for (auto act : {ops::Activation::ReLU, ops::Activation::GELU}) {
    FeedForwardCase c(small_config(GetParam(), 0.0, act));
    c.loss();
    const auto want = reference(c.params, to_host(c.x), act);
    EXPECT_LT(relative_error(to_host(c.y), want), 1e-12);
  }
}

TEST_P(FeedForwardChunks, GradientsWithDropout) {
  FeedForwardCase c(small_config(GetParam(), 0.2, ops::Activation::GELU));
  auto loss = [&] { return c.loss(); };
  c.params.zero_grad();
  c.layer.backward(c.x, c.r, c.dx, c.call, c.workspace);
  EXPECT_LT(gradient_error(c.x, c.dx, loss), 1e-6);
  for (const auto& name : c.params.names()) {
    auto& p = c.params.get(name);
    EXPECT_LT(gradient_error(p.value, p.grad, loss, 24), 1e-6) << name;
  }
}

INSTANTIATE_TEST_SUITE_P(UnchunkedAndChunked, FeedForwardChunks,
                         ::testing::Values(0, 1, 4, 11, 64));

// Chunking changes neither the dropout masks nor the result.
TEST(FeedForward, ChunkingKeepsDropoutMasks) {
  FeedForwardCase whole(small_config(0, 0.3, ops::Activation::ReLU));
  FeedForwardCase chunked(small_config(4, 0.3, ops::Activation::ReLU));
  whole.loss();
  chunked.loss();
  EXPECT_LT(relative_error(to_host(chunked.y), to_host(whole.y)), 1e-14);
  // Evaluation switches dropout off: the plain reference again.
  whole.call.training = false;
  whole.loss();
  const auto want = reference(whole.params, to_host(whole.x), ops::Activation::ReLU);
  EXPECT_LT(relative_error(to_host(whole.y), want), 1e-12);
}

// Data parallelism: rows [5, 11) run alone with first_row 5 (chunked, chunks
// that do not start where the whole batch's do) draw the masks the whole
// batch draws for them, in forward, backward and the recomputed output, so
// their outputs and input gradients are the whole batch's rows and the
// gradients of rows [0, 5) and [5, 11) sum to the whole batch's. With
// first_row 0 the same rows draw other masks.
TEST(FeedForward, ShareOfTheRowsDrawsTheWholeBatchMasks) {
  FeedForwardCase c(small_config(4, 0.3, ops::Activation::GELU));
  struct Run {
    View2<double> y, dx, recomputed;
    std::vector<double> grads;
  };
  auto run = [&](Index first, Index count, Index first_row) {
    const auto xs = share_rows(c.x, first, count), rs = share_rows(c.r, first, count);
    Run r{View2<double>("y", count, 6),
          View2<double>("dx", count, 6),
          View2<double>("recomputed", count, 6),
          {}};
    FeedForwardCall call = c.call;
    call.first_row = first_row;
    c.params.zero_grad();
    c.layer.forward(xs, r.y, call, c.workspace);
    c.layer.backward(xs, rs, r.dx, call, c.workspace, 0.0, r.recomputed);
    r.grads = to_host(c.params.grads());
    return r;
  };
  const Run whole = run(0, 11, 0), low = run(0, 5, 0), high = run(5, 6, 5);
  EXPECT_LT(max_difference(to_host(high.y), host_rows(whole.y, 5, 6)), 1e-12);
  EXPECT_LT(max_difference(to_host(high.recomputed), host_rows(whole.y, 5, 6)), 1e-12);
  EXPECT_LT(max_difference(to_host(high.dx), host_rows(whole.dx, 5, 6)), 1e-12);
  EXPECT_LT(max_difference(sum_of(low.grads, high.grads), whole.grads), 1e-12);
  const Run unshifted = run(5, 6, 0);
  EXPECT_GT(max_difference(to_host(unshifted.y), host_rows(whole.y, 5, 6)), 1e-3);
}

// backward(beta = 1) adds into dx, and `recomputed` receives G(x) with the
// forward pass's dropout masks.
TEST(FeedForward, BackwardAccumulatesAndRecomputes) {
  FeedForwardCase c(small_config(3, 0.25, ops::Activation::ReLU));
  c.loss();
  const auto forward_y = to_host(c.y);
  c.layer.backward(c.x, c.r, c.dx, c.call, c.workspace);
  const auto grad = to_host(c.dx);
  fill_uniform(c.dx, 7);
  const auto before = to_host(c.dx);
  View2<double> again("again", 11, 6);
  c.layer.backward(c.x, c.r, c.dx, c.call, c.workspace, 1.0, again);
  const auto after = to_host(c.dx);
  for (size_t i = 0; i < after.size(); ++i) EXPECT_NEAR(after[i], before[i] + grad[i], 1e-12);
  EXPECT_LT(relative_error(to_host(again), forward_y), 1e-14);
  // forward(beta = 1) adds too.
  Kokkos::deep_copy(c.y, 1.0);
  c.layer.forward(c.x, c.y, c.call, c.workspace, 1.0);
  const auto summed = to_host(c.y);
  for (size_t i = 0; i < summed.size(); ++i) EXPECT_NEAR(summed[i], 1.0 + forward_y[i], 1e-12);
}

// layer_norm = false: no norm parameters, G(x) = act(x W1 + b1) W2 + b2 (the
// post-LN layers' feed-forward), chunked, with its gradients under dropout.
TEST(FeedForward, WithoutLayerNorm) {
  auto config = small_config(4, 0.0, ops::Activation::GELU);
  config.layer_norm = false;
  ParameterSet<double> params;
  FeedForward<double> layer("ff", config, params);
  layer.init({1, 2});
  EXPECT_FALSE(params.contains("ff.norm.gamma"));
  EXPECT_EQ(params.size(), 4u);
  fill_uniform(params.get("ff.b1").value, 13, -0.2, 0.2);
  fill_uniform(params.get("ff.b2").value, 14, -0.2, 0.2);
  Workspace workspace;
  View2<double> x("x", 11, 6), y("y", 11, 6), r("r", 11, 6), dx("dx", 11, 6);
  fill_uniform(x, 1);
  fill_uniform(r, 2);
  FeedForwardCall call{{5, 9}, false};
  layer.forward(x, y, call, workspace);
  // The reference: a LayerNorm with gain 1 and shift 0 would normalise, so
  // the plain products are written out here.
  const auto xs = to_host(x);
  auto hidden = host_matmul(xs, param(params, "ff.w1"), 11, 6, 10);
  const auto b1 = param(params, "ff.b1"), b2 = param(params, "ff.b2");
  for (Index n = 0; n < 11; ++n)
    for (Index k = 0; k < 10; ++k) {
      const double s = hidden[n * 10 + k] + b1[k];
      hidden[n * 10 + k] = 0.5 * s * (1 + std::erf(s / std::sqrt(2.0)));
    }
  auto want = host_matmul(hidden, param(params, "ff.w2"), 11, 10, 6);
  for (Index n = 0; n < 11; ++n)
    for (Index j = 0; j < 6; ++j) want[n * 6 + j] += b2[j];
  EXPECT_LT(relative_error(to_host(y), want), 1e-12);
  // Gradients with dropout.
  config.dropout = 0.2;
  ParameterSet<double> dropped;
  FeedForward<double> with_dropout("ff", config, dropped);
  with_dropout.init({1, 2});
  call.training = true;
  auto loss = [&] {
    with_dropout.forward(x, y, call, workspace);
    return dot(y, r);
  };
  dropped.zero_grad();
  with_dropout.backward(x, r, dx, call, workspace);
  EXPECT_LT(gradient_error(x, dx, loss), 1e-6);
  for (auto& p : dropped) EXPECT_LT(gradient_error(p.value, p.grad, loss, 24), 1e-6) << p.name;
}

TEST(FeedForward, ClearErrors) {
  ParameterSet<double> params;
  auto config = small_config(0, 0.0, ops::Activation::ReLU);
  config.chunk = -2;
  expect_error<ConfigError>([&] { FeedForward<double>("a", config, params); }, {"chunk", "-2"});
  config = small_config(0, 1.0, ops::Activation::ReLU);
  expect_error<ConfigError>([&] { FeedForward<double>("b", config, params); }, {"dropout", "1"});
  FeedForward<double> layer("c", small_config(0, 0.0, ops::Activation::ReLU), params);
  Workspace ws;
  View2<double> x("x", 4, 5), y("y", 4, 6);
  expect_error<ShapeError>([&] { layer.forward(x, y, {}, ws); }, {"x", "6"});
}

}  // namespace
}  // namespace reformer
