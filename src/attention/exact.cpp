// Exact attention in O(L) memory: fused team kernels over tiles (see exact.hpp).
//
// Every product runs on tiles in team scratch through team_multiply (register
// blocks, core/tile_multiply.hpp). Queries are pre-multiplied by the score
// scale when they are loaded, so S = Qs K^T, dK = dS^T Qs and dQ = scale dS K.
// Tiles are padded with zero rows (past the sequence) and zero columns (d_head
// rounded up to whole register blocks); padded keys are "absent" (position -1)
// and take no part in any softmax, padded queries are never written out.
//
// Masks and their constants are those of full attention (rows of queries:
// the chunked kernels' mask_row; rows of keys: mask_key_row); the dropout mask of score (bh, i, j)
// is full attention's ((bh * Lq + i) * Lk + j), a pure function of the position pair, so forward
// and both backward passes replay it whatever the tiling.
#include "reformer/attention/exact.hpp"

#include "attention/attention_checks.hpp"
#include "attention/chunked_kernels.hpp"
#include "attention/exact_batched.hpp"
#include "attention/tiled/backward.hpp"
#include "attention/tiled/online_softmax.hpp"
#include "reformer/core/instantiate.hpp"
#include "reformer/core/tile_multiply.hpp"

#include <cmath>

namespace reformer::attention {
namespace {

using detail::Scratch2;
using detail::ScratchInts;
using detail::zero;
using Ints1 = Kokkos::View<const int*, Layout, MemSpace>;

// Start of every online-softmax maximum, below every mask constant.
constexpr double kNoScore = -1e30;

// What every exact kernel reads: the inputs and masks (as the chunked kernels'
// inputs, whose mask_row applies the masks to a row of scores), the tiling and
// the first non-padding key of each batch entry.
template <class T, class Shape>
struct ExactInputs {
  using C = compute_t<T>;
  static constexpr Index BQ = Shape::query_tile, BK = Shape::key_tile;

  detail::ChunkedInputs<T> in;
  Index lq = 0, lk = 0, dpad = 0, nq = 0, nk = 0;
  C scale = C(1);
  // With padding: the first non-padding key of each batch entry (Lk if none).
  // Empty without padding. Without the self-mask, queries before first_valid(b)
  // (causal) or every query of an entry without a valid key (not causal) see
  // only padding: every score is the mask constant, so, as in full attention,
  // they attend uniformly to every key, and no key tile may be skipped for them.
  Ints1 first_valid;
  // TileLoops::elements (core/team_scratch.hpp): the passes between the
  // products take a thread per element of a tile instead of a row.
  bool elements = false;

  // The padded head size and the tile counts of Shape, from d_head, lq, lk.
  void count_tiles() {
    dpad = Shape::pad_columns(in.d_head);
    nq = (lq + BQ - 1) / BQ;
    nk = (lk + BK - 1) / BK;
  }
  // The same inputs tiled by Other (the backward's passes may tile otherwise
  // than the forward).
  template <class Other>
  ExactInputs<T, Other> tiled() const {
    ExactInputs<T, Other> y;
    y.in = in;
    y.lq = lq;
    y.lk = lk;
    y.scale = scale;
    y.first_valid = first_valid;
    y.elements = elements;
    y.count_tiles();
    return y;
  }

  KOKKOS_INLINE_FUNCTION bool uniform_row(Index b, Index i) const {
    if (in.self_mask || first_valid.extent(0) == 0) return false;
    return in.causal ? i < Index(first_valid(b)) : Index(first_valid(b)) >= lk;
  }
  // Backward recomputes P = exp((score - base) - rest): base = lse, rest = 0,
  // except for uniform rows, whose lse (the mask constant + log Lk) has lost
  // the digits of log Lk to rounding: base = mask constant, rest = log Lk, so
  // that P = 1 / Lk to the last bit, as in full attention.
  KOKKOS_INLINE_FUNCTION void softmax_base(Index b, Index i, C lse_i, C& base, C& rest) const {
    const bool uniform = uniform_row(b, i);
    base = uniform ? C(MaskValues<C>::masked) : lse_i;
    rest = uniform ? C(compat::log(C(lk))) : C(0);
  }

