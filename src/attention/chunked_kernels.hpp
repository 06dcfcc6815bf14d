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
// Backward recomputes the scores from lse (as in FlashAttention):
//   dscore_st = p_st (drop_st (do_s . v_t) - do_s . o_s + dlse_s)
//   dq_s = sum_t dscore_st k_t,  dk_t = sum_s dscore_st q_s,  dv_t = sum_s p_st drop_st do_s
// in two passes (one thread per query, then one thread per key), so no atomics
// and the same result for any thread count.
#pragma once

#include "reformer/attention/masks.hpp"
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
  // Chunk of the queries that see key chunk `kc` at distance `back`, or -1.
  KOKKOS_INLINE_FUNCTION Index query_chunk(Index kc, Index back) const {
    Index qc = kc + back;
    if (qc >= n_chunks) {
      if (!wrap) return -1;
      qc -= n_chunks;
    }
    return qc;
  }
};

// Inputs of the chunked kernels. Q, K, V are [batch, length, heads, d_head].
template <class T>
struct ChunkedInputs {
  Kokkos::View<const T****, Layout, MemSpace> q, k, v;
  // perm(bh, s): original position of sorted item s. Empty: identity.
  Kokkos::View<const int**, Layout, MemSpace> perm;
  // undo(bh, r * length + i): sorted index of position i in round r. Only for
  // the duplicate-attention correction; empty otherwise.
  Kokkos::View<const int**, Layout, MemSpace> undo;
  // Per-key scale [batch, length, heads] (LSH key normalisation). Empty: key_scale_constant.
  Kokkos::View<const T***, Layout, MemSpace> key_scale;
  T key_scale_constant = T(1);
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
  KOKKOS_INLINE_FUNCTION T scale_of(Index b, Index pos, Index h) const {
    return key_scale.extent(0) ? key_scale(b, pos, h) : key_scale_constant;
  }
  // How often key position pk appears in the windows of query position pq over
  // all rounds (windows can reach into the previous round's items, so every
  // item of pk is checked against every item of pq): O(rounds^2).
  KOKKOS_INLINE_FUNCTION int shared_windows(Index bh, Index pq, Index pk) const {
    int count = 0;
    for (Index rq = 0; rq < rounds; ++rq) {
      const Index qc = undo(bh, rq * length + pq) / window.chunk;
      for (Index rk = 0; rk < rounds; ++rk) {
        const Index kc = undo(bh, rk * length + pk) / window.chunk;
        Index back = qc - kc;
        if (back < 0 && window.wrap) back += window.n_chunks;
        count += back >= 0 && back <= window.n_before;
      }
    }
    return count;
  }
  // Applies the masks to the scaled dot product of query position pq and key
  // position pk. `constant` is set when the score was replaced by a mask
  // value, through which no gradient flows.
  KOKKOS_INLINE_FUNCTION T mask_score(Index b, Index bh, Index pq, Index pk, T dot,
                                      bool& constant) const {
    constant = true;
    if (self_mask && pq == pk) return T(MaskValues<T>::self);
    if ((causal && pk > pq) || (key_valid.extent(0) && key_valid(b, pk) == 0))
      return T(MaskValues<T>::masked);
    constant = false;
    if (duplicate_correction) dot -= compat::log(T(shared_windows(bh, pq, pk)));
    return dot;
  }
  // Masks a row of dot products with the window's keys (posk[t] < 0: absent
  // slot). With kGradMask, grad_mask[t] is set to 1 where the score depends on
  // q and k and to 0 where a mask constant replaced it. Without padding or the
  // duplicate correction the loop has no branches and vectorises.
  template <bool kGradMask>
  KOKKOS_INLINE_FUNCTION void mask_row(Index b, Index bh, Index pq, const int* posk, Index w,
                                       T* row, T* grad_mask) const {
    if (!duplicate_correction && key_valid.extent(0) == 0) {
      const T self_value = T(MaskValues<T>::self), masked_value = T(MaskValues<T>::masked);
      for (Index t = 0; t < w; ++t) {
        const Index pk = posk[t];
        const bool absent = pk < 0, self = self_mask && pk == pq, future = causal && pk > pq;
        row[t] = absent ? T(-1e30) : self ? self_value : future ? masked_value : row[t];
        if (kGradMask) grad_mask[t] = absent || self || future ? T(0) : T(1);
      }
      return;
    }
    for (Index t = 0; t < w; ++t) {
      bool constant = true;
      row[t] = posk[t] < 0 ? T(-1e30) : mask_score(b, bh, pq, posk[t], row[t], constant);
      if (kGradMask) grad_mask[t] = constant ? T(0) : T(1);
    }
  }
  KOKKOS_INLINE_FUNCTION T drop_factor(Index bh, Index s, Index slot) const {
    if (dropout.rate == 0.0) return T(1);
    const std::uint64_t index = (std::uint64_t(bh) * window.items + s) * window.slots() + slot;
    return ops::dropout_keeps(dropout.key, index, dropout.rate) ? T(1.0 / (1.0 - dropout.rate))
                                                                : T(0);
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
// and also transposed), so that every product below is a loop over contiguous
// memory that the compiler vectorises:
//   S = Q K^T (window), P = softmax(masked S), out = dropout(P) V.
// Absent window slots (before the first chunk, without wrap-around) have
// position -1 and take no part in the softmax.
template <class T>
struct ChunkTiles {
  using Scratch2 = Kokkos::View<T**, Layout, ExecSpace::scratch_memory_space,
                                Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  using Scratch1 = Kokkos::View<int*, Layout, ExecSpace::scratch_memory_space,
                                Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  // Host threads use the fast level-0 scratch; GPU teams need more than it holds.
  static constexpr bool kHost = Kokkos::SpaceAccessibility<Kokkos::HostSpace, MemSpace>::accessible;
  static constexpr int kLevel = kHost ? 0 : 1;
};

using TeamMember = Kokkos::TeamPolicy<ExecSpace>::member_type;

// Gathers rows [0, n) of a chunk: row r is item first + r (or absent if the
// item index is negative); dst_rows [n][d] and, if given, dst_cols [d][n].
template <class T, class Items, class Source>
KOKKOS_INLINE_FUNCTION void gather_rows(const TeamMember& team, Index n, Index d, Items&& item_of,
                                        Source&& value, typename ChunkTiles<T>::Scratch2 rows,
                                        typename ChunkTiles<T>::Scratch2 cols) {
  Kokkos::parallel_for(Kokkos::TeamThreadRange(team, n), [&](Index r) {
    const Index item = item_of(r);
    for (Index c = 0; c < d; ++c) {
      const T x = item < 0 ? T(0) : value(item, c);
      if (rows.extent(0)) rows(r, c) = x;
      if (cols.extent(0)) cols(c, r) = x;
    }
  });
}

// Loads chunk qc of (batch, head) bh into scratch: the positions of its queries
// and of its window's keys (-1 for absent slots), the queries as rows, and the
// scaled keys and the values as rows and/or transposed (empty views are skipped).
template <class T, class Ints, class Rows>
KOKKOS_INLINE_FUNCTION void load_window(const TeamMember& team, const ChunkedInputs<T>& in,
                                        Index bh, Index qc, Ints posq, Ints posk, Rows q_rows,
                                        Rows k_rows, Rows k_cols, Rows v_rows, Rows v_cols) {
  const Index c = in.window.chunk, w = in.window.slots(), dh = in.d_head;
  const Index b = bh / in.heads, h = bh % in.heads;
  Kokkos::parallel_for(Kokkos::TeamThreadRange(team, c),
                       [&](Index i) { posq(i) = int(in.position(bh, qc * c + i)); });
  Kokkos::parallel_for(Kokkos::TeamThreadRange(team, w), [&](Index t) {
    const Index item = in.window.key_item(qc, t);
    posk(t) = item < 0 ? -1 : int(in.position(bh, item));
  });
  team.team_barrier();
  gather_rows<T>(
      team, c, dh, [&](Index i) { return Index(posq(i)); },
      [&](Index pos, Index d) { return in.q(b, pos, h, d); }, q_rows, Rows());
  gather_rows<T>(
      team, w, dh, [&](Index t) { return Index(posk(t)); },
      [&](Index pos, Index d) { return in.k(b, pos, h, d) * in.scale_of(b, pos, h); }, k_rows,
      k_cols);
  gather_rows<T>(
      team, w, dh, [&](Index t) { return Index(posk(t)); },
      [&](Index pos, Index d) { return in.v(b, pos, h, d); }, v_rows, v_cols);
  team.team_barrier();
}

// Forward (one team per query chunk): out and lse of every query item.
template <class T>
struct ChunkedForward {
  using Tiles = ChunkTiles<T>;
  using Scratch2 = typename Tiles::Scratch2;
  using Scratch1 = typename Tiles::Scratch1;
  ChunkedInputs<T> in;
  ItemView<T> out;
  ItemScalars<T> lse;

  size_t scratch_bytes() const {
    const Index c = in.window.chunk, w = in.window.slots(), d = in.d_head;
    return Scratch2::shmem_size(c, d) + 2 * Scratch2::shmem_size(d, w) +
           Scratch2::shmem_size(w, d) + Scratch2::shmem_size(c, w) + Scratch1::shmem_size(c) +
           Scratch1::shmem_size(w);
  }

  KOKKOS_INLINE_FUNCTION void operator()(const TeamMember& team) const {
    const Index c = in.window.chunk, w = in.window.slots(), dh = in.d_head;
    const Index n_chunks = in.window.n_chunks, heads = in.heads;
    const Index qc = team.league_rank() % n_chunks, bh = team.league_rank() / n_chunks;
    const Index b = bh / heads, h = bh % heads;
    const auto level = team.team_scratch(int(Tiles::kLevel));
    Scratch2 qs(level, c, dh), kt(level, dh, w), vs(level, w, dh), s(level, c, w);
    Scratch1 posq(level, c), posk(level, w);
    Scratch2 none;
    load_window<T>(team, in, bh, qc, posq, posk, qs, none, kt, vs, none);
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, c), [&](Index i) {
      T* row = &s(i, 0);
      for (Index t = 0; t < w; ++t) row[t] = 0;
      accumulate_rows(row, &kt(0, 0), w, &qs(i, 0), 1, dh, w);
      const Index pq = posq(i), item = qc * c + i;
      in.template mask_row<false>(b, bh, pq, &posk(0), w, row, nullptr);
      const T m = max_values(row, w);
      for (Index t = 0; t < w; ++t) row[t] = softmax_weight(row[t] - m);
      const T sum = sum_values(row, w);
      if (in.dropout.rate > 0.0)
        for (Index t = 0; t < w; ++t) row[t] *= in.drop_factor(bh, item, t);
      T acc[kMaxHeadDim];
      for (Index d = 0; d < dh; ++d) acc[d] = 0;
      accumulate_rows(acc, &vs(0, 0), dh, row, 1, w, dh);
      for (Index d = 0; d < dh; ++d) out(b, item, h, d) = acc[d] / sum;
      lse(b, item, h) = m + compat::log(sum);
    });
  }
};

