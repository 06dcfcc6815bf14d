// The tiled backward shared by exact and relative attention (internal header;
// online_softmax.hpp is the forward's engine).
//
// FlashAttention's backward from the forward's lse and D_i = dout_i . out_i:
//   P = exp(S - lse) (masked, dropped out),  dP = dout V^T,
//   dS = P (drop dP - D),  dV = sum P^T dout,  dK = sum dS^T Qs,  dQs = sum dS K,
// where Qs are the queries as the scores see them (times the score scale;
// relative attention adds its bias u first). Two passes, each in O(L) memory:
// KeyPass (a team holds a key tile as K^T and V^T and streams the query tiles
// that see it: dK and dV in scratch) and QueryPass (a team holds a query tile
// as Qs^T and dout^T and streams its key tiles as rows: dQs in scratch). The
// engine owns the tiles and products every kind shares; a policy (one per
// team: it knows the batch entry and head, and holds its own tiles) adds the
// rest:
//   both passes
//     void softmax_base(i, lse_i, base, rest)  P = exp((S - base) - rest)
//     void load_queries(team, qc, kc, qs)  Qs of query tile qc into qs (rows),
//                                         and its own tiles of the tile pair
//     void add_products(team, qc, kc, pass)  its own products beside S and dP
//     void gradients(team, qc, kc, pass)  turns S into drop P and dP into dS
//                                         (key pass: pass.s, pass.dps, rows of
//                                         queries; query pass: pass.st,
//                                         pass.dpt, rows of keys)
//   key pass
//     void query_tiles(kc, begin, end), bool visits(qc, kc)
//     void begin_key_tile(team, kc)
//   query pass
//     void key_tiles(qc, begin, end)
//     void load_queries_transposed(team, qc, qt)  Qs^T of query tile qc, and
//                                         its own query tiles
//     void load_keys(team, qc, kc)        its own tiles of key tile kc
//     void add_sums(team, qc, kc, pass)   its own sums beside dQs += dS K
// Each hook runs between the engine's team barriers; none needs one of its own.
#pragma once

#include "attention/tiled/tile_loads.hpp"
#include "reformer/core/precision.hpp"
#include "reformer/core/team_scratch.hpp"
#include "reformer/core/tile_multiply.hpp"

namespace reformer::attention::detail {

// The (batch entry, head) a team works on, and the sizes every pass reads.
struct TileTeam {
  Index b = 0, h = 0, lq = 0, lk = 0, d_head = 0;
  bool elements = false;  // TileLoops::elements for the loads and stores
};

// Per query r of the tile at `first`: ld(0..2, r) = base, D_i, rest
// (policy.softmax_base; rows of BQ, so that loops along a row of keys read
// them contiguously).
template <class C, class P, class L>
KOKKOS_INLINE_FUNCTION void load_softmax_stats(const TeamMember& team, const P& policy,
                                               const TileTeam& t, const L& lse, const L& delta,
                                               Index first, Scratch2<C> ld) {
  Kokkos::parallel_for(Kokkos::TeamThreadRange(team, Index(ld.extent(1))), [&](Index r) {
    const Index i = first + r;
    C base = 0, rest = 0;
    if (i < t.lq) policy.softmax_base(i, C(lse(t.b, i, t.h)), base, rest);
    ld(0, r) = base;
    ld(1, r) = i < t.lq ? C(delta(t.b, i, t.h)) : C(0);
    ld(2, r) = rest;
  });
}

template <class C, class Shape>
struct KeyPass {
  using M = Scratch2<C>;
  static constexpr Index BQ = Shape::query_tile, BK = Shape::key_tile;
  M kt, vt, dks, dvs, qs, dos, s, dps, ld;

  static size_t tile_bytes(Index dp) {
    return 2 * M::shmem_size(dp, BK) + 2 * M::shmem_size(BK, dp) + 2 * M::shmem_size(BQ, dp) +
           2 * M::shmem_size(BQ, BK) + M::shmem_size(3, BQ);
  }
  template <class Space>
  KOKKOS_INLINE_FUNCTION KeyPass(const Space& scratch, Index dp)
      : kt(scratch, dp, BK),
        vt(scratch, dp, BK),
        dks(scratch, BK, dp),
        dvs(scratch, BK, dp),
        qs(scratch, BQ, dp),
        dos(scratch, BQ, dp),
        s(scratch, BQ, BK),
        dps(scratch, BQ, BK),
        ld(scratch, 3, BQ) {}

  // dK and dV of key tile kc, summed in dks and dvs (not stored: see store).
  // after(qc) runs after each query tile's sums (pass.dps holds its dS).
  template <class P, class K, class V, class D, class L, class After>
  KOKKOS_INLINE_FUNCTION void run(const TeamMember& team, const P& policy, const TileTeam& t,
                                  const K& k, const V& v, const D& dout, const L& lse,
                                  const L& delta, Index kc, After&& after) const {
    const Index dp = kt.extent(0), dh = t.d_head;
    zero<C>(team, dks);
    zero<C>(team, dvs);
    load_tile_cols(team, tile_source(k, t.b, t.h, kc * BK, t.lk), BK, dh, C(1), kt);
    load_tile_cols(team, tile_source(v, t.b, t.h, kc * BK, t.lk), BK, dh, C(1), vt);
    policy.begin_key_tile(team, kc);
    Index begin = 0, end = 0;
    policy.query_tiles(kc, begin, end);
    for (Index qc = begin; qc < end; ++qc) {
      if (!policy.visits(qc, kc)) continue;
      team.team_barrier();
      load_softmax_stats(team, policy, t, lse, delta, qc * BQ, ld);
      policy.load_queries(team, qc, kc, qs);
      load_tile_rows(team, tile_source(dout, t.b, t.h, qc * BQ, t.lq), BQ, dh, C(1), dos,
                     t.elements);
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
  // Writes the sums of key tile kc into dk and dv (rows past lk are padding).
  template <class Y>
  KOKKOS_INLINE_FUNCTION void store(const TeamMember& team, const TileTeam& t, Index kc,
                                    const Y& dk, const Y& dv) const {
    store_tile_rows(team, dks, dvs, dk, dv, t.b, t.h, kc * BK, BK, t.lk, t.d_head, t.elements);
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

  // dQs of query tile qc, summed in dqs (rows past lq are zero).
  template <class P, class K, class V, class D, class L>
  KOKKOS_INLINE_FUNCTION void run(const TeamMember& team, const P& policy, const TileTeam& t,
                                  const K& k, const V& v, const D& dout, const L& lse,
                                  const L& delta, Index qc) const {
    const Index dp = qt.extent(0), dh = t.d_head;
    zero<C>(team, dqs);
    policy.load_queries_transposed(team, qc, qt);
    load_tile_cols(team, tile_source(dout, t.b, t.h, qc * BQ, t.lq), BQ, dh, C(1), dot);
    load_softmax_stats(team, policy, t, lse, delta, qc * BQ, ld);
    Index begin = 0, end = 0;
    policy.key_tiles(qc, begin, end);
    for (Index kc = begin; kc < end; ++kc) {
      team.team_barrier();
      load_tile_rows(team, tile_source(k, t.b, t.h, kc * BK, t.lk), BK, dh, C(1), ks, t.elements);
      load_tile_rows(team, tile_source(v, t.b, t.h, kc * BK, t.lk), BK, dh, C(1), vs, t.elements);
      policy.load_keys(team, qc, kc);
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

}  // namespace reformer::attention::detail