  // Key tiles that query tile qt of batch entry b visits: all, or causal up to
  // the diagonal.
  KOKKOS_INLINE_FUNCTION Index key_tiles(Index b, Index qt) const {
    if (!in.causal) return nk;
    if (uniform_row(b, qt * BQ)) return nk;
    const Index last = (qt + 1) * BQ < lq ? (qt + 1) * BQ - 1 : lq - 1;
    return last / BK + 1;
  }
  KOKKOS_INLINE_FUNCTION C drop(Index bh, Index i, Index j) const {
    return in.dropout.template factor<C>(bh, in.heads, i, j, lq, lk);
  }
  // The backward's loads of whole sequences for (b, h) (tiled/backward.hpp).
  template <class D, class L>
  KOKKOS_INLINE_FUNCTION detail::SequenceTiles<T> sequence(Index b, Index h, const D& dout,
                                                           const L& lse, const L& delta) const {
    return {in.k, in.v, dout, lse, delta, b, h, lq, lk, in.d_head, elements};
  }
  // Rows [first, first + rows) of x as a tile for team_multiply: read in
  // place (returns a pointer into x, ld = its row stride) when they are whole
  // rows inside the sequence and d_head needs no padding, else loaded into dst
  // with factor 1 (ld = dpad). Streamed tiles skip a copy this way.
  // bf16 rows are always loaded (widened to float32).
  template <class X>
  KOKKOS_INLINE_FUNCTION const C* tile_rows(const TeamMember& team, const X& x, Index b, Index h,
                                            Index first, Index rows, Index length, Scratch2<C> dst,
                                            Index& ld) const {
    if constexpr (!is_reduced_precision<T>) {
      if (in.d_head == dpad && first + rows <= length) {
        ld = Index(x.stride(1));
        return &x(b, first, h, 0);
      }
    }
    detail::load_tile_rows(team, detail::tile_source(x, b, h, first, length), rows, in.d_head, C(1),
                           dst, elements);
    ld = dpad;
    return &dst(0, 0);
  }
  // Positions of a tile's rows (-1 past the sequence).
  KOKKOS_INLINE_FUNCTION void positions(const TeamMember& team, Index first, Index n, Index length,
                                        ScratchInts pos) const {
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, n),
                         [&](Index r) { pos(r) = first + r < length ? int(first + r) : -1; });
  }
  // Scores of key j (a row of S^T) against the queries [first, first + BQ),
  // with the masks of full attention. Absent keys or queries get kNoScore.
  // kGrad: grad[s] = 1 where the score is a dot product, 0 where a constant
  // replaced it. Without padding everything but the row's key is a select: the
  // loop vectorises.
  // The first `columns` queries of the tile (the forward's live columns).
  KOKKOS_INLINE_FUNCTION void mask_key_row(Index b, Index j, Index first, C* row,
                                           Index columns = BQ) const {
    if (j >= lk) {
      for (Index s = 0; s < columns; ++s) row[s] = C(kNoScore);
      return;
    }
    const bool padded = in.key_valid.extent(0) && in.key_valid(b, j) == 0;
    const bool causal = in.causal, self_mask = in.self_mask;
    const C self_value = C(MaskValues<C>::self), masked_value = C(MaskValues<C>::masked);
    for (Index s = 0; s < columns; ++s) {
      const Index i = first + s;
      const bool absent = i >= lq, self = self_mask && i == j;
      const bool constant = padded || (causal && j > i);
      const C dot = row[s];
      row[s] = absent ? C(kNoScore) : self ? self_value : constant ? masked_value : dot;
    }
  }
  // True when no score of tile pair (qc, kc) is masked or absent: no padding,
  // whole tiles inside both sequences, wholly below the causal diagonal and
  // off the self-mask diagonal. Such tiles (all but O(L / tile) of them) skip
  // the mask pass, and their gradient mask is all ones.
  KOKKOS_INLINE_FUNCTION bool plain_tile(Index qc, Index kc) const {
    const Index q0 = qc * BQ, k0 = kc * BK;
    if (in.key_valid.extent(0) != 0 || q0 + BQ > lq || k0 + BK > lk) return false;
    if (in.causal && k0 + BK - 1 > q0) return false;
    return !(in.self_mask && k0 < q0 + BQ && q0 < k0 + BK);
  }
  // Backward along query i (row r of a query tile) against a tile of keys at
  // positions posk: srow holds its scores (S row), drow dP = (dout_i . v_j);
  // afterwards srow = dropout(P) and drow = dS = P (drop dP - D), zero where a
  // constant replaced the score (grad: scratch for mask_row's gradient mask).
  KOKKOS_INLINE_FUNCTION void query_row_gradients(Index b, Index bh, Index i, const int* posk,
                                                  Scratch2<C> ld, Index r, bool dropout, bool plain,
                                                  C* row, C* drow, C* grad) const {
    if (i >= lq) {
      for (Index t = 0; t < BK; ++t) row[t] = drow[t] = C(0);
      return;
    }
    const C base = ld(0, r), d_i = ld(1, r), rest = ld(2, r);
    if (plain && !dropout) {  // nothing masked: grad = 1
      for (Index t = 0; t < BK; ++t) {
        const C p = softmax_weight((row[t] - base) - rest);
        drow[t] = p * (drow[t] - d_i);
        row[t] = p;
      }
      return;
    }
    in.template mask_row<true>(b, bh, i, posk, BK, row, grad);
    if (dropout) {
      for (Index t = 0; t < BK; ++t) {
        const C keep = posk[t] < 0 ? C(0) : drop(bh, i, posk[t]);
        const C p = softmax_weight((row[t] - base) - rest);
        drow[t] = p * grad[t] * (keep * drow[t] - d_i);
        row[t] = p * keep;
      }
    } else {
      for (Index t = 0; t < BK; ++t) {
        const C p = softmax_weight((row[t] - base) - rest);
        drow[t] = p * grad[t] * (drow[t] - d_i);
        row[t] = p;
      }
    }
  }
  // query_row_gradients for one pair (query i, row r of its tile; the key at
  // position pk, -1 for none), a thread per element: the same arithmetic in
  // the same order, so the same bits.
  KOKKOS_INLINE_FUNCTION void query_pair_gradient(Index b, Index bh, Index i, int pk,
                                                  Scratch2<C> ld, Index r, bool dropout, bool plain,
                                                  C& score, C& dscore) const {
    if (i >= lq) {
      score = dscore = C(0);
      return;
    }
    const C base = ld(0, r), d_i = ld(1, r), rest = ld(2, r);
    if (plain && !dropout) {
      const C p = softmax_weight((score - base) - rest);
      dscore = p * (dscore - d_i);
      score = p;
      return;
    }
    bool constant = true;
    const C masked = pk < 0 ? C(-1e30) : in.mask_score(b, bh, i, pk, score, constant);
    const C grad = pk < 0 || constant ? C(0) : C(1);
    const C p = softmax_weight((masked - base) - rest);
    if (dropout) {
      const C keep = pk < 0 ? C(0) : drop(bh, i, pk);
      dscore = p * grad * (keep * dscore - d_i);
      score = p * keep;
    } else {
      dscore = p * grad * (dscore - d_i);
      score = p;
    }
  }
  // Backward along key j: srow holds its scores (S^T row), drow dP^T = (v_j . dout_i);
  // afterwards srow = dropout(P)^T and drow = dS^T = P (drop dP - D), zero where a
  // constant replaced the score.
  KOKKOS_INLINE_FUNCTION void key_row_gradients(Index b, Index bh, Index j, Index first,
                                                Scratch2<C> ld, bool plain, C* srow_,
                                                C* drow_) const {
    C* srow = srow_;
    C* drow = drow_;
    if (j >= lk) {
      for (Index s = 0; s < BQ; ++s) srow[s] = drow[s] = C(0);
      return;
    }
    if (plain && in.dropout.rate == 0.0) {  // nothing masked: grad = 1
      const C* base = &ld(0, 0);
      const C* d = &ld(1, 0);
      const C* rest = &ld(2, 0);
      for (Index s = 0; s < BQ; ++s) {
        const C p = softmax_weight((srow[s] - base[s]) - rest[s]);
        drow[s] = p * (drow[s] - d[s]);
        srow[s] = p;
      }
      return;
    }
    const bool padded = in.key_valid.extent(0) && in.key_valid(b, j) == 0;
    const bool causal = in.causal, self_mask = in.self_mask;
    const C self_value = C(MaskValues<C>::self), masked_value = C(MaskValues<C>::masked);
    const C* base = &ld(0, 0);
    const C* d = &ld(1, 0);
    const C* rest = &ld(2, 0);
    if (in.dropout.rate > 0.0) {
      for (Index s = 0; s < BQ; ++s) {
        const Index i = first + s;
        const bool self = self_mask && i == j, constant = padded || (causal && j > i);
        const C dot = srow[s];  // read unconditionally, so that the selects vectorise
        const C score = self ? self_value : constant ? masked_value : dot;
        const C p = i >= lq ? C(0) : softmax_weight((score - base[s]) - rest[s]);
        const C keep = i >= lq ? C(0) : drop(bh, i, j);
        drow[s] = self || constant ? C(0) : p * (keep * drow[s] - d[s]);
        srow[s] = p * keep;
      }
    } else {
      // Mask first (absent queries get kNoScore, so P = 0 there), then a loop
      // of arithmetic and index selects only: both vectorise.
      mask_key_row(b, j, first, srow);
      for (Index s = 0; s < BQ; ++s) {
        const Index i = first + s;
        const bool self = self_mask && i == j, constant = padded || (causal && j > i);
        const C grad = self || constant ? C(0) : C(1);
        const C p = softmax_weight((srow[s] - base[s]) - rest[s]);
        drow[s] = p * grad * (drow[s] - d[s]);
        srow[s] = p;
      }
    }
  }
  // key_row_gradients for one pair (key j, query i = first + s), a thread per
  // element: the same arithmetic in the same order, so the same bits.
  KOKKOS_INLINE_FUNCTION void key_pair_gradient(Index b, Index bh, Index j, Index i, Scratch2<C> ld,
                                                Index s, bool plain, C& score, C& dscore) const {
    if (j >= lk) {
      score = dscore = C(0);
      return;
    }
    const C base = ld(0, s), d = ld(1, s), rest = ld(2, s);
    if (plain && in.dropout.rate == 0.0) {
      const C p = softmax_weight((score - base) - rest);
      dscore = p * (dscore - d);
      score = p;
      return;
    }
    const bool padded = in.key_valid.extent(0) && in.key_valid(b, j) == 0;
    const bool self = in.self_mask && i == j, constant = padded || (in.causal && j > i);
    const C value = self ? C(MaskValues<C>::self) : constant ? C(MaskValues<C>::masked) : score;
    if (in.dropout.rate > 0.0) {
      const C p = i >= lq ? C(0) : softmax_weight((value - base) - rest);
      const C keep = i >= lq ? C(0) : drop(bh, i, j);
      dscore = self || constant ? C(0) : p * (keep * dscore - d);
      score = p * keep;
    } else {
      const C grad = self || constant ? C(0) : C(1);
      const C p = softmax_weight(((i >= lq ? C(kNoScore) : value) - base) - rest);
      dscore = p * grad * (dscore - d);
      score = p;
    }
  }
};

