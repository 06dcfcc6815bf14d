#include "reformer/ops/linear.hpp"

#include "ops/column_sums.hpp"
#include "reformer/core/instantiate.hpp"
#include "reformer/core/shape.hpp"
#include "reformer/ops/gemm.hpp"

namespace reformer::ops {

template <class T>
void linear_forward(In2<T> x, In2<param_t<T>> weight, In1<param_t<T>> bias, View2<T> y) {
  const Index n = x.extent(0), out = weight.extent(1);
  if (bias.extent(0) > 0) require_extent("linear_forward", "bias", bias, 0, out);
  if constexpr (is_reduced_precision<T>) {
    // The bias is added in float32 before the one rounding of y.
    mixed_matmul<T, float, T>(x, Trans::No, weight, Trans::No, y, 1.0f, 0.0f, bias);
    return;
  } else {
    matmul<T>(x, Trans::No, weight, Trans::No, y);
    if (bias.extent(0) == 0) return;
    using Policy = Kokkos::MDRangePolicy<ExecSpace, Kokkos::Rank<2>>;
    Kokkos::parallel_for(
        "linear_bias", Policy({0, 0}, {n, out}),
        KOKKOS_LAMBDA(Index i, Index j) { y(i, j) += bias(j); });
  }
}

template <class T>
void linear_backward(In2<T> x, In2<param_t<T>> weight, In2<T> dy, View2<T> dx,
                     View2<param_t<T>> dweight, View1<param_t<T>> dbias) {
  const Index n = x.extent(0), out = weight.extent(1);
  require_extent("linear_backward", "dy", dy, 0, n);
  require_extent("linear_backward", "dy", dy, 1, out);
  require_same_shape("linear_backward", "weight", weight, "dweight", dweight);
  if constexpr (is_reduced_precision<T>) {
    // x and dy widened once per panel for both products.
    projections_backward<T>(x, {weight}, {dy}, dx, 0.0, {dweight});
  } else {
    if (dx.extent(0) > 0) matmul<T>(dy, Trans::No, weight, Trans::Yes, dx);
    matmul<T>(x, Trans::Yes, dy, Trans::No, dweight, T(1), T(1));
  }
  if (dbias.extent(0) == 0) return;
  require_extent("linear_backward", "dbias", dbias, 0, out);
  detail::add_column_sums<param_t<T>>(
      "linear_bias_grad", n, dbias, KOKKOS_LAMBDA(Index i, Index j) { return load(dy(i, j)); });
}

#define REFORMER_INSTANTIATE(T)                                                                  \
  template void linear_forward<T>(In2<T>, In2<param_t<T>>, In1<param_t<T>>, View2<T>);           \
  template void linear_backward<T>(In2<T>, In2<param_t<T>>, In2<T>, View2<T>, View2<param_t<T>>, \
                                   View1<param_t<T>>);
REFORMER_INSTANTIATE_STORAGE_TYPES(REFORMER_INSTANTIATE)

}  // namespace reformer::ops
