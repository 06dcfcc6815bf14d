// Team scratch for the fused kernels, the same code on every backend.
//
// GPUs give a team a small, fast level-0 scratch (48 KiB is the portable limit
// on NVIDIA and AMD) and a large, slower level 1; host threads use level 0 for
// any size. A kernel asks scratch_level(bytes) for the level its tiles fit in
// and passes it to team_scratch(); the choice is a run-time value, so one
// functor serves both.
#pragma once

#include "reformer/core/error.hpp"
#include "reformer/core/types.hpp"

#include <cstddef>
#include <cstdlib>
#include <string>

// Marks a register-blocked loop that reads and writes a team's scratch tiles
// only (never a View of the caller's) as exempt from AddressSanitizer and
// UBSan. Their instrumentation keeps the loop's accumulators in memory and
// checks every element: gemm.cpp's micro-tile ran 25x slower under
// -fsanitize=address,undefined (0.5 vs 14 GFLOP/s in one core), and that loop
// was 71-94% of the sanitized memory sweeps and double gradient checks. ASan
// sees nothing inside Kokkos' scratch pool anyway (one allocation per
// thread), so an overrun of a tile went unseen before as well; the packing
// loops that read the caller's Views around it stay instrumented.
#if defined(__SANITIZE_ADDRESS__) && !defined(__CUDACC__) && !defined(__HIPCC__)
#define REFORMER_SCRATCH_TILE_LOOP __attribute__((no_sanitize("address", "undefined")))
#else
#define REFORMER_SCRATCH_TILE_LOOP
#endif

