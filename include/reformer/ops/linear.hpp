// Affine map y = x W + b over the rows of x (x: [n, in], W: [in, out], b: [out]).
// Activations x, y, dy, dx are T; the parameters and their gradients are
// param_t<T> (float32 for bf16 activations, products accumulated in float32:
// core/precision.hpp).
#pragma once

#include "reformer/core/precision.hpp"
#include "reformer/core/types.hpp"
#include "reformer/ops/activations.hpp"

namespace reformer::ops {

// y = x W (+ b). `bias` may be an empty View (no bias).
template <class T>
void linear_forward(In2<T> x, In2<param_t<T>> weight, In1<param_t<T>> bias, View2<T> y);

// y(i, j) += b(j) on every row i (the bias of a product computed elsewhere,
// e.g. with a transposed weight).
template <class T>
void add_bias(View2<T> y, In1<param_t<T>> bias);

// y = f(x W + b), and pre = x W + b when pre is not y (a backward's recompute
// keeps it): the product, then one kernel for the bias and the activation
// (the same arithmetic as linear_forward and activation_forward, one launch
// fewer; bf16 takes those two).
template <class T>
void linear_activation_forward(In2<T> x, In2<param_t<T>> weight, In1<param_t<T>> bias,
                               Activation activation, View2<T> pre, View2<T> y);

// y = (x W + b) + beta y, with `scratch` ([n, out]) holding the product: one
// kernel after it for the bias and the sum (linear_forward then axpby, one
// launch fewer; bf16 takes those two).
template <class T>
void linear_residual_forward(In2<T> x, In2<param_t<T>> weight, In1<param_t<T>> bias,
                             compute_t<T> beta, View2<T> scratch, View2<T> y);

// dx = dy W^T (overwritten; skipped if dx is empty);
// dW += x^T dy and db += sum_rows dy (accumulated, so chunks can add up;
// db skipped if empty).
template <class T>
void linear_backward(In2<T> x, In2<param_t<T>> weight, In2<T> dy, View2<T> dx,
                     View2<param_t<T>> dweight, View1<param_t<T>> dbias);

}  // namespace reformer::ops
