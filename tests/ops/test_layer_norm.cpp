#include "reformer/core/error.hpp"
#include "reformer/core/memory_tracker.hpp"
#include "reformer/ops/layer_norm.hpp"
#include "support/gradcheck.hpp"
#include "support/kernel_settings.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

namespace reformer {
namespace {

using namespace reformer::testing;

struct LayerNormCase {
  static constexpr Index n = 7, d = 13;
  static constexpr double eps = 1e-5;
  View2<double> x{"x", n, d}, y{"y", n, d}, dy{"dy", n, d}, dx{"dx", n, d};
  View1<double> gamma{"gamma", d}, beta{"beta", d}, mean{"mean", n}, rstd{"rstd", n};
  View1<double> dgamma{"dgamma", d}, dbeta{"dbeta", d};

  LayerNormCase() {
    fill_uniform(x, 1, -2, 3);
    fill_uniform(gamma, 2, 0.5, 1.5);
    fill_uniform(beta, 3);
    fill_uniform(dy, 4);
  }
  double loss() {
    ops::layer_norm_forward<double>(x, gamma, beta, eps, y, mean, rstd);
    return dot(y, dy);
  }
  void backward() {
    loss();
    Kokkos::deep_copy(dgamma, 0.0);
    Kokkos::deep_copy(dbeta, 0.0);
    ops::layer_norm_backward<double>(x, gamma, mean, rstd, dy, dx, dgamma, dbeta);
  }
};

TEST(LayerNorm, ForwardMatchesHostReference) {
  LayerNormCase c;
  c.loss();
  const auto x = to_host(c.x), g = to_host(c.gamma), b = to_host(c.beta), y = to_host(c.y);
  std::vector<double> expected(x.size());
  for (Index i = 0; i < c.n; ++i) {
    double mu = 0, var = 0;
    for (Index j = 0; j < c.d; ++j) mu += x[i * c.d + j] / c.d;
    for (Index j = 0; j < c.d; ++j) var += (x[i * c.d + j] - mu) * (x[i * c.d + j] - mu) / c.d;
    for (Index j = 0; j < c.d; ++j)
      expected[i * c.d + j] = (x[i * c.d + j] - mu) / std::sqrt(var + c.eps) * g[j] + b[j];
  }
  EXPECT_LT(relative_error(y, expected), 1e-13);
}

TEST(LayerNorm, GradientsMatchFiniteDifferences) {
  LayerNormCase c;
  c.backward();
  auto loss = [&] { return c.loss(); };
  EXPECT_LT(gradient_error(c.x, c.dx, loss), 1e-6);
  EXPECT_LT(gradient_error(c.gamma, c.dgamma, loss), 1e-6);
  EXPECT_LT(gradient_error(c.beta, c.dbeta, loss), 1e-6);
}

TEST(LayerNorm, ParameterGradientsAccumulate) {
  LayerNormCase c;
  c.backward();
  const auto once = to_host(c.dgamma);
  ops::layer_norm_backward<double>(c.x, c.gamma, c.mean, c.rstd, c.dy, c.dx, c.dgamma, c.dbeta);
  const auto twice = to_host(c.dgamma);
  for (size_t j = 0; j < once.size(); ++j) EXPECT_NEAR(twice[j], 2 * once[j], 1e-12);
}

// dgamma and dbeta over many rows (split across the threads of a team) against
// plain host sums in double, added to non-zero gradients; `d` features leave a
// partial last tile of features. Returns the larger relative error.
template <class T>
double parameter_gradient_error(Index n, Index d) {
  const T eps = T(1e-5);
  View2<T> x("x", n, d), y("y", n, d), dy("dy", n, d), dx("dx", n, d);
  View1<T> gamma("gamma", d), beta("beta", d), mean("mean", n), rstd("rstd", n);
  View1<T> dgamma("dgamma", d), dbeta("dbeta", d);
  fill_uniform(x, 31, -2, 3);
  fill_uniform(gamma, 32, 0.5, 1.5);
  fill_uniform(beta, 33);
  fill_uniform(dy, 34);
  fill_uniform(dgamma, 35);
  fill_uniform(dbeta, 36);
  const auto hx = to_host(x), hdy = to_host(dy);
  auto expected_dgamma = to_host(dgamma), expected_dbeta = to_host(dbeta);
  for (Index i = 0; i < n; ++i) {
    double mu = 0, var = 0;
    for (Index j = 0; j < d; ++j) mu += hx[i * d + j] / d;
    for (Index j = 0; j < d; ++j) var += (hx[i * d + j] - mu) * (hx[i * d + j] - mu) / d;
    const double r = 1 / std::sqrt(var + double(eps));
    for (Index j = 0; j < d; ++j) {
      expected_dgamma[j] += hdy[i * d + j] * (hx[i * d + j] - mu) * r;
      expected_dbeta[j] += hdy[i * d + j];
    }
  }
  ops::layer_norm_forward<T>(x, gamma, beta, eps, y, mean, rstd);
  ops::layer_norm_backward<T>(x, gamma, mean, rstd, dy, dx, dgamma, dbeta);
  return std::max(relative_error(to_host(dgamma), expected_dgamma),
                  relative_error(to_host(dbeta), expected_dbeta));
}

TEST(LayerNorm, ParameterGradientsOverManyRowsMatchHostSums) {
  for (const RowKernels kernels : {RowKernels::threads, RowKernels::lanes}) {
    const ScopedRowKernels scoped(kernels);
    const int k = int(kernels);
    EXPECT_LT(parameter_gradient_error<double>(3000, 45), 1e-13) << k;
    EXPECT_LT(parameter_gradient_error<float>(3000, 45), 1e-5) << k;
    EXPECT_LT(parameter_gradient_error<double>(1, 3), 1e-14) << k;
    // Row counts around the blocks of 64 rows and the lanes' groups of rows.
    for (const Index n : {63, 64, 65, 129, 200})
      EXPECT_LT(parameter_gradient_error<double>(n, 33), 1e-13) << k << " n " << n;
  }
}

// The backward pass is one launch, dgamma and dbeta included (the last block
// adds the blocks' sums), and a launch leaves nothing behind: three calls over
// many blocks add three times the first call's sums.
TEST(LayerNorm, BackwardIsOneLaunchAndRepeatsExactly) {
  const Index n = 1000, d = 45;
  View2<double> x("x", n, d), y("y", n, d), dy("dy", n, d), dx("dx", n, d);
  View1<double> gamma("gamma", d), beta("beta", d), mean("mean", n), rstd("rstd", n);
  fill_uniform(x, 51, -2, 3);
  fill_uniform(gamma, 52, 0.5, 1.5);
  fill_uniform(dy, 54);
  ops::layer_norm_forward<double>(x, gamma, beta, 1e-5, y, mean, rstd);
  auto& tracker = MemoryTracker::instance();
  for (const RowKernels kernels : {RowKernels::threads, RowKernels::lanes}) {
    const ScopedRowKernels scoped(kernels);
    View1<double> dgamma("dgamma", d), dbeta("dbeta", d);
    tracker.reset_launches();
    ops::layer_norm_backward<double>(x, gamma, mean, rstd, dy, dx, dgamma, dbeta);
    EXPECT_EQ(tracker.launches().ours(), 1) << int(kernels);
    const auto once_g = to_host(dgamma), once_b = to_host(dbeta);
    for (int call = 0; call < 2; ++call)
      ops::layer_norm_backward<double>(x, gamma, mean, rstd, dy, dx, dgamma, dbeta);
    const auto thrice_g = to_host(dgamma), thrice_b = to_host(dbeta);
    for (Index j = 0; j < d; ++j) {
      EXPECT_NEAR(thrice_g[j], 3 * once_g[j], 1e-10 * (1 + std::abs(once_g[j]))) << j;
      EXPECT_NEAR(thrice_b[j], 3 * once_b[j], 1e-10 * (1 + std::abs(once_b[j]))) << j;
    }
  }
}

// dx may be dy: in place, dx and the parameter gradients are those of a
// separate dx (each row's share of dgamma and dbeta reads dy before dx
// overwrites it; up to rounding: the compiler may take another version of a
// loop when its operands overlap).
TEST(LayerNorm, InPlaceBackwardGivesTheSameParameterGradients) {
  const Index n = 300, d = 40;
  View2<double> x("x", n, d), y("y", n, d), dy("dy", n, d), dx("dx", n, d), inout("inout", n, d);
  View1<double> gamma("gamma", d), beta("beta", d), mean("mean", n), rstd("rstd", n);
  fill_uniform(x, 61, -2, 3);
  fill_uniform(gamma, 62, 0.5, 1.5);
  fill_uniform(dy, 64);
  ops::layer_norm_forward<double>(x, gamma, beta, 1e-5, y, mean, rstd);
  for (const RowKernels kernels : {RowKernels::threads, RowKernels::lanes}) {
    const ScopedRowKernels scoped(kernels);
    View1<double> dgamma("dgamma", d), dbeta("dbeta", d), dgamma2("dgamma2", d),
        dbeta2("dbeta2", d);
    ops::layer_norm_backward<double>(x, gamma, mean, rstd, dy, dx, dgamma, dbeta);
    Kokkos::deep_copy(inout, dy);
    ops::layer_norm_backward<double>(x, gamma, mean, rstd, inout, inout, dgamma2, dbeta2);
    EXPECT_LT(relative_error(to_host(inout), to_host(dx)), 1e-14) << int(kernels);
    EXPECT_LT(relative_error(to_host(dgamma2), to_host(dgamma)), 1e-14) << int(kernels);
    EXPECT_LT(relative_error(to_host(dbeta2), to_host(dbeta)), 1e-14) << int(kernels);
  }
}

// Both row kernels (RowKernels: a thread per row, the host's; a row per group
// of vector lanes, the GPUs') give the same results up to the order of the
// sums: y, the row statistics, dx (also in place, dx = dy) and the parameter
// gradients, over a row count that leaves a partial team; and the lanes'
// gradients match finite differences.
template <class T>
void expect_row_kernels_agree(Index n, Index d, double tolerance) {
  using C = compute_t<T>;
  using P = param_t<T>;
  const C eps = C(1e-5);
  View2<T> x("x", n, d), dy("dy", n, d);
  View1<P> gamma("gamma", d), beta("beta", d);
  fill_uniform(x, 41, -2, 3);
  fill_uniform(gamma, 42, 0.5, 1.5);
  fill_uniform(beta, 43);
  fill_uniform(dy, 44);
  struct Result {
    std::vector<double> y, mean, rstd, dx, in_place, dgamma, dbeta;
  };
  auto run = [&](RowKernels kernels) {
    const ScopedRowKernels scoped(kernels);
    View2<T> y("y", n, d), dx("dx", n, d), inout("inout", n, d);
    View1<C> mean("mean", n), rstd("rstd", n);
    View1<P> dgamma("dgamma", d), dbeta("dbeta", d);
    ops::layer_norm_forward<T>(x, gamma, beta, eps, y, mean, rstd);
    ops::layer_norm_backward<T>(x, gamma, mean, rstd, dy, dx, dgamma, dbeta);
    Kokkos::deep_copy(inout, dy);
    ops::layer_norm_backward<T>(x, gamma, mean, rstd, inout, inout, dgamma, dbeta);
    return Result{to_host(y),     to_host(mean),   to_host(rstd), to_host(dx),
                  to_host(inout), to_host(dgamma), to_host(dbeta)};
  };
  const Result threads = run(RowKernels::threads), lanes = run(RowKernels::lanes);
  EXPECT_LT(relative_error(lanes.y, threads.y), tolerance);
  EXPECT_LT(relative_error(lanes.mean, threads.mean), tolerance);
  EXPECT_LT(relative_error(lanes.rstd, threads.rstd), tolerance);
  EXPECT_LT(relative_error(lanes.dx, threads.dx), tolerance);
  EXPECT_LT(relative_error(lanes.in_place, threads.dx), tolerance);
  EXPECT_LT(relative_error(lanes.dgamma, threads.dgamma), tolerance);
  EXPECT_LT(relative_error(lanes.dbeta, threads.dbeta), tolerance);
}

TEST(LayerNorm, RowKernelsAgree) {
  expect_row_kernels_agree<double>(7, 13, 1e-14);
  expect_row_kernels_agree<double>(1, 256, 1e-14);
  expect_row_kernels_agree<float>(41, 256, 1e-6);
  expect_row_kernels_agree<bf16>(9, 64, 1e-2);
  const ScopedRowKernels lanes(RowKernels::lanes);
  LayerNormCase c;
  c.backward();
  auto loss = [&] { return c.loss(); };
  EXPECT_LT(gradient_error(c.x, c.dx, loss), 1e-6);
  EXPECT_LT(gradient_error(c.gamma, c.dgamma, loss), 1e-6);
}

TEST(LayerNorm, RejectsBadShapesAndEps) {
  LayerNormCase c;
  View1<double> short_gamma("g", c.d - 1);
  try {
    ops::layer_norm_forward<double>(c.x, short_gamma, c.beta, c.eps, c.y, c.mean, c.rstd);
    FAIL() << "no error for a short gamma";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("gamma has shape [12]"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("must be 13"), std::string::npos) << e.what();
  }
  EXPECT_THROW(ops::layer_norm_forward<double>(c.x, c.gamma, c.beta, 0.0, c.y, c.mean, c.rstd),
               ConfigError);
  View2<double> empty("empty", 0, c.d);
  EXPECT_THROW(
      ops::layer_norm_forward<double>(empty, c.gamma, c.beta, c.eps, empty, c.mean, c.rstd),
      ShapeError);
}

}  // namespace
}  // namespace reformer
