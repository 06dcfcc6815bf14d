// Exact attention in O(L) memory: fused team kernels over tiles (see exact.hpp).
//
// Every product runs on tiles in team scratch through team_multiply (register
// blocks, core/tile_multiply.hpp). Queries are pre-multiplied by the score
// scale when they are loaded, so S = Qs K^T, dK = dS^T Qs and dQ = scale dS K.
// Tiles are padded with zero rows (past the sequence) and zero columns (d_head
// rounded up to whole register blocks); padded keys are "absent" (position -1)
// and take no part in any softmax, padded queries are never written out.
//
// Masks and their constants are those of full attention, applied with the
// chunked kernels' mask_row; the dropout mask of score (bh, i, j) is full
// attention's ((bh * Lq + i) * Lk + j), a pure function of the position pair, so
// forward and both backward passes replay it whatever the tiling.
#include "reformer/attention/exact.hpp"

#include "attention/attention_checks.hpp"
#include "attention/chunked_kernels.hpp"
#include "reformer/core/instantiate.hpp"
#include "reformer/core/tile_multiply.hpp"

#include <cmath>

namespace reformer::attention {
namespace {

using detail::Scratch2;
using detail::ScratchInts;
using Ints1 = Kokkos::View<const int*, Layout, MemSpace>;

// Start of every online-softmax maximum, below every mask constant.
constexpr double kNoScore = -1e30;

// What every exact kernel reads: the inputs and masks (as the chunked kernels'
// inputs, whose mask_row applies the masks to a row of scores), the tiling and
// the first non-padding key of each batch entry.
template <class T>
struct ExactInputs {
  using Traits = TileTraits<T>;
  static constexpr Index BQ = Traits::query_tile, BK = Traits::key_tile;

  detail::ChunkedInputs<T> in;
  Index lq = 0, lk = 0, dpad = 0, nq = 0, nk = 0;
  T scale = T(1);
  // With padding: the first non-padding key of each batch entry (Lk if none).
  // Empty without padding. Without the self-mask, queries before first_valid(b)
  // (causal) or every query of an entry without a valid key (not causal) see
  // only padding: every score is the mask constant, so, as in full attention,
  // they attend uniformly to every key, and no key tile may be skipped for them.
  Ints1 first_valid;

  KOKKOS_INLINE_FUNCTION bool uniform_row(Index b, Index i) const {
    if (in.self_mask || first_valid.extent(0) == 0) return false;
    return in.causal ? i < Index(first_valid(b)) : Index(first_valid(b)) >= lk;
  }
  // Backward recomputes P = exp((score - base) - rest): base = lse, rest = 0,
  // except for uniform rows, whose lse (the mask constant + log Lk) has lost
  // the digits of log Lk to rounding: base = mask constant, rest = log Lk, so
  // that P = 1 / Lk to the last bit, as in full attention.
  KOKKOS_INLINE_FUNCTION void softmax_base(Index b, Index i, T lse_i, T& base, T& rest) const {
    const bool uniform = uniform_row(b, i);
    base = uniform ? T(MaskValues<T>::masked) : lse_i;
    rest = uniform ? T(compat::log(T(lk))) : T(0);
  }

  // Key tiles that query tile qt of batch entry b visits: all, or causal up to
  // the diagonal.
  KOKKOS_INLINE_FUNCTION Index key_tiles(Index b, Index qt) const {
    if (!in.causal) return nk;
    if (uniform_row(b, qt * BQ)) return nk;
    const Index last = (qt + 1) * BQ < lq ? (qt + 1) * BQ - 1 : lq - 1;
    return last / BK + 1;
  }
  KOKKOS_INLINE_FUNCTION T drop(Index bh, Index i, Index j) const {
    if (in.dropout.rate == 0.0) return T(1);
    const std::uint64_t index = (std::uint64_t(bh) * lq + i) * lk + j;
    return ops::dropout_keeps(in.dropout.key, index, in.dropout.rate)
               ? T(1.0 / (1.0 - in.dropout.rate))
               : T(0);
  }
  // Loads `rows` rows of x [batch, length, heads, d] starting at `first` into
  // scratch (rows and/or transposed), times `factor`; rows past `length` are zero.
  template <class X>
  KOKKOS_INLINE_FUNCTION void load(const TeamMember& team, const X& x, Index b, Index h,
                                   Index first, Index rows, Index length, T factor,
                                   Scratch2<T> as_rows, Scratch2<T> as_cols) const {
    detail::gather_rows<T>(
        team, rows, in.d_head, [&](Index r) { return first + r < length ? first + r : Index(-1); },
        [&](Index pos, Index c) { return T(x(b, pos, h, c)) * factor; }, as_rows, as_cols);
  }
};

// Zeroes a scratch matrix (the padding of a tile stays zero afterwards).
template <class T>
KOKKOS_INLINE_FUNCTION void zero(const TeamMember& team, Scratch2<T> m) {
  const Index cols = m.extent(1);
  Kokkos::parallel_for(Kokkos::TeamThreadRange(team, Index(m.extent(0))), [&](Index r) {
    for (Index c = 0; c < cols; ++c) m(r, c) = T(0);
  });
}

// Forward: one team per (batch * head, query tile), heaviest tiles first.
template <class T>
struct ExactForward {
  using Traits = TileTraits<T>;
  static constexpr Index BQ = Traits::query_tile, BK = Traits::key_tile;
  ExactInputs<T> x;
  View4<T> out;
  View3<T> lse;
  int level = 0;

