#include "reformer/core/error.hpp"
#include "reformer/train/schedule.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

namespace reformer {
namespace {

using train::LearningRateSchedule;
using train::ScheduleKind;

template <class F>
std::string config_error(F&& f) {
  try {
    f();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "no ConfigError";
}

void expect_relative(double actual, double expected) {
  EXPECT_NEAR(actual, expected, 1e-14 * std::abs(expected));
}

TEST(Schedule, ConstantIsConstant) {
  const auto lr = LearningRateSchedule::constant(3e-4);
  EXPECT_EQ(lr.kind(), ScheduleKind::constant);
  for (std::int64_t step : {1, 2, 1000, 10000000}) EXPECT_EQ(lr(step), 3e-4);
}

// factor * d_model^-0.5 * min(step^-0.5, step * warmup^-1.5), d_model = 512, warmup = 4000.
TEST(Schedule, NoamWarmsUpLinearlyThenDecaysAsRsqrt) {
  const auto lr = LearningRateSchedule::noam(2.0, 512, 4000);
  const double scale = 2.0 / std::sqrt(512.0);
  expect_relative(lr(1), scale * 1 / std::pow(4000.0, 1.5));
  expect_relative(lr(1000), scale * 1000 / std::pow(4000.0, 1.5));
  const double peak = scale / std::sqrt(4000.0);
  expect_relative(lr(4000), peak);
  expect_relative(lr(16000), peak / 2);
  expect_relative(lr(100000), scale / std::sqrt(100000.0));
  EXPECT_LT(lr(3999), lr(4000));
  EXPECT_LT(lr(4001), lr(4000));
  // The classic Transformer base setting peaks at about 7e-4.
  expect_relative(LearningRateSchedule::noam(1.0, 512, 4000)(4000), 1 / std::sqrt(512.0 * 4000));
}

// base * min(1, step / warmup) * rsqrt(max(step, warmup)), base = 0.5, warmup = 100.
TEST(Schedule, WarmupRsqrtMatchesClosedForm) {
  const auto lr = LearningRateSchedule::warmup_rsqrt(0.5, 100);
  expect_relative(lr(1), 0.5 * 0.01 / 10);
  expect_relative(lr(50), 0.5 * 0.5 / 10);
  expect_relative(lr(100), 0.05);  // the peak
  expect_relative(lr(400), 0.5 / 20);
  expect_relative(lr(10000), 0.5 / 100);
  EXPECT_LT(lr(99), lr(100));
  EXPECT_LT(lr(101), lr(100));
}

TEST(Schedule, StepsCountFromOne) {
  const auto lr = LearningRateSchedule::warmup_rsqrt(0.5, 100);
  EXPECT_NE(config_error([&] { lr(0); }).find("step is 0"), std::string::npos);
  EXPECT_THROW(LearningRateSchedule::constant(1.0)(-5), ConfigError);
}

TEST(Schedule, RejectsInvalidArguments) {
  const double inf = std::numeric_limits<double>::infinity();
  EXPECT_NE(config_error([] {
              LearningRateSchedule::constant(-1e-3);
            }).find("LearningRateSchedule::constant: learning_rate is -0.001"),
            std::string::npos);
  EXPECT_NE(config_error([&] { LearningRateSchedule::constant(inf); }).find("is inf"),
            std::string::npos);
  EXPECT_NE(config_error([] {
              LearningRateSchedule::noam(0.0, 512, 4000);
            }).find("LearningRateSchedule::noam: factor is 0"),
            std::string::npos);
  EXPECT_NE(config_error([] { LearningRateSchedule::noam(1.0, 0, 4000); }).find("d_model is 0"),
            std::string::npos);
  EXPECT_NE(
      config_error([] { LearningRateSchedule::noam(1.0, 512, -1); }).find("warmup_steps is -1"),
      std::string::npos);
  EXPECT_NE(config_error([] {
              LearningRateSchedule::warmup_rsqrt(std::nan(""), 10);
            }).find("LearningRateSchedule::warmup_rsqrt: base is nan"),
            std::string::npos);
  EXPECT_THROW(LearningRateSchedule::warmup_rsqrt(1.0, 0), ConfigError);
}

TEST(Schedule, ParsesNames) {
  EXPECT_EQ(train::parse_schedule_kind("noam"), ScheduleKind::noam);
  for (const auto kind : {ScheduleKind::constant, ScheduleKind::noam, ScheduleKind::warmup_rsqrt})
    EXPECT_EQ(train::parse_schedule_kind(train::to_string(kind)), kind);
  const std::string message = config_error([] { train::parse_schedule_kind("cosine"); });
  EXPECT_NE(message.find("\"cosine\" is unknown"), std::string::npos) << message;
  EXPECT_NE(message.find("warmup_rsqrt"), std::string::npos) << message;
  EXPECT_THROW(train::parse_schedule_kind("Noam"), ConfigError);

  const auto noam = LearningRateSchedule::from_name("noam", 2.0, 4000, 512);
  EXPECT_EQ(noam.kind(), ScheduleKind::noam);
  EXPECT_EQ(noam(123), LearningRateSchedule::noam(2.0, 512, 4000)(123));
  const auto rsqrt = LearningRateSchedule::from_name("warmup_rsqrt", 0.5, 100);
  EXPECT_EQ(rsqrt(50), LearningRateSchedule::warmup_rsqrt(0.5, 100)(50));
  EXPECT_EQ(LearningRateSchedule::from_name("constant", 1e-3)(77), 1e-3);
  EXPECT_THROW(LearningRateSchedule::from_name("noam", 2.0, 4000, 0), ConfigError);
}

TEST(Schedule, DescribesItself) {
  EXPECT_EQ(LearningRateSchedule::noam(2, 512, 4000).describe(),
            "noam(factor=2, d_model=512, warmup_steps=4000)");
  EXPECT_EQ(LearningRateSchedule::warmup_rsqrt(0.5, 100).describe(),
            "warmup_rsqrt(base=0.5, warmup_steps=100)");
  EXPECT_EQ(LearningRateSchedule::constant(0.001).describe(), "constant(learning_rate=0.001)");
}

}  // namespace
}  // namespace reformer
