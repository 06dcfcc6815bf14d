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
  // Score of query item (pq) with key item (pk), masks applied. `constant` is
  // set when the score was replaced by a mask value (no gradient flows).
  KOKKOS_INLINE_FUNCTION T score(Index b, Index h, Index bh, Index pq, Index pk, const T* qv,
                                 bool& constant) const {
    constant = false;
    if (self_mask && pq == pk) {
      constant = true;
      return T(MaskValues<T>::self);
    }
    if ((causal && pk > pq) || (key_valid.extent(0) && key_valid(b, pk) == 0)) {
      constant = true;
      return T(MaskValues<T>::masked);
    }
    T dot = 0;
    for (Index d = 0; d < d_head; ++d) dot += qv[d] * k(b, pk, h, d);
    T s = dot * scale_of(b, pk, h);
    if (duplicate_correction) s -= compat::log(T(shared_windows(bh, pq, pk)));
    return s;
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

// Splits a flat thread index over (batch, item, head), heads fastest.
struct ItemIndex {
  Index b, s, h, bh;
  KOKKOS_INLINE_FUNCTION ItemIndex(Index idx, Index items, Index heads)
      : b(idx / (items * heads)), s(idx / heads % items), h(idx % heads), bh(b * heads + h) {}
};

// Forward: one thread per (batch, query item, head).
template <class T>
struct ChunkedForward {
  ChunkedInputs<T> in;
  ItemView<T> out;
  ItemScalars<T> lse;

  KOKKOS_INLINE_FUNCTION void operator()(Index idx) const {
    const ItemIndex at(idx, in.window.items, in.heads);
    const Index b = at.b, s = at.s, h = at.h, bh = at.bh, dh = in.d_head;
    const Index pq = in.position(bh, s), qc = s / in.window.chunk;
    T qv[kMaxHeadDim], acc[kMaxHeadDim];
    for (Index d = 0; d < dh; ++d) {
      qv[d] = in.q(b, pq, h, d);
      acc[d] = 0;
    }
    T m = T(MaskValues<T>::masked) * 2, l = 0;  // running max and normaliser
    for (Index slot = 0; slot < in.window.slots(); ++slot) {
      const Index t = in.window.key_item(qc, slot);
      if (t < 0) continue;
      const Index pk = in.position(bh, t);
      bool constant;
      const T sc = in.score(b, h, bh, pq, pk, qv, constant);
      const T m_new = sc > m ? sc : m;
      const T rescale = compat::exp(m - m_new), p = compat::exp(sc - m_new);
      const T w = p * in.drop_factor(bh, s, slot);
      l = l * rescale + p;
      for (Index d = 0; d < dh; ++d) acc[d] = acc[d] * rescale + w * in.v(b, pk, h, d);
      m = m_new;
    }
    for (Index d = 0; d < dh; ++d) out(b, s, h, d) = acc[d] / l;
    lse(b, s, h) = m + compat::log(l);
  }
};

// Backward, query side: dq (gradient of the query vector) per query item.
// dout, dlse: gradients of out and lse; delta = dout_s . out_s per item.
template <class T>
struct ChunkedBackwardQuery {
  ChunkedInputs<T> in;
  ItemScalars<const T> lse, dlse, delta;
  ItemView<const T> dout;
  ItemView<T> dq;

  KOKKOS_INLINE_FUNCTION void operator()(Index idx) const {
    const ItemIndex at(idx, in.window.items, in.heads);
    const Index b = at.b, s = at.s, h = at.h, bh = at.bh, dh = in.d_head;
    const Index pq = in.position(bh, s), qc = s / in.window.chunk;
    T qv[kMaxHeadDim], grad[kMaxHeadDim];
    for (Index d = 0; d < dh; ++d) {
      qv[d] = in.q(b, pq, h, d);
      grad[d] = 0;
    }
    const T base = delta(b, s, h) - dlse(b, s, h);
    for (Index slot = 0; slot < in.window.slots(); ++slot) {
      const Index t = in.window.key_item(qc, slot);
      if (t < 0) continue;
      const Index pk = in.position(bh, t);
      bool constant;
      const T sc = in.score(b, h, bh, pq, pk, qv, constant);
      if (constant) continue;
      const T p = compat::exp(sc - lse(b, s, h));
      T dov = 0;
      for (Index d = 0; d < dh; ++d) dov += dout(b, s, h, d) * in.v(b, pk, h, d);
      const T dscore = p * (in.drop_factor(bh, s, slot) * dov - base);
      const T ks = in.scale_of(b, pk, h);
      for (Index d = 0; d < dh; ++d) grad[d] += dscore * ks * in.k(b, pk, h, d);
    }
    for (Index d = 0; d < dh; ++d) dq(b, s, h, d) = grad[d];
  }
};

// Backward, key side: gradient of the scaled key vector (k * key_scale) and of
// v per key item, summing over the queries whose windows contain it.
template <class T>
struct ChunkedBackwardKey {
  ChunkedInputs<T> in;
  ItemScalars<const T> lse, dlse, delta;
  ItemView<const T> dout;
  ItemView<T> dk_scaled, dv;

  KOKKOS_INLINE_FUNCTION void operator()(Index idx) const {
    const ItemIndex at(idx, in.window.items, in.heads);
    const Index b = at.b, t = at.s, h = at.h, bh = at.bh, dh = in.d_head, c = in.window.chunk;
    const Index pk = in.position(bh, t), kc = t / c;
    T vv[kMaxHeadDim], gk[kMaxHeadDim], gv[kMaxHeadDim];
    for (Index d = 0; d < dh; ++d) {
      vv[d] = in.v(b, pk, h, d);
      gk[d] = gv[d] = 0;
    }
    T qv[kMaxHeadDim];
    for (Index back = 0; back <= in.window.n_before; ++back) {
      const Index qc = in.window.query_chunk(kc, back);
      if (qc < 0) continue;
      const Index slot = back * c + t % c;
      for (Index s = qc * c; s < (qc + 1) * c; ++s) {
        const Index pq = in.position(bh, s);
        for (Index d = 0; d < dh; ++d) qv[d] = in.q(b, pq, h, d);
        bool constant;
        const T sc = in.score(b, h, bh, pq, pk, qv, constant);
        const T p = compat::exp(sc - lse(b, s, h));
        const T drop = in.drop_factor(bh, s, slot);
        T dov = 0;
        for (Index d = 0; d < dh; ++d) {
          gv[d] += p * drop * dout(b, s, h, d);
          dov += dout(b, s, h, d) * vv[d];
        }
        if (constant) continue;
        const T dscore = p * (drop * dov - delta(b, s, h) + dlse(b, s, h));
        for (Index d = 0; d < dh; ++d) gk[d] += dscore * qv[d];
      }
    }
    for (Index d = 0; d < dh; ++d) {
      dk_scaled(b, t, h, d) = gk[d];
      dv(b, t, h, d) = gv[d];
    }
  }
};

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

// Runs the two backward passes.
template <class T>
void chunked_backward(const ChunkedInputs<T>& in, ItemScalars<const T> lse,
                      ItemScalars<const T> dlse, ItemScalars<const T> delta, ItemView<const T> dout,
                      ItemView<T> dq, ItemView<T> dk_scaled, ItemView<T> dv) {
  const Index n = Index(dout.extent(0)) * in.window.items * in.heads;
  Kokkos::parallel_for("chunked_attention_backward_query", range(n),
                       ChunkedBackwardQuery<T>{in, lse, dlse, delta, dout, dq});
  Kokkos::parallel_for("chunked_attention_backward_key", range(n),
                       ChunkedBackwardKey<T>{in, lse, dlse, delta, dout, dk_scaled, dv});
}

}  // namespace reformer::attention::detail
