// chunked_scratch_bytes: the kernels' own scratch formulas (chunked_kernels.hpp)
// with this build's tile sizes or a GPU build's.
#include "reformer/attention/chunked_scratch.hpp"

#include "attention/chunked_kernels.hpp"
#include "reformer/core/error.hpp"

namespace reformer::attention {

ChunkedScratch chunked_scratch_bytes(ChunkedKernelShape shape, Index chunk, Index n_before,
                                     Index d_head, bool gpu_tiles) {
  const char* op = "chunked_scratch_bytes";
  require<ConfigError>(chunk > 0, op, ": chunk is ", chunk, " but must be positive");
  require<ConfigError>(n_before >= 0, op, ": n_before is ", n_before, " but must be >= 0");
  require<ConfigError>(d_head > 0, op, ": d_head is ", d_head, " but must be positive");
  using Bytes = detail::ChunkedScratchBytes<float>;
  using Host = StreamTileTraits<float>;
  const Index cols =
      gpu_tiles ? TileTraits<float>::device_block_cols : TileTraits<float>::block_cols;
  const Index slots = (n_before + 1) * chunk;
  ChunkedScratch bytes;
  if (shape == ChunkedKernelShape::streamed) {
    const Index bq = gpu_tiles ? GpuTarget::chunked_query_tile : Host::query;
    const Index forward_key = gpu_tiles ? GpuTarget::chunked_forward_key_tile : Host::forward_key;
    const Index backward_key =
        gpu_tiles ? GpuTarget::chunked_backward_key_tile : Host::backward_key;
    bytes.forward = Bytes::streamed_forward(bq, forward_key, d_head, cols);
    const Index rows = gpu_tiles ? GpuTarget::chunked_backward_query_rows : Host::backward_rows;
    bytes.backward = Bytes::streamed_backward(chunk, bq, backward_key, rows, d_head, cols);
  } else {
    bytes.forward = Bytes::whole_forward(chunk, slots, d_head, cols);
    bytes.backward = Bytes::whole_backward(chunk, slots, d_head, cols);
  }
  bytes.gpu_forward_level = bytes.forward <= kLevel0ScratchBytes ? 0 : 1;
  bytes.gpu_backward_level = bytes.backward <= kLevel0ScratchBytes ? 0 : 1;
  return bytes;
}

}  // namespace reformer::attention
