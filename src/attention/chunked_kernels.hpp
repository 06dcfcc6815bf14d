// Fused kernels shared by LSH and local attention (internal header).
//
// Both variants are "chunked attention over a permuted sequence": the items of
// one (batch, head) are put in an order (LSH: sorted by round, bucket and
// position; local: the identity), cut into chunks of `chunk` items, and each
// query item attends to the key items of its own chunk and of the `n_before`
// chunks before it (LSH wraps around, so chunk 0 looks at the last chunk).
//
// Forward keeps, per query item s, only its output o_s and its logsumexp
//   lse_s = log sum_t exp(score_st),  o_s = sum_t exp(score_st - lse_s) drop_st v_t,
// computed with an online softmax: memory is O(items * d_head), never O(L^2).
//
// Backward (as in FlashAttention) needs, per query POSITION i, only the final
// output out_i, the logsumexp LSE_i of all its scores (over every round for
// LSH: the rounds combined with logsumexp weights are one softmax over the
// union of the rounds' windows) and D_i = dout_i . out_i. It recomputes
//   P_st = exp(score_st - LSE_i),  dscore_st = P_st (drop_st (dout_i . v_t) - D_i),
//   dq_i += sum_t dscore_st k_t,  dk_t += sum_s dscore_st q_s,  dv_t += sum_s P_st drop_st dout_i
// and adds straight into position-indexed gradients: no per-item buffers.
// Chunks are launched round by round and in colours whose windows do not
// overlap, so no two threads ever add into the same row: no atomics, and the
// same sums in the same order for every backend and thread count.
//
// Two shapes (core/team_scratch.hpp's ChunkedKernelShape): the whole window of
// a chunk in one set of tiles (ChunkedForward, ChunkedBackward: the host's
// default), or its keys streamed in small tiles through level-0 scratch with
// the online softmax of exact attention (StreamedForward, StreamedBackward: the
// default on GPUs). Both compute the sums above; only the order of the
// additions differs.
//
// Mixed precision (core/precision.hpp): q, k, v, the outputs and the gradients
// are T (bf16 or float) in memory; the scratch tiles, every score, softmax and
// product, the logsumexps and D are compute_t<T> (float32). A bf16 gradient
// row gets one rounding per launch that adds into it (a key is in at most
// (n_before + 1) * rounds windows).
#pragma once

#include "attention/item_rows.hpp"
#include "attention/tiled/backward.hpp"
#include "attention/tiled/online_softmax.hpp"
#include "attention/tiled/tile_loads.hpp"
#include "reformer/attention/chunked_scratch.hpp"
#include "reformer/attention/masks.hpp"
#include "reformer/core/cpu_target.hpp"
#include "reformer/core/element_map.hpp"
#include "reformer/core/team_scratch.hpp"
#include "reformer/core/tile_multiply.hpp"
#include "reformer/core/vector_loops.hpp"
#include "reformer/ops/dropout.hpp"

namespace reformer::attention::detail {

// Where the keys of a query chunk come from.
struct ChunkWindow {
  Index items = 0;     // items per (batch, head)
  Index chunk = 0;     // items per chunk
  Index n_chunks = 0;  // items / chunk
  Index n_before = 0;  // chunks looked back (already clipped to n_chunks - 1 when wrapping)
  bool wrap = false;

  KOKKOS_INLINE_FUNCTION Index slots() const { return (n_before + 1) * chunk; }
  // Sorted index of key slot `slot` of a query in chunk `qc`, or -1 if absent.
  KOKKOS_INLINE_FUNCTION Index key_item(Index qc, Index slot) const {
    Index kc = qc - slot / chunk;
    if (kc < 0) {
      if (!wrap) return -1;
      kc += n_chunks;
    }
    return kc * chunk + slot % chunk;
  }
};

// Inputs of the chunked kernels. Q, K, V are [batch, length, heads, d_head].
template <class T>
struct ChunkedInputs {
  using C = compute_t<T>;
  Kokkos::View<const T****, Layout, MemSpace> q, k, v;
  // perm(bh, s): original position of sorted item s. Empty: identity.
  Kokkos::View<const int**, Layout, MemSpace> perm;
  // undo(bh, r * length + i): sorted index of position i in round r. Only for
  // the duplicate-attention correction; empty otherwise.
  Kokkos::View<const int**, Layout, MemSpace> undo;
  // Per-key scale [batch, length, heads] (LSH key normalisation). Empty: key_scale_constant.
  Kokkos::View<const C***, Layout, MemSpace> key_scale;
  C key_scale_constant = C(1);
  Kokkos::View<const int**, Layout, MemSpace> key_valid;  // [batch, length] or empty
  bool causal = false;
  bool self_mask = false;             // LSH: own position gets MaskValues::self
  bool duplicate_correction = false;  // LSH: subtract log(#windows sharing the pair)
  Index rounds = 1;
  Index length = 0;
  Index heads = 0;
  Index d_head = 0;
  AttentionDropout dropout;
  ChunkWindow window;

