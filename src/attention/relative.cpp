// Relative positional attention (Transformer-XL): fused team kernels over
// tiles in O(L) memory (see relative.hpp). T is the storage type of q, k, v, r,
// the outputs and gradients; tiles, scores, statistics and partial sums are
// C = compute_t<T>, and each stored result is rounded to T once.
//
// Every product runs on tiles in team scratch through team_multiply. Queries
// are loaded twice, as qu = scale (q + u) and qv = scale (q + v), so that
//   S_ij = qu_i . k_j + qv_i . r_c(d(i, j)).
// The distances of a tile pair (queries [i0, i0 + BQ), keys [j0, j0 + BK))
// are dmin + w for w = s - t + BK - 1 in [0, BQ + BK - 1) (query i0 + s, key
// j0 + t, dmin = i0 + M - j0 - BK + 1): one product of the tile's qv with the
// W = BQ + BK rows of r at those distances gives every relative term, and score
// (s, t) reads column w of it. In backward, the tile's dS laid out on the same
// shifted diagonals, G(s, w) = dS(s, t), gives dqv = G R and (per tile of
// distances) dr = dS^T qv.
//
// Masked pairs (d < 0, d >= the same_length limit, keys or queries past the
// sequence) take no part in any softmax: every query has at least its own
// position (d = 0), so no row is ever wholly masked. Dropout replays the
// counter RNG at index ((b * heads + h) * L + i) * (M + L) + j.
#include "reformer/attention/relative.hpp"

#include "attention/attention_checks.hpp"
#include "attention/chunked_kernels.hpp"
#include "attention/tiled/backward.hpp"
#include "attention/tiled/online_softmax.hpp"
#include "reformer/core/error.hpp"
#include "reformer/core/instantiate.hpp"
#include "reformer/core/shape.hpp"
#include "reformer/core/tile_multiply.hpp"

#include <cmath>

namespace reformer::attention {
namespace {

using detail::load_tile_cols;
using detail::load_tile_rows;
using detail::Scratch2;
using detail::zero;

// Start of every online-softmax maximum and the score of a masked pair; any
// score below kMasked / 2 has weight 0.
constexpr double kMasked = -1e30;

template <class T>
KOKKOS_INLINE_FUNCTION T masked_weight(T score, T base) {
  return score > T(kMasked / 2) ? softmax_weight(score - base) : T(0);
}

// What every kernel reads: the tensors, the shapes and tilings, the masks.
template <class T>
struct RelativeInputs {
  using C = compute_t<T>;
  using P = param_t<T>;
  using Traits = TileTraits<C>;
  static constexpr Index BQ = Traits::query_tile, BK = Traits::key_tile;
  // Distances of one tile pair (BQ + BK - 1 of them), rounded to whole blocks.
  static constexpr Index W = BQ + BK;

  Kokkos::View<const T****, Layout, MemSpace> q, k, v;
  Kokkos::View<const T***, Layout, MemSpace> r;
  Kokkos::View<const P**, Layout, MemSpace> bias_u, bias_v;
  Index heads = 0, d_head = 0, dpad = 0;
  Index lq = 0, lk = 0, memory = 0, nq = 0, nk = 0;
  // Allowed distances are [0, limit): M + L, or mem_len with same_length.
  Index limit = 0;
  Index clamp_len = 0;
  C scale = C(1);
  AttentionDropout dropout;

  KOKKOS_INLINE_FUNCTION bool allowed(Index i, Index j) const {
    const Index d = i + memory - j;
    return i < lq && j >= 0 && j < lk && d >= 0 && d < limit;
  }
  // Row of r for distance d (0 <= d < limit).
  KOKKOS_INLINE_FUNCTION Index r_row(Index d) const {
    return clamp_len > 0 && d > clamp_len ? clamp_len : d;
  }
  KOKKOS_INLINE_FUNCTION C drop(Index bh, Index i, Index j) const {
    return dropout.template factor<C>(bh, heads, i, j, lq, lk);
  }
  // Key tiles [begin, end) with an allowed key for query tile qc.
  KOKKOS_INLINE_FUNCTION void key_tiles(Index qc, Index& begin, Index& end) const {
    const Index i0 = qc * BQ, i1 = (qc + 1) * BQ < lq ? (qc + 1) * BQ - 1 : lq - 1;
    const Index first = i0 + memory - limit + 1 > 0 ? i0 + memory - limit + 1 : 0;
    const Index last = i1 + memory;  // <= lk - 1
    begin = first / BK;
    end = last / BK + 1;
  }
  // Query tiles [begin, end) with an allowed query for key tile kc (empty
  // for memory keys beyond every query's same_length window).
  KOKKOS_INLINE_FUNCTION void query_tiles(Index kc, Index& begin, Index& end) const {
    const Index j0 = kc * BK, j1 = (kc + 1) * BK < lk ? (kc + 1) * BK - 1 : lk - 1;
    const Index first = j0 - memory > 0 ? j0 - memory : 0;
    Index last = j1 - memory + limit - 1;
    if (last > lq - 1) last = lq - 1;
    begin = first / BQ;
    end = last < first ? begin : last / BQ + 1;
  }

