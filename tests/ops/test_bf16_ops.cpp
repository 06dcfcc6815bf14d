// The ops of the bf16 training path against their float32 versions on the
// same input values (support/bf16_checks.hpp): a bf16 activation must be the
// float32 result rounded once, and a float32 parameter gradient computed from
// bf16 activations must equal the float32 one up to float32 round-off.
#include "reformer/core/error.hpp"
#include "reformer/ops/activations.hpp"
#include "reformer/ops/device_blas.hpp"
#include "reformer/ops/dropout.hpp"
#include "reformer/ops/elementwise.hpp"
#include "reformer/ops/embedding.hpp"
#include "reformer/ops/gemm.hpp"
#include "reformer/ops/layer_norm.hpp"
#include "reformer/ops/linear.hpp"
#include "support/bf16_checks.hpp"
#include "support/checks.hpp"
#include "support/device_blas_env.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace reformer {
namespace {

using namespace reformer::testing;
using ops::Trans;

// Norm-wise relative error allowed for a weight gradient x^T dy of two bf16
// factors against the float32 product of the same values: the sums' float32
// reordering (1e-6), or on a GPU's vendor BLAS, whose bf16 GEMM accumulates
// in tensor cores that may truncate instead of rounding, 1e-5 (an H200 gave
// 1.3e-6 over 1500 terms). A bf16 rounding of an operand would give ~1e-3.
double weight_gradient_slack() { return ops::device_blas_info().loaded ? 1e-5 : 1e-6; }

// Float32 round-off of a sum of k products of values in [-1, 1], relative to
// the largest result (float's unit round-off 2^-24 times a few k).
double float_slack(Index k) { return 4.0 * double(k) / 16777216.0; }

// Every combination of bf16 and float operands and results, both transposes,
// beta 0 and 1, and a bias: each element is the float32 product rounded once.
// Shapes span several panels (mixed_matmul widens at most 2^18 elements at a
// time): 362 rows of k + n = 724 when A is not transposed (m = 730: three
// panels, the last of 6 rows), 347 rows of m + n = 754 of the inner dimension
// when it is (k = 700: three, the last of 6). n = 24 is no whole number of the
// wider kernels' column blocks; it is small because the aarch64 step under
// qemu pays for every product (72 of them here).
TEST(MixedMatmul, EveryTypeAndTransposeIsTheRoundedFloatProduct) {
  const Index m = 730, n = 24, k = 700;
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (float beta : {0.0f, 1.0f}) {
        View2<float> a("a", ta ? k : m, ta ? m : k), b("b", tb ? n : k, tb ? k : n);
        View2<float> c("c", m, n), want("want", m, n);
        View1<float> bias("bias", n);
        fill_uniform(a, 1);
        fill_uniform(b, 2);
        fill_uniform(c, 3);
        fill_uniform(bias, 4);
        const auto a16 = bf16_of(a);
        const auto b16 = bf16_of(b);
        const auto c16 = bf16_of(c);
        const Trans tra = ta ? Trans::Yes : Trans::No, trb = tb ? Trans::Yes : Trans::No;
        const std::string what = std::string("ta=") + (ta ? "T" : "N") + " tb=" + (tb ? "T" : "N") +
                                 " beta=" + std::to_string(beta);
        // The float32 reference, with the bias added in float.
        Kokkos::deep_copy(want, c);
        ops::mixed_matmul<float, float, float>(a, tra, b, trb, want, 1.0f, beta, bias);
        {
          View2<float> plain("plain", m, n);
          Kokkos::deep_copy(plain, c);
          ops::matmul<float>(a, tra, b, trb, plain, 1.0f, beta);
          const auto p = to_host(plain);
          const auto bh = to_host(bias);
          auto w = p;
          for (Index i = 0; i < m; ++i)
            for (Index j = 0; j < n; ++j) w[i * n + j] += bh[j];
          EXPECT_LT(relative_error(to_host(want), w), 1e-6) << what;
        }
        const auto reference = to_host(want);
        // bf16 results.
        View2<bf16> c_bbb("c_bbb", m, n), c_bfb("c_bfb", m, n), c_fbb("c_fbb", m, n),
            c_ffb("c_ffb", m, n);
        for (auto* out : {&c_bbb, &c_bfb, &c_fbb, &c_ffb}) Kokkos::deep_copy(*out, c16);
        ops::mixed_matmul<bf16, bf16, bf16>(a16, tra, b16, trb, c_bbb, 1.0f, beta, bias);
        ops::mixed_matmul<bf16, float, bf16>(a16, tra, b, trb, c_bfb, 1.0f, beta, bias);
        ops::mixed_matmul<float, bf16, bf16>(a, tra, b16, trb, c_fbb, 1.0f, beta, bias);
        ops::mixed_matmul<float, float, bf16>(a, tra, b, trb, c_ffb, 1.0f, beta, bias);
        expect_rounded(to_host(c_bbb), reference, what + " bf16 x bf16 -> bf16", float_slack(k));
        expect_rounded(to_host(c_bfb), reference, what + " bf16 x float -> bf16", float_slack(k));
        expect_rounded(to_host(c_fbb), reference, what + " float x bf16 -> bf16", float_slack(k));
        expect_rounded(to_host(c_ffb), reference, what + " float x float -> bf16", float_slack(k));
        // float results: no rounding at all.
        View2<float> c_bbf("c_bbf", m, n), c_bff("c_bff", m, n), c_fbf("c_fbf", m, n);
        for (auto* out : {&c_bbf, &c_bff, &c_fbf}) Kokkos::deep_copy(*out, c);
        ops::mixed_matmul<bf16, bf16, float>(a16, tra, b16, trb, c_bbf, 1.0f, beta, bias);
        ops::mixed_matmul<bf16, float, float>(a16, tra, b, trb, c_bff, 1.0f, beta, bias);
        ops::mixed_matmul<float, bf16, float>(a, tra, b16, trb, c_fbf, 1.0f, beta, bias);
        for (auto* out : {&c_bbf, &c_bff, &c_fbf})
          EXPECT_LT(relative_error(to_host(*out), reference), 1e-6) << what;
      }
}

TEST(MixedMatmul, NamesShapesThatDoNotMultiply) {
  View2<bf16> a("a", 4, 3), c("c", 4, 5);
  View2<float> b("b", 4, 5);
  expect_error<ShapeError>(
      [&] { ops::mixed_matmul<bf16, float, bf16>(a, Trans::No, b, Trans::No, c); },
      {"mixed_matmul", "op(A) is [4, 3]", "op(B) is [4, 5]", "[4, 5]"});
  View1<float> bias("bias", 4);
  View2<float> b2("b2", 3, 5);
  expect_error<ShapeError>(
      [&] { ops::mixed_matmul<bf16, float, bf16>(a, Trans::No, b2, Trans::No, c, 1, 0, bias); },
      {"bias"});
}

// y = x W + b from bf16 x; dx = dy W^T into bf16; dW += x^T dy and db into
// float32, as the float32 op computes them from the same values.
TEST(Bf16Ops, LinearForwardAndBackward) {
  const KeepFloatWeights keep;  // the bounds below take the weight as stored
  const Index n = 1500, in = 96, out = 160;
  View2<float> x("x", n, in), w("w", in, out), dy("dy", n, out), y("y", n, out), dx("dx", n, in);
  View2<float> dw("dw", in, out), dw16("dw16", in, out);
  View1<float> b("b", out), db("db", out), db16("db16", out);
  fill_uniform(x, 1);
  fill_uniform(w, 2);
  // bf16 values for the weight too: every path's products are then exact in
  // float32, and only the order of the sums differs.
  round_to_bf16(w);
  fill_uniform(b, 3);
  fill_uniform(dy, 4);
  fill_uniform(dw, 5);
  Kokkos::deep_copy(dw16, dw);
  const auto x16 = bf16_of(x);
  const auto dy16 = bf16_of(dy);
  View2<bf16> y16("y16", n, out), dx16("dx16", n, in);
  ops::linear_forward<float>(x, w, b, y);
  ops::linear_forward<bf16>(x16, w, b, y16);
  expect_rounded(to_host(y16), to_host(y), "linear y", float_slack(in));
  ops::linear_backward<float>(x, w, dy, dx, dw, db);
  ops::linear_backward<bf16>(x16, w, dy16, dx16, dw16, db16);
  expect_rounded(to_host(dx16), to_host(dx), "linear dx", float_slack(out));
  EXPECT_LT(relative_error(to_host(dw16), to_host(dw)), weight_gradient_slack());
  EXPECT_LT(relative_error(to_host(db16), to_host(db)), 1e-6);
}

// A layer's projections of one input (q, k, v): y_i = x W_i; dx = beta dx +
// sum_i dy_i W_i^T (summed in float32, rounded once); dW_i += x^T dy_i. Rows
// span several panels (2^18 / (2 * 96 + 3 * 64) = 682 rows each).
TEST(Bf16Ops, ProjectionsOfOneInput) {
  const Index n = 1500, in = 96, out = 64;
  View2<float> x("x", n, in), dx("dx", n, in);
  fill_uniform(x, 1);
  fill_uniform(dx, 2);
  const auto x16 = bf16_of(x);
  const auto dx16 = bf16_of(dx);
  std::vector<View2<float>> w, dy, y, dw, dw16;
  std::vector<View2<bf16>> dy16, y16;
  for (int i = 0; i < 3; ++i) {
    w.emplace_back("w", in, out);
    dy.emplace_back("dy", n, out);
    y.emplace_back("y", n, out);
    y16.emplace_back("y16", n, out);
    dw.emplace_back("dw", in, out);
    dw16.emplace_back("dw16", in, out);
    fill_uniform(w[i], 10 + i);
    round_to_bf16(w[i]);  // as in LinearForwardAndBackward
    fill_uniform(dy[i], 20 + i);
    fill_uniform(dw[i], 30 + i);
    Kokkos::deep_copy(dw16[i], dw[i]);
    dy16.push_back(bf16_of(dy[i]));
  }
  const std::vector<In2<float>> weights(w.begin(), w.end());
  ops::projections_forward<float>(x, weights, y);
  ops::projections_forward<bf16>(x16, weights, y16);
  for (int i = 0; i < 3; ++i)
    expect_rounded(to_host(y16[i]), to_host(y[i]), "projection " + std::to_string(i),
                   float_slack(in));
  ops::projections_backward<float>(x, weights, {dy[0], dy[1], dy[2]}, dx, 0.5, dw);
  ops::projections_backward<bf16>(x16, weights, {dy16[0], dy16[1], dy16[2]}, dx16, 0.5, dw16);
  expect_rounded(to_host(dx16), to_host(dx), "dx", float_slack(3 * out));
  for (int i = 0; i < 3; ++i)
    EXPECT_LT(relative_error(to_host(dw16[i]), to_host(dw[i])), weight_gradient_slack()) << i;
  // float: the same as one matmul per product, in order.
  View2<float> expect("expect", n, in);
  fill_uniform(expect, 2);
  round_to_bf16(expect);
  ops::matmul<float>(dy[0], Trans::No, w[0], Trans::Yes, expect, 1.0f, 0.5f);
  ops::matmul<float>(dy[1], Trans::No, w[1], Trans::Yes, expect, 1.0f, 1.0f);
  ops::matmul<float>(dy[2], Trans::No, w[2], Trans::Yes, expect, 1.0f, 1.0f);
  EXPECT_EQ(to_host(dx), to_host(expect));
}

TEST(Bf16Ops, LayerNormForwardAndBackward) {
  const Index n = 300, d = 96;
  View2<float> x("x", n, d), y("y", n, d), dy("dy", n, d), dx("dx", n, d);
  View1<float> g("g", d), beta("beta", d), mean("mean", n), rstd("rstd", n);
  View1<float> mean16("mean16", n), rstd16("rstd16", n);
  View1<float> dg("dg", d), dbeta("dbeta", d), dg16("dg16", d), dbeta16("dbeta16", d);
  fill_uniform(x, 1, -2, 3);
  fill_uniform(g, 2, 0.5, 1.5);
  fill_uniform(beta, 3);
  fill_uniform(dy, 4);
  const auto x16 = bf16_of(x);
  const auto dy16 = bf16_of(dy);
  View2<bf16> y16("y16", n, d), dx16("dx16", n, d);
  ops::layer_norm_forward<float>(x, g, beta, 1e-5f, y, mean, rstd);
  ops::layer_norm_forward<bf16>(x16, g, beta, 1e-5f, y16, mean16, rstd16);
  expect_rounded(to_host(y16), to_host(y), "layer norm y", float_slack(d));
  // The statistics are float32 and computed from the same values.
  EXPECT_LT(relative_error(to_host(mean16), to_host(mean)), 1e-6);
  EXPECT_LT(relative_error(to_host(rstd16), to_host(rstd)), 1e-6);
  ops::layer_norm_backward<float>(x, g, mean, rstd, dy, dx, dg, dbeta);
  ops::layer_norm_backward<bf16>(x16, g, mean16, rstd16, dy16, dx16, dg16, dbeta16);
  expect_rounded(to_host(dx16), to_host(dx), "layer norm dx", float_slack(d));
  EXPECT_LT(relative_error(to_host(dg16), to_host(dg)), 1e-6);
  EXPECT_LT(relative_error(to_host(dbeta16), to_host(dbeta)), 1e-6);
}

TEST(Bf16Ops, EmbeddingsAndPositions) {
  const Index vocab = 50, d = 24, length = 20, batch = 3, n = batch * length;
  View2<float> table("table", vocab, d), e1("e1", 4, 10), e2("e2", 5, 14);
  View2<float> learned("learned", length, d);
  fill_uniform(table, 1);
  fill_uniform(e1, 2);
  fill_uniform(e2, 3);
  fill_uniform(learned, 4);
  std::vector<int> ids_host(n);
  for (Index i = 0; i < n; ++i) ids_host[i] = int((i * 7 + 3) % vocab);
  const auto ids = device_ints(ids_host);
  View2<float> y("y", n, d);
  View2<bf16> y16("y16", n, d);
  ops::token_embedding_forward<float>(table, ids, true, y);
  ops::token_embedding_forward<bf16>(table, ids, true, y16);
  expect_rounded(to_host(y16), to_host(y), "token embedding");
  round_to_bf16(y);
  copy_to_bf16(y, y16);
  View2<float> z("z", n, d);
  View2<bf16> z16("z16", n, d);
  ops::sinusoidal_positions_forward<float>(y, length, 2, z);
  ops::sinusoidal_positions_forward<bf16>(y16, length, 2, z16);
  expect_rounded(to_host(z16), to_host(z), "sinusoidal positions");
  ops::learned_positions_forward<float>(y, learned, length, 0, z);
  ops::learned_positions_forward<bf16>(y16, learned, length, 0, z16);
  expect_rounded(to_host(z16), to_host(z), "learned positions");
  ops::axial_positions_forward<float>(y, e1, e2, length, 0, z);
  ops::axial_positions_forward<bf16>(y16, e1, e2, length, 0, z16);
  expect_rounded(to_host(z16), to_host(z), "axial positions");
  // Gradients into float32 tables from bf16 dy.
  View2<float> dy("dy", n, d);
  fill_uniform(dy, 5);
  const auto dy16 = bf16_of(dy);
  View2<float> dt("dt", vocab, d), dt16("dt16", vocab, d), dl("dl", length, d),
      dl16("dl16", length, d);
  View2<float> de1("de1", 4, 10), de2("de2", 5, 14), de1_16("de1_16", 4, 10),
      de2_16("de2_16", 5, 14);
  ops::token_embedding_backward<float>(ids, dy, true, dt);
  ops::token_embedding_backward<bf16>(ids, dy16, true, dt16);
  ops::learned_positions_backward<float>(dy, length, 0, dl);
  ops::learned_positions_backward<bf16>(dy16, length, 0, dl16);
  ops::axial_positions_backward<float>(dy, length, 0, de1, de2);
  ops::axial_positions_backward<bf16>(dy16, length, 0, de1_16, de2_16);
  EXPECT_LT(relative_error(to_host(dt16), to_host(dt)), 1e-6);
  EXPECT_LT(relative_error(to_host(dl16), to_host(dl)), 1e-6);
  EXPECT_LT(relative_error(to_host(de1_16), to_host(de1)), 1e-6);
  EXPECT_LT(relative_error(to_host(de2_16), to_host(de2)), 1e-6);
}

TEST(Bf16Ops, ActivationsDropoutAndAxpby) {
  const Index n = 4000;
  View1<float> x("x", n), dy("dy", n), y("y", n), dx("dx", n);
  fill_uniform(x, 1, -3, 3);
  fill_uniform(dy, 2);
  const auto x16 = bf16_of(x);
  const auto dy16 = bf16_of(dy);
  View1<bf16> y16("y16", n), dx16("dx16", n);
  for (auto kind : {ops::Activation::ReLU, ops::Activation::GELU}) {
    const std::string name = kind == ops::Activation::ReLU ? "relu" : "gelu";
    ops::activation_forward<float>(kind, x, y);
    ops::activation_forward<bf16>(kind, x16, y16);
    expect_rounded(to_host(y16), to_host(y), name + " forward", 1e-7);
    ops::activation_backward<float>(kind, x, dy, dx);
    ops::activation_backward<bf16>(kind, x16, dy16, dx16);
    expect_rounded(to_host(dx16), to_host(dx), name + " backward", 1e-7);
  }
  const RandomKey key{5, 6};
  ops::dropout_forward<float>(x, 0.3, key, 10, y);
  ops::dropout_forward<bf16>(x16, 0.3, key, 10, y16);
  expect_rounded(to_host(y16), to_host(y), "dropout", 0.0);
  round_to_bf16(y);  // the same y on both sides
  copy_to_bf16(y, y16);
  ops::axpby<float>(0.75f, x, -2.0f, y);
  ops::axpby<bf16>(0.75f, x16, -2.0f, y16);
  expect_rounded(to_host(y16), to_host(y), "axpby", 1e-7);
}

}  // namespace
}  // namespace reformer