  KOKKOS_INLINE_FUNCTION Index position(Index bh, Index s) const {
    return perm.extent(0) ? Index(perm(bh, s)) : s;
  }
  KOKKOS_INLINE_FUNCTION C scale_of(Index b, Index pos, Index h) const {
    return key_scale.extent(0) ? key_scale(b, pos, h) : key_scale_constant;
  }
  // Position of query i of chunk qc, or -1 past the chunk (a tile's padded rows).
  KOKKOS_INLINE_FUNCTION int query_position(Index bh, Index qc, Index i) const {
    return i < window.chunk ? int(position(bh, qc * window.chunk + i)) : -1;
  }
  // Position of key slot `slot` of query chunk qc (batch row b), or -1 when
  // the slot is absent or past the window (a tile's padded slots).
  KOKKOS_INLINE_FUNCTION int key_position(Index b, Index bh, Index qc, Index slot) const {
    const Index item = slot < window.slots() ? key_item(b, qc, slot) : Index(-1);
    return item < 0 ? -1 : int(position(bh, item));
  }
  // Row sources for the gathers: the key at position pk with its scale in
  // `factor`, and the value; nullptr (a zero row) for pk = -1.
  KOKKOS_INLINE_FUNCTION const T* key_row(Index b, Index h, int pk, C& factor) const {
    if (pk < 0) return nullptr;
    factor = scale_of(b, pk, h);
    return &k(b, pk, h, 0);
  }
  KOKKOS_INLINE_FUNCTION const T* value_row(Index b, Index h, int pk) const {
    return pk < 0 ? nullptr : &v(b, pk, h, 0);
  }
  // LSH with padding: the number of real (unpadded) items of each batch row in
  // every round [batch], or empty. Padding is sorted behind the real items of
  // its round, and a real chunk's window skips the chunks that hold only
  // padding, so that the real items see the windows they would see without the
  // padding (appending padding changes no real position's output):
  // the chunks of real items form one cyclic sequence of rounds * R chunks
  // (R = ceil(real / chunk) per round) that the look-back walks, with
  // n_before clipped to rounds * R - 1, and to 0 when R = 1 (a sequence no
  // longer than one chunk has no look-back). Chunks of padding only keep the
  // plain window (their queries are padding).
  Kokkos::View<const int*, Layout, MemSpace> real;

