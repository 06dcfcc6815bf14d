// Adam (Kingma and Ba 2015) and AdamW (Loshchilov and Hutter 2019) over a
// ParameterSet, with bias correction. At step t, with gradient g of parameter p:
//   g <- g + wd * p                                    (Adam's L2 weight decay)
//   m <- beta1 * m + (1 - beta1) * g
//   v <- beta2 * v + (1 - beta2) * g^2
//   p <- p - lr * wd * p                               (AdamW's decoupled decay)
//   p <- p - lr * (m / (1 - beta1^t)) / (sqrt(v / (1 - beta2^t)) + eps)
// One fused kernel updates every parameter (the set's contiguous buffers).
#pragma once

#include "reformer/config/train_config.hpp"
#include "reformer/core/optimizer_moments.hpp"
#include "reformer/core/parameter_set.hpp"

#include <cstdint>
#include <string>

namespace reformer::train {

// The hyper-parameters and their validate() are config's ([train.adam]).
using config::AdamConfig;
using config::validate;

// Its moments and steps are what checkpoints save (core/optimizer_moments.hpp).
template <class T>
class Adam : public OptimizerMoments<T> {
 public:
  // Allocates zero moments for every parameter registered so far; register all
  // parameters before building the optimizer. `params` must outlive it.
  Adam(ParameterSet<T>& params, AdamConfig config = {});

  // One update of every parameter from its gradient. learning_rate must be
  // finite and >= 0 (ConfigError otherwise).
  void step(double learning_rate);

  // Number of steps taken; t in the bias correction of the next step is steps() + 1.
  std::int64_t steps() const override { return steps_; }
  // Restores the step count from a checkpoint (>= 0).
  void set_steps(std::int64_t steps) override;

  // The moments m and v of a parameter, by name, for checkpoints (ConfigError
  // naming an unknown name). Writing into them sets the optimizer's state.
  View1<T> first_moment(const std::string& name) const;
  View1<T> second_moment(const std::string& name) const;
  // Every moment, laid out like the set's buffers.
  View1<T> first_moments() const override { return m_; }
  View1<T> second_moments() const override { return v_; }

  const AdamConfig& config() const { return config_; }

 private:
  View1<T> moment(const char* op, const View1<T>& buffer, const std::string& name) const;

  ParameterSet<T>& params_;
  AdamConfig config_;
  std::int64_t steps_ = 0;
  View1<T> m_, v_;          // laid out like the set's buffers
  std::size_t parameters_;  // registered when the optimizer was built
};

}  // namespace reformer::train
