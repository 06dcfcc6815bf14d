#include "reformer/attention/lsh.hpp"

#include "attention/attention_checks.hpp"
#include "attention/chunked_kernels.hpp"
#include "reformer/core/instantiate.hpp"

#include <cmath>

namespace reformer::attention {
namespace {

using IntView2 = Kokkos::View<int**, Layout, MemSpace>;
constexpr double kNormEps = 1e-6;
// Hash rounds the kernels keep per-round values for in registers.
constexpr Index kMaxHashes = 64;

std::vector<Index> bucket_factors(const LshAttentionConfig& config, Index length) {
  if (config.n_buckets.empty()) return {2 * std::max<Index>(1, length / config.chunk)};
  return config.n_buckets;
}

void check_config(const char* op, const LshAttentionConfig& config, Index length) {
  detail::check_chunking(op, length, config.chunk);
  require<ConfigError>(config.n_hashes >= 1 && config.n_hashes <= kMaxHashes, op, ": n_hashes is ",
                       config.n_hashes, " but must be in [1, ", kMaxHashes, "]");
  require<ConfigError>(config.n_before >= 0, op, ": n_before is ", config.n_before,
                       " but must be >= 0");
  require<ConfigError>(config.n_buckets.size() <= 2, op, ": n_buckets has ",
                       config.n_buckets.size(), " factors but at most 2 are supported");
  for (Index f : config.n_buckets)
    require<ConfigError>(f >= 2 && f % 2 == 0, op, ": bucket count ", f,
                         " must be even and at least 2 (hashing takes the argmax over "
                         "[xR, -xR])");
  detail::check_dropout(op, config.dropout);
}

// Buckets of every (batch, position, head, round): argmax over [x R ; -x R]
// per factor, combined as h1 + b1 * h2. Padding positions get bucket n_buckets.
// One team hashes kRows positions of one (batch, head, round): the rotation
// [d_head, width] and the projections [kRows, width] live in scratch, and the
// projection loop runs over contiguous rotation columns so that it vectorises.
template <class T>
struct HashKernel {
  static constexpr Index kRows = 32;
  using Scratch2 = typename detail::ChunkTiles<T>::Scratch2;
  Kokkos::View<const T****, Layout, MemSpace> qk, rot;
  Kokkos::View<const int**, Layout, MemSpace> key_valid;
  IntView2 buckets;
  Index length, heads, rounds, d_head, width, factors, b1, b2;

  Index row_blocks() const { return (length + kRows - 1) / kRows; }
  size_t scratch_bytes() const {
    return Scratch2::shmem_size(d_head, width) + Scratch2::shmem_size(kRows, width);
  }

  KOKKOS_INLINE_FUNCTION void operator()(const detail::TeamMember& team) const {
    const Index blocks = (length + kRows - 1) / kRows;
    const Index block = team.league_rank() % blocks, r = team.league_rank() / blocks % rounds;
    const Index bh = team.league_rank() / (blocks * rounds), b = bh / heads, h = bh % heads;
    const auto level = team.team_scratch(int(detail::ChunkTiles<T>::kLevel));
    Scratch2 rt(level, d_head, width), proj(level, kRows, width);
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, d_head), [&](Index d) {
      for (Index c = 0; c < width; ++c) rt(d, c) = rot(h, d, r, c);
    });
    team.team_barrier();
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, kRows), [&](Index row) {
      const Index i = block * kRows + row;
      if (i >= length) return;
      if (key_valid.extent(0) && key_valid(b, i) == 0) {
        buckets(bh, r * length + i) = int(b1 * b2);
        return;
      }
      T* p = &proj(row, 0);
      for (Index c = 0; c < width; ++c) p[c] = 0;
      accumulate_rows(p, &rt(0, 0), width, &qk(b, i, h, 0), 1, d_head, width);
      Index combined = 0, stride = 1, column = 0;
      for (Index f = 0; f < factors; ++f) {
        const Index nb = f == 0 ? b1 : b2, half = nb / 2;
        T best = p[column];
        Index arg = 0;
        for (Index c = 0; c < half; ++c) {
          if (p[column + c] > best) best = p[column + c], arg = c;
          if (-p[column + c] > best) best = -p[column + c], arg = c + half;
        }
        combined += arg * stride;
        stride *= nb;
        column += half;
      }
      buckets(bh, r * length + i) = int(combined);
    });
  }
};

