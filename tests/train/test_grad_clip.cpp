#include "reformer/core/error.hpp"
#include "reformer/train/grad_clip.hpp"
#include "support/gradcheck.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace reformer {
namespace {

using namespace reformer::testing;

// Three parameters with random gradients in [-1, 1).
template <class T>
void add_parameters(ParameterSet<T>& params) {
  fill_uniform(params.add("embed", {9, 4}).grad, 1);
  fill_uniform(params.add("layers.0.w", {4, 6}).grad, 2);
  fill_uniform(params.add("layers.0.b", {6}).grad, 3);
}

double host_norm(const ParameterSet<double>& params) {
  double sum = 0;
  for (const auto& p : params)
    for (double g : to_host(p.grad)) sum += g * g;
  return std::sqrt(sum);
}

TEST(GradClip, GlobalNormMatchesHost) {
  ParameterSet<double> params;
  add_parameters(params);
  const double expected = host_norm(params);
  ASSERT_GT(expected, 1.0);
  EXPECT_NEAR(train::global_grad_norm(params), expected, 1e-13 * expected);
}

TEST(GradClip, ClipsToMaxNormPreservingDirection) {
  ParameterSet<double> params;
  add_parameters(params);
  const double norm = host_norm(params);
  std::vector<std::vector<double>> before;
  for (const auto& p : params) before.push_back(to_host(p.grad));
  const double max_norm = norm / 3;
  EXPECT_NEAR(train::clip_grad_norm(params, max_norm), norm, 1e-13 * norm);
  EXPECT_NEAR(train::global_grad_norm(params), max_norm, 1e-12 * max_norm);
  size_t k = 0;
  for (const auto& p : params) {
    const auto after = to_host(p.grad);
    for (size_t i = 0; i < after.size(); ++i) EXPECT_NEAR(after[i], before[k][i] / 3, 1e-14);
    ++k;
  }
}

TEST(GradClip, LeavesSmallGradientsUnchanged) {
  ParameterSet<double> params;
  add_parameters(params);
  const double norm = host_norm(params);
  std::vector<std::vector<double>> before;
  for (const auto& p : params) before.push_back(to_host(p.grad));
  EXPECT_NEAR(train::clip_grad_norm(params, 2 * norm), norm, 1e-13 * norm);
  size_t k = 0;
  for (const auto& p : params) EXPECT_EQ(to_host(p.grad), before[k++]);
}

// Squares of 1e20 overflow float; the norm is accumulated in double.
TEST(GradClip, FloatNormIsAccumulatedInDouble) {
  ParameterSet<float> params;
  auto& w = params.add("w", {100});
  Kokkos::deep_copy(w.grad, 1e20f);
  const double norm = train::global_grad_norm(params);
  EXPECT_NEAR(norm, double(1e20f) * 10, 1e-12 * norm);
  train::clip_grad_norm(params, 1.0);
  for (double g : to_host(w.grad)) EXPECT_NEAR(g, 0.1, 1e-7);
}

TEST(GradClip, RejectsNonFiniteNormAndBadMaxNorm) {
  ParameterSet<double> params;
  add_parameters(params);
  Kokkos::deep_copy(Kokkos::subview(params.get("layers.0.b").grad, 2), std::nan(""));
  try {
    train::clip_grad_norm(params, 1.0);
    FAIL() << "no error for a nan gradient";
  } catch (const ConfigError&) {
    FAIL() << "a nan gradient is not a configuration error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("norm is nan"), std::string::npos) << e.what();
  }
  for (double bad : {0.0, -1.0, std::numeric_limits<double>::infinity(), std::nan("")}) {
    try {
      train::clip_grad_norm(params, bad);
      ADD_FAILURE() << "no error for max_norm " << bad;
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("clip_grad_norm: max_norm is"), std::string::npos)
          << e.what();
    }
  }
}

}  // namespace
}  // namespace reformer
