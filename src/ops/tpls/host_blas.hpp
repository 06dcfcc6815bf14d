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

#include <vector>

namespace reformer::ops::tpls {

// C = alpha op(A) op(B) + beta C through the host BLAS, split over the host
// threads. Returns false (and does nothing) when this path does not apply:
// no host BLAS in Kokkos Kernels, memory not host memory, one thread, or a
// product too small to be worth splitting; the caller then calls
// KokkosBlas::gemm.
template <class T>
bool host_blas_matmul(In2<T> a, Trans trans_a, In2<T> b, Trans trans_b, View2<T> c, T alpha,
                      T beta);

// mixed_matmul on the host (bf16 activations, float32 weights): one parallel
// region per product instead of one per panel and pass. Each host thread takes
// a block of C. With a bf16 A, the thread runs the packed GEMM of
// host_bf16_gemm.hpp on it (A and B widened while they are packed, C rounded
// once); with REFORMER_BF16_GEMM=blas, or a float A, it runs the block in
// sub-panels of rows: the bf16 operands of a sub-panel are widened into the
// thread's own buffer (in cache), multiplied by the sequential BLAS and, for a
// bf16 C, rounded once into C. Rows of C are split when A is not transposed;
// when A is (a weight gradient X^T dY, summed over the rows in chunks of a
// fixed size, so the result does not depend on the thread count), columns of C
// (the packed GEMM: C's longer side). The packing buffers are one allocation
// of 2^18 floats per thread, labelled "mixed_matmul_panel". Returns false
// (nothing done) for other shapes, without a host BLAS, or on a device; the
// caller then runs the portable panel loop.
template <class TA, class TB, class TC>
bool host_mixed_matmul(In2<TA> a, Trans trans_a, In2<TB> b, Trans trans_b, View2<TC> c, float alpha,
                       float beta, In1<float> bias);
// C = beta C + alpha sum_i A_i op(B_i) (+ bias), the sum in float32 and C
// rounded once: a layer's input gradient from its projections' gradients.
template <class TA, class TC>
bool host_mixed_sum(const std::vector<In2<TA>>& as, const std::vector<In2<float>>& bs,
                    Trans trans_b, View2<TC> c, float alpha, float beta, In1<float> bias);

}  // namespace reformer::ops::tpls
