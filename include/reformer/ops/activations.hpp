// Element-wise activations on flat tensors (use as_vector for any rank).
//   ReLU(x) = max(x, 0)
//   GELU(x) = x * Phi(x) = 0.5 x (1 + erf(x / sqrt(2)))   (exact form)
#pragma once

#include "reformer/core/kokkos_compat.hpp"
#include "reformer/core/types.hpp"

#include <string>

namespace reformer::ops {

enum class Activation { ReLU, GELU };

// f(v) of one value in the compute type (the kernels below and the fused
// linear_activation_forward share it).
template <class C>
KOKKOS_INLINE_FUNCTION C activation_value(Activation kind, C v) {
  if (kind == Activation::ReLU) return v > C(0) ? v : C(0);
  return C(0.5) * v * (C(1) + compat::erf(v * C(0.70710678118654752440)));
}

// "relu" / "gelu" (for configs); throws ConfigError naming the value otherwise.
Activation parse_activation(const std::string& name);

template <class T>
void activation_forward(Activation kind, In1<T> x, View1<T> y);

// dx = dy * f'(x); may alias dx with dy.
template <class T>
void activation_backward(Activation kind, In1<T> x, In1<T> dy, View1<T> dx);

}  // namespace reformer::ops
