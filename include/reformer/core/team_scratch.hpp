// Team scratch for the fused kernels, the same code on every backend.
//
// GPUs give a team a small, fast level-0 scratch (48 KiB is the portable limit
// on NVIDIA and AMD) and a large, slower level 1; host threads use level 0 for
// any size. A kernel asks scratch_level(bytes) for the level its tiles fit in
// and passes it to team_scratch(); the choice is a run-time value, so one
// functor serves both.
#pragma once

#include "reformer/core/types.hpp"

#include <cstddef>

namespace reformer {

using TeamMember = Kokkos::TeamPolicy<ExecSpace>::member_type;

template <class T>
using ScratchMatrix = Kokkos::View<T**, Layout, ExecSpace::scratch_memory_space,
                                   Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
template <class T>
using ScratchVector = Kokkos::View<T*, Layout, ExecSpace::scratch_memory_space,
                                   Kokkos::MemoryTraits<Kokkos::Unmanaged>>;

// The level-0 scratch a GPU team can count on.
constexpr std::size_t kLevel0ScratchBytes = 48 * 1024;

// 0 when `bytes` of tiles fit in fast scratch (always on the host), else 1.
inline int scratch_level(std::size_t bytes) {
  return kHostMemory || bytes <= kLevel0ScratchBytes ? 0 : 1;
}

// A team policy of `league` teams with `bytes` of scratch per team at the level
// they fit in.
inline Kokkos::TeamPolicy<ExecSpace> team_policy(Index league, std::size_t bytes) {
  Kokkos::TeamPolicy<ExecSpace> policy(league, Kokkos::AUTO);
  return policy.set_scratch_size(scratch_level(bytes), Kokkos::PerTeam(bytes));
}

// The same with teams handed out one at a time in league order, for leagues
// whose teams have unequal work (put the largest first).
using DynamicTeamPolicy = Kokkos::TeamPolicy<ExecSpace, Kokkos::Schedule<Kokkos::Dynamic>>;
inline DynamicTeamPolicy dynamic_team_policy(Index league, std::size_t bytes) {
  DynamicTeamPolicy policy(league, Kokkos::AUTO);
  return policy.set_scratch_size(scratch_level(bytes), Kokkos::PerTeam(bytes));
}

}  // namespace reformer
