#include "reformer/ops/gemm.hpp"

#include "ops/tpls/device_blas.hpp"
#include "ops/tpls/host_blas.hpp"
#include "reformer/core/instantiate.hpp"
#include "reformer/core/runtime.hpp"
#include "reformer/core/shape.hpp"
#include "reformer/core/team_scratch.hpp"

#include <KokkosBlas3_gemm.hpp>

#include <type_traits>

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

// Every Runtime makes a host BLAS sequential before the first product
// (prepare_host_blas). Registered from this file, the only one that calls the
// BLAS, so that the step is linked whenever a product is.
[[maybe_unused]] const bool host_blas_registered = register_runtime_setup(&prepare_host_blas);

}  // namespace

template <class T>
void matmul(In2<T> a, Trans trans_a, In2<T> b, Trans trans_b, View2<T> c, T alpha, T beta) {
  check_product("matmul", a.extent(0), a.extent(1), trans_a, b.extent(0), b.extent(1), trans_b,
                c.extent(0), c.extent(1));
  if (tpls::host_blas_matmul<T>(a, trans_a, b, trans_b, c, alpha, beta)) return;
  if constexpr (std::is_same<T, float>::value)
    if (tpls::device_sgemm(a, trans_a, b, trans_b, c, alpha, beta)) return;
  KokkosBlas::gemm(trans_a == Trans::No ? "N" : "T", trans_b == Trans::No ? "N" : "T", alpha, a, b,
                   beta, c);
}

// Tiled batched product. One team computes a kTileM x kTileN block of C for one
// batch entry: it packs kTileM x kDepth blocks of op(A) and kDepth x kTileN blocks of
// op(B) into scratch (so transposes cost nothing in the inner loop), and its
// threads each own kMicroRows x kMicroCols micro-tiles of the block whose
// partial sums also live in scratch. The inner loop over kMicroCols contiguous
// columns vectorises on CPUs; on GPUs the threads of a team share the tiles.
// kWide selects 256-column blocks on the host, for products with many columns
// whose B is not transposed (packing a transposed B into wide blocks is slower).
template <class T, bool kWide>
struct BatchedMatmulKernel {
  // A 6 x 128-byte micro-tile (6 x 32 float, 6 x 16 double) is 12 AVX-512
  // registers of accumulators: enough independent FMAs to hide their latency
  // while leaving registers for the operands. Host threads use large tiles so
  // that packing (done once per tile and depth block) costs little next to the
  // products; GPU teams use tiles that fit into fast scratch memory.
  static constexpr bool kHost = Kokkos::SpaceAccessibility<Kokkos::HostSpace, MemSpace>::accessible;
  static constexpr Index kMicroRows = 6, kMicroCols = 128 / sizeof(T);
  static constexpr Index kTileM = (kHost ? 16 : 4) * kMicroRows;
  static constexpr Index kTileN = kHost && kWide ? 256 : 64;
  static constexpr Index kDepth = kHost ? 256 : 32;
  static constexpr Index kMicroTiles = (kTileM / kMicroRows) * (kTileN / kMicroCols);
  using Policy = Kokkos::TeamPolicy<ExecSpace>;
  using Member = Policy::member_type;
  using Scratch = Kokkos::View<T**, Kokkos::LayoutRight, ExecSpace::scratch_memory_space,
                               Kokkos::MemoryTraits<Kokkos::Unmanaged>>;

  In3<T> a, b;
  View3<T> c;
  bool ta, tb;
  T alpha, beta;
  Index m, n, k, tiles_m, tiles_n;
  Structure structure;

  static size_t scratch_bytes() {
    return Scratch::shmem_size(kTileM, kDepth) + Scratch::shmem_size(kDepth, kTileN) +
           Scratch::shmem_size(kTileM, kTileN);
  }

