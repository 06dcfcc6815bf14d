// Matrix products. Dense 2-D products go through Kokkos Kernels
// (KokkosBlas::gemm: host BLAS, cuBLAS or rocBLAS); batched products for
// per-head work run as one Kokkos kernel over all batch entries.
#pragma once

#include <string>

#include "reformer/core/precision.hpp"
#include "reformer/core/types.hpp"

#include <type_traits>
#include <vector>

namespace reformer::ops {

enum class Trans { No, Yes };

// Known zeros that a batched product may skip (causal attention is triangular):
//   LowerA: op(A)(r, p) = 0 for p > r;  UpperA: op(A)(r, p) = 0 for p < r;
//   LowerC: only C(i, j) with j <= i is wanted; blocks wholly above the
//   diagonal are set to beta * C instead of being computed.
enum class Structure { Dense, LowerA, UpperA, LowerC };

// C = alpha * op(A) * op(B) + beta * C, with op(X) = X or X^T.
// A, B, C are row-major matrices; shapes are checked.
template <class T>
void matmul(In2<T> a, Trans trans_a, In2<T> b, Trans trans_b, View2<T> c, T alpha = T(1),
            T beta = T(0));

// C[i] = alpha * op(A[i]) * op(B[i]) + beta * C[i] for every batch entry i,
// in a single kernel launch.
template <class T>
void batched_matmul(In3<T> a, Trans trans_a, In3<T> b, Trans trans_b, View3<T> c, T alpha = T(1),
                    T beta = T(0), Structure structure = Structure::Dense);

// `count` row-major matrices of [rows, cols] in one allocation, matrix n's row
// i at data + n * batch_stride + i * row_stride, its columns contiguous: for
// example the heads of one batch row of a [batch, length, heads, d] tensor
// (batch_stride d, row_stride heads * d), read and written in place.
template <class T>
struct StridedBatch {
  T* data = nullptr;
  Index count = 0, rows = 0, cols = 0, row_stride = 0, batch_stride = 0;
};
// The matrices of a [count, rows, cols] view (its last stride must be 1).
template <class V>
StridedBatch<typename V::value_type> strided_batch(const V& x) {
  return {x.data(),           Index(x.extent(0)), Index(x.extent(1)),
          Index(x.extent(2)), Index(x.stride(1)), Index(x.stride(0))};
}

// C_n = alpha op(A_n) op(B_n) + beta C_n for every n < count: the vendor's
// strided-batched GEMM on a GPU whose vendor BLAS is loaded (one call), else a
// portable kernel, a thread per element of C (for the host tests of the GPU
// shapes that use it, not for speed). Shapes are checked; C may not overlap A
// or B.
template <class T>
void strided_batched_matmul(StridedBatch<const T> a, Trans trans_a, StridedBatch<const T> b,
                            Trans trans_b, StridedBatch<T> c, T alpha = T(1), T beta = T(0));

// Mixed precision (issue 34): C = alpha op(A) op(B) + beta C (+ bias(j) on
// every row when bias is given) with A, B and C each float or bf16, every
// product and sum in float32, and one rounding per element of a bf16 C.
// bf16 operands are widened a panel of rows at a time (at most about 1 MiB of
// float32 each) and the panels go through matmul<float>, the host BLAS or the
// device's; so a product that is not memory-bound runs at the float rate, and
// the scratch does not grow with the sequence. Panels follow the rows of C
// when A is not transposed, and the inner dimension when A is transposed and
// B is not (the weight gradients X^T dY); other shapes widen whole operands.
// On a GPU whose vendor BLAS is loaded (ops/device_blas.hpp) the product runs
// there with the same products: two bf16 factors in the vendor's bf16 GEMM
// with float32 accumulation, a bf16 factor with a float32 one widened to
// float32 for the vendor's sgemm.
template <class TA, class TB, class TC>
void mixed_matmul(In2<TA> a, Trans trans_a, In2<TB> b, Trans trans_b, View2<TC> c,
                  float alpha = 1.0f, float beta = 0.0f, In1<float> bias = In1<float>());

// The product of a layer: activations of type T and parameters of
// param_t<T> in any combination (y = x W, dx = dy W^T, dW += x^T dy).
// matmul<T> when every operand has one type that computes itself (float,
// double), mixed_matmul otherwise (bf16 activations, float32 parameters).
template <class TA, class TB, class TC>
void product(In2<TA> a, Trans trans_a, In2<TB> b, Trans trans_b, View2<TC> c, double alpha = 1.0,
             double beta = 0.0) {
  if constexpr (std::is_same<TA, TB>::value && std::is_same<TB, TC>::value &&
                !is_reduced_precision<TA>)
    matmul<TA>(a, trans_a, b, trans_b, c, TA(alpha), TA(beta));
  else
    mixed_matmul<TA, TB, TC>(a, trans_a, b, trans_b, c, float(alpha), float(beta));
}

// The projections of one input through several weights (a layer's q, k and
// v; a linear map's backward):
//   forward:  y_i = x W_i
//   backward: dx = beta dx + sum_i dy_i W_i^T,   dW_i += x^T dy_i
// with activations x, y_i, dy_i, dx of type T and weights and their gradients
// of param_t<T>. float and double: one matmul per product, in the order
// written. bf16: per panel of rows, x, dx and every dy_i are widened once, the
// sum over i accumulates in float32 and dx is rounded once.
template <class T>
void projections_forward(In2<T> x, const std::vector<In2<param_t<T>>>& weights,
                         const std::vector<View2<T>>& outputs);
template <class T>
void projections_backward(In2<T> x, const std::vector<In2<param_t<T>>>& weights,
                          const std::vector<In2<T>>& output_grads, View2<T> dx, double beta,
                          const std::vector<View2<param_t<T>>>& weight_grads);

// The host path of the products with bf16 activations (mixed_matmul and the
// projections, on the host; devices use their vendor BLAS):
//   Automatic         the packed GEMM (src/ops/tpls/host_bf16_gemm.hpp) with the
//                     widest block this CPU runs;
//   Blas              bf16 operands widened into float32 sub-panels for the host
//                     BLAS, a bf16 C rounded afterwards;
//   Packed            the packed GEMM with the widest block (as Automatic);
//   PackedBuildBlock  the packed GEMM with the block of the build's own target
//                     (an x86-64-v3 build on an AVX-512 CPU: the AVX2 block);
//   PackedDot         the packed GEMM with the widest block, and the products of
//                     two bf16 factors (weight gradients) in the bf16
//                     dot-product instruction (vdpbf16ps) where the build's
//                     target has it (CpuTarget::bf16_dot_product; elsewhere as
//                     Packed). Not the default: on the Xeon it was timed on it
//                     ran 1.35-1.6x slower than widening into float FMAs
//                     (docs/memory.md, "vdpbf16ps for the weight gradients").
// A process starts with REFORMER_BF16_GEMM (blas, packed, narrow or dot),
// else Automatic. Set it between products, not while one runs (tests and
// comparisons: every path gives the same products within float32 round-off).
enum class HostBf16Gemm { Automatic, Blas, Packed, PackedBuildBlock, PackedDot };
HostBf16Gemm host_bf16_gemm();
void set_host_bf16_gemm(HostBf16Gemm path);
// The register block the packed GEMM takes on this path, e.g. "6 x 16 (AVX2)",
// or "none (BLAS)" on the Blas path.
const char* host_bf16_gemm_block();

// Makes a multithreaded (pthreads) host BLAS run one thread per call: large
// host products are split over Kokkos' own threads, each calling the BLAS on
// its block (one pool of threads, not two). Runtime calls it at start (ops
// registers it with core/runtime.hpp's register_runtime_setup), so that
// every product of a process runs the same code path from the first one on
// (a BLAS made sequential only at the first large product would sum the
// earlier small ones in another order). Cheap after the first call; does
// nothing without a host BLAS or when it already runs one thread a call.
void prepare_host_blas();

// The host BLAS's kernel set. OpenBLAS built with DYNAMIC_ARCH (Debian's)
// picks its kernels from the CPU when it loads; on a CPU it does not know (a
// virtual machine that hides the model, a newer family) it falls back to its
// SSE3 kernels ("Prescott"): on a 2-core Sapphire Rapids VM its sgemm ran at
// 46 GFLOP/s against 240 with the AVX-512 kernels (docs/benchmarks.md).
//   host_blas_description(): "OpenBLAS 0.3.21 ..., core SkylakeX" or the
//     BLAS's name when it is not OpenBLAS;
//   host_blas_core_override(): the OPENBLAS_CORETYPE this CPU should run
//     when OpenBLAS picked a generic core and none is set: "SkylakeX" with
//     AVX-512 F, BW, VL and DQ, "Haswell" with AVX2 and FMA; "" otherwise.
// OpenBLAS reads OPENBLAS_CORETYPE only when it loads, so a program applies
// the override by running itself again with it set (the reformer CLI does,
// once, before anything else: cli/main.cpp).
std::string host_blas_description();
std::string host_blas_core_override();
// A program's first call (before MPI or Kokkos start): when
// host_blas_core_override() names a core, runs the program again (execv of
// /proc/self/exe with `argv`), once, with OPENBLAS_CORETYPE set to it and
// REFORMER_BLAS_CORE_SET naming it; returns when there is nothing to do or the
// exec failed (the program then goes on with the generic kernels).
void run_with_host_blas_core(char** argv);
// A benchmark that compares code built for narrower vectors than the CPU has
// (the x86-64-v3 tile guard, bench/tile_guard.cpp) with the BLAS should run
// the BLAS's kernels of the same width, or it measures the instruction set,
// not the code:
//   host_blas_core_for_vectors(bytes): the OpenBLAS core whose kernels use
//     x86 vectors of `bytes` bytes ("SkylakeX" for 64, "Haswell" for 32) when
//     this CPU runs them, OpenBLAS is loaded, OPENBLAS_CORETYPE is not set and
//     the loaded core is another; "" otherwise;
//   run_with_host_blas_core(argv, core): as above with that core.
std::string host_blas_core_for_vectors(int vector_bytes);
void run_with_host_blas_core(char** argv, const std::string& core);

}  // namespace reformer::ops
