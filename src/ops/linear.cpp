#include "reformer/ops/linear.hpp"

#include "ops/column_sums.hpp"
#include "reformer/core/instantiate.hpp"
#include "reformer/core/matrix_policy.hpp"
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
  Kokkos::parallel_for(
      "linear_bias", matrix_policy(y.extent(0), y.extent(1)),
      KOKKOS_LAMBDA(Index i, Index j) { y(i, j) = store<T>(load(y(i, j)) + bias(j)); });
}

namespace {

// body(i, j0, j1) for the columns [j0, j1) of row i of an [n, cols] matrix,
// over every element once: runs along rows on the host (the body's loop
// vectorises), one element per thread on GPUs.
template <class Body>
void for_row_runs(const char* label, Index n, Index cols, const Body& body) {
  parallel_blocks(
      label, n * cols, KOKKOS_LAMBDA(Index begin, Index end) {
        for (Index k = begin; k < end;) {
          const Index i = k / cols, j0 = k % cols,
                      j1 = j0 + (end - k) < cols ? j0 + (end - k) : cols;
          body(i, j0, j1);
          k += j1 - j0;
        }
      });
}

// One run of linear_activation_forward's kernel, with its choices taken out
// of the loop (so that the host compiler vectorises it): v = p + b,
// p = v (kKeep), to = f(v).
template <bool kBias, bool kKeep, Activation kKind, class T, class B>
KOKKOS_INLINE_FUNCTION void bias_activation_run(T* p, T* to, const B* b, Index j0, Index j1) {
  using C = compute_t<T>;
  for (Index j = j0; j < j1; ++j) {
    const C v = kBias ? C(load(p[j]) + b[j]) : load(p[j]);
    if (kKeep) p[j] = store<T>(v);
    to[j] = store<T>(activation_value(kKind, v));
  }
}

template <bool kBias, bool kKeep, class T, class B>
KOKKOS_INLINE_FUNCTION void bias_activation_run(Activation kind, T* p, T* to, const B* b, Index j0,
                                                Index j1) {
  if (kind == Activation::ReLU)
    bias_activation_run<kBias, kKeep, Activation::ReLU>(p, to, b, j0, j1);
  else
    bias_activation_run<kBias, kKeep, Activation::GELU>(p, to, b, j0, j1);
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
    for_row_runs(
        "linear_bias_activation", n, out, KOKKOS_LAMBDA(Index i, Index j0, Index j1) {
          T* p = &pre(i, 0);
          T* to = &y(i, 0);
          const param_t<T>* b = has_bias ? &bias(0) : nullptr;
          if (has_bias && keep)
            bias_activation_run<true, true>(activation, p, to, b, j0, j1);
          else if (has_bias)
            bias_activation_run<true, false>(activation, p, to, b, j0, j1);
          else if (keep)
            bias_activation_run<false, true>(activation, p, to, b, j0, j1);
          else
            bias_activation_run<false, false>(activation, p, to, b, j0, j1);
        });
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
    const bool has_bias = bias.extent(0) > 0;
    for_row_runs(
        "linear_bias_residual", n, out, KOKKOS_LAMBDA(Index i, Index j0, Index j1) {
          const T* p = &scratch(i, 0);
          T* to = &y(i, 0);
          const param_t<T>* b = has_bias ? &bias(0) : nullptr;
          if (has_bias)
            for (Index j = j0; j < j1; ++j)
              to[j] = store<T>(C(1) * C(load(p[j]) + b[j]) + beta * load(to[j]));
          else
            for (Index j = j0; j < j1; ++j)
              to[j] = store<T>(C(1) * load(p[j]) + beta * load(to[j]));
        });
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