  // Sorted index of key slot `slot` of query chunk qc in batch row b, or -1
  // when the slot is absent.
  KOKKOS_INLINE_FUNCTION Index key_item(Index b, Index qc, Index slot) const {
    if (real.extent(0) == 0) return window.key_item(qc, slot);
    const Index c = window.chunk, per_round = length / c, n = real(b);
    const Index rc = (n + c - 1) / c, r = qc / per_round, j = qc % per_round;
    if (n == 0 || j >= rc) return window.key_item(qc, slot);
    const Index back = slot / c, cycle = rounds * rc;
    const Index reach = rc == 1 ? 0 : (window.n_before < cycle - 1 ? window.n_before : cycle - 1);
    if (back > reach) return -1;
    Index v = r * rc + j - back;
    if (v < 0) v += cycle;
    return (v / rc * per_round + v % rc) * c + slot % c;
  }
  // Whether key chunk kc is in the window of query chunk qc (batch row b).
  KOKKOS_INLINE_FUNCTION bool in_window(Index b, Index qc, Index kc) const {
    const Index c = window.chunk, per_round = length / c;
    const Index n = real.extent(0) ? Index(real(b)) : length, rc = (n + c - 1) / c;
    if (real.extent(0) == 0 || n == 0 || qc % per_round >= rc) {
      Index back = qc - kc;
      if (back < 0 && window.wrap) back += window.n_chunks;
      return back >= 0 && back <= window.n_before;
    }
    if (kc % per_round >= rc) return false;
    const Index cycle = rounds * rc;
    const Index reach = rc == 1 ? 0 : (window.n_before < cycle - 1 ? window.n_before : cycle - 1);
    Index back = (qc / per_round * rc + qc % per_round) - (kc / per_round * rc + kc % per_round);
    if (back < 0) back += cycle;
    return back <= reach;
  }
  // How often key position pk appears in the windows of query position pq over
  // all rounds (windows can reach into the previous round's items, so every
  // item of pk is checked against every item of pq): O(rounds^2).
  KOKKOS_INLINE_FUNCTION int shared_windows(Index bh, Index pq, Index pk) const {
    const Index b = bh / heads;
    int count = 0;
    for (Index rq = 0; rq < rounds; ++rq) {
      const Index qc = undo(bh, rq * length + pq) / window.chunk;
      for (Index rk = 0; rk < rounds; ++rk)
        count += in_window(b, qc, undo(bh, rk * length + pk) / window.chunk);
    }
    return count;
  }
  // Applies the masks to the scaled dot product of query position pq and key
  // position pk. `constant` is set when the score was replaced by a mask
  // value, through which no gradient flows.
  KOKKOS_INLINE_FUNCTION C mask_score(Index b, Index bh, Index pq, Index pk, C dot,
                                      bool& constant) const {
    constant = true;
    if (self_mask && pq == pk) return C(MaskValues<C>::self);
    if ((causal && pk > pq) || (key_valid.extent(0) && key_valid(b, pk) == 0))
      return C(MaskValues<C>::masked);
    constant = false;
    if (duplicate_correction) dot -= compat::log(C(shared_windows(bh, pq, pk)));
    return dot;
  }
  // Masks a row of dot products with the window's keys (posk[t] < 0: absent
  // slot). With kGradMask, grad_mask[t] is set to 1 where the score depends on
  // q and k and to 0 where a mask constant replaced it. Without padding or the
  // duplicate correction the loop has no branches and vectorises.
  template <bool kGradMask>
  KOKKOS_INLINE_FUNCTION void mask_row(Index b, Index bh, Index pq, const int* posk, Index w,
                                       C* row, C* grad_mask) const {
    if (!duplicate_correction && key_valid.extent(0) == 0) {
      const C self_value = C(MaskValues<C>::self), masked_value = C(MaskValues<C>::masked);
      for (Index t = 0; t < w; ++t) {
        const Index pk = posk[t];
        const bool absent = pk < 0, self = self_mask && pk == pq, future = causal && pk > pq;
        row[t] = absent ? C(-1e30) : self ? self_value : future ? masked_value : row[t];
        if (kGradMask) grad_mask[t] = absent || self || future ? C(0) : C(1);
      }
      return;
    }
    for (Index t = 0; t < w; ++t) {
      bool constant = true;
      row[t] = posk[t] < 0 ? C(-1e30) : mask_score(b, bh, pq, posk[t], row[t], constant);
      if (kGradMask) grad_mask[t] = constant ? C(0) : C(1);
    }
  }
  KOKKOS_INLINE_FUNCTION C drop_factor(Index bh, Index s, Index slot) const {
    return dropout.template factor<C>(bh, heads, s, slot, window.items, window.slots());
  }
};

// Per-item tensors are laid out [batch, items, heads, d_head] (and [batch, items,
// heads] for scalars), so that local attention, whose items are the positions,
// reads and writes the model's [batch, length, heads, d_head] tensors directly.
template <class T>
using ItemView = Kokkos::View<T****, Layout, MemSpace>;
template <class T>
using ItemScalars = Kokkos::View<T***, Layout, MemSpace>;

// The fused kernels work on one chunk per team. The chunk's queries and the
// keys and values of its window are gathered into scratch (keys already scaled,
// and also transposed), and every product is a register-blocked team_multiply:
//   S = Q K^T (window), P = softmax(masked S), out = dropout(P) V.
// Absent window slots (before the first chunk, without wrap-around) have
// position -1 and take no part in the softmax.

// Scratch tile shapes of a chunk, padded to whole register blocks of
// team_multiply where a product needs it: window slots, which are the columns
// of S, and head columns to block_cols (query rows and the rows of dK and dV
// may end in a smaller block). Padded slots are absent keys; padded head
// columns are zero, so they add nothing to any product.
template <class T>
struct ChunkTiles {
  Index c = 0, w = 0, d = 0;
  KOKKOS_INLINE_FUNCTION ChunkTiles(const ChunkWindow& window, Index d_head) {
    constexpr Index cols = TileTraits<compute_t<T>>::block_cols;
    c = window.chunk;
    w = (window.slots() + cols - 1) / cols * cols;
    d = TileTraits<compute_t<T>>::pad_columns(d_head);
  }
};

// One team's scratch, in bytes, of each kernel: chunks of c items, windows of
// `slots` key slots, heads of d_head, tiles padded to register blocks of `cols`
// columns, and (streamed) tiles of bq queries and bk keys. One formula for
// every backend, so that a host build can account for a GPU's tiles
// (chunked_scratch_bytes, reformer/attention/chunked_scratch.hpp).
template <class C>
struct ChunkedScratchBytes {
  using M = Scratch2<C>;
  static Index up(Index n, Index cols) { return (n + cols - 1) / cols * cols; }
  // Q, K^T, V, S, 1 / sum, positions.
  static size_t whole_forward(Index c, Index slots, Index d_head, Index cols) {
    const Index w = up(slots, cols), d = up(d_head, cols);
    return M::shmem_size(c, d) + M::shmem_size(d, w) + M::shmem_size(w, d) + M::shmem_size(c, w) +
           ScratchVector<C>::shmem_size(c) + ScratchInts::shmem_size(c) +
           ScratchInts::shmem_size(w);
  }
  // Q, dout, K^T, V^T, K, S, dP, the gradient masks, positions.
  static size_t whole_backward(Index c, Index slots, Index d_head, Index cols) {
    const Index w = up(slots, cols), d = up(d_head, cols);
    return 2 * M::shmem_size(c, d) + 2 * M::shmem_size(d, w) + M::shmem_size(w, d) +
           3 * M::shmem_size(c, w) + ScratchInts::shmem_size(c) + ScratchInts::shmem_size(w);
  }
  // Q^T, K and V rows, positions, and the online softmax's tiles.
  static size_t streamed_forward(Index bq, Index bk, Index d_head, Index cols) {
    const Index d = up(d_head, cols);
    return M::shmem_size(d, bq) + 2 * M::shmem_size(bk, d) + ScratchInts::shmem_size(bq) +
           ScratchInts::shmem_size(bk) + OnlineSoftmax<C>::tile_bytes(bq, bk, d);
  }
  // The dq sums of a group of `rows` queries (or the chunk's, if smaller), Q
  // and dout rows, K rows, the dk and dv sums, K^T and V^T, P and dS, positions.
  static size_t streamed_backward(Index c, Index bq, Index bk, Index rows, Index d_head,
                                  Index cols) {
    const Index d = up(d_head, cols), cq = up(c, bq);
    return M::shmem_size(cq < rows ? cq : rows, d) + 2 * M::shmem_size(bq, d) +
           3 * M::shmem_size(bk, d) + 2 * M::shmem_size(d, bk) + 2 * M::shmem_size(bq, bk) +
           ScratchInts::shmem_size(cq) + ScratchInts::shmem_size(bk);
  }
};

// Asks the cache for the team's rows of three [batch, length, heads, d] views
// (`by_query` at the chunk's query positions, `key_a` and `key_b` at its
// window's key positions; -1 skipped) before the team touches them: they lie
// at scattered positions. `write`: the rows are about to be added into.
template <class Ints, class Q, class K1, class K2>
KOKKOS_INLINE_FUNCTION void prefetch_window_rows(const TeamMember& team, Index c, Index w, Index b,
                                                 Index h, Index dh, Ints posq, Ints posk,
                                                 const Q& by_query, const K1& key_a,
                                                 const K2& key_b, bool write) {
  Kokkos::parallel_for(Kokkos::TeamThreadRange(team, w), [&](Index t) {
    if (t < c && posq(t) >= 0)
      prefetch_bytes(&by_query(b, posq(t), h, 0), dh * Index(sizeof(typename Q::value_type)),
                     write);
    if (posk(t) >= 0) {
      prefetch_bytes(&key_a(b, posk(t), h, 0), dh * Index(sizeof(typename K1::value_type)), write);
      prefetch_bytes(&key_b(b, posk(t), h, 0), dh * Index(sizeof(typename K2::value_type)), write);
    }
  });
}

// Loads chunk qc of (batch, head) bh into scratch (shapes `tile`): the
// positions of its queries and of its window's keys (-1 for absent and padded
// slots), the queries as rows, and the scaled keys and the values as rows
// and/or transposed (empty views are skipped).
template <class T, class Ints, class Rows>
KOKKOS_INLINE_FUNCTION void load_window(const TeamMember& team, const ChunkedInputs<T>& in,
                                        const ChunkTiles<T>& tile, Index bh, Index qc, Ints posq,
                                        Ints posk, Rows q_rows, Rows k_rows, Rows k_cols,
                                        Rows v_rows, Rows v_cols) {
  const Index dh = in.d_head, b = bh / in.heads, h = bh % in.heads;
  Kokkos::parallel_for(Kokkos::TeamThreadRange(team, tile.c),
                       [&](Index i) { posq(i) = in.query_position(bh, qc, i); });
  Kokkos::parallel_for(Kokkos::TeamThreadRange(team, tile.w),
                       [&](Index t) { posk(t) = in.key_position(b, bh, qc, t); });
  team.team_barrier();
  prefetch_window_rows(team, tile.c, tile.w, b, h, dh, posq, posk, in.q, in.k, in.v, false);
  gather_rows<compute_t<T>>(
      team, tile.c, dh, tile.d,
      [&](Index i, compute_t<T>&) { return posq(i) < 0 ? nullptr : &in.q(b, posq(i), h, 0); },
      q_rows, Rows());
  gather_rows<compute_t<T>>(
      team, tile.w, dh, tile.d,
      [&](Index t, compute_t<T>& factor) { return in.key_row(b, h, posk(t), factor); }, k_rows,
      k_cols);
  gather_rows<compute_t<T>>(
      team, tile.w, dh, tile.d, [&](Index t, compute_t<T>&) { return in.value_row(b, h, posk(t)); },
      v_rows, v_cols);
  team.team_barrier();
}

// Forward (one team per query chunk): out and lse of every query item.
template <class T>
struct ChunkedForward {
  using C = compute_t<T>;
  ChunkedInputs<T> in;
  ItemView<T> out;
  ItemScalars<C> lse;  // compute precision
  int level = 0;       // scratch level, from scratch_bytes()