namespace reformer {

using TeamMember = Kokkos::TeamPolicy<ExecSpace>::member_type;

template <class T>
using ScratchMatrix = Kokkos::View<T**, Layout, ExecSpace::scratch_memory_space,
                                   Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
template <class T>
using ScratchVector = Kokkos::View<T*, Layout, ExecSpace::scratch_memory_space,
                                   Kokkos::MemoryTraits<Kokkos::Unmanaged>>;

// The level-0 scratch a GPU team can count on: Kokkos 3.4 gives a team 40 KiB
// on CUDA and HIP (48 KiB of shared memory, less what its team reductions
// keep); a kernel asking for more fails to launch. scratch_level() asks the
// backend itself (TeamPolicy::scratch_size_max(0)); this constant is the
// figure that the GPU shapes are sized against, and that the scratch tests
// check on any backend.
constexpr std::size_t kLevel0ScratchBytes = 40 * 1024;

// The level-0 scratch of this backend's teams (on the host: any size).
inline std::size_t level0_scratch_limit() {
  if (kHostMemory) return ~std::size_t(0);
  static const std::size_t limit =
      std::size_t(Kokkos::TeamPolicy<ExecSpace>(1, 1).scratch_size_max(0));
  return limit;
}

// 0 when `bytes` of tiles fit in fast scratch (always on the host), else 1.
inline int scratch_level(std::size_t bytes) { return bytes <= level0_scratch_limit() ? 0 : 1; }

// The two shapes of the chunked attention kernels (LSH and local attention,
// src/attention/chunked_kernels.hpp). `whole_window`: a team holds a chunk's
// queries and its whole window of keys and values at once (the host's
// default: the tiles stay in L1/L2 and every product is one register-blocked
// pass). `streamed`: a team streams the window's keys in small tiles with an
// online softmax, so that every tile fits level-0 scratch (the default on
// GPUs, where whole-window tiles would live in a level-1 pool of global
// memory; tile sizes in core/cpu_target.hpp's GpuTarget). Both give the same
// results up to rounding. REFORMER_CHUNKED_KERNEL=whole|streamed picks one
// for a process (to compare them on one machine); tests switch with
// set_chunked_kernel_shape().
enum class ChunkedKernelShape { whole_window, streamed };

// How the elementwise passes inside the fused attention kernels' tiles (the
// online softmax's weights and rescaling, the backward's rows of P and dS,
// loads and stores of tile rows) divide among a team's threads. `rows`: a
// thread takes whole rows of a tile, and the loop along a row vectorises (the
// host's default, where a team is one thread). `elements`: a thread per
// element, neighbouring threads on neighbouring columns (the default on GPUs,
// where a team of 64-256 threads meets tiles of 16 rows: by rows most of it
// would wait, and each thread would read its own row of global memory). Both
// give the same results bit for bit. REFORMER_TILE_LOOPS=rows|elements picks
// one for a process (to time both on one GPU); tests switch with
// set_tile_loops().
enum class TileLoops { rows, elements };

// How row-wise kernels (layer norm forward and backward) divide a row of d
// features. `threads`: a thread per row, its loops along the row vectorised
// (the host's default). `lanes`: a row per group of GpuTarget::row_lanes
// vector lanes (a warp on NVIDIA), GpuTarget::rows_per_team rows per team, the
// row's sums reduced across the lanes (shuffles: no shared memory, no team
// barrier; the GPUs' default). The sums are added in another order, so the
// results agree to rounding, not bit for bit. REFORMER_ROW_KERNELS=
// threads|lanes picks one for a process; tests switch with set_row_kernels().
enum class RowKernels { threads, lanes };

// The tiling of exact attention's kernels (attention/exact.cpp; tile and
// register-block sizes in core/cpu_target.hpp). `cpu`: 128 x 128 tiles and
// CpuTarget's vector blocks (host builds only, and their default). `gpu`:
// 16 x 16 tiles and 1 x 4 blocks (the GPUs' default). `gpu_wide`: larger
// tiles and 4 x 4 / 2 x 4 blocks (GpuTarget's wide_* sizes). Every tiling
// gives full attention's result up to rounding, on any backend; a host build
// runs the GPU tilings for tests. REFORMER_EXACT_TILES=cpu|gpu|gpu-wide picks
// one for a process; tests switch with set_exact_tiles().
enum class ExactTiles { cpu, gpu, gpu_wide };

namespace detail {
// A process-wide choice read once from the environment variable `name`: the
// value whose spelling matches, `fallback` when unset, else a ConfigError that
// names the variable, the value and the spellings.
template <class E, std::size_t N>
E environment_choice(const char* name, const char* const (&spellings)[N], const E (&values)[N],
                     E fallback) {
  const char* text = std::getenv(name);
  const std::string value = text != nullptr ? text : "";
  if (value.empty()) return fallback;
  std::string allowed;
  for (std::size_t i = 0; i < N; ++i) {
    if (value == spellings[i]) return values[i];
    allowed += (i == 0 ? "'" : i + 1 == N ? "' or '" : "', '") + std::string(spellings[i]);
  }
  throw ConfigError(std::string(name) + " is '" + value + "' but must be " + allowed +
                    "' (or unset for the backend's default)");
}

inline ChunkedKernelShape& chunked_kernel_shape_setting() {
  static ChunkedKernelShape shape = environment_choice(
      "REFORMER_CHUNKED_KERNEL", {"whole", "streamed"},
      {ChunkedKernelShape::whole_window, ChunkedKernelShape::streamed},
      kHostMemory ? ChunkedKernelShape::whole_window : ChunkedKernelShape::streamed);
  return shape;
}
inline TileLoops& tile_loops_setting() {
  static TileLoops loops = environment_choice("REFORMER_TILE_LOOPS", {"rows", "elements"},
                                              {TileLoops::rows, TileLoops::elements},
                                              kHostMemory ? TileLoops::rows : TileLoops::elements);
  return loops;
}
// The cpu tiling's 128 x 128 tiles would need a level-1 pool of about 200 KiB
// per team on a GPU, so GPU builds leave it out.
inline ExactTiles checked_exact_tiles(ExactTiles tiles) {
  if (!kHostMemory && tiles == ExactTiles::cpu)
    throw ConfigError(
        "exact attention's tiling is 'cpu' but a GPU build has only 'gpu' and 'gpu-wide' "
        "(REFORMER_EXACT_TILES): pick one of them, or leave it unset");
  return tiles;
}
inline ExactTiles& exact_tiles_setting() {
  static ExactTiles tiles = checked_exact_tiles(
      environment_choice("REFORMER_EXACT_TILES", {"cpu", "gpu", "gpu-wide"},
                         {ExactTiles::cpu, ExactTiles::gpu, ExactTiles::gpu_wide},
                         kHostMemory ? ExactTiles::cpu : ExactTiles::gpu));
  return tiles;
}
inline RowKernels& row_kernels_setting() {
  static RowKernels kernels = environment_choice(
      "REFORMER_ROW_KERNELS", {"threads", "lanes"}, {RowKernels::threads, RowKernels::lanes},
      kHostMemory ? RowKernels::threads : RowKernels::lanes);
  return kernels;
}
}  // namespace detail
inline RowKernels row_kernels() { return detail::row_kernels_setting(); }
inline void set_row_kernels(RowKernels kernels) { detail::row_kernels_setting() = kernels; }

inline const char* exact_tiles_name(ExactTiles tiles) {
  return tiles == ExactTiles::cpu ? "cpu" : tiles == ExactTiles::gpu ? "gpu" : "gpu-wide";
}
inline ExactTiles exact_tiles() { return detail::exact_tiles_setting(); }
inline void set_exact_tiles(ExactTiles tiles) {
  detail::exact_tiles_setting() = detail::checked_exact_tiles(tiles);
}

inline TileLoops tile_loops() { return detail::tile_loops_setting(); }
inline void set_tile_loops(TileLoops loops) { detail::tile_loops_setting() = loops; }
inline const char* tile_loops_name(TileLoops loops) {
  return loops == TileLoops::elements ? "elements" : "rows";
}

inline ChunkedKernelShape chunked_kernel_shape() { return detail::chunked_kernel_shape_setting(); }
inline void set_chunked_kernel_shape(ChunkedKernelShape shape) {
  detail::chunked_kernel_shape_setting() = shape;
}
inline const char* chunked_kernel_shape_name(ChunkedKernelShape shape) {
  return shape == ChunkedKernelShape::streamed ? "streamed" : "whole window";
}

// Rows per block of the column sums (ops' bias and scale gradients over every
// row): 0, one team per tile of features over all rows (the host's default);
// else each team sums a block of this many rows and the last block of a tile
// adds the blocks' sums (GPUs: 1024, so that a GPU gets enough teams). Tests
// set it on the host to run the GPUs' blocks.
namespace detail {
inline Index& column_sum_block_rows_setting() {
  static Index rows = kHostMemory ? 0 : 1024;
  return rows;
}
}  // namespace detail
inline Index column_sum_block_rows() { return detail::column_sum_block_rows_setting(); }
inline void set_column_sum_block_rows(Index rows) {
  require<ConfigError>(rows >= 0, "column sums: block rows is ", rows,
                       " but must be 0 (one block) or positive");
  detail::column_sum_block_rows_setting() = rows;
}

// Threads per team of the fused kernels on a GPU: the number in
// REFORMER_TEAM_SIZE when it is set and positive, read once (a tuning
// experiment: a level-1 scratch pool is sized per resident team, so larger
// teams mean a smaller pool; tests/gpu_run.sh compares sizes), else the
// kernel's own choice (core/cpu_target.hpp's GpuTarget), else Kokkos' AUTO.
// Host builds always take AUTO (one thread per team on OpenMP).
inline int gpu_team_size(int kernel_choice) {
  static const int requested = [] {
    const char* text = std::getenv("REFORMER_TEAM_SIZE");
    return text != nullptr ? std::atoi(text) : 0;
  }();
  if (kHostMemory) return 0;
  return requested > 0 ? requested : kernel_choice;
}

template <class Policy>
Policy sized_team_policy(Index league, std::size_t bytes, int team_size) {
  const int size = gpu_team_size(team_size);
  Policy policy = size > 0 ? Policy(league, size) : Policy(league, Kokkos::AUTO);
  return policy.set_scratch_size(scratch_level(bytes), Kokkos::PerTeam(bytes));
}

// A team policy of `league` teams with `bytes` of scratch per team at the level
// they fit in, and `team_size` threads per team on a GPU (0: AUTO).
// (Launched as LaunchHint says: core/types.hpp.)
using TeamPolicy = Kokkos::TeamPolicy<ExecSpace, LaunchHint>;
inline TeamPolicy team_policy(Index league, std::size_t bytes, int team_size = 0) {
  return sized_team_policy<TeamPolicy>(league, bytes, team_size);
}

// The same with teams handed out one at a time in league order, for leagues
// whose teams have unequal work (put the largest first).
using DynamicTeamPolicy =
    Kokkos::TeamPolicy<ExecSpace, Kokkos::Schedule<Kokkos::Dynamic>, LaunchHint>;
inline DynamicTeamPolicy dynamic_team_policy(Index league, std::size_t bytes, int team_size = 0) {
  return sized_team_policy<DynamicTeamPolicy>(league, bytes, team_size);
}

}  // namespace reformer