// The score policy of the forward (tiled/online_softmax.hpp) for one team: S^T =
// K Qs^T of a key tile against the team's queries qt, with the masks of full
// attention (tiles that need none skip the pass). K and V are read in place
// where they can be, else loaded into ks and vs.
template <class T, class Shape>
struct ExactScores {
  using C = compute_t<T>;
  static constexpr Index BQ = Shape::query_tile, BK = Shape::key_tile;
  static constexpr double no_score = kNoScore;
  const ExactInputs<T, Shape>& x;
  Index b, h, bh, qc;
  Scratch2<C> qt, ks, vs;

  KOKKOS_INLINE_FUNCTION C weight(C score, C base) const { return softmax_weight(score - base); }
  KOKKOS_INLINE_FUNCTION const C* scores(const TeamMember& team, Index kc, Scratch2<C> st,
                                         Index& vld) const {
    const Index dp = x.dpad;
    Index kld = dp;
    const C* kp = x.tile_rows(team, x.in.k, b, h, kc * BK, BK, x.lk, ks, kld);
    const C* vp = x.tile_rows(team, x.in.v, b, h, kc * BK, BK, x.lk, vs, vld);
    team.team_barrier();
    // Only the columns of queries the engine reads (its live_columns).
    const Index live = detail::OnlineSoftmax<C, Shape>::live_columns(qc * BQ, x.lq);
    team_multiply<false, Shape>(team, BK, live, dp, &st(0, 0), BQ, kp, kld, 1, &qt(0, 0), BQ);
    team.team_barrier();
    if (!x.plain_tile(qc, kc)) {
      Kokkos::parallel_for(Kokkos::TeamThreadRange(team, BK), [&](Index t) {
        x.mask_key_row(b, kc * BK + t, qc * BQ, &st(t, 0), live);
      });
      team.team_barrier();
    }
    return vp;
  }
  KOKKOS_INLINE_FUNCTION C keep(Index i, Index j) const {
    return i >= x.lq || j >= x.lk ? C(0) : x.drop(bh, i, j);
  }
};

