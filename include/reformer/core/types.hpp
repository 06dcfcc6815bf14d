// View and execution-space aliases used throughout the project.
//
// Tensors live in the default execution space's memory, row-major (LayoutRight),
// shaped [batch, length, features] or [batch, heads, length, d_head].
#pragma once

#include "reformer/core/kokkos_compat.hpp"

#include <cstdint>

namespace reformer {

using ExecSpace = Kokkos::DefaultExecutionSpace;
using MemSpace = ExecSpace::memory_space;
using HostSpace = Kokkos::HostSpace;
using Layout = Kokkos::LayoutRight;

template <class T>
using View1 = Kokkos::View<T*, Layout, MemSpace>;
template <class T>
using View2 = Kokkos::View<T**, Layout, MemSpace>;
template <class T>
using View3 = Kokkos::View<T***, Layout, MemSpace>;
template <class T>
using View4 = Kokkos::View<T****, Layout, MemSpace>;

using Index = std::int64_t;

// Range policy over [0, n) on the default execution space.
inline Kokkos::RangePolicy<ExecSpace> range(Index n) {
  return Kokkos::RangePolicy<ExecSpace>(0, n);
}

}  // namespace reformer