  size_t scratch_bytes() const {
    const Index dp = x.dpad;
    return 2 * Scratch2<T>::shmem_size(BQ, dp) + Scratch2<T>::shmem_size(dp, BK) +
           Scratch2<T>::shmem_size(BK, dp) + Scratch2<T>::shmem_size(BQ, BK) +
           Scratch2<T>::shmem_size(BQ, 2) + ScratchInts::shmem_size(BK);
  }

  KOKKOS_INLINE_FUNCTION void operator()(const TeamMember& team) const {
    const Index bhs = x.in.heads * out.extent(0), heads = x.in.heads, dh = x.in.d_head;
    const Index dp = x.dpad, lq = x.lq, lk = x.lk;
    const Index qt = x.nq - 1 - team.league_rank() / bhs, bh = team.league_rank() % bhs;
    const Index b = bh / heads, h = bh % heads;
    const auto scratch = team.team_scratch(level);
    Scratch2<T> qs(scratch, BQ, dp), kt(scratch, dp, BK), vs(scratch, BK, dp), s(scratch, BQ, BK),
        o(scratch, BQ, dp), ml(scratch, BQ, 2);
    ScratchInts posk(scratch, BK);
    Scratch2<T> none;
    zero<T>(team, o);
    if (dh != dp) {
      zero<T>(team, qs);
      zero<T>(team, kt);
      zero<T>(team, vs);
    }
    team.team_barrier();
    x.load(team, x.in.q, b, h, qt * BQ, BQ, lq, x.scale, qs, none);
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, BQ), [&](Index r) {
      ml(r, 0) = T(kNoScore);
      ml(r, 1) = T(0);
    });
    const Index tiles = x.key_tiles(b, qt);
    for (Index kc = 0; kc < tiles; ++kc) {
      team.team_barrier();
      Kokkos::parallel_for(Kokkos::TeamThreadRange(team, BK), [&](Index t) {
        const Index j = kc * BK + t;
        posk(t) = j < lk ? int(j) : -1;
      });
      x.load(team, x.in.k, b, h, kc * BK, BK, lk, T(1), none, kt);
      x.load(team, x.in.v, b, h, kc * BK, BK, lk, T(1), vs, none);
      team.team_barrier();
      team_multiply<false>(team, BQ, BK, dp, &s(0, 0), BK, &qs(0, 0), dp, 1, &kt(0, 0), BK);
      team.team_barrier();
      // Online softmax: rescale the row's sum and output to the new maximum.
      Kokkos::parallel_for(Kokkos::TeamThreadRange(team, BQ), [&](Index r) {
        const Index i = qt * BQ + r;
        T* row = &s(r, 0);
        x.in.template mask_row<false>(b, bh, i, &posk(0), BK, row, nullptr);
        const T m_old = ml(r, 0), tile_max = max_values(row, BK);
        const T m = tile_max > m_old ? tile_max : m_old;
        const T alpha = softmax_weight(m_old - m);
        for (Index t = 0; t < BK; ++t) row[t] = softmax_weight(row[t] - m);
        ml(r, 0) = m;
        ml(r, 1) = ml(r, 1) * alpha + sum_values(row, BK);
        if (x.in.dropout.rate > 0.0 && i < lq)
          for (Index t = 0; t < BK; ++t) row[t] *= posk(t) < 0 ? T(0) : x.drop(bh, i, posk(t));
        T* orow = &o(r, 0);
        for (Index c = 0; c < dp; ++c) orow[c] *= alpha;
      });
      team.team_barrier();
      team_multiply<true>(team, BQ, dp, BK, &o(0, 0), dp, &s(0, 0), BK, 1, &vs(0, 0), dp);
    }
    team.team_barrier();
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, BQ), [&](Index r) {
      const Index i = qt * BQ + r;
      if (i >= lq) return;
      const T sum = ml(r, 1), inverse = T(1) / sum;
      T* dst = &out(b, i, h, 0);
      for (Index c = 0; c < dh; ++c) dst[c] = o(r, c) * inverse;
      lse(b, i, h) = ml(r, 0) + compat::log(sum);
    });
  }
};

