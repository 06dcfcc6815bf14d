// FeedForward<bf16> (bf16 activations, float32 parameters and gradients)
// against FeedForward<float> with the same parameters on the same input values.
#include "reformer/layers/feed_forward.hpp"
#include "support/bf16_checks.hpp"
#include "support/checks.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <string>

namespace reformer {
namespace {

using namespace reformer::testing;
using layers::FeedForward;
using layers::FeedForwardCall;
using layers::FeedForwardConfig;

// The same parameter values in both sets: init with one key, then non-trivial
// LayerNorm parameters and biases.
void init_parameters(ParameterSet<float>& params, FeedForward<float>* f32, FeedForward<bf16>* f16) {
  if (f32) f32->init({1, 2});
  if (f16) f16->init({1, 2});
  fill_uniform(params.get("ff.norm.gamma").value, 11, 0.5, 1.5);
  fill_uniform(params.get("ff.norm.beta").value, 12, -0.2, 0.2);
  fill_uniform(params.get("ff.b1").value, 13, -0.2, 0.2);
  fill_uniform(params.get("ff.b2").value, 14, -0.2, 0.2);
}

TEST(Bf16FeedForward, MatchesFloat32OnTheSameValues) {
  const Index rows = 300;
  for (auto act : {ops::Activation::ReLU, ops::Activation::GELU})
    for (double dropout : {0.0, 0.1}) {
      FeedForwardConfig config;
      config.d_model = 64;
      config.d_ff = 128;
      config.activation = act;
      config.dropout = dropout;
      config.chunk = 128;  // 128, 128 and 44 rows
      const std::string what = std::string(act == ops::Activation::ReLU ? "relu" : "gelu") +
                               " dropout=" + std::to_string(dropout);
      ParameterSet<float> p32, p16;
      FeedForward<float> f32("ff", config, p32);
      FeedForward<bf16> f16("ff", config, p16);
      init_parameters(p32, &f32, nullptr);
      init_parameters(p16, nullptr, &f16);
      ASSERT_EQ(to_host(p16.values()), to_host(p32.values()));
      View2<float> x("x", rows, 64), y("y", rows, 64), dy("dy", rows, 64), dx("dx", rows, 64);
      fill_uniform(x, 1, -2, 2);
      fill_uniform(dy, 2);
      const auto x16 = bf16_of(x);
      const auto dy16 = bf16_of(dy);
      View2<bf16> y16("y16", rows, 64), dx16("dx16", rows, 64);
      Workspace workspace;
      const FeedForwardCall call{{5, 9}, true};
      f32.forward(x, y, call, workspace);
      f16.forward(x16, y16, call, workspace);
      f32.backward(x, dy, dx, call, workspace);
      f16.backward(x16, dy16, dx16, call, workspace);
      // Forward: y rounds 4 times on its way (LayerNorm output, x W1 + b1, the
      // activation, h W2 + b2), 6 with dropout (each mask's scaling). Each
      // rounding is at most u = 2^-8 relative per element, about u / sqrt(3)
      // in norm, and the maps in between (Xavier weights, LayerNorm, 1-Lipschitz
      // activations) carry a norm-wise relative error on with a gain of about
      // 1: sqrt(k / 3) u for k roundings. The test allows twice that for k = 6,
      // 3u (measured: 0.7u to 1.1u), and per element 4u of the largest |y|.
      const auto yw = to_host(y), yg = to_host(y16);
      EXPECT_LT(relative_error(yg, yw), 3 * kBf16Unit) << what << " y";
      expect_rounded(yg, yw, what + " y", 4 * kBf16Unit);
      // Backward: the recomputed forward's roundings plus up to 6 of its own
      // (dy through dropout, dy W2^T, hidden dropout, the activation, dh W1^T,
      // the LayerNorm), k <= 12: twice sqrt(12 / 3) u = 4u (measured: up to
      // 1.1u). Except behind ReLU's kink: where the float32 and bf16 values of
      // x W1 + b1 have opposite signs, one side passes a gradient element the
      // other drops. They differ by the error the rounded LayerNorm output puts
      // into x W1 + b1, about (u / sqrt(3)) sigma for values of spread sigma, so
      // a fraction of about 2 (u / sqrt(3)) / sqrt(2 pi) = 0.46u of the elements
      // flips, each a whole gradient element: a norm-wise error of about
      // sqrt(0.46u) = 0.68 sqrt(u). The gradients below the kink (dx, w1, b1
      // and the LayerNorm's) are allowed sqrt(u) = 16u (measured: 6u to 10u).
      const double smooth = 4 * kBf16Unit;
      const double kink = act == ops::Activation::ReLU ? std::sqrt(kBf16Unit) : smooth;
      EXPECT_LT(relative_error(to_host(dx16), to_host(dx)), kink) << what << " dx";
      for (const auto& p : p32) {
        const bool above_kink = p.name == "ff.w2" || p.name == "ff.b2";
        const double err = relative_error(to_host(p16.get(p.name).grad), to_host(p.grad));
        EXPECT_LT(err, above_kink ? smooth : kink) << what << " gradient of " << p.name;
      }
      // The reversible backward: beta = 1 adds into dx, and `recomputed`
      // receives G(x), the same numbers as the forward pass.
      View2<bf16> again("again", rows, 64), recomputed("recomputed", rows, 64);
      Kokkos::deep_copy(again, dx16);
      f16.backward(x16, dy16, again, call, workspace, 1.0f, recomputed);
      EXPECT_EQ(to_host(recomputed), yg) << what;
      auto twice = to_host(dx16);
      for (double& v : twice) v *= 2;  // exact in bf16
      EXPECT_EQ(to_host(again), twice) << what;
    }
}

}  // namespace
}  // namespace reformer