// Forward: one team per (batch * head, query tile), heaviest tiles first. The
// team keeps its queries transposed (Qs^T) and streams key tiles as rows:
// S^T = K Qs^T, so that only contiguous rows are loaded per key tile. The
// online softmax (tiled/online_softmax.hpp) runs down the columns of S^T (one
// per query), vectorised along the row.
template <class T, class Shape>
struct ExactForward {
  using C = compute_t<T>;
  static constexpr Index BQ = Shape::query_tile, BK = Shape::key_tile;
  ExactInputs<T, Shape> x;
  View4<T> out;
  View3<C> lse;
  int level = 0;

  // Qs^T, K and V rows, and the online softmax's tiles.
  size_t scratch_bytes() const {
    const Index dp = x.dpad;
    return Scratch2<C>::shmem_size(dp, BQ) + 2 * Scratch2<C>::shmem_size(BK, dp) +
           detail::OnlineSoftmax<C, Shape>::tile_bytes(BQ, BK, dp);
  }

  KOKKOS_INLINE_FUNCTION void operator()(const TeamMember& team) const {
    const Index bhs = x.in.heads * out.extent(0), heads = x.in.heads, dh = x.in.d_head;
    const Index dp = x.dpad;
    const Index qc = x.nq - 1 - team.league_rank() / bhs, bh = team.league_rank() % bhs;
    const Index b = bh / heads, h = bh % heads;
    const auto scratch = team.team_scratch(level);
    Scratch2<C> qt(scratch, dp, BQ), o(scratch, BQ, dp), ks(scratch, BK, dp), vs(scratch, BK, dp),
        st(scratch, BK, BQ), stats(scratch, 3, BQ);
    detail::load_tile_cols(team, detail::tile_source(x.in.q, b, h, qc * BQ, x.lq), BQ, dh, x.scale,
                           qt);
    const ExactScores<T, Shape> scores{x, b, h, bh, qc, qt, ks, vs};
    detail::OnlineSoftmax<C, Shape>{o, st, stats, x.elements}.run(
        team, scores, 0, x.key_tiles(b, qc), x.in.dropout.rate > 0.0, b, h, qc * BQ, x.lq, dh, out,
        lse);
  }
};

// Exact attention's part of both backward passes (tiled/backward.hpp) for one
// team: the scores are Qs K^T with the masks of full attention (the chunked
// kernels' mask_row along a query, mask_key_row along a key), and tiles that
// need no mask (plain_tile) skip it.
template <class T, class Shape>
struct ExactGradients {
  using C = compute_t<T>;
  static constexpr Index BQ = Shape::query_tile, BK = Shape::key_tile;
  const ExactInputs<T, Shape>& x;
  detail::SequenceTiles<T> seq;
  Index bh;
  // Key pass only: the gradient masks of mask_row and the keys' positions.
  Scratch2<C> grad_masks;
  ScratchInts posk;

  static size_t key_pass_bytes() {
    return Scratch2<C>::shmem_size(BQ, BK) + ScratchInts::shmem_size(BK);
  }
  KOKKOS_INLINE_FUNCTION void softmax_base(Index i, C lse_i, C& base, C& rest) const {
    x.softmax_base(seq.b, i, lse_i, base, rest);
  }
  template <class Pass>
  KOKKOS_INLINE_FUNCTION void add_products(const TeamMember&, Index, Index, const Pass&) const {}

  // Key pass: every query tile up to the causal diagonal.
  KOKKOS_INLINE_FUNCTION void query_tiles(Index, Index& begin, Index& end) const {
    begin = 0;
    end = x.nq;
  }
  KOKKOS_INLINE_FUNCTION bool visits(Index qc, Index kc) const {
    return kc < x.key_tiles(seq.b, qc);
  }
  KOKKOS_INLINE_FUNCTION void load_key_tile(const TeamMember& team, Index kc,
                                            const detail::KeyPass<C, Shape>& t) const {
    seq.load_key_cols(team, kc, t);
    x.positions(team, kc * BK, BK, x.lk, posk);
  }
  KOKKOS_INLINE_FUNCTION void load_query_tile(const TeamMember& team, Index qc, Index,
                                              const detail::KeyPass<C, Shape>& t) const {
    seq.load_dout_rows(team, *this, qc, t);
    detail::load_tile_rows(team, seq.rows(x.in.q, qc * BQ, x.lq), BQ, x.in.d_head, x.scale, t.qs,
                           x.elements);
  }
  // Key pass: S rows (queries) into drop P and dP into dS.
  KOKKOS_INLINE_FUNCTION void gradients(const TeamMember& team, Index qc, Index kc,
                                        const detail::KeyPass<C, Shape>& t) const {
    const Index b = seq.b;
    const bool dropout = x.in.dropout.rate > 0.0, plain = x.plain_tile(qc, kc);
    if (x.elements)
      Kokkos::parallel_for(Kokkos::TeamThreadRange(team, BQ * BK), [&](Index e) {
        const Index r = e / BK, c = e % BK;
        x.query_pair_gradient(b, bh, qc * BQ + r, posk(c), t.ld, r, dropout, plain, t.s(r, c),
                              t.dps(r, c));
      });
    else
      Kokkos::parallel_for(Kokkos::TeamThreadRange(team, BQ), [&](Index r) {
        x.query_row_gradients(b, bh, qc * BQ + r, &posk(0), t.ld, r, dropout, plain, &t.s(r, 0),
                              &t.dps(r, 0), &grad_masks(r, 0));
      });
  }

