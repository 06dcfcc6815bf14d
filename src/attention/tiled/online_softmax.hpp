// The tiled online-softmax forward shared by exact, relative and the streamed
// chunked kernels of LSH and local attention (internal header; backward.hpp
// is the backward's engine).
//
// One team holds a tile of BQ queries and streams the key tiles they see. Per
// key tile a score policy fills S^T (rows: keys, columns: queries, masked) and
// hands over the tile's values; the engine folds the tile into every query's
// running maximum m, sum l and output o (online softmax, as in FlashAttention):
//   m' = max(m, max_j s_j),  a = e^{m - m'},
//   l' = a l + sum_j e^{s_j - m'},  o' = a o + sum_j e^{s_j - m'} drop_j v_j,
// and at the end writes out = o / l and lse = m + log l. T is the compute type
// (float32 for bf16 tensors: out may be stored in another type).
//
// A score policy (one per team: it knows the batch entry, head and query tile)
// gives
//   static constexpr double no_score   start of every maximum (below every score
//                                      that counts)
//   T weight(T score, T base) const    e^{score - base}, 0 for a masked score
//                                      where the policy's mask constant needs it
//   const T* scores(team, kc, st, vld) fills st with the masked S^T of key tile
//                                      kc and returns its value rows (row stride
//                                      in vld); called after a team barrier, ends
//                                      with one
//   T keep(i, j) const                 the dropout factor of query i, key j (only
//                                      with dropout; 0 for absent pairs)
#pragma once

#include "attention/tiled/tile_loads.hpp"
#include "reformer/attention/masks.hpp"
#include "reformer/core/precision.hpp"
#include "reformer/core/team_scratch.hpp"
#include "reformer/core/tile_multiply.hpp"

#include <type_traits>

namespace reformer::attention::detail {

// The engine's tiles in the caller's scratch (allocated where the caller's
// layout puts them): o [BQ, dpad], st [BK, BQ], stats [3, BQ] (per query: the
// maximum, the sum, the last rescale factor).
// Shape (a TileShape or TileTraits) gives the tile sizes and the register
// blocks of O += P V: TileTraits' unless given (exact attention's tilings, the
// streamed chunked kernels' smaller tiles); BQ must be a multiple of the
// register block width.
template <class T, class Shape = TileTraits<T>>
struct OnlineSoftmax {
  static constexpr Index BQ = Shape::query_tile, BK = Shape::key_tile;
  static constexpr Index G = Shape::block_cols;  // queries per column group
  static_assert(BQ % G == 0, "a query tile must be whole column groups");
  ScratchMatrix<T> o, st, stats;
  // TileLoops::elements (core/team_scratch.hpp): the passes between the
  // products take a thread per query or per element instead of G queries.
  bool elements = false;

  // Bytes of the engine's tiles (o, st, stats) for tiles of bq queries and bk
  // keys and heads padded to dp columns (any sizes: a host build accounts for
  // a GPU's tiles with it).
  static size_t tile_bytes(Index bq, Index bk, Index dp) {
    return ScratchMatrix<T>::shmem_size(bq, dp) + ScratchMatrix<T>::shmem_size(bk, bq) +
           ScratchMatrix<T>::shmem_size(3, bq);
  }

  // The columns of the query tile at i0 that hold queries (i < lq), rounded up
  // to whole column groups: the engine's passes and products stop there, so a
  // short sequence (or the last tile) does not pay for a whole tile of padding.
  // A score policy may fill only these columns of S^T.
  KOKKOS_INLINE_FUNCTION static constexpr Index live_columns(Index i0, Index lq) {
    return lq - i0 >= BQ ? BQ : (lq - i0 + G - 1) / G * G;
  }

