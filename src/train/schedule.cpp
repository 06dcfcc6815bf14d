#include "reformer/train/schedule.hpp"

#include "reformer/core/error.hpp"

#include <algorithm>
#include <cmath>

namespace reformer::train {
namespace {

void require_positive(const char* op, const char* what, double value) {
  require<ConfigError>(std::isfinite(value) && value > 0, op, ": ", what, " is ", value,
                       " but must be finite and positive");
}

void require_at_least_one(const char* op, const char* what, std::int64_t value) {
  require<ConfigError>(value >= 1, op, ": ", what, " is ", value, " but must be >= 1");
}

}  // namespace

LearningRateSchedule LearningRateSchedule::constant(double learning_rate) {
  require_positive("LearningRateSchedule::constant", "learning_rate", learning_rate);
  return {ScheduleKind::constant, learning_rate, 1, 1};
}

LearningRateSchedule LearningRateSchedule::noam(double factor, std::int64_t d_model,
                                                std::int64_t warmup_steps) {
  const char* op = "LearningRateSchedule::noam";
  require_positive(op, "factor", factor);
  require_at_least_one(op, "d_model", d_model);
  require_at_least_one(op, "warmup_steps", warmup_steps);
  return {ScheduleKind::noam, factor, warmup_steps, d_model};
}

LearningRateSchedule LearningRateSchedule::warmup_rsqrt(double base, std::int64_t warmup_steps) {
  const char* op = "LearningRateSchedule::warmup_rsqrt";
  require_positive(op, "base", base);
  require_at_least_one(op, "warmup_steps", warmup_steps);
  return {ScheduleKind::warmup_rsqrt, base, warmup_steps, 1};
}

LearningRateSchedule LearningRateSchedule::from_name(const std::string& name, double scale,
                                                     std::int64_t warmup_steps,
                                                     std::int64_t d_model) {
  switch (parse_schedule_kind(name)) {
    case ScheduleKind::constant:
      return constant(scale);
    case ScheduleKind::noam:
      return noam(scale, d_model, warmup_steps);
    case ScheduleKind::warmup_rsqrt:
      return warmup_rsqrt(scale, warmup_steps);
  }
  throw Error("LearningRateSchedule::from_name: invalid ScheduleKind");
}

double LearningRateSchedule::operator()(std::int64_t step) const {
  require<ConfigError>(step >= 1, "LearningRateSchedule: step is ", step,
                       " but steps count from 1");
  const double s = double(step), w = double(warmup_steps_);
  switch (kind_) {
    case ScheduleKind::constant:
      return scale_;
    case ScheduleKind::noam:
      // factor * d_model^-0.5 * min(step^-0.5, step * warmup^-1.5)
      return scale_ / std::sqrt(double(d_model_)) *
             std::min(1.0 / std::sqrt(s), s * std::pow(w, -1.5));
    case ScheduleKind::warmup_rsqrt:
      // base * min(1, step / warmup) * rsqrt(max(step, warmup))
      return scale_ * std::min(1.0, s / w) / std::sqrt(std::max(s, w));
  }
  throw Error("LearningRateSchedule: invalid ScheduleKind");
}

std::string LearningRateSchedule::describe() const {
  switch (kind_) {
    case ScheduleKind::constant:
      return detail::concat("constant(learning_rate=", scale_, ")");
    case ScheduleKind::noam:
      return detail::concat("noam(factor=", scale_, ", d_model=", d_model_,
                            ", warmup_steps=", warmup_steps_, ")");
    case ScheduleKind::warmup_rsqrt:
      return detail::concat("warmup_rsqrt(base=", scale_, ", warmup_steps=", warmup_steps_, ")");
  }
  throw Error("LearningRateSchedule::describe: invalid ScheduleKind");
}

}  // namespace reformer::train
