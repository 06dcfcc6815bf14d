#include "reformer/ops/elementwise.hpp"

#include "reformer/core/element_map.hpp"
#include "reformer/core/error.hpp"
#include "reformer/core/instantiate.hpp"

namespace reformer::ops {

template <class T>
void axpby(compute_t<T> alpha, In1<T> x, compute_t<T> beta, View1<T> y) {
  require<ShapeError>(x.extent(0) == y.extent(0), "axpby: x has ", x.extent(0),
                      " elements but y has ", y.extent(0));
  using C = compute_t<T>;
  // (No __restrict: x may be y. The compiler checks the overlap at run time.)
  const T* px = x.data();
  T* py = y.data();
  const auto set = KOKKOS_LAMBDA(Index i, C v) { py[i] = store<T>(v); };
  if (beta == C(0))
    parallel_map(
        "axpby_overwrite", y.extent(0), KOKKOS_LAMBDA(Index i) { return alpha * load(px[i]); }, set,
        px, py);
  else
    parallel_map(
        "axpby", y.extent(0),
        KOKKOS_LAMBDA(Index i) { return alpha * load(px[i]) + beta * load(py[i]); }, set, px, py);
}

#define REFORMER_INSTANTIATE(T) \
  template void axpby<T>(compute_t<T>, In1<T>, compute_t<T>, View1<T>);
REFORMER_INSTANTIATE_STORAGE_TYPES(REFORMER_INSTANTIATE)

}  // namespace reformer::ops
