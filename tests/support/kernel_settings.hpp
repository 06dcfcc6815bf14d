// Runs the fused attention kernels with a given backend setting for a scope
// (core/team_scratch.hpp), so that host tests run what GPUs run by default:
// the streamed shape of the chunked kernels (LSH and local attention), a
// thread per element in the passes inside tiles, exact attention's GPU
// tilings, rows on vector lanes, and a decoding step's fused products.
#pragma once

#include "reformer/core/team_scratch.hpp"
#include "reformer/ops/rows_linear.hpp"

namespace reformer::testing {

// Sets a process-wide setting through `set` and puts the old value back at the
// end of the scope.
template <class Value, Value (*kGet)(), void (*kSet)(Value)>
class ScopedSetting {
 public:
  explicit ScopedSetting(Value value) : saved_(kGet()) { kSet(value); }
  ~ScopedSetting() { kSet(saved_); }
  ScopedSetting(const ScopedSetting&) = delete;
  ScopedSetting& operator=(const ScopedSetting&) = delete;

 private:
  Value saved_;
};

using ScopedChunkedShape =
    ScopedSetting<ChunkedKernelShape, chunked_kernel_shape, set_chunked_kernel_shape>;
using ScopedTileLoops = ScopedSetting<TileLoops, tile_loops, set_tile_loops>;
using ScopedExactTiles = ScopedSetting<ExactTiles, exact_tiles, set_exact_tiles>;
using ScopedRowKernels = ScopedSetting<RowKernels, row_kernels, set_row_kernels>;
using ScopedColumnSumBlockRows =
    ScopedSetting<Index, column_sum_block_rows, set_column_sum_block_rows>;
using ScopedStepProducts =
    ScopedSetting<ops::StepProducts, ops::step_products, ops::set_step_products>;

}  // namespace reformer::testing
