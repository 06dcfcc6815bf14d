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

// Tiled batched product. One team computes a kTile x kTile block of C for one
// batch entry: it packs kTile x kDepth blocks of op(A) and kDepth x kTile blocks of
// op(B) into scratch (so transposes cost nothing in the inner loop), and its
// threads each own kMicroRows x kMicroCols micro-tiles of the block whose
// partial sums also live in scratch. The inner loop over kMicroCols contiguous
// columns vectorises on CPUs; on GPUs the threads of a team share the tiles.
template <class T>
struct BatchedMatmulKernel {
  static constexpr Index kTile = 64, kDepth = 64, kMicroRows = 4, kMicroCols = 16;
  static constexpr Index kMicroTiles = (kTile / kMicroRows) * (kTile / kMicroCols);
  using Policy = Kokkos::TeamPolicy<ExecSpace>;
  using Member = Policy::member_type;
  using Scratch = Kokkos::View<T**, Kokkos::LayoutRight, ExecSpace::scratch_memory_space,
                               Kokkos::MemoryTraits<Kokkos::Unmanaged>>;

  In3<T> a, b;
  View3<T> c;
  bool ta, tb;
  T alpha, beta;
  Index m, n, k, tiles_m, tiles_n;

  static size_t scratch_bytes() { return 3 * Scratch::shmem_size(kTile, kDepth); }

  KOKKOS_INLINE_FUNCTION T a_at(Index bi, Index i, Index p) const {
    return ta ? a(bi, p, i) : a(bi, i, p);
  }
  KOKKOS_INLINE_FUNCTION T b_at(Index bi, Index p, Index j) const {
    return tb ? b(bi, j, p) : b(bi, p, j);
  }

  KOKKOS_INLINE_FUNCTION void operator()(const Member& team) const {
    const Index tile = team.league_rank();
    const Index bi = tile / (tiles_m * tiles_n);
    const Index i0 = tile / tiles_n % tiles_m * kTile, j0 = tile % tiles_n * kTile;
    Scratch pa(team.team_scratch(0), kTile, kDepth);
    Scratch pb(team.team_scratch(0), kDepth, kTile);
    Scratch acc(team.team_scratch(0), kTile, kTile);
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, kTile * kTile),
                         [&](Index e) { acc(e / kTile, e % kTile) = 0; });
    for (Index p0 = 0; p0 < k; p0 += kDepth) {
      team.team_barrier();
      // Pack, padding with zeros outside the matrices.
      Kokkos::parallel_for(Kokkos::TeamThreadRange(team, kTile * kDepth), [&](Index e) {
        const Index r = e / kDepth, p = e % kDepth;
        pa(r, p) = (i0 + r < m && p0 + p < k) ? a_at(bi, i0 + r, p0 + p) : T(0);
        const Index q = e / kTile, col = e % kTile;
        pb(q, col) = (p0 + q < k && j0 + col < n) ? b_at(bi, p0 + q, j0 + col) : T(0);
      });
      team.team_barrier();
      const Index depth = k - p0 < kDepth ? k - p0 : kDepth;
      Kokkos::parallel_for(Kokkos::TeamThreadRange(team, kMicroTiles), [&](Index t) {
        const Index r0 = t / (kTile / kMicroCols) * kMicroRows;
        const Index c0 = t % (kTile / kMicroCols) * kMicroCols;
        T sum[kMicroRows][kMicroCols];
        for (Index r = 0; r < kMicroRows; ++r)
          for (Index col = 0; col < kMicroCols; ++col) sum[r][col] = acc(r0 + r, c0 + col);
        for (Index p = 0; p < depth; ++p)
          for (Index r = 0; r < kMicroRows; ++r) {
            const T av = pa(r0 + r, p);
            for (Index col = 0; col < kMicroCols; ++col) sum[r][col] += av * pb(p, c0 + col);
          }
        for (Index r = 0; r < kMicroRows; ++r)
          for (Index col = 0; col < kMicroCols; ++col) acc(r0 + r, c0 + col) = sum[r][col];
      });
    }
    team.team_barrier();
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, kTile * kTile), [&](Index e) {
      const Index i = i0 + e / kTile, j = j0 + e % kTile;
      if (i < m && j < n)
        c(bi, i, j) =
            alpha * acc(e / kTile, e % kTile) + (beta == T(0) ? T(0) : beta * c(bi, i, j));
    });
  }
};

template <class T>
void batched_matmul(In3<T> a, Trans trans_a, In3<T> b, Trans trans_b, View3<T> c, T alpha, T beta) {
  const Index batch = a.extent(0);
  require<ShapeError>(b.extent(0) == a.extent(0) && c.extent(0) == a.extent(0),
                      "batched_matmul: batch sizes differ: A ", shape_string(a), ", B ",
                      shape_string(b), ", C ", shape_string(c));
  const auto [m, n, k] = check_product("batched_matmul", a.extent(1), a.extent(2), trans_a,
                                       b.extent(1), b.extent(2), trans_b, c.extent(1), c.extent(2));
  using Kernel = BatchedMatmulKernel<T>;
  const Index tiles_m = (m + Kernel::kTile - 1) / Kernel::kTile;
  const Index tiles_n = (n + Kernel::kTile - 1) / Kernel::kTile;
  const Kernel kernel{
      a, b,       c,      trans_a == Trans::Yes, trans_b == Trans::Yes, alpha, beta, m, n,
      k, tiles_m, tiles_n};
  typename Kernel::Policy policy(batch * tiles_m * tiles_n, Kokkos::AUTO);
  Kokkos::parallel_for("batched_matmul",
                       policy.set_scratch_size(0, Kokkos::PerTeam(Kernel::scratch_bytes())),
                       kernel);
}

#define REFORMER_INSTANTIATE(T)                                          \
  template void matmul<T>(In2<T>, Trans, In2<T>, Trans, View2<T>, T, T); \
  template void batched_matmul<T>(In3<T>, Trans, In3<T>, Trans, View3<T>, T, T);
REFORMER_INSTANTIATE_FLOAT_AND_DOUBLE(REFORMER_INSTANTIATE)

}  // namespace reformer::ops
