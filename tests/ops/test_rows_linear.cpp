// ops::rows_linear (a decoding step's products over a few rows in one launch)
// against plain loops in double, and against the vendor composition it
// replaces (layer norm, products, bias, activation and residual) in float.
// The op is for decoding only: it has no backward, so no gradient check.
#include "reformer/core/error.hpp"
#include "reformer/ops/layer_norm.hpp"
#include "reformer/ops/linear.hpp"
#include "reformer/ops/rows_linear.hpp"
#include "support/checks.hpp"
#include "support/gradcheck.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <vector>

namespace reformer {
namespace {

using namespace reformer::testing;

// out = f(LN(x) W + b) + beta out, plain loops in double on host vectors.
std::vector<double> reference(const std::vector<double>& x, Index rows, Index in, bool normed,
                              const std::vector<double>& gamma, const std::vector<double>& beta,
                              double eps, const std::vector<double>& w, Index width,
                              const std::vector<double>& bias, std::optional<ops::Activation> f,
                              double residual, std::vector<double> out) {
  for (Index r = 0; r < rows; ++r) {
    std::vector<double> xr(x.begin() + r * in, x.begin() + (r + 1) * in);
    if (normed) {
      double mean = 0, var = 0;
      for (double v : xr) mean += v / double(in);
      for (double v : xr) var += (v - mean) * (v - mean) / double(in);
      for (Index k = 0; k < in; ++k)
        xr[k] = (xr[k] - mean) / std::sqrt(var + eps) * gamma[k] + beta[k];
    }
    for (Index j = 0; j < width; ++j) {
      double v = bias.empty() ? 0.0 : bias[j];
      for (Index k = 0; k < in; ++k) v += xr[k] * w[k * width + j];
      if (f == ops::Activation::ReLU) v = std::max(v, 0.0);
      if (f == ops::Activation::GELU) v = 0.5 * v * (1 + std::erf(v / std::sqrt(2.0)));
      double& o = out[r * width + j];
      o = residual == 0 ? v : v + residual * o;
    }
  }
  return out;
}

double max_abs_difference(const std::vector<double>& a, const std::vector<double>& b) {
  double worst = a.size() == b.size() ? 0.0 : INFINITY;
  for (std::size_t i = 0; i < a.size() && i < b.size(); ++i)
    worst = std::max(worst, std::abs(a[i] - b[i]));
  return worst;
}

// Every row count the kernel dispatches on (1, up to 4, up to 16), inputs and
// outputs that are not multiples of its 32 columns or 8 splits, one to three
// weights with and without bias, each epilogue.
TEST(RowsLinear, MatchesPlainLoopsForEveryRowCountAndEpilogue) {
  const Index in = 37;
  const std::vector<Index> widths = {5, 33, 70};
  View2<double> w0("w0", in, widths[0]), w1("w1", in, widths[1]), w2("w2", in, widths[2]);
  View1<double> b1("b1", widths[1]), b2("b2", widths[2]);
  View1<double> gamma("gamma", in), beta("beta", in);
  fill_uniform(w0, 1);
  fill_uniform(w1, 2);
  fill_uniform(w2, 3);
  fill_uniform(b1, 4);
  fill_uniform(b2, 5);
  fill_uniform(gamma, 6, 0.5, 1.5);
  fill_uniform(beta, 7);
  const std::vector<View2<double>> weights = {w0, w1, w2};
  const std::vector<View1<double>> biases = {View1<double>(), b1, b2};
  const std::optional<ops::Activation> activations[] = {std::nullopt, ops::Activation::ReLU,
                                                        ops::Activation::GELU};
  int cases = 0;
  for (const Index rows : {Index(1), Index(3), Index(4), Index(5), Index(16)})
    for (const bool normed : {false, true})
      for (const auto& f : activations)
        for (const double residual : {0.0, 1.0, -0.5})
          for (const int count : {1, 3}) {
            SCOPED_TRACE("rows " + std::to_string(rows) + " normed " + std::to_string(normed) +
                         " activation " + std::to_string(f ? int(*f) : -1) + " residual " +
                         std::to_string(residual) + " products " + std::to_string(count));
            View2<double> x("x", rows, in);
            fill_uniform(x, 10 + std::uint64_t(rows), -2.0, 3.0);
            std::vector<View2<double>> outs;
            std::vector<ops::RowProduct<double>> products;
            std::vector<std::vector<double>> before;
            for (int i = 0; i < count; ++i) {
              const int p = count == 1 ? 2 : i;
              outs.emplace_back("out", rows, widths[std::size_t(p)]);
              fill_uniform(outs.back(), 20 + std::uint64_t(i));
              before.push_back(to_host(outs.back()));
              products.push_back({weights[std::size_t(p)], biases[std::size_t(p)], outs.back()});
            }
            ops::RowNorm<double> norm;
            if (normed) norm = {gamma, beta, 1e-5};
            ops::rows_linear<double>(x, norm, products, f, residual);
            for (int i = 0; i < count; ++i) {
              const int p = count == 1 ? 2 : i;
              const auto bias = biases[std::size_t(p)].extent(0) > 0
                                    ? to_host(biases[std::size_t(p)])
                                    : std::vector<double>();
              const auto expected =
                  reference(to_host(x), rows, in, normed, to_host(gamma), to_host(beta), 1e-5,
                            to_host(weights[std::size_t(p)]), widths[std::size_t(p)], bias, f,
                            residual, before[std::size_t(i)]);
              EXPECT_LT(max_abs_difference(to_host(outs[std::size_t(i)]), expected), 1e-12)
                  << "product " << i;
            }
            ++cases;
          }
  EXPECT_EQ(cases, 5 * 2 * 3 * 3 * 2);
}

// With beta 0 the output is not read: NaN there stays out of the result.
TEST(RowsLinear, BetaZeroDoesNotReadTheOutput) {
  View2<double> x("x", 2, 40), w("w", 40, 9), out("out", 2, 9);
  fill_uniform(x, 1);
  fill_uniform(w, 2);
  Kokkos::deep_copy(out, std::numeric_limits<double>::quiet_NaN());
  ops::rows_linear<double>(x, {}, {{w, {}, out}}, std::nullopt, 0.0);
  const auto expected = reference(to_host(x), 2, 40, false, {}, {}, 0, to_host(w), 9, {},
                                  std::nullopt, 0.0, std::vector<double>(18, 0.0));
  EXPECT_LT(max_abs_difference(to_host(out), expected), 1e-12);
}

// The vendor route it replaces in a decoding step, in float: layer norm, then
// the product, its bias and activation (linear_activation_forward), then the
// second product with its bias and the residual (linear_residual_forward).
TEST(RowsLinear, EqualsTheLayerNormAndVendorProductsInFloat) {
  const Index rows = 3, d = 64, f = 128;
  View2<float> x("x", rows, d), w1("w1", d, f), w2("w2", f, d);
  View1<float> b1("b1", f), b2("b2", d), gamma("gamma", d), beta("beta", d);
  fill_uniform(x, 1, -2.0, 2.0);
  fill_uniform(w1, 2, -0.2, 0.2);
  fill_uniform(w2, 3, -0.2, 0.2);
  fill_uniform(b1, 4);
  fill_uniform(b2, 5);
  fill_uniform(gamma, 6, 0.5, 1.5);
  fill_uniform(beta, 7);
  View2<float> y_vendor("y_vendor", rows, d), y_fused("y_fused", rows, d);
  fill_uniform(y_vendor, 8);
  Kokkos::deep_copy(y_fused, y_vendor);
  {
    View2<float> normed("normed", rows, d), hidden("hidden", rows, f), scratch("scratch", rows, d);
    View1<float> mean("mean", rows), rstd("rstd", rows);
    ops::layer_norm_forward<float>(x, gamma, beta, 1e-5f, normed, mean, rstd);
    ops::linear_activation_forward<float>(normed, w1, b1, ops::Activation::GELU, hidden, hidden);
    ops::linear_residual_forward<float>(hidden, w2, b2, 1.0f, scratch, y_vendor);
  }
  View2<float> hidden("hidden", rows, f);
  ops::rows_linear<float>(x, {gamma, beta, 1e-5f}, {{w1, b1, hidden}}, ops::Activation::GELU, 0);
  ops::rows_linear<float>(hidden, {}, {{w2, b2, y_fused}}, std::nullopt, 1.0f);
  const auto fused = to_host(y_fused), vendor = to_host(y_vendor);
  EXPECT_LT(max_abs_difference(fused, vendor), 2e-5);
  EXPECT_GT(max_abs_difference(fused, to_host(x)), 0.1) << "the sums were not computed";
}

TEST(RowsLinear, RefusesShapesItCannotTakeByName) {
  View2<double> x("x", 2, 8), w("w", 8, 4), out("out", 2, 4);
  View2<double> many("many", ops::kRowsLinearMaxRows + 1, 8);
  View2<double> many_out("many_out", ops::kRowsLinearMaxRows + 1, 4);
  expect_error<ShapeError>(
      [&] {
        ops::rows_linear<double>(many, {}, {{w, {}, many_out}}, std::nullopt, 0.0);
      },
      {"rows_linear", "17 rows", "1 to 16"});
  View2<double> w_short("w_short", 7, 4);
  expect_error<ShapeError>(
      [&] {
        ops::rows_linear<double>(x, {}, {{w_short, {}, out}}, std::nullopt, 0.0);
      },
      {"rows_linear", "weight 0"});
  View2<double> out_wrong("out_wrong", 2, 5);
  expect_error<ShapeError>(
      [&] {
        ops::rows_linear<double>(x, {}, {{w, {}, out_wrong}}, std::nullopt, 0.0);
      },
      {"output 0", "[2, 4]"});
  View1<double> bias_wrong("bias_wrong", 3);
  expect_error<ShapeError>(
      [&] {
        ops::rows_linear<double>(x, {}, {{w, bias_wrong, out}}, std::nullopt, 0.0);
      },
      {"rows_linear", "bias"});
  View2<double> square("square", 8, 8), in_place("in_place", 2, 8);
  expect_error<ShapeError>(
      [&] {
        ops::rows_linear<double>(in_place, {}, {{square, {}, in_place}}, std::nullopt, 0.0);
      },
      {"output 0", "overlaps x"});
  // An output inside x's rows (other teams would read what one writes).
  const View2<double> inside(in_place.data() + 4, 2, 4);
  expect_error<ShapeError>(
      [&] {
        ops::rows_linear<double>(in_place, {}, {{w, {}, inside}}, std::nullopt, 0.0);
      },
      {"output 0", "overlaps x"});
  expect_error<ShapeError>(
      [&] {
        ops::rows_linear<double>(x, {}, {{w, {}, out}, {w, {}, out}, {w, {}, out}, {w, {}, out}},
                                 std::nullopt, 0.0);
      },
      {"4 products", "1 to 3"});
  View1<double> gamma_wrong("gamma_wrong", 7), beta("beta", 8);
  expect_error<ShapeError>(
      [&] {
        ops::rows_linear<double>(x, {gamma_wrong, beta, 1e-5}, {{w, {}, out}}, std::nullopt, 0.0);
      },
      {"rows_linear", "gamma"});
}

}  // namespace
}  // namespace reformer
