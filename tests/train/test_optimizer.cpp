#include "reformer/core/error.hpp"
#include "reformer/train/optimizer.hpp"
#include "support/gradcheck.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace reformer {
namespace {

using namespace reformer::testing;
using train::Adam;
using train::AdamConfig;

// Textbook Adam / AdamW on host vectors, one parameter at a time.
struct HostAdam {
  AdamConfig config;
  std::vector<double> m, v;
  int t = 0;

  void step(std::vector<double>& p, const std::vector<double>& g, double lr) {
    m.resize(p.size(), 0.0);
    v.resize(p.size(), 0.0);
    ++t;
    const double wd = config.weight_decay;
    for (size_t i = 0; i < p.size(); ++i) {
      const double grad = config.decoupled_weight_decay ? g[i] : g[i] + wd * p[i];
      m[i] = config.beta1 * m[i] + (1 - config.beta1) * grad;
      v[i] = config.beta2 * v[i] + (1 - config.beta2) * grad * grad;
      const double m_hat = m[i] / (1 - std::pow(config.beta1, t));
      const double v_hat = v[i] / (1 - std::pow(config.beta2, t));
      if (config.decoupled_weight_decay) p[i] -= lr * wd * p[i];
      p[i] -= lr * m_hat / (std::sqrt(v_hat) + config.eps);
    }
  }
};

// Runs `steps` steps of Adam on two parameters and of the host reference on
// copies, with fresh gradients and a changing learning rate at every step;
// returns the largest relative error over values and moments.
double max_error_against_reference(const AdamConfig& config, int steps, int start_step = 0) {
  ParameterSet<double> params;
  params.add("layers.0.w", {6, 5});
  params.add("layers.0.b", {5});
  fill_uniform(params.get("layers.0.w").value, 1);
  fill_uniform(params.get("layers.0.b").value, 2);
  Adam<double> adam(params, config);
  adam.set_steps(start_step);

  std::vector<HostAdam> reference(params.size(), HostAdam{config, {}, {}, start_step});
  std::vector<std::vector<double>> host_values;
  for (const auto& p : params) host_values.push_back(to_host(p.value));

  double worst = 0;
  for (int k = 0; k < steps; ++k) {
    const double lr = 1e-2 / (k + 1);
    size_t i = 0;
    for (auto& p : params) {
      fill_uniform(p.grad, 100 + 10 * k + i, -0.5, 0.5);
      reference[i].step(host_values[i], to_host(p.grad), lr);
      ++i;
    }
    adam.step(lr);
    i = 0;
    for (const auto& p : params) {
      worst = std::max(worst, relative_error(to_host(p.value), host_values[i]));
      worst = std::max(worst, relative_error(to_host(adam.first_moment(p.name)), reference[i].m));
      worst = std::max(worst, relative_error(to_host(adam.second_moment(p.name)), reference[i].v));
      ++i;
    }
  }
  EXPECT_EQ(adam.steps(), start_step + steps);
  return worst;
}

TEST(Adam, MatchesHostReferenceWithL2WeightDecay) {
  AdamConfig config;
  config.beta1 = 0.8;
  config.beta2 = 0.95;
  config.eps = 1e-3;
  config.weight_decay = 0.1;
  EXPECT_LT(max_error_against_reference(config, 6), 1e-12);
}

TEST(Adam, MatchesHostReferenceWithDefaults) {
  EXPECT_LT(max_error_against_reference(AdamConfig{}, 5), 1e-12);
}

TEST(AdamW, MatchesHostReferenceWithDecoupledWeightDecay) {
  AdamConfig config;
  config.beta1 = 0.85;
  config.beta2 = 0.99;
  config.weight_decay = 0.3;
  config.decoupled_weight_decay = true;
  EXPECT_LT(max_error_against_reference(config, 6), 1e-12);
}

TEST(Adam, RestoredStepCountDrivesBiasCorrection) {
  AdamConfig config;
  config.beta2 = 0.9;
  EXPECT_LT(max_error_against_reference(config, 3, 40), 1e-12);
}

// With m_hat = g and v_hat = g^2 at t = 1, the first step is -lr * g / (|g| + eps).
TEST(Adam, FirstStepMovesEachWeightByTheLearningRate) {
  ParameterSet<double> params;
  auto& w = params.add("w", {50});
  fill_uniform(w.grad, 3, 0.5, 1.0);
  Adam<double> adam(params);
  adam.step(0.01);
  for (double x : to_host(w.value)) EXPECT_NEAR(x, -0.01, 1e-9);
}

// With zero gradients AdamW only decays (p -= lr * wd * p) while Adam's L2
// term enters the moments: p = 4, wd = 0.5, lr = 0.1 gives 3.8 and about 3.9.
TEST(AdamW, DecoupledDecayDiffersFromL2Decay) {
  AdamConfig config;
  config.weight_decay = 0.5;
  ParameterSet<double> l2_params, decoupled_params;
  auto& a = l2_params.add("w", {8});
  auto& b = decoupled_params.add("w", {8});
  Kokkos::deep_copy(a.value, 4.0);
  Kokkos::deep_copy(b.value, 4.0);
  Adam<double> l2(l2_params, config);
  config.decoupled_weight_decay = true;
  Adam<double> decoupled(decoupled_params, config);
  l2.step(0.1);
  decoupled.step(0.1);
  for (double x : to_host(b.value)) EXPECT_DOUBLE_EQ(x, 3.8);
  for (double x : to_host(decoupled.first_moment("w"))) EXPECT_EQ(x, 0.0);
  for (double x : to_host(a.value)) EXPECT_NEAR(x, 3.9, 1e-8);
  for (double x : to_host(l2.first_moment("w"))) EXPECT_NEAR(x, 0.2, 1e-15);
}

TEST(Adam, FloatTracksTheDoubleReference) {
  ParameterSet<float> params;
  auto& w = params.add("w", {40});
  fill_uniform(w.value, 4);
  auto host = to_host(w.value);
  HostAdam reference{AdamConfig{}, {}, {}, 0};
  Adam<float> adam(params);
  for (int k = 0; k < 4; ++k) {
    fill_uniform(w.grad, 20 + k);
    reference.step(host, to_host(w.grad), 1e-2);
    adam.step(1e-2);
  }
  EXPECT_LT(relative_error(to_host(w.value), host), 1e-5);
}

TEST(Adam, ZeroLearningRateKeepsValuesButCountsTheStep) {
  ParameterSet<double> params;
  auto& w = params.add("w", {10});
  fill_uniform(w.value, 5);
  fill_uniform(w.grad, 6);
  const auto before = to_host(w.value);
  Adam<double> adam(params);
  adam.step(0.0);
  EXPECT_EQ(to_host(w.value), before);
  EXPECT_EQ(adam.steps(), 1);
  EXPECT_GT(dot(adam.second_moment("w"), adam.second_moment("w")), 0.0);
}

template <class F>
std::string error_message(F&& f) {
  try {
    f();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "no ConfigError";
}

TEST(Adam, RejectsInvalidConfiguration) {
  ParameterSet<double> params;
  params.add("w", {3});
  const auto build = [&](AdamConfig c) {
    return error_message([&] { Adam<double> adam(params, c); });
  };
  AdamConfig c;
  c.beta1 = 1.0;
  EXPECT_NE(build(c).find("beta1 is 1 but must be in [0, 1)"), std::string::npos) << build(c);
  c = AdamConfig{};
  c.beta2 = -0.1;
  EXPECT_NE(build(c).find("beta2 is -0.1"), std::string::npos) << build(c);
  c = AdamConfig{};
  c.eps = 0;
  EXPECT_NE(build(c).find("eps is 0"), std::string::npos) << build(c);
  c = AdamConfig{};
  c.weight_decay = -1e-4;
  EXPECT_NE(build(c).find("weight_decay is -0.0001"), std::string::npos) << build(c);
  c = AdamConfig{};
  c.beta1 = std::nan("");
  EXPECT_NE(build(c).find("beta1 is nan"), std::string::npos) << build(c);
}

TEST(Adam, RejectsInvalidLearningRatesAndStepCounts) {
  ParameterSet<double> params;
  params.add("w", {3});
  Adam<double> adam(params);
  EXPECT_NE(error_message([&] { adam.step(-0.001); }).find("learning rate is -0.001"),
            std::string::npos);
  EXPECT_NE(error_message([&] { adam.step(std::nan("")); }).find("learning rate is nan"),
            std::string::npos);
  EXPECT_THROW(adam.step(std::numeric_limits<double>::infinity()), ConfigError);
  EXPECT_EQ(adam.steps(), 0);
  EXPECT_NE(error_message([&] { adam.set_steps(-3); }).find("steps is -3"), std::string::npos);
}

TEST(Adam, MomentsAreLookedUpByName) {
  ParameterSet<double> params;
  auto& w = params.add("layers.0.w", {4});
  fill_uniform(w.grad, 7);
  Adam<double> adam(params);
  adam.step(1e-3);
  // After one step m = (1 - beta1) g and v = (1 - beta2) g^2.
  const auto g = to_host(w.grad), m = to_host(adam.first_moment("layers.0.w")),
             v = to_host(adam.second_moment("layers.0.w"));
  for (size_t i = 0; i < g.size(); ++i) {
    EXPECT_NEAR(m[i], 0.1 * g[i], 1e-15);
    EXPECT_NEAR(v[i], 0.001 * g[i] * g[i], 1e-15);
  }
  EXPECT_NE(error_message([&] { adam.first_moment("layers.1.w"); }).find("\"layers.1.w\""),
            std::string::npos);
  EXPECT_THROW(adam.second_moment("w"), ConfigError);
}

TEST(Adam, RefusesParametersRegisteredAfterConstruction) {
  ParameterSet<double> params;
  params.add("w", {3});
  Adam<double> adam(params);
  params.add("late", {2});
  EXPECT_NE(error_message([&] { adam.step(1e-3); }).find("has 2 parameters"), std::string::npos);
}

}  // namespace
}  // namespace reformer
