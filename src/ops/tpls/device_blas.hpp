// The vendor BLAS path of the dense products on GPUs (internal header; the
// loader is in reformer/ops/device_blas.hpp).
//
// bf16 operands go to the vendor's mixed-precision GEMM (cublasGemmEx,
// rocblas_gemm_ex) with float32 accumulation; a float32 operand of a mixed
// product (a weight) is first rounded once into a bf16 copy, so that both
// factors are bf16 (the vendors take no bf16 x float32 product). Every product
// a_ip b_pj is then exact in float32 and the sum is accumulated in float32: the
// result differs from the float32 product of the unrounded operands by at most
// u sum_p |a_ip b_pj| (u = 2^-8, the weight's rounding) plus the float32
// summation error, and a bf16 C is rounded once more at the end. float32 x
// float32 products go to the vendor's sgemm (no TF32: the default math mode).
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

}  // namespace reformer::ops::tpls