// Backward (one team per query chunk): recomputes P from lse and, for the
// chunk's queries and its window's keys,
//   dscore = P (drop (dout . v_t) - dout . out + dlse),
//   dq = dscore K (written),  dk += dscore^T Q,  dv += dropout(P)^T dout.
// A query chunk adds into the keys of its own and its n_before previous chunks,
// so chunks are launched in colours (chunk index mod n_before + 1) whose
// windows do not overlap: no atomics, and the same sums in the same order on
// every backend and thread count.
template <class T>
struct ChunkedBackward {
  using Tiles = ChunkTiles<T>;
  using Scratch2 = typename Tiles::Scratch2;
  using Scratch1 = typename Tiles::Scratch1;
  ChunkedInputs<T> in;
  ItemScalars<const T> lse, dlse, delta;
  ItemView<const T> dout;
  ItemView<T> dq, dk_scaled, dv;
  Index first_chunk = 0, chunk_stride = 1, chunks = 0;  // the chunks of this launch

  size_t scratch_bytes() const {
    const Index c = in.window.chunk, w = in.window.slots(), d = in.d_head;
    return 2 * Scratch2::shmem_size(c, d) + 2 * Scratch2::shmem_size(d, w) +
           Scratch2::shmem_size(w, d) + 3 * Scratch2::shmem_size(c, w) + Scratch1::shmem_size(c) +
           Scratch1::shmem_size(w);
  }

