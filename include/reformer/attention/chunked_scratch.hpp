// Team scratch of the chunked attention kernels (LSH and local attention):
// what one team of each kernel asks for, so that the scratch of a GPU's tiles
// can be accounted for on any machine (core/team_scratch.hpp explains the
// levels and the two kernel shapes).
#pragma once

#include "reformer/core/team_scratch.hpp"
#include "reformer/core/types.hpp"

#include <cstddef>

namespace reformer::attention {

struct LshAttentionConfig;
struct LocalAttentionConfig;

// How LSH and local attention cut a sequence of `length` positions into the
// chunks of the chunked kernels: items per chunk, chunks per (batch, head)
// over every round, and the chunks each chunk looks back (clipped as the
// kernels clip it). One place for the kernels and the memory prediction.
struct ChunkGeometry {
  Index chunk = 0, n_chunks = 0, n_before = 0;
};
// LSH: a sequence shorter than the chunk is one chunk with no look-back.
ChunkGeometry lsh_chunk_geometry(const LshAttentionConfig& config, Index length);
ChunkGeometry local_chunk_geometry(const LocalAttentionConfig& config, Index length);

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

// Where the chunked kernels compute their products (issue 46).
// `fused`: inside the team kernels, in one of the two ChunkedKernelShapes.
// `batched`: as reformer-pytorch does, a slice of chunks at a time: the
// chunks' queries and their windows' keys and values are gathered into
// contiguous buffers, the chunk scores S = Q K^T and the products P V (and in
// the backward dO V^T, P^T dO, dS K, dS^T Q) run as strided-batched products
// (ops::batched_matmul: the vendor's strided-batched GEMM on a GPU whose
// vendor BLAS is loaded, the portable kernel elsewhere), and the masks,
// softmax, logsumexp and dropout run in row kernels between them. Both give
// the same results up to rounding. REFORMER_CHUNK_PRODUCTS=fused|batched picks
// one for a process (default: batched on GPUs, where it ran the LSH-2 layer
// 3-4.5x faster than the fused kernels on an H200, and fused on the host);
// tests switch with set_chunk_products().
enum class ChunkProducts { fused, batched };
ChunkProducts chunk_products();
void set_chunk_products(ChunkProducts products);
const char* chunk_products_name(ChunkProducts products);

// The batched shape holds at most this many bytes of slice buffers at once
// (at least one chunk's): REFORMER_CHUNK_SLICE_MIB when set (a positive
// number of MiB), else 64 MiB. Tests set it with set_chunk_slice_budget().
std::size_t chunk_slice_budget();
void set_chunk_slice_budget(std::size_t bytes);
// Frees the batched shape's workspace (it keeps its high-water mark between
// calls otherwise); `reformer memory` frees it before each point, so that
// each point counts its own slices. Call it between calls, not during one.
void release_chunk_batched_workspace();

// The batched shape's buffers for `chunks` chunks (every (batch, head) and
// round) of `chunk` queries that look back `n_before` chunks, heads of
// d_head, in compute_bytes-byte elements (float32 for float and bf16 tensors):
// bytes per chunk forward (Q, K, V, S and the positions and logsumexps) and
// backward (Q, dO, K, V, S, dP and the positions), the chunks of one slice
// under `budget`, and the bytes a forward and a backward call take from the
// workspace (a whole slice, or every chunk when fewer).
struct ChunkBatchedBytes {
  std::size_t per_chunk_forward = 0, per_chunk_backward = 0;
  Index forward_slice = 0, backward_slice = 0;  // chunks per slice
  std::size_t forward = 0, backward = 0;
};
ChunkBatchedBytes chunk_batched_bytes(Index chunk, Index n_before, Index d_head, Index chunks,
                                      std::size_t compute_bytes, std::size_t budget);

}  // namespace reformer::attention