  // Query pass: the key tiles up to the causal diagonal.
  KOKKOS_INLINE_FUNCTION void key_tiles(Index qc, Index& begin, Index& end) const {
    begin = 0;
    end = x.key_tiles(seq.b, qc);
  }
  KOKKOS_INLINE_FUNCTION void load_query_tile(const TeamMember& team, Index qc,
                                              const detail::QueryPass<C, Shape>& t) const {
    detail::load_tile_cols(team, seq.rows(x.in.q, qc * BQ, x.lq), BQ, x.in.d_head, x.scale, t.qt);
    seq.load_dout_cols(team, *this, qc, t);
  }
  KOKKOS_INLINE_FUNCTION void load_key_tile(const TeamMember& team, Index, Index kc,
                                            const detail::QueryPass<C, Shape>& t) const {
    seq.load_key_rows(team, kc, t);
  }
  // Query pass: S^T rows (keys) into drop P^T and dP^T into dS^T.
  KOKKOS_INLINE_FUNCTION void gradients(const TeamMember& team, Index qc, Index kc,
                                        const detail::QueryPass<C, Shape>& t) const {
    const Index b = seq.b;
    const bool plain = x.plain_tile(qc, kc);
    if (x.elements)
      Kokkos::parallel_for(Kokkos::TeamThreadRange(team, BK * BQ), [&](Index e) {
        const Index r = e / BQ, c = e % BQ;
        x.key_pair_gradient(b, bh, kc * BK + r, qc * BQ + c, t.ld, c, plain, t.st(r, c),
                            t.dpt(r, c));
      });
    else
      Kokkos::parallel_for(Kokkos::TeamThreadRange(team, BK), [&](Index r) {
        x.key_row_gradients(b, bh, kc * BK + r, qc * BQ, t.ld, plain, &t.st(r, 0), &t.dpt(r, 0));
      });
  }
  template <class Pass>
  KOKKOS_INLINE_FUNCTION void add_sums(const TeamMember&, Index, Index, const Pass&) const {}
};

// Backward, keys: one team per (batch * head, key tile) runs the key pass
// (tiled/backward.hpp) over the query tiles that see it.
template <class T, class Shape>
struct ExactBackwardKeys {
  using C = compute_t<T>;
  using Pass = detail::KeyPass<C, Shape>;
  ExactInputs<T, Shape> x;
  Kokkos::View<const C***, Layout, MemSpace> lse, delta;
  Kokkos::View<const T****, Layout, MemSpace> dout;
  View4<T> dk, dv;
  int level = 0;

  size_t scratch_bytes() const {
    return Pass::tile_bytes(x.dpad) + ExactGradients<T, Shape>::key_pass_bytes();
  }

  KOKKOS_INLINE_FUNCTION void operator()(const TeamMember& team) const {
    const Index bhs = x.in.heads * dout.extent(0);
    const Index kc = team.league_rank() / bhs, bh = team.league_rank() % bhs;
    const auto scratch = team.team_scratch(level);
    const Pass pass(scratch, x.dpad);
    const ExactGradients<T, Shape> policy{
        x, x.sequence(bh / x.in.heads, bh % x.in.heads, dout, lse, delta), bh,
        Scratch2<C>(scratch, Shape::query_tile, Shape::key_tile),
        ScratchInts(scratch, Shape::key_tile)};
    pass.run(team, policy, kc, [](Index) {});
    policy.seq.store_keys(team, kc, pass, dk, dv);
  }
};

// Backward, queries: one team per (batch * head, query tile), heaviest first,
// runs the query pass (tiled/backward.hpp); dQ = scale dQs at the end.
template <class T, class Shape>
struct ExactBackwardQueries {
  using C = compute_t<T>;
  using Pass = detail::QueryPass<C, Shape>;
  static constexpr Index BQ = Shape::query_tile;
  ExactInputs<T, Shape> x;
  Kokkos::View<const C***, Layout, MemSpace> lse, delta;
  Kokkos::View<const T****, Layout, MemSpace> dout;
  View4<T> dq;
  int level = 0;

  size_t scratch_bytes() const { return Pass::tile_bytes(x.dpad); }