  size_t scratch_bytes() const {
    return ChunkedScratchBytes<C>::whole_forward(in.window.chunk, in.window.slots(), in.d_head,
                                                 TileTraits<C>::block_cols);
  }

  KOKKOS_INLINE_FUNCTION void operator()(const TeamMember& team) const {
    const ChunkTiles<T> tile(in.window, in.d_head);
    const Index c = in.window.chunk, w = in.window.slots(), dh = in.d_head;
    const Index n_chunks = in.window.n_chunks, heads = in.heads;
    const Index qc = team.league_rank() % n_chunks, bh = team.league_rank() / n_chunks;
    const Index b = bh / heads, h = bh % heads;
    const auto scratch = team.team_scratch(level);
    Scratch2<C> qs(scratch, tile.c, tile.d), kt(scratch, tile.d, tile.w),
        vs(scratch, tile.w, tile.d), s(scratch, tile.c, tile.w);
    ScratchVector<C> inverse_sum(scratch, tile.c);
    ScratchInts posq(scratch, tile.c), posk(scratch, tile.w);
    Scratch2<C> none;
    load_window<T>(team, in, tile, bh, qc, posq, posk, qs, none, kt, vs, none);
    // S = Q K^T
    team_multiply<false>(team, tile.c, tile.w, tile.d, &s(0, 0), tile.w, &qs(0, 0), tile.d, 1,
                         &kt(0, 0), tile.w);
    team.team_barrier();
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, c), [&](Index i) {
      C* row = &s(i, 0);
      const Index pq = posq(i), item = qc * c + i;
      in.template mask_row<false>(b, bh, pq, &posk(0), tile.w, row, nullptr);
      // Online softmax of the window: o = sum_t exp(s_t - m) drop_t v_t / sum_t exp(s_t - m).
      const C m = max_values(row, tile.w);
      for (Index t = 0; t < tile.w; ++t) row[t] = softmax_weight(row[t] - m);
      const C sum = sum_values(row, tile.w);
      if (in.dropout.rate > 0.0)
        for (Index t = 0; t < w; ++t) row[t] *= in.drop_factor(bh, item, t);
      inverse_sum(i) = C(1) / sum;
      lse(b, item, h) = m + compat::log(sum);
    });
    team.team_barrier();
    // O = dropout(P) V, into the queries' tile (no longer needed).
    team_multiply<false>(team, tile.c, tile.d, tile.w, &qs(0, 0), tile.d, &s(0, 0), tile.w, 1,
                         &vs(0, 0), tile.d);
    team.team_barrier();
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, c), [&](Index i) {
      T* o = &out(b, qc * c + i, h, 0);
      const C* from = &qs(i, 0);
      const C inverse = inverse_sum(i);
      for (Index d = 0; d < dh; ++d) o[d] = store<T>(from[d] * inverse);
    });
  }
};

// Backward (one team per query chunk): recomputes P from the position's LSE
// and, for the chunk's queries and its window's keys,
//   dscore = P (drop (dout . v_t) - D),
//   dq += dscore K,  dk += dscore^T Q,  dv += dropout(P)^T dout,
// all added into rows indexed by position. A chunk's queries are distinct
// positions (one round), and so are the keys of each chunk of its window,
// which the team adds one window chunk at a time.
template <class T>
struct ChunkedBackward {
  using C = compute_t<T>;
  ChunkedInputs<T> in;
  // Per position: LSE_i, D_i [batch, length, heads]; dout, dq, dk, dv [batch, length, heads, d].
  ItemScalars<const C> lse, delta;  // compute precision
  ItemView<const T> dout;
  ItemView<T> dq, dk_scaled, dv;
  Index first_chunk = 0, chunk_stride = 1, chunks = 0;  // the query chunks of this launch
  int level = 0;

  size_t scratch_bytes() const {
    return ChunkedScratchBytes<C>::whole_backward(in.window.chunk, in.window.slots(), in.d_head,
                                                  TileTraits<C>::block_cols);
  }