  // The queries of the tile at i0 of (b, h) as the two products see them,
  // qu = scale (q + u) and qv = scale (q + v): as rows ([BQ, dpad]) or
  // transposed ([dpad, BQ]). Rows past the segment are zero.
  KOKKOS_INLINE_FUNCTION void load_queries(const TeamMember& team, Index b, Index h, Index i0,
                                           bool transposed, Scratch2<C> qu, Scratch2<C> qv) const {
    const auto u = detail::tile_source(q, b, h, i0, lq, &bias_u(h, 0));
    const auto w = detail::tile_source(q, b, h, i0, lq, &bias_v(h, 0));
    if (transposed) {
      load_tile_cols(team, u, BQ, d_head, scale, qu);
      load_tile_cols(team, w, BQ, d_head, scale, qv);
    } else {
      load_tile_rows(team, u, BQ, d_head, scale, qu, false);
      load_tile_rows(team, w, BQ, d_head, scale, qv, false);
    }
  }
  // The backward's loads of whole sequences for (b, h) (tiled/backward.hpp).
  template <class D, class L>
  KOKKOS_INLINE_FUNCTION detail::SequenceTiles<T> sequence(Index b, Index h, const D& dout,
                                                           const L& lse, const L& delta) const {
    return {k, v, dout, lse, delta, b, h, lq, lk, d_head, false};
  }
  // Rows of r for the distances [first, first + rows) as rows (dst [rows,
  // dpad]) or transposed (dst [dpad, rows]); distances outside [0, limit) are
  // zero rows (their pairs are masked).
  KOKKOS_INLINE_FUNCTION void load_r(const TeamMember& team, Index h, Index first, Index rows,
                                     bool transposed, Scratch2<C> dst) const {
    const Index dh = d_head, dp = dpad;
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, rows), [&](Index row) {
      const Index d = first + row;
      const bool inside = d >= 0 && d < limit;
      // The row's d_head values, then zeros (padding, or a masked distance):
      // two plain loops rather than one with a test per element.
      const Index n = inside ? dh : 0;
      const T* from = inside ? &r(r_row(d), h, 0) : nullptr;
      if (transposed) {
        for (Index c = 0; c < n; ++c) dst(c, row) = load(from[c]);
        for (Index c = n; c < dp; ++c) dst(c, row) = C(0);
      } else {
        C* to = &dst(row, 0);
        for (Index c = 0; c < n; ++c) to[c] = load(from[c]);
        for (Index c = n; c < dp; ++c) to[c] = C(0);
      }
    });
  }
  // Key tile kc against the query tile at i0 of (b, h): loads its keys and
  // values as rows (ks, vs) and the rows of r at the tile pair's distances
  // (rw), then st = K qu^T and bt = Rw qv^T (score (s, t) = st(t, s) +
  // bt(s - t + BK - 1, s)). Only the `live` query columns are computed, and of
  // Rw only the BK + live rows they read (s - t + BK - 1 < BK + live): a
  // decoding step's one query reads BK + one column group of the BQ + BK rows
  // (144 of 256 for float on AVX2).
  // No barrier after the products.
  KOKKOS_INLINE_FUNCTION void key_tile_products(const TeamMember& team, Index b, Index h, Index i0,
                                                Index kc, Scratch2<C> qut, Scratch2<C> qvt,
                                                Scratch2<C> ks, Scratch2<C> vs, Scratch2<C> rw,
                                                Scratch2<C> st, Scratch2<C> bt, Index live) const {
    const Index dp = dpad, j0 = kc * BK, dmin = i0 + memory - j0 - BK + 1, rows = BK + live;
    load_tile_rows(team, detail::tile_source(k, b, h, j0, lk), BK, d_head, C(1), ks, false);
    load_tile_rows(team, detail::tile_source(v, b, h, j0, lk), BK, d_head, C(1), vs, false);
    load_r(team, h, dmin, rows, false, rw);
    team.team_barrier();
    team_multiply<false>(team, BK, live, dp, &st(0, 0), BQ, &ks(0, 0), dp, 1, &qut(0, 0), BQ);
    team_multiply<false>(team, rows, live, dp, &bt(0, 0), BQ, &rw(0, 0), dp, 1, &qvt(0, 0), BQ);
  }
};

// The score policy of the forward (tiled/online_softmax.hpp) for one team:
// S^T = K qu^T + shift(Rw qv^T) of a key tile against the team's queries,
// kMasked where a pair is not allowed.
template <class T>
struct RelativeScores {
  using In = RelativeInputs<T>;
  using C = compute_t<T>;
  static constexpr Index BQ = In::BQ, BK = In::BK;
  static constexpr double no_score = kMasked;
  const In& x;
  Index b, h, bh, i0;
  Scratch2<C> qut, qvt, ks, vs, rw, bt;

  KOKKOS_INLINE_FUNCTION C weight(C score, C base) const { return masked_weight(score, base); }
  KOKKOS_INLINE_FUNCTION const C* scores(const TeamMember& team, Index kc, Scratch2<C> st,
                                         Index& vld) const {
    const Index j0 = kc * BK;
    // Only the columns of queries the engine reads (its live_columns).
    const Index live = detail::OnlineSoftmax<C>::live_columns(i0, x.lq);
    x.key_tile_products(team, b, h, i0, kc, qut, qvt, ks, vs, rw, st, bt, live);
    team.team_barrier();
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, BK), [&](Index t) {
      C* row = &st(t, 0);
      for (Index s = 0; s < live; ++s)
        row[s] = x.allowed(i0 + s, j0 + t) ? row[s] + bt(s - t + BK - 1, s) : C(kMasked);
    });
    team.team_barrier();
    vld = x.dpad;
    return &vs(0, 0);
  }
  KOKKOS_INLINE_FUNCTION C keep(Index i, Index j) const {
    return x.allowed(i, j) ? x.drop(bh, i, j) : C(0);
  }
};