  // acc[kMicroRows][kMicroCols] += pa[kMicroRows][depth] pb[depth][kMicroCols], all
  // three in the team's scratch (row strides lda, ldb, ldc).
  REFORMER_SCRATCH_TILE_LOOP KOKKOS_INLINE_FUNCTION static void micro_tile(const T* pa, Index lda,
                                                                           const T* pb, Index ldb,
                                                                           T* acc, Index ldc,
                                                                           Index depth) {
    T sum[kMicroRows][kMicroCols];
    for (Index r = 0; r < kMicroRows; ++r)
      for (Index col = 0; col < kMicroCols; ++col) sum[r][col] = acc[r * ldc + col];
    for (Index p = 0; p < depth; ++p) {
      const T* b_row = pb + p * ldb;
      for (Index r = 0; r < kMicroRows; ++r) {
        const T av = pa[r * lda + p];
        for (Index col = 0; col < kMicroCols; ++col) sum[r][col] += av * b_row[col];
      }
    }
    for (Index r = 0; r < kMicroRows; ++r)
      for (Index col = 0; col < kMicroCols; ++col) acc[r * ldc + col] = sum[r][col];
  }

  KOKKOS_INLINE_FUNCTION void operator()(const Member& team) const {
    const Index tile = team.league_rank();
    const Index bi = tile / (tiles_m * tiles_n);
    const Index i0 = tile / tiles_n % tiles_m * kTileM, j0 = tile % tiles_n * kTileN;
    if (structure == Structure::LowerC && j0 > i0 + kTileM - 1) {
      Kokkos::parallel_for(Kokkos::TeamThreadRange(team, kTileM * kTileN), [&](Index e) {
        const Index i = i0 + e / kTileN, j = j0 + e % kTileN;
        if (i < m && j < n) c(bi, i, j) = beta == T(0) ? T(0) : beta * c(bi, i, j);
      });
      return;
    }
    // The range of the inner dimension that can hold non-zeros for these rows.
    const Index p_begin = structure == Structure::UpperA ? i0 : 0;
    const Index p_end = structure == Structure::LowerA && i0 + kTileM < k ? i0 + kTileM : k;
    Scratch pa(team.team_scratch(0), kTileM, kDepth);
    Scratch pb(team.team_scratch(0), kDepth, kTileN);
    Scratch acc(team.team_scratch(0), kTileM, kTileN);
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, kTileM * kTileN),
                         [&](Index e) { acc(e / kTileN, e % kTileN) = 0; });
    for (Index p0 = p_begin; p0 < p_end; p0 += kDepth) {
      team.team_barrier();
      // Pack, padding with zeros outside the matrices. Each thread copies whole
      // rows (or columns, for a transposed operand) so that the reads are
      // contiguous and the copies vectorise.
      const Index depth = p_end - p0 < kDepth ? p_end - p0 : kDepth;
      const Index rows = m - i0 < kTileM ? m - i0 : kTileM,
                  cols = n - j0 < kTileN ? n - j0 : kTileN;
      if (!ta) {
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, kTileM), [&](Index r) {
          T* dst = &pa(r, 0);
          if (r >= rows) {
            for (Index p = 0; p < depth; ++p) dst[p] = T(0);
            return;
          }
          const T* src = &a(bi, i0 + r, p0);
          for (Index p = 0; p < depth; ++p) dst[p] = src[p];
        });
      } else {
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, depth), [&](Index p) {
          const T* src = &a(bi, p0 + p, i0);
          for (Index r = 0; r < kTileM; ++r) pa(r, p) = r < rows ? src[r] : T(0);
        });
      }
      if (!tb) {
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, depth), [&](Index q) {
          T* dst = &pb(q, 0);
          const T* src = &b(bi, p0 + q, j0);
          for (Index col = 0; col < kTileN; ++col) dst[col] = col < cols ? src[col] : T(0);
        });
      } else {
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, kTileN), [&](Index col) {
          if (col >= cols) {
            for (Index q = 0; q < depth; ++q) pb(q, col) = T(0);
            return;
          }
          const T* src = &b(bi, j0 + col, p0);
          for (Index q = 0; q < depth; ++q) pb(q, col) = src[q];
        });
      }
      team.team_barrier();
      Kokkos::parallel_for(Kokkos::TeamThreadRange(team, kMicroTiles), [&](Index t) {
        const Index r0 = t / (kTileN / kMicroCols) * kMicroRows;
        const Index c0 = t % (kTileN / kMicroCols) * kMicroCols;
        // Micro-tiles wholly past C's last row or column hold only padding,
        // which is never stored: skip their products.
        if (r0 >= rows || c0 >= cols) return;
        micro_tile(&pa(r0, 0), pa.stride(0), &pb(0, c0), pb.stride(0), &acc(r0, c0), acc.stride(0),
                   depth);
      });
    }
    team.team_barrier();
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, kTileM * kTileN), [&](Index e) {
      const Index i = i0 + e / kTileN, j = j0 + e % kTileN;
      if (i < m && j < n)
        c(bi, i, j) =
            alpha * acc(e / kTileN, e % kTileN) + (beta == T(0) ? T(0) : beta * c(bi, i, j));
    });
  }
};

