// chunked_scratch_bytes: the kernels' own scratch formulas (chunked_kernels.hpp)
// with this build's tile sizes or a GPU build's.
#include "reformer/attention/chunked_scratch.hpp"

#include "attention/chunked_kernels.hpp"
#include "reformer/attention/local.hpp"
#include "reformer/attention/lsh.hpp"
#include "reformer/core/error.hpp"

#include <algorithm>
#include <cstdlib>

namespace reformer::attention {

ChunkGeometry lsh_chunk_geometry(const LshAttentionConfig& config, Index length) {
  ChunkGeometry g;
  g.chunk = std::min(config.chunk, length);
  g.n_chunks = config.n_hashes * length / g.chunk;
  g.n_before = g.chunk >= length ? 0 : std::min(config.n_before, g.n_chunks - 1);
  return g;
}

ChunkGeometry local_chunk_geometry(const LocalAttentionConfig& config, Index length) {
  ChunkGeometry g;
  g.chunk = config.chunk;
  g.n_chunks = length / config.chunk;
  g.n_before = std::min(config.n_before, g.n_chunks - 1);
  return g;
}

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

namespace {

ChunkProducts& chunk_products_setting() {
  static ChunkProducts products = reformer::detail::environment_choice(
      "REFORMER_CHUNK_PRODUCTS", {"fused", "batched"},
      {ChunkProducts::fused, ChunkProducts::batched},
      kHostMemory ? ChunkProducts::fused : ChunkProducts::batched);
  return products;
}

std::size_t& chunk_slice_setting() {
  static std::size_t bytes = [] {
    const char* text = std::getenv("REFORMER_CHUNK_SLICE_MIB");
    const std::string value = text != nullptr ? text : "";
    if (value.empty()) return std::size_t(64) << 20;
    char* end = nullptr;
    const double mib = std::strtod(value.c_str(), &end);
    require<ConfigError>(end != value.c_str() && *end == '\0' && mib > 0,
                         "REFORMER_CHUNK_SLICE_MIB is '", value,
                         "' but must be a positive number of MiB (the batched chunk shape's "
                         "slice buffers; unset: 64)");
    return std::size_t(mib * double(1 << 20));
  }();
  return bytes;
}

}  // namespace

namespace detail {
Workspace& chunk_batched_workspace() {
  static Workspace* workspace = [] {
    auto* made = new Workspace("chunk_batched_workspace");
    Kokkos::push_finalize_hook([made] { made->release(); });
    return made;
  }();
  return *workspace;
}
}  // namespace detail

void release_chunk_batched_workspace() { detail::chunk_batched_workspace().release(); }

ChunkProducts chunk_products() { return chunk_products_setting(); }
void set_chunk_products(ChunkProducts products) { chunk_products_setting() = products; }
const char* chunk_products_name(ChunkProducts products) {
  return products == ChunkProducts::batched ? "batched" : "fused";
}
std::size_t chunk_slice_budget() { return chunk_slice_setting(); }
void set_chunk_slice_budget(std::size_t bytes) { chunk_slice_setting() = bytes; }

ChunkBatchedBytes chunk_batched_bytes(Index chunk, Index n_before, Index d_head, Index chunks,
                                      std::size_t compute_bytes, std::size_t budget) {
  const char* op = "chunk_batched_bytes";
  require<ConfigError>(chunk > 0, op, ": chunk is ", chunk, " but must be positive");
  require<ConfigError>(n_before >= 0, op, ": n_before is ", n_before, " but must be >= 0");
  require<ConfigError>(d_head > 0, op, ": d_head is ", d_head, " but must be positive");
  require<ConfigError>(chunks >= 0, op, ": chunks is ", chunks, " but must be >= 0");
  const std::size_t c = std::size_t(chunk), w = std::size_t((n_before + 1) * chunk),
                    d = std::size_t(d_head), e = compute_bytes, i = sizeof(int);
  ChunkBatchedBytes bytes;
  // Q, K, V, S; the positions of the queries and keys; the queries' logsumexps.
  bytes.per_chunk_forward = e * (c * d + 2 * w * d + c * w + c) + i * (c + w);
  // Q, dO, K, V, S, dP; the positions.
  bytes.per_chunk_backward = e * (2 * c * d + 2 * w * d + 2 * c * w) + i * (c + w);
  const auto slice = [&](std::size_t per_chunk) {
    return std::min<Index>(chunks, std::max<Index>(1, Index(budget / per_chunk)));
  };
  bytes.forward_slice = slice(bytes.per_chunk_forward);
  bytes.backward_slice = slice(bytes.per_chunk_backward);
  bytes.forward = std::size_t(bytes.forward_slice) * bytes.per_chunk_forward;
  bytes.backward = std::size_t(bytes.backward_slice) * bytes.per_chunk_backward;
  return bytes;
}

}  // namespace reformer::attention
