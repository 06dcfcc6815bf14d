// An optimizer's state as a checkpoint saves and restores it: two moment
// buffers laid out like a ParameterSet's values() (each parameter's moments at
// its offset, of its size) and a step count. train::Adam is one; io's
// checkpoints take this interface, so io needs nothing from train.
#pragma once

#include "reformer/core/types.hpp"

#include <cstdint>

namespace reformer {

template <class T>
class OptimizerMoments {
 public:
  virtual ~OptimizerMoments() = default;

  // Every parameter's first and second moments, laid out like the set's
  // values(). Writing into them sets the optimizer's state.
  virtual View1<T> first_moments() const = 0;
  virtual View1<T> second_moments() const = 0;
  // Steps taken, and restoring them from a checkpoint (>= 0).
  virtual std::int64_t steps() const = 0;
  virtual void set_steps(std::int64_t steps) = 0;

 protected:
  OptimizerMoments() = default;
  OptimizerMoments(const OptimizerMoments&) = default;
  OptimizerMoments& operator=(const OptimizerMoments&) = default;
};

}  // namespace reformer
