// The tiled backward shared by exact, relative and the streamed LSH/local
// attention (internal header; online_softmax.hpp is the forward's engine).
//
// FlashAttention's backward from the forward's lse and D_i = dout_i . out_i:
//   P = exp(S - lse) (masked, dropped out),  dP = dout V^T,
//   dS = P (drop dP - D),  dV = sum P^T dout,  dK = sum dS^T Qs,  dQs = sum dS K,
// where Qs are the queries as the scores see them (times the score scale;
// relative attention adds its bias u first). Two passes, each in O(L) memory:
// KeyPass (a team holds a key tile as K^T and V^T and streams the query tiles
// that see it: dK and dV in scratch) and QueryPass (a team holds a query tile
// as Qs^T and dout^T and streams its key tiles as rows: dQs in scratch). The
// engine owns the tiles, products and barriers every kind shares; a policy
// (one per team: it knows the batch entry and head, and holds its own tiles)
// loads the tiles and adds the rest:
//   key pass
//     void query_tiles(kc, begin, end), bool visits(qc, kc)
//     void load_key_tile(team, kc, pass)  pass.kt, pass.vt (K^T, V^T)
//     void load_query_tile(team, qc, kc, pass)  pass.qs, pass.dos (Qs and dout
//                                         rows), pass.ld (softmax statistics,
//                                         where the pass has them)
//     void add_products(team, qc, kc, pass)  its own products beside S and dP
//     void gradients(team, qc, kc, pass)  pass.s: S -> drop P, pass.dps: dP -> dS
//   query pass
//     void key_tiles(qc, begin, end)
//     void load_query_tile(team, qc, pass)  pass.qt, pass.dot (Qs^T, dout^T),
//                                         pass.ld
//     void load_key_tile(team, qc, kc, pass)  pass.ks, pass.vs (K, V rows)
//     void add_products(team, qc, kc, pass)
//     void gradients(team, qc, kc, pass)  pass.st: S^T -> drop P^T,
//                                         pass.dpt: dP^T -> dS^T
//     void add_sums(team, qc, kc, pass)   its own sums beside dQs += dS K
// Every hook is called by the whole team between the engine's barriers. A
// kind over whole sequences (exact, relative) loads with SequenceTiles below;
// the streamed chunked kernels gather their items by position instead.
#pragma once

#include "attention/tiled/tile_loads.hpp"
#include "reformer/core/precision.hpp"
#include "reformer/core/team_scratch.hpp"
#include "reformer/core/tile_multiply.hpp"

namespace reformer::attention::detail {

template <class C, class Shape>
struct KeyPass {
  using M = Scratch2<C>;
  static constexpr Index BQ = Shape::query_tile, BK = Shape::key_tile;
  M kt, vt, dks, dvs, qs, dos, s, dps, ld;

  // stats: whether the pass holds the softmax statistics of a query tile (ld).
  static size_t tile_bytes(Index dp, bool stats = true) {
    return 2 * M::shmem_size(dp, BK) + 2 * M::shmem_size(BK, dp) + 2 * M::shmem_size(BQ, dp) +
           2 * M::shmem_size(BQ, BK) + (stats ? M::shmem_size(3, BQ) : 0);
  }
  template <class Space>
  KOKKOS_INLINE_FUNCTION KeyPass(const Space& scratch, Index dp, bool stats = true)
      : kt(scratch, dp, BK),
        vt(scratch, dp, BK),
        dks(scratch, BK, dp),
        dvs(scratch, BK, dp),
        qs(scratch, BQ, dp),
        dos(scratch, BQ, dp),
        s(scratch, BQ, BK),
        dps(scratch, BQ, BK),
        ld(stats ? M(scratch, 3, BQ) : M()) {}

