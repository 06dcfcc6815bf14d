#include "reformer/attention/attention_layer.hpp"
#include "reformer/core/error.hpp"
#include "support/gradcheck.hpp"

#include <gtest/gtest.h>

namespace reformer {
namespace {

using namespace reformer::testing;
using attention::AttentionKind;
using attention::AttentionLayer;
using attention::AttentionLayerConfig;

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
  train::ParameterSet<double> params;
  AttentionLayer<double> layer;
  View3<double> x{"x", 2, 8, 6}, y{"y", 2, 8, 6}, r{"r", 2, 8, 6}, dx{"dx", 2, 8, 6};
  RandomKey key{3, 7};

  explicit LayerCase(const AttentionLayerConfig& config) : layer("layers.0.attn", config, params) {
    layer.init({1, 2});
    fill_uniform(x, 1);
    fill_uniform(r, 2);
  }
  double loss() {
    layer.forward(x, y, key);
    return dot(y, r);
  }
};

class AttentionLayerKinds : public ::testing::TestWithParam<AttentionKind> {};

// One interface for every variant: the same calls train full, LSH and local
// attention, and the gradients of the input and of every projection are right.
TEST_P(AttentionLayerKinds, GradientsOfInputAndProjections) {
  LayerCase c(small_config(GetParam()));
  c.loss();
  c.params.zero_grad();
  c.layer.backward(c.x, c.r, c.dx);
  auto loss = [&] { return c.loss(); };
  EXPECT_LT(gradient_error(c.x, c.dx, loss), 1e-6);
  for (const auto& name : c.params.names()) {
    auto& p = c.params.get(name);
    EXPECT_LT(gradient_error(p.value, p.grad, loss, 24), 1e-6) << name;
  }
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

INSTANTIATE_TEST_SUITE_P(FullLshLocal, AttentionLayerKinds,
                         ::testing::Values(AttentionKind::Full, AttentionKind::Lsh,
                                           AttentionKind::Local));

TEST(AttentionLayer, SharedQkFullAttentionGradients) {
  auto config = small_config(AttentionKind::Full);
  config.shared_qk = true;
  LayerCase c(config);
  EXPECT_TRUE(c.params.contains("layers.0.attn.w_qk"));
  EXPECT_FALSE(c.params.contains("layers.0.attn.w_k"));
  c.loss();
  c.layer.backward(c.x, c.r, c.dx);
  auto loss = [&] { return c.loss(); };
  EXPECT_LT(gradient_error(c.x, c.dx, loss), 1e-6);
  auto& w = c.params.get("layers.0.attn.w_qk");
  EXPECT_LT(gradient_error(w.value, w.grad, loss, 24), 1e-6);
}

TEST(AttentionLayer, CrossAttentionGradients) {
  auto config = small_config(AttentionKind::Full);
  config.causal = false;
  train::ParameterSet<double> params;
  AttentionLayer<double> layer("decoder.0.cross", config, params);
  layer.init({4, 4});
  View3<double> x("x", 2, 5, 6), memory("memory", 2, 7, 6), y("y", 2, 5, 6), r("r", 2, 5, 6);
  View3<double> dx("dx", 2, 5, 6), dmemory("dmemory", 2, 7, 6);
  fill_uniform(x, 5);
  fill_uniform(memory, 6);
  fill_uniform(r, 7);
  auto loss = [&] {
    layer.forward_cross(x, memory, y, {1, 1});
    return dot(y, r);
  };
  loss();
  layer.backward_cross(x, memory, r, dx, dmemory);
  EXPECT_LT(gradient_error(x, dx, loss), 1e-6);
  EXPECT_LT(gradient_error(memory, dmemory, loss), 1e-6);
  auto& wk = params.get("decoder.0.cross.w_k");
  EXPECT_LT(gradient_error(wk.value, wk.grad, loss, 24), 1e-6);
}

TEST(AttentionLayer, ClearErrors) {
  auto config = small_config(AttentionKind::Local);
  config.shared_qk = true;
  train::ParameterSet<double> params;
  EXPECT_THROW(AttentionLayer<double>("a", config, params), ConfigError);
  EXPECT_THROW(attention::parse_attention_kind("sparse"), ConfigError);
  EXPECT_EQ(attention::parse_attention_kind("lsh"), AttentionKind::Lsh);
  config = small_config(AttentionKind::Lsh);
  AttentionLayer<double> lsh("b", config, params);
  View3<double> x("x", 1, 8, 6), y("y", 1, 8, 6), memory("m", 1, 4, 6);
  EXPECT_THROW(lsh.forward_cross(x, memory, y, {1, 1}), ConfigError);
  View3<double> wrong("wrong", 1, 8, 5);
  EXPECT_THROW(lsh.forward(wrong, wrong, {1, 1}), ShapeError);
}

}  // namespace
}  // namespace reformer
