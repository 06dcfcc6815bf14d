// The decoder block of the encoder-decoder Transformer against plain host loops,
// and its gradients (double, finite differences) with padding in the target and
// in the source.
#include "reformer/core/error.hpp"
#include "reformer/layers/blocks.hpp"
#include "support/batch_share.hpp"
#include "support/checks.hpp"
#include "support/gradcheck.hpp"
#include "support/layer_reference.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>

namespace reformer {
namespace {

using namespace reformer::testing;
using attention::AttentionKind;
using layers::DecoderBlock;
using layers::DecoderBlockCall;
using layers::DecoderBlockConfig;
using layers::DecoderBlockState;

constexpr Index B = 2, Lt = 6, Ls = 7, D = 6, H = 2, Dh = 3, F = 10;

DecoderBlockConfig decoder_config(AttentionKind self, AttentionKind cross, double dropout) {
  DecoderBlockConfig c;
  attention::AttentionLayerConfig* const both[2] = {&c.self_attention, &c.cross_attention};
  for (attention::AttentionLayerConfig* a : both) {
    a->d_model = D;
    a->heads = H;
    a->d_head = Dh;
    a->attention_dropout = dropout;
    a->output_dropout = dropout;
    a->local.chunk = 3;
  }
  c.self_attention.kind = self;
  c.self_attention.causal = true;
  c.cross_attention.kind = cross;
  c.cross_attention.causal = false;
  c.feed_forward.d_model = D;
  c.feed_forward.d_ff = F;
  c.feed_forward.dropout = dropout;
  c.feed_forward.chunk = 5;
  return c;
}

// Padding masks: the target's second sequence has 4 tokens, the source's first 5.
Kokkos::View<int**, Layout, MemSpace> mask(Index length, Index short_row, Index tokens) {
  Kokkos::View<int**, Layout, MemSpace> m("mask", B, length);
  auto h = Kokkos::create_mirror_view(m);
  for (Index b = 0; b < B; ++b)
    for (Index t = 0; t < length; ++t) h(b, t) = b == short_row && t >= tokens ? 0 : 1;
  Kokkos::deep_copy(m, h);
  return m;
}

// softmax attention over the allowed keys, per head, with separate projections
// of `from` (queries) and `to` (keys, values) under `prefix`.
std::vector<double> host_attention(const ParameterSet<double>& params, const std::string& prefix,
                                   const std::vector<double>& from, Index lq,
                                   const std::vector<double>& to, Index lk,
                                   const std::function<bool(Index, Index, Index)>& allowed) {
  const Index inner = H * Dh;
  const auto q = host_matmul(from, param(params, prefix + ".w_q"), B * lq, D, inner);
  const auto k = host_matmul(to, param(params, prefix + ".w_k"), B * lk, D, inner);
  const auto v = host_matmul(to, param(params, prefix + ".w_v"), B * lk, D, inner);
  std::vector<double> a(std::size_t(B * lq * inner), 0.0);
  for (Index b = 0; b < B; ++b)
    for (Index h = 0; h < H; ++h)
      for (Index i = 0; i < lq; ++i) {
        std::vector<double> w(std::size_t(lk), 0.0);
        double top = -1e300, sum = 0;
        for (Index j = 0; j < lk; ++j) {
          if (!allowed(b, i, j)) continue;
          double s = 0;
          for (Index x = 0; x < Dh; ++x)
            s += q[(b * lq + i) * inner + h * Dh + x] * k[(b * lk + j) * inner + h * Dh + x];
          w[j] = s / std::sqrt(double(Dh));
          top = std::max(top, w[j]);
        }
        for (Index j = 0; j < lk; ++j) {
          w[j] = allowed(b, i, j) ? std::exp(w[j] - top) : 0.0;
          sum += w[j];
        }
        for (Index j = 0; j < lk; ++j)
          for (Index x = 0; x < Dh; ++x)
            a[(b * lq + i) * inner + h * Dh + x] +=
                w[j] / sum * v[(b * lk + j) * inner + h * Dh + x];
      }
  return host_matmul(a, param(params, prefix + ".w_o"), B * lq, inner, D);
}

struct DecoderCase {
  ParameterSet<double> params;
  DecoderBlock<double> block;
  DecoderBlockState<double> state;
  Workspace workspace;
  View3<double> x{"x", B, Lt, D}, memory{"memory", B, Ls, D}, out{"out", B, Lt, D};
  View3<double> r{"r", B, Lt, D}, dx{"dx", B, Lt, D}, dmemory{"dmemory", B, Ls, D};
  Kokkos::View<int**, Layout, MemSpace> target_valid = mask(Lt, 1, 4);
  Kokkos::View<int**, Layout, MemSpace> source_valid = mask(Ls, 0, 5);
  DecoderBlockCall call;

