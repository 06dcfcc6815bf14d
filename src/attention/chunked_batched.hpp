// The batched shape of the chunked attention kernels (ChunkProducts::batched,
// reformer/attention/chunked_scratch.hpp; internal header, included at the
// end of chunked_kernels.hpp, whose sums it computes).
//
// The chunks of every (batch, head) are numbered g = bh * n_chunks + qc and
// taken a slice [first, first + count) at a time, so that the buffers stay
// under chunk_slice_budget(): O(L) memory whatever the length. Per slice:
//   gather:   Q [count, c, d] (the chunk's queries), K and V [count, w, d]
//             (its window's keys, scaled, and values; zero rows for absent
//             slots), the positions of both;
//   forward:  S = Q K^T (strided-batched), a row kernel that masks S and takes
//             lse = log sum_t exp(S_t) and P = exp(S - lse) drop, O = P V
//             (strided-batched), O and lse written to the items;
//   backward: S = Q K^T, dP = dO V^T (strided-batched), an elementwise kernel
//             P = exp(S - LSE_i) drop, dS = P' (drop dP - D_i) (0 where a mask
//             constant replaced the score), then dV = P^T dO, dQ = dS K,
//             dK = dS^T Q (strided-batched), and one kernel that adds to every
//             position's dq, dk and dv the rows of its items: dq over the
//             rounds, dk and dv over every window slot that holds the item.
// The reduction is a gather, a row of lanes per position, the slots in a
// fixed order: no atomics, the same sums for every backend and thread count.
// Window slots keep the fused kernels' numbering (slot / c chunks back), so
// dropout draws the same bits.
#pragma once

#include "reformer/attention/chunked_scratch.hpp"
#include "reformer/core/element_map.hpp"
#include "reformer/core/lane_rows.hpp"
#include "reformer/core/workspace.hpp"
#include "reformer/ops/gemm.hpp"

#include <algorithm>
#include <utility>

namespace reformer::attention::detail {

// The slice buffers live in a workspace of their own, one per process
// ("chunk_batched_workspace": the memory instrument names it), which keeps its
// high-water mark between calls and is released when Kokkos finalises
// (chunked_scratch.cpp).
Workspace& chunk_batched_workspace();

template <class T>
struct BatchedSlice {
  using C = compute_t<T>;
  using Ints = Kokkos::View<int**, Layout, MemSpace>;
  Index first = 0, count = 0;  // chunks g in [first, first + count)
  View3<C> q, k, v, s;         // [count, c, d], [count, w, d], [count, w, d], [count, c, w]
  View3<C> dout, dp;           // backward: [count, c, d], [count, c, w]
  View2<C> lse;                // forward: [count, c]
  Ints posq, posk;             // [count, c], [count, w]: positions, -1 for none