  KOKKOS_INLINE_FUNCTION void operator()(const TeamMember& team) const {
    const ChunkTiles<T> tile(in.window, in.d_head);
    const Index c = in.window.chunk, dh = in.d_head, heads = in.heads;
    const Index qc = first_chunk + team.league_rank() % chunks * chunk_stride;
    const Index bh = team.league_rank() / chunks, b = bh / heads, h = bh % heads;
    const auto scratch = team.team_scratch(level);
    Scratch2<C> qs(scratch, tile.c, tile.d), dos(scratch, tile.c, tile.d),
        kt(scratch, tile.d, tile.w), vt(scratch, tile.d, tile.w), ks(scratch, tile.w, tile.d),
        s(scratch, tile.c, tile.w), dp(scratch, tile.c, tile.w),
        grad_masks(scratch, tile.c, tile.w);
    ScratchInts posq(scratch, tile.c), posk(scratch, tile.w);
    Scratch2<C> none;
    load_window<T>(team, in, tile, bh, qc, posq, posk, qs, ks, kt, none, vt);
    gather_rows<C>(
        team, tile.c, dh, tile.d,
        [&](Index i, C&) { return posq(i) < 0 ? nullptr : &dout(b, posq(i), h, 0); }, dos, none);
    // The rows the team adds into at the end.
    prefetch_window_rows(team, tile.c, tile.w, b, h, dh, posq, posk, dq, dk_scaled, dv, true);
    team.team_barrier();
    // S = Q K^T, dP = dout V^T.
    team_multiply<false>(team, tile.c, tile.w, tile.d, &s(0, 0), tile.w, &qs(0, 0), tile.d, 1,
                         &kt(0, 0), tile.w);
    team_multiply<false>(team, tile.c, tile.w, tile.d, &dp(0, 0), tile.w, &dos(0, 0), tile.d, 1,
                         &vt(0, 0), tile.w);
    team.team_barrier();
    // Rows are queries: s <- dropout(P), dp <- dscore.
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, c), [&](Index i) {
      C* row = &s(i, 0);
      C* drow = &dp(i, 0);
      const Index pq = posq(i), item = qc * c + i;
      const C l = lse(b, pq, h), base = delta(b, pq, h);
      C* grad_mask = &grad_masks(i, 0);
      in.template mask_row<true>(b, bh, pq, &posk(0), tile.w, row, grad_mask);
      if (in.dropout.rate == 0.0) {
        for (Index t = 0; t < tile.w; ++t) {
          const C p = softmax_weight(row[t] - l);
          drow[t] = p * grad_mask[t] * (drow[t] - base);
          row[t] = p;
        }
      } else {
        for (Index t = 0; t < tile.w; ++t) {
          const C p = softmax_weight(row[t] - l);
          const C drop = t < in.window.slots() ? in.drop_factor(bh, item, t) : C(0);
          drow[t] = p * grad_mask[t] * (drop * drow[t] - base);
          row[t] = p * drop;
        }
      }
    });
    team.team_barrier();
    // dQ = dS K into K^T's tile, dK = dS^T Q into V^T's tile (both read no more).
    Scratch2<C> dqs(kt.data(), tile.c, tile.d), dks(vt.data(), tile.w, tile.d);
    team_multiply<false>(team, tile.c, tile.d, tile.w, dqs.data(), tile.d, &dp(0, 0), tile.w, 1,
                         &ks(0, 0), tile.d);
    team_multiply<false>(team, tile.w, tile.d, tile.c, dks.data(), tile.d, &dp(0, 0), 1, tile.w,
                         &qs(0, 0), tile.d);
    team.team_barrier();
    // dV = dropout(P)^T dout into K's tile; dq rows added by position.
    Scratch2<C> dvs(ks.data(), tile.w, tile.d);
    team_multiply<false>(team, tile.w, tile.d, tile.c, dvs.data(), tile.d, &s(0, 0), 1, tile.w,
                         &dos(0, 0), tile.d);
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, c), [&](Index i) {
      T* to = &dq(b, posq(i), h, 0);
      const C* from = &dqs(i, 0);
      for (Index d = 0; d < dh; ++d) to[d] = store<T>(load(to[d]) + from[d]);
    });
    // Columns are keys: one chunk of the window at a time (with several
    // rounds, a window can hold the same position twice, once per round).
    for (Index part = 0; part <= in.window.n_before; ++part) {
      team.team_barrier();
      Kokkos::parallel_for(Kokkos::TeamThreadRange(team, c), [&](Index j) {
        const Index t = part * c + j;
        if (posk(t) < 0) return;
        const Index pk = posk(t);
        T* to_k = &dk_scaled(b, pk, h, 0);
        T* to_v = &dv(b, pk, h, 0);
        for (Index d = 0; d < dh; ++d) {
          to_k[d] = store<T>(load(to_k[d]) + dks(t, d));
          to_v[d] = store<T>(load(to_v[d]) + dvs(t, d));
        }
      });
    }
  }
};

// ---- The streamed shape (ChunkedKernelShape::streamed) ----
//
// The forward streams a query tile's window through the online softmax of
// exact attention (tiled/online_softmax.hpp), whose score policy this is: for key
// tile kt (window slots [kt BK, kt BK + BK)) it gathers the scaled keys and
// the values and fills S^T = K Q^T, masked as in the whole-window kernel.
// Absent slots (before the first chunk, past the window) score no_score and
// weigh nothing: a tile can be absent altogether.
template <class T>
struct StreamedScores {
  using C = compute_t<T>;
  static constexpr Index BQ = StreamTileTraits<C>::query, BK = StreamTileTraits<C>::forward_key;
  static constexpr double no_score = -1e30;
  const ChunkedInputs<T>& in;
  Index b, h, bh, qc, end_item;  // the tile's queries are items below end_item
  ScratchInts posq, posk;        // [BQ], [BK]: positions, -1 for none
  Scratch2<C> ks, vs, qt;        // K and V rows [BK, dp], Q^T [dp, BQ]

