// The vendor BLAS path of the dense products on GPUs (internal header; the
// loader is in reformer/ops/device_blas.hpp).
//
// Products of two bf16 factors go to the vendor's mixed-precision GEMM
// (cublasGemmEx, rocblas_gemm_ex) with float32 accumulation: every product
// a_ip b_pj is exact in float32 and the sum is float32. The vendors have no
// bf16 x float32 GEMM, so a product with a float32 factor (a weight) either
// rounds the weight to bf16 (REFORMER_BF16_WEIGHTS=round, the default: tensor
// cores, as torch.autocast; the result moves by up to 2^-8 sum_p |a_ip b_pj|)
// or widens its bf16 factor exactly to float32 (keep: a panel of rows at a
// time, or whole when it is transposed or on the right) and runs in the
// vendor's sgemm, as the host path does. A bf16 C is rounded once at the end;
// a bias for one bf16 x bf16 product is rounded to bf16 into C first. float32
// x float32 products go to sgemm (no TF32: the default math mode).
//
// Each function returns false, doing nothing, when the path does not apply: a
// host build, no vendor library, or a dimension beyond the vendor's 32-bit
// integers. The caller then runs the portable path.
#pragma once

#include "reformer/core/types.hpp"
#include "reformer/ops/gemm.hpp"

#include <vector>

namespace reformer::ops::tpls {

// A vendor library was loaded on this device build (device_blas_info().loaded,
// and REFORMER_DEVICE_BLAS is not "off").
bool device_blas_loaded();

// mixed_matmul (ops/gemm.hpp) through the vendor BLAS.
template <class TA, class TB, class TC>
bool device_mixed_matmul(In2<TA> a, Trans trans_a, In2<TB> b, Trans trans_b, View2<TC> c,
                         float alpha, float beta, In1<float> bias);

// C = beta C + alpha sum_i A_i op(B_i) (+ bias): a layer's input gradient from
// its projections' gradients, summed in float32 and, for a bf16 C, rounded once.
template <class TA, class TC>
bool device_mixed_sum(const std::vector<In2<TA>>& as, const std::vector<In2<float>>& bs,
                      Trans trans_b, View2<TC> c, float alpha, float beta, In1<float> bias);

// matmul<float> through the vendor's sgemm.
bool device_sgemm(In2<float> a, Trans trans_a, In2<float> b, Trans trans_b, View2<float> c,
                  float alpha, float beta);

// batched_matmul<T> (T float or double, Structure::Dense) through the vendor's
// strided-batched GEMM (cublas[SD]gemmStridedBatched, rocblas_[sd]gemm_strided_
// batched): one call for every batch entry. Each operand's rows must be
// contiguous; false when the path does not apply or the library lacks it.
template <class T>
bool device_gemm_strided_batched(In3<T> a, Trans trans_a, In3<T> b, Trans trans_b, View3<T> c,
                                 T alpha, T beta);
// The same for matrices at any row and batch strides (ops::StridedBatch).
template <class T>
bool device_gemm_strided_batched(StridedBatch<const T> a, Trans trans_a, StridedBatch<const T> b,
                                 Trans trans_b, StridedBatch<T> c, T alpha, T beta);

}  // namespace reformer::ops::tpls
