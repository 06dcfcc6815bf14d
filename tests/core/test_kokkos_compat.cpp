#include "reformer/core/error.hpp"
#include "reformer/core/kokkos_compat.hpp"
#include "reformer/core/types.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace reformer {
namespace {

// Device lambdas cannot live inside a TEST body (nvcc forbids extended lambdas
// in private member functions), so kernels are free functions.
constexpr int kMathFunctions = 12;

View1<double> evaluate_compat_math(double x) {
  View1<double> out("out", kMathFunctions);
  Kokkos::parallel_for(
      "compat_math", range(1), KOKKOS_LAMBDA(Index) {
        out(0) = compat::exp(x);
        out(1) = compat::log(x);
        out(2) = compat::sqrt(x);
        out(3) = compat::tanh(x);
        out(4) = compat::erf(x);
        out(5) = compat::pow(x, 2.5);
        out(6) = compat::fabs(-x);
        out(7) = compat::fmax(x, 0.3);
        out(8) = compat::fmin(x, 0.3);
        out(9) = compat::cos(x);
        out(10) = compat::sin(x);
        out(11) = compat::isfinite(x / 0.0) ? 1.0 : 0.0;
      });
  return out;
}

int fill_fence_and_sum(Index n) {
  View1<int> v("v", n);
  Kokkos::parallel_for(
      "fill", range(n), KOKKOS_LAMBDA(Index i) { v(i) = static_cast<int>(i); });
  compat::fence("after fill");
  int sum = 0;
  Kokkos::parallel_reduce(
      "sum", range(n), KOKKOS_LAMBDA(Index i, int& acc) { acc += v(i); }, sum);
  return sum;
}

// Every compat math function, evaluated in a kernel, against the host std:: version.
TEST(KokkosCompat, MathMatchesStdOnDevice) {
  const double x = 0.7;
  auto host = Kokkos::create_mirror_view(evaluate_compat_math(x));
  Kokkos::deep_copy(host, evaluate_compat_math(x));
  const double expected[kMathFunctions] = {
      std::exp(x), std::log(x), std::sqrt(x), std::tanh(x), std::erf(x), std::pow(x, 2.5),
      x,           x,           0.3,          std::cos(x),  std::sin(x), 0.0};
  for (int i = 0; i < kMathFunctions; ++i)
    EXPECT_NEAR(host(i), expected[i], 1e-14) << "function " << i;
}

TEST(KokkosCompat, VersionStringMatchesMacro) {
  const std::string v = compat::kokkos_version_string();
  EXPECT_EQ(v, std::to_string(KOKKOS_VERSION / 10000) + "." +
                   std::to_string(KOKKOS_VERSION / 100 % 100) + "." +
                   std::to_string(KOKKOS_VERSION % 100));
  EXPECT_GE(KOKKOS_VERSION, 30400);
}

TEST(KokkosCompat, LabelledFenceCompletesWork) {
  EXPECT_EQ(fill_fence_and_sum(1000), 999 * 1000 / 2);
}

TEST(Errors, RequireThrowsTheRequestedTypeWithTheMessage) {
  EXPECT_NO_THROW(require<ShapeError>(true, "never"));
  try {
    require<ShapeError>(false, "op: length ", 100, " is not a multiple of chunk ", 64);
    FAIL() << "require did not throw";
  } catch (const ShapeError& e) {
    EXPECT_STREQ(e.what(), "op: length 100 is not a multiple of chunk 64");
  }
  EXPECT_THROW(require<ConfigError>(false, "x"), Error);
}

}  // namespace
}  // namespace reformer