// Forward: one team per (batch * head, query tile), heaviest tiles first. The
// team keeps qu and qv transposed and streams key tiles as rows:
// S^T = K qu^T + shift(Rw qv^T), online softmax (tiled/online_softmax.hpp) down the
// columns of S^T.
template <class T>
struct RelativeForward {
  using In = RelativeInputs<T>;
  using C = compute_t<T>;
  static constexpr Index BQ = In::BQ, BK = In::BK, W = In::W;
  In x;
  View4<T> out;
  View3<C> lse;
  int level = 0;
  bool elements = false;  // TileLoops::elements for the online softmax's passes

  size_t scratch_bytes() const {
    const Index dp = x.dpad;
    return 2 * Scratch2<C>::shmem_size(dp, BQ) + Scratch2<C>::shmem_size(BQ, dp) +
           2 * Scratch2<C>::shmem_size(BK, dp) + Scratch2<C>::shmem_size(W, dp) +
           Scratch2<C>::shmem_size(BK, BQ) + Scratch2<C>::shmem_size(W, BQ) +
           Scratch2<C>::shmem_size(3, BQ);
  }

  KOKKOS_INLINE_FUNCTION void operator()(const TeamMember& team) const {
    const Index bhs = x.heads * out.extent(0), dp = x.dpad;
    const Index qc = x.nq - 1 - team.league_rank() / bhs, bh = team.league_rank() % bhs;
    const Index b = bh / x.heads, h = bh % x.heads, i0 = qc * BQ;
    const auto scratch = team.team_scratch(level);
    Scratch2<C> qut(scratch, dp, BQ), qvt(scratch, dp, BQ), o(scratch, BQ, dp), ks(scratch, BK, dp),
        vs(scratch, BK, dp), rw(scratch, W, dp), st(scratch, BK, BQ), bt(scratch, W, BQ),
        stats(scratch, 3, BQ);
    x.load_queries(team, b, h, i0, true, qut, qvt);
    Index begin = 0, end = 0;
    x.key_tiles(qc, begin, end);
    const RelativeScores<T> scores{x, b, h, bh, i0, qut, qvt, ks, vs, rw, bt};
    detail::OnlineSoftmax<C>{o, st, stats, elements}.run(
        team, scores, begin, end, x.dropout.rate > 0.0, b, h, i0, x.lq, x.d_head, out, lse);
  }
};

// The probability and the score gradient of an allowed pair:
//   p = exp(S - lse_i),  dS = p (drop dP - D_i),  returns p drop in p.
template <class T>
KOKKOS_INLINE_FUNCTION compute_t<T> pair_gradient(const RelativeInputs<T>& x, Index bh, Index i,
                                                  Index j, compute_t<T> score, compute_t<T> dp,
                                                  compute_t<T> lse_i, compute_t<T> d_i,
                                                  compute_t<T>& p) {
  using C = compute_t<T>;
  const C keep = x.drop(bh, i, j);
  const C weight = softmax_weight(score - lse_i);
  p = weight * keep;
  return weight * (keep * dp - d_i);
}

// Relative attention's part of both backward passes (tiled/backward.hpp) for
// one team: S = qu K^T + shift(qv Rw^T), masked where a pair is not allowed;
// qu = scale (q + u) are the engine's Qs.
template <class T>
struct RelativeGradients {
  using In = RelativeInputs<T>;
  using C = compute_t<T>;
  using Shape = typename In::Traits;
  static constexpr Index BQ = In::BQ, BK = In::BK, W = In::W;
  const In& x;
  detail::SequenceTiles<T> seq;
  Index bh;

  // Every query has an allowed key (its own position): P = exp(S - lse).
  KOKKOS_INLINE_FUNCTION void softmax_base(Index, C lse_i, C& base, C& rest) const {
    base = lse_i;
    rest = C(0);
  }
  // The first distance of the tile pair (query tile qc, key tile kc).
  KOKKOS_INLINE_FUNCTION Index first_distance(Index qc, Index kc) const {
    return qc * BQ + x.memory - kc * BK - BK + 1;
  }
};

// The key pass: also qv rows, Rw^T (the rows of r at the tile pair's
// distances) and bm = qv Rw^T, whose shifted diagonals are the relative terms.
template <class T>
struct RelativeKeyGradients : RelativeGradients<T> {
  using Base = RelativeGradients<T>;
  using Base::bh, Base::BK, Base::BQ, Base::seq, Base::W, Base::x;
  using typename Base::C;
  Scratch2<C> qvs, rwt, bm;

