#include "reformer/ops/activations.hpp"

#include "reformer/core/element_map.hpp"
#include "reformer/core/instantiate.hpp"
#include "reformer/core/shape.hpp"

#include <cstdint>

namespace reformer::ops {

Activation parse_activation(const std::string& name) {
  if (name == "relu") return Activation::ReLU;
  if (name == "gelu") return Activation::GELU;
  throw ConfigError("activation: unknown activation '" + name + "' (expected relu or gelu)");
}

template <class T>
void activation_forward(Activation kind, In1<T> x, View1<T> y) {
  require_same_shape("activation_forward", "x", x, "y", y);
  const Index n = x.extent(0);
  if constexpr (is_reduced_precision<T>) {
    if (kind == Activation::ReLU) {
      // A bf16 ReLU selects x or +0: bits in, bits out (exact, as in float32),
      // through a mask (a select compiled to a branch here).
      const auto* px = reinterpret_cast<const std::uint16_t*>(x.data());
      auto* py = reinterpret_cast<std::uint16_t*>(y.data());
      parallel_map(
          "relu_forward", n,
          KOKKOS_LAMBDA(Index i) {
            return std::uint16_t(px[i] & std::uint16_t(-std::uint16_t(bf16_bits_positive(px[i]))));
          },
          KOKKOS_LAMBDA(Index i, std::uint16_t v) { py[i] = v; }, x.data(), y.data());
      return;
    }
  }
  // Raw pointers: through the views, GCC reloads the data pointers after
  // every store (y may be x) and runs the loop scalar.
  const T* px = x.data();
  T* py = y.data();
  const auto set = KOKKOS_LAMBDA(Index i, compute_t<T> v) { py[i] = store<T>(v); };
  if (kind == Activation::ReLU)
    parallel_map(
        "relu_forward", n,
        KOKKOS_LAMBDA(Index i) { return activation_value(Activation::ReLU, load(px[i])); }, set);
  else
    parallel_map(
        "gelu_forward", n,
        KOKKOS_LAMBDA(Index i) { return activation_value(Activation::GELU, load(px[i])); }, set, px,
        py);
}

template <class T>
void activation_backward(Activation kind, In1<T> x, In1<T> dy, View1<T> dx) {
  using C = compute_t<T>;
  require_same_shape("activation_backward", "x", x, "dy", dy);
  require_same_shape("activation_backward", "x", x, "dx", dx);
  const Index n = x.extent(0);
  if constexpr (is_reduced_precision<T>) {
    if (kind == Activation::ReLU) {
      // bf16: dy's bits or +0, no conversion (exact).
      const auto* px = reinterpret_cast<const std::uint16_t*>(x.data());
      const auto* pdy = reinterpret_cast<const std::uint16_t*>(dy.data());
      auto* pdx = reinterpret_cast<std::uint16_t*>(dx.data());
      parallel_map(
          "relu_backward", n,
          KOKKOS_LAMBDA(Index i) {
            return std::uint16_t(pdy[i] & std::uint16_t(-std::uint16_t(bf16_bits_positive(px[i]))));
          },
          KOKKOS_LAMBDA(Index i, std::uint16_t v) { pdx[i] = v; }, x.data(), dy.data(), dx.data());
      return;
    }
  }
  // Raw pointers: through the views, GCC reloads dy's data pointer after
  // every store to dx (dx may be dy) and runs the loop scalar, with a branch.
  const T* px = x.data();
  const T* pdy = dy.data();
  T* pdx = dx.data();
  const auto set = KOKKOS_LAMBDA(Index i, C v) { pdx[i] = store<T>(v); };
  if (kind == Activation::ReLU)
    parallel_map(
        "relu_backward", n,
        KOKKOS_LAMBDA(Index i) {
          const C g = load(pdy[i]);
          return load(px[i]) > C(0) ? g : C(0);
        },
        set);
  else
    // d/dx [x Phi(x)] = Phi(x) + x phi(x)
    parallel_map(
        "gelu_backward", n,
        KOKKOS_LAMBDA(Index i) {
          const C v = load(px[i]);
          const C cdf = C(0.5) * (C(1) + compat::erf(v * C(0.70710678118654752440)));
          const C pdf = C(0.39894228040143267794) * compat::exp(C(-0.5) * v * v);
          return load(pdy[i]) * (cdf + v * pdf);
        },
        set, px, pdy, pdx);
}

#define REFORMER_INSTANTIATE(T)                                      \
  template void activation_forward<T>(Activation, In1<T>, View1<T>); \
  template void activation_backward<T>(Activation, In1<T>, In1<T>, View1<T>);
REFORMER_INSTANTIATE_STORAGE_TYPES(REFORMER_INSTANTIATE)

}  // namespace reformer::ops
