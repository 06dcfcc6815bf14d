// Gradient clipping by the global norm over every parameter of a set
// (Pascanu et al. 2013): norm = sqrt(sum over all gradient elements of g^2).
#pragma once

#include "reformer/core/parameter_set.hpp"

namespace reformer::train {

// The global gradient norm, accumulated in double.
template <class T>
double global_grad_norm(const ParameterSet<T>& params);

// Scales every gradient by max_norm / norm when norm > max_norm and returns the
// norm before clipping. max_norm must be finite and positive (ConfigError); a
// non-finite norm (an inf or nan gradient) throws Error and changes nothing.
template <class T>
double clip_grad_norm(ParameterSet<T>& params, double max_norm);

}  // namespace reformer::train