// Stable counting sort of one (batch*head, round): items ordered by bucket,
// then position. counts is scratch [bh * rounds + r, n_buckets + 1].
struct SortFunctor {
  Kokkos::View<const int**, Layout, MemSpace> buckets;
  IntView2 perm, undo, counts;
  Index length, rounds, bins;

  KOKKOS_INLINE_FUNCTION void operator()(Index idx) const {
    const Index bh = idx / rounds, r = idx % rounds, row = idx;
    for (Index k = 0; k < bins; ++k) counts(row, k) = 0;
    for (Index i = 0; i < length; ++i) counts(row, buckets(bh, r * length + i)) += 1;
    int start = int(r * length);
    for (Index k = 0; k < bins; ++k) {
      const int n = counts(row, k);
      counts(row, k) = start;
      start += n;
    }
    for (Index i = 0; i < length; ++i) {
      const int s = counts(row, buckets(bh, r * length + i))++;
      perm(bh, s) = int(i);
      undo(bh, r * length + i) = s;
    }
  }
};

// k = q * rsqrt(mean(q^2) + eps) / sqrt(d_head): the factor per (b, i, h).
template <class T>
void compute_key_scale(In4<T> qk, View3<T> scale) {
  const Index length = qk.extent(1), heads = qk.extent(2), dh = qk.extent(3);
  Kokkos::parallel_for(
      "lsh_key_scale", range(Index(qk.extent(0)) * length * heads), KOKKOS_LAMBDA(Index idx) {
        const Index h = idx % heads, i = idx / heads % length, b = idx / (heads * length);
        T sq = 0;
        for (Index d = 0; d < dh; ++d) sq += qk(b, i, h, d) * qk(b, i, h, d);
        scale(b, i, h) = T(1) / compat::sqrt(sq / dh + T(kNormEps)) / compat::sqrt(T(dh));
      });
}

template <class T>
detail::ChunkedInputs<T> chunked_inputs(In4<T> qk, In4<T> v, const LshSaved<T>& saved,
                                        const LshAttentionConfig& config) {
  const Index length = qk.extent(1), rounds = config.n_hashes;
  detail::ChunkedInputs<T> in;
  in.q = qk;
  in.k = qk;
  in.v = v;
  in.perm = saved.perm;
  in.undo = saved.undo;
  in.key_scale = saved.key_scale;
  in.key_valid = config.masks.key_valid;
  in.causal = config.masks.causal;
  in.self_mask = true;
  in.duplicate_correction = config.duplicate_correction;
  in.rounds = rounds;
  in.length = length;
  in.heads = qk.extent(2);
  in.d_head = qk.extent(3);
  in.dropout = config.dropout;
  // A chunk as long as the sequence is plain shared-QK attention: no look-back.
  const Index chunk = std::min(config.chunk, length), items = rounds * length;
  const Index n_chunks = items / chunk;
  const Index n_before = config.chunk >= length ? 0 : std::min(config.n_before, n_chunks - 1);
  in.window = {items, chunk, n_chunks, n_before, true};
  return in;
}

// Weights of the rounds of position i: w_r = softmax_r(lse_i^r) (lse of the
// round's item), written into w[0, rounds).
template <class T, class Lse, class Undo>
KOKKOS_INLINE_FUNCTION void round_weights(const Lse& lse, const Undo& undo, Index b, Index bh,
                                          Index h, Index i, Index length, Index rounds, T* w) {
  T m = lse(b, undo(bh, i), h);
  for (Index r = 1; r < rounds; ++r) m = compat::fmax(m, lse(b, undo(bh, r * length + i), h));
  T total = 0;
  for (Index r = 0; r < rounds; ++r) {
    w[r] = compat::exp(lse(b, undo(bh, r * length + i), h) - m);
    total += w[r];
  }
  for (Index r = 0; r < rounds; ++r) w[r] /= total;
}

}  // namespace