  KOKKOS_INLINE_FUNCTION void operator()(const TeamMember& team) const {
    const Index c = in.window.chunk, w = in.window.slots(), dh = in.d_head, heads = in.heads;
    const Index qc = first_chunk + team.league_rank() % chunks * chunk_stride;
    const Index bh = team.league_rank() / chunks, b = bh / heads, h = bh % heads;
    const auto level = team.team_scratch(int(Tiles::kLevel));
    Scratch2 qs(level, c, dh), dos(level, c, dh), kt(level, dh, w), vt(level, dh, w),
        ks(level, w, dh), s(level, c, w), dp(level, c, w), dropw(level, c, w);
    Scratch1 posq(level, c), posk(level, w);
    Scratch2 none;
    gather_rows<T>(
        team, c, dh, [&](Index i) { return qc * c + i; },
        [&](Index item, Index d) { return dout(b, item, h, d); }, dos, none);
    load_window<T>(team, in, bh, qc, posq, posk, qs, ks, kt, none, vt);
    // Rows are queries: s <- dropout(P), dp <- dscore; then dq.
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, c), [&](Index i) {
      T* row = &s(i, 0);
      T* drow = &dp(i, 0);
      for (Index t = 0; t < w; ++t) row[t] = drow[t] = 0;
      accumulate_rows(row, &kt(0, 0), w, &qs(i, 0), 1, dh, w);
      accumulate_rows(drow, &vt(0, 0), w, &dos(i, 0), 1, dh, w);
      const Index pq = posq(i), item = qc * c + i;
      const T l = lse(b, item, h), base = delta(b, item, h) - dlse(b, item, h);
      // s <- dropout(P), dp <- dscore = P * grad_mask * (drop * dP - base).
      T* grad_mask = &dropw(i, 0);
      in.template mask_row<true>(b, bh, pq, &posk(0), w, row, grad_mask);
      if (in.dropout.rate == 0.0) {
        for (Index t = 0; t < w; ++t) {
          const T p = softmax_weight(row[t] - l);
          drow[t] = p * grad_mask[t] * (drow[t] - base);
          row[t] = p;
        }
      } else {
        for (Index t = 0; t < w; ++t) {
          const T p = softmax_weight(row[t] - l), drop = in.drop_factor(bh, item, t);
          drow[t] = p * grad_mask[t] * (drop * drow[t] - base);
          row[t] = p * drop;
        }
      }
      T grad[kMaxHeadDim];
      for (Index d = 0; d < dh; ++d) grad[d] = 0;
      accumulate_rows(grad, &ks(0, 0), dh, drow, 1, w, dh);
      for (Index d = 0; d < dh; ++d) dq(b, item, h, d) = grad[d];
    });
    team.team_barrier();
    // Columns are keys: dk += dscore^T Q, dv += dropout(P)^T dout.
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, w), [&](Index t) {
      const Index item = in.window.key_item(qc, t);
      if (item < 0) return;
      T gk[kMaxHeadDim], gv[kMaxHeadDim];
      for (Index d = 0; d < dh; ++d) gk[d] = gv[d] = 0;
      accumulate_rows(gk, &qs(0, 0), dh, &dp(0, t), w, c, dh);
      accumulate_rows(gv, &dos(0, 0), dh, &s(0, t), w, c, dh);
      for (Index d = 0; d < dh; ++d) {
        dk_scaled(b, item, h, d) += gk[d];
        dv(b, item, h, d) += gv[d];
      }
    });
  }
};

