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

// Read-only inputs. The alias goes through a dependent type so that it never
// takes part in template argument deduction: `f(In2<T> x, View2<T> y)` deduces T
// from the output alone and accepts a View2<float> for x.
template <class V>
struct NonDeduced {
  using type = V;
};
template <class T>
using In1 = typename NonDeduced<Kokkos::View<const T*, Layout, MemSpace>>::type;
template <class T>
using In2 = typename NonDeduced<Kokkos::View<const T**, Layout, MemSpace>>::type;
template <class T>
using In3 = typename NonDeduced<Kokkos::View<const T***, Layout, MemSpace>>::type;
template <class T>
using In4 = typename NonDeduced<Kokkos::View<const T****, Layout, MemSpace>>::type;

using Index = std::int64_t;

// Range policy over [0, n) on the default execution space.
inline Kokkos::RangePolicy<ExecSpace> range(Index n) {
  return Kokkos::RangePolicy<ExecSpace>(0, n);
}

// Memory of the default execution space is host memory (Serial, OpenMP).
constexpr bool kHostMemory = Kokkos::SpaceAccessibility<Kokkos::HostSpace, MemSpace>::accessible;

// body(begin, end) over [0, n) in contiguous blocks: blocks of 4096 on the
// host, where the body's own loop over raw (__restrict__) pointers then
// vectorises (a loop over View accesses often does not: the stores might
// alias the views' pointers), and one element per thread on GPUs.
template <class Body>
void parallel_blocks(const char* label, Index n, const Body& body) {
  constexpr Index block = kHostMemory ? 4096 : 1;
  Kokkos::parallel_for(
      label, range((n + block - 1) / block),
      KOKKOS_LAMBDA(Index b) { body(b * block, b * block + block < n ? b * block + block : n); });
}

}  // namespace reformer
