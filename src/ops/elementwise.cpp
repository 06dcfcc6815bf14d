#include "reformer/ops/elementwise.hpp"

#include "reformer/core/error.hpp"
#include "reformer/core/instantiate.hpp"

namespace reformer::ops {

template <class T>
void axpby(compute_t<T> alpha, In1<T> x, compute_t<T> beta, View1<T> y) {
  require<ShapeError>(x.extent(0) == y.extent(0), "axpby: x has ", x.extent(0),
                      " elements but y has ", y.extent(0));
  if (beta == compute_t<T>(0))
    Kokkos::parallel_for(
        "axpby_overwrite", range(y.extent(0)),
        KOKKOS_LAMBDA(Index i) { y(i) = store<T>(alpha * load(x(i))); });
  else
    Kokkos::parallel_for(
        "axpby", range(y.extent(0)),
        KOKKOS_LAMBDA(Index i) { y(i) = store<T>(alpha * load(x(i)) + beta * load(y(i))); });
}

#define REFORMER_INSTANTIATE(T) \
  template void axpby<T>(compute_t<T>, In1<T>, compute_t<T>, View1<T>);
REFORMER_INSTANTIATE_STORAGE_TYPES(REFORMER_INSTANTIATE)

}  // namespace reformer::ops
