// Runs the chunked attention kernels (LSH and local attention) in a given
// shape for a scope: the streamed shape is the GPUs' default, and host tests
// run it here (core/team_scratch.hpp).
#pragma once

#include "reformer/core/team_scratch.hpp"

namespace reformer::testing {

class ScopedChunkedShape {
 public:
  explicit ScopedChunkedShape(ChunkedKernelShape shape) : saved_(chunked_kernel_shape()) {
    set_chunked_kernel_shape(shape);
  }
  ~ScopedChunkedShape() { set_chunked_kernel_shape(saved_); }
  ScopedChunkedShape(const ScopedChunkedShape&) = delete;
  ScopedChunkedShape& operator=(const ScopedChunkedShape&) = delete;

 private:
  ChunkedKernelShape saved_;
};

}  // namespace reformer::testing