  static size_t tile_bytes(Index dp) {
    return Scratch2<C>::shmem_size(BQ, dp) + Scratch2<C>::shmem_size(dp, W) +
           Scratch2<C>::shmem_size(BQ, W);
  }
  KOKKOS_INLINE_FUNCTION void query_tiles(Index kc, Index& begin, Index& end) const {
    x.query_tiles(kc, begin, end);
  }
  KOKKOS_INLINE_FUNCTION bool visits(Index, Index) const { return true; }
  template <class Pass>
  KOKKOS_INLINE_FUNCTION void load_key_tile(const TeamMember& team, Index kc,
                                            const Pass& pass) const {
    seq.load_key_cols(team, kc, pass);
  }
  template <class Pass>
  KOKKOS_INLINE_FUNCTION void load_query_tile(const TeamMember& team, Index qc, Index kc,
                                              const Pass& pass) const {
    const Index b = seq.b, h = seq.h, i0 = qc * BQ;
    seq.load_dout_rows(team, *this, qc, pass);
    x.load_queries(team, b, h, i0, false, pass.qs, qvs);
    x.load_r(team, h, this->first_distance(qc, kc), W, true, rwt);
  }
  template <class Pass>
  KOKKOS_INLINE_FUNCTION void add_products(const TeamMember& team, Index, Index,
                                           const Pass&) const {
    const Index dp = x.dpad;
    team_multiply<false>(team, BQ, W, dp, &bm(0, 0), W, &qvs(0, 0), dp, 1, &rwt(0, 0), W);
  }
  template <class Pass>
  KOKKOS_INLINE_FUNCTION void gradients(const TeamMember& team, Index qc, Index kc,
                                        const Pass& t) const {
    const Index i0 = qc * BQ, j0 = kc * BK;
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, BQ), [&](Index q) {
      const Index i = i0 + q;
      const C lse_i = t.ld(0, q), d_i = t.ld(1, q);
      for (Index u = 0; u < BK; ++u) {
        if (!x.allowed(i, j0 + u)) {
          t.s(q, u) = t.dps(q, u) = C(0);
          continue;
        }
        C p;
        const C score = t.s(q, u) + bm(q, q - u + BK - 1);
        t.dps(q, u) = pair_gradient(x, bh, i, j0 + u, score, t.dps(q, u), lse_i, d_i, p);
        t.s(q, u) = p;
      }
    });
  }
};

// The query pass: also qv^T, Rw, bt = Rw qv^T, G (dS on the shifted
// diagonals) and dqv += G Rw.
template <class T>
struct RelativeQueryGradients : RelativeGradients<T> {
  using Base = RelativeGradients<T>;
  using Base::bh, Base::BK, Base::BQ, Base::seq, Base::W, Base::x;
  using typename Base::C;
  Scratch2<C> qvt, rw, bt, g, dqvs;

  static size_t tile_bytes(Index dp) {
    return Scratch2<C>::shmem_size(dp, BQ) + Scratch2<C>::shmem_size(W, dp) +
           Scratch2<C>::shmem_size(W, BQ) + Scratch2<C>::shmem_size(BQ, W) +
           Scratch2<C>::shmem_size(BQ, dp);
  }
  KOKKOS_INLINE_FUNCTION void key_tiles(Index qc, Index& begin, Index& end) const {
    x.key_tiles(qc, begin, end);
  }
  template <class Pass>
  KOKKOS_INLINE_FUNCTION void load_query_tile(const TeamMember& team, Index qc,
                                              const Pass& pass) const {
    const Index b = seq.b, h = seq.h, i0 = qc * BQ;
    // Every tile writes the same band of g; the rest stays zero.
    zero<C>(team, g);
    zero<C>(team, dqvs);
    x.load_queries(team, b, h, i0, true, pass.qt, qvt);
    seq.load_dout_cols(team, *this, qc, pass);
  }
  template <class Pass>
  KOKKOS_INLINE_FUNCTION void load_key_tile(const TeamMember& team, Index qc, Index kc,
                                            const Pass& pass) const {
    seq.load_key_rows(team, kc, pass);
    x.load_r(team, seq.h, this->first_distance(qc, kc), W, false, rw);
  }
  template <class Pass>
  KOKKOS_INLINE_FUNCTION void add_products(const TeamMember& team, Index, Index,
                                           const Pass&) const {
    const Index dp = x.dpad;
    team_multiply<false>(team, W, BQ, dp, &bt(0, 0), BQ, &rw(0, 0), dp, 1, &qvt(0, 0), BQ);
  }
  template <class Pass>
  KOKKOS_INLINE_FUNCTION void gradients(const TeamMember& team, Index qc, Index kc,
                                        const Pass& t) const {
    const Index i0 = qc * BQ, j0 = kc * BK;
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, BK), [&](Index u) {
      const Index j = j0 + u;
      for (Index s = 0; s < BQ; ++s) {
        const Index i = i0 + s;
        C ds = C(0);
        if (x.allowed(i, j)) {
          C p;
          const C score = t.st(u, s) + bt(s - u + BK - 1, s);
          ds = pair_gradient(x, bh, i, j, score, t.dpt(u, s), t.ld(0, s), t.ld(1, s), p);
        }
        t.dpt(u, s) = ds;
        g(s, s - u + BK - 1) = ds;
      }
    });
  }
  template <class Pass>
  KOKKOS_INLINE_FUNCTION void add_sums(const TeamMember& team, Index, Index, const Pass&) const {
    const Index dp = x.dpad;
    team_multiply<true>(team, BQ, dp, W, &dqvs(0, 0), dp, &g(0, 0), W, 1, &rw(0, 0), dp);
  }
};

