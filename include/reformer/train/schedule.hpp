// Learning-rate schedules: the learning rate as a function of the step, counted
// from 1 (the first optimizer step).
//   constant(lr):                   lr
//   noam(factor, d_model, warmup):  factor * d_model^-0.5 * min(step^-0.5, step * warmup^-1.5)
//                                   (Vaswani et al. 2017; peaks at step = warmup)
//   warmup_rsqrt(base, warmup):     base * min(1, step / warmup) * rsqrt(max(step, warmup))
//                                   (trax's linear_warmup * rsqrt_decay; peaks at step = warmup)
#pragma once

#include "reformer/config/train_config.hpp"

#include <cstdint>
#include <string>

namespace reformer::train {

// The kinds and their names are config's (train.schedule).
using config::parse_schedule_kind;
using config::ScheduleKind;
using config::to_string;

class LearningRateSchedule {
 public:
  // Arguments must be finite; lr, factor and base positive; d_model and warmup_steps >= 1.
  static LearningRateSchedule constant(double learning_rate);
  static LearningRateSchedule noam(double factor, std::int64_t d_model, std::int64_t warmup_steps);
  static LearningRateSchedule warmup_rsqrt(double base, std::int64_t warmup_steps);

  // From a config entry: `name` picks the formula and `scale` is its lr, factor
  // or base; warmup_steps is ignored by constant, d_model is read by noam only.
  static LearningRateSchedule from_name(const std::string& name, double scale,
                                        std::int64_t warmup_steps = 1, std::int64_t d_model = 1);

  // The learning rate at `step` >= 1 (ConfigError otherwise).
  double operator()(std::int64_t step) const;

  ScheduleKind kind() const { return kind_; }
  // E.g. "noam(factor=2, d_model=512, warmup_steps=4000)", for logs and run folders.
  std::string describe() const;

 private:
  LearningRateSchedule(ScheduleKind kind, double scale, std::int64_t warmup_steps,
                       std::int64_t d_model)
      : kind_(kind), scale_(scale), warmup_steps_(warmup_steps), d_model_(d_model) {}

  ScheduleKind kind_;
  double scale_;
  std::int64_t warmup_steps_;
  std::int64_t d_model_;
};

}  // namespace reformer::train
