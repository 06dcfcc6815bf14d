// mixed_matmul (ops/gemm.hpp): bf16 operands widened a panel at a time, the
// panels multiplied by matmul<float>, a bf16 result rounded once.
#include "ops/panel_rows.hpp"
#include "ops/tpls/device_blas.hpp"
#include "ops/tpls/host_blas.hpp"
#include "reformer/core/error.hpp"
#include "reformer/core/instantiate.hpp"
#include "reformer/core/shape.hpp"
#include "reformer/ops/gemm.hpp"

#include <algorithm>
#include <type_traits>
#include <utility>

namespace reformer::ops {
namespace {

// Elements of one widened panel (1 MiB of float32: at d_model 256, panels of
// 512 rows, which the BLAS multiplies at its full rate).
constexpr Index kPanelElements = Index(1) << 18;

template <class T>
constexpr bool is_float = std::is_same<T, float>::value;

// Rows [begin, end) of `from` in float32: a view of them when they are float
// already, otherwise widened into `scratch` (reallocated when too small).
template <class T>
In2<float> float_rows(In2<T> from, Index begin, Index end, View2<float>& scratch) {
  const auto rows = Kokkos::subview(from, std::make_pair(begin, end), Kokkos::ALL);
  if constexpr (is_float<T>) {
    return rows;
  } else {
    const Index n = end - begin, d = from.extent(1);
    if (Index(scratch.extent(0)) < n || Index(scratch.extent(1)) != d)
      scratch =
          View2<float>(Kokkos::view_alloc("mixed_matmul_panel", Kokkos::WithoutInitializing), n, d);
    const auto out = Kokkos::subview(scratch, std::make_pair(Index(0), n), Kokkos::ALL);
    detail::widen_rows<T>(from, begin, n, out.data());
    return out;
  }
}

// Rows [begin, end) of C as a float panel to compute into: C itself when it
// is float, otherwise `scratch`, widened from C only when beta reads it.
template <class TC>
View2<float> float_output(View2<TC> c, Index begin, Index end, float beta, View2<float>& scratch) {
  if constexpr (is_float<TC>) {
    return Kokkos::subview(c, std::make_pair(begin, end), Kokkos::ALL);
  } else {
    const Index n = end - begin, d = c.extent(1);
    if (beta != 0.0f) {
      const In2<float> widened = float_rows<TC>(c, begin, end, scratch);
      return View2<float>(const_cast<float*>(widened.data()), n, d);
    }
    if (Index(scratch.extent(0)) < n || Index(scratch.extent(1)) != d)
      scratch =
          View2<float>(Kokkos::view_alloc("mixed_matmul_panel", Kokkos::WithoutInitializing), n, d);
    return View2<float>(scratch.data(), n, d);
  }
}

}  // namespace

template <class TA, class TB, class TC>
void mixed_matmul(In2<TA> a, Trans trans_a, In2<TB> b, Trans trans_b, View2<TC> c, float alpha,
                  float beta, In1<float> bias) {
  const char* op = "mixed_matmul";
  const Index m = c.extent(0), n = c.extent(1);
  const Index k = trans_a == Trans::No ? a.extent(1) : a.extent(0);
  if (bias.extent(0) > 0) require_extent(op, "bias", bias, 0, n);
  const Index a_rows = trans_a == Trans::No ? a.extent(0) : a.extent(1);
  const Index b_inner = trans_b == Trans::No ? b.extent(0) : b.extent(1);
  const Index b_cols = trans_b == Trans::No ? b.extent(1) : b.extent(0);
  require<ShapeError>(a_rows == m && b_inner == k && b_cols == n && m > 0 && n > 0 && k > 0, op,
                      ": op(A) is [", a_rows, ", ", k, "], op(B) is [", b_inner, ", ", b_cols,
                      "] and C is ", shape_string(c),
                      "; C = op(A) op(B) needs [m, k] x [k, n] = [m, n], every dimension positive");
  if (tpls::host_mixed_matmul<TA, TB, TC>(a, trans_a, b, trans_b, c, alpha, beta, bias)) return;
  if (tpls::device_mixed_matmul<TA, TB, TC>(a, trans_a, b, trans_b, c, alpha, beta, bias)) return;
  View2<float> scratch_a, scratch_b, scratch_c;
  if (trans_a == Trans::No) {
    // Panels of C's rows: B widened once, A and C a panel at a time.
    const In2<float> bf = float_rows<TB>(b, 0, b.extent(0), scratch_b);
    const Index panel = std::max<Index>(64, kPanelElements / std::max<Index>(k + n, 1));
    for (Index r0 = 0; r0 < m; r0 += panel) {
      const Index r1 = std::min(m, r0 + panel);
      const In2<float> af = float_rows<TA>(a, r0, r1, scratch_a);
      const View2<float> cf = float_output<TC>(c, r0, r1, beta, scratch_c);
      matmul<float>(af, Trans::No, bf, trans_b, cf, alpha, beta);
      detail::finish_rows<TC>(cf, bias, c, r0);
    }
    return;
  }
  // op(A) = A^T: the product sums over A's rows. With B not transposed, B's rows
  // are the same index: panels of it, summed into one float C.
  const View2<float> cf = float_output<TC>(c, 0, m, beta, scratch_c);
  if (trans_b == Trans::No) {
    const Index panel =
        std::max<Index>(64, kPanelElements / std::max<Index>(Index(a.extent(1)) + n, 1));
    for (Index p0 = 0; p0 < k; p0 += panel) {
      const Index p1 = std::min(k, p0 + panel);
      const In2<float> af = float_rows<TA>(a, p0, p1, scratch_a);
      const In2<float> bf = float_rows<TB>(b, p0, p1, scratch_b);
      matmul<float>(af, Trans::Yes, bf, Trans::No, cf, alpha, p0 == 0 ? beta : 1.0f);
    }
  } else {
    const In2<float> af = float_rows<TA>(a, 0, a.extent(0), scratch_a);
    const In2<float> bf = float_rows<TB>(b, 0, b.extent(0), scratch_b);
    matmul<float>(af, Trans::Yes, bf, Trans::Yes, cf, alpha, beta);
  }
  detail::finish_rows<TC>(cf, bias, c, 0);
}

namespace {

void check_projections(const char* op, Index rows, Index width, std::size_t weights,
                       std::size_t tensors, std::size_t grads) {
  require<ShapeError>(weights > 0 && tensors == weights && (grads == 0 || grads == weights), op,
                      ": ", weights, " weights, ", tensors, " outputs and ", grads,
                      " weight gradients; give one output (and gradient) per weight");
  require<ShapeError>(rows > 0 && width > 0, op, ": the input has shape [", rows, ", ", width,
                      "]; both must be positive");
}

}  // namespace

template <class T>
void projections_forward(In2<T> x, const std::vector<In2<param_t<T>>>& weights,
                         const std::vector<View2<T>>& outputs) {
  check_projections("projections_forward", x.extent(0), x.extent(1), weights.size(), outputs.size(),
                    0);
  if constexpr (!is_reduced_precision<T>) {
    for (std::size_t i = 0; i < weights.size(); ++i)
      matmul<T>(x, Trans::No, weights[i], Trans::No, outputs[i]);
  } else {
    // Host, or a device with its vendor BLAS: one product per output (on the
    // device, bf16 x bf16 with the weight rounded once; ops/tpls/device_blas.hpp).
    if (kHostMemory || tpls::device_blas_loaded()) {
      for (std::size_t i = 0; i < weights.size(); ++i)
        mixed_matmul<T, float, T>(x, Trans::No, weights[i], Trans::No, outputs[i]);
      return;
    }
    const Index m = x.extent(0), k = x.extent(1);
    Index width = k;
    for (const auto& y : outputs) width += y.extent(1);
    const Index panel = std::max<Index>(64, kPanelElements / width);
    View2<float> scratch_x, scratch_y;
    for (Index r0 = 0; r0 < m; r0 += panel) {
      const Index r1 = std::min(m, r0 + panel);
      const In2<float> xf = float_rows<T>(x, r0, r1, scratch_x);
      for (std::size_t i = 0; i < weights.size(); ++i) {
        const View2<float> yf = float_output<T>(outputs[i], r0, r1, 0.0f, scratch_y);
        matmul<float>(xf, Trans::No, weights[i], Trans::No, yf);
        detail::finish_rows<T>(yf, In1<float>(), outputs[i], r0);
      }
    }
  }
}

template <class T>
void projections_backward(In2<T> x, const std::vector<In2<param_t<T>>>& weights,
                          const std::vector<In2<T>>& output_grads, View2<T> dx, double beta,
                          const std::vector<View2<param_t<T>>>& weight_grads) {
  check_projections("projections_backward", x.extent(0), x.extent(1), weights.size(),
                    output_grads.size(), weight_grads.size());
  const bool input_grad = dx.extent(0) > 0;
  if constexpr (!is_reduced_precision<T>) {
    for (std::size_t i = 0; i < weights.size(); ++i) {
      if (input_grad)
        matmul<T>(output_grads[i], Trans::No, weights[i], Trans::Yes, dx, T(1),
                  i == 0 ? T(beta) : T(1));
      matmul<T>(x, Trans::Yes, output_grads[i], Trans::No, weight_grads[i], T(1), T(1));
    }
  } else {
    // Host: dx in one pass over the rows (every dy_i widened there, the sum in
    // float32, one rounding), then each weight gradient. A device with its
    // vendor BLAS: the same sum of products in a float32 panel.
    const std::vector<In2<T>> dys(output_grads.begin(), output_grads.end());
    if ((kHostMemory || tpls::device_blas_loaded()) &&
        (!input_grad ||
         tpls::host_mixed_sum<T, T>(dys, weights, Trans::Yes, dx, 1.0f, float(beta),
                                    In1<float>()) ||
         tpls::device_mixed_sum<T, T>(dys, weights, Trans::Yes, dx, 1.0f, float(beta),
                                      In1<float>()))) {
      for (std::size_t i = 0; i < weights.size(); ++i)
        mixed_matmul<T, T, float>(x, Trans::Yes, output_grads[i], Trans::No, weight_grads[i], 1.0f,
                                  1.0f);
      return;
    }
    const Index m = x.extent(0), k = x.extent(1);
    Index width = 2 * k;
    for (const auto& dy : output_grads) width += dy.extent(1);
    const Index panel = std::max<Index>(64, kPanelElements / width);
    View2<float> scratch_x, scratch_dx;
    std::vector<View2<float>> scratch_dy(weights.size());
    for (Index r0 = 0; r0 < m; r0 += panel) {
      const Index r1 = std::min(m, r0 + panel);
      const In2<float> xf = float_rows<T>(x, r0, r1, scratch_x);
      const View2<float> dxf =
          input_grad ? float_output<T>(dx, r0, r1, float(beta), scratch_dx) : View2<float>();
      for (std::size_t i = 0; i < weights.size(); ++i) {
        const In2<float> dyf = float_rows<T>(output_grads[i], r0, r1, scratch_dy[i]);
        if (input_grad)
          matmul<float>(dyf, Trans::No, weights[i], Trans::Yes, dxf, 1.0f,
                        i == 0 ? float(beta) : 1.0f);
        matmul<float>(xf, Trans::Yes, dyf, Trans::No, weight_grads[i], 1.0f, 1.0f);
      }
      if (input_grad) detail::finish_rows<T>(dxf, In1<float>(), dx, r0);
    }
  }
}

#define REFORMER_INSTANTIATE_PROJECTIONS(T)                                           \
  template void projections_forward<T>(In2<T>, const std::vector<In2<param_t<T>>>&,   \
                                       const std::vector<View2<T>>&);                 \
  template void projections_backward<T>(In2<T>, const std::vector<In2<param_t<T>>>&,  \
                                        const std::vector<In2<T>>&, View2<T>, double, \
                                        const std::vector<View2<param_t<T>>>&);
REFORMER_INSTANTIATE_STORAGE_TYPES(REFORMER_INSTANTIATE_PROJECTIONS)

#define REFORMER_INSTANTIATE_MIXED(TA, TB, TC)                                                    \
  template void mixed_matmul<TA, TB, TC>(In2<TA>, Trans, In2<TB>, Trans, View2<TC>, float, float, \
                                         In1<float>);
REFORMER_INSTANTIATE_MIXED_TYPES(REFORMER_INSTANTIATE_MIXED)

}  // namespace reformer::ops