// Backward, keys: one team per (batch * head, key tile) streams the query tiles
// that see it and sums dK = dS^T Qs and dV = dropout(P)^T dout in scratch.
// Scores are computed transposed (rows: keys), so padding is a row constant.
template <class T>
struct ExactBackwardKeys {
  using Traits = TileTraits<T>;
  static constexpr Index BQ = Traits::query_tile, BK = Traits::key_tile;
  ExactInputs<T> x;
  Kokkos::View<const T***, Layout, MemSpace> lse, delta;
  Kokkos::View<const T****, Layout, MemSpace> dout;
  View4<T> dk, dv;
  int level = 0;

  size_t scratch_bytes() const {
    const Index dp = x.dpad;
    return 4 * Scratch2<T>::shmem_size(BK, dp) + 2 * Scratch2<T>::shmem_size(dp, BQ) +
           2 * Scratch2<T>::shmem_size(BQ, dp) + 2 * Scratch2<T>::shmem_size(BK, BQ) +
           Scratch2<T>::shmem_size(BQ, 3) + ScratchInts::shmem_size(BQ);
  }

  KOKKOS_INLINE_FUNCTION void operator()(const TeamMember& team) const {
    const Index bhs = x.in.heads * dout.extent(0), heads = x.in.heads, dh = x.in.d_head;
    const Index dp = x.dpad, lq = x.lq, lk = x.lk;
    const Index kc = team.league_rank() / bhs, bh = team.league_rank() % bhs;
    const Index b = bh / heads, h = bh % heads;
    const auto scratch = team.team_scratch(level);
    Scratch2<T> ks(scratch, BK, dp), vs(scratch, BK, dp), dks(scratch, BK, dp),
        dvs(scratch, BK, dp), qt(scratch, dp, BQ), dot(scratch, dp, BQ), qs(scratch, BQ, dp),
        dos(scratch, BQ, dp), st(scratch, BK, BQ), dpt(scratch, BK, BQ), ld(scratch, BQ, 3);
    ScratchInts posq(scratch, BQ);
    Scratch2<T> none;
    zero<T>(team, dks);
    zero<T>(team, dvs);
    if (dh != dp) {
      zero<T>(team, ks);
      zero<T>(team, vs);
      zero<T>(team, qt);
      zero<T>(team, dot);
      zero<T>(team, qs);
      zero<T>(team, dos);
    }
    team.team_barrier();
    x.load(team, x.in.k, b, h, kc * BK, BK, lk, T(1), ks, none);
    x.load(team, x.in.v, b, h, kc * BK, BK, lk, T(1), vs, none);
    const bool padding = x.in.key_valid.extent(0) != 0, causal = x.in.causal;
    const bool self_mask = x.in.self_mask, dropout = x.in.dropout.rate > 0.0;
    const T self_value = T(MaskValues<T>::self), masked_value = T(MaskValues<T>::masked);
    for (Index qc = 0; qc < x.nq; ++qc) {
      if (kc >= x.key_tiles(b, qc)) continue;  // wholly above the diagonal
      team.team_barrier();
      Kokkos::parallel_for(Kokkos::TeamThreadRange(team, BQ), [&](Index r) {
        const Index i = qc * BQ + r;
        const bool present = i < lq;
        posq(r) = present ? int(i) : -1;
        T base = 0, rest = 0;
        if (present) x.softmax_base(b, i, lse(b, i, h), base, rest);
        ld(r, 0) = base;
        ld(r, 1) = present ? delta(b, i, h) : T(0);
        ld(r, 2) = rest;
      });
      x.load(team, x.in.q, b, h, qc * BQ, BQ, lq, x.scale, qs, qt);
      x.load(team, dout, b, h, qc * BQ, BQ, lq, T(1), dos, dot);
      team.team_barrier();
      team_multiply<false>(team, BK, BQ, dp, &st(0, 0), BQ, &ks(0, 0), dp, 1, &qt(0, 0), BQ);
      team_multiply<false>(team, BK, BQ, dp, &dpt(0, 0), BQ, &vs(0, 0), dp, 1, &dot(0, 0), BQ);
      team.team_barrier();
      // st <- dropout(P)^T, dpt <- dS^T (zero where a constant replaced the score).
      Kokkos::parallel_for(Kokkos::TeamThreadRange(team, BK), [&](Index t) {
        const Index j = kc * BK + t;
        T* srow = &st(t, 0);
        T* drow = &dpt(t, 0);
        if (j >= lk) {
          for (Index r = 0; r < BQ; ++r) srow[r] = drow[r] = T(0);
          return;
        }
        const bool padded = padding && x.in.key_valid(b, j) == 0;
        // P = exp(score - lse), dS = P (drop dP - D); the loop without dropout
        // has no calls and vectorises.
        auto entry = [&](Index r, T keep) {
          const int i = posq(r);
          const bool absent = i < 0, self = self_mask && i == j;
          const bool constant = padded || (causal && j > i);
          const T score = self ? self_value : constant ? masked_value : srow[r];
          const T p = absent ? T(0) : softmax_weight((score - ld(r, 0)) - ld(r, 2));
          const T grad = self || constant ? T(0) : T(1);
          drow[r] = p * grad * (keep * drow[r] - ld(r, 1));
          srow[r] = p * keep;
        };
        if (dropout) {
          for (Index r = 0; r < BQ; ++r) entry(r, posq(r) < 0 ? T(0) : x.drop(bh, posq(r), j));
        } else {
          for (Index r = 0; r < BQ; ++r) entry(r, T(1));
        }
      });
      team.team_barrier();
      team_multiply<true>(team, BK, dp, BQ, &dvs(0, 0), dp, &st(0, 0), BQ, 1, &dos(0, 0), dp);
      team_multiply<true>(team, BK, dp, BQ, &dks(0, 0), dp, &dpt(0, 0), BQ, 1, &qs(0, 0), dp);
    }
    team.team_barrier();
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, BK), [&](Index t) {
      const Index j = kc * BK + t;
      if (j >= lk) return;
      T* gk = &dk(b, j, h, 0);
      T* gv = &dv(b, j, h, 0);
      for (Index c = 0; c < dh; ++c) {
        gk[c] = dks(t, c);
        gv[c] = dvs(t, c);
      }
    });
  }
};

