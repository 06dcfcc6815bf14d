// Softmax and log-softmax along the last axis of x [n, d].
//   softmax(x)_j = exp(x_j - max) / sum_k exp(x_k - max)
//   log_softmax(x)_j = x_j - logsumexp(x)
#pragma once

#include "reformer/core/types.hpp"

namespace reformer::ops {

template <class T>
void softmax_forward(In2<T> x, View2<T> y);

// dx = y * (dy - sum_j dy_j y_j), from the forward output y.
template <class T>
void softmax_backward(In2<T> y, In2<T> dy, View2<T> dx);

template <class T>
void log_softmax_forward(In2<T> x, View2<T> y);

// dx = dy - exp(y) * sum_j dy_j, from the forward output y.
template <class T>
void log_softmax_backward(In2<T> y, In2<T> dy, View2<T> dx);

}  // namespace reformer::ops