  DecoderCase(AttentionKind self, AttentionKind cross, double dropout)
      : block("decoder.0", decoder_config(self, cross, dropout), params) {
    block.init({2, 3});
    std::uint64_t seed = 50;
    for (const auto& name : params.names())
      if (name.find("norm.gamma") != std::string::npos)
        fill_uniform(params.get(name).value, ++seed, 0.5, 1.5);
      else if (name.find("norm.beta") != std::string::npos || name.find(".b") != std::string::npos)
        fill_uniform(params.get(name).value, ++seed, -0.2, 0.2);
    fill_uniform(x, 1);
    fill_uniform(memory, 2);
    fill_uniform(r, 3);
    call = {{5, 9}, target_valid, source_valid, true};
  }
  double loss() {
    Kokkos::deep_copy(out, x);
    block.forward(out, memory, call, state, workspace);
    return dot(out, r);
  }
  void backward() {
    params.zero_grad();
    loss();
    Kokkos::deep_copy(dx, r);
    Kokkos::deep_copy(dmemory, 0.0);
    block.backward(dx, memory, dmemory, state, workspace);
  }
};

// The block's three sub-layers as plain host loops, for a case's parameters and masks.
struct HostSublayers {
  const DecoderCase& c;
  std::vector<double> tv = to_host(c.target_valid), sv = to_host(c.source_valid);
  std::vector<double> memory = to_host(c.memory);
  std::vector<double> norm(const std::vector<double>& v, const std::string& prefix) const {
    return host_layer_norm(v, B * Lt, D, param(c.params, prefix + ".gamma"),
                           param(c.params, prefix + ".beta"));
  }
  // SelfAttention(LN(x)): causal, target padding.
  std::vector<double> self(const std::vector<double>& x) const {
    const auto n = norm(x, "decoder.0.self_norm");
    return host_attention(c.params, "decoder.0.self", n, Lt, n, Lt, [&](Index b, Index i, Index j) {
      return j <= i && tv[std::size_t(b * Lt + j)] != 0;
    });
  }
  // CrossAttention(LN(x), m): source padding.
  std::vector<double> cross(const std::vector<double>& x) const {
    return host_attention(
        c.params, "decoder.0.cross", norm(x, "decoder.0.cross_norm"), Lt, memory, Ls,
        [&](Index b, Index, Index j) { return sv[std::size_t(b * Ls + j)] != 0; });
  }
  std::vector<double> ff(const std::vector<double>& x) const {
    return host_feed_forward(c.params, "decoder.0.ff", x, B * Lt, D, F, ops::Activation::ReLU);
  }
};

std::vector<double> plus(const std::vector<double>& a, const std::vector<double>& b) {
  std::vector<double> out(a.size());
  for (std::size_t i = 0; i < a.size(); ++i) out[i] = a[i] + b[i];
  return out;
}

TEST(DecoderBlock, MatchesPlainReferenceWithPadding) {
  DecoderCase c(AttentionKind::Full, AttentionKind::Full, 0.0);
  c.loss();
  const HostSublayers host{c};
  // y = x + Self(LN(x)), z = y + Cross(LN(y), m), out = z + G(z).
  const auto x = to_host(c.x);
  const auto y = plus(x, host.self(x));
  const auto z = plus(y, host.cross(y));
  EXPECT_LT(relative_error(to_host(c.out), plus(z, host.ff(z))), 1e-12);
}

class DecoderKinds
    : public ::testing::TestWithParam<std::tuple<AttentionKind, AttentionKind, double>> {};

// Every input, the memory and every parameter, with padding on both sides
// (and dropout, whose masks replay exactly).
TEST_P(DecoderKinds, GradientsWithPaddingOnBothSides) {
  const auto [self, cross, dropout] = GetParam();
  DecoderCase c(self, cross, dropout);
  c.backward();
  auto loss = [&] { return c.loss(); };
  EXPECT_LT(gradient_error(c.x, c.dx, loss), 1e-6);
  EXPECT_LT(gradient_error(c.memory, c.dmemory, loss), 1e-6);
  // Padded source positions get no gradient.
  const auto dm = to_host(c.dmemory);
  for (Index t = 5; t < Ls; ++t)
    for (Index j = 0; j < D; ++j) EXPECT_EQ(dm[std::size_t(t * D + j)], 0.0) << t;
  for (const auto& name : c.params.names()) {
    auto& p = c.params.get(name);
    EXPECT_LT(gradient_error(p.value, p.grad, loss, 12), 1e-6) << name;
  }
}

INSTANTIATE_TEST_SUITE_P(
    SelfAndCrossKinds, DecoderKinds,
    ::testing::Values(std::make_tuple(AttentionKind::Full, AttentionKind::Full, 0.0),
                      std::make_tuple(AttentionKind::Exact, AttentionKind::Exact, 0.0),
                      std::make_tuple(AttentionKind::Local, AttentionKind::Full, 0.0),
                      std::make_tuple(AttentionKind::Full, AttentionKind::Exact, 0.2)));

// The two-stream (reversible) form of the same block.
struct ReversibleDecoderCase : DecoderCase {
  View3<double> x2{"x2", B, Lt, D}, y1{"y1", B, Lt, D}, y2{"y2", B, Lt, D};
  View3<double> r2{"r2", B, Lt, D}, dx2{"dx2", B, Lt, D};
  attention::AttentionState<double> scratch;