  KOKKOS_INLINE_FUNCTION void operator()(const TeamMember& team) const {
    const Index bhs = x.in.heads * dout.extent(0), dh = x.in.d_head, lq = x.lq;
    const Index qc = x.nq - 1 - team.league_rank() / bhs, bh = team.league_rank() % bhs;
    const Index b = bh / x.in.heads, h = bh % x.in.heads;
    const auto scratch = team.team_scratch(level);
    const Pass pass(scratch, x.dpad);
    const ExactGradients<T, Shape> policy{x, x.sequence(b, h, dout, lse, delta), bh, {}, {}};
    pass.run(team, policy, qc);
    const C scale = x.scale;
    const auto dqs = pass.dqs;
    if (x.elements) {
      Kokkos::parallel_for(Kokkos::TeamThreadRange(team, BQ * dh), [&](Index e) {
        const Index r = e / dh, c = e % dh, i = qc * BQ + r;
        if (i < lq) dq(b, i, h, c) = store<T>(dqs(r, c) * scale);
      });
      return;
    }
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, BQ), [&](Index r) {
      const Index i = qc * BQ + r;
      if (i >= lq) return;
      T* dst = &dq(b, i, h, 0);
      for (Index c = 0; c < dh; ++c) dst[c] = store<T>(dqs(r, c) * scale);
    });
  }
};

// Backward in one pass (host): one team per (batch * head) runs the key pass
// for each of its key tiles, also keeping K as rows, and after each query
// tile adds dS K into dq rows that only this team writes (scaled once at the
// end).
template <class T, class Shape>
struct ExactBackwardOnePass {
  using C = compute_t<T>;
  using Pass = detail::KeyPass<C, Shape>;
  static constexpr Index BQ = Shape::query_tile, BK = Shape::key_tile;
  ExactInputs<T, Shape> x;
  Kokkos::View<const C***, Layout, MemSpace> lse, delta;
  Kokkos::View<const T****, Layout, MemSpace> dout;
  View4<T> dq, dk, dv;
  // The sums of dq before the scale: dq itself for float and double, a
  // float32 buffer for bf16 (so that each dq element is rounded once).
  View4<C> dq_sum;
  int level = 0;

  // The key pass's tiles, then K rows and a tile of dS K.
  size_t scratch_bytes() const {
    const Index dp = x.dpad;
    return Pass::tile_bytes(dp) + ExactGradients<T, Shape>::key_pass_bytes() +
           Scratch2<C>::shmem_size(BK, dp) + Scratch2<C>::shmem_size(BQ, dp);
  }

  KOKKOS_INLINE_FUNCTION void operator()(const TeamMember& team) const {
    const Index heads = x.in.heads, dh = x.in.d_head;
    const Index dp = x.dpad, lq = x.lq, lk = x.lk;
    const Index bh = team.league_rank(), b = bh / heads, h = bh % heads;
    const auto scratch = team.team_scratch(level);
    const Pass pass(scratch, dp);
    const ExactGradients<T, Shape> policy{x, x.sequence(b, h, dout, lse, delta), bh,
                                          Scratch2<C>(scratch, BQ, BK), ScratchInts(scratch, BK)};
    Scratch2<C> ks(scratch, BK, dp), dqs(scratch, BQ, dp);
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, lq), [&](Index i) {
      C* dst = &dq_sum(b, i, h, 0);
      for (Index c = 0; c < dh; ++c) dst[c] = C(0);
    });
    for (Index kc = 0; kc < x.nk; ++kc) {
      team.team_barrier();
      detail::load_tile_rows(team, detail::tile_source(x.in.k, b, h, kc * BK, lk), BK, dh, C(1), ks,
                             x.elements);
      pass.run(team, policy, kc, [&](Index qc) {
        team_multiply<false, Shape>(team, BQ, dp, BK, &dqs(0, 0), dp, &pass.dps(0, 0), BK, 1,
                                    &ks(0, 0), dp);
        team.team_barrier();
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, BQ), [&](Index r) {
          const Index i = qc * BQ + r;
          if (i >= lq) return;
          C* dst = &dq_sum(b, i, h, 0);
          const C* from = &dqs(r, 0);
          for (Index c = 0; c < dh; ++c) dst[c] += from[c];
        });
      });
      policy.seq.store_keys(team, kc, pass, dk, dv);
    }
    team.team_barrier();
    const C scale = x.scale;
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, lq), [&](Index i) {
      C* sum = &dq_sum(b, i, h, 0);
      if constexpr (is_reduced_precision<T>) {
        T* dst = &dq(b, i, h, 0);
        for (Index c = 0; c < dh; ++c) dst[c] = store<T>(sum[c] * scale);
      } else {
        for (Index c = 0; c < dh; ++c) sum[c] *= scale;
      }
    });
  }
};

// The tilings of the kernels (ExactTiles, core/team_scratch.hpp): the shape
// of the forward, of the backward's keys pass (also the one-pass kernel's)
// and of its queries pass, and the GPU team size (0: AUTO).
template <class C>
struct CpuTiling {
  using Forward = TileTraits<C>;
  using Keys = TileTraits<C>;
  using Queries = TileTraits<C>;
  static constexpr int team_size = 0;
};
struct GpuTiling {
  using Forward = TileShape<GpuTarget::exact_tile, GpuTarget::exact_tile,
                            GpuTarget::exact_block_rows, GpuTarget::block_cols>;
  using Keys = Forward;
  using Queries = Forward;
  static constexpr int team_size = 0;
};
struct WideGpuTiling {
  using Forward = TileShape<GpuTarget::wide_forward_tile, GpuTarget::wide_forward_tile,
                            GpuTarget::wide_forward_block_rows, GpuTarget::block_cols>;
  using Keys = TileShape<GpuTarget::wide_keys_query_tile, GpuTarget::wide_keys_key_tile,
                         GpuTarget::wide_backward_block_rows, GpuTarget::block_cols>;
  using Queries = TileShape<GpuTarget::wide_queries_query_tile, GpuTarget::wide_queries_key_tile,
                            GpuTarget::wide_backward_block_rows, GpuTarget::block_cols>;
  static constexpr int team_size = GpuTarget::wide_team_size;
};