// Backward, keys: one team per (batch * head, key tile) runs the key pass
// (tiled/backward.hpp): dV += (P drop)^T dout and dK += dS^T qu.
template <class T>
struct RelativeBackwardKeys {
  using In = RelativeInputs<T>;
  using C = compute_t<T>;
  using Pass = detail::KeyPass<C, typename In::Traits>;
  In x;
  Kokkos::View<const C***, Layout, MemSpace> lse, delta;
  Kokkos::View<const T****, Layout, MemSpace> dout;
  View4<T> dk, dv;
  int level = 0;

  size_t scratch_bytes() const {
    return Pass::tile_bytes(x.dpad) + RelativeKeyGradients<T>::tile_bytes(x.dpad);
  }

  KOKKOS_INLINE_FUNCTION void operator()(const TeamMember& team) const {
    const Index bhs = x.heads * dout.extent(0), dp = x.dpad, BQ = In::BQ, W = In::W;
    const Index kc = team.league_rank() / bhs, bh = team.league_rank() % bhs;
    const auto scratch = team.team_scratch(level);
    const Pass pass(scratch, dp);
    const RelativeKeyGradients<T> policy{
        {x, x.sequence(bh / x.heads, bh % x.heads, dout, lse, delta), bh},
        Scratch2<C>(scratch, BQ, dp),
        Scratch2<C>(scratch, dp, W),
        Scratch2<C>(scratch, BQ, W)};
    pass.run(team, policy, kc, [](Index) {});
    policy.seq.store_keys(team, kc, pass, dk, dv);
  }
};

// Backward, queries: one team per (batch * head, query tile) runs the query
// pass (tiled/backward.hpp): dqu += dS K and dqv += G Rw. dq = scale (dqu +
// dqv); the team's sums of scale dqu and scale dqv over its queries go to
// part_u and part_v [batch * query tiles, heads, d_head] (summed into du and
// dv_bias).
template <class T>
struct RelativeBackwardQueries {
  using In = RelativeInputs<T>;
  using C = compute_t<T>;
  using Pass = detail::QueryPass<C, typename In::Traits>;
  static constexpr Index BQ = In::BQ, W = In::W;
  In x;
  Kokkos::View<const C***, Layout, MemSpace> lse, delta;
  Kokkos::View<const T****, Layout, MemSpace> dout;
  View4<T> dq;
  View3<C> part_u, part_v;
  int level = 0;

  size_t scratch_bytes() const {
    return Pass::tile_bytes(x.dpad) + RelativeQueryGradients<T>::tile_bytes(x.dpad);
  }

  KOKKOS_INLINE_FUNCTION void operator()(const TeamMember& team) const {
    const Index bhs = x.heads * dout.extent(0), dh = x.d_head, dp = x.dpad;
    const Index qc = x.nq - 1 - team.league_rank() / bhs, bh = team.league_rank() % bhs;
    const Index b = bh / x.heads, h = bh % x.heads, i0 = qc * BQ;
    const auto scratch = team.team_scratch(level);
    const Pass pass(scratch, dp);
    const RelativeQueryGradients<T> policy{{x, x.sequence(b, h, dout, lse, delta), bh},
                                           Scratch2<C>(scratch, dp, BQ),
                                           Scratch2<C>(scratch, W, dp),
                                           Scratch2<C>(scratch, W, BQ),
                                           Scratch2<C>(scratch, BQ, W),
                                           Scratch2<C>(scratch, BQ, dp)};
    pass.run(team, policy, qc);
    const C scale = x.scale;
    const auto dqus = pass.dqs, dqvs = policy.dqvs;
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, BQ), [&](Index s) {
      const Index i = i0 + s;
      if (i >= x.lq) return;
      T* dst = &dq(b, i, h, 0);
      for (Index c = 0; c < dh; ++c) dst[c] = store<T>(scale * (dqus(s, c) + dqvs(s, c)));
    });
    // Rows past the sequence are zero in dqus and dqvs.
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, dh), [&](Index c) {
      C su = C(0), sv = C(0);
      for (Index s = 0; s < BQ; ++s) {
        su += dqus(s, c);
        sv += dqvs(s, c);
      }
      part_u(b * x.nq + qc, h, c) = scale * su;
      part_v(b * x.nq + qc, h, c) = scale * sv;
    });
  }
};

// Backward, distances: one team per (batch * head, tile of BK distances
// [d0, d0 + BK)) streams the query tiles. Query i0 + s meets distance d0 + e
// at key j = i0 + s + M - d0 - e: the keys of a query tile form a window of
// W rows starting at jlo = i0 + M - d0 - BK + 1, key (s, e) at column
// s - e + BK - 1 of the window. C = qu Kw^T and dP = dout Vw^T over the window,
// B = qv Rt^T over the tile's distances, E(s, e) = dS, then dR += E^T qv.
// The team writes its sums into part_r [batch, limit, heads, d_head].
template <class T>
struct RelativeBackwardDistances {
  using In = RelativeInputs<T>;
  using C = compute_t<T>;
  static constexpr Index BQ = In::BQ, BD = In::BK, W = In::W;
  In x;
  Kokkos::View<const C***, Layout, MemSpace> lse, delta;
  Kokkos::View<const T****, Layout, MemSpace> dout;
  View4<C> part_r;
  Index nd = 0;
  int level = 0;

