#include "reformer/ops/elementwise.hpp"

#include "reformer/core/error.hpp"
#include "reformer/core/instantiate.hpp"

namespace reformer::ops {

template <class T>
void axpby(T alpha, In1<T> x, T beta, View1<T> y) {
  require<ShapeError>(x.extent(0) == y.extent(0), "axpby: x has ", x.extent(0),
                      " elements but y has ", y.extent(0));
  if (beta == T(0))
    Kokkos::parallel_for(
        "axpby_overwrite", range(y.extent(0)), KOKKOS_LAMBDA(Index i) { y(i) = alpha * x(i); });
  else
    Kokkos::parallel_for(
        "axpby", range(y.extent(0)), KOKKOS_LAMBDA(Index i) { y(i) = alpha * x(i) + beta * y(i); });
}

#define REFORMER_INSTANTIATE(T) template void axpby<T>(T, In1<T>, T, View1<T>);
REFORMER_INSTANTIATE_FLOAT_AND_DOUBLE(REFORMER_INSTANTIATE)

}  // namespace reformer::ops
