// The shared-QK key normalisation (reformer/attention/shared_qk.hpp) against
// its formula, its one-kernel form against the two-kernel one, and its
// backward against finite differences.
#include "reformer/attention/shared_qk.hpp"
#include "support/gradcheck.hpp"
#include "support/kernel_settings.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace reformer {
namespace {

using namespace reformer::testing;

struct SharedKeysCase {
  static constexpr Index batch = 2, length = 5, heads = 3, d = 7;
  View4<double> qk{"qk", batch, length, heads, d}, k{"k", batch, length, heads, d},
      r{"r", batch, length, heads, d}, dk{"dk", batch, length, heads, d},
      dqk{"dqk", batch, length, heads, d};
  View3<double> scale{"scale", batch, length, heads};
  SharedKeysCase() {
    fill_uniform(qk, 1, -2, 2);
    fill_uniform(r, 2);
  }
  double loss() {
    attention::shared_key_scale<double>(qk, scale);
    attention::shared_keys<double>(qk, scale, k);
    return dot(k, r);
  }
};

TEST(SharedKeys, MatchTheFormulaAndTheOneKernelFormMatchesTheTwoKernelOne) {
  SharedKeysCase c;
  c.loss();
  const auto q = to_host(c.qk), k = to_host(c.k);
  const Index d = c.d;
  double error = 0;
  for (Index row = 0; row < c.batch * c.length * c.heads; ++row) {
    double sq = 0;
    for (Index x = 0; x < d; ++x) sq += q[row * d + x] * q[row * d + x];
    const double a = 1 / std::sqrt(sq / d + 1e-6) / std::sqrt(double(d));
    for (Index x = 0; x < d; ++x)
      error = std::max(error, std::abs(k[row * d + x] - q[row * d + x] * a));
  }
  EXPECT_LT(error, 1e-14);
  View4<double> fused("fused", c.batch, c.length, c.heads, c.d);
  attention::shared_keys<double>(c.qk, fused);
  EXPECT_EQ(to_host(fused), k);
}

TEST(SharedKeys, BackwardMatchesFiniteDifferences) {
  SharedKeysCase c;
  c.loss();
  Kokkos::deep_copy(c.dqk, 0.0);
  attention::shared_keys_backward<double>(c.qk, c.scale, c.r, c.dqk);
  auto loss = [&] { return c.loss(); };
  EXPECT_LT(gradient_error(c.qk, c.dqk, loss), 1e-7);
}

// The GPUs' form (RowKernels::lanes: a row per group of lanes, the row sums
// across the lanes) on the host against the thread-per-row form: the same
// scales, keys and gradients to rounding, and its backward against finite
// differences.
TEST(SharedKeys, LanesFormMatchesThreadFormAndFiniteDifferences) {
  SharedKeysCase c;
  View4<double> fused("fused", c.batch, c.length, c.heads, c.d);
  const auto run = [&] {
    c.loss();
    attention::shared_keys<double>(c.qk, fused);
    Kokkos::deep_copy(c.dqk, 0.5);
    attention::shared_keys_backward<double>(c.qk, c.scale, c.r, c.dqk);
    return std::vector<std::vector<double>>{to_host(c.scale), to_host(c.k), to_host(fused),
                                            to_host(c.dqk)};
  };
  std::vector<std::vector<double>> threads, lanes;
  {
    const ScopedRowKernels scoped(RowKernels::threads);
    threads = run();
  }
  const ScopedRowKernels scoped(RowKernels::lanes);
  lanes = run();
  const char* names[] = {"scale", "keys", "one-kernel keys", "dqk"};
  for (int i = 0; i < 4; ++i) {
    EXPECT_LT(relative_error(lanes[i], threads[i]), 1e-14) << names[i];
    EXPECT_NE(lanes[i], std::vector<double>(lanes[i].size(), 0.0)) << names[i];
  }
  EXPECT_EQ(lanes[1], lanes[2]) << "the one-kernel keys equal the two-kernel ones";
  Kokkos::deep_copy(c.dqk, 0.0);
  attention::shared_keys_backward<double>(c.qk, c.scale, c.r, c.dqk);
  auto loss = [&] { return c.loss(); };
  EXPECT_LT(gradient_error(c.qk, c.dqk, loss), 1e-7);
}

}  // namespace
}  // namespace reformer
