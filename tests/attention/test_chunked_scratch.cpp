// Team scratch of the chunked attention kernels (reformer/attention/chunked_scratch.hpp):
// the GPU tile sizes of the streamed kernels fit level-0 scratch where the
// whole-window tiles need a level-1 pool.
#include "reformer/attention/chunked_scratch.hpp"
#include "reformer/core/error.hpp"

#include <gtest/gtest.h>

#include <string>

namespace reformer {
namespace {

using attention::chunked_scratch_bytes;

TEST(ChunkedScratch, StreamedGpuTilesFitLevelZeroWhereWholeWindowsDoNot) {
  // The defaults (LSH: chunk 64; local attention: 128; one chunk back) and
  // smaller chunks, at the head sizes of the benchmarks.
  for (const Index chunk : {32, 64, 128})
    for (const Index d_head : {32, 64}) {
      const std::string what =
          "chunk " + std::to_string(chunk) + ", d_head " + std::to_string(d_head);
      const auto streamed =
          chunked_scratch_bytes(ChunkedKernelShape::streamed, chunk, 1, d_head, true);
      EXPECT_LE(streamed.forward, kLevel0ScratchBytes) << what;
      EXPECT_LE(streamed.backward, kLevel0ScratchBytes) << what;
      EXPECT_EQ(streamed.gpu_forward_level, 0) << what;
      EXPECT_EQ(streamed.gpu_backward_level, 0) << what;
      const auto whole =
          chunked_scratch_bytes(ChunkedKernelShape::whole_window, chunk, 1, d_head, true);
      EXPECT_GT(whole.backward, streamed.backward) << what;
      if (chunk == 64 && d_head == 64) {
        EXPECT_EQ(whole.gpu_forward_level, 1) << what;
        EXPECT_EQ(whole.gpu_backward_level, 1) << what;
      }
    }
}

TEST(ChunkedScratch, StreamedForwardDoesNotGrowWithTheWindow) {
  // The forward streams the window: its tiles do not depend on chunk or n_before,
  // while the whole-window tiles grow with both.
  const auto small = chunked_scratch_bytes(ChunkedKernelShape::streamed, 32, 0, 64, true);
  const auto large = chunked_scratch_bytes(ChunkedKernelShape::streamed, 128, 3, 64, true);
  EXPECT_EQ(small.forward, large.forward);
  EXPECT_GT(large.backward, small.backward);  // the dq sums of up to 64 queries
  const auto larger = chunked_scratch_bytes(ChunkedKernelShape::streamed, 256, 3, 64, true);
  // Groups of 64 queries: a longer chunk adds only its positions (4 bytes each).
  EXPECT_LE(larger.backward, large.backward + 128 * sizeof(int));
  const auto whole_small = chunked_scratch_bytes(ChunkedKernelShape::whole_window, 32, 0, 64, true);
  const auto whole_large =
      chunked_scratch_bytes(ChunkedKernelShape::whole_window, 128, 3, 64, true);
  EXPECT_GT(whole_large.forward, 8 * whole_small.forward);
}

TEST(ChunkedScratch, ClearErrors) {
  try {
    chunked_scratch_bytes(ChunkedKernelShape::streamed, 0, 1, 64, true);
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("chunk is 0 but must be positive"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(chunked_scratch_bytes(ChunkedKernelShape::streamed, 64, -1, 64, true), ConfigError);
  EXPECT_THROW(chunked_scratch_bytes(ChunkedKernelShape::whole_window, 64, 1, 0, false),
               ConfigError);
}

}  // namespace
}  // namespace reformer
