// Softmax and log-softmax along the last axis of x [n, d].
//   softmax(x)_j = exp(x_j - max) / sum_k exp(x_k - max)
//   log_softmax(x)_j = x_j - logsumexp(x)
#pragma once

#include "reformer/core/kokkos_compat.hpp"
#include "reformer/core/types.hpp"

namespace reformer::ops {

// The softmax (kLog: log-softmax) of one row of d values by a whole team:
// the row's max and logsumexp, then y = exp(x - lse) (or x - lse); returns
// lse. y may be x. Every team thread must call it (softmax_forward calls it
// per row; fused kernels call it on a row they hold).
template <bool kLog, class Member, class T>
KOKKOS_INLINE_FUNCTION T team_softmax_row(const Member& team, const T* x, T* y, Index d) {
  T row_max = 0;
  Kokkos::parallel_reduce(
      Kokkos::TeamThreadRange(team, d), [&](Index j, T& m) { m = x[j] > m ? x[j] : m; },
      Kokkos::Max<T>(row_max));
  T sum = 0;
  Kokkos::parallel_reduce(
      Kokkos::TeamThreadRange(team, d),
      [&](Index j, T& acc) { acc += compat::exp(x[j] - row_max); }, sum);
  const T lse = row_max + compat::log(sum);
  Kokkos::parallel_for(Kokkos::TeamThreadRange(team, d),
                       [&](Index j) { y[j] = kLog ? x[j] - lse : compat::exp(x[j] - lse); });
  return lse;
}

template <class T>
void softmax_forward(In2<T> x, View2<T> y);

// dx = y * (dy - sum_j dy_j y_j), from the forward output y.
template <class T>
void softmax_backward(In2<T> y, In2<T> dy, View2<T> dx);

template <class T>
void log_softmax_forward(In2<T> x, View2<T> y);

// dx = dy - exp(y) * sum_j dy_j, from the forward output y.
template <class T>
void log_softmax_backward(In2<T> y, In2<T> dy, View2<T> dx);

}  // namespace reformer::ops