  // The window's own chunk comes first, so an absent slot always meets a
  // maximum of a present score, and its weight is 0.
  KOKKOS_INLINE_FUNCTION C weight(C score, C base) const { return softmax_weight(score - base); }
  KOKKOS_INLINE_FUNCTION const C* scores(const TeamMember& team, Index kt, Scratch2<C> st,
                                         Index& vld) const {
    const Index dp = ks.extent(1);
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, BK),
                         [&](Index t) { posk(t) = in.key_position(b, bh, qc, kt * BK + t); });
    team.team_barrier();
    gather_elements<C>(
        team, BK, in.d_head, dp,
        [&](Index t, C& factor) { return in.key_row(b, h, posk(t), factor); }, ks, Scratch2<C>());
    gather_elements<C>(
        team, BK, in.d_head, dp, [&](Index t, C&) { return in.value_row(b, h, posk(t)); }, vs,
        Scratch2<C>());
    team.team_barrier();
    // S^T = K Q^T
    team_multiply<false>(team, BK, BQ, dp, &st(0, 0), BQ, &ks(0, 0), dp, 1, &qt(0, 0), BQ);
    team.team_barrier();
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, BK * BQ), [&](Index e) {
      const Index t = e / BQ, q = e % BQ, pq = posq(q), pk = posk(t);
      if (pq < 0) return;  // no query: never written out
      bool constant = true;
      st(t, q) = pk < 0 ? C(no_score) : in.mask_score(b, bh, pq, pk, st(t, q), constant);
    });
    team.team_barrier();
    vld = dp;
    return &vs(0, 0);
  }
  // Dropout of query item i and window slot j.
  KOKKOS_INLINE_FUNCTION C keep(Index i, Index j) const {
    return i >= end_item || j >= in.window.slots() ? C(0) : in.drop_factor(bh, i, j);
  }
};

// Forward, streamed: one team per (batch, head, chunk, query tile).
template <class T>
struct StreamedForward {
  using C = compute_t<T>;
  using Scores = StreamedScores<T>;
  static constexpr Index BQ = Scores::BQ, BK = Scores::BK;
  ChunkedInputs<T> in;
  ItemView<T> out;
  ItemScalars<C> lse;
  int level = 0;
  bool elements = false;  // TileLoops::elements for the online softmax's passes

  static size_t scratch_bytes(Index d_head) {
    return ChunkedScratchBytes<C>::streamed_forward(BQ, BK, d_head, TileTraits<C>::block_cols);
  }
  Index query_tiles() const { return (in.window.chunk + BQ - 1) / BQ; }

  KOKKOS_INLINE_FUNCTION void operator()(const TeamMember& team) const {
    const Index c = in.window.chunk, dp = TileTraits<C>::pad_columns(in.d_head);
    const Index tiles = (c + BQ - 1) / BQ, rank = team.league_rank();
    const Index tile = rank % tiles, qc = rank / tiles % in.window.n_chunks;
    const Index bh = rank / tiles / in.window.n_chunks, b = bh / in.heads, h = bh % in.heads;
    const Index first = qc * c + tile * BQ, end = qc * c + c;
    const auto scratch = team.team_scratch(level);
    Scratch2<C> qt(scratch, dp, BQ), o(scratch, BQ, dp), ks(scratch, BK, dp), vs(scratch, BK, dp),
        st(scratch, BK, BQ), stats(scratch, 3, BQ);
    ScratchInts posq(scratch, BQ), posk(scratch, BK);
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, BQ),
                         [&](Index q) { posq(q) = in.query_position(bh, qc, tile * BQ + q); });
    team.team_barrier();
    gather_elements<C>(
        team, BQ, in.d_head, dp,
        [&](Index q, C&) { return posq(q) < 0 ? nullptr : &in.q(b, posq(q), h, 0); }, Scratch2<C>(),
        qt);
    const Scores scores{in, b, h, bh, qc, end, posq, posk, ks, vs, qt};
    const Index key_tiles = (in.window.slots() + BK - 1) / BK;
    OnlineSoftmax<C, TileShape<BQ, BK, TileTraits<C>::block_rows, TileTraits<C>::block_cols>>{
        o, st, stats, elements}
        .run(team, scores, 0, key_tiles, in.dropout.rate > 0.0, b, h, first, end, in.d_head, out,
             lse);
  }
};

// The streamed chunked kernels' part of the key pass (tiled/backward.hpp) for
// one team, which holds query chunk qc and the group of its queries [g0,
// g_end): queries and keys are gathered by position (the window's keys
// scaled), the masks, dropout and duplicate correction applied per element.
template <class T>
struct StreamedGradients {
  using C = compute_t<T>;
  using Tiles = StreamTileTraits<C>;
  static constexpr Index BQ = Tiles::query, BK = Tiles::backward_key;
  using Shape = TileShape<BQ, BK, TileTraits<C>::block_rows, TileTraits<C>::block_cols>;
  const ChunkedInputs<T>& in;
  const ItemScalars<const C>& lse;
  const ItemScalars<const C>& delta;
  const ItemView<const T>& dout;
  Index b, h, bh, qc, g0, g_tiles;
  Scratch2<C> ks;  // the key tile's keys as rows, for dQ += dS K
  ScratchInts posq, posk;