Index lsh_bucket_count(const LshAttentionConfig& config, Index length) {
  Index n = 1;
  for (Index f : bucket_factors(config, length)) n *= f;
  return n;
}

Index lsh_rotation_width(const LshAttentionConfig& config, Index length) {
  Index w = 0;
  for (Index f : bucket_factors(config, length)) w += f / 2;
  return w;
}

template <class T>
void lsh_random_rotations(RandomKey key, View4<T> rotations) {
  auto flat = Kokkos::View<T*, Layout, MemSpace>(rotations.data(), rotations.size());
  Kokkos::parallel_for(
      "lsh_random_rotations", range(flat.extent(0)),
      KOKKOS_LAMBDA(Index i) { flat(i) = T(random_normal(key, i)); });
}

template <class T>
void lsh_hash_and_sort(In4<T> qk, In4<T> rotations, const LshAttentionConfig& config,
                       LshSaved<T>& saved) {
  const char* op = "lsh_attention";
  require_nonempty(op, "qk", qk);
  const Index batch = qk.extent(0), length = qk.extent(1), heads = qk.extent(2);
  const Index dh = qk.extent(3), rounds = config.n_hashes;
  check_config(op, config, length);
  detail::check_masks(op, config.masks, batch, length);
  const auto factors = bucket_factors(config, length);
  const Index width = lsh_rotation_width(config, length);
  require<ShapeError>(
      Index(rotations.extent(0)) == heads && Index(rotations.extent(1)) == dh &&
          Index(rotations.extent(2)) == rounds && Index(rotations.extent(3)) == width,
      op, ": rotations have shape ", shape_string(rotations), " but must be [", heads, ", ", dh,
      ", ", rounds, ", ", width, "] (heads, d_head, n_hashes, ", "sum of n_buckets / 2)");
  const Index items = rounds * length, bins = lsh_bucket_count(config, length) + 1;
  if (Index(saved.perm.extent(0)) != batch * heads || Index(saved.perm.extent(1)) != items) {
    saved.buckets = IntView2(Kokkos::view_alloc(Kokkos::WithoutInitializing, "lsh_buckets"),
                             batch * heads, items);
    saved.perm =
        IntView2(Kokkos::view_alloc(Kokkos::WithoutInitializing, "lsh_perm"), batch * heads, items);
    saved.undo =
        IntView2(Kokkos::view_alloc(Kokkos::WithoutInitializing, "lsh_undo"), batch * heads, items);
  }
  const Index b1 = factors[0], b2 = factors.size() > 1 ? factors[1] : 1;
  const HashKernel<T> hash{qk,
                           rotations,
                           config.masks.key_valid,
                           saved.buckets,
                           length,
                           heads,
                           rounds,
                           dh,
                           width,
                           Index(factors.size()),
                           b1,
                           b2};
  Kokkos::TeamPolicy<ExecSpace> policy(batch * heads * rounds * hash.row_blocks(), Kokkos::AUTO);
  Kokkos::parallel_for(
      "lsh_hash",
      policy.set_scratch_size(detail::ChunkTiles<T>::kLevel, Kokkos::PerTeam(hash.scratch_bytes())),
      hash);
  IntView2 counts("lsh_sort_counts", batch * heads * rounds, bins);
  Kokkos::parallel_for(
      "lsh_sort", range(batch * heads * rounds),
      SortFunctor{saved.buckets, saved.perm, saved.undo, counts, length, rounds, bins});
}

