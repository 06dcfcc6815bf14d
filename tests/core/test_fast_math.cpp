#include "reformer/core/fast_math.hpp"
#include "reformer/core/types.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace reformer {
namespace {

template <class T>
std::vector<T> fast_exp_on_device(const std::vector<T>& xs) {
  View1<T> v("v", xs.size());
  auto host = Kokkos::create_mirror_view(v);
  for (size_t i = 0; i < xs.size(); ++i) host(i) = xs[i];
  Kokkos::deep_copy(v, host);
  Kokkos::parallel_for(
      "fast_exp", range(xs.size()), KOKKOS_LAMBDA(Index i) { v(i) = fast_exp(v(i)); });
  Kokkos::deep_copy(host, v);
  return std::vector<T>(host.data(), host.data() + host.size());
}

template <class T>
void check_relative_accuracy(double tolerance) {
  std::vector<T> xs;
  for (double x = -80; x <= 80; x += 0.0137) xs.push_back(T(x));
  const auto got = fast_exp_on_device(xs);
  double worst = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    const double ref = std::exp(double(xs[i]));
    worst = std::max(worst, std::fabs(got[i] - ref) / ref);
  }
  EXPECT_LT(worst, tolerance);
}

TEST(FastExp, FloatIsAccurateToAFewUlps) { check_relative_accuracy<float>(5e-7); }
TEST(FastExp, DoubleIsAccurateToAFewUlps) { check_relative_accuracy<double>(1e-14); }

TEST(FastExp, UnderflowIsZeroAndOneIsExact) {
  const auto f = fast_exp_on_device<float>({-1e9f, -100.0f, 0.0f});
  EXPECT_EQ(f[0], 0.0f);
  EXPECT_EQ(f[1], 0.0f);
  EXPECT_EQ(f[2], 1.0f);
  const auto d = fast_exp_on_device<double>({-1e9, -800.0, 0.0, -100.0});
  EXPECT_EQ(d[0], 0.0);
  EXPECT_EQ(d[1], 0.0);
  EXPECT_EQ(d[2], 1.0);
  EXPECT_NEAR(d[3] / std::exp(-100.0), 1.0, 1e-14);
}

// exp(NaN) is NaN, with no undefined conversion of NaN to an integer on the way
// (UBSan checks that in the Serial build): attention kernels may meet NaN inputs.
TEST(FastExp, NanStaysNan) {
  const auto f = fast_exp_on_device<float>({std::nanf(""), 0.0f});
  EXPECT_TRUE(std::isnan(f[0]));
  EXPECT_EQ(f[1], 1.0f);
  const auto d = fast_exp_on_device<double>({std::nan(""), 0.0});
  EXPECT_TRUE(std::isnan(d[0]));
  EXPECT_EQ(d[1], 1.0);
}

}  // namespace
}  // namespace reformer
