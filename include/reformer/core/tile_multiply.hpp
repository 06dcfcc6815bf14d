// Register-blocked products of small tiles inside a team, and the per-backend
// tile sizes of the fused attention kernels (exact attention).
//
//   C[m][n] (+)= A[m][count] B[count][n],   A(r, k) = a[r * a_row + k * a_col]
//
// with C and B row-major (leading dimensions ldc, ldb): A may be read
// transposed (a_row = 1) at no cost because its elements are broadcast one at a
// time. The team splits C into blocks of block_rows x block_cols; each block's
// partial sums stay in registers for the whole loop over `count`, and every
// row of B that is loaded feeds block_rows multiply-adds per lane. n must be a
// multiple of block_cols: callers pad their scratch tiles with zero columns
// (pad_columns). m may be anything: the last rows form a smaller block.
//
// On host compilers with GCC vector extensions (GCC, Clang) the block is held in
// vector registers explicitly: compilers keep a plain `T acc[R][W]` array in
// memory. The block's shape comes from the vector unit the build targets
// (core/cpu_target.hpp): a block larger than the register file spills every
// accumulator on every step and runs at a few percent of the machine's rate.
// Device compilers get the plain loops (a GPU thread holds its small block in
// registers anyway). Host and device differ only in TileTraits.
#pragma once

#include "reformer/core/cpu_target.hpp"
#include "reformer/core/team_scratch.hpp"

#include <cstring>
#include <type_traits>

#if defined(__GNUC__) && !defined(__CUDACC__) && !defined(__HIPCC__) && \
    !defined(__SYCL_DEVICE_ONLY__)
#define REFORMER_HOST_VECTOR_EXTENSIONS 1
#endif

namespace reformer {

// A tiling of a fused kernel: tiles of query_tile queries and key_tile keys,
// and register blocks of block_rows x block_cols elements of C in
// team_multiply. Kernels that take a shape as a template argument (exact
// attention's ExactTiles, the streamed chunked kernels) run with any of them.
template <Index kQuery, Index kKey, int kRows, int kCols>
struct TileShape {
  static constexpr Index query_tile = kQuery, key_tile = kKey;
  static constexpr int block_rows = kRows, block_cols = kCols;
  KOKKOS_INLINE_FUNCTION static constexpr Index pad_columns(Index d) {
    return (d + block_cols - 1) / block_cols * block_cols;
  }
  static_assert(kQuery % kCols == 0 && kKey % kCols == 0, "tiles must be whole column blocks");
};

// Tile sizes of the fused kernels for the default execution space. Host: 128 x
// 128 tiles and blocks of CpuTarget's shape: block_rows rows, two vectors wide
// (8 x 32 floats on AVX-512, 6 x 16 on AVX2, 8 x 8 on NEON; 4 x 4 plain loops
// without a known vector unit). GPU: GpuTarget's small tiles (16 x 16, so
// that every tile of the backward pass fits level-0 scratch for d_head <= 64;
// d_head 128 falls back to level 1) and one thread per 1 x 4 block.
template <class T>
struct TileTraits {
  static constexpr Index query_tile = kHostMemory ? 128 : GpuTarget::exact_tile;
  static constexpr Index key_tile = kHostMemory ? 128 : GpuTarget::exact_tile;
  static constexpr int host_block_cols =
      CpuTarget::vector_bytes == 0
          ? 4
          : CpuTarget::block_vectors * CpuTarget::vector_bytes / int(sizeof(T));
  static constexpr int device_block_cols = GpuTarget::block_cols;
  static constexpr int block_rows =
      kHostMemory ? CpuTarget::block_rows : GpuTarget::exact_block_rows;
  static constexpr int block_cols = kHostMemory ? host_block_cols : device_block_cols;
  // Head size rounded up to whole blocks (the zero columns add nothing). Device
  // code calls it: a host-only function there compiles (nvcc only warns) into a
  // kernel whose body is dropped, which on CUDA left every LSH and local
  // attention output unwritten.
  KOKKOS_INLINE_FUNCTION static constexpr Index pad_columns(Index d) {
    return (d + block_cols - 1) / block_cols * block_cols;
  }
  static_assert(query_tile % block_cols == 0 && key_tile % block_cols == 0,
                "tiles must be whole column blocks");
};

// Tile sizes of the streamed chunked attention kernels (ChunkedKernelShape::
// streamed, src/attention/chunked_kernels.hpp): a team holds `query` queries
// and streams the keys of their window `forward_key` (forward) or
// `backward_key` (backward) at a time. GPU: GpuTarget's sizes, chosen so that
// every tile fits level-0 scratch. Host, where this shape runs only when asked
// (tests, comparisons): one register block's width, the smallest tile that
// team_multiply takes, and query groups of one tile, so that short test
// sequences already span several tiles and groups.
template <class T>
struct StreamTileTraits {
  static constexpr Index query =
      kHostMemory ? TileTraits<T>::block_cols : GpuTarget::chunked_query_tile;
  static constexpr Index forward_key =
      kHostMemory ? TileTraits<T>::block_cols : GpuTarget::chunked_forward_key_tile;
  static constexpr Index backward_key =
      kHostMemory ? TileTraits<T>::block_cols : GpuTarget::chunked_backward_key_tile;
  // Queries whose dq sums the backward keeps at once (a group of query tiles).
  static constexpr Index backward_rows =
      kHostMemory ? query : GpuTarget::chunked_backward_query_rows;
  // Query tiles are the columns of S^T and key tiles those of S.
  static_assert(query % TileTraits<T>::block_cols == 0 &&
                    backward_key % TileTraits<T>::block_cols == 0,
                "streamed tiles must be whole register blocks");
  static_assert(backward_rows % query == 0, "a query group must be whole query tiles");
};

namespace detail {

#ifdef REFORMER_HOST_VECTOR_EXTENSIONS
// One vector register of T (CpuTarget::vector_bytes; unused without one).
template <class T>
struct HostVector {
  static constexpr int bytes = CpuTarget::vector_bytes > 0 ? CpuTarget::vector_bytes : 16;
  static constexpr int lanes = int(bytes / sizeof(T));
  typedef T type __attribute__((vector_size(bytes)));
};
#endif

// One R x W block of C.
template <int R, int W, bool kAdd, class T>
KOKKOS_INLINE_FUNCTION void multiply_block(T* c, Index ldc, const T* a, Index a_row, Index a_col,
                                           const T* b, Index ldb, Index count) {
#ifdef REFORMER_HOST_VECTOR_EXTENSIONS
  if constexpr (CpuTarget::vector_bytes > 0 && W % HostVector<T>::lanes == 0) {
    using V = typename HostVector<T>::type;
    constexpr int lanes = HostVector<T>::lanes, n = W / lanes;
    V acc[R][n];
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 16
      for (int w = 0; w < n; ++w) {
        if (kAdd)
          std::memcpy(&acc[r][w], c + r * ldc + w * lanes, sizeof(V));
        else
          acc[r][w] = V{};
      }
    for (Index k = 0; k < count; ++k) {
      V row[n];
#pragma GCC unroll 16
      for (int w = 0; w < n; ++w) {
        std::memcpy(&row[w], b + k * ldb + w * lanes, sizeof(V));
        CpuTarget::hold_in_register(row[w]);
      }
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) {
        const T x = a[r * a_row + k * a_col];
#pragma GCC unroll 16
        for (int w = 0; w < n; ++w) acc[r][w] += x * row[w];
      }
    }
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 16
      for (int w = 0; w < n; ++w) std::memcpy(c + r * ldc + w * lanes, &acc[r][w], sizeof(V));
    return;
  }
#endif
  T acc[R][W];
  for (int r = 0; r < R; ++r)
    for (int w = 0; w < W; ++w) acc[r][w] = kAdd ? c[r * ldc + w] : T(0);
  for (Index k = 0; k < count; ++k)
    for (int r = 0; r < R; ++r) {
      const T x = a[r * a_row + k * a_col];
      for (int w = 0; w < W; ++w) acc[r][w] += x * b[k * ldb + w];
    }
  for (int r = 0; r < R; ++r)
    for (int w = 0; w < W; ++w) c[r * ldc + w] = acc[r][w];
}

}  // namespace detail

