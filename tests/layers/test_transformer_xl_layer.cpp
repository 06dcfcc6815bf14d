// The Transformer-XL layer (layers/transformer_xl_layer.hpp): its forward
// against plain host loops of the whole layer (concatenation, LayerNorms,
// projections, the four-term relative score with the causal, clamp_len and
// same_length rules, feed-forward), pre- and post-LN, with and without
// memory; finite-difference gradients in double of the segment and of every
// parameter (memory, clamp_len, same_length, dropout), with the memory held
// fixed; the memory gets no gradient: perturbing it changes the loss, the
// layer returns none for it, and overwriting the caller's memory after the
// forward pass does not change the backward pass.
#include "reformer/core/error.hpp"
#include "reformer/core/memory_tracker.hpp"
#include "reformer/layers/transformer_xl_layer.hpp"
#include "support/batch_share.hpp"
#include "support/checks.hpp"
#include "support/gradcheck.hpp"
#include "support/layer_reference.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

namespace reformer {
namespace {

using namespace reformer::testing;
using layers::TransformerXLLayer;
using layers::TransformerXLLayerCall;
using layers::TransformerXLLayerConfig;
using layers::TransformerXLLayerState;

struct Shape {
  Index batch = 2, length = 5, memory = 4;
};

TransformerXLLayerConfig small_config(bool pre_norm) {
  TransformerXLLayerConfig c;
  c.d_model = 8;
  c.heads = 2;
  c.d_head = 4;
  c.feed_forward.d_ff = 12;
  c.feed_forward.activation = ops::Activation::GELU;
  c.pre_norm = pre_norm;
  return c;
}

// One layer on a segment and a memory, with a fixed upstream gradient g.
struct LayerCase {
  Shape shape;
  TransformerXLLayerConfig config;
  ParameterSet<double> params;
  TransformerXLLayer<double> layer;
  TransformerXLLayerState<double> state;
  TransformerXLLayerCall call;
  Workspace workspace;
  View3<double> x0, x, memory, g;

