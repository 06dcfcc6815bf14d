// Full (dense) multi-head attention, the O(L^2)-memory baseline:
//   S = scale * Q K^T (masked),  P = softmax(S),  out = dropout(P) V
// It materialises P [batch * heads, Lq, Lk] and keeps it for backward. Keys and
// values may come from another sequence (cross-attention: Lk != Lq).
// Tensors are [batch, length, heads, d_head]. With bf16 tensors (issue 34) the
// scores, softmax and products are float32 (head-major float32 copies in the
// workspace) and the saved probabilities are bf16.
#pragma once

#include "reformer/attention/masks.hpp"
#include "reformer/core/precision.hpp"
#include "reformer/core/workspace.hpp"

namespace reformer::attention {

// Hyper-parameters only (per-call masks and dropout: AttentionCall; a causal
// mask needs Lq == Lk).
struct FullAttentionConfig {
  // Shared-QK attention: the own position gets MaskValues::self (Lq == Lk).
  bool self_mask = false;
  // Score scale; 0 means 1 / sqrt(d_head).
  double scale = 0.0;

  // ConfigError naming the field and its value.
  void validate() const;
};

// What backward needs: the probabilities (the caller owns them; reallocated
// only when the shape changes).
template <class T>
struct FullAttentionSaved {
  View3<T> probs;  // softmax(S), [batch * heads, Lq, Lk], rounded once for bf16
};

// Bytes the L x L buffers of one forward + backward need: float and double
// (scalar_bytes 4, 8): the probabilities and one gradient-sized buffer, plus
// one more with dropout; bf16 (scalar_bytes 2): the bf16 probabilities and one
// float32 buffer (the scores, then their gradient), with or without dropout.
std::int64_t full_attention_score_bytes(Index batch, Index heads, Index length_q, Index length_k,
                                        std::int64_t scalar_bytes, bool dropout);

// Throws MemoryError naming the bytes needed when the score buffers would not
// fit into the memory that is free now.
void check_full_attention_fits(Index batch, Index heads, Index length_q, Index length_k,
                               std::int64_t scalar_bytes, bool dropout);

// Head-major copies and the other temporaries come from `workspace`.
template <class T>
void full_attention_forward(In4<T> q, In4<T> k, In4<T> v, const FullAttentionConfig& config,
                            const AttentionCall& call, View4<T> out, FullAttentionSaved<T>& saved,
                            Workspace& workspace);

// Gradients of q, k and v (overwritten).
template <class T>
void full_attention_backward(In4<T> q, In4<T> k, In4<T> v, const FullAttentionSaved<T>& saved,
                             In4<T> dout, const FullAttentionConfig& config,
                             const AttentionCall& call, View4<T> dq, View4<T> dk, View4<T> dv,
                             Workspace& workspace);

}  // namespace reformer::attention