  using DecoderCase::DecoderCase;
  void fill() {
    fill_uniform(x2, 6);
    fill_uniform(r2, 7);
  }
  double loss() {
    Kokkos::deep_copy(y1, x);
    Kokkos::deep_copy(y2, x2);
    block.forward_reversible(y1, y2, memory, call, state, workspace);
    return dot(y1, r) + dot(y2, r2);
  }
  // Gradients into dx, dx2, dmemory; the outputs y1, y2 are rebuilt into the inputs.
  void backward() {
    params.zero_grad();
    loss();
    Kokkos::deep_copy(dx, r);
    Kokkos::deep_copy(dx2, r2);
    Kokkos::deep_copy(dmemory, 0.0);
    block.backward_reversible(y1, y2, dx, dx2, memory, dmemory, state, scratch, workspace);
  }
};

TEST(ReversibleDecoderBlock, MatchesPlainReferenceAndRebuildsItsInputs) {
  ReversibleDecoderCase c(AttentionKind::Full, AttentionKind::Full, 0.0);
  c.fill();
  c.loss();
  const HostSublayers host{c};
  // a = x1 + Self(LN(x2)), y2 = x2 + Cross(LN(a), m), y1 = a + G(y2).
  const auto x1 = to_host(c.x), x2 = to_host(c.x2);
  const auto a = plus(x1, host.self(x2));
  const auto y2 = plus(x2, host.cross(a));
  EXPECT_LT(relative_error(to_host(c.y1), plus(a, host.ff(y2))), 1e-12);
  EXPECT_LT(relative_error(to_host(c.y2), y2), 1e-12);
  // Backward turns the outputs back into the inputs.
  c.backward();
  EXPECT_LT(relative_error(to_host(c.y1), x1), 1e-12);
  EXPECT_LT(relative_error(to_host(c.y2), x2), 1e-12);
}

TEST_P(DecoderKinds, ReversibleGradientsWithPaddingOnBothSides) {
  const auto [self, cross, dropout] = GetParam();
  ReversibleDecoderCase c(self, cross, dropout);
  c.fill();
  c.backward();
  // Dropout masks replay exactly: the rebuilt inputs are the inputs.
  EXPECT_LT(relative_error(to_host(c.y1), to_host(c.x)), 1e-12);
  EXPECT_LT(relative_error(to_host(c.y2), to_host(c.x2)), 1e-12);
  auto loss = [&] { return c.loss(); };
  EXPECT_LT(gradient_error(c.x, c.dx, loss), 1e-6);
  EXPECT_LT(gradient_error(c.x2, c.dx2, loss), 1e-6);
  EXPECT_LT(gradient_error(c.memory, c.dmemory, loss), 1e-6);
  const auto dm = to_host(c.dmemory);
  for (Index t = 5; t < Ls; ++t)
    for (Index j = 0; j < D; ++j) EXPECT_EQ(dm[std::size_t(t * D + j)], 0.0) << t;
  for (const auto& name : c.params.names()) {
    auto& p = c.params.get(name);
    EXPECT_LT(gradient_error(p.value, p.grad, loss, 12), 1e-6) << name;
  }
}

// Data parallelism: rows [2, 4) of the target and the memory, run alone with
// first_row 2, draw the masks the whole batch draws for them in the
// self-attention, the cross-attention and the feed-forward (each alone), one
// stream and two: their outputs and the gradients of the inputs and the
// memory are the whole batch's rows, and the parameter gradients of rows
// [0, 2) and [2, 4) sum to the whole batch's. With first_row 0 they draw
// other masks.
TEST(DecoderBlock, ShareOfTheBatchDrawsTheWholeBatchMasks) {
  for (const int site : {0, 1, 2})
    for (const bool reversible : {false, true}) {
      SCOPED_TRACE(::testing::Message()
                   << (reversible ? "two streams" : "one stream") << ", dropout in the "
                   << (site == 0   ? "self-attention"
                       : site == 1 ? "cross-attention"
                                   : "feed-forward"));
      auto config = decoder_config(AttentionKind::Full, AttentionKind::Exact, 0.0);
      auto& self = config.self_attention;
      auto& cross = config.cross_attention;
      self.attention_dropout = self.output_dropout = site == 0 ? 0.3 : 0.0;
      cross.attention_dropout = cross.output_dropout = site == 1 ? 0.3 : 0.0;
      config.feed_forward.dropout = site == 2 ? 0.3 : 0.0;
      ParameterSet<double> params;
      DecoderBlock<double> block("decoder.0", config, params);
      block.init({2, 3});
      View3<double> x1("x1", 4, Lt, D), x2("x2", 4, Lt, D), memory("memory", 4, Ls, D);
      View3<double> r1("r1", 4, Lt, D), r2("r2", 4, Lt, D);
      for (const auto& [v, seed] :
           {std::make_pair(x1, 1), std::make_pair(x2, 2), std::make_pair(memory, 3),
            std::make_pair(r1, 4), std::make_pair(r2, 5)})
        fill_uniform(v, std::uint64_t(seed));
      Workspace workspace;
      struct Run {
        View3<double> y1, y2, d1, d2, dmemory;
        std::vector<double> grads;
      };
      auto run = [&](Index first, Index count, Index first_row) {
        Run r{share_rows(x1, first, count),           share_rows(x2, first, count),
              share_rows(r1, first, count),           share_rows(r2, first, count),
              View3<double>("dmemory", count, Ls, D), {}};
        const auto m = share_rows(memory, first, count);
        DecoderBlockCall call{{5, 9}, {}, {}, true, first_row};
        DecoderBlockState<double> state;
        attention::AttentionState<double> scratch;
        params.zero_grad();
        if (reversible) {
          block.forward_reversible(r.y1, r.y2, m, call, state, workspace);
          const auto y1 = share_rows(r.y1, 0, count), y2 = share_rows(r.y2, 0, count);
          block.backward_reversible(y1, y2, r.d1, r.d2, m, r.dmemory, state, scratch, workspace);
        } else {
          block.forward(r.y1, m, call, state, workspace);
          block.backward(r.d1, m, r.dmemory, state, workspace);
        }
        r.grads = to_host(params.grads());
        return r;
      };
      const Run whole = run(0, 4, 0), low = run(0, 2, 0), high = run(2, 2, 2);
      for (const auto& [part, all] :
           {std::make_pair(high.y1, whole.y1), std::make_pair(high.y2, whole.y2),
            std::make_pair(high.d1, whole.d1), std::make_pair(high.d2, whole.d2),
            std::make_pair(high.dmemory, whole.dmemory)})
        EXPECT_LT(max_difference(to_host(part), host_rows(all, 2, 2)), 1e-12);
      EXPECT_LT(max_difference(sum_of(low.grads, high.grads), whole.grads), 1e-12);
      const Run unshifted = run(2, 2, 0);
      EXPECT_GT(max_difference(to_host(unshifted.y1), host_rows(whole.y1, 2, 2)) +
                    max_difference(to_host(unshifted.y2), host_rows(whole.y2, 2, 2)),
                1e-3);
    }
}

TEST(DecoderBlock, ClearErrors) {
  ParameterSet<double> params;
  auto lsh_cross = decoder_config(AttentionKind::Full, AttentionKind::Lsh, 0.0);
  expect_error<ConfigError>([&] { DecoderBlock<double>("d", lsh_cross, params); },
                            {"cross_attention is lsh", "must be full or exact"});
  auto not_causal = decoder_config(AttentionKind::Full, AttentionKind::Full, 0.0);
  not_causal.self_attention.causal = false;
  expect_error<ConfigError>([&] { DecoderBlock<double>("d", not_causal, params); },
                            {"self_attention.causal is false"});
  DecoderCase c(AttentionKind::Full, AttentionKind::Full, 0.0);
  View3<double> other("other", B + 1, Ls, D);
  expect_error<ShapeError>([&] { c.block.forward(c.out, other, c.call, c.state, c.workspace); },
                           {"batch sizes must be equal"});
  DecoderBlockState<double> empty;
  expect_error<ConfigError>(
      [&] { c.block.backward(c.dx, c.memory, c.dmemory, empty, c.workspace); },
      {"no forward pass"});
  View3<double> shorter("shorter", B, Lt - 1, D);
  expect_error<ShapeError>(
      [&] { c.block.forward_reversible(c.out, shorter, c.memory, c.call, c.state, c.workspace); },
      {"DecoderBlock::forward_reversible", "x2"});
  expect_error<ShapeError>(
      [&] { c.block.forward_reversible(c.out, c.x, other, c.call, c.state, c.workspace); },
      {"batch sizes must be equal"});
}

}  // namespace
}  // namespace reformer
