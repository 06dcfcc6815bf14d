// Storage, compute and parameter types of mixed precision (issue 34).
//
// An op templated on T stores its activations (inputs, outputs and what a
// forward pass saves for its backward pass) as T. It reads them into
// compute_t<T> registers, accumulates every product, sum, softmax and
// normalisation there, and rounds once when it stores a result:
//
//   T          storage of activations   compute_t<T>   param_t<T>
//   double     double                   double         double     (gradient checks)
//   float      float                    float          float      (float32 training)
//   bf16       bf16 (16 bits)           float          float      (bf16 training)
//
// Parameters, their gradients and the optimizer's moments are param_t<T>: a
// bf16 model reads float32 master weights and adds float32 gradients. For
// float and double every helper here is the identity, so an op written with
// them compiles to what it was before.
//
// bf16 has no arithmetic of its own (core/bfloat16.hpp): code that forgets to
// load() a bf16 value, or to store() a float into one, does not compile.
#pragma once

#include "reformer/core/bfloat16.hpp"

#include <string>
#include <type_traits>

namespace reformer {

template <class T>
struct PrecisionTraits {
  using compute = T;
  using param = T;
};

template <>
struct PrecisionTraits<bf16> {
  using compute = float;
  using param = float;
};

template <class T>
using compute_t = typename PrecisionTraits<std::remove_const_t<T>>::compute;
template <class T>
using param_t = typename PrecisionTraits<std::remove_const_t<T>>::param;

// True for storage types narrower than their compute type.
template <class T>
constexpr bool is_reduced_precision = !std::is_same<std::remove_const_t<T>, compute_t<T>>::value;

// A stored value in compute precision (exact: bf16 -> float widens).
template <class T>
KOKKOS_FORCEINLINE_FUNCTION compute_t<T> load(const T& x) {
  return compute_t<T>(x);
}

// A computed value in storage precision: the one rounding of a bf16 result
// (nearest, ties to even); the identity for float and double.
template <class T>
KOKKOS_FORCEINLINE_FUNCTION T store(compute_t<T> v) {
  return T(v);
}

// The precision a model trains in (config key train.precision).
enum class Precision { Float32, BF16 };

// "float32" / "bf16"; ConfigError naming the value and the choices otherwise.
Precision parse_precision(const std::string& name);
const char* to_string(Precision precision);
// Bytes of one stored activation: 4 (float32) or 2 (bf16).
int activation_bytes(Precision precision);

}  // namespace reformer
