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

// How our kernels are launched on CUDA: the functor goes to the kernel as an
// argument (up to 4 KiB), never through constant memory. Kokkos 3.4 copies a
// functor of 512 bytes or more into constant memory, and before doing so waits
// for the previous kernel launched that way to finish (cudaEventSynchronize):
// the host cannot queue launches ahead of the GPU, and the GPU idles for each
// launch's host-side cost. The fused attention kernels' functors are 500-700
// bytes. Other backends ignore the hint (HIP always passes the functor
// through device memory).
using LaunchHint = Kokkos::Experimental::WorkItemProperty::HintLightWeight_t;
using RangePolicy = Kokkos::RangePolicy<ExecSpace, LaunchHint>;

// Range policy over [0, n) on the default execution space.
inline RangePolicy range(Index n) { return RangePolicy(0, n); }

// Memory of the default execution space is host memory (Serial, OpenMP).
constexpr bool kHostMemory = Kokkos::SpaceAccessibility<Kokkos::HostSpace, MemSpace>::accessible;

// model.ff_chunk or model.loss_chunk = "auto": the rows a run picks from the
// predicted peak (train/chunk_choice.hpp) before it builds the model. The
// default of a run's config on GPUs; a layer given it unresolved refuses it.
constexpr Index kAutoChunk = -1;
// The end of a layer's error for a chunk of kAutoChunk.
inline const char* unresolved_auto_chunk() {
  return "; -1 is \"auto\", which a run (train, eval, generate, reformer memory) resolves to "
         "rows before it builds the model: call train::resolve_auto_chunks on the run's config "
         "first, or give rows";
}

// The arrays a block loop walks through whose elements are narrower than
// float32 (bf16): their base addresses and element sizes, at most four, in a
// plain struct that a device lambda can capture (nvcc's extended lambdas may
// not capture a parameter pack).
struct NarrowStreams {
  static constexpr int kMax = 4;
  const char* base[kMax] = {};
  int element_bytes[kMax] = {};
  int count = 0;
};

template <class... T>
NarrowStreams narrow_streams(const T*... arrays) {
  static_assert(sizeof...(T) <= NarrowStreams::kMax, "at most four streams");
  NarrowStreams streams;
  (
      [&](const auto* array) {
        if (sizeof(*array) < sizeof(float)) {
          streams.base[streams.count] = reinterpret_cast<const char*>(array);
          streams.element_bytes[streams.count] = int(sizeof(*array));
          ++streams.count;
        }
      }(arrays),
      ...);
  return streams;
}

// Asks the cache for the bytes [from, from + bytes), one hint per 64-byte
// line, on the host (`write`: the lines are about to be written); nothing on
// GPUs.
KOKKOS_INLINE_FUNCTION void prefetch_bytes(const void* from, Index bytes, bool write = false) {
#if defined(__GNUC__) && !defined(__CUDA_ARCH__) && !defined(__HIP_DEVICE_COMPILE__)
  const char* line = static_cast<const char*>(from);
  const char* last = line + bytes;
  if (write)
    for (; line < last; line += 64) __builtin_prefetch(line, 1, 3);
  else
    for (; line < last; line += 64) __builtin_prefetch(line, 0, 3);
#else
  (void)from;
  (void)bytes;
  (void)write;
#endif
}

// Reads a value that another team of the same launch wrote, once a fence and
// an atomic have ordered the two (ops' block sums): a volatile load on GPUs,
// which skips the multiprocessor's L1 (not coherent within a launch: a line
// cached earlier by this multiprocessor could be stale); a plain load on the
// host, whose caches are coherent.
template <class T>
KOKKOS_INLINE_FUNCTION T load_from_other_team(const T& x) {
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
  return *static_cast<const volatile T*>(&x);
#else
  return x;
#endif
}

// Asks the cache for elements [begin, end) of every stream.
KOKKOS_INLINE_FUNCTION void prefetch_streams(const NarrowStreams& streams, Index begin, Index end) {
  for (int s = 0; s < streams.count; ++s)
    prefetch_bytes(streams.base[s] + begin * streams.element_bytes[s],
                   (end - begin) * streams.element_bytes[s]);
}

// body(begin, end) over [0, n) in contiguous blocks: blocks of 4096 on the
// host, where the body's own loop over raw (__restrict__) pointers then
// vectorises (a loop over View accesses often does not: the stores might
// alias the views' pointers), and one element per thread on GPUs.
//
// `streams` are the arrays the body walks through (each indexed like [0, n)).
// On the host, with a bf16 stream among them, blocks are 1024 long and each
// first asks the cache for the next block of every bf16 stream: a loop that
// converts bf16 (widening, rounding) is long, so the processor's own
// look-ahead keeps few loads in flight. On a 2-core Xeon VM (2026-11-26) a
// bf16 axpby of 4M elements from memory ran at 10 GB/s without the hints and
// 46 GB/s with them; float32 ran at 50 GB/s without and lost 10-20% with
// them, so float32 streams get none.
template <class Body, class... Streams>
void parallel_blocks(const char* label, Index n, const Body& body, const Streams*... streams) {
  const NarrowStreams narrow = narrow_streams(streams...);
  const Index block = !kHostMemory ? 1 : narrow.count > 0 ? 1024 : 4096;
  Kokkos::parallel_for(
      label, range((n + block - 1) / block), KOKKOS_LAMBDA(Index b) {
        const Index begin = b * block, end = begin + block < n ? begin + block : n;
        if (narrow.count > 0) prefetch_streams(narrow, end, end + block < n ? end + block : n);
        body(begin, end);
      });
}

}  // namespace reformer
