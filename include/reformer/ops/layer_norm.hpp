// Layer normalisation over the last axis (Ba, Kiros, Hinton 2016):
//   y = (x - mean) / sqrt(var + eps) * gamma + beta, per row of x [n, d].
#pragma once

#include "reformer/core/types.hpp"

namespace reformer::ops {

// Writes y and, for the backward pass, each row's mean and 1/sqrt(var + eps).
template <class T>
void layer_norm_forward(In2<T> x, In1<T> gamma, In1<T> beta, T eps, View2<T> y, View1<T> mean,
                        View1<T> rstd);

// dx (overwritten) from dy; dgamma += sum_rows dy * xhat, dbeta += sum_rows dy.
//   dx = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)), dxhat = dy * gamma.
template <class T>
void layer_norm_backward(In2<T> x, In1<T> gamma, In1<T> mean, In1<T> rstd, In2<T> dy, View2<T> dx,
                         View1<T> dgamma, View1<T> dbeta);

}  // namespace reformer::ops
