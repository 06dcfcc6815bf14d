// Exact attention in O(L) memory (FlashAttention-style): the same result as
// full attention (full.hpp), score_ij = scale * q_i . k_j with the same masks,
// mask constants and dropout mask, without ever holding an L x L matrix.
//
// Forward: each team takes a tile of queries and streams over tiles of keys
// with an online softmax (running maximum and sum per query); it keeps only the
// output and the logsumexp of every query row, lse [batch, Lq, heads].
// Backward recomputes the probabilities tile by tile from lse, with
// D_i = dout_i . out_i:  dS_ij = P_ij (drop_ij dP_ij - D_i),  dP = dout V^T.
// Neither of its two schedules uses atomics, so results do not depend on the
// thread count:
//  - two passes (GPUs, and CPUs with fewer batch x heads than threads): one
//    team per key tile streams the queries and sums dK and dV; one team per
//    query tile streams the keys and sums dQ (recomputing S and dP: nine tile
//    products per tile pair with the forward's two);
//  - one pass (CPUs whose threads each get whole (batch, head) pairs): one
//    team per (batch, head) walks its key tiles, streams the queries past each
//    and sums dK and dV in scratch and dQ straight into dq, which no other
//    team touches (seven products).
// Causal: key tiles wholly above the diagonal are skipped, not masked (except
// for queries whose every visible key is padding: full attention lets those
// attend uniformly to all keys, and so does this).
// Tiles and register blocks: one of three tilings (ExactTiles,
// core/team_scratch.hpp; REFORMER_EXACT_TILES): the host's vector blocks on
// 128 x 128 tiles, or one of two GPU tilings sized for level-0 scratch
// (core/cpu_target.hpp's GpuTarget). Every tiling runs on every backend except
// the cpu one on GPUs, and gives full attention's result up to rounding.
//
// Tensors are [batch, length, heads, d_head]; keys and values may have another
// length than queries (cross-attention, not causal). With bf16 tensors (issue
// 34) the tiles, scores, softmax statistics and logsumexps are float32: each
// output and gradient element is rounded to bf16 once (the one-pass backward
// sums dq in a float32 workspace buffer of q's shape).
#pragma once

#include "reformer/attention/full.hpp"
#include "reformer/core/precision.hpp"
#include "reformer/core/team_scratch.hpp"
#include "reformer/core/workspace.hpp"

namespace reformer::attention {

// Exact attention computes full attention: the same hyper-parameters (self
// mask, score scale) and the same checks.
using ExactAttentionConfig = FullAttentionConfig;

// out [batch, Lq, heads, d_head]; lse [batch, Lq, heads] is saved for backward.
// The dropout mask of score (b * heads + h, i, j) is the one full attention uses.
template <class T>
void exact_attention_forward(In4<T> q, In4<T> k, In4<T> v, const ExactAttentionConfig& config,
                             const AttentionCall& call, View4<T> out, View3<compute_t<T>> lse,
                             Workspace& workspace);

// The backward's schedule (see the top of the file). Auto: one pass on host
// memory when every thread gets the same number of (batch, head) pairs, or at
// least four; two passes otherwise. The other values exist for tests and
// measurements; both give the same gradients up to rounding.
enum class ExactBackwardSchedule { Auto, OnePass, TwoPass };
bool exact_backward_one_pass(Index batch_heads, Index concurrency,
                             ExactBackwardSchedule schedule = ExactBackwardSchedule::Auto);

// What a tiling asks of each kernel at a head size (float32 tiles: bf16
// tensors use them too), from the kernels' own sizes: the forward's tiles, the
// backward keys pass's (also the one-pass kernel's tiles) and its queries
// pass's, and the GPU threads per team (0: Kokkos' AUTO). Throws a ConfigError
// for the cpu tiling in a GPU build.
struct ExactKernelTiles {
  Index queries = 0, keys = 0;
  int block_rows = 0, block_cols = 0;
  size_t scratch_bytes = 0;
};
struct ExactTilingInfo {
  ExactKernelTiles forward, keys, queries;
  int team_size = 0;
};
ExactTilingInfo exact_tiling_info(ExactTiles tiles, Index d_head);

// Where exact attention computes its products (issue 46). `fused`: the tiled
// team kernels above. `batched`: a slice of query rows of one batch row at a
// time, every head at once, S = scale Q K^T, O = P V (and in the backward
// dO V^T, P^T dO, dS K, dS^T Q) as strided-batched products that read and
// write the [batch, length, heads, d_head] tensors in place (the vendor's
// GEMM on a GPU whose vendor BLAS is loaded; a plain portable kernel
// elsewhere, for tests), the masks, softmax, logsumexp and dropout in row
// kernels between them (src/attention/exact_batched.hpp). The slice's scores
// (and their gradients in the backward) stay under chunk_slice_budget()
// (attention/chunked_scratch.hpp), in the batched chunk shape's workspace.
// float and double tensors; bf16 tensors keep the fused kernels. Both shapes
// give the same results up to rounding. REFORMER_EXACT_PRODUCTS=fused|batched
// picks one for a process (default: fused, until the batched shape has been
// timed on a GPU); tests switch with set_exact_products().
enum class ExactProducts { fused, batched };
ExactProducts exact_products();
void set_exact_products(ExactProducts products);
const char* exact_products_name(ExactProducts products);
// The workspace bytes the batched shape takes for one forward and one
// backward call (heads, lengths; compute_bytes per score; under `budget`; the
// forward takes the backward's buffer, so that a first step does not grow
// it), or 0 and 0 where it does not run (the fused shape, or bf16 tensors:
// pass reduced_precision).
struct ExactBatchedBytes {
  std::size_t forward = 0, backward = 0;
};
ExactBatchedBytes exact_batched_bytes(Index heads, Index length_q, Index length_k,
                                      std::size_t compute_bytes, bool reduced_precision,
                                      std::size_t budget);

// Gradients of q, k and v (overwritten) from the forward's out and lse.
template <class T>
void exact_attention_backward(In4<T> q, In4<T> k, In4<T> v, In4<T> out, In3<compute_t<T>> lse,
                              In4<T> dout, const ExactAttentionConfig& config,
                              const AttentionCall& call, View4<T> dq, View4<T> dk, View4<T> dv,
                              Workspace& workspace,
                              ExactBackwardSchedule schedule = ExactBackwardSchedule::Auto);

}  // namespace reformer::attention