  // Key tiles [begin, end) into the query tile at i0 of (b, h), then
  // out(b, i, h, :) and lse(b, i, h) for its queries i < lq.
  template <class Scores, class Out, class Lse>
  KOKKOS_INLINE_FUNCTION void run(const TeamMember& team, const Scores& scores, Index begin,
                                  Index end, bool dropout, Index b, Index h, Index i0, Index lq,
                                  Index d_head, const Out& out, const Lse& lse) const {
    const Index dp = o.extent(1), live = live_columns(i0, lq);
    zero<T>(team, o);
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, BQ), [&](Index s) {
      stats(0, s) = T(Scores::no_score);
      stats(1, s) = T(0);
    });
    for (Index kc = begin; kc < end; ++kc) {
      team.team_barrier();
      Index vld = dp;
      const T* vp = scores.scores(team, kc, st, vld);
      if (elements) {
        // One thread per query for the statistics (the weights are summed
        // here and formed again below: the same values, so the same result as
        // by rows), then one per element for the weights and the rescale.
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, live), [&](Index s) {
          T m_new = stats(0, s), sum = T(0);
          for (Index t = 0; t < BK; ++t) m_new = st(t, s) > m_new ? st(t, s) : m_new;
          for (Index t = 0; t < BK; ++t) sum += scores.weight(st(t, s), m_new);
          const T alpha = scores.weight(stats(0, s), m_new);
          stats(1, s) = stats(1, s) * alpha + sum;
          stats(2, s) = alpha;
          stats(0, s) = m_new;
        });
        team.team_barrier();
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, BK * live + live * dp), [&](Index e) {
          if (e < BK * live) {
            const Index t = e / live, s = e % live;
            T w = scores.weight(st(t, s), stats(0, s));
            if (dropout) w *= scores.keep(i0 + s, kc * BK + t);
            st(t, s) = w;
          } else {
            const Index s = (e - BK * live) / dp, c = (e - BK * live) % dp;
            o(s, c) *= stats(2, s);
          }
        });
        team.team_barrier();
        team_multiply<true, Shape>(team, live, dp, BK, &o(0, 0), dp, &st(0, 0), 1, BQ, vp, vld);
        continue;
      }
      // Online softmax per query (column), G columns per thread.
      Kokkos::parallel_for(Kokkos::TeamThreadRange(team, live / G), [&](Index g) {
        T* m = &stats(0, g * G);
        T* l = &stats(1, g * G);
        T* alpha = &stats(2, g * G);
        T m_new[G], sum[G];
        for (Index s = 0; s < G; ++s) {
          m_new[s] = m[s];
          sum[s] = T(0);
        }
        for (Index t = 0; t < BK; ++t) {
          const T* row = &st(t, g * G);
          for (Index s = 0; s < G; ++s) m_new[s] = row[s] > m_new[s] ? row[s] : m_new[s];
        }
        for (Index t = 0; t < BK; ++t) {
          T* row = &st(t, g * G);
          for (Index s = 0; s < G; ++s) {
            row[s] = scores.weight(row[s], m_new[s]);
            sum[s] += row[s];
          }
        }
        for (Index s = 0; s < G; ++s) {
          alpha[s] = scores.weight(m[s], m_new[s]);
          l[s] = l[s] * alpha[s] + sum[s];
          m[s] = m_new[s];
        }
        if (dropout)
          for (Index t = 0; t < BK; ++t) {
            T* row = &st(t, g * G);
            for (Index s = 0; s < G; ++s) row[s] *= scores.keep(i0 + g * G + s, kc * BK + t);
          }
      });
      team.team_barrier();
      Kokkos::parallel_for(Kokkos::TeamThreadRange(team, live), [&](Index s) {
        const T a = stats(2, s);
        T* orow = &o(s, 0);
        for (Index c = 0; c < dp; ++c) orow[c] *= a;
      });
      team.team_barrier();
      // O += P V, P read transposed out of S^T.
      team_multiply<true, Shape>(team, live, dp, BK, &o(0, 0), dp, &st(0, 0), 1, BQ, vp, vld);
    }
    team.team_barrier();
    if (elements) {
      Kokkos::parallel_for(Kokkos::TeamThreadRange(team, BQ * d_head), [&](Index e) {
        const Index s = e / d_head, c = e % d_head, i = i0 + s;
        if (i >= lq) return;
        const T sum = stats(1, s);
        auto& dst = out(b, i, h, c);
        using Stored = std::remove_reference_t<decltype(dst)>;
        dst = store<Stored>(o(s, c) * (T(1) / sum));
        if (c == 0) lse(b, i, h) = stats(0, s) + compat::log(sum);
      });
      return;
    }
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, BQ), [&](Index s) {
      const Index i = i0 + s;
      if (i >= lq) return;
      const T sum = stats(1, s), inverse = T(1) / sum;
      auto* dst = &out(b, i, h, 0);
      using Stored = std::remove_reference_t<decltype(*dst)>;  // T, or bf16 (rounded once)
      for (Index c = 0; c < d_head; ++c) dst[c] = store<Stored>(o(s, c) * inverse);
      lse(b, i, h) = stats(0, s) + compat::log(sum);
    });
  }
};

}  // namespace reformer::attention::detail