// C = A B (kAdd false) or C += A B over the whole team (see the top of the file);
// n % block_cols == 0.
namespace detail {

// The last rows of C when m is not a multiple of R: a block of `rows` < R rows.
template <int R, int W, bool kAdd, class T>
KOKKOS_INLINE_FUNCTION void multiply_rest(int rows, T* c, Index ldc, const T* a, Index a_row,
                                          Index a_col, const T* b, Index ldb, Index count) {
  if constexpr (R > 1) {
    if (rows == R - 1)
      return multiply_block<R - 1, W, kAdd>(c, ldc, a, a_row, a_col, b, ldb, count);
    multiply_rest<R - 1, W, kAdd>(rows, c, ldc, a, a_row, a_col, b, ldb, count);
  }
}

}  // namespace detail

// Shape: a TileShape (or TileTraits) whose block_rows x block_cols blocks
// to use; by default TileTraits<T>'s.
template <bool kAdd, class Shape = void, class T>
KOKKOS_INLINE_FUNCTION void team_multiply(const TeamMember& team, Index m, Index n, Index count,
                                          T* c, Index ldc, const T* a, Index a_row, Index a_col,
                                          const T* b, Index ldb) {
  using Blocks = std::conditional_t<std::is_void_v<Shape>, TileTraits<T>, Shape>;
  constexpr int R = Blocks::block_rows, W = Blocks::block_cols;
  const Index col_blocks = n / W, row_blocks = (m + R - 1) / R;
  Kokkos::parallel_for(Kokkos::TeamThreadRange(team, row_blocks * col_blocks), [&](Index block) {
    const Index r = block / col_blocks * R, w = block % col_blocks * W;
    if (r + R <= m)
      detail::multiply_block<R, W, kAdd>(c + r * ldc + w, ldc, a + r * a_row, a_row, a_col, b + w,
                                         ldb, count);
    else
      detail::multiply_rest<R, W, kAdd>(int(m - r), c + r * ldc + w, ldc, a + r * a_row, a_row,
                                        a_col, b + w, ldb, count);
  });
}

}  // namespace reformer