// Runs a chunk kernel with one team per (batch, head, chunk).
template <class Kernel>
void run_chunks(const char* label, const Kernel& kernel, Index batch) {
  using Tiles = typename Kernel::Tiles;
  Kokkos::TeamPolicy<ExecSpace> policy(batch * kernel.in.heads * kernel.in.window.n_chunks,
                                       Kokkos::AUTO);
  Kokkos::parallel_for(
      label, policy.set_scratch_size(Tiles::kLevel, Kokkos::PerTeam(kernel.scratch_bytes())),
      kernel);
}

// delta = dout . out per (batch, item, head).
template <class T>
void item_dot(ItemView<const T> a, ItemView<const T> b, ItemScalars<T> out) {
  const Index n = a.extent(0) * a.extent(1) * a.extent(2), dh = a.extent(3);
  auto fa = Kokkos::View<const T**, Layout, MemSpace>(a.data(), n, dh);
  auto fb = Kokkos::View<const T**, Layout, MemSpace>(b.data(), n, dh);
  auto fo = Kokkos::View<T*, Layout, MemSpace>(out.data(), n);
  Kokkos::parallel_for(
      "attention_item_dot", range(n), KOKKOS_LAMBDA(Index i) {
        T sum = 0;
        for (Index d = 0; d < dh; ++d) sum += fa(i, d) * fb(i, d);
        fo(i) = sum;
      });
}

