#include "reformer/core/error.hpp"
#include "reformer/ops/activations.hpp"
#include "reformer/ops/dropout.hpp"
#include "reformer/ops/softmax.hpp"
#include "support/gradcheck.hpp"

#include <gtest/gtest.h>

#include <cmath>

namespace reformer {
namespace {

using namespace reformer::testing;

std::vector<double> reference_softmax(const std::vector<double>& x, Index n, Index d, bool log) {
  std::vector<double> y(x.size());
  for (Index i = 0; i < n; ++i) {
    double m = -INFINITY, s = 0;
    for (Index j = 0; j < d; ++j) m = std::max(m, x[i * d + j]);
    for (Index j = 0; j < d; ++j) s += std::exp(x[i * d + j] - m);
    for (Index j = 0; j < d; ++j)
      y[i * d + j] = log ? x[i * d + j] - m - std::log(s) : std::exp(x[i * d + j] - m) / s;
  }
  return y;
}

class Softmax : public ::testing::TestWithParam<bool> {};

TEST_P(Softmax, ForwardAndGradient) {
  const bool log = GetParam();
  const Index n = 5, d = 9;
  View2<double> x("x", n, d), y("y", n, d), r("r", n, d), dx("dx", n, d);
  fill_uniform(x, 1, -30, 30);  // large range: exercises the max subtraction
  fill_uniform(r, 2);
  auto forward = [&] {
    log ? ops::log_softmax_forward<double>(x, y) : ops::softmax_forward<double>(x, y);
  };
  forward();
  EXPECT_LT(relative_error(to_host(y), reference_softmax(to_host(x), n, d, log)), 1e-13);
  log ? ops::log_softmax_backward<double>(y, r, dx) : ops::softmax_backward<double>(y, r, dx);
  fill_uniform(x, 1, -3, 3);  // a moderate range for finite differences
  forward();
  log ? ops::log_softmax_backward<double>(y, r, dx) : ops::softmax_backward<double>(y, r, dx);
  EXPECT_LT(gradient_error(x, dx,
                           [&] {
                             forward();
                             return dot(y, r);
                           }),
            1e-6);
}
INSTANTIATE_TEST_SUITE_P(SoftmaxAndLogSoftmax, Softmax, ::testing::Bool());

TEST(Softmax, RejectsShapeMismatch) {
  View2<double> x("x", 3, 4), y("y", 3, 5);
  EXPECT_THROW(ops::softmax_forward<double>(x, y), ShapeError);
}

class Activations : public ::testing::TestWithParam<ops::Activation> {};

TEST_P(Activations, ForwardAndGradient) {
  const ops::Activation kind = GetParam();
  const Index n = 257;
  View1<double> x("x", n), y("y", n), r("r", n), dx("dx", n);
  fill_uniform(x, 3, -4, 4);
  fill_uniform(r, 4);
  ops::activation_forward<double>(kind, x, y);
  const auto hx = to_host(x);
  std::vector<double> expected(n);
  for (Index i = 0; i < n; ++i)
    expected[i] = kind == ops::Activation::ReLU
                      ? std::max(hx[i], 0.0)
                      : 0.5 * hx[i] * (1 + std::erf(hx[i] / std::sqrt(2.0)));
  EXPECT_LT(relative_error(to_host(y), expected), 1e-14);
  ops::activation_backward<double>(kind, x, r, dx);
  EXPECT_LT(gradient_error(x, dx,
                           [&] {
                             ops::activation_forward<double>(kind, x, y);
                             return dot(y, r);
                           }),
            1e-6);
}
INSTANTIATE_TEST_SUITE_P(ReLUAndGELU, Activations,
                         ::testing::Values(ops::Activation::ReLU, ops::Activation::GELU));

TEST(Activations, ParsesNamesAndRejectsUnknown) {
  EXPECT_EQ(ops::parse_activation("gelu"), ops::Activation::GELU);
  EXPECT_EQ(ops::parse_activation("relu"), ops::Activation::ReLU);
  try {
    ops::parse_activation("swish");
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("'swish'"), std::string::npos);
  }
}

TEST(Dropout, MaskRateScaleAndGradient) {
  const Index n = 20000;
  const double rate = 0.3;
  const RandomKey key{5, stream_id(1, 2)};
  View1<double> x("x", n), y("y", n), r("r", n), dx("dx", n);
  fill_uniform(x, 5, 0.5, 1.5);  // never zero, so y == 0 means dropped
  fill_uniform(r, 6);
  ops::dropout_forward<double>(x, rate, key, 0, y);
  const auto hx = to_host(x), hy = to_host(y);
  Index dropped = 0;
  for (Index i = 0; i < n; ++i) {
    const bool keep = ops::dropout_keeps(key, i, rate);
    dropped += !keep;
    ASSERT_EQ(hy[i], keep ? hx[i] * (1.0 / (1 - rate)) : 0.0) << i;
  }
  EXPECT_NEAR(double(dropped) / n, rate, 0.015);
  ops::dropout_backward<double>(r, rate, key, 0, dx);
  EXPECT_LT(gradient_error(x, dx,
                           [&] {
                             ops::dropout_forward<double>(x, rate, key, 0, y);
                             return dot(y, r);
                           }),
            1e-6);
}

TEST(Dropout, ChunkOffsetsReproduceTheWholeMask) {
  const Index n = 1000, half = 400;
  const RandomKey key{7, 3};
  View1<double> x("x", n), whole("whole", n);
  fill_uniform(x, 7, 0.5, 1.5);
  ops::dropout_forward<double>(x, 0.5, key, 0, whole);
  auto first = Kokkos::subview(x, std::make_pair(Index(0), half));
  auto second = Kokkos::subview(x, std::make_pair(half, n));
  View1<double> y1("y1", half), y2("y2", n - half);
  ops::dropout_forward<double>(first, 0.5, key, 0, y1);
  ops::dropout_forward<double>(second, 0.5, key, half, y2);
  auto joined = to_host(y1);
  const auto tail = to_host(y2);
  joined.insert(joined.end(), tail.begin(), tail.end());
  EXPECT_EQ(joined, to_host(whole));
}

TEST(Dropout, RejectsInvalidRate) {
  View1<double> x("x", 4), y("y", 4);
  for (double bad : {-0.1, 1.0, double(NAN)}) {
    try {
      ops::dropout_forward<double>(x, bad, {1, 1}, 0, y);
      FAIL() << bad;
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("must be in [0, 1)"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace reformer
