#include "reformer/ops/activations.hpp"

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
  using C = compute_t<T>;
  require_same_shape("activation_forward", "x", x, "y", y);
  const Index n = x.extent(0);
  if (kind == Activation::ReLU) {
    if constexpr (is_reduced_precision<T>) {
      // A bf16 ReLU selects x or +0: bits in, bits out (exact, as in float32),
      // through a mask (a select compiled to a branch here).
      const auto* px = reinterpret_cast<const std::uint16_t*>(x.data());
      auto* py = reinterpret_cast<std::uint16_t*>(y.data());
      parallel_blocks(
          "relu_forward", n,
          KOKKOS_LAMBDA(Index begin, Index end) {
            for (Index i = begin; i < end; ++i)
              py[i] = px[i] & std::uint16_t(-std::uint16_t(bf16_bits_positive(px[i])));
          },
          x.data(), y.data());
    } else {
      const T* px = x.data();
      T* py = y.data();
      parallel_blocks(
          "relu_forward", n, KOKKOS_LAMBDA(Index begin, Index end) {
            for (Index i = begin; i < end; ++i)
              py[i] = store<T>(activation_value(Activation::ReLU, load(px[i])));
          });
    }
  } else {
    Kokkos::parallel_for(
        "gelu_forward", range(n), KOKKOS_LAMBDA(Index i) {
          y(i) = store<T>(activation_value(Activation::GELU, load(x(i))));
        });
  }
}

template <class T>
void activation_backward(Activation kind, In1<T> x, In1<T> dy, View1<T> dx) {
  using C = compute_t<T>;
  require_same_shape("activation_backward", "x", x, "dy", dy);
  require_same_shape("activation_backward", "x", x, "dx", dx);
  const Index n = x.extent(0);
  if (kind == Activation::ReLU) {
    // Raw pointers: through the views, GCC reloads dy's data pointer after
    // every store to dx (dx may be dy) and runs the loop scalar, with a branch.
    if constexpr (is_reduced_precision<T>) {
      // bf16: dy's bits or +0, no conversion (exact).
      const auto* px = reinterpret_cast<const std::uint16_t*>(x.data());
      const auto* pdy = reinterpret_cast<const std::uint16_t*>(dy.data());
      auto* pdx = reinterpret_cast<std::uint16_t*>(dx.data());
      parallel_blocks(
          "relu_backward", n,
          KOKKOS_LAMBDA(Index begin, Index end) {
            for (Index i = begin; i < end; ++i)
              pdx[i] = pdy[i] & std::uint16_t(-std::uint16_t(bf16_bits_positive(px[i])));
          },
          x.data(), dy.data(), dx.data());
    } else {
      const T* px = x.data();
      const T* pdy = dy.data();
      T* pdx = dx.data();
      parallel_blocks(
          "relu_backward", n, KOKKOS_LAMBDA(Index begin, Index end) {
            for (Index i = begin; i < end; ++i) {
              const C g = load(pdy[i]);
              pdx[i] = store<T>(load(px[i]) > C(0) ? g : C(0));
            }
          });
    }
  } else {
    // d/dx [x Phi(x)] = Phi(x) + x phi(x)
    Kokkos::parallel_for(
        "gelu_backward", range(n), KOKKOS_LAMBDA(Index i) {
          const C v = load(x(i));
          const C cdf = C(0.5) * (C(1) + compat::erf(v * C(0.70710678118654752440)));
          const C pdf = C(0.39894228040143267794) * compat::exp(C(-0.5) * v * v);
          dx(i) = store<T>(load(dy(i)) * (cdf + v * pdf));
        });
  }
}

#define REFORMER_INSTANTIATE(T)                                      \
  template void activation_forward<T>(Activation, In1<T>, View1<T>); \
  template void activation_backward<T>(Activation, In1<T>, In1<T>, View1<T>);
REFORMER_INSTANTIATE_STORAGE_TYPES(REFORMER_INSTANTIATE)

}  // namespace reformer::ops
