// Relative positional attention of Transformer-XL (Dai et al. 2019): a
// segment of L queries attends causally over [memory; segment], M + L keys,
// with the positions entering only as the distance between query and key.
//
// Per (batch, head), query i in [0, L) (position M + i) and key j in [0, M + L):
//   d(i, j)  = i + M - j                                   (the distance)
//   S_ij     = scale * ((q_i + u) . k_j + (q_i + v) . r_c(d))
//   c(d)     = min(d, clamp_len) with clamp_len > 0, else d
//   allowed  : 0 <= d, and with same_length also d < mem_len
//   out_i    = sum_j dropout(softmax_j(S_ij)) v_j
// u and v are the paper's learned global biases (content and position), r the
// per-head projection R W_r of the sinusoidal encodings of the distances, one
// row per distance: the caller computes rows 0 .. relative_attention_positions()
// - 1. The terms are the paper's (a) + (c) (content, global content bias) and
// (b) + (d) (content-position, global position bias).
//
// same_length follows the reference (kimiyoung/transformer-xl, and Hugging
// Face's port): with the model's configured memory length mem_len, a query sees
// only the keys at distances 0 .. mem_len - 1, so that every query sees mem_len
// keys once the memory is full (M >= mem_len - 1), instead of the last query
// seeing L - 1 more than the first.
//
// The kernels are fused team kernels in O(L) memory like exact attention
// (exact.hpp): no L x (M + L) matrix exists anywhere. The relative term of a
// tile of queries [i0, i0 + BQ) and keys [j0, j0 + BK) needs only the
// BQ + BK - 1 rows of r at the distances of the tile, whose product with the
// tile's (q + v) is one tile product; each score reads its entry on the
// shifted diagonal (the relative-shift trick, per tile). Forward keeps the
// output and the logsumexp of each query; backward recomputes the
// probabilities tile by tile in three passes without atomics (so the result
// does not depend on the thread count):
//  - keys: one team per (batch * head, key tile) sums dk and dv;
//  - queries: one team per (batch * head, query tile) sums dq, split into its
//    content and position parts whose sums over queries are du and dv_bias;
//  - distances: one team per (batch * head, tile of distances) sums dr over
//    the (query, key) pairs at those distances; the sum over batch entries
//    (and over the distances that clamp_len maps to one row) follows in a
//    fixed order.
//
// Tensors: q [batch, L, heads, d_head]; k, v [batch, M + L, heads, d_head] (the
// memory's keys and values first); r [positions, heads, d_head]; u and v_bias
// [heads, d_head]. The gradients of the memory rows of k and v are returned
// like the others; a model that stops gradients at the memory drops them.
//
// With bf16 tensors (issue 34) q, k, v, r, out and their gradients are bf16;
// u and v_bias (parameters) and their gradients are param_t (float32); tiles,
// scores, softmax statistics, the logsumexps and every partial sum are
// float32, and each output and gradient element is rounded to bf16 once.
#pragma once

#include "reformer/attention/masks.hpp"
#include "reformer/core/precision.hpp"
#include "reformer/core/workspace.hpp"

namespace reformer::attention {

// Hyper-parameters (the memory length M of a call is k's length, or the live
// keys given to the forward, minus q's).
struct RelativeAttentionConfig {
  // Distances above clamp_len use clamp_len's row of r; 0: no clamping.
  Index clamp_len = 0;
  // Every query sees only the keys at distances below mem_len (the model's
  // configured memory length; see the top of the file). mem_len must be
  // positive then; it is not read otherwise.
  bool same_length = false;
  Index mem_len = 0;
  // Score scale; 0 means 1 / sqrt(d_head).
  double scale = 0.0;

  // ConfigError naming the field, its value and the rule.
  void validate() const;
};

// The number of rows of r the kernels read for `memory` memory positions and
// `length` queries: one per distance that some allowed pair has (0 .. M + L - 1,
// fewer with same_length), or clamp_len + 1 when clamping leaves fewer.
Index relative_attention_positions(Index memory, Index length,
                                   const RelativeAttentionConfig& config);

// out [batch, L, heads, d_head]; lse [batch, L, heads] is saved for backward.
// r may have more rows than relative_attention_positions(); the others are
// not read. Dropout on the probabilities: pair (b * heads + h, i, j) has
// index ((b * heads + h) * L + i) * (M + L) + j in the stream (the numbering of
// exact attention's mask with Lk = M + L).
//
// keys >= 0 (decoding over a cache): only k and v's first `keys` positions are
// the call's M + L keys, the rest of each batch row's capacity is not read, so
// a cache [batch, capacity, heads, d_head] is attended in place for any batch.
// keys < 0 (the default): all of k's positions.
template <class T>
void relative_attention_forward(In4<T> q, In4<T> k, In4<T> v, In3<T> r, In2<param_t<T>> bias_u,
                                In2<param_t<T>> bias_v, const RelativeAttentionConfig& config,
                                const AttentionDropout& dropout, View4<T> out,
                                View3<compute_t<T>> lse, Workspace& workspace, Index keys = -1);

// Gradients (overwritten) of q, k, v (all M + L rows), r (rows the kernel does
// not read get zero), bias_u and bias_v, from the forward's out and lse.
template <class T>
void relative_attention_backward(In4<T> q, In4<T> k, In4<T> v, In3<T> r, In2<param_t<T>> bias_u,
                                 In2<param_t<T>> bias_v, In4<T> out, In3<compute_t<T>> lse,
                                 In4<T> dout, const RelativeAttentionConfig& config,
                                 const AttentionDropout& dropout, View4<T> dq, View4<T> dk,
                                 View4<T> dv, View3<T> dr, View2<param_t<T>> dbias_u,
                                 View2<param_t<T>> dbias_v, Workspace& workspace);

}  // namespace reformer::attention
