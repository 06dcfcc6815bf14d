// Launches over the elements of a row-major matrix.
#pragma once

#include "reformer/core/types.hpp"

namespace reformer {

// body(i, j) over the elements of a row-major [rows, cols] matrix. On GPUs a
// warp takes 32 adjacent columns of one row (tiles of 1 row and up to 256
// columns): Kokkos 3.4's CUDA MDRangePolicy gives threadIdx.x the first index
// whatever the iteration order, and its default tiles (16 x 2, 32 threads a
// block) gave each warp 2 columns of 16 rows. The host keeps Kokkos' tiles.
using MatrixPolicy = Kokkos::MDRangePolicy<ExecSpace, Kokkos::Rank<2>>;
inline MatrixPolicy matrix_policy(Index rows, Index cols) {
  if (kHostMemory) return MatrixPolicy({0, 0}, {rows, cols});
  const Index tile = cols >= 256 ? 256 : (cols + 31) / 32 * 32;
  return MatrixPolicy({0, 0}, {rows, cols}, {1, tile});
}

}  // namespace reformer