template <class Kernel, class T>
void launch_batched_matmul(In3<T> a, In3<T> b, View3<T> c, Trans trans_a, Trans trans_b, T alpha,
                           T beta, Index m, Index n, Index k, Structure structure) {
  const Index tiles_m = (m + Kernel::kTileM - 1) / Kernel::kTileM;
  const Index tiles_n = (n + Kernel::kTileN - 1) / Kernel::kTileN;
  const Kernel kernel{a,
                      b,
                      c,
                      trans_a == Trans::Yes,
                      trans_b == Trans::Yes,
                      alpha,
                      beta,
                      m,
                      n,
                      k,
                      tiles_m,
                      tiles_n,
                      structure};
  typename Kernel::Policy policy(a.extent(0) * tiles_m * tiles_n, Kokkos::AUTO);
  Kokkos::parallel_for("batched_matmul",
                       policy.set_scratch_size(0, Kokkos::PerTeam(Kernel::scratch_bytes())),
                       kernel);
}

// Small products on the host (a few rows and columns: per-head attention of
// short sequences), where the tiled kernel would spend its time on padding: one
// row of C per iteration. Dense, as the tiled kernel is within its one tile at
// these sizes (the structures only let it skip whole tiles), so both paths give
// the same values everywhere.
template <class T>
void small_batched_matmul(In3<T> a, In3<T> b, View3<T> c, bool ta, bool tb, T alpha, T beta,
                          Index m, Index n, Index k) {
  Kokkos::parallel_for(
      "batched_matmul_small",
      Kokkos::MDRangePolicy<ExecSpace, Kokkos::Rank<2>>({0, 0}, {Index(a.extent(0)), m}),
      KOKKOS_LAMBDA(Index bi, Index i) {
        for (Index j = 0; j < n; ++j) {
          T sum = 0;
          for (Index p = 0; p < k; ++p)
            sum += (ta ? a(bi, p, i) : a(bi, i, p)) * (tb ? b(bi, j, p) : b(bi, p, j));
          c(bi, i, j) = alpha * sum + (beta == T(0) ? T(0) : beta * c(bi, i, j));
        }
      });
}

