#include "reformer/ops/gemm.hpp"

#include "reformer/core/instantiate.hpp"
#include "reformer/core/shape.hpp"

#include <KokkosBlas3_gemm.hpp>

namespace reformer::ops {
namespace {

struct ProductShape {
  Index m, n, k;
};

// Checks op(A) [m, k] * op(B) [k, n] = C [m, n] and returns m, n, k.
ProductShape check_product(const char* op, Index a0, Index a1, Trans ta, Index b0, Index b1,
                           Trans tb, Index c0, Index c1) {
  const Index m = ta == Trans::No ? a0 : a1;
  const Index k = ta == Trans::No ? a1 : a0;
  const Index kb = tb == Trans::No ? b0 : b1;
  const Index n = tb == Trans::No ? b1 : b0;
  require<ShapeError>(k == kb, op, ": inner dimensions differ: op(A) is [", m, ", ", k,
                      "] and op(B) is [", kb, ", ", n, "]");
  require<ShapeError>(c0 == m && c1 == n, op, ": C is [", c0, ", ", c1, "] but op(A) op(B) is [", m,
                      ", ", n, "]");
  require<ShapeError>(m > 0 && n > 0 && k > 0, op, ": empty product [", m, ", ", k, "] x [", k,
                      ", ", n, "]; every dimension must be positive");
  return {m, n, k};
}

}  // namespace

template <class T>
void matmul(In2<T> a, Trans trans_a, In2<T> b, Trans trans_b, View2<T> c, T alpha, T beta) {
  check_product("matmul", a.extent(0), a.extent(1), trans_a, b.extent(0), b.extent(1), trans_b,
                c.extent(0), c.extent(1));
  KokkosBlas::gemm(trans_a == Trans::No ? "N" : "T", trans_b == Trans::No ? "N" : "T", alpha, a, b,
                   beta, c);
}

template <class T>
void batched_matmul(In3<T> a, Trans trans_a, In3<T> b, Trans trans_b, View3<T> c, T alpha, T beta) {
  const Index batch = a.extent(0);
  require<ShapeError>(b.extent(0) == a.extent(0) && c.extent(0) == a.extent(0),
                      "batched_matmul: batch sizes differ: A ", shape_string(a), ", B ",
                      shape_string(b), ", C ", shape_string(c));
  const auto [m, n, k] = check_product("batched_matmul", a.extent(1), a.extent(2), trans_a,
                                       b.extent(1), b.extent(2), trans_b, c.extent(1), c.extent(2));
  const bool ta = trans_a == Trans::Yes, tb = trans_b == Trans::Yes;
  using Policy = Kokkos::MDRangePolicy<ExecSpace, Kokkos::Rank<3>>;
  Kokkos::parallel_for(
      "batched_matmul", Policy({0, 0, 0}, {batch, m, n}),
      KOKKOS_LAMBDA(Index bi, Index i, Index j) {
        T sum = 0;
        for (Index p = 0; p < k; ++p)
          sum += (ta ? a(bi, p, i) : a(bi, i, p)) * (tb ? b(bi, j, p) : b(bi, p, j));
        c(bi, i, j) = alpha * sum + (beta == T(0) ? T(0) : beta * c(bi, i, j));
      });
}

#define REFORMER_INSTANTIATE(T)                                          \
  template void matmul<T>(In2<T>, Trans, In2<T>, Trans, View2<T>, T, T); \
  template void batched_matmul<T>(In3<T>, Trans, In3<T>, Trans, View3<T>, T, T);
REFORMER_INSTANTIATE_FLOAT_AND_DOUBLE(REFORMER_INSTANTIATE)

}  // namespace reformer::ops