  KOKKOS_INLINE_FUNCTION void query_tiles(Index, Index& begin, Index& end) const {
    begin = g0 / BQ;
    end = g_tiles / BQ;
  }
  KOKKOS_INLINE_FUNCTION bool visits(Index, Index) const { return true; }
  template <class Pass>
  KOKKOS_INLINE_FUNCTION void load_key_tile(const TeamMember& team, Index tile,
                                            const Pass& pass) const {
    const Index dh = in.d_head, dp = pass.kt.extent(0);
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, BK),
                         [&](Index t) { posk(t) = in.key_position(b, bh, qc, tile * BK + t); });
    team.team_barrier();
    gather_elements<C>(
        team, BK, dh, dp, [&](Index t, C& factor) { return in.key_row(b, h, posk(t), factor); }, ks,
        pass.kt);
    gather_elements<C>(
        team, BK, dh, dp, [&](Index t, C&) { return in.value_row(b, h, posk(t)); }, Scratch2<C>(),
        pass.vt);
  }
  template <class Pass>
  KOKKOS_INLINE_FUNCTION void load_query_tile(const TeamMember& team, Index qt, Index,
                                              const Pass& pass) const {
    const Index dh = in.d_head, dp = pass.kt.extent(0), q0 = qt * BQ;
    gather_elements<C>(
        team, BQ, dh, dp,
        [&](Index i, C&) { return posq(q0 + i) < 0 ? nullptr : &in.q(b, posq(q0 + i), h, 0); },
        pass.qs, Scratch2<C>());
    gather_elements<C>(
        team, BQ, dh, dp,
        [&](Index i, C&) { return posq(q0 + i) < 0 ? nullptr : &dout(b, posq(q0 + i), h, 0); },
        pass.dos, Scratch2<C>());
  }
  template <class Pass>
  KOKKOS_INLINE_FUNCTION void add_products(const TeamMember&, Index, Index, const Pass&) const {}
  // s <- dropout(P), dps <- dS (0 where a mask constant replaced the score).
  template <class Pass>
  KOKKOS_INLINE_FUNCTION void gradients(const TeamMember& team, Index qt, Index tile,
                                        const Pass& pass) const {
    const Index c = in.window.chunk, q0 = qt * BQ;
    const bool dropout = in.dropout.rate > 0.0;
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, BQ * BK), [&](Index e) {
      const Index i = e / BK, t = e % BK, pq = posq(q0 + i), pk = posk(t);
      if (pq < 0 || pk < 0) {
        pass.s(i, t) = C(0);
        pass.dps(i, t) = C(0);
        return;
      }
      bool constant = true;
      const C score = in.mask_score(b, bh, pq, pk, pass.s(i, t), constant);
      const C weight = softmax_weight(score - lse(b, pq, h));
      const C drop = dropout ? in.drop_factor(bh, qc * c + q0 + i, tile * BK + t) : C(1);
      pass.dps(i, t) = constant ? C(0) : weight * (drop * pass.dps(i, t) - delta(b, pq, h));
      pass.s(i, t) = weight * drop;
    });
  }
};

// Backward, streamed: one team per query chunk, launched as the whole-window
// backward is (the same colours). The team takes the chunk's queries in groups
// of R = StreamTileTraits::backward_rows (one group for chunks up to R). For
// each group and each key tile of the window (BK slots) it runs the key pass
// of tiled/backward.hpp over the group's query tiles (BQ queries), which
// recomputes
//   S = Q K^T, dP = dout V^T, P = exp(S - LSE), dS = P (drop dP - D),
// and adds dS K into the group's dq sums after each query tile (scratch,
// added into dq when the group is done); the pass's dS^T Q and dropout(P)^T
// dout sums of the key tile go into dk and dv (rows by position) when the tile
// is done: a gradient row is added into once per group as often as in the
// whole-window kernel (bf16: that many roundings). The query and dout tiles
// are gathered again for every key tile: holding the chunk's would not fit
// level 0.
template <class T>
struct StreamedBackward {
  using C = compute_t<T>;
  using Tiles = StreamTileTraits<C>;
  using Policy = StreamedGradients<T>;
  using Pass = detail::KeyPass<C, typename Policy::Shape>;
  static constexpr Index BQ = Tiles::query, BK = Tiles::backward_key, R = Tiles::backward_rows;
  ChunkedInputs<T> in;
  ItemScalars<const C> lse, delta;
  ItemView<const T> dout;
  ItemView<T> dq, dk_scaled, dv;
  Index first_chunk = 0, chunk_stride = 1, chunks = 0;
  int level = 0;

  static size_t scratch_bytes(Index chunk, Index d_head) {
    return ChunkedScratchBytes<C>::streamed_backward(chunk, BQ, BK, R, d_head,
                                                     TileTraits<C>::block_cols);
  }

  KOKKOS_INLINE_FUNCTION void operator()(const TeamMember& team) const {
    const Index c = in.window.chunk, dh = in.d_head, w = in.window.slots();
    const Index dp = TileTraits<C>::pad_columns(dh), cq = (c + BQ - 1) / BQ * BQ;
    const Index qc = first_chunk + team.league_rank() % chunks * chunk_stride;
    const Index bh = team.league_rank() / chunks, b = bh / in.heads, h = bh % in.heads;
    const auto scratch = team.team_scratch(level);
    const Pass pass(scratch, dp, /*stats=*/false);
    Scratch2<C> dqs(scratch, cq < R ? cq : R, dp);
    Policy policy{in,
                  lse,
                  delta,
                  dout,
                  b,
                  h,
                  bh,
                  qc,
                  0,
                  0,
                  Scratch2<C>(scratch, BK, dp),
                  ScratchInts(scratch, cq),
                  ScratchInts(scratch, BK)};
    const auto posq = policy.posq, posk = policy.posk;
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, cq),
                         [&](Index i) { posq(i) = in.query_position(bh, qc, i); });
    for (Index g0 = 0; g0 < c; g0 += R) {
      const Index g_end = g0 + R < c ? g0 + R : c;
      policy.g0 = g0;
      policy.g_tiles = g0 + (g_end - g0 + BQ - 1) / BQ * BQ;
      team.team_barrier();
      zero<C>(team, dqs);
      for (Index tile = 0; tile * BK < w; ++tile) {
        team.team_barrier();
        pass.run(team, policy, tile, [&](Index qt) {
          team_multiply<true>(team, BQ, dp, BK, &dqs(qt * BQ - g0, 0), dp, &pass.dps(0, 0), BK, 1,
                              &policy.ks(0, 0), dp);
        });
        // One thread per column, down the tile's rows (a window may hold a
        // position twice, once per round).
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, dh), [&](Index d) {
          for (Index t = 0; t < BK; ++t) {
            if (posk(t) < 0) continue;
            T& to_k = dk_scaled(b, posk(t), h, d);
            T& to_v = dv(b, posk(t), h, d);
            to_k = store<T>(load(to_k) + pass.dks(t, d));
            to_v = store<T>(load(to_v) + pass.dvs(t, d));
          }
        });
      }
      team.team_barrier();
      Kokkos::parallel_for(Kokkos::TeamThreadRange(team, (g_end - g0) * dh), [&](Index e) {
        const Index i = g0 + e / dh, d = e % dh;
        T& to = dq(b, posq(i), h, d);
        to = store<T>(load(to) + dqs(i - g0, d));
      });
    }
  }
};

