// Rows of a product's panels between bf16 and float32 (private to ops): the
// widening of a bf16 (or float) operand's rows into a float32 panel, and the
// one rounding of a float32 panel (plus a bias) into C. Shared by mixed_matmul's
// portable loop (mixed_gemm.cpp) and the GPU vendor path (tpls/device_blas.cpp).
#pragma once

#include "reformer/core/element_map.hpp"
#include "reformer/core/matrix_policy.hpp"
#include "reformer/core/precision.hpp"
#include "reformer/core/types.hpp"

#include <type_traits>

namespace reformer::ops::detail {

// to(i, j) = from(begin + i, j) widened, for `rows` rows; to has rows d apart
// (d = from's width), from may have padded rows.
template <class T>
void widen_rows(In2<T> from, Index begin, Index rows, float* to) {
  const Index d = from.extent(1), ld = from.stride(0);
  // Pointer arithmetic, not &from(begin, 0): this runs on the host, and a
  // View's operator() on the host aborts for device memory.
  const T* in = from.data() + begin * ld;
  if (ld == d)
    // Unpadded rows are contiguous: one flat map.
    parallel_map(
        "mixed_matmul_widen", rows * d, KOKKOS_LAMBDA(Index i) { return float(load(in[i])); },
        KOKKOS_LAMBDA(Index i, float v) { to[i] = v; });
  else
    parallel_row_map(
        "mixed_matmul_widen_rows", rows, d,
        KOKKOS_LAMBDA(Index i, Index j) { return float(load(in[i * ld + j])); },
        KOKKOS_LAMBDA(Index i, Index j, float v) { to[i * d + j] = v; });
}

// c(begin + r, j) = round(f(r, j) + bias(j)) for the rows of a float panel f
// (bias may be empty; c may be f; either may have padded rows). Nothing to do
// for a float32 C that is f without a bias.
template <class TC>
void finish_rows(In2<float> f, In1<float> bias, View2<TC> c, Index begin) {
  const Index n = f.extent(0), d = f.extent(1);
  const Index ldf = f.stride(0), ldc = c.stride(0);
  const bool has_bias = bias.extent(0) > 0;
  TC* to = c.data() + begin * ldc;  // (not &c(begin, 0): see widen_rows)
  const float* from = f.data();
  if (std::is_same<TC, float>::value && !has_bias && static_cast<const void*>(from) == to &&
      ldf == ldc)
    return;
  if (!has_bias && ldf == d && ldc == d) {
    parallel_map(
        "mixed_matmul_finish", n * d, KOKKOS_LAMBDA(Index i) { return from[i]; },
        KOKKOS_LAMBDA(Index i, float v) { to[i] = store<TC>(v); });
    return;
  }
  const float* b = has_bias ? bias.data() : nullptr;
  parallel_row_map(
      "mixed_matmul_finish_rows", n, d,
      KOKKOS_LAMBDA(Index i, Index j) { return from[i * ldf + j] + (b ? b[j] : 0.0f); },
      KOKKOS_LAMBDA(Index i, Index j, float v) { to[i * ldc + j] = store<TC>(v); });
}

// c(i, j) = round(bias(j)) for every row of c (which may have padded rows):
// a bias that a product then adds its sum to (beta = 1).
template <class TC>
void bias_rows(In1<float> bias, View2<TC> c) {
  const Index n = c.extent(0), d = c.extent(1), ldc = c.stride(0);
  TC* to = c.data();
  const float* b = bias.data();
  // Two indices, not a flat one split by d: 64-bit division costs a GPU about
  // 100 instructions (a flat version took 110 us for [16384, 1024] on an
  // H200), a warp along a row (matrix_policy).
  Kokkos::parallel_for(
      "device_blas_bias_rows", matrix_policy(n, d),
      KOKKOS_LAMBDA(Index i, Index j) { to[i * ldc + j] = store<TC>(b[j]); });
}

}  // namespace reformer::ops::detail
