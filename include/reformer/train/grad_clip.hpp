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

// The same with the norm already computed by global_grad_norm (it must be
// finite); returns it.
template <class T>
double clip_grad_norm(ParameterSet<T>& params, double max_norm, double norm);

// How many elements of x are inf or nan (the divergence guard's check of
// parameters and moments before they are saved).
template <class T>
std::int64_t count_nonfinite(In1<T> x);

}  // namespace reformer::train