  BatchedSlice(Workspace::Frame& frame, const ChunkWindow& window, Index d_head, Index chunks,
               bool backward)
      : count(chunks) {
    const Index c = window.chunk, w = window.slots();
    q = frame.take<View3<C>>(count, c, d_head);
    k = frame.take<View3<C>>(count, w, d_head);
    v = frame.take<View3<C>>(count, w, d_head);
    s = frame.take<View3<C>>(count, c, w);
    if (backward) {
      dout = frame.take<View3<C>>(count, c, d_head);
      dp = frame.take<View3<C>>(count, c, w);
    } else {
      lse = frame.take<View2<C>>(count, c);
    }
    posq = frame.take<Ints>(count, c);
    posk = frame.take<Ints>(count, w);
  }
  // The slice of chunks [begin, begin + n): views over the buffers' first n
  // chunks (n <= count).
  BatchedSlice part(Index begin, Index n) const {
    BatchedSlice p = *this;
    p.first = begin;
    p.count = n;
    if (n == count) return p;
    const auto lead = std::make_pair(Index(0), n);
    const auto rows = [&](const View3<C>& x) {
      return x.extent(0) ? View3<C>(Kokkos::subview(x, lead, Kokkos::ALL, Kokkos::ALL)) : x;
    };
    p.q = rows(q);
    p.k = rows(k);
    p.v = rows(v);
    p.s = rows(s);
    p.dout = rows(dout);
    p.dp = rows(dp);
    if (lse.extent(0)) p.lse = Kokkos::subview(lse, lead, Kokkos::ALL);
    p.posq = Kokkos::subview(posq, lead, Kokkos::ALL);
    p.posk = Kokkos::subview(posk, lead, Kokkos::ALL);
    return p;
  }
};

// Chunk g's (batch * heads row, chunk) and batch row.
struct ChunkIndex {
  Index bh, qc, b, h;
  KOKKOS_INLINE_FUNCTION ChunkIndex(Index g, Index n_chunks, Index heads)
      : bh(g / n_chunks), qc(g % n_chunks), b(bh / heads), h(bh % heads) {}
};

// Every kernel below works by rows (core/lane_rows.hpp): the lanes along the
// row (d_head columns or window slots).

// Gathers the slice's queries (and, in the backward, dout at their
// positions), its windows' scaled keys and values, and their positions.
template <class T>
void gather_chunk_slice(const ChunkedInputs<T>& in, const BatchedSlice<T>& slice,
                        ItemView<const T> dout) {
  using C = compute_t<T>;
  const Index c = in.window.chunk, w = in.window.slots(), dh = in.d_head, rows = c + w;
  const Index n_chunks = in.window.n_chunks, first = slice.first;
  const bool backward = dout.extent(0) > 0;
  const auto s = slice;
  const auto input = in;
  // Each lane loads its columns of both rows before it stores any
  // (core/lane_rows.hpp, lane_map).
  using Pair = Kokkos::pair<C, C>;
  for_lane_rows(
      "chunk_batched_gather", slice.count * rows, KOKKOS_LAMBDA(const TeamMember& team, Index e) {
        const Index row = e % rows, n = e / rows;
        const ChunkIndex at(first + n, n_chunks, input.heads);
        if (row < c) {
          const int pq = input.query_position(at.bh, at.qc, row);
          const T* from = &input.q(at.b, pq, at.h, 0);
          const T* from_dout = backward ? &dout(at.b, pq, at.h, 0) : nullptr;
          C* to = &s.q(n, row, 0);
          C* to_dout = backward ? &s.dout(n, row, 0) : nullptr;
          lane_map<Pair>(
              team, dh,
              [&](Index x) { return Pair(load(from[x]), backward ? load(from_dout[x]) : C(0)); },
              [&](Index x, const Pair& v) {
                to[x] = v.first;
                if (backward) to_dout[x] = v.second;
              });
          Kokkos::single(Kokkos::PerThread(team), [&]() { s.posq(n, row) = pq; });
          return;
        }
        const Index t = row - c;
        const int pk = input.key_position(at.b, at.bh, at.qc, t);
        Kokkos::single(Kokkos::PerThread(team), [&]() { s.posk(n, t) = pk; });
        C* to_k = &s.k(n, t, 0);
        C* to_v = &s.v(n, t, 0);
        if (pk < 0) {
          Kokkos::parallel_for(Kokkos::ThreadVectorRange(team, dh), [&](Index x) {
            to_k[x] = C(0);
            to_v[x] = C(0);
          });
          return;
        }
        const C scale = input.scale_of(at.b, pk, at.h);
        const T* from_k = &input.k(at.b, pk, at.h, 0);
        const T* from_v = &input.v(at.b, pk, at.h, 0);
        lane_map<Pair>(
            team, dh, [&](Index x) { return Pair(load(from_k[x]) * scale, load(from_v[x])); },
            [&](Index x, const Pair& v) {
              to_k[x] = v.first;
              to_v[x] = v.second;
            });
      });
}

// Forward: the masked scores of each query row become P = softmax(S) drop,
// lse = logsumexp of the row (absent slots score -1e30 and weigh nothing;
// the chunk's own keys are always present).
template <class T>
void chunk_softmax_rows(const ChunkedInputs<T>& in, const BatchedSlice<T>& slice) {
  using C = compute_t<T>;
  const Index c = in.window.chunk, w = in.window.slots();
  const Index n_chunks = in.window.n_chunks, first = slice.first;
  const auto s = slice;
  const auto input = in;
  for_lane_rows(
      "chunk_batched_softmax", slice.count * c, KOKKOS_LAMBDA(const TeamMember& team, Index row) {
        const Index n = row / c, i = row % c;
        const ChunkIndex at(first + n, n_chunks, input.heads);
        const int pq = s.posq(n, i);
        C* scores = &s.s(n, i, 0);
        const int* posk = &s.posk(n, 0);
        C top = C(-1e30);
        // The row is updated in place, its loads ahead of its stores
        // (core/lane_rows.hpp, load_then_store_lane_columns).
        Kokkos::parallel_reduce(
            Kokkos::ThreadVectorRange(team, kRowLanes),
            [&](Index lane, C& most) {
              load_then_store_lane_columns<C>(
                  lane, w,
                  [&](Index t) {
                    bool constant = true;
                    return posk[t] < 0
                               ? C(-1e30)
                               : input.mask_score(at.b, at.bh, pq, posk[t], scores[t], constant);
                  },
                  [&](Index t, C x) {
                    scores[t] = x;
                    most = x > most ? x : most;
                  });
            },
            Kokkos::Max<C>(top));
        C sum = 0;
        Kokkos::parallel_reduce(
            Kokkos::ThreadVectorRange(team, w),
            [&](Index t, C& acc) { acc += softmax_weight(scores[t] - top); }, sum);
        // P = exp(S - top) / sum rather than exp(S - lse): a row whose every
        // key is masked (top = -1e9) keeps its exact uniform weights.
        const C lse = top + compat::log(sum), inverse = C(1) / sum;
        const Index item = at.qc * c + i;
        lane_map<C>(
            team, w,
            [&](Index t) {
              return softmax_weight(scores[t] - top) * inverse * input.drop_factor(at.bh, item, t);
            },
            [&](Index t, C x) { scores[t] = x; });
        Kokkos::single(Kokkos::PerThread(team), [&]() { s.lse(n, i) = lse; });
      });
}

// Forward: O (in slice.q) and lse to the items.
template <class T>
void scatter_chunk_outputs(const ChunkedInputs<T>& in, const BatchedSlice<T>& slice,
                           ItemView<T> out, ItemScalars<compute_t<T>> lse) {
  const Index c = in.window.chunk, dh = in.d_head, n_chunks = in.window.n_chunks;
  const Index first = slice.first, heads = in.heads;
  const auto s = slice;
  for_lane_rows(
      "chunk_batched_outputs", slice.count * c, KOKKOS_LAMBDA(const TeamMember& team, Index row) {
        const Index n = row / c, i = row % c;
        const ChunkIndex at(first + n, n_chunks, heads);
        const Index item = at.qc * c + i;
        const auto* from = &s.q(n, i, 0);
        T* to = &out(at.b, item, at.h, 0);
        lane_map<compute_t<T>>(
            team, dh, [&](Index x) { return from[x]; },
            [&](Index x, compute_t<T> v) { to[x] = store<T>(v); });
        Kokkos::single(Kokkos::PerThread(team), [&]() { lse(at.b, item, at.h) = s.lse(n, i); });
      });
}

// Backward: S becomes dropout(P) and dP becomes dS (FlashAttention's
// backward, with LSE_i over every round and D_i = dout_i . out_i).
template <class T>
void chunk_score_gradients(const ChunkedInputs<T>& in, const BatchedSlice<T>& slice,
                           ItemScalars<const compute_t<T>> lse,
                           ItemScalars<const compute_t<T>> delta) {
  using C = compute_t<T>;
  const Index c = in.window.chunk, w = in.window.slots(), n_chunks = in.window.n_chunks;
  const Index first = slice.first;
  const bool dropout = in.dropout.rate > 0.0;
  const auto s = slice;
  const auto input = in;
  for_lane_rows(
      "chunk_batched_score_grad", slice.count * c,
      KOKKOS_LAMBDA(const TeamMember& team, Index row) {
        const Index n = row / c, i = row % c;
        const ChunkIndex at(first + n, n_chunks, input.heads);
        const int pq = s.posq(n, i);
        const C row_lse = lse(at.b, pq, at.h), row_delta = delta(at.b, pq, at.h);
        const Index item = at.qc * c + i;
        C* p = &s.s(n, i, 0);
        C* ds = &s.dp(n, i, 0);
        const int* posk = &s.posk(n, 0);
        // (p, ds) of each slot, loads ahead of stores (core/lane_rows.hpp).
        using Pair = Kokkos::pair<C, C>;
        lane_map<Pair>(
            team, w,
            [&](Index t) {
              if (posk[t] < 0) return Pair(C(0), C(0));
              bool constant = true;
              const C score = input.mask_score(at.b, at.bh, pq, posk[t], p[t], constant);
              const C weight = softmax_weight(score - row_lse);
              const C drop = dropout ? input.drop_factor(at.bh, item, t) : C(1);
              return Pair(weight * drop, constant ? C(0) : weight * (drop * ds[t] - row_delta));
            },
            [&](Index t, const Pair& x) {
              p[t] = x.first;
              ds[t] = x.second;
            });
      });
}

// Whether query chunk qc of batch row b takes the plain window (ChunkWindow)
// rather than the walk over the real chunks (ChunkedInputs::key_item).
template <class T>
KOKKOS_INLINE_FUNCTION bool plain_window(const ChunkedInputs<T>& in, Index b, Index qc) {
  if (in.real.extent(0) == 0) return true;
  const Index c = in.window.chunk, n = in.real(b);
  return n == 0 || qc % (in.length / c) >= (n + c - 1) / c;
}

// Backward: adds to dq, dk_scaled and dv of every position of the slice's
// (batch, head) rows the slice's rows of its items: dq from dQ (in
// slice.dout) over the rounds; dk and dv from dK (slice.k) and dV (slice.v)
// over every window slot (qc, back * c + row) that holds one of its items.
// Such a slot is found from the item's chunk kc: qc = kc + back (the plain
// window, cyclic with wrap-around) or, with padding, back chunks on along the
// cycle of real chunks; each candidate is kept only if key_item maps it back
// to the item, and only under the window rule that key_item applies to qc, so
// no slot is counted twice.
template <class T>
void reduce_chunk_gradients(const ChunkedInputs<T>& in, const BatchedSlice<T>& slice,
                            ItemView<T> dq, ItemView<T> dk_scaled, ItemView<T> dv) {
  using C = compute_t<T>;
  const Index c = in.window.chunk, dh = in.d_head, n_chunks = in.window.n_chunks;
  const Index length = in.length, heads = in.heads;
  const Index first = slice.first, end = slice.first + slice.count;
  const Index bh0 = first / n_chunks, bh1 = (end - 1) / n_chunks + 1;
  const auto s = slice;
  const auto input = in;
  // Each lane sums its own columns (lane, lane + kRowLanes, ...) in registers;
  // every lane walks the position's slots itself (on a GPU the candidate
  // search runs once per lane, not once per row as in the other kernels).
  constexpr Index kColumns = lane_columns(kMaxHeadDim);
  for_lane_rows(
      "chunk_batched_grad_reduce", (bh1 - bh0) * length,
      KOKKOS_LAMBDA(const TeamMember& team, Index row) {
        const Index i = row % length, bh = bh0 + row / length;
        const Index b = bh / heads, h = bh % heads, nb = input.window.n_before;
        Kokkos::parallel_for(Kokkos::ThreadVectorRange(team, kRowLanes), [&](Index lane) {
          C sq[kColumns], sk[kColumns], sv[kColumns];
          for (Index j = 0; j < kColumns; ++j) sq[j] = sk[j] = sv[j] = C(0);
          // Whether the slice holds a row of dq or of dk and dv for this
          // position: most positions of a long row have none in a given slice
          // (about 20 slices a (batch, head) row at 64K), and those are
          // neither read nor written.
          bool has_q = false, has_kv = false;
          const auto add = [&](C* sums, const C* from) {
            for_lane_columns<kColumns>(lane, dh, [&](Index j, Index x) { sums[j] += from[x]; });
          };
          // Window slot `slot` of query chunk qc, if it is in the slice.
          const auto add_slot = [&](Index qc, Index slot) {
            const Index gq = bh * n_chunks + qc;
            if (gq < first || gq >= end) return;
            has_kv = true;
            add(sk, &s.k(gq - first, slot, 0));
            add(sv, &s.v(gq - first, slot, 0));
          };
          for (Index r = 0; r < input.rounds; ++r) {
            const Index item = input.undo.extent(0) ? Index(input.undo(bh, r * length + i)) : i;
            const Index kc = item / c, at = item % c;
            const Index g = bh * n_chunks + kc;
            if (g >= first && g < end) {
              has_q = true;
              add(sq, &s.dout(g - first, at, 0));
            }
            for (Index back = 0; back <= nb; ++back) {
              const Index slot = back * c + at;
              // The plain window: qc = kc + back.
              Index qc = kc + back;
              if (qc >= n_chunks) qc = input.window.wrap ? qc - n_chunks : -1;
              if (qc >= 0 && plain_window(input, b, qc) && input.key_item(b, qc, slot) == item)
                add_slot(qc, slot);
              // The cycle of real chunks (padding): back chunks on from kc.
              if (input.real.extent(0) == 0) continue;
              const Index n = input.real(b), per_round = length / c, rc = (n + c - 1) / c;
              if (n == 0 || kc % per_round >= rc) continue;
              const Index cycle = input.rounds * rc;
              const Index v = (kc / per_round * rc + kc % per_round + back) % cycle;
              const Index qr = v / rc * per_round + v % rc;
              if (!plain_window(input, b, qr) && input.key_item(b, qr, slot) == item)
                add_slot(qr, slot);
            }
          }
          // The position's rows: every load before any store (core/lane_rows.hpp).
          T* to_q = &dq(b, i, h, 0);
          T* to_k = &dk_scaled(b, i, h, 0);
          T* to_v = &dv(b, i, h, 0);
          if (has_q)
            for_lane_columns<kColumns>(lane, dh, [&](Index j, Index x) { sq[j] += load(to_q[x]); });
          if (has_kv)
            for_lane_columns<kColumns>(lane, dh, [&](Index j, Index x) {
              sk[j] += load(to_k[x]);
              sv[j] += load(to_v[x]);
            });
          if (has_q)
            for_lane_columns<kColumns>(lane, dh,
                                       [&](Index j, Index x) { to_q[x] = store<T>(sq[j]); });
          if (has_kv)
            for_lane_columns<kColumns>(lane, dh, [&](Index j, Index x) {
              to_k[x] = store<T>(sk[j]);
              to_v[x] = store<T>(sv[j]);
            });
        });
      });
}

// The forward in the batched shape: out and lse per item, as run_forward_chunks.
template <class T>
void batched_forward(const ChunkedInputs<T>& in, ItemView<T> out, ItemScalars<compute_t<T>> lse,
                     Index batch) {
  using C = compute_t<T>;
  using ops::Trans;
  Workspace& space = chunk_batched_workspace();
  const Index total = batch * in.heads * in.window.n_chunks;
  const auto bytes = chunk_batched_bytes(in.window.chunk, in.window.n_before, in.d_head, total,
                                         sizeof(C), chunk_slice_budget());
  Workspace::Frame frame(space);
  BatchedSlice<T> slice(frame, in.window, in.d_head, bytes.forward_slice, false);
  for (Index first = 0; first < total; first += bytes.forward_slice) {
    const auto part = slice.part(first, std::min(bytes.forward_slice, total - first));
    gather_chunk_slice<T>(in, part, ItemView<const T>());
    // S = Q K^T (the keys carry their scale)
    ops::batched_matmul<C>(part.q, Trans::No, part.k, Trans::Yes, part.s);
    chunk_softmax_rows<T>(in, part);
    // O = dropout(P) V, into the query buffer
    ops::batched_matmul<C>(part.s, Trans::No, part.v, Trans::No, part.q);
    scatter_chunk_outputs<T>(in, part, out, lse);
  }
}

// The backward in the batched shape: dq, dk_scaled and dv overwritten, as
// chunked_backward.
template <class T>
void batched_backward(const ChunkedInputs<T>& in, ItemScalars<const compute_t<T>> lse,
                      ItemScalars<const compute_t<T>> delta, ItemView<const T> dout, ItemView<T> dq,
                      ItemView<T> dk_scaled, ItemView<T> dv) {
  using C = compute_t<T>;
  using ops::Trans;
  fill_elements("chunk_batched_zero_dq", dq, store<T>(0));
  fill_elements("chunk_batched_zero_dk", dk_scaled, store<T>(0));
  fill_elements("chunk_batched_zero_dv", dv, store<T>(0));
  Workspace& space = chunk_batched_workspace();
  const Index total = Index(dout.extent(0)) * in.heads * in.window.n_chunks;
  const auto bytes = chunk_batched_bytes(in.window.chunk, in.window.n_before, in.d_head, total,
                                         sizeof(C), chunk_slice_budget());
  Workspace::Frame frame(space);
  BatchedSlice<T> slice(frame, in.window, in.d_head, bytes.backward_slice, true);
  for (Index first = 0; first < total; first += bytes.backward_slice) {
    const auto part = slice.part(first, std::min(bytes.backward_slice, total - first));
    gather_chunk_slice<T>(in, part, dout);
    // S = Q K^T, dP = dO V^T
    ops::batched_matmul<C>(part.q, Trans::No, part.k, Trans::Yes, part.s);
    ops::batched_matmul<C>(part.dout, Trans::No, part.v, Trans::Yes, part.dp);
    chunk_score_gradients<T>(in, part, lse, delta);
    // dV = dropout(P)^T dO (into V), dQ = dS K (into dO), dK = dS^T Q (into K)
    ops::batched_matmul<C>(part.s, Trans::Yes, part.dout, Trans::No, part.v);
    ops::batched_matmul<C>(part.dp, Trans::No, part.k, Trans::No, part.dout);
    ops::batched_matmul<C>(part.dp, Trans::Yes, part.q, Trans::No, part.k);
    reduce_chunk_gradients<T>(in, part, dq, dk_scaled, dv);
  }
}

}  // namespace reformer::attention::detail
