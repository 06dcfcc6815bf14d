// The host BLAS path of ops::matmul (internal header).
//
// With the OpenMP backend, a multithreaded BLAS brings a second pool of
// threads: OpenBLAS's pthreads then wait for cores that Kokkos' OpenMP threads
// spin on between kernels, and the reverse (a profile of a training step on
// 2 cores spent a third of its cycles spinning or yielding). Instead, a large
// product is cut into one block of rows (or of columns) of C per Kokkos host
// thread, and each thread calls a single-threaded BLAS on its block: one pool
// of threads for everything.
#pragma once

#include "reformer/core/types.hpp"
#include "reformer/ops/gemm.hpp"

namespace reformer::ops::tpls {

// C = alpha op(A) op(B) + beta C through the host BLAS, split over the host
// threads. Returns false (and does nothing) when this path does not apply:
// no host BLAS in Kokkos Kernels, memory not host memory, one thread, or a
// product too small to be worth splitting; the caller then calls
// KokkosBlas::gemm.
template <class T>
bool host_blas_matmul(In2<T> a, Trans trans_a, In2<T> b, Trans trans_b, View2<T> c, T alpha,
                      T beta);

}  // namespace reformer::ops::tpls