// Calls f(tiling) with the tiling named by `tiles`; GPU builds compile no
// cpu tiling (set_exact_tiles refuses it there).
template <class C, class F>
void with_tiling(ExactTiles tiles, F&& f) {
  switch (tiles) {
    case ExactTiles::cpu:
      if constexpr (kHostMemory) return f(CpuTiling<C>{});
      break;
    case ExactTiles::gpu:
      return f(GpuTiling{});
    case ExactTiles::gpu_wide:
      return f(WideGpuTiling{});
  }
  throw ConfigError(std::string("exact attention has no '") + exact_tiles_name(tiles) +
                    "' tiling in this build (REFORMER_EXACT_TILES)");
}

// What both shapes read as the chunked kernels' inputs: the tensors, masks
// and dropout (mask_score applies full attention's masks).
template <class T>
detail::ChunkedInputs<T> dense_inputs(In4<T> q, In4<T> k, In4<T> v,
                                      const ExactAttentionConfig& config,
                                      const AttentionCall& call) {
  detail::ChunkedInputs<T> in;
  in.q = q;
  in.k = k;
  in.v = v;
  in.key_valid = call.masks.key_valid;
  in.causal = call.masks.causal;
  in.self_mask = config.self_mask;
  in.length = q.extent(1);
  in.heads = q.extent(2);
  in.d_head = q.extent(3);
  in.dropout = call.dropout;
  return in;
}

// The kernels' inputs, tiled by Shape; first_valid is filled when causal
// attention has padding.
template <class T, class Shape>
ExactInputs<T, Shape> exact_inputs(In4<T> q, In4<T> k, In4<T> v, const ExactAttentionConfig& config,
                                   const AttentionCall& call, Workspace::Frame& frame) {
  using C = compute_t<T>;
  ExactInputs<T, Shape> x;
  x.in = dense_inputs<T>(q, k, v, config, call);
  x.lq = q.extent(1);
  x.lk = k.extent(1);
  x.count_tiles();
  x.scale = detail::dense_score_scale<C>(config, q.extent(3));
  x.elements = tile_loops() == TileLoops::elements;
  if (call.masks.key_valid.extent(0)) {
    const Index lk = x.lk;
    const auto valid = call.masks.key_valid;
    auto first = frame.take<Kokkos::View<int*, Layout, MemSpace>>(Index(k.extent(0)));
    Kokkos::parallel_for(
        "exact_attention_first_valid", range(first.extent(0)), KOKKOS_LAMBDA(Index b) {
          Index j = 0;
          while (j < lk && valid(b, j) == 0) ++j;
          first(b) = int(j);
        });
    x.first_valid = first;
  }
  return x;
}

}  // namespace

namespace {
ExactProducts& exact_products_setting() {
  static ExactProducts products = reformer::detail::environment_choice(
      "REFORMER_EXACT_PRODUCTS", {"fused", "batched"},
      {ExactProducts::fused, ExactProducts::batched}, ExactProducts::fused);
  return products;
}

// The batched shape's inputs (float and double tensors).
template <class T>
detail::ExactBatchedInputs<T> exact_batched_inputs(In4<T> q, In4<T> k, In4<T> v,
                                                   const ExactAttentionConfig& config,
                                                   const AttentionCall& call) {
  detail::ExactBatchedInputs<T> x;
  x.in = dense_inputs<T>(q, k, v, config, call);
  x.lq = q.extent(1);
  x.lk = k.extent(1);
  x.scale = detail::dense_score_scale<compute_t<T>>(config, q.extent(3));
  return x;
}
}  // namespace

ExactProducts exact_products() { return exact_products_setting(); }
void set_exact_products(ExactProducts products) { exact_products_setting() = products; }
const char* exact_products_name(ExactProducts products) {
  return products == ExactProducts::batched ? "batched" : "fused";
}

ExactBatchedBytes exact_batched_bytes(Index heads, Index length_q, Index length_k,
                                      std::size_t compute_bytes, bool reduced_precision,
                                      std::size_t budget) {
  if (exact_products() != ExactProducts::batched || reduced_precision) return {};
  const auto slices = detail::exact_slices(heads, length_q, length_k, compute_bytes, budget);
  return {slices.bytes, slices.bytes};
}

ExactTilingInfo exact_tiling_info(ExactTiles tiles, Index d_head) {
  ExactTilingInfo info;
  with_tiling<float>(tiles, [&](auto tiling) {
    using Tiling = decltype(tiling);
    using F = typename Tiling::Forward;
    using K = typename Tiling::Keys;
    using Q = typename Tiling::Queries;
    ExactForward<float, F> forward;
    forward.x.in.d_head = d_head;
    forward.x.count_tiles();
    ExactBackwardKeys<float, K> keys{forward.x.template tiled<K>()};
    ExactBackwardQueries<float, Q> queries{forward.x.template tiled<Q>()};
    info.forward = {F::query_tile, F::key_tile, F::block_rows, F::block_cols,
                    forward.scratch_bytes()};
    info.keys = {K::query_tile, K::key_tile, K::block_rows, K::block_cols, keys.scratch_bytes()};
    info.queries = {Q::query_tile, Q::key_tile, Q::block_rows, Q::block_cols,
                    queries.scratch_bytes()};
    info.team_size = Tiling::team_size;
  });
  return info;
}

bool exact_backward_one_pass(Index batch_heads, Index concurrency, ExactBackwardSchedule schedule) {
  if (schedule != ExactBackwardSchedule::Auto) return schedule == ExactBackwardSchedule::OnePass;
  // One team per (batch, head): only worth it where those fill the threads
  // evenly (GPUs need a team per tile).
  return kHostMemory && batch_heads >= concurrency &&
         (batch_heads % concurrency == 0 || batch_heads >= 4 * concurrency);
}