  // dK and dV of key tile kc, summed in dks and dvs (the caller stores them).
  // after(qc) runs after each query tile's sums (dps still holds its dS).
  template <class P, class After>
  KOKKOS_INLINE_FUNCTION void run(const TeamMember& team, const P& policy, Index kc,
                                  After&& after) const {
    const Index dp = kt.extent(0);
    zero<C>(team, dks);
    zero<C>(team, dvs);
    policy.load_key_tile(team, kc, *this);
    Index begin = 0, end = 0;
    policy.query_tiles(kc, begin, end);
    for (Index qc = begin; qc < end; ++qc) {
      if (!policy.visits(qc, kc)) continue;
      team.team_barrier();
      policy.load_query_tile(team, qc, kc, *this);
      team.team_barrier();
      team_multiply<false, Shape>(team, BQ, BK, dp, &s(0, 0), BK, &qs(0, 0), dp, 1, &kt(0, 0), BK);
      team_multiply<false, Shape>(team, BQ, BK, dp, &dps(0, 0), BK, &dos(0, 0), dp, 1, &vt(0, 0),
                                  BK);
      policy.add_products(team, qc, kc, *this);
      team.team_barrier();
      policy.gradients(team, qc, kc, *this);
      team.team_barrier();
      team_multiply<true, Shape>(team, BK, dp, BQ, &dvs(0, 0), dp, &s(0, 0), 1, BK, &dos(0, 0), dp);
      team_multiply<true, Shape>(team, BK, dp, BQ, &dks(0, 0), dp, &dps(0, 0), 1, BK, &qs(0, 0),
                                 dp);
      after(qc);
    }
    team.team_barrier();
  }
};

template <class C, class Shape>
struct QueryPass {
  using M = Scratch2<C>;
  static constexpr Index BQ = Shape::query_tile, BK = Shape::key_tile;
  M qt, dot, dqs, ks, vs, st, dpt, ld;

  static size_t tile_bytes(Index dp) {
    return 2 * M::shmem_size(dp, BQ) + M::shmem_size(BQ, dp) + 2 * M::shmem_size(BK, dp) +
           2 * M::shmem_size(BK, BQ) + M::shmem_size(3, BQ);
  }
  template <class Space>
  KOKKOS_INLINE_FUNCTION QueryPass(const Space& scratch, Index dp)
      : qt(scratch, dp, BQ),
        dot(scratch, dp, BQ),
        dqs(scratch, BQ, dp),
        ks(scratch, BK, dp),
        vs(scratch, BK, dp),
        st(scratch, BK, BQ),
        dpt(scratch, BK, BQ),
        ld(scratch, 3, BQ) {}

  // dQs of query tile qc, summed in dqs (rows past the sequence are zero).
  template <class P>
  KOKKOS_INLINE_FUNCTION void run(const TeamMember& team, const P& policy, Index qc) const {
    const Index dp = qt.extent(0);
    zero<C>(team, dqs);
    policy.load_query_tile(team, qc, *this);
    Index begin = 0, end = 0;
    policy.key_tiles(qc, begin, end);
    for (Index kc = begin; kc < end; ++kc) {
      team.team_barrier();
      policy.load_key_tile(team, qc, kc, *this);
      team.team_barrier();
      team_multiply<false, Shape>(team, BK, BQ, dp, &st(0, 0), BQ, &ks(0, 0), dp, 1, &qt(0, 0), BQ);
      team_multiply<false, Shape>(team, BK, BQ, dp, &dpt(0, 0), BQ, &vs(0, 0), dp, 1, &dot(0, 0),
                                  BQ);
      policy.add_products(team, qc, kc, *this);
      team.team_barrier();
      policy.gradients(team, qc, kc, *this);
      team.team_barrier();
      team_multiply<true, Shape>(team, BQ, dp, BK, &dqs(0, 0), dp, &dpt(0, 0), 1, BQ, &ks(0, 0),
                                 dp);
      policy.add_sums(team, qc, kc, *this);
    }
    team.team_barrier();
  }
};

// The loads of a kind over whole sequences [batch, length, heads, d_head]
// (exact and relative attention) for one team's (batch entry, head): tiles of
// contiguous positions, rows past the sequence zero. Softmax statistics per
// query r of a tile: ld(0..2, r) = base, D_i, rest, P = exp((S - base) - rest)
// (softmax_base of the kind; rows of BQ, so that loops along a row of keys read
// them contiguously).
template <class T>
struct SequenceTiles {
  using C = compute_t<T>;
  Kokkos::View<const T****, Layout, MemSpace> k, v, dout;
  Kokkos::View<const C***, Layout, MemSpace> lse, delta;
  Index b = 0, h = 0, lq = 0, lk = 0, d_head = 0;
  bool elements = false;  // TileLoops::elements for the row loads and stores