template <class T>
void lsh_attention_forward(In4<T> qk, In4<T> v, In4<T> rotations, const LshAttentionConfig& config,
                           View4<T> out, LshSaved<T>& saved) {
  const char* op = "lsh_attention_forward";
  detail::check_qkv(op, qk, v, v);
  require_same_shape(op, "qk", qk, "out", out);
  lsh_hash_and_sort<T>(qk, rotations, config, saved);
  const Index batch = qk.extent(0), length = qk.extent(1), heads = qk.extent(2);
  const Index dh = qk.extent(3), rounds = config.n_hashes, items = rounds * length;
  if (Index(saved.out_sorted.extent(1)) != items || saved.out_sorted.extent(0) != qk.extent(0) ||
      saved.out_sorted.extent(3) != qk.extent(3) || saved.out_sorted.extent(2) != qk.extent(2)) {
    saved.out_sorted = View4<T>(Kokkos::view_alloc(Kokkos::WithoutInitializing, "lsh_out_sorted"),
                                batch, items, heads, dh);
    saved.lse_sorted = View3<T>(Kokkos::view_alloc(Kokkos::WithoutInitializing, "lsh_lse_sorted"),
                                batch, items, heads);
    saved.key_scale = View3<T>(Kokkos::view_alloc(Kokkos::WithoutInitializing, "lsh_key_scale"),
                               batch, length, heads);
  }
  compute_key_scale<T>(qk, saved.key_scale);
  const auto in = chunked_inputs<T>(qk, v, saved, config);
  detail::run_chunks("lsh_attention_chunks",
                     detail::ChunkedForward<T>{in, saved.out_sorted, saved.lse_sorted}, batch);
  // Unsort and combine rounds: out_i = sum_r softmax_r(lse_i^r) o_i^r.
  auto o = saved.out_sorted;
  auto lse = saved.lse_sorted;
  auto undo = saved.undo;
  Kokkos::parallel_for(
      "lsh_combine_rounds", range(batch * length * heads), KOKKOS_LAMBDA(Index idx) {
        const Index h = idx % heads, i = idx / heads % length, b = idx / (heads * length);
        const Index bh = b * heads + h;
        T w[kMaxHashes];
        round_weights(lse, undo, b, bh, h, i, length, rounds, w);
        for (Index d = 0; d < dh; ++d) out(b, i, h, d) = 0;
        for (Index r = 0; r < rounds; ++r) {
          const Index s = undo(bh, r * length + i);
          for (Index d = 0; d < dh; ++d) out(b, i, h, d) += w[r] * o(b, s, h, d);
        }
      });
}

