// The batched shape of exact attention (ExactProducts::batched,
// reformer/attention/exact.hpp; internal header, included by exact.cpp).
//
// A slice of query rows [q0, q0 + rows) of one batch row at a time, every head
// at once, with the products on the vendor's strided-batched GEMM reading q,
// k, v, dout and writing out, dq, dk, dv in place (ops::StridedBatch: a head's
// rows are heads * d_head apart; nothing is gathered):
//   forward:  S = scale Q K^T [heads, rows, keys]; a row kernel masks S
//             (full attention's constants) and takes lse_i = m + log sum_j
//             exp(S_ij - m) and P = exp(S - m) / sum, dropped; O = P V.
//   backward: S = scale Q K^T and dP = dO V^T; a row kernel recomputes P from
//             its whole row (so rows that see only padding keep their exact
//             uniform weights) and writes dropout(P) into S and
//             dS = P (drop dP - D_i) into dP (0 where a constant replaced the
//             score); dV += dropout(P)^T dO, dQ = scale dS K, dK += scale dS^T Q.
// Causal slices without padding stop at their last row's key (the keys past it
// weigh exactly 0); with padding every key is taken, as full attention lets a
// query whose visible keys are all padding attend to every key uniformly.
// The scores exist for one slice at a time: heads * rows * keys values (twice
// in the backward) under chunk_slice_budget(), in the batched chunk shape's
// workspace. The slices run in a fixed order and dK, dV are summed slice by
// slice, so the results do not depend on the thread count.
#pragma once

#include "attention/chunked_kernels.hpp"
#include "reformer/attention/exact.hpp"
#include "reformer/core/element_map.hpp"
#include "reformer/core/lane_rows.hpp"
#include "reformer/ops/gemm.hpp"

#include <algorithm>
#include <type_traits>

namespace reformer::attention::detail {

// Query rows per slice: the most whose scores (and, backward, their
// gradients) fit `budget`, at least 1; and the buffer each call takes from the
// workspace. The forward takes as much as the backward will (when the whole
// problem fits the budget the backward's is twice the forward's), so that the
// first step does not grow the workspace between them and peak above the
// later ones.
struct ExactSlices {
  Index forward_rows = 0, backward_rows = 0;
  std::size_t bytes = 0;
};
inline ExactSlices exact_slices(Index heads, Index length_q, Index length_k,
                                std::size_t compute_bytes, std::size_t budget) {
  const std::size_t per_row =
      std::max<std::size_t>(1, std::size_t(heads) * std::size_t(length_k) * compute_bytes);
  const auto rows = [&](std::size_t row_bytes) {
    return std::max<Index>(1, std::min<Index>(length_q, Index(budget / row_bytes)));
  };
  ExactSlices slices;
  slices.forward_rows = rows(per_row);
  slices.backward_rows = rows(2 * per_row);
  slices.bytes = std::max(std::size_t(slices.forward_rows) * per_row,
                          std::size_t(slices.backward_rows) * 2 * per_row);
  return slices;
}

// What the batched shape reads besides the tensors: the masks and dropout (as
// the chunked kernels' inputs, whose mask_score applies full attention's
// masks), the lengths and the score scale.
template <class T>
struct ExactBatchedInputs {
  using C = compute_t<T>;
  ChunkedInputs<T> in;
  Index lq = 0, lk = 0;
  C scale = C(1);

