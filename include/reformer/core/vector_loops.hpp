// Small loops over contiguous rows, written so that compilers vectorise them:
// no calls, no data-dependent branches, and several independent partial
// results where a single running sum or maximum would serialise the loop
// (floating-point addition is not associative, so the compiler may not
// reorder it on its own). Used inside the fused attention kernels.
//
// The reductions read any storage type and sum in its compute type
// (core/precision.hpp): a bf16 row is summed in float32.
#pragma once

#include "reformer/core/precision.hpp"
#include "reformer/core/types.hpp"

namespace reformer {

// y[0, n) += sum_j coef[j * coef_stride] * x[j * x_stride + (0, n)] for j < count.
// Eight source rows per pass: eight multiply-adds per load and store of y,
// which keeps the vectorised loop from being bound by loads and stores.
// The coefficients may be stored in another type (bf16): they are loaded into T.
template <class T, class K>
KOKKOS_INLINE_FUNCTION void accumulate_rows(T* y, const T* x, Index x_stride, const K* coef,
                                            Index coef_stride, Index count, Index n) {
  Index j = 0;
  for (; j + 8 <= count; j += 8) {
    T a[8];
    const T* xs[8];
    for (int u = 0; u < 8; ++u) {
      a[u] = T(load(coef[(j + u) * coef_stride]));
      xs[u] = x + (j + u) * x_stride;
    }
    for (Index t = 0; t < n; ++t)
      y[t] += a[0] * xs[0][t] + a[1] * xs[1][t] + a[2] * xs[2][t] + a[3] * xs[3][t] +
              a[4] * xs[4][t] + a[5] * xs[5][t] + a[6] * xs[6][t] + a[7] * xs[7][t];
  }
  for (; j < count; ++j) {
    const T a = T(load(coef[j * coef_stride]));
    const T* xj = x + j * x_stride;
    for (Index t = 0; t < n; ++t) y[t] += a * xj[t];
  }
}

// sum of x[0, n) with eight partial sums (vectorises; a single running sum
// does not, because floating-point addition is not associative).
template <class T>
KOKKOS_INLINE_FUNCTION compute_t<T> sum_values(const T* x, Index n) {
  using C = compute_t<T>;
  C part[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  Index t = 0;
  for (; t + 8 <= n; t += 8)
    for (int u = 0; u < 8; ++u) part[u] += load(x[t + u]);
  C total = 0;
  for (int u = 0; u < 8; ++u) total += part[u];
  for (; t < n; ++t) total += load(x[t]);
  return total;
}

// sum of x[t] * y[t] over [0, n), eight partial sums; with z, of
// (x[t] * y[t]) * z[t].
template <class X, class Y>
KOKKOS_INLINE_FUNCTION compute_t<X> dot_values(const X* x, const Y* y, Index n) {
  using C = compute_t<X>;
  C part[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  Index t = 0;
  for (; t + 8 <= n; t += 8)
    for (int u = 0; u < 8; ++u) part[u] += load(x[t + u]) * load(y[t + u]);
  C total = 0;
  for (int u = 0; u < 8; ++u) total += part[u];
  for (; t < n; ++t) total += load(x[t]) * load(y[t]);
  return total;
}

template <class X, class Y, class Z>
KOKKOS_INLINE_FUNCTION compute_t<X> dot_values(const X* x, const Y* y, const Z* z, Index n) {
  using C = compute_t<X>;
  C part[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  Index t = 0;
  for (; t + 8 <= n; t += 8)
    for (int u = 0; u < 8; ++u) part[u] += load(x[t + u]) * load(y[t + u]) * load(z[t + u]);
  C total = 0;
  for (int u = 0; u < 8; ++u) total += part[u];
  for (; t < n; ++t) total += load(x[t]) * load(y[t]) * load(z[t]);
  return total;
}

// sum of (x[t] - c)^2 over [0, n), eight partial sums.
template <class T>
KOKKOS_INLINE_FUNCTION compute_t<T> sum_squared_differences(const T* x, compute_t<T> c, Index n) {
  using C = compute_t<T>;
  C part[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  Index t = 0;
  for (; t + 8 <= n; t += 8)
    for (int u = 0; u < 8; ++u) part[u] += (load(x[t + u]) - c) * (load(x[t + u]) - c);
  C total = 0;
  for (int u = 0; u < 8; ++u) total += part[u];
  for (; t < n; ++t) total += (load(x[t]) - c) * (load(x[t]) - c);
  return total;
}

// max of x[0, n) with eight partial maxima (vectorises).
template <class T>
KOKKOS_INLINE_FUNCTION T max_values(const T* x, Index n) {
  T part[8];
  for (int u = 0; u < 8; ++u) part[u] = x[0];
  Index t = 0;
  for (; t + 8 <= n; t += 8)
    for (int u = 0; u < 8; ++u) part[u] = x[t + u] > part[u] ? x[t + u] : part[u];
  T m = part[0];
  for (int u = 1; u < 8; ++u) m = part[u] > m ? part[u] : m;
  for (; t < n; ++t) m = x[t] > m ? x[t] : m;
  return m;
}

}  // namespace reformer
