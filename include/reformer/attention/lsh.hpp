// LSH attention (Reformer, Kitaev et al. 2020, section 3) with shared queries
// and keys, per batch entry and head:
//  1. hash:  h_r(x) = argmax([x R_r ; -x R_r]) for n_hashes rounds of random
//     rotations R (n_buckets even; or two factors b1 * b2, h = h1 + b1 * h2);
//     padding positions go to an extra bucket;
//  2. sort the n_hashes * L items stably by (round, bucket, position);
//  3. cut the sorted items into chunks of `chunk`; each chunk attends to itself
//     and the previous chunk (chunk 0 wraps to the last one), keys being the
//     length-normalised queries k = q * rsqrt(mean(q^2) + 1e-6) / sqrt(d_head);
//     masks act on original positions (causal, padding, and the own position,
//     which gets -1e5 so a token attends to itself only if nothing else is allowed);
//  4. unsort and combine the rounds with their logsumexps:
//     out_i = sum_r exp(lse_i^r - logsumexp_r' lse_i^r') o_i^r.
// Only the per-item outputs and logsumexps are kept for backward, which
// recomputes the scores: memory is O(n_hashes * L * d_head).
//
// Tensors are [batch, length, heads, d_head].
#pragma once

#include "reformer/attention/masks.hpp"

#include <vector>

namespace reformer::attention {

struct LshAttentionConfig {
  Index chunk = 64;    // sorted items per chunk; length must be a multiple
  Index n_hashes = 1;  // hash rounds
  // Buckets per round: {n} with n even, or two even factors {b1, b2}
  // (n = b1 * b2). Empty: 2 * max(1, length / chunk), as in trax.
  std::vector<Index> n_buckets{};
  Index n_before = 1;  // previous chunks each chunk attends to
  MaskOptions masks{};
  AttentionDropout dropout{};
  // Subtract log N_ij from each score, N_ij = how often key j appears in the
  // windows of query i over all rounds (the paper's optional correction for
  // duplicate attention; trax and HF omit it). Costs O(n_hashes^2) per score.
  bool duplicate_correction = false;
};

// Buckets per round for this config and length.
Index lsh_bucket_count(const LshAttentionConfig& config, Index length);
// Width of the rotation matrices: sum over factors of factor / 2.
Index lsh_rotation_width(const LshAttentionConfig& config, Index length);

// Random rotations R ~ N(0, 1), [heads, d_head, n_hashes, rotation_width],
// a pure function of the key (same on every backend, replayable).
template <class T>
void lsh_random_rotations(RandomKey key, View4<T> rotations);

// What backward needs; all O(n_hashes * L).
template <class T>
struct LshSaved {
  Kokkos::View<int**, Layout, MemSpace> buckets;  // [batch*heads, n_hashes*L] by (round, position)
  Kokkos::View<int**, Layout, MemSpace> perm;     // sorted item -> position
  Kokkos::View<int**, Layout, MemSpace> undo;     // (round, position) -> sorted item
  View4<T> out_sorted;                            // [batch, n_hashes*L, heads, d_head]
  View3<T> lse_sorted;                            // [batch, n_hashes*L, heads]
  View3<T> key_scale;                             // [batch, L, heads]
};

// Hashes and sorts only (for inspection and tests): fills buckets, perm, undo.
template <class T>
void lsh_hash_and_sort(In4<T> qk, In4<T> rotations, const LshAttentionConfig& config,
                       LshSaved<T>& saved);

// out [batch, length, heads, d_head]. `saved` is (re)allocated as needed.
template <class T>
void lsh_attention_forward(In4<T> qk, In4<T> v, In4<T> rotations, const LshAttentionConfig& config,
                           View4<T> out, LshSaved<T>& saved);

// Gradients of qk and v (overwritten). Buckets are constants.
template <class T>
void lsh_attention_backward(In4<T> qk, In4<T> v, const LshSaved<T>& saved, In4<T> dout,
                            const LshAttentionConfig& config, View4<T> dqk, View4<T> dv);

}  // namespace reformer::attention
