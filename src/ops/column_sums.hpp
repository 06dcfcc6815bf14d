// Column sums over all rows for parameter gradients (internal header): the
// reductions of a bias gradient (sum_rows dy) or a layer-norm scale gradient
// (sum_rows dy * xhat) over every position of a batch.
//
// One thread per feature would give a GPU only d threads, each walking n rows.
// Here one team owns a tile of kTile adjacent features (64 bytes) and splits
// the rows across its threads: thread t keeps kTile running sums in registers
// over rows t, t + team_size, ... (reading kTile contiguous values per row),
// writes them to team scratch, and after a barrier one thread per feature adds
// the team's partial sums in thread order. So a GPU gets team_size * d / kTile
// threads; a CPU (team size 1) gets one sequential sum per feature in row
// order, the same numbers as a plain loop, reading each row's cache line once
// per tile instead of once per feature (3-7x faster than one thread per feature
// for n = 8192, d = 256 or 1024 in float on the 2-core machine). On GPUs the
// rows are also cut into blocks of 1024, a team per (tile, block), and the
// block of a tile that finishes last adds the blocks' sums in order (issue 46:
// with one team per tile, layer norm's dgamma and dbeta took 16% of the 16K
// step on an H200; a second kernel for the blocks' sums was a launch more per
// sum). One atomic counter per tile, no atomic sums; for a given team size
// (fixed per backend and device) the result does not depend on scheduling.
#pragma once

#include "ops/kept_buffer.hpp"
#include "reformer/core/team_scratch.hpp"
#include "reformer/core/types.hpp"

#include <string>

namespace reformer::ops::detail {

// The blocks' sums (one buffer per type, grown when a call needs more and kept
// until Kokkos finalises, so that a step allocates nothing after its first).
struct ColumnSumBlocks {};  // kept_buffer's tag
template <class T>
View2<T> column_sum_blocks(Index blocks, Index d) {
  return View2<T>(kept_buffer<T, ColumnSumBlocks>("column_sum_blocks", blocks * d).data(), blocks,
                  d);
}

// Sums finished inside one launch. Each block of rows (a team, or one
// iteration of a range) writes its partial sums to its own row of `blocks`
// [n_blocks, stride]; the block that arrives last (an atomic counter) adds the
// rows up in block order into the output. So a reduction over rows costs one
// launch instead of two, and the result still does not depend on which block
// finished last or on the thread count: the order of every sum is fixed by n.
// The last block reads the others' rows with load_from_other_team (a GPU's L1
// is not coherent within a launch), and the rows are padded to 128 bytes.
// Blocks may come in groups (the column sums' tiles), each with its own
// counter, which the group's last block sets back to 0; launches on the
// default execution space run one after another, so they can share the
// counters (as they share the buffer).
template <class T>
struct BlockSums {
  View2<T> blocks;  // [n_blocks, stride >= width]
  Kokkos::View<unsigned*, Layout, MemSpace> counter;
  Index n_blocks = 0;
};

template <class T>
BlockSums<T> block_sums(Index n_blocks, Index width, Index groups = 1) {
  using Counters = Kokkos::View<unsigned*, Layout, MemSpace>;
  static Counters* counter = nullptr;
  if (counter == nullptr) {
    counter = new Counters();
    Kokkos::push_finalize_hook([] { *counter = Counters(); });
  }
  if (Index(counter->extent(0)) < groups) *counter = Counters("block_sums_counters", groups);
  constexpr Index line = Index(128 / sizeof(T)) > 0 ? Index(128 / sizeof(T)) : 1;
  const Index stride = (width + line - 1) / line * line;
  const auto flat = column_sum_blocks<T>(n_blocks, stride);
  return {flat, *counter, n_blocks};
}

// Called once per block after its partial sums are written (and, in a team,
// after every thread's Kokkos::memory_fence() and a barrier): true for the
// block of its group that arrives last, which may then read every row of the
// group's blocks.
template <class T>
KOKKOS_INLINE_FUNCTION bool arrives_last(const BlockSums<T>& sums, Index group = 0) {
  Kokkos::memory_fence();
  const unsigned before = Kokkos::atomic_fetch_add(&sums.counter(group), 1u);
  const bool last = Index(before) + 1 == sums.n_blocks;
  if (last) {
    sums.counter(group) = 0;
    Kokkos::memory_fence();
  }
  return last;
}

template <class T, class Value>
struct ColumnSums {
  static constexpr Index kTile = 64 / sizeof(T);  // features per team: 64 bytes of T
  static constexpr int kMaxTeamSize = 256;        // partial sums: at most 16 KiB of scratch
  using Policy = Kokkos::TeamPolicy<ExecSpace>;
  using Member = Policy::member_type;
  using Scratch = Kokkos::View<T**, Kokkos::LayoutRight, ExecSpace::scratch_memory_space,
                               Kokkos::MemoryTraits<Kokkos::Unmanaged>>;

