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
#include <cstdlib>

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
inline Kokkos::TeamPolicy<ExecSpace> team_policy(Index league, std::size_t bytes,
                                                 int team_size = 0) {
  return sized_team_policy<Kokkos::TeamPolicy<ExecSpace>>(league, bytes, team_size);
}

// The same with teams handed out one at a time in league order, for leagues
// whose teams have unequal work (put the largest first).
using DynamicTeamPolicy = Kokkos::TeamPolicy<ExecSpace, Kokkos::Schedule<Kokkos::Dynamic>>;
inline DynamicTeamPolicy dynamic_team_policy(Index league, std::size_t bytes, int team_size = 0) {
  return sized_team_policy<DynamicTeamPolicy>(league, bytes, team_size);
}

}  // namespace reformer
