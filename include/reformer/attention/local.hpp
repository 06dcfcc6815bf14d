// Local (chunked) attention: the sequence is cut into chunks of `chunk`
// positions and every query attends to the keys of its own chunk and of the
// `n_before` chunks before it (no wrap-around), with separate q, k, v:
//   score_ij = q_i . k_j / sqrt(d_head),  out_i = sum_j softmax_j(score_ij) v_j.
// Memory is O(L * d_head): only the output and each query's logsumexp are kept.
//
// Tensors are [batch, length, heads, d_head] (the projection output viewed per
// head, no transpose). With bf16 tensors (issue 34) the logsumexps are float32
// and every score, softmax and product is computed in float32
// (chunked_kernels.hpp).
#pragma once

#include "reformer/attention/masks.hpp"
#include "reformer/core/precision.hpp"
#include "reformer/core/workspace.hpp"

namespace reformer::attention {

// Hyper-parameters only (per-call masks and dropout: AttentionCall).
struct LocalAttentionConfig {
  Index chunk = 128;   // positions per chunk; length must be a multiple
  Index n_before = 1;  // previous chunks each chunk attends to

  // ConfigError naming the field and its value.
  void validate() const;
};

// out [batch, length, heads, d_head]; lse [batch, length, heads] is saved for backward.
template <class T>
void local_attention_forward(In4<T> q, In4<T> k, In4<T> v, const LocalAttentionConfig& config,
                             const AttentionCall& call, View4<T> out, View3<compute_t<T>> lse);

// Gradients of q, k, v (overwritten) from dout, recomputing the scores from lse.
template <class T>
void local_attention_backward(In4<T> q, In4<T> k, In4<T> v, In4<T> out, In3<compute_t<T>> lse,
                              In4<T> dout, const LocalAttentionConfig& config,
                              const AttentionCall& call, View4<T> dq, View4<T> dk, View4<T> dv,
                              Workspace& workspace);

}  // namespace reformer::attention
