// Kernels that work by rows (layer norm, the batched chunk kernels, the LSH
// and shared-QK kernels over (batch, position, head) items of d_head values):
// a row per group of GpuTarget::row_lanes vector lanes (a warp on NVIDIA),
// GpuTarget::rows_per_team rows per team, the lanes along the row, so that a
// warp reads and writes one row's contiguous values at once and the index
// arithmetic runs once per row, not once per element (RowKernels::lanes,
// core/team_scratch.hpp). On the host a team is one thread with one lane,
// which takes the team's rows in turn: the same kernel, run serially, which
// is what the host tests check.
#pragma once

#include "reformer/core/cpu_target.hpp"
#include "reformer/core/team_scratch.hpp"

namespace reformer {

constexpr Index kLaneRowsPerTeam = GpuTarget::rows_per_team;
constexpr Index kRowLanes = kHostMemory ? 1 : GpuTarget::row_lanes;

// `teams` teams of kLaneRowsPerTeam threads with kRowLanes lanes each.
inline TeamPolicy lane_row_policy(Index teams) {
  return kHostMemory ? TeamPolicy(teams, 1, 1)
                     : TeamPolicy(teams, int(kLaneRowsPerTeam), int(kRowLanes));
}

// body(team, row) for every row < rows, a row per thread's group of lanes.
template <class Body>
void for_lane_rows(const char* label, Index rows, const Body& body) {
  const Index teams = (rows + kLaneRowsPerTeam - 1) / kLaneRowsPerTeam;
  Kokkos::parallel_for(
      label, lane_row_policy(teams), KOKKOS_LAMBDA(const TeamMember& team) {
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, kLaneRowsPerTeam), [&](Index r) {
          const Index row = team.league_rank() * kLaneRowsPerTeam + r;
          if (row < rows) body(team, row);
        });
      });
}

// A lane's columns of a row of n <= kColumns * kRowLanes values: f(j, x) for
// x = lane + j kRowLanes < n, j < kColumns = lane_columns(n_max), inside a
// ThreadVectorRange(team, kRowLanes) over the lanes. The loop's length is a
// constant, so a GPU compiler unrolls it and keeps per-column arrays
// (`C a[kColumns]`) in registers. A copy that loads all of a lane's columns
// before it stores any keeps its loads in flight at once: a loop of
// `to[x] = from[x]` may not move a load above the store before it (the
// compiler cannot tell that they do not alias), so on a GPU each column
// would wait for the one before.
constexpr Index lane_columns(Index n_max) { return (n_max + kRowLanes - 1) / kRowLanes; }

template <Index kColumns, class F>
KOKKOS_FORCEINLINE_FUNCTION void for_lane_columns(Index lane, Index n, const F& f) {
  if constexpr (kRowLanes == 1) {
    // The host's one lane: a plain loop, which vectorises.
    for (Index x = lane; x < n; ++x) f(x - lane, x);
  } else {
    for (Index j = 0; j < kColumns; ++j) {
      const Index x = lane + j * kRowLanes;
      if (x < n) f(j, x);
    }
  }
}

// A lane's columns of a row of n values of any length, kLaneGroup at a time:
// v[j] = load(x) for the group's columns, then store(x, v[j]), so that every
// load of a group is in flight before the group's first store (an in-place
// update of a row too: its columns x and x + kRowLanes are not known to differ
// when the loop steps by a run-time count, as ThreadVectorRange's does).
// (The host's one lane stores each column right after its load.)
constexpr Index kLaneGroup = 4;

template <class V, class Load, class Store>
KOKKOS_FORCEINLINE_FUNCTION void load_then_store_lane_columns(Index lane, Index n, const Load& load,
                                                              const Store& store) {
  if constexpr (kRowLanes == 1) {
    for (Index x = lane; x < n; ++x) store(x, load(x));
    return;
  }
  for (Index base = 0; base < n; base += kLaneGroup * kRowLanes) {
    V v[kLaneGroup];
    for_lane_columns<kLaneGroup>(lane, n - base, [&](Index j, Index x) { v[j] = load(base + x); });
    for_lane_columns<kLaneGroup>(lane, n - base, [&](Index j, Index x) { store(base + x, v[j]); });
  }
}

// store(j, value(j)) for j < n over the row's lanes, the values of a lane's
// group of columns computed (and their loads issued) before any is stored:
// the lanes form of `for j: y[j] = f(x[j])`.
template <class V, class Value, class Store>
KOKKOS_FORCEINLINE_FUNCTION void lane_map(const TeamMember& team, Index n, const Value& value,
                                          const Store& store) {
  if constexpr (kRowLanes == 1) {
    // The host's team of one lane: the plain loop, no lanes to spread over.
    for (Index j = 0; j < n; ++j) store(j, value(j));
  } else {
    Kokkos::parallel_for(Kokkos::ThreadVectorRange(team, kRowLanes), [&](Index lane) {
      load_then_store_lane_columns<V>(lane, n, value, store);
    });
  }
}

// The sum of f(j) for j < n over the row's lanes (every lane gets it).
template <class C, class F>
KOKKOS_INLINE_FUNCTION C lane_sum(const TeamMember& team, Index n, const F& f) {
  C sum = 0;
  Kokkos::parallel_reduce(
      Kokkos::ThreadVectorRange(team, n), [&](Index j, C& acc) { acc += f(j); }, sum);
  return sum;
}

}  // namespace reformer