  size_t scratch_bytes() const {
    const Index dp = x.dpad;
    return 3 * Scratch2<C>::shmem_size(BQ, dp) + 2 * Scratch2<C>::shmem_size(dp, W) +
           Scratch2<C>::shmem_size(dp, BD) + 2 * Scratch2<C>::shmem_size(BQ, W) +
           2 * Scratch2<C>::shmem_size(BQ, BD) + Scratch2<C>::shmem_size(BD, dp) +
           Scratch2<C>::shmem_size(3, BQ);
  }

  KOKKOS_INLINE_FUNCTION void operator()(const TeamMember& team) const {
    const Index bhs = x.heads * dout.extent(0), dh = x.d_head, dp = x.dpad;
    const Index dt = team.league_rank() / bhs, bh = team.league_rank() % bhs;
    const Index b = bh / x.heads, h = bh % x.heads, d0 = dt * BD;
    const auto scratch = team.team_scratch(level);
    Scratch2<C> qus(scratch, BQ, dp), qvs(scratch, BQ, dp), dos(scratch, BQ, dp),
        kwt(scratch, dp, W), vwt(scratch, dp, W), rt(scratch, dp, BD), cw(scratch, BQ, W),
        dpw(scratch, BQ, W), bm(scratch, BQ, BD), e(scratch, BQ, BD), drs(scratch, BD, dp),
        ld(scratch, 3, BQ);
    const RelativeGradients<T> policy{x, x.sequence(b, h, dout, lse, delta), bh};
    zero<C>(team, drs);
    x.load_r(team, h, d0, BD, true, rt);
    // Queries i >= d0 - M have a key at distance d0 or more.
    const Index first = d0 - x.memory > 0 ? d0 - x.memory : 0;
    for (Index qc = first / BQ; qc < x.nq; ++qc) {
      const Index i0 = qc * BQ, jlo = i0 + x.memory - d0 - BD + 1;
      team.team_barrier();
      x.load_queries(team, b, h, i0, false, qus, qvs);
      load_tile_rows(team, detail::tile_source(dout, b, h, i0, x.lq), BQ, dh, C(1), dos, false);
      load_tile_cols(team, detail::tile_source(x.k, b, h, jlo, x.lk), W, dh, C(1), kwt);
      load_tile_cols(team, detail::tile_source(x.v, b, h, jlo, x.lk), W, dh, C(1), vwt);
      policy.seq.load_stats(team, policy, i0, ld);
      team.team_barrier();
      team_multiply<false>(team, BQ, W, dp, &cw(0, 0), W, &qus(0, 0), dp, 1, &kwt(0, 0), W);
      team_multiply<false>(team, BQ, W, dp, &dpw(0, 0), W, &dos(0, 0), dp, 1, &vwt(0, 0), W);
      team_multiply<false>(team, BQ, BD, dp, &bm(0, 0), BD, &qvs(0, 0), dp, 1, &rt(0, 0), BD);
      team.team_barrier();
      Kokkos::parallel_for(Kokkos::TeamThreadRange(team, BQ), [&](Index s) {
        const Index i = i0 + s;
        const C lse_i = ld(0, s), d_i = ld(1, s);
        for (Index ed = 0; ed < BD; ++ed) {
          const Index w = s - ed + BD - 1, j = jlo + w;
          C ds = C(0);
          if (x.allowed(i, j)) {
            C p;
            ds = pair_gradient(x, bh, i, j, cw(s, w) + bm(s, ed), dpw(s, w), lse_i, d_i, p);
          }
          e(s, ed) = ds;
        }
      });
      team.team_barrier();
      team_multiply<true>(team, BD, dp, BQ, &drs(0, 0), dp, &e(0, 0), 1, BD, &qvs(0, 0), dp);
    }
    team.team_barrier();
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, BD), [&](Index ed) {
      const Index d = d0 + ed;
      if (d >= x.limit) return;
      C* dst = &part_r(b, d, h, 0);
      for (Index c = 0; c < dh; ++c) dst[c] = drs(ed, c);
    });
  }
};