  // The keys that rows [q0, q0 + rows) look at: [0, keys).
  Index keys(Index q0, Index rows) const {
    if (in.causal && in.key_valid.extent(0) == 0) return std::min(lk, q0 + rows);
    return lk;
  }
  // The heads of rows [first, first + rows) of batch row b of x ([batch,
  // length, heads, d_head]) as a batch of [rows, d_head] matrices.
  template <class V>
  static ops::StridedBatch<typename V::value_type> heads_of(const V& x, Index b, Index first,
                                                            Index rows) {
    const Index heads = x.extent(2), dh = x.extent(3);
    return {&x(b, first, 0, 0), heads, rows, dh, heads * dh, dh};
  }
};

// Scores [heads, rows, keys] in `buffer` (contiguous).
template <class C>
ops::StridedBatch<C> score_batch(C* buffer, Index heads, Index rows, Index keys) {
  return {buffer, heads, rows, keys, keys, rows * keys};
}
template <class C>
ops::StridedBatch<const C> read_only(const ops::StridedBatch<C>& x) {
  return {x.data, x.count, x.rows, x.cols, x.row_stride, x.batch_stride};
}

// The softmax statistics of query i's row of scaled scores s over its masked
// values (full attention's constants): top = their maximum, sum = sum_t
// exp(masked_t - top). With kStore the masked values replace s.
template <bool kStore, class T, class C>
KOKKOS_INLINE_FUNCTION void masked_row_stats(const TeamMember& team, const ChunkedInputs<T>& in,
                                             Index b, Index bh, Index i, C* s, Index keys, C& top,
                                             C& sum) {
  const auto masked = [&](Index t) {
    bool constant = true;
    return in.mask_score(b, bh, i, t, s[t], constant);
  };
  top = C(-1e30);
  if (kStore)
    // In place: each lane's loads ahead of its stores (core/lane_rows.hpp).
    Kokkos::parallel_reduce(
        Kokkos::ThreadVectorRange(team, kRowLanes),
        [&](Index lane, C& most) {
          load_then_store_lane_columns<C>(lane, keys, masked, [&](Index t, C x) {
            s[t] = x;
            most = x > most ? x : most;
          });
        },
        Kokkos::Max<C>(top));
  else
    Kokkos::parallel_reduce(
        Kokkos::ThreadVectorRange(team, keys),
        [&](Index t, C& most) {
          const C x = masked(t);
          most = x > most ? x : most;
        },
        Kokkos::Max<C>(top));
  sum = lane_sum<C>(team, keys,
                    [&](Index t) { return softmax_weight((kStore ? s[t] : masked(t)) - top); });
}

// body(team, e, h, i, bh) for row e of a slice's scores [heads, rows, keys]:
// head h, query i = q0 + e % rows, bh = b * heads + h (a row per group of lanes).
template <class T, class Body>
void for_score_rows(const char* label, const ExactBatchedInputs<T>& x, Index b, Index q0,
                    Index rows, const Body& body) {
  const Index heads = x.in.heads;
  for_lane_rows(
      label, heads * rows, KOKKOS_LAMBDA(const TeamMember& team, Index e) {
        const Index h = e / rows;
        body(team, e, h, q0 + e % rows, b * heads + h);
      });
}

// The row kernels between the products, on a slice's scaled scores S.
// Forward (kBackward false): S -> dropout(softmax(masked S)) in place, and lse.
// Backward: S -> dropout(P), dP (in grads) -> dS, with D_i = delta; P is
// recomputed from the whole row, not from lse (a row that sees only padding
// keeps its exact uniform weights).
template <bool kBackward, class T>
void exact_score_rows(const ExactBatchedInputs<T>& x, Index b, Index q0, Index rows, Index keys,
                      compute_t<T>* scores, compute_t<T>* grads, ItemScalars<compute_t<T>> lse,
                      ItemScalars<const compute_t<T>> delta) {
  using C = compute_t<T>;
  const auto input = x.in;
  const Index heads = input.heads, lq = x.lq, lk = x.lk;
  for_score_rows(
      kBackward ? "exact_batched_score_grad" : "exact_batched_softmax", x, b, q0, rows,
      KOKKOS_LAMBDA(const TeamMember& team, Index e, Index h, Index i, Index bh) {
        C* s = scores + e * keys;
        C top, sum;
        masked_row_stats<!kBackward>(team, input, b, bh, i, s, keys, top, sum);
        const C inverse = C(1) / sum;
        // (A plain `if`: nvcc's device lambdas may not capture a variable
        // first inside an `if constexpr` branch.)
        // Rows updated in place, each lane's loads ahead of its stores
        // (core/lane_rows.hpp, lane_map).
        if (kBackward) {
          C* g = grads + e * keys;
          const C d_i = delta(b, i, h);
          using Pair = Kokkos::pair<C, C>;
          lane_map<Pair>(
              team, keys,
              [&](Index t) {
                bool constant = true;
                const C p =
                    softmax_weight(input.mask_score(b, bh, i, t, s[t], constant) - top) * inverse;
                const C drop = input.dropout.template factor<C>(bh, heads, i, t, lq, lk);
                return Pair(p * drop, constant ? C(0) : p * (drop * g[t] - d_i));
              },
              [&](Index t, const Pair& x) {
                s[t] = x.first;
                g[t] = x.second;
              });
        } else {
          lane_map<C>(
              team, keys,
              [&](Index t) {
                return softmax_weight(s[t] - top) * inverse *
                       input.dropout.template factor<C>(bh, heads, i, t, lq, lk);
              },
              [&](Index t, C x) { s[t] = x; });
          Kokkos::single(Kokkos::PerThread(team), [&] { lse(b, i, h) = top + compat::log(sum); });
        }
      });
}

// out and lse of every query, a slice at a time (T float or double).
template <class T>
void exact_batched_forward(const ExactBatchedInputs<T>& x, ItemView<T> out,
                           ItemScalars<compute_t<T>> lse, Index batch) {
  using C = compute_t<T>;
  using ops::Trans;
  static_assert(std::is_same<T, C>::value, "the batched shape reads its tensors in place");
  const Index heads = x.in.heads;
  const auto slices = exact_slices(heads, x.lq, x.lk, sizeof(C), chunk_slice_budget());
  const Index slice = slices.forward_rows;
  Workspace::Frame frame(chunk_batched_workspace());
  auto buffer = frame.take<Kokkos::View<C*, Layout, MemSpace>>(Index(slices.bytes / sizeof(C)));
  for (Index b = 0; b < batch; ++b)
    for (Index q0 = 0; q0 < x.lq; q0 += slice) {
      const Index rows = std::min(slice, x.lq - q0), keys = x.keys(q0, rows);
      const auto s = score_batch(buffer.data(), heads, rows, keys);
      const auto q = x.heads_of(x.in.q, b, q0, rows);
      const auto k = x.heads_of(x.in.k, b, 0, keys), v = x.heads_of(x.in.v, b, 0, keys);
      // S = scale Q K^T
      ops::strided_batched_matmul<C>(q, Trans::No, k, Trans::Yes, s, x.scale);
      exact_score_rows<false, T>(x, b, q0, rows, keys, buffer.data(), nullptr, lse, {});
      // O = dropout(P) V
      ops::strided_batched_matmul<C>(read_only(s), Trans::No, v, Trans::No,
                                     x.heads_of(out, b, q0, rows));
    }
}

// dq, dk, dv (overwritten), a slice at a time (T float or double).
template <class T>
void exact_batched_backward(const ExactBatchedInputs<T>& x, ItemScalars<const compute_t<T>> delta,
                            ItemView<const T> dout, ItemView<T> dq, ItemView<T> dk,
                            ItemView<T> dv) {
  using C = compute_t<T>;
  using ops::Trans;
  static_assert(std::is_same<T, C>::value, "the batched shape reads its tensors in place");
  fill_elements("exact_batched_zero_dk", dk, T(0));
  fill_elements("exact_batched_zero_dv", dv, T(0));
  const Index heads = x.in.heads, batch = dout.extent(0);
  const auto slices = exact_slices(heads, x.lq, x.lk, sizeof(C), chunk_slice_budget());
  const Index slice = slices.backward_rows;
  Workspace::Frame frame(chunk_batched_workspace());
  auto buffer = frame.take<Kokkos::View<C*, Layout, MemSpace>>(Index(slices.bytes / sizeof(C)));
  C* scores = buffer.data();
  C* grads = scores + heads * slice * x.lk;
  for (Index b = 0; b < batch; ++b)
    for (Index q0 = 0; q0 < x.lq; q0 += slice) {
      const Index rows = std::min(slice, x.lq - q0), keys = x.keys(q0, rows);
      const auto s = score_batch(scores, heads, rows, keys);
      const auto ds = score_batch(grads, heads, rows, keys);
      const auto q = x.heads_of(x.in.q, b, q0, rows), d_o = x.heads_of(dout, b, q0, rows);
      const auto k = x.heads_of(x.in.k, b, 0, keys), v = x.heads_of(x.in.v, b, 0, keys);
      // S = scale Q K^T, dP = dO V^T
      ops::strided_batched_matmul<C>(q, Trans::No, k, Trans::Yes, s, x.scale);
      ops::strided_batched_matmul<C>(d_o, Trans::No, v, Trans::Yes, ds);
      exact_score_rows<true, T>(x, b, q0, rows, keys, scores, grads, {}, delta);
      // dV += dropout(P)^T dO, dQ = scale dS K, dK += scale dS^T Q
      ops::strided_batched_matmul<C>(read_only(s), Trans::Yes, d_o, Trans::No,
                                     x.heads_of(dv, b, 0, keys), C(1), C(1));
      ops::strided_batched_matmul<C>(read_only(ds), Trans::No, k, Trans::No,
                                     x.heads_of(dq, b, q0, rows), x.scale);
      ops::strided_batched_matmul<C>(read_only(ds), Trans::Yes, q, Trans::No,
                                     x.heads_of(dk, b, 0, keys), x.scale, C(1));
    }
}

}  // namespace reformer::attention::detail
