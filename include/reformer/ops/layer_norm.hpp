// Layer normalisation over the last axis (Ba, Kiros, Hinton 2016):
//   y = (x - mean) / sqrt(var + eps) * gamma + beta, per row of x [n, d].
// x, y, dy, dx are activations (T); gamma, beta and their gradients are
// param_t<T>; the row statistics and every sum are compute_t<T>
// (core/precision.hpp: float32 for bf16 activations).
#pragma once

#include "reformer/core/precision.hpp"
#include "reformer/core/types.hpp"

namespace reformer::ops {

// Writes y and, for the backward pass, each row's mean and 1/sqrt(var + eps).
template <class T>
void layer_norm_forward(In2<T> x, In1<param_t<T>> gamma, In1<param_t<T>> beta, compute_t<T> eps,
                        View2<T> y, View1<compute_t<T>> mean, View1<compute_t<T>> rstd);

// dx (overwritten) from dy; dgamma += sum_rows dy * xhat, dbeta += sum_rows dy.
//   dx = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)), dxhat = dy * gamma.
template <class T>
void layer_norm_backward(In2<T> x, In1<param_t<T>> gamma, In1<compute_t<T>> mean,
                         In1<compute_t<T>> rstd, In2<T> dy, View2<T> dx, View1<param_t<T>> dgamma,
                         View1<param_t<T>> dbeta);

}  // namespace reformer::ops