template <class T>
void check_relative_inputs(const char* op, In4<T> q, In4<T> k, In4<T> v, In3<T> r,
                           In2<param_t<T>> bias_u, In2<param_t<T>> bias_v,
                           const RelativeAttentionConfig& config, const AttentionDropout& dropout,
                           Index keys) {
  config.validate();
  require_nonempty(op, "q", q);
  require_nonempty(op, "k", k);
  require_same_shape(op, "k", k, "v", v);
  require<ShapeError>(k.extent(0) == q.extent(0), op, ": k and v (memory and segment) have batch ",
                      k.extent(0), " but q has batch ", q.extent(0),
                      "; the memory must come from the same batch rows as the segment");
  require<ShapeError>(keys <= Index(k.extent(1)), op, ": keys is ", keys, " but k and v hold ",
                      k.extent(1), " positions; pass at most their length (or -1: all of them)");
  require<ShapeError>(keys >= Index(q.extent(1)), op, ": k and v have length ", keys,
                      " but must hold the memory followed by the segment's ", q.extent(1),
                      " positions (length M + ", q.extent(1), " with M >= 0)");
  detail::check_qkv(op, q, k, v, /*same_length=*/false);
  const Index heads = q.extent(2), d = q.extent(3);
  const Index needed = relative_attention_positions(keys - Index(q.extent(1)), q.extent(1), config);
  require<ShapeError>(
      Index(r.extent(0)) >= needed && Index(r.extent(1)) == heads && Index(r.extent(2)) == d, op,
      ": r has shape ", shape_string(r), " but must be [positions >= ", needed, ", ", heads, ", ",
      d, "] (one row per distance: see relative_attention_positions)");
  require<ShapeError>(Index(bias_u.extent(0)) == heads && Index(bias_u.extent(1)) == d, op,
                      ": bias_u has shape ", shape_string(bias_u), " but must be [", heads, ", ", d,
                      "] (heads, d_head)");
  require<ShapeError>(Index(bias_v.extent(0)) == heads && Index(bias_v.extent(1)) == d, op,
                      ": bias_v has shape ", shape_string(bias_v), " but must be [", heads, ", ", d,
                      "] (heads, d_head)");
  detail::check_dropout(op, dropout);
}

template <class T>
RelativeInputs<T> relative_inputs(In4<T> q, In4<T> k, In4<T> v, In3<T> r, In2<param_t<T>> bias_u,
                                  In2<param_t<T>> bias_v, const RelativeAttentionConfig& config,
                                  const AttentionDropout& dropout, Index keys) {
  using C = compute_t<T>;
  using Traits = TileTraits<C>;
  RelativeInputs<T> x;
  x.q = q;
  x.k = k;
  x.v = v;
  x.r = r;
  x.bias_u = bias_u;
  x.bias_v = bias_v;
  x.heads = q.extent(2);
  x.d_head = q.extent(3);
  x.dpad = Traits::pad_columns(x.d_head);
  x.lq = q.extent(1);
  x.lk = keys;  // k and v's positions past it are not read
  x.memory = x.lk - x.lq;
  x.nq = (x.lq + Traits::query_tile - 1) / Traits::query_tile;
  x.nk = (x.lk + Traits::key_tile - 1) / Traits::key_tile;
  x.limit = config.same_length && config.mem_len < x.lk ? config.mem_len : x.lk;
  x.clamp_len = config.clamp_len;
  x.scale = C(config.scale != 0.0 ? config.scale : 1.0 / std::sqrt(double(x.d_head)));
  x.dropout = dropout;
  return x;
}

}  // namespace

void RelativeAttentionConfig::validate() const {
  const char* name = "RelativeAttentionConfig";
  require<ConfigError>(clamp_len >= 0, name, ": clamp_len is ", clamp_len,
                       " but must be >= 0 (0: distances are not clamped)");
  require<ConfigError>(mem_len >= 0, name, ": mem_len is ", mem_len, " but must be >= 0");
  require<ConfigError>(!same_length || mem_len > 0, name, ": same_length is set but mem_len is ",
                       mem_len,
                       "; every query would see no key: set mem_len to the model's memory length "
                       "(> 0) or turn same_length off");
  require<ConfigError>(std::isfinite(scale) && scale >= 0, name, ": scale is ", scale,
                       " but must be finite and >= 0 (0: 1 / sqrt(d_head))");
}

Index relative_attention_positions(Index memory, Index length,
                                   const RelativeAttentionConfig& config) {
  Index n = memory + length;
  if (config.same_length && config.mem_len < n) n = config.mem_len;
  if (config.clamp_len > 0 && config.clamp_len + 1 < n) n = config.clamp_len + 1;
  return n;
}

template <class T>
void relative_attention_forward(In4<T> q, In4<T> k, In4<T> v, In3<T> r, In2<param_t<T>> bias_u,
                                In2<param_t<T>> bias_v, const RelativeAttentionConfig& config,
                                const AttentionDropout& dropout, View4<T> out,
                                View3<compute_t<T>> lse, Workspace& workspace, Index keys) {
  const char* op = "relative_attention_forward";
  if (keys < 0) keys = k.extent(1);
  check_relative_inputs<T>(op, q, k, v, r, bias_u, bias_v, config, dropout, keys);
  require_same_shape(op, "q", q, "out", out);
  detail::check_lse(op, lse, q);
  (void)workspace;
  RelativeForward<T> kernel{relative_inputs<T>(q, k, v, r, bias_u, bias_v, config, dropout, keys),
                            out, lse};
  kernel.elements = tile_loops() == TileLoops::elements;
  const size_t bytes = kernel.scratch_bytes();
  kernel.level = scratch_level(bytes);
  const Index league = Index(q.extent(0)) * q.extent(2) * kernel.x.nq;
  Kokkos::parallel_for("relative_attention_forward", dynamic_team_policy(league, bytes), kernel);
}

