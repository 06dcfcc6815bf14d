// Input validation shared by the attention variants (internal header).
#pragma once

#include "reformer/attention/full.hpp"
#include "reformer/attention/masks.hpp"

#include <cmath>
#include "reformer/core/shape.hpp"

namespace reformer::attention::detail {

// q, k, v must all be [batch, length, heads, d_head] with d_head <= kMaxHeadDim
// (k and v may have another length for cross-attention when allowed).
template <class A, class B>
void check_qkv(const char* op, const A& q, const B& k, const B& v, bool same_length = true) {
  require_nonempty(op, "q", q);
  require_nonempty(op, "k", k);
  require_same_shape(op, "k", k, "v", v);
  require<ShapeError>(q.extent(0) == k.extent(0), op, ": batch of q is ", q.extent(0),
                      " but batch of k is ", k.extent(0));
  require<ShapeError>(q.extent(2) == k.extent(2), op, ": q has ", q.extent(2), " heads but k has ",
                      k.extent(2));
  require<ShapeError>(q.extent(3) == k.extent(3), op, ": head size mismatch: q has d_head ",
                      q.extent(3), " but k has d_head ", k.extent(3));
  require<ShapeError>(Index(q.extent(3)) <= kMaxHeadDim, op, ": d_head is ", q.extent(3),
                      " but the fused kernels support at most ", kMaxHeadDim);
  if (same_length)
    require<ShapeError>(q.extent(1) == k.extent(1), op, ": q has length ", q.extent(1),
                        " but k has length ", k.extent(1));
}

// The sequence length must be a multiple of the chunk length.
inline void check_chunking(const char* op, Index length, Index chunk) {
  require<ConfigError>(chunk > 0, op, ": chunk length is ", chunk, " but must be positive");
  require<ShapeError>(length % chunk == 0, op, ": sequence length ", length,
                      " is not a multiple of the chunk length ", chunk,
                      "; pad the sequence to a multiple of ", chunk,
                      " (next: ", (length / chunk + 1) * chunk, ")");
}

inline void check_masks(const char* op, const MaskOptions& masks, Index batch, Index length) {
  if (masks.key_valid.extent(0) == 0) return;
  require_extent(op, "key_valid", masks.key_valid, 0, batch);
  require_extent(op, "key_valid", masks.key_valid, 1, length);
}

// lse must be [batch, length, heads] of q (one logsumexp per query position).
template <class L, class Q>
void check_lse(const char* op, const L& lse, const Q& q) {
  require<ShapeError>(
      lse.extent(0) == q.extent(0) && lse.extent(1) == q.extent(1) && lse.extent(2) == q.extent(2),
      op, ": lse has shape ", shape_string(lse), " but must be [", q.extent(0), ", ", q.extent(1),
      ", ", q.extent(2), "] (batch, length, heads of q)");
}

inline void check_dropout(const char* op, const AttentionDropout& dropout) {
  require<ConfigError>(dropout.rate >= 0.0 && dropout.rate < 1.0, op, ": dropout rate is ",
                       dropout.rate, " but must be in [0, 1)");
}

// Inputs of full and exact attention (the dense variants): q [B, Lq, H, d], k
// and v [B, Lk, H, d]; causal and self masks need Lq == Lk.
template <class A, class B>
void check_dense_inputs(const char* op, const A& q, const B& k, const B& v,
                        const FullAttentionConfig& config, const AttentionCall& call) {
  config.validate();
  check_qkv(op, q, k, v, /*same_length=*/false);
  if (call.masks.causal || config.self_mask)
    require<ShapeError>(q.extent(1) == k.extent(1), op, ": causal or self masks need equal query ",
                        "and key lengths, got Lq = ", q.extent(1), " and Lk = ", k.extent(1));
  check_masks(op, call.masks, k.extent(0), k.extent(1));
  check_dropout(op, call.dropout);
}

// The dense variants' score scale: config.scale, or 1 / sqrt(d_head) when it is 0.
template <class T>
T dense_score_scale(const FullAttentionConfig& config, Index d_head) {
  return T(config.scale != 0.0 ? config.scale : 1.0 / std::sqrt(double(d_head)));
}

}  // namespace reformer::attention::detail
