#include "reformer/core/error.hpp"
#include "reformer/core/initializers.hpp"
#include "support/gradcheck.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>

namespace reformer {
namespace {

using namespace reformer::testing;

struct Moments {
  double mean = 0, std = 0, max_abs = 0;
};

Moments moments_of(const std::vector<double>& x) {
  Moments m;
  for (double v : x) m.mean += v / x.size();
  for (double v : x) {
    m.std += (v - m.mean) * (v - m.mean) / x.size();
    m.max_abs = std::max(m.max_abs, std::abs(v));
  }
  m.std = std::sqrt(m.std);
  return m;
}

TEST(Initializers, NormalHasTheRequestedMoments) {
  ParameterSet<float> params;
  auto& w = params.add("w", {512, 512});
  init_normal(w, 0.02, {7, 1});
  const auto m = moments_of(to_host(w.value));
  const double n = w.size();
  EXPECT_NEAR(m.mean, 0.0, 5 * 0.02 / std::sqrt(n));
  EXPECT_NEAR(m.std, 0.02, 0.02 * 0.01);
}

// Element i is the pure function std * normal(key, i): the same on every backend.
TEST(Initializers, NormalIsTheCounterRngEvaluatedPerElement) {
  ParameterSet<double> params;
  auto& w = params.add("w", {33, 17});
  const RandomKey key{11, stream_id(4, 2)};
  init_normal(w, 0.5, key);
  const auto x = to_host(w.value);
  // Within a few ulp, not bitwise: the normals' log and cosine come from the
  // device's math library on GPUs (core/random.hpp: the bits are identical).
  for (Index i = 0; i < w.size(); ++i)
    ASSERT_NEAR(x[i], 0.5 * random_normal(key, i), 1e-15 * (1 + std::abs(x[i]))) << i;
}

TEST(Initializers, XavierUniformRespectsItsBoundAndVariance) {
  ParameterSet<double> params;
  auto& w = params.add("w", {300, 200});
  init_xavier_uniform(w, {3, 9});
  const double limit = std::sqrt(6.0 / (300 + 200));
  const auto m = moments_of(to_host(w.value));
  EXPECT_LE(m.max_abs, limit);
  EXPECT_GT(m.max_abs, 0.999 * limit);
  EXPECT_NEAR(m.mean, 0.0, 0.01 * limit);
  EXPECT_NEAR(m.std, limit / std::sqrt(3.0), 0.01 * limit);  // Var U(-a, a) = a^2 / 3
}

TEST(Initializers, XavierFansByRank) {
  using Fans = std::pair<Index, Index>;
  EXPECT_EQ(xavier_fans({64}), Fans(64, 64));
  EXPECT_EQ(xavier_fans({64, 256}), Fans(64, 256));
  EXPECT_EQ(xavier_fans({8, 64, 16}), Fans(64, 16));
  EXPECT_THROW(xavier_fans({2, 3, 4, 5}), ShapeError);

  ParameterSet<double> params;
  auto& heads = params.add("heads", {8, 64, 16});
  init_xavier_uniform(heads, {1, 1});
  const double limit = std::sqrt(6.0 / (64 + 16));
  EXPECT_LE(moments_of(to_host(heads.value)).max_abs, limit);
  EXPECT_GT(moments_of(to_host(heads.value)).max_abs, 0.99 * limit);
}

TEST(Initializers, SameKeyGivesIdenticalValuesAndOtherKeysDiffer) {
  ParameterSet<float> params;
  auto& a = params.add("a", {64, 32});
  auto& b = params.add("b", {64, 32});
  auto& c = params.add("c", {64, 32});
  auto& d = params.add("d", {64, 32});
  init_xavier_uniform(a, {5, 1});
  init_xavier_uniform(b, {5, 1});
  init_xavier_uniform(c, {5, 2});
  init_xavier_uniform(d, {6, 1});
  const auto va = to_host(a.value), vb = to_host(b.value), vc = to_host(c.value),
             vd = to_host(d.value);
  EXPECT_EQ(va, vb);
  int same_stream = 0, same_seed = 0;
  for (size_t i = 0; i < va.size(); ++i) {
    same_stream += va[i] == vc[i];
    same_seed += va[i] == vd[i];
  }
  EXPECT_EQ(same_stream, 0);
  EXPECT_EQ(same_seed, 0);
}

TEST(Initializers, ConstantFillsEveryElement) {
  ParameterSet<double> params;
  auto& scale = params.add("norm.scale", {3, 5});
  init_constant(scale, 1.25);
  for (double x : to_host(scale.value)) EXPECT_EQ(x, 1.25);
  for (double x : to_host(scale.grad)) EXPECT_EQ(x, 0.0);
}

TEST(Initializers, RejectInvalidArguments) {
  ParameterSet<double> params;
  auto& w = params.add("w", {4});
  try {
    init_normal(w, -0.1, {1, 1});
    FAIL() << "no error for a negative std";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("init_normal: std for w is -0.1"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(init_normal(w, std::numeric_limits<double>::infinity(), {1, 1}), ConfigError);
  EXPECT_THROW(init_constant(w, std::nan("")), ConfigError);
  EXPECT_THROW(init_xavier_uniform(params.add("t", {2, 2, 2, 2}), {1, 1}), ShapeError);
}

}  // namespace
}  // namespace reformer