// Backward, queries: one team per (batch * head, query tile) streams the key
// tiles it sees and sums dQ = scale dS K in scratch, heaviest tiles first.
template <class T>
struct ExactBackwardQueries {
  using Traits = TileTraits<T>;
  static constexpr Index BQ = Traits::query_tile, BK = Traits::key_tile;
  ExactInputs<T> x;
  Kokkos::View<const T***, Layout, MemSpace> lse, delta;
  Kokkos::View<const T****, Layout, MemSpace> dout;
  View4<T> dq;
  int level = 0;

  size_t scratch_bytes() const {
    const Index dp = x.dpad;
    return 3 * Scratch2<T>::shmem_size(BQ, dp) + 2 * Scratch2<T>::shmem_size(dp, BK) +
           Scratch2<T>::shmem_size(BK, dp) + 3 * Scratch2<T>::shmem_size(BQ, BK) +
           Scratch2<T>::shmem_size(BQ, 3) + ScratchInts::shmem_size(BK);
  }

  KOKKOS_INLINE_FUNCTION void operator()(const TeamMember& team) const {
    const Index bhs = x.in.heads * dout.extent(0), heads = x.in.heads, dh = x.in.d_head;
    const Index dp = x.dpad, lq = x.lq, lk = x.lk;
    const Index qc = x.nq - 1 - team.league_rank() / bhs, bh = team.league_rank() % bhs;
    const Index b = bh / heads, h = bh % heads;
    const auto scratch = team.team_scratch(level);
    Scratch2<T> qs(scratch, BQ, dp), dos(scratch, BQ, dp), dqs(scratch, BQ, dp),
        kt(scratch, dp, BK), vt(scratch, dp, BK), ks(scratch, BK, dp), s(scratch, BQ, BK),
        dps(scratch, BQ, BK), grad_masks(scratch, BQ, BK), ld(scratch, BQ, 3);
    ScratchInts posk(scratch, BK);
    Scratch2<T> none;
    zero<T>(team, dqs);
    if (dh != dp) {
      zero<T>(team, qs);
      zero<T>(team, dos);
      zero<T>(team, kt);
      zero<T>(team, vt);
      zero<T>(team, ks);
    }
    team.team_barrier();
    x.load(team, x.in.q, b, h, qc * BQ, BQ, lq, x.scale, qs, none);
    x.load(team, dout, b, h, qc * BQ, BQ, lq, T(1), dos, none);
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, BQ), [&](Index r) {
      const Index i = qc * BQ + r;
      T base = 0, rest = 0;
      if (i < lq) x.softmax_base(b, i, lse(b, i, h), base, rest);
      ld(r, 0) = base;
      ld(r, 1) = i < lq ? delta(b, i, h) : T(0);
      ld(r, 2) = rest;
    });
    const bool dropout = x.in.dropout.rate > 0.0;
    const Index tiles = x.key_tiles(b, qc);
    for (Index kc = 0; kc < tiles; ++kc) {
      team.team_barrier();
      Kokkos::parallel_for(Kokkos::TeamThreadRange(team, BK), [&](Index t) {
        const Index j = kc * BK + t;
        posk(t) = j < lk ? int(j) : -1;
      });
      x.load(team, x.in.k, b, h, kc * BK, BK, lk, T(1), ks, kt);
      x.load(team, x.in.v, b, h, kc * BK, BK, lk, T(1), none, vt);
      team.team_barrier();
      team_multiply<false>(team, BQ, BK, dp, &s(0, 0), BK, &qs(0, 0), dp, 1, &kt(0, 0), BK);
      team_multiply<false>(team, BQ, BK, dp, &dps(0, 0), BK, &dos(0, 0), dp, 1, &vt(0, 0), BK);
      team.team_barrier();
      // dps <- dS = P (drop dP - D), zero where a constant replaced the score.
      Kokkos::parallel_for(Kokkos::TeamThreadRange(team, BQ), [&](Index r) {
        const Index i = qc * BQ + r;
        T* row = &s(r, 0);
        T* drow = &dps(r, 0);
        T* grad = &grad_masks(r, 0);
        x.in.template mask_row<true>(b, bh, i, &posk(0), BK, row, grad);
        const T base = ld(r, 0), d_i = ld(r, 1), rest = ld(r, 2);
        if (dropout && i < lq) {
          for (Index t = 0; t < BK; ++t) {
            const T keep = posk(t) < 0 ? T(0) : x.drop(bh, i, posk(t));
            drow[t] = softmax_weight((row[t] - base) - rest) * grad[t] * (keep * drow[t] - d_i);
          }
        } else {
          for (Index t = 0; t < BK; ++t)
            drow[t] = softmax_weight((row[t] - base) - rest) * grad[t] * (drow[t] - d_i);
        }
      });
      team.team_barrier();
      team_multiply<true>(team, BQ, dp, BK, &dqs(0, 0), dp, &dps(0, 0), BK, 1, &ks(0, 0), dp);
    }
    team.team_barrier();
    const T scale = x.scale;
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, BQ), [&](Index r) {
      const Index i = qc * BQ + r;
      if (i >= lq) return;
      T* dst = &dq(b, i, h, 0);
      for (Index c = 0; c < dh; ++c) dst[c] = dqs(r, c) * scale;
    });
  }
};