  LayerCase(const TransformerXLLayerConfig& config_, Shape shape_ = {}, bool training = false)
      : shape(shape_), config(config_), layer("layer", config_, params) {
    layer.init({11, 3});
    // Gains and shifts away from 1 and 0 and biases away from 0, so that
    // every parameter's gradient is exercised.
    for (auto& p : params)
      if (p.name.find("gamma") != std::string::npos || p.name.find("beta") != std::string::npos ||
          p.name.find(".b") != std::string::npos)
        fill_uniform(p.value, 100 + p.offset, 0.5, 1.5);
    const Index d = config.d_model;
    x0 = View3<double>("x0", shape.batch, shape.length, d);
    x = View3<double>("x", shape.batch, shape.length, d);
    memory = View3<double>("memory", shape.batch, shape.memory, d);
    g = View3<double>("g", shape.batch, shape.length, d);
    fill_uniform(x0, 21);
    fill_uniform(memory, 22);
    fill_uniform(g, 23);
    call = {{5, 9}, training, -1, {5, 10}};
  }
  double loss() {
    Kokkos::deep_copy(x, x0);
    layer.forward(x, memory, call, state, workspace);
    return dot(x, g);
  }
  // Parameter gradients (accumulated from zero) and dx0 = dL/dx0.
  View3<double> gradients() {
    params.zero_grad();
    loss();
    View3<double> dx("dx", x.extent(0), x.extent(1), x.extent(2));
    Kokkos::deep_copy(dx, g);
    layer.backward(dx, state, workspace);
    return dx;
  }
};

// ---- host reference -------------------------------------------------------

std::vector<double> host_encoding(Index positions, Index d) {
  std::vector<double> r(positions * d);
  for (Index p = 0; p < positions; ++p)
    for (Index j = 0; j < d; ++j) {
      const double angle = double(p) / std::pow(10000.0, double(j - j % 2) / double(d));
      r[p * d + j] = j % 2 == 0 ? std::sin(angle) : std::cos(angle);
    }
  return r;
}

std::vector<double> host_ff(const ParameterSet<double>& params, const std::vector<double>& x,
                            Index rows, Index d, Index f, bool norm) {
  auto in = norm ? host_layer_norm(x, rows, d, param(params, "layer.ff.norm.gamma"),
                                   param(params, "layer.ff.norm.beta"))
                 : x;
  auto hidden = host_matmul(in, param(params, "layer.ff.w1"), rows, d, f);
  const auto b1 = param(params, "layer.ff.b1");
  for (Index r = 0; r < rows; ++r)
    for (Index k = 0; k < f; ++k) {
      const double s = hidden[r * f + k] + b1[k];
      hidden[r * f + k] = 0.5 * s * (1 + std::erf(s / std::sqrt(2.0)));
    }
  auto y = host_matmul(hidden, param(params, "layer.ff.w2"), rows, f, d);
  const auto b2 = param(params, "layer.ff.b2");
  for (Index r = 0; r < rows; ++r)
    for (Index j = 0; j < d; ++j) y[r * d + j] += b2[j];
  return y;
}

// The whole layer in plain loops, no dropout.
std::vector<double> host_layer(const LayerCase& c) {
  const auto& cfg = c.config;
  const auto& params = c.params;
  const Index B = c.shape.batch, L = c.shape.length, M = c.shape.memory, K = M + L;
  const Index d = cfg.d_model, H = cfg.heads, D = cfg.d_head, inner = H * D;
  const auto x = to_host(c.x0), m = to_host(c.memory);
  std::vector<double> ctx(B * K * d);
  for (Index b = 0; b < B; ++b)
    for (Index j = 0; j < K; ++j)
      for (Index f = 0; f < d; ++f)
        ctx[(b * K + j) * d + f] = j < M ? m[(b * M + j) * d + f] : x[(b * L + j - M) * d + f];
  auto a = cfg.pre_norm ? host_layer_norm(ctx, B * K, d, param(params, "layer.attn_norm.gamma"),
                                          param(params, "layer.attn_norm.beta"))
                        : ctx;
  std::vector<double> a_seg(B * L * d);
  for (Index b = 0; b < B; ++b)
    for (Index i = 0; i < L; ++i)
      for (Index f = 0; f < d; ++f) a_seg[(b * L + i) * d + f] = a[(b * K + M + i) * d + f];
  const auto q = host_matmul(a_seg, param(params, "layer.attn.w_q"), B * L, d, inner);
  const auto k = host_matmul(a, param(params, "layer.attn.w_k"), B * K, d, inner);
  const auto v = host_matmul(a, param(params, "layer.attn.w_v"), B * K, d, inner);
  const Index P = K;  // every distance; rows past the clamp are not read
  const auto r = host_matmul(host_encoding(P, d), param(params, "layer.attn.w_r"), P, d, inner);
  const auto u = param(params, "layer.attn.bias_u"), bv = param(params, "layer.attn.bias_v");
  const auto& rel = cfg.relative;
  const double scale = 1.0 / std::sqrt(double(D));
  std::vector<double> att(B * L * inner, 0.0);
  for (Index b = 0; b < B; ++b)
    for (Index h = 0; h < H; ++h)
      for (Index i = 0; i < L; ++i) {
        std::vector<double> s(K, -INFINITY);
        double top = -INFINITY;
        for (Index j = 0; j < K; ++j) {
          const Index dist = i + M - j;
          if (dist < 0 || (rel.same_length && dist >= rel.mem_len)) continue;
          const Index row = rel.clamp_len > 0 ? std::min(dist, rel.clamp_len) : dist;
          double sum = 0;
          for (Index e = 0; e < D; ++e) {
            const double qe = q[(b * L + i) * inner + h * D + e];
            sum += (qe + u[h * D + e]) * k[(b * K + j) * inner + h * D + e] +
                   (qe + bv[h * D + e]) * r[row * inner + h * D + e];
          }
          s[j] = scale * sum;
          top = std::max(top, s[j]);
        }
        double z = 0;
        for (Index j = 0; j < K; ++j) z += std::exp(s[j] - top);
        for (Index j = 0; j < K; ++j) {
          const double p = std::exp(s[j] - top) / z;
          for (Index e = 0; e < D; ++e)
            att[(b * L + i) * inner + h * D + e] += p * v[(b * K + j) * inner + h * D + e];
        }
      }
  const auto o = host_matmul(att, param(params, "layer.attn.w_o"), B * L, inner, d);
  const Index rows = B * L, f = cfg.feed_forward.d_ff;
  std::vector<double> y(rows * d);
  for (Index n = 0; n < rows * d; ++n) y[n] = x[n] + o[n];
  if (cfg.pre_norm) {
    const auto ff = host_ff(params, y, rows, d, f, true);
    for (Index n = 0; n < rows * d; ++n) y[n] += ff[n];
    return y;
  }
  y = host_layer_norm(y, rows, d, param(params, "layer.attn_norm.gamma"),
                      param(params, "layer.attn_norm.beta"));
  const auto ff = host_ff(params, y, rows, d, f, false);
  for (Index n = 0; n < rows * d; ++n) y[n] += ff[n];
  return host_layer_norm(y, rows, d, param(params, "layer.ff_norm.gamma"),
                         param(params, "layer.ff_norm.beta"));
}

struct Variant {
  const char* name;
  bool pre_norm;
  Index clamp_len;
  bool same_length;
  Index memory;
};

const Variant kVariants[] = {
    {"post_ln", false, 0, false, 4},
    {"pre_ln", true, 0, false, 4},
    {"post_ln_clamp_same_length", false, 3, true, 4},
    {"pre_ln_clamp_same_length", true, 2, true, 4},
    {"post_ln_no_memory", false, 0, false, 0},
    {"pre_ln_no_memory_same_length", true, 0, true, 0},
};

TransformerXLLayerConfig variant_config(const Variant& v) {
  auto c = small_config(v.pre_norm);
  c.relative.clamp_len = v.clamp_len;
  c.relative.same_length = v.same_length;
  c.relative.mem_len = 4;
  return c;
}

TEST(TransformerXLLayer, ForwardMatchesHostReference) {
  for (const auto& v : kVariants) {
    SCOPED_TRACE(v.name);
    LayerCase c(variant_config(v), {2, 5, v.memory});
    c.loss();
    const double err = relative_error(to_host(c.x), host_layer(c));
    EXPECT_LT(err, 1e-12);
  }
}

// Finite differences of every parameter and of the segment, the memory held
// fixed; dropout on (its masks are functions of the call's key).
TEST(TransformerXLLayer, GradientsMatchFiniteDifferences) {
  for (const auto& v : kVariants) {
    for (const bool training : {false, true}) {
      SCOPED_TRACE(std::string(v.name) + (training ? " dropout" : ""));
      auto config = variant_config(v);
      if (training) {
        config.attention_dropout = 0.2;
        config.dropout = 0.15;
        config.feed_forward.dropout = 0.1;
        config.position_dropout = 0.25;
      }
      LayerCase c(config, {2, 5, v.memory}, training);
      const auto dx = c.gradients();
      const double err_x = gradient_error(
          c.x0, dx, [&] { return c.loss(); }, 40);
      EXPECT_LT(err_x, 1e-7) << "segment";
      for (auto& p : c.params) {
        const double err = gradient_error(
            p.value, p.grad, [&] { return c.loss(); }, 24);
        EXPECT_LT(err, 1e-7) << p.name;
      }
    }
  }
}

// Data parallelism: rows [2, 4) of the segment and the memory, run alone
// with first_row 2, draw the whole batch's masks of the relative attention's
// probabilities, the output projection and the feed-forward (each alone),
// so their outputs and segment gradients are the whole batch's rows, and the
// parameter gradients of rows [0, 2) and [2, 4) sum to the whole batch's.
// With first_row 0 the same rows draw other masks.
TEST(TransformerXLLayer, ShareOfTheBatchDrawsTheWholeBatchMasks) {
  for (const auto& v : {kVariants[0], kVariants[3]})
    for (const int site : {0, 1, 2}) {
      SCOPED_TRACE(::testing::Message() << v.name << ", dropout on the "
                                        << (site == 0   ? "probabilities"
                                            : site == 1 ? "output"
                                                        : "feed-forward"));
      auto config = variant_config(v);
      config.attention_dropout = site == 0 ? 0.3 : 0.0;
      config.dropout = site == 1 ? 0.3 : 0.0;
      config.feed_forward.dropout = site == 2 ? 0.3 : 0.0;
      config.position_dropout = 0.2;  // one mask for every row
      ParameterSet<double> params;
      TransformerXLLayer<double> layer("layer", config, params);
      layer.init({11, 3});
      const Index d = config.d_model, length = 5;
      View3<double> x("x", 4, length, d), memory("memory", 4, v.memory, d), g("g", 4, length, d);
      fill_uniform(x, 21);
      fill_uniform(memory, 22);
      fill_uniform(g, 23);
      Workspace workspace;
      struct Run {
        View3<double> out, dx;
        std::vector<double> grads;
      };
      auto run = [&](Index first, Index count, Index first_row) {
        Run r{share_rows(x, first, count), share_rows(g, first, count), {}};
        TransformerXLLayerState<double> state;
        TransformerXLLayerCall call{{5, 9}, true, -1, {5, 10}};
        call.first_row = first_row;
        params.zero_grad();
        layer.forward(r.out, share_rows(memory, first, count), call, state, workspace);
        layer.backward(r.dx, state, workspace);
        r.grads = to_host(params.grads());
        return r;
      };
      const Run whole = run(0, 4, 0), low = run(0, 2, 0), high = run(2, 2, 2);
      EXPECT_LT(max_difference(to_host(high.out), host_rows(whole.out, 2, 2)), 1e-12);
      EXPECT_LT(max_difference(to_host(high.dx), host_rows(whole.dx, 2, 2)), 1e-12);
      EXPECT_LT(max_difference(to_host(low.out), host_rows(whole.out, 0, 2)), 1e-12);
      EXPECT_LT(max_difference(sum_of(low.grads, high.grads), whole.grads), 1e-12);
      const Run unshifted = run(2, 2, 0);
      EXPECT_GT(max_difference(to_host(unshifted.out), host_rows(whole.out, 2, 2)), 1e-3);
    }
}

// Stop-gradient: the memory changes the loss, yet nothing flows back to it;
// what backward returns is the gradient with the memory held fixed (checked
// above), and it reads the layer's own copy of [memory; segment].
TEST(TransformerXLLayer, NoGradientReachesTheMemory) {
  LayerCase c(variant_config(kVariants[0]), {2, 5, 4});
  const double base = c.loss();
  auto host_memory = Kokkos::create_mirror_view_and_copy(HostSpace(), c.memory);
  host_memory(1, 2, 3) += 1e-3;
  Kokkos::deep_copy(c.memory, host_memory);
  const double moved = c.loss();
  EXPECT_GT(std::abs(moved - base), 1e-8) << "the memory must influence the loss";

  const auto dx = to_host(c.gradients());
  std::vector<std::vector<double>> grads;
  for (auto& p : c.params) grads.push_back(to_host(p.grad));
  // The same forward, then the caller overwrites its memory buffer (as a
  // model updating its memories does) before backward.
  c.params.zero_grad();
  c.loss();
  Kokkos::deep_copy(c.memory, 7.0);
  View3<double> dx2("dx2", c.x.extent(0), c.x.extent(1), c.x.extent(2));
  Kokkos::deep_copy(dx2, c.g);
  c.layer.backward(dx2, c.state, c.workspace);
  EXPECT_EQ(to_host(dx2), dx);
  std::size_t n = 0;
  for (auto& p : c.params) EXPECT_EQ(to_host(p.grad), grads[n++]) << p.name;
}

// Float runs the same code: within float rounding of double.
TEST(TransformerXLLayer, FloatMatchesDouble) {
  LayerCase c(variant_config(kVariants[3]), {2, 5, 4});
  c.loss();
  ParameterSet<float> params;
  TransformerXLLayer<float> layer("layer", c.config, params);
  auto it = c.params.begin();
  for (auto& p : params) {
    auto values = to_host((it++)->value);
    auto host = Kokkos::create_mirror_view(p.value);
    for (std::size_t i = 0; i < values.size(); ++i) host(i) = float(values[i]);
    Kokkos::deep_copy(p.value, host);
  }
  auto convert = [](const View3<double>& in) {
    View3<float> out("out", in.extent(0), in.extent(1), in.extent(2));
    auto values = to_host(in);
    auto host = Kokkos::create_mirror_view(out);
    for (std::size_t i = 0; i < values.size(); ++i) host.data()[i] = float(values[i]);
    Kokkos::deep_copy(out, host);
    return out;
  };
  auto x = convert(c.x0), memory = convert(c.memory);
  TransformerXLLayerState<float> state;
  Workspace workspace;
  layer.forward(x, memory, c.call, state, workspace);
  EXPECT_LT(relative_error(to_host(x), to_host(c.x)), 1e-5);
}

// After one warm-up step, a forward + backward with a memory of the same
// length allocates nothing: the state and the workspace are reused. (A
// model's step still allocates in the loss and the embedding's backward,
// whose ops take no workspace.)
TEST(TransformerXLLayer, NoAllocationsAfterWarmUp) {
  for (const bool pre_norm : {false, true}) {
    auto config = small_config(pre_norm);
    config.attention_dropout = 0.1;
    config.dropout = 0.1;
    config.position_dropout = 0.1;
    config.feed_forward.dropout = 0.1;
    config.feed_forward.chunk = 3;
    ParameterSet<float> params;
    TransformerXLLayer<float> layer("layer", config, params);
    layer.init({1, 1});
    View3<float> x("x", 2, 16, 8), memory("memory", 2, 24, 8), dx("dx", 2, 16, 8);
    fill_uniform(memory, 3);
    TransformerXLLayerState<float> state;
    Workspace workspace;
    auto& tracker = MemoryTracker::instance();
    ASSERT_TRUE(tracker.installed());
    const std::string space = MemSpace::name();
    auto step = [&](std::uint64_t k) {
      fill_uniform(x, k);
      fill_uniform(dx, k + 100);
      layer.forward(x, memory, {{5, k}, true, -1, {6, k}}, state, workspace);
      layer.backward(dx, state, workspace);
      Kokkos::fence();
    };
    const auto before = tracker.space(space).allocations;
    step(0);
    const auto after_warm_up = tracker.space(space).allocations;
    EXPECT_GT(after_warm_up, before) << "the warm-up allocates the state and the workspace";
    for (std::uint64_t k = 1; k <= 3; ++k) step(k);
    EXPECT_EQ(tracker.space(space).allocations, after_warm_up)
        << (pre_norm ? "pre-LN" : "post-LN") << ": a warmed-up step allocated";
  }
}

TEST(TransformerXLLayer, ClearErrors) {
  auto config = small_config(true);
  config.dropout = 1.0;
  expect_error<ConfigError>([&] { config.validate(); }, {"dropout", "[0, 1)"});
  config = small_config(true);
  config.relative.same_length = true;
  config.relative.mem_len = 0;
  expect_error<ConfigError>([&] { config.validate(); }, {"mem_len"});
  LayerCase c(small_config(false));
  View3<double> wrong("memory", 3, 4, 8);
  expect_error<ShapeError>([&] { c.layer.forward(c.x, wrong, c.call, c.state, c.workspace); },
                           {"batch"});
  TransformerXLLayerState<double> empty;
  expect_error<ConfigError>([&] { c.layer.backward(c.x, empty, c.workspace); }, {"forward"});
}

}  // namespace
}  // namespace reformer
