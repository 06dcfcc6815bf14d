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

// Masks keyed by the global row: a tensor whose row 0 is row first_row of the
// step's whole batch (data parallelism gives a process rows [first_row,
// first_row + batch)) draws its element e at dropout_offset(first_row,
// elements per row) + e, so that a share of the batch draws the masks the
// whole batch draws for those rows. 0 for first_row 0.
KOKKOS_INLINE_FUNCTION Index dropout_offset(Index first_row, Index row_elements) {
  return first_row * row_elements;
}

// y = x * keep / (1 - rate); y may alias x. rate must be in [0, 1).
template <class T>
void dropout_forward(In1<T> x, double rate, RandomKey key, Index offset, View1<T> y);

// dx = dy * keep / (1 - rate) with the same mask; dx may alias dy.
template <class T>
void dropout_backward(In1<T> dy, double rate, RandomKey key, Index offset, View1<T> dx);

}  // namespace reformer::ops
