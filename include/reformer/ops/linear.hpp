// Affine map y = x W + b over the rows of x (x: [n, in], W: [in, out], b: [out]).
// Activations x, y, dy, dx are T; the parameters and their gradients are
// param_t<T> (float32 for bf16 activations, products accumulated in float32:
// core/precision.hpp).
#pragma once

#include "reformer/core/precision.hpp"
#include "reformer/core/types.hpp"

namespace reformer::ops {

// y = x W (+ b). `bias` may be an empty View (no bias).
template <class T>
void linear_forward(In2<T> x, In2<param_t<T>> weight, In1<param_t<T>> bias, View2<T> y);

// dx = dy W^T (overwritten; skipped if dx is empty);
// dW += x^T dy and db += sum_rows dy (accumulated, so chunks can add up;
// db skipped if empty).
template <class T>
void linear_backward(In2<T> x, In2<param_t<T>> weight, In2<T> dy, View2<T> dx,
                     View2<param_t<T>> dweight, View1<param_t<T>> dbias);

}  // namespace reformer::ops
