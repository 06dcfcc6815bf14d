// Element-wise combinations of same-shaped tensors, viewed as flat vectors.
#pragma once

#include "reformer/core/precision.hpp"
#include "reformer/core/types.hpp"

namespace reformer::ops {

// y = alpha * x + beta * y (beta = 0 overwrites y without reading it), in
// compute_t<T> with one rounding per element of y.
// x and y have the same number of elements (ShapeError otherwise).
template <class T>
void axpby(compute_t<T> alpha, In1<T> x, compute_t<T> beta, View1<T> y);

}  // namespace reformer::ops