template <class T>
void exact_attention_forward(In4<T> q, In4<T> k, In4<T> v, const ExactAttentionConfig& config,
                             const AttentionCall& call, View4<T> out, View3<compute_t<T>> lse,
                             Workspace& workspace) {
  const char* op = "exact_attention_forward";
  detail::check_dense_inputs(op, q, k, v, config, call);
  require_same_shape(op, "q", q, "out", out);
  detail::check_lse(op, lse, q);
  if constexpr (!is_reduced_precision<T>) {
    if (exact_products() == ExactProducts::batched) {
      detail::exact_batched_forward<T>(exact_batched_inputs<T>(q, k, v, config, call), out, lse,
                                       q.extent(0));
      return;
    }
  }
  Workspace::Frame frame(workspace);
  with_tiling<compute_t<T>>(exact_tiles(), [&](auto tiling) {
    using Tiling = decltype(tiling);
    using Shape = typename Tiling::Forward;
    ExactForward<T, Shape> kernel{exact_inputs<T, Shape>(q, k, v, config, call, frame), out, lse};
    const size_t bytes = kernel.scratch_bytes();
    kernel.level = scratch_level(bytes);
    const Index league = Index(q.extent(0)) * q.extent(2) * kernel.x.nq;
    Kokkos::parallel_for("exact_attention_forward",
                         dynamic_team_policy(league, bytes, Tiling::team_size), kernel);
  });
}

template <class T>
void exact_attention_backward(In4<T> q, In4<T> k, In4<T> v, In4<T> out, In3<compute_t<T>> lse,
                              In4<T> dout, const ExactAttentionConfig& config,
                              const AttentionCall& call, View4<T> dq, View4<T> dk, View4<T> dv,
                              Workspace& workspace, ExactBackwardSchedule schedule) {
  using C = compute_t<T>;
  const char* op = "exact_attention_backward";
  detail::check_dense_inputs(op, q, k, v, config, call);
  require_same_shape(op, "q", q, "out", out);
  require_same_shape(op, "q", q, "dout", dout);
  require_same_shape(op, "q", q, "dq", dq);
  require_same_shape(op, "k", k, "dk", dk);
  require_same_shape(op, "v", v, "dv", dv);
  detail::check_lse(op, lse, q);
  Workspace::Frame frame(workspace);
  auto delta = frame.take<View3<C>>(lse.extent(0), lse.extent(1), lse.extent(2));
  detail::item_dot<T>(dout, out, delta);
  if constexpr (!is_reduced_precision<T>) {
    if (exact_products() == ExactProducts::batched) {
      detail::exact_batched_backward<T>(exact_batched_inputs<T>(q, k, v, config, call), delta, dout,
                                        dq, dk, dv);
      return;
    }
  }
  const Index bhs = Index(q.extent(0)) * q.extent(2);
  const bool one_pass = exact_backward_one_pass(bhs, ExecSpace().concurrency(), schedule);
  View4<C> dq_sum;
  if (one_pass) {
    if constexpr (is_reduced_precision<T>)
      dq_sum = frame.take<View4<C>>(dq.extent(0), dq.extent(1), dq.extent(2), dq.extent(3));
    else
      dq_sum = dq;
  }
  with_tiling<C>(exact_tiles(), [&](auto tiling) {
    using Tiling = decltype(tiling);
    using Keys = typename Tiling::Keys;
    using Queries = typename Tiling::Queries;
    const auto x = exact_inputs<T, Keys>(q, k, v, config, call, frame);
    if (one_pass) {
      ExactBackwardOnePass<T, Keys> kernel{x, lse, delta, dout, dq, dk, dv, dq_sum};
      const size_t bytes = kernel.scratch_bytes();
      kernel.level = scratch_level(bytes);
      Kokkos::parallel_for("exact_attention_backward_one_pass",
                           team_policy(bhs, bytes, Tiling::team_size), kernel);
      return;
    }
    ExactBackwardKeys<T, Keys> keys{x, lse, delta, dout, dk, dv};
    const size_t key_bytes = keys.scratch_bytes();
    keys.level = scratch_level(key_bytes);
    Kokkos::parallel_for("exact_attention_backward_keys",
                         dynamic_team_policy(bhs * x.nk, key_bytes, Tiling::team_size), keys);
    ExactBackwardQueries<T, Queries> queries{x.template tiled<Queries>(), lse, delta, dout, dq};
    const size_t query_bytes = queries.scratch_bytes();
    queries.level = scratch_level(query_bytes);
    Kokkos::parallel_for("exact_attention_backward_queries",
                         dynamic_team_policy(bhs * queries.x.nq, query_bytes, Tiling::team_size),
                         queries);
  });
}

#define REFORMER_INSTANTIATE(T)                                                                 \
  template void exact_attention_forward<T>(In4<T>, In4<T>, In4<T>, const ExactAttentionConfig&, \
                                           const AttentionCall&, View4<T>, View3<compute_t<T>>, \
                                           Workspace&);                                         \
  template void exact_attention_backward<T>(                                                    \
      In4<T>, In4<T>, In4<T>, In4<T>, In3<compute_t<T>>, In4<T>, const ExactAttentionConfig&,   \
      const AttentionCall&, View4<T>, View4<T>, View4<T>, Workspace&, ExactBackwardSchedule);
REFORMER_INSTANTIATE_STORAGE_TYPES(REFORMER_INSTANTIATE)

}  // namespace reformer::attention