template <class T>
void batched_matmul(In3<T> a, Trans trans_a, In3<T> b, Trans trans_b, View3<T> c, T alpha, T beta,
                    Structure structure) {
  require<ShapeError>(b.extent(0) == a.extent(0) && c.extent(0) == a.extent(0),
                      "batched_matmul: batch sizes differ: A ", shape_string(a), ", B ",
                      shape_string(b), ", C ", shape_string(c));
  const auto [m, n, k] = check_product("batched_matmul", a.extent(1), a.extent(2), trans_a,
                                       b.extent(1), b.extent(2), trans_b, c.extent(1), c.extent(2));
  // Dense products on a GPU whose vendor BLAS is loaded: one strided-batched
  // call (the structures' known zeros are skipped only by the portable kernel).
  if (structure == Structure::Dense &&
      tpls::device_gemm_strided_batched<T>(a, trans_a, b, trans_b, c, alpha, beta))
    return;
  constexpr bool host = Kokkos::SpaceAccessibility<Kokkos::HostSpace, MemSpace>::accessible;
  if (host && m <= 32 && n <= 32) {
    small_batched_matmul<T>(a, b, c, trans_a == Trans::Yes, trans_b == Trans::Yes, alpha, beta, m,
                            n, k);
    return;
  }
  if (n >= 256 && trans_b == Trans::No)
    launch_batched_matmul<BatchedMatmulKernel<T, true>>(a, b, c, trans_a, trans_b, alpha, beta, m,
                                                        n, k, structure);
  else
    launch_batched_matmul<BatchedMatmulKernel<T, false>>(a, b, c, trans_a, trans_b, alpha, beta, m,
                                                         n, k, structure);
}

template <class T>
void strided_batched_matmul(StridedBatch<const T> a, Trans trans_a, StridedBatch<const T> b,
                            Trans trans_b, StridedBatch<T> c, T alpha, T beta) {
  const char* op = "strided_batched_matmul";
  require<ShapeError>(a.count == c.count && b.count == c.count, op, ": batch counts differ: A ",
                      a.count, ", B ", b.count, ", C ", c.count);
  const auto shape =
      check_product(op, a.rows, a.cols, trans_a, b.rows, b.cols, trans_b, c.rows, c.cols);
  const Index m = shape.m, n = shape.n, k = shape.k;  // (device lambdas cannot capture bindings)
  const auto check_rows = [&](const char* name, Index cols, Index stride) {
    require<ShapeError>(stride >= cols, op, ": ", name, "'s row stride ", stride, " is below its ",
                        cols, " columns; rows may not overlap");
  };
  check_rows("A", a.cols, a.row_stride);
  check_rows("B", b.cols, b.row_stride);
  check_rows("C", c.cols, c.row_stride);
  if (c.count == 0) return;
  if (tpls::device_gemm_strided_batched<T>(a, trans_a, b, trans_b, c, alpha, beta)) return;
  const bool ta = trans_a == Trans::Yes, tb = trans_b == Trans::Yes;
  using Policy = Kokkos::MDRangePolicy<ExecSpace, Kokkos::Rank<3>>;
  Kokkos::parallel_for(
      "strided_batched_matmul", Policy({0, 0, 0}, {c.count, m, n}),
      KOKKOS_LAMBDA(Index e, Index i, Index j) {
        const T* x = a.data + e * a.batch_stride;
        const T* y = b.data + e * b.batch_stride;
        T sum = 0;
        for (Index p = 0; p < k; ++p)
          sum += (ta ? x[p * a.row_stride + i] : x[i * a.row_stride + p]) *
                 (tb ? y[j * b.row_stride + p] : y[p * b.row_stride + j]);
        T& to = c.data[e * c.batch_stride + i * c.row_stride + j];
        to = beta == T(0) ? alpha * sum : alpha * sum + beta * to;
      });
}

#define REFORMER_INSTANTIATE(T)                                                                \
  template void matmul<T>(In2<T>, Trans, In2<T>, Trans, View2<T>, T, T);                       \
  template void batched_matmul<T>(In3<T>, Trans, In3<T>, Trans, View3<T>, T, T, Structure);    \
  template void strided_batched_matmul<T>(StridedBatch<const T>, Trans, StridedBatch<const T>, \
                                          Trans, StridedBatch<T>, T, T);
REFORMER_INSTANTIATE_FLOAT_AND_DOUBLE(REFORMER_INSTANTIATE)

}  // namespace reformer::ops
