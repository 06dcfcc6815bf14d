#include "reformer/ops/linear.hpp"

#include "ops/column_sums.hpp"
#include "reformer/core/element_map.hpp"
#include "reformer/core/instantiate.hpp"
#include "reformer/core/shape.hpp"
#include "reformer/ops/elementwise.hpp"
#include "reformer/ops/gemm.hpp"

namespace reformer::ops {

template <class T>
void linear_forward(In2<T> x, In2<param_t<T>> weight, In1<param_t<T>> bias, View2<T> y) {
  const Index out = weight.extent(1);
  if (bias.extent(0) > 0) require_extent("linear_forward", "bias", bias, 0, out);
  if constexpr (is_reduced_precision<T>) {
    // The bias is added in float32 before the one rounding of y.
    mixed_matmul<T, float, T>(x, Trans::No, weight, Trans::No, y, 1.0f, 0.0f, bias);
    return;
  } else {
    matmul<T>(x, Trans::No, weight, Trans::No, y);
    if (bias.extent(0) > 0) add_bias<T>(y, bias);
  }
}

template <class T>
void add_bias(View2<T> y, In1<param_t<T>> bias) {
  require_extent("add_bias", "bias", bias, 0, y.extent(1));
  T* py = y.data();
  const param_t<T>* b = bias.data();
  const Index ld = y.stride(0);
  parallel_row_map(
      "linear_bias", y.extent(0), y.extent(1),
      KOKKOS_LAMBDA(Index i, Index j) { return load(py[i * ld + j]) + b[j]; },
      KOKKOS_LAMBDA(Index i, Index j, compute_t<T> v) { py[i * ld + j] = store<T>(v); });
}

namespace {

// y = f(p + b) over the rows of linear_activation_forward's result, p = p + b
// kept (kKeep), with the choices taken out of the loop (so that the host
// compiler vectorises it).
template <bool kBias, bool kKeep, Activation kKind, class T, class B>
void bias_activation(Index n, Index cols, T* p, Index ldp, T* to, Index ldt, const B* b) {
  using C = compute_t<T>;
  parallel_row_map(
      "linear_bias_activation", n, cols,
      KOKKOS_LAMBDA(Index i, Index j) {
        return kBias ? C(load(p[i * ldp + j]) + b[j]) : C(load(p[i * ldp + j]));
      },
      KOKKOS_LAMBDA(Index i, Index j, C v) {
        if (kKeep) p[i * ldp + j] = store<T>(v);
        to[i * ldt + j] = store<T>(activation_value(kKind, v));
      });
}

template <bool kBias, bool kKeep, class T, class B>
void bias_activation(Activation kind, Index n, Index cols, T* p, Index ldp, T* to, Index ldt,
                     const B* b) {
  if (kind == Activation::ReLU)
    bias_activation<kBias, kKeep, Activation::ReLU>(n, cols, p, ldp, to, ldt, b);
  else
    bias_activation<kBias, kKeep, Activation::GELU>(n, cols, p, ldp, to, ldt, b);
}

}  // namespace

template <class T>
void linear_activation_forward(In2<T> x, In2<param_t<T>> weight, In1<param_t<T>> bias,
                               Activation activation, View2<T> pre, View2<T> y) {
  const char* op = "linear_activation_forward";
  require_same_shape(op, "pre", pre, "y", y);
  if constexpr (is_reduced_precision<T>) {
    linear_forward<T>(x, weight, bias, pre);
    activation_forward<T>(activation, as_vector(pre), as_vector(y));
  } else {
    const Index n = x.extent(0), out = weight.extent(1);
    if (bias.extent(0) > 0) require_extent(op, "bias", bias, 0, out);
    require_extent(op, "y", y, 1, out);
    matmul<T>(x, Trans::No, weight, Trans::No, pre);
    const bool keep = pre.data() != y.data(), has_bias = bias.extent(0) > 0;
    T* p = pre.data();
    T* to = y.data();
    const Index ldp = pre.stride(0), ldt = y.stride(0);
    const param_t<T>* b = has_bias ? bias.data() : nullptr;
    if (has_bias && keep)
      bias_activation<true, true>(activation, n, out, p, ldp, to, ldt, b);
    else if (has_bias)
      bias_activation<true, false>(activation, n, out, p, ldp, to, ldt, b);
    else if (keep)
      bias_activation<false, true>(activation, n, out, p, ldp, to, ldt, b);
    else
      bias_activation<false, false>(activation, n, out, p, ldp, to, ldt, b);
  }
}

template <class T>
void linear_residual_forward(In2<T> x, In2<param_t<T>> weight, In1<param_t<T>> bias,
                             compute_t<T> beta, View2<T> scratch, View2<T> y) {
  const char* op = "linear_residual_forward";
  require_same_shape(op, "scratch", scratch, "y", y);
  if constexpr (is_reduced_precision<T>) {
    linear_forward<T>(x, weight, bias, scratch);
    axpby<T>(compute_t<T>(1), as_vector(scratch), beta, as_vector(y));
  } else {
    using C = compute_t<T>;
    const Index n = x.extent(0), out = weight.extent(1);
    if (bias.extent(0) > 0) require_extent(op, "bias", bias, 0, out);
    require_extent(op, "y", y, 1, out);
    matmul<T>(x, Trans::No, weight, Trans::No, scratch);
    const T* p = scratch.data();
    T* to = y.data();
    const Index ldp = scratch.stride(0), ldt = y.stride(0);
    const param_t<T>* b = bias.extent(0) > 0 ? bias.data() : nullptr;
    const auto set = KOKKOS_LAMBDA(Index i, Index j, C v) { to[i * ldt + j] = store<T>(v); };
    if (b)
      parallel_row_map(
          "linear_bias_residual", n, out,
          KOKKOS_LAMBDA(Index i, Index j) {
            return C(1) * C(load(p[i * ldp + j]) + b[j]) + beta * load(to[i * ldt + j]);
          },
          set);
    else
      parallel_row_map(
          "linear_bias_residual", n, out,
          KOKKOS_LAMBDA(Index i, Index j) {
            return C(1) * load(p[i * ldp + j]) + beta * load(to[i * ldt + j]);
          },
          set);
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

#define REFORMER_INSTANTIATE(T)                                                                    \
  template void linear_forward<T>(In2<T>, In2<param_t<T>>, In1<param_t<T>>, View2<T>);             \
  template void add_bias<T>(View2<T>, In1<param_t<T>>);                                            \
  template void linear_activation_forward<T>(In2<T>, In2<param_t<T>>, In1<param_t<T>>, Activation, \
                                             View2<T>, View2<T>);                                  \
  template void linear_residual_forward<T>(In2<T>, In2<param_t<T>>, In1<param_t<T>>, compute_t<T>, \
                                           View2<T>, View2<T>);                                    \
  template void linear_backward<T>(In2<T>, In2<param_t<T>>, In2<T>, View2<T>, View2<param_t<T>>,   \
                                   View1<param_t<T>>);
REFORMER_INSTANTIATE_STORAGE_TYPES(REFORMER_INSTANTIATE)

}  // namespace reformer::ops
