// parallel_blocks (core/types.hpp): body(begin, end) over [0, n) in contiguous
// blocks, with or without streams whose next block is prefetched (bf16
// streams on the host). Every index is visited exactly once, and blocks have
// the length the helper promises.
#include "reformer/core/bfloat16.hpp"
#include "reformer/core/types.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace reformer {
namespace {

// The streams passed: none, float arrays only, or a bf16 and a float array.
enum class Streams { None, FloatOnly, WithBf16 };

// Adds 1 to visits[i] for every index a block covers and records the largest
// block length.
void visit(Index n, Streams streams, View1<int> visits, View1<int> longest) {
  View1<bf16> narrow("narrow", n);
  View1<float> wide("wide", n);
  const auto body = KOKKOS_LAMBDA(Index begin, Index end) {
    for (Index i = begin; i < end; ++i) visits(i) += 1;
    Kokkos::atomic_fetch_max(&longest(0), int(end - begin));
  };
  if (streams == Streams::WithBf16)
    parallel_blocks("test_parallel_blocks_bf16", n, body, narrow.data(), wide.data());
  else if (streams == Streams::FloatOnly)
    parallel_blocks("test_parallel_blocks_float", n, body, wide.data(), wide.data());
  else
    parallel_blocks("test_parallel_blocks", n, body);
  Kokkos::fence();
}

TEST(ParallelBlocks, EveryIndexOnceWithAndWithoutBf16Streams) {
  for (const Streams streams : {Streams::None, Streams::FloatOnly, Streams::WithBf16})
    for (const Index n :
         {Index(0), Index(1), Index(1023), Index(1024), Index(1025), Index(4097), Index(10000)}) {
      SCOPED_TRACE("n " + std::to_string(n) + ", streams " + std::to_string(int(streams)));
      View1<int> visits("visits", n), longest("longest", 1);
      visit(n, streams, visits, longest);
      auto host = Kokkos::create_mirror_view_and_copy(HostSpace(), visits);
      Index wrong = 0;
      for (Index i = 0; i < n; ++i) wrong += host(i) != 1;
      EXPECT_EQ(wrong, 0) << "indices not visited exactly once";
      int block = 0;
      Kokkos::deep_copy(block, Kokkos::subview(longest, 0));
      // Host: blocks of 1024 with a bf16 stream (the hints cover one block
      // ahead), 4096 without one (float32 streams get no hints); GPUs: one
      // index per thread.
      const Index limit = !kHostMemory ? 1 : streams == Streams::WithBf16 ? 1024 : 4096;
      EXPECT_LE(block, limit);
      if (n >= limit) EXPECT_EQ(block, limit);
    }
}

}  // namespace
}  // namespace reformer
