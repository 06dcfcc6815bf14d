// Keys of shared-QK attention (Reformer, section 3): queries and keys come from
// one projection, and the key of a position is its query normalised,
//   k_i = q_i * a_i / sqrt(d_head),   a_i = (mean_d(q_i^2) + 1e-6)^(-1/2),
// so that q_i . k_j = sqrt(d_head) cos(q_i, q_j) |q_i| / sqrt(d_head) needs no
// further score scale. LSH attention and full attention with shared q/k use
// the same keys, so that weights trained with one can be evaluated with the other.
// Tensors are [batch, length, heads, d_head]; scales [batch, length, heads], in
// compute precision (float32 for bf16 tensors: core/precision.hpp).
#pragma once

#include "reformer/core/kokkos_compat.hpp"
#include "reformer/core/precision.hpp"
#include "reformer/core/types.hpp"
#include "reformer/core/vector_loops.hpp"

namespace reformer::attention {

namespace detail {
// a_i / sqrt(d_head) from the sum of the squares of the query's d_head values:
// the factor that turns q_i into k_i. Every kernel that forms shared keys
// calls this one (through shared_key_factor, or with a sum over lanes).
template <class C>
KOKKOS_INLINE_FUNCTION C shared_key_factor_of_squares(C sum_squares, Index dh) {
  constexpr double kNormEps = 1e-6;
  return C(1) / compat::sqrt(sum_squares / dh + C(kNormEps)) / compat::sqrt(C(dh));
}
// The same from the query x itself.
template <class T>
KOKKOS_INLINE_FUNCTION compute_t<T> shared_key_factor(const T* x, Index dh) {
  // eight partial sums: vectorises
  return shared_key_factor_of_squares(dot_values(x, x, dh), dh);
}
}  // namespace detail

// scale(b, i, h) = a_i / sqrt(d_head), the factor that turns q_i into k_i.
template <class T>
void shared_key_scale(In4<T> qk, View3<compute_t<T>> scale);

// k = qk * scale (k may not alias qk).
template <class T>
void shared_keys(In4<T> qk, In3<compute_t<T>> scale, View4<T> k);

// The same with the scale computed in the same kernel, where it is not kept
// (one launch instead of two: the decoding steps).
template <class T>
void shared_keys(In4<T> qk, View4<T> k);

// Backward of the normalisation: dqk += dk_i * d k_i / d q_i,
//   dq_i += s_i (dk_i - q_i a_i^2 mean_d(dk_i * q_i)),   s_i = a_i / sqrt(d_head).
template <class T>
void shared_keys_backward(In4<T> qk, In3<compute_t<T>> scale, In4<T> dk, View4<T> dqk);

}  // namespace reformer::attention
