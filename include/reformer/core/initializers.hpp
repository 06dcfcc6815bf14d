// Parameter initialisers driven by the counter RNG.
//
// Element i of a parameter is a pure function of (key, i), so the same key gives
// bitwise-identical weights on Serial, OpenMP, CUDA and HIP for any thread count.
// Give each parameter its own key, e.g. {seed, stream_id(layer, purpose)}.
#pragma once

#include "reformer/core/parameter_set.hpp"
#include "reformer/core/random.hpp"

#include <utility>

namespace reformer {

// value_i = std * normal(key, i); std must be finite and >= 0.
template <class T>
void init_normal(Parameter<T>& param, double std, RandomKey key);

// value_i = limit * (2 * uniform(key, i) - 1), limit = sqrt(6 / (fan_in + fan_out))
// (Glorot and Bengio 2010), with fans from xavier_fans(param.shape).
template <class T>
void init_xavier_uniform(Parameter<T>& param, RandomKey key);

// value_i = value; value must be finite.
template <class T>
void init_constant(Parameter<T>& param, double value);

// (fan_in, fan_out) of a weight of this shape:
//   rank 1 [n]:           (n, n), a vector maps n features to n features;
//   rank 2 [in, out]:     (in, out), the layout of y = x W;
//   rank 3 [s, in, out]:  (in, out), a stack of s independent [in, out] matrices
//                         (e.g. per-head projections [heads, d_model, d_head]).
// ShapeError for other ranks.
std::pair<Index, Index> xavier_fans(const std::vector<Index>& shape);

}  // namespace reformer