template <class T>
void lsh_attention_backward(In4<T> qk, In4<T> v, const LshSaved<T>& saved, In4<T> dout,
                            const LshAttentionConfig& config, View4<T> dqk, View4<T> dv) {
  const char* op = "lsh_attention_backward";
  detail::check_qkv(op, qk, v, v);
  require_same_shape(op, "qk", qk, "dout", dout);
  require_same_shape(op, "qk", qk, "dqk", dqk);
  require_same_shape(op, "v", v, "dv", dv);
  const Index batch = qk.extent(0), length = qk.extent(1), heads = qk.extent(2);
  const Index dh = qk.extent(3), rounds = config.n_hashes, items = rounds * length;
  require<ShapeError>(Index(saved.out_sorted.extent(1)) == items, op, ": saved state has ",
                      saved.out_sorted.extent(1), " items but n_hashes * L is ", items,
                      "; run lsh_attention_forward with the same config first");
  View4<T> dout_sorted(Kokkos::view_alloc(Kokkos::WithoutInitializing, "lsh_dout_sorted"), batch,
                       items, heads, dh);
  View3<T> dlse_sorted(Kokkos::view_alloc(Kokkos::WithoutInitializing, "lsh_dlse_sorted"), batch,
                       items, heads);
  View3<T> delta(Kokkos::view_alloc(Kokkos::WithoutInitializing, "lsh_delta"), batch, items, heads);
  // Backward of the round combination, w_r = softmax_r(lse^r):
  //   do^r = w_r dout,  dlse^r = w_r (dout . o^r - dout . out).
  auto o = saved.out_sorted;
  auto lse = saved.lse_sorted;
  auto undo = saved.undo;
  Kokkos::parallel_for(
      "lsh_combine_rounds_backward", range(batch * length * heads), KOKKOS_LAMBDA(Index idx) {
        const Index h = idx % heads, i = idx / heads % length, b = idx / (heads * length);
        const Index bh = b * heads + h;
        T w[kMaxHashes], dout_dot_o[kMaxHashes];
        round_weights(lse, undo, b, bh, h, i, length, rounds, w);
        T dout_dot_out = 0;
        for (Index r = 0; r < rounds; ++r) {
          const Index s = undo(bh, r * length + i);
          dout_dot_o[r] = 0;
          for (Index d = 0; d < dh; ++d) {
            dout_sorted(b, s, h, d) = w[r] * dout(b, i, h, d);
            dout_dot_o[r] += dout(b, i, h, d) * o(b, s, h, d);
          }
          dout_dot_out += w[r] * dout_dot_o[r];
        }
        for (Index r = 0; r < rounds; ++r)
          dlse_sorted(b, undo(bh, r * length + i), h) = w[r] * (dout_dot_o[r] - dout_dot_out);
      });
  detail::item_dot<T>(dout_sorted, saved.out_sorted, delta);
  View4<T> dq_sorted(Kokkos::view_alloc(Kokkos::WithoutInitializing, "lsh_dq_sorted"), batch, items,
                     heads, dh);
  View4<T> dk_sorted(Kokkos::view_alloc(Kokkos::WithoutInitializing, "lsh_dk_sorted"), batch, items,
                     heads, dh);
  View4<T> dv_sorted(Kokkos::view_alloc(Kokkos::WithoutInitializing, "lsh_dv_sorted"), batch, items,
                     heads, dh);
  const auto in = chunked_inputs<T>(qk, v, saved, config);
  detail::chunked_backward<T>(in, saved.lse_sorted, dlse_sorted, delta, dout_sorted, dq_sorted,
                              dk_sorted, dv_sorted);
  // Back to positions, summing over rounds. The key gradient goes through the
  // normalisation k = x a / sqrt(d), a = (mean(x^2) + eps)^-1/2:
  //   dx = a / sqrt(d) * (dk - x a^2 mean(dk * x)).
  auto scale = saved.key_scale;
  Kokkos::parallel_for(
      "lsh_scatter_gradients", range(batch * length * heads), KOKKOS_LAMBDA(Index idx) {
        const Index h = idx % heads, i = idx / heads % length, b = idx / (heads * length);
        const Index bh = b * heads + h;
        T gk_dot_x = 0;
        for (Index d = 0; d < dh; ++d) {
          T gq = 0, gk = 0, gv = 0;
          for (Index r = 0; r < rounds; ++r) {
            const Index s = undo(bh, r * length + i);
            gq += dq_sorted(b, s, h, d);
            gk += dk_sorted(b, s, h, d);
            gv += dv_sorted(b, s, h, d);
          }
          dqk(b, i, h, d) = gq;
          dv(b, i, h, d) = gv;
          gk_dot_x += gk * qk(b, i, h, d);
        }
        const T s = scale(b, i, h), a = s * compat::sqrt(T(dh));
        for (Index d = 0; d < dh; ++d) {
          T gk = 0;
          for (Index r = 0; r < rounds; ++r) gk += dk_sorted(b, undo(bh, r * length + i), h, d);
          dqk(b, i, h, d) += s * (gk - qk(b, i, h, d) * a * a * gk_dot_x / dh);
        }
      });
}

#define REFORMER_INSTANTIATE(T)                                                                \
  template void lsh_random_rotations<T>(RandomKey, View4<T>);                                  \
  template void lsh_hash_and_sort<T>(In4<T>, In4<T>, const LshAttentionConfig&, LshSaved<T>&); \
  template void lsh_attention_forward<T>(In4<T>, In4<T>, In4<T>, const LshAttentionConfig&,    \
                                         View4<T>, LshSaved<T>&);                              \
  template void lsh_attention_backward<T>(In4<T>, In4<T>, const LshSaved<T>&, In4<T>,          \
                                          const LshAttentionConfig&, View4<T>, View4<T>);
REFORMER_INSTANTIATE_FLOAT_AND_DOUBLE(REFORMER_INSTANTIATE)

}  // namespace reformer::attention