// The batched shape (ChunkProducts::batched; chunked_batched.hpp, included
// below).
template <class T>
void batched_forward(const ChunkedInputs<T>& in, ItemView<T> out, ItemScalars<compute_t<T>> lse,
                     Index batch);
template <class T>
void batched_backward(const ChunkedInputs<T>& in, ItemScalars<const compute_t<T>> lse,
                      ItemScalars<const compute_t<T>> delta, ItemView<const T> dout, ItemView<T> dq,
                      ItemView<T> dk_scaled, ItemView<T> dv);

// Runs the forward: one team per (batch, head, chunk), or per (batch, head,
// chunk, query tile) in the streamed shape; or the batched shape.
template <class T>
void run_forward_chunks(const char* label, const ChunkedInputs<T>& in, ItemView<T> out,
                        ItemScalars<compute_t<T>> lse, Index batch) {
  if (chunk_products() == ChunkProducts::batched) {
    batched_forward<T>(in, out, lse, batch);
    return;
  }
  const Index teams = batch * in.heads * in.window.n_chunks;
  if (chunked_kernel_shape() == ChunkedKernelShape::streamed) {
    StreamedForward<T> kernel{in, out, lse};
    kernel.elements = tile_loops() == TileLoops::elements;
    const size_t bytes = StreamedForward<T>::scratch_bytes(in.d_head);
    kernel.level = scratch_level(bytes);
    Kokkos::parallel_for(
        label, team_policy(teams * kernel.query_tiles(), bytes, GpuTarget::chunked_team_size),
        kernel);
    return;
  }
  ChunkedForward<T> kernel{in, out, lse};
  const size_t bytes = kernel.scratch_bytes();
  kernel.level = scratch_level(bytes);
  Kokkos::parallel_for(label, team_policy(teams, bytes, GpuTarget::chunked_team_size), kernel);
}

// delta = dout . out per (batch, position, head).
template <class T>
void item_dot(ItemView<const T> a, ItemView<const T> b, ItemScalars<compute_t<T>> out) {
  using C = compute_t<T>;
  const Index dh = a.extent(3);
  for_items(
      "attention_item_dot", a.extent(0), a.extent(1), a.extent(2),
      KOKKOS_LAMBDA(const ItemIndex& at) {
        out(at.b, at.i, at.h) = dot_values(&a(at.b, at.i, at.h, 0), &b(at.b, at.i, at.h, 0), dh);
      },
      KOKKOS_LAMBDA(const TeamMember& team, const ItemIndex& at) {
        const T* x = &a(at.b, at.i, at.h, 0);
        const T* y = &b(at.b, at.i, at.h, 0);
        const C dot = lane_sum<C>(team, dh, [&](Index d) { return C(load(x[d])) * load(y[d]); });
        Kokkos::single(Kokkos::PerThread(team), [&] { out(at.b, at.i, at.h) = dot; });
      });
}

// Runs the backward: dq, dk_scaled and dv are zeroed and then accumulated
// launch by launch. Per round: the chunks whose window leaves the round (the
// first n_before with wrap-around) one launch each, then the other chunks in
// n_before + 1 colours (chunk index mod n_before + 1), whose windows do not
// overlap.
template <class T>
void chunked_backward(const ChunkedInputs<T>& in, ItemScalars<const compute_t<T>> lse,
                      ItemScalars<const compute_t<T>> delta, ItemView<const T> dout, ItemView<T> dq,
                      ItemView<T> dk_scaled, ItemView<T> dv) {
  if (chunk_products() == ChunkProducts::batched) {
    batched_backward<T>(in, lse, delta, dout, dq, dk_scaled, dv);
    return;
  }
  fill_elements("chunked_zero_dq", dq, store<T>(0));
  fill_elements("chunked_zero_dk", dk_scaled, store<T>(0));
  fill_elements("chunked_zero_dv", dv, store<T>(0));
  const Index batch = dout.extent(0), per_round = in.window.n_chunks / in.rounds;
  const Index colours = in.window.n_before + 1;
  const Index boundary = in.window.wrap ? std::min(in.window.n_before, per_round) : 0;
  auto launch_all = [&](auto kernel, size_t bytes) {
    kernel.level = scratch_level(bytes);
    auto launch = [&](Index first, Index stride, Index chunks) {
      if (chunks <= 0) return;
      kernel.first_chunk = first;
      kernel.chunk_stride = stride;
      kernel.chunks = chunks;
      Kokkos::parallel_for(
          "chunked_attention_backward",
          team_policy(batch * in.heads * chunks, bytes, GpuTarget::chunked_team_size), kernel);
    };
    for (Index r = 0; r < in.rounds; ++r) {
      const Index first = r * per_round;
      for (Index j = 0; j < boundary; ++j) launch(first + j, 1, 1);
      for (Index colour = 0; colour < colours; ++colour) {
        const Index start = boundary + colour;
        launch(first + start, colours, (per_round - start + colours - 1) / colours);
      }
    }
  };
  if (chunked_kernel_shape() == ChunkedKernelShape::streamed) {
    launch_all(StreamedBackward<T>{in, lse, delta, dout, dq, dk_scaled, dv},
               StreamedBackward<T>::scratch_bytes(in.window.chunk, in.d_head));
  } else {
    ChunkedBackward<T> kernel{in, lse, delta, dout, dq, dk_scaled, dv};
    launch_all(kernel, kernel.scratch_bytes());
  }
}

}  // namespace reformer::attention::detail

#include "attention/chunked_batched.hpp"
