// LSH attention (Reformer, Kitaev et al. 2020, section 3) with shared queries
// and keys, per batch entry and head:
//  1. hash:  h_r(x) = argmax([x R_r ; -x R_r]) for n_hashes rounds of random
//     rotations R (n_buckets even; or two factors b1 * b2, h = h1 + b1 * h2);
//     padding positions go to an extra bucket;
//  2. sort the n_hashes * L items stably by (round, bucket, position);
//  3. cut the sorted items into chunks of `chunk`; each chunk attends to itself
//     and the previous chunk (chunk 0 wraps to the last one; with padding, the
//     last one that holds real items, of the previous round), keys being the
//     length-normalised queries k = q * rsqrt(mean(q^2) + 1e-6) / sqrt(d_head);
//     masks act on original positions (causal, padding, and the own position,
//     which gets -1e5 so a token attends to itself only if nothing else is allowed);
//  4. unsort and combine the rounds with their logsumexps:
//     out_i = sum_r exp(lse_i^r - logsumexp_r' lse_i^r') o_i^r.
// Steps 1-2 build an LshPlan, which the forward pass, a later recompute (the
// reversible backward) and the backward pass all take: a recompute on an input
// that differs in its last bits uses exactly the forward's buckets.
// The backward pass recomputes the scores from the saved logsumexp: beyond the
// plan (O(n_hashes * L) integers) only the output and one logsumexp per
// position are kept.
//
// Tensors are [batch, length, heads, d_head]. With bf16 tensors (issue 34) the
// rotations, logsumexps and key scales are float32 and every score, softmax
// and product is computed in float32 (chunked_kernels.hpp); cached decoding
// (lsh_attention_step) runs in float or double only.
#pragma once

#include "reformer/attention/masks.hpp"
#include "reformer/core/precision.hpp"
#include "reformer/core/workspace.hpp"

#include <vector>

namespace reformer::attention {

// Hyper-parameters only (per-call masks and dropout: AttentionCall).
struct LshAttentionConfig {
  // Sorted items per chunk; the length must be a multiple, or at most one
  // chunk long (then it is plain shared-QK attention with the self-mask).
  Index chunk = 64;
  Index n_hashes = 1;  // hash rounds
  // Buckets per round: {n} with n even, or two even factors {b1, b2}
  // (n = b1 * b2). Empty: n = 2 * max(1, length / chunk) as in trax, split
  // into two factors above 128 buckets so that the rotations stay small.
  std::vector<Index> n_buckets{};
  Index n_before = 1;  // previous chunks each chunk attends to
  // Subtract log N_ij from each score, N_ij = how often key j appears in the
  // windows of query i over all rounds (the paper's optional correction for
  // duplicate attention; trax and HF omit it). Costs O(n_hashes^2) per score.
  bool duplicate_correction = false;

  // ConfigError naming the field and its value.
  void validate() const;
};

// Bucket factors, buckets per round and rotation width for a length.
std::vector<Index> lsh_bucket_factors(const LshAttentionConfig& config, Index length);
Index lsh_bucket_count(const LshAttentionConfig& config, Index length);
Index lsh_rotation_width(const LshAttentionConfig& config, Index length);

// Random rotations R ~ N(0, 1), [heads, d_head, n_hashes, rotation_width],
// a pure function of the key (same on every backend, replayable).
template <class T>
void lsh_random_rotations(RandomKey key, View4<T> rotations);

// The buckets and the sort of one call: O(n_hashes * L) integers per (batch, head).
struct LshPlan {
  using Ints = Kokkos::View<int**, Layout, MemSpace>;
  Ints buckets;  // [batch*heads, n_hashes*L] by (round, position)
  Ints perm;     // sorted item -> position
  Ints undo;     // (round, position) -> sorted item
  // Real (not padding) positions of each batch row [batch]; empty without a
  // padding mask. Padding is sorted behind the real items of every round, and
  // the windows of real chunks skip the chunks of padding only (step 3), so
  // that appending padding to a sequence changes none of its outputs.
  Kokkos::View<int*, Layout, MemSpace> real;
  Index batch = 0, length = 0, heads = 0, n_hashes = 0, n_buckets = 0;