  template <class X>
  KOKKOS_INLINE_FUNCTION TileSource<X, param_t<T>> rows(const X& x, Index first,
                                                        Index length) const {
    return tile_source(x, b, h, first, length);
  }
  template <class P>
  KOKKOS_INLINE_FUNCTION void load_stats(const TeamMember& team, const P& policy, Index first,
                                         Scratch2<C> ld) const {
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, Index(ld.extent(1))), [&](Index r) {
      const Index i = first + r;
      C base = 0, rest = 0;
      if (i < lq) policy.softmax_base(i, lse(b, i, h), base, rest);
      ld(0, r) = base;
      ld(1, r) = i < lq ? delta(b, i, h) : C(0);
      ld(2, r) = rest;
    });
  }
  // Key pass: K^T and V^T of key tile kc; dout rows and the statistics of
  // query tile qc (the policy loads Qs).
  template <class Pass>
  KOKKOS_INLINE_FUNCTION void load_key_cols(const TeamMember& team, Index kc,
                                            const Pass& pass) const {
    load_tile_cols(team, rows(k, kc * Pass::BK, lk), Pass::BK, d_head, C(1), pass.kt);
    load_tile_cols(team, rows(v, kc * Pass::BK, lk), Pass::BK, d_head, C(1), pass.vt);
  }
  template <class P, class Pass>
  KOKKOS_INLINE_FUNCTION void load_dout_rows(const TeamMember& team, const P& policy, Index qc,
                                             const Pass& pass) const {
    load_stats(team, policy, qc * Pass::BQ, pass.ld);
    load_tile_rows(team, rows(dout, qc * Pass::BQ, lq), Pass::BQ, d_head, C(1), pass.dos, elements);
  }
  // Query pass: dout^T and the statistics of query tile qc; K and V rows of
  // key tile kc.
  template <class P, class Pass>
  KOKKOS_INLINE_FUNCTION void load_dout_cols(const TeamMember& team, const P& policy, Index qc,
                                             const Pass& pass) const {
    load_tile_cols(team, rows(dout, qc * Pass::BQ, lq), Pass::BQ, d_head, C(1), pass.dot);
    load_stats(team, policy, qc * Pass::BQ, pass.ld);
  }
  template <class Pass>
  KOKKOS_INLINE_FUNCTION void load_key_rows(const TeamMember& team, Index kc,
                                            const Pass& pass) const {
    load_tile_rows(team, rows(k, kc * Pass::BK, lk), Pass::BK, d_head, C(1), pass.ks, elements);
    load_tile_rows(team, rows(v, kc * Pass::BK, lk), Pass::BK, d_head, C(1), pass.vs, elements);
  }
  // Writes the key pass's sums of key tile kc into dk and dv (rows past lk
  // are padding).
  template <class Pass, class Y>
  KOKKOS_INLINE_FUNCTION void store_keys(const TeamMember& team, Index kc, const Pass& pass,
                                         const Y& dk, const Y& dv) const {
    store_tile_rows(team, pass.dks, pass.dvs, dk, dv, b, h, kc * Pass::BK, Pass::BK, lk, d_head,
                    elements);
  }
};

}  // namespace reformer::attention::detail
