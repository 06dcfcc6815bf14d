// Team scratch of the chunked attention kernels (LSH and local attention):
// what one team of each kernel asks for, so that the scratch of a GPU's tiles
// can be accounted for on any machine (core/team_scratch.hpp explains the
// levels and the two kernel shapes).
#pragma once

#include "reformer/core/team_scratch.hpp"
#include "reformer/core/types.hpp"

#include <cstddef>

namespace reformer::attention {

// Bytes of team scratch that one team of the forward and of the backward
// kernel asks for, and the level each gets on a CUDA or HIP build (0: fast
// on-chip scratch; 1: a pool in global memory, reserved for every team that
// can be resident on the device). Tiles are float32 for float and bf16
// tensors alike.
struct ChunkedScratch {
  std::size_t forward = 0, backward = 0;
  int gpu_forward_level = 0, gpu_backward_level = 0;
};

// For chunks of `chunk` items that look back `n_before` chunks, heads of
// d_head, and the kernel shape `shape`, with the tile sizes of this build
// (gpu_tiles false) or of a CUDA/HIP build (gpu_tiles true, whatever this
// build is: core/cpu_target.hpp's GpuTarget). Throws ConfigError for a chunk,
// n_before or d_head out of range.
ChunkedScratch chunked_scratch_bytes(ChunkedKernelShape shape, Index chunk, Index n_before,
                                     Index d_head, bool gpu_tiles);

}  // namespace reformer::attention
