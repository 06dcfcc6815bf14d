// A decoding step's products over a few rows in one launch (issue 46, cached
// generation): out_i = f(LN(x) W_i + b_i) + beta out_i for up to three
// weights W_i [in, out_i] that read the same rows x [rows, in], the layer norm
// LN (when given) and the bias, activation and residual sum in the same
// kernel.
//
// One generated token a row gives products of 1-16 rows, where a GPU's time
// goes to launches: a pre-norm attention step was a layer norm, two or three
// vendor products and the output product, a feed-forward step a layer norm,
// two products and their two epilogues (about 50 launches a token for the
// 4-layer LM of bench_decode, against 2.7 ms for rerunning the whole 4K model
// on an H200). Here a sublayer's products take one launch each: the q, k and
// v projections (with the layer norm) one, the output product one, and each
// of the feed-forward's two products one.
//
// The arithmetic does not depend on the backend: a team takes 32 output
// columns of one W_i, its k-th input row goes to split k mod 8, and the 8
// splits' sums are added in split order; a GPU runs the splits on 8 warps of
// 32 lanes (a lane per column, so a warp reads 128 contiguous bytes of a
// weight row), the host runs them in turn in one thread. So a host test checks
// the GPU's order of sums, up to the compilers' contraction of multiply-adds
// and the layer norm's row statistics (lane sums on GPUs, a thread's loop on
// the host, as in ops::layer_norm_forward).
//
// REFORMER_STEP_PRODUCTS=fused|vendor picks where a decoding step's products
// run: `fused` (this kernel) or `vendor` (the layer norm, the vendor's
// products and their epilogues). `vendor` is the default everywhere until
// `fused` is timed on a GPU (tests/gpu_run.sh times both); on the host the
// BLAS is faster than this kernel's loops run serially. Tests switch with
// set_step_products().
#pragma once

#include "reformer/core/precision.hpp"
#include "reformer/core/types.hpp"
#include "reformer/ops/activations.hpp"

#include <optional>
#include <vector>

namespace reformer::ops {

enum class StepProducts { vendor, fused };
StepProducts step_products();
void set_step_products(StepProducts products);
const char* step_products_name(StepProducts products);

// The most rows the fused kernel takes (its per-lane sums are registers).
constexpr Index kRowsLinearMaxRows = 16;

// Whether a decoding step of `rows` rows runs its products in rows_linear.
inline bool fused_step_rows(Index rows) {
  return step_products() == StepProducts::fused && rows >= 1 && rows <= kRowsLinearMaxRows;
}

// LN(x) = (x - mean) / sqrt(var + eps) * gamma + beta per row (ops::layer_norm_forward's
// formula); an empty gamma means no layer norm.
template <class T>
struct RowNorm {
  In1<T> gamma, beta;
  compute_t<T> eps = 0;
  bool active() const { return gamma.extent(0) > 0; }
};

// One weight of a rows_linear call: out = f(in W + b) + residual out. bias may be empty.
template <class T>
struct RowProduct {
  In2<T> weight;
  In1<T> bias;
  View2<T> out;
};

// out_i = activation(LN(x) W_i + b_i) + residual out_i for every product i
// (at most 3), x [rows, in] with 1 <= rows <= kRowsLinearMaxRows; out_i is
// not read when residual is 0, and may not overlap x. float and double.
template <class T>
void rows_linear(In2<T> x, const RowNorm<T>& norm, const std::vector<RowProduct<T>>& products,
                 std::optional<Activation> activation, compute_t<T> residual);

}  // namespace reformer::ops
