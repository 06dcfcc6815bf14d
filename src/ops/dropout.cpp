#include "reformer/ops/dropout.hpp"

#include "reformer/core/element_map.hpp"
#include "reformer/core/instantiate.hpp"
#include "reformer/core/shape.hpp"

namespace reformer::ops {
namespace {

template <class T>
void apply_mask(const char* op, In1<T> in, double rate, RandomKey key, Index offset, View1<T> out) {
  require<ConfigError>(rate >= 0.0 && rate < 1.0, op, ": rate is ", rate, " but must be in [0, 1)");
  require<ConfigError>(offset >= 0, op, ": offset is ", offset, " but must be >= 0");
  require_same_shape(op, "input", in, "output", out);
  using C = compute_t<T>;
  const C scale = C(1.0 / (1.0 - rate));
  const T* from = in.data();
  T* to = out.data();
  parallel_map(
      op, in.extent(0),
      KOKKOS_LAMBDA(Index i) {
        return dropout_keeps(key, offset + i, rate) ? load(from[i]) * scale : C(0);
      },
      KOKKOS_LAMBDA(Index i, C v) { to[i] = store<T>(v); });
}

}  // namespace

template <class T>
void dropout_forward(In1<T> x, double rate, RandomKey key, Index offset, View1<T> y) {
  apply_mask<T>("dropout_forward", x, rate, key, offset, y);
}

template <class T>
void dropout_backward(In1<T> dy, double rate, RandomKey key, Index offset, View1<T> dx) {
  apply_mask<T>("dropout_backward", dy, rate, key, offset, dx);
}

#define REFORMER_INSTANTIATE(T)                                                 \
  template void dropout_forward<T>(In1<T>, double, RandomKey, Index, View1<T>); \
  template void dropout_backward<T>(In1<T>, double, RandomKey, Index, View1<T>);
REFORMER_INSTANTIATE_STORAGE_TYPES(REFORMER_INSTANTIATE)

}  // namespace reformer::ops