template <class T>
void relative_attention_backward(In4<T> q, In4<T> k, In4<T> v, In3<T> r, In2<param_t<T>> bias_u,
                                 In2<param_t<T>> bias_v, In4<T> out, In3<compute_t<T>> lse,
                                 In4<T> dout, const RelativeAttentionConfig& config,
                                 const AttentionDropout& dropout, View4<T> dq, View4<T> dk,
                                 View4<T> dv, View3<T> dr, View2<param_t<T>> dbias_u,
                                 View2<param_t<T>> dbias_v, Workspace& workspace) {
  using C = compute_t<T>;
  const char* op = "relative_attention_backward";
  const Index lk = k.extent(1);
  check_relative_inputs<T>(op, q, k, v, r, bias_u, bias_v, config, dropout, lk);
  require_same_shape(op, "q", q, "out", out);
  require_same_shape(op, "q", q, "dout", dout);
  require_same_shape(op, "q", q, "dq", dq);
  require_same_shape(op, "k", k, "dk", dk);
  require_same_shape(op, "v", v, "dv", dv);
  require_same_shape(op, "r", r, "dr", dr);
  require_same_shape(op, "bias_u", bias_u, "dbias_u", dbias_u);
  require_same_shape(op, "bias_v", bias_v, "dbias_v", dbias_v);
  detail::check_lse(op, lse, q);
  Workspace::Frame frame(workspace);
  const auto x = relative_inputs<T>(q, k, v, r, bias_u, bias_v, config, dropout, lk);
  const Index batch = q.extent(0), heads = x.heads, dh = x.d_head, bhs = batch * heads;
  auto delta = frame.take<View3<C>>(lse.extent(0), lse.extent(1), lse.extent(2));
  detail::item_dot<T>(dout, out, delta);

  RelativeBackwardKeys<T> keys{x, lse, delta, dout, dk, dv};
  const size_t key_bytes = keys.scratch_bytes();
  keys.level = scratch_level(key_bytes);
  Kokkos::parallel_for("relative_attention_backward_keys",
                       dynamic_team_policy(bhs * x.nk, key_bytes), keys);

  auto part_u = frame.take<View3<C>>(batch * x.nq, heads, dh);
  auto part_v = frame.take<View3<C>>(batch * x.nq, heads, dh);
  RelativeBackwardQueries<T> queries{x, lse, delta, dout, dq, part_u, part_v};
  const size_t query_bytes = queries.scratch_bytes();
  queries.level = scratch_level(query_bytes);
  Kokkos::parallel_for("relative_attention_backward_queries",
                       dynamic_team_policy(bhs * x.nq, query_bytes), queries);

  const Index limit = x.limit, bd = TileTraits<C>::key_tile;
  auto part_r = frame.take<View4<C>>(batch, limit, heads, dh);
  RelativeBackwardDistances<T> distances{x, lse, delta, dout, part_r, (limit + bd - 1) / bd};
  const size_t distance_bytes = distances.scratch_bytes();
  distances.level = scratch_level(distance_bytes);
  Kokkos::parallel_for("relative_attention_backward_distances",
                       dynamic_team_policy(bhs * distances.nd, distance_bytes), distances);

  // The sums over batch entries (and query tiles, and clamped distances), each
  // in a fixed order.
  const Index parts = batch * x.nq;
  Kokkos::parallel_for(
      "relative_attention_bias_gradients", range(heads * dh), KOKKOS_LAMBDA(Index n) {
        const Index h = n / dh, c = n % dh;
        C su = C(0), sv = C(0);
        for (Index p = 0; p < parts; ++p) {
          su += part_u(p, h, c);
          sv += part_v(p, h, c);
        }
        dbias_u(h, c) = su;
        dbias_v(h, c) = sv;
      });
  const Index rows = r.extent(0), clamp = x.clamp_len;
  Kokkos::parallel_for(
      "relative_attention_r_gradient", range(rows * heads * dh), KOKKOS_LAMBDA(Index n) {
        const Index row = n / (heads * dh), h = n / dh % heads, c = n % dh;
        // Distances [row, last) land in this row: one, all above clamp_len for
        // the clamped row, none past the distances in use.
        Index last = row + 1;
        if (clamp > 0 && row == clamp) last = limit;
        if (clamp > 0 && row > clamp) last = row;
        if (last > limit) last = limit;
        C sum = C(0);
        for (Index b = 0; b < batch; ++b)
          for (Index d = row; d < last; ++d) sum += part_r(b, d, h, c);
        dr(row, h, c) = store<T>(sum);
      });
}

// Every storage type (float, double, bf16): lse and the saved statistics are
// compute_t<T>, u, v and their gradients param_t<T>.
#define REFORMER_INSTANTIATE(T)                                                                    \
  template void relative_attention_forward<T>(In4<T>, In4<T>, In4<T>, In3<T>, In2<param_t<T>>,     \
                                              In2<param_t<T>>, const RelativeAttentionConfig&,     \
                                              const AttentionDropout&, View4<T>,                   \
                                              View3<compute_t<T>>, Workspace&, Index);             \
  template void relative_attention_backward<T>(                                                    \
      In4<T>, In4<T>, In4<T>, In3<T>, In2<param_t<T>>, In2<param_t<T>>, In4<T>, In3<compute_t<T>>, \
      In4<T>, const RelativeAttentionConfig&, const AttentionDropout&, View4<T>, View4<T>,         \
      View4<T>, View3<T>, View2<param_t<T>>, View2<param_t<T>>, Workspace&);
REFORMER_INSTANTIATE_STORAGE_TYPES(REFORMER_INSTANTIATE)

}  // namespace reformer::attention