template <class T>
void check_inputs(const char* op, In4<T> q, In4<T> k, In4<T> v, const ExactAttentionConfig& config,
                  const AttentionCall& call) {
  config.validate();
  detail::check_qkv(op, q, k, v, /*same_length=*/false);
  if (call.masks.causal || config.self_mask)
    require<ShapeError>(q.extent(1) == k.extent(1), op, ": causal or self masks need equal query ",
                        "and key lengths, got Lq = ", q.extent(1), " and Lk = ", k.extent(1));
  detail::check_masks(op, call.masks, k.extent(0), k.extent(1));
  detail::check_dropout(op, call.dropout);
}

// The kernels' inputs; first_valid is filled when causal attention has padding.
template <class T>
ExactInputs<T> exact_inputs(In4<T> q, In4<T> k, In4<T> v, const ExactAttentionConfig& config,
                            const AttentionCall& call, Workspace::Frame& frame) {
  using Traits = TileTraits<T>;
  ExactInputs<T> x;
  x.in.q = q;
  x.in.k = k;
  x.in.v = v;
  x.in.key_valid = call.masks.key_valid;
  x.in.causal = call.masks.causal;
  x.in.self_mask = config.self_mask;
  x.in.length = q.extent(1);
  x.in.heads = q.extent(2);
  x.in.d_head = q.extent(3);
  x.in.dropout = call.dropout;
  x.lq = q.extent(1);
  x.lk = k.extent(1);
  x.dpad = Traits::pad_columns(q.extent(3));
  x.nq = (x.lq + Traits::query_tile - 1) / Traits::query_tile;
  x.nk = (x.lk + Traits::key_tile - 1) / Traits::key_tile;
  x.scale = T(config.scale != 0.0 ? config.scale : 1.0 / std::sqrt(double(q.extent(3))));
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

void ExactAttentionConfig::validate() const {
  require<ConfigError>(std::isfinite(scale) && scale >= 0, "ExactAttentionConfig: scale is ", scale,
                       " but must be finite and >= 0 (0: 1 / sqrt(d_head))");
}

template <class T>
void exact_attention_forward(In4<T> q, In4<T> k, In4<T> v, const ExactAttentionConfig& config,
                             const AttentionCall& call, View4<T> out, View3<T> lse,
                             Workspace& workspace) {
  const char* op = "exact_attention_forward";
  check_inputs<T>(op, q, k, v, config, call);
  require_same_shape(op, "q", q, "out", out);
  detail::check_lse(op, lse, q);
  Workspace::Frame frame(workspace);
  ExactForward<T> kernel{exact_inputs<T>(q, k, v, config, call, frame), out, lse};
  const size_t bytes = kernel.scratch_bytes();
  kernel.level = scratch_level(bytes);
  const Index league = Index(q.extent(0)) * q.extent(2) * kernel.x.nq;
  Kokkos::parallel_for("exact_attention_forward", dynamic_team_policy(league, bytes), kernel);
}

template <class T>
void exact_attention_backward(In4<T> q, In4<T> k, In4<T> v, In4<T> out, In3<T> lse, In4<T> dout,
                              const ExactAttentionConfig& config, const AttentionCall& call,
                              View4<T> dq, View4<T> dk, View4<T> dv, Workspace& workspace) {
  const char* op = "exact_attention_backward";
  check_inputs<T>(op, q, k, v, config, call);
  require_same_shape(op, "q", q, "out", out);
  require_same_shape(op, "q", q, "dout", dout);
  require_same_shape(op, "q", q, "dq", dq);
  require_same_shape(op, "k", k, "dk", dk);
  require_same_shape(op, "v", v, "dv", dv);
  detail::check_lse(op, lse, q);
  Workspace::Frame frame(workspace);
  const auto x = exact_inputs<T>(q, k, v, config, call, frame);
  auto delta = frame.take<View3<T>>(lse.extent(0), lse.extent(1), lse.extent(2));
  detail::item_dot<T>(dout, out, delta);
  const Index bhs = Index(q.extent(0)) * q.extent(2);
  ExactBackwardKeys<T> keys{x, lse, delta, dout, dk, dv};
  const size_t key_bytes = keys.scratch_bytes();
  keys.level = scratch_level(key_bytes);
  Kokkos::parallel_for("exact_attention_backward_keys", dynamic_team_policy(bhs * x.nk, key_bytes),
                       keys);
  ExactBackwardQueries<T> queries{x, lse, delta, dout, dq};
  const size_t query_bytes = queries.scratch_bytes();
  queries.level = scratch_level(query_bytes);
  Kokkos::parallel_for("exact_attention_backward_queries",
                       dynamic_team_policy(bhs * x.nq, query_bytes), queries);
}

#define REFORMER_INSTANTIATE(T)                                                                   \
  template void exact_attention_forward<T>(In4<T>, In4<T>, In4<T>, const ExactAttentionConfig&,   \
                                           const AttentionCall&, View4<T>, View3<T>, Workspace&); \
  template void exact_attention_backward<T>(In4<T>, In4<T>, In4<T>, In4<T>, In3<T>, In4<T>,       \
                                            const ExactAttentionConfig&, const AttentionCall&,    \
                                            View4<T>, View4<T>, View4<T>, Workspace&);
REFORMER_INSTANTIATE_FLOAT_AND_DOUBLE(REFORMER_INSTANTIATE)

}  // namespace reformer::attention