// Runs the backward: dq is written, dk_scaled and dv are zeroed and then
// accumulated colour by colour.
template <class T>
void chunked_backward(const ChunkedInputs<T>& in, ItemScalars<const T> lse,
                      ItemScalars<const T> dlse, ItemScalars<const T> delta, ItemView<const T> dout,
                      ItemView<T> dq, ItemView<T> dk_scaled, ItemView<T> dv) {
  Kokkos::deep_copy(dk_scaled, T(0));
  Kokkos::deep_copy(dv, T(0));
  const Index batch = dout.extent(0), n_chunks = in.window.n_chunks;
  const Index colours = in.window.n_before + 1;
  // With wrap-around, chunk 0's window reaches the last chunks: the chunks past
  // the last whole group of colours run one launch each.
  const Index grouped = in.window.wrap ? n_chunks - n_chunks % colours : n_chunks;
  ChunkedBackward<T> kernel{in, lse, dlse, delta, dout, dq, dk_scaled, dv};
  auto launch = [&](Index first, Index stride, Index chunks) {
    if (chunks <= 0) return;
    kernel.first_chunk = first;
    kernel.chunk_stride = stride;
    kernel.chunks = chunks;
    Kokkos::TeamPolicy<ExecSpace> policy(batch * in.heads * chunks, Kokkos::AUTO);
    Kokkos::parallel_for(
        "chunked_attention_backward",
        policy.set_scratch_size(ChunkTiles<T>::kLevel, Kokkos::PerTeam(kernel.scratch_bytes())),
        kernel);
  };
  for (Index colour = 0; colour < colours; ++colour)
    launch(colour, colours, (grouped - colour + colours - 1) / colours);
  for (Index chunk = grouped; chunk < n_chunks; ++chunk) launch(chunk, 1, 1);
}

}  // namespace reformer::attention::detail