  bool empty() const { return perm.extent(0) == 0; }
  // Frees the integers.
  void release() { *this = LshPlan(); }
};

// Hashes qk with the rotations (step 1) into buckets [batch * heads,
// n_hashes * L] by (round, position); key_valid in `masks` sends padding to the
// extra bucket. Cached decoding needs only this; lsh_build_plan sorts after it.
template <class T>
void lsh_hash(In4<T> qk, In4<compute_t<T>> rotations, const LshAttentionConfig& config,
              const MaskOptions& masks, Kokkos::View<int**, Layout, MemSpace> buckets);

// Hashes qk with the rotations and sorts: fills `plan` (reallocated only when
// the shape changes). key_valid in `masks` sends padding to the extra bucket.
template <class T>
void lsh_build_plan(In4<T> qk, In4<compute_t<T>> rotations, const LshAttentionConfig& config,
                    const MaskOptions& masks, LshPlan& plan, Workspace& workspace);

// Sorts the plan's buckets (filled, with its shape fields and n_buckets set)
// into perm and undo: a stable counting sort, parallel within each (batch,
// head, round), whose result does not depend on the thread count.
void lsh_sort_buckets(LshPlan& plan, Workspace& workspace);

// out [batch, length, heads, d_head]; lse [batch, length, heads] gets the
// logsumexp of all of a position's scores (every round), which backward needs.
template <class T>
void lsh_attention_forward(In4<T> qk, In4<T> v, const LshPlan& plan,
                           const LshAttentionConfig& config, const AttentionCall& call,
                           View4<T> out, View3<compute_t<T>> lse, Workspace& workspace);

// Gradients of qk and v (overwritten) from the forward's plan, out and lse.
// Buckets are constants.
template <class T>
void lsh_attention_backward(In4<T> qk, In4<T> v, const LshPlan& plan, In4<T> out,
                            In3<compute_t<T>> lse, In4<T> dout, const LshAttentionConfig& config,
                            const AttentionCall& call, View4<T> dqk, View4<T> dv,
                            Workspace& workspace);

// Decoding with a cache, one new position per batch row: the query qk of
// position t = positions(b) [batch, heads, d_head] attends as it does in
// lsh_attention_forward on the sequence 0..t (with padding behind, if any),
// over the cache: keys [batch, capacity, heads * d_head] (already normalised,
// shared_qk.hpp), values, and the buckets [batch * heads, n_hashes, capacity]
// of positions 0..t (t's own included). Per round the t + 1 cached buckets are
// counting-sorted again (O(t + n_buckets)), the query's chunk found and its
// window gathered: a step costs O(t) per head, never a forward. Needs
// n_buckets fixed (config.n_buckets) and no duplicate_correction.
// out [batch, heads, d_head]. The sort runs over every (batch, head, round)
// at once, each cutting its positions into sort_slices contiguous blocks (0:
// the backend's choice, as lsh_sort_buckets makes it), with the same result
// for any number; then a team per (batch, head) takes the windows.
template <class T>
void lsh_attention_step(In3<T> q, In3<T> keys, In3<T> values,
                        Kokkos::View<const int***, Layout, MemSpace> buckets,
                        Kokkos::View<const Index*, Layout, MemSpace> positions, Index max_position,
                        const LshAttentionConfig& config, View3<T> out, Workspace& workspace,
                        Index sort_slices = 0);

// The same, hashing the query first: its bucket in every round (the
// rotations [heads, d_head, n_hashes, sum of n_buckets / 2] as lsh_hash
// applies them, the same bits) is written into buckets at position t by one
// small launch, so that a decoding step needs no lsh_hash call and no launch
// to store its buckets (AttentionLayer::step uses this form).
template <class T>
void lsh_attention_step(In3<T> q, In4<T> rotations, In3<T> keys, In3<T> values,
                        Kokkos::View<int***, Layout, MemSpace> buckets,
                        Kokkos::View<const Index*, Layout, MemSpace> positions, Index max_position,
                        const LshAttentionConfig& config, View3<T> out, Workspace& workspace,
                        Index sort_slices = 0);

// The same, writing position t's key (q normalised, shared_qk.hpp: the same
// bits as the layer's cache write) and value new_values [batch, heads *
// d_head] into the caches keys and values in the hashing launch: a decoding
// step's cache write needs no launch of its own.
template <class T>
void lsh_attention_step(In3<T> q, In2<T> new_values, In4<T> rotations, View3<T> keys,
                        View3<T> values, Kokkos::View<int***, Layout, MemSpace> buckets,
                        Kokkos::View<const Index*, Layout, MemSpace> positions, Index max_position,
                        const LshAttentionConfig& config, View3<T> out, Workspace& workspace,
                        Index sort_slices = 0);

}  // namespace reformer::attention
