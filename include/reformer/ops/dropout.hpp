// Inverted dropout driven by the counter RNG: element i is kept when
// uniform(key, offset + i) >= rate and then scaled by 1 / (1 - rate).
// The mask is a pure function of (seed, stream, offset + i): it is never stored,
// is identical on every backend and thread count, and the backward pass (or a
// reversible recomputation) replays it exactly. Chunked callers pass the offset
// of their chunk so that chunking does not change the mask.
#pragma once

#include "reformer/core/random.hpp"
#include "reformer/core/types.hpp"

namespace reformer::ops {

KOKKOS_INLINE_FUNCTION bool dropout_keeps(RandomKey key, std::uint64_t index, double rate) {
  return random_uniform(key, index) >= rate;
}

// y = x * keep / (1 - rate); y may alias x. rate must be in [0, 1).
template <class T>
void dropout_forward(In1<T> x, double rate, RandomKey key, Index offset, View1<T> y);

// dx = dy * keep / (1 - rate) with the same mask; dx may alias dy.
template <class T>
void dropout_backward(In1<T> dy, double rate, RandomKey key, Index offset, View1<T> dx);

}  // namespace reformer::ops