  View1<T> out;
  Value value;
  Index n, d;
  // GPUs: the rows are cut into blocks of block_rows, a team per (tile,
  // block), whose sums go to sums.blocks(block, j), and the last block of a
  // tile adds them into out; no blocks (n_blocks 0): one block, into out.
  Index block_rows = 0;
  BlockSums<T> sums;

  KOKKOS_INLINE_FUNCTION void operator()(const Member& team) const {
    const Index tiles = (d + kTile - 1) / kTile;
    const Index j0 = team.league_rank() % tiles * kTile, block = team.league_rank() / tiles;
    const bool in_blocks = sums.n_blocks > 0;
    const Index begin = in_blocks ? block * block_rows : 0;
    const Index end = in_blocks && begin + block_rows < n ? begin + block_rows : n;
    // Plain loops rather than a nested TeamThreadRange: a lambda capturing the
    // sums by reference kept GCC from holding them in registers (several
    // times slower).
    T sum[kTile];
    for (Index c = 0; c < kTile; ++c) sum[c] = T(0);
    if (j0 + kTile <= d) {
      for (Index i = begin + team.team_rank(); i < end; i += team.team_size())
        for (Index c = 0; c < kTile; ++c) sum[c] += value(i, j0 + c);
    } else {
      // A partial last tile: columns past the end read column d - 1 (no branch
      // in the loop); their sums are dropped below.
      for (Index i = begin + team.team_rank(); i < end; i += team.team_size())
        for (Index c = 0; c < kTile; ++c) sum[c] += value(i, j0 + c < d ? j0 + c : d - 1);
    }
    Scratch partial(team.team_scratch(0), team.team_size(), kTile);
    for (Index c = 0; c < kTile; ++c) partial(team.team_rank(), c) = sum[c];
    team.team_barrier();
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, kTile), [&](Index c) {
      if (j0 + c >= d) return;
      T total = 0;
      for (int t = 0; t < team.team_size(); ++t) total += partial(t, c);
      if (in_blocks)
        sums.blocks(block, j0 + c) = total;
      else
        out(j0 + c) += total;
    });
    if (!in_blocks) return;
    Kokkos::memory_fence();
    team.team_barrier();
    int last = 0;
    Kokkos::single(
        Kokkos::PerTeam(team), [&](int& is_last) { is_last = arrives_last(sums, j0 / kTile); },
        last);
    if (!last) return;
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, kTile), [&](Index c) {
      if (j0 + c >= d) return;
      T total = 0;
      for (Index b = 0; b < sums.n_blocks; ++b)
        total += load_from_other_team(sums.blocks(b, j0 + c));
      out(j0 + c) += total;
    });
  }
};

// out(j) += sum_{i < n} value(i, j) for every j < out.extent(0). `value` is a
// functor or KOKKOS_LAMBDA (Index i, Index j) -> T giving entry (i, j) of the
// [n, d] expression being summed; it is called for 0 <= i < n, 0 <= j < d.
template <class T, class Value>
void add_column_sums(const char* label, Index n, View1<T> out, const Value& value) {
  using Kernel = ColumnSums<T, Value>;
  const Index d = out.extent(0);
  if (n == 0 || d == 0) return;
  Kernel kernel{out, value, n, d};
  const Index tiles = (d + Kernel::kTile - 1) / Kernel::kTile;
  // A GPU needs more teams than d / kTile (16 for d = 256 in float: 100 us
  // for 16K rows on an H200): blocks of rows, summed in block order by each
  // tile's last block, so the result still does not depend on scheduling.
  // (core/team_scratch.hpp: column_sum_block_rows, 1024 on GPUs.)
  const Index block_rows = column_sum_block_rows();
  const Index n_blocks = block_rows > 0 ? (n + block_rows - 1) / block_rows : 1;
  if (n_blocks > 1) {
    kernel.block_rows = block_rows;
    kernel.sums = block_sums<T>(n_blocks, d, tiles);
  }
  const int recommended =
      typename Kernel::Policy(tiles, 1).team_size_recommended(kernel, Kokkos::ParallelForTag());
  const int team_size = recommended < Kernel::kMaxTeamSize ? recommended : Kernel::kMaxTeamSize;
  typename Kernel::Policy policy(tiles * n_blocks, team_size);
  policy.set_scratch_size(0,
                          Kokkos::PerTeam(Kernel::Scratch::shmem_size(team_size, Kernel::kTile)));
  Kokkos::parallel_for(label, policy, kernel);
}

}  // namespace reformer::ops::detail
