// Small loops over contiguous rows, written so that compilers vectorise them:
// no calls, no data-dependent branches, and several independent partial
// results where a single running sum or maximum would serialise the loop
// (floating-point addition is not associative, so the compiler may not
// reorder it on its own). Used inside the fused attention kernels.
#pragma once

#include "reformer/core/types.hpp"

namespace reformer {

// y[0, n) += sum_j coef[j * coef_stride] * x[j * x_stride + (0, n)] for j < count.
// Eight source rows per pass: eight multiply-adds per load and store of y,
// which keeps the vectorised loop from being bound by loads and stores.
template <class T>
KOKKOS_INLINE_FUNCTION void accumulate_rows(T* y, const T* x, Index x_stride, const T* coef,
                                            Index coef_stride, Index count, Index n) {
  Index j = 0;
  for (; j + 8 <= count; j += 8) {
    T a[8];
    const T* xs[8];
    for (int u = 0; u < 8; ++u) {
      a[u] = coef[(j + u) * coef_stride];
      xs[u] = x + (j + u) * x_stride;
    }
    for (Index t = 0; t < n; ++t)
      y[t] += a[0] * xs[0][t] + a[1] * xs[1][t] + a[2] * xs[2][t] + a[3] * xs[3][t] +
              a[4] * xs[4][t] + a[5] * xs[5][t] + a[6] * xs[6][t] + a[7] * xs[7][t];
  }
  for (; j < count; ++j) {
    const T a = coef[j * coef_stride];
    const T* xj = x + j * x_stride;
    for (Index t = 0; t < n; ++t) y[t] += a * xj[t];
  }
}

// sum of x[0, n) with eight partial sums (vectorises; a single running sum
// does not, because floating-point addition is not associative).
template <class T>
KOKKOS_INLINE_FUNCTION T sum_values(const T* x, Index n) {
  T part[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  Index t = 0;
  for (; t + 8 <= n; t += 8)
    for (int u = 0; u < 8; ++u) part[u] += x[t + u];
  T total = 0;
  for (int u = 0; u < 8; ++u) total += part[u];
  for (; t < n; ++t) total += x[t];
  return total;
}

// sum of x[t] * y[t] over [0, n), eight partial sums.
template <class T>
KOKKOS_INLINE_FUNCTION T dot_values(const T* x, const T* y, Index n) {
  T part[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  Index t = 0;
  for (; t + 8 <= n; t += 8)
    for (int u = 0; u < 8; ++u) part[u] += x[t + u] * y[t + u];
  T total = 0;
  for (int u = 0; u < 8; ++u) total += part[u];
  for (; t < n; ++t) total += x[t] * y[t];
  return total;
}

// sum of (x[t] - c)^2 over [0, n), eight partial sums.
template <class T>
KOKKOS_INLINE_FUNCTION T sum_squared_differences(const T* x, T c, Index n) {
  T part[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  Index t = 0;
  for (; t + 8 <= n; t += 8)
    for (int u = 0; u < 8; ++u) part[u] += (x[t + u] - c) * (x[t + u] - c);
  T total = 0;
  for (int u = 0; u < 8; ++u) total += part[u];
  for (; t < n; ++t) total += (x[t] - c) * (x[t] - c);
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
