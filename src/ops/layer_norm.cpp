#include "reformer/ops/layer_norm.hpp"

#include "ops/column_sums.hpp"
#include "reformer/core/cpu_target.hpp"
#include "reformer/core/instantiate.hpp"
#include "reformer/core/lane_rows.hpp"
#include "reformer/core/shape.hpp"
#include "reformer/core/team_scratch.hpp"
#include "reformer/core/vector_loops.hpp"

namespace reformer::ops {
namespace {

// RowKernels::lanes (core/team_scratch.hpp): rows on lanes as
// core/lane_rows.hpp lays them out.
constexpr Index kRowsPerTeam = kLaneRowsPerTeam;
// The rows of a block that the lanes kernel takes at a time, and the backward
// pass's blocks of rows (both row kernels: the order of the parameter sums
// depends on n and the backend only). The host keeps 64-row blocks: its few
// threads need no more, and smaller blocks lengthen the last block's serial
// sum over the others (16-row blocks made [4096, 256] 10-15% slower on 2
// cores). GPUs take about 512 blocks of 16 to 64 rows, so that even a
// feed-forward chunk of 1024 rows has several teams per multiprocessor (64-row
// blocks gave it 16 teams, and the kernel took 22% of the 16K step on an H200).
constexpr Index kGroupRows = 4 * kRowsPerTeam;
constexpr Index backward_block_rows(Index n) {
  if (kHostMemory) return 64;
  const Index rows = ((n + 511) / 512 + kGroupRows - 1) / kGroupRows * kGroupRows;
  return rows < kGroupRows ? kGroupRows : rows > 64 ? 64 : rows;
}

// f(j) for j < width, spread over a team's threads and their lanes (a warp
// takes `lanes` adjacent features).
template <class F>
KOKKOS_INLINE_FUNCTION void for_each_feature(const TeamMember& team, Index width, Index lanes,
                                             const F& f) {
  Kokkos::parallel_for(Kokkos::TeamThreadRange(team, (width + lanes - 1) / lanes), [&](Index c) {
    Kokkos::parallel_for(Kokkos::ThreadVectorRange(team, lanes), [&](Index v) {
      const Index j = c * lanes + v;
      if (j < width) f(j);
    });
  });
}

template <class P>
void check_parameters(const char* op, Index d, const In1<P>& gamma, const In1<P>& beta) {
  require_extent(op, "gamma", gamma, 0, d);
  require_extent(op, "beta", beta, 0, d);
}

}  // namespace

template <class T>
void layer_norm_forward(In2<T> x, In1<param_t<T>> gamma, In1<param_t<T>> beta, compute_t<T> eps,
                        View2<T> y, View1<compute_t<T>> mean, View1<compute_t<T>> rstd) {
  using C = compute_t<T>;
  using P = param_t<T>;
  const char* op = "layer_norm_forward";
  require_nonempty(op, "x", x);
  const Index n = x.extent(0), d = x.extent(1);
  check_parameters<P>(op, d, gamma, beta);
  require_same_shape(op, "x", x, "y", y);
  require_extent(op, "mean", mean, 0, n);
  require_extent(op, "rstd", rstd, 0, n);
  require<ConfigError>(eps > C(0), op, ": eps is ", eps, " but must be positive");
  if (row_kernels() == RowKernels::threads) {
    // One thread per row, loops over the row that vectorise (a team per row
    // costs more than the row itself at small widths). In place (y = x) is fine.
    Kokkos::parallel_for(
        "layer_norm_forward", range(n), KOKKOS_LAMBDA(Index i) {
          const T* xi = &x(i, 0);
          T* yi = &y(i, 0);
          const P* g = gamma.data();
          const P* b = beta.data();
          const C mu = sum_values(xi, d) / C(d);
          const C r = C(1) / compat::sqrt(sum_squared_differences(xi, mu, d) / C(d) + eps);
          for (Index j = 0; j < d; ++j) yi[j] = store<T>((load(xi[j]) - mu) * r * g[j] + b[j]);
          mean(i) = mu;
          rstd(i) = r;
        });
    return;
  }
  // A row per group of lanes: the mean and the variance are lane reductions.
  for_lane_rows(
      "layer_norm_forward", n, KOKKOS_LAMBDA(const TeamMember& team, Index i) {
        const C mu = lane_sum<C>(team, d, [&](Index j) { return C(load(x(i, j))); }) / C(d);
        const C sq = lane_sum<C>(team, d, [&](Index j) {
          const C c = load(x(i, j)) - mu;
          return c * c;
        });
        const C rs = C(1) / compat::sqrt(sq / C(d) + eps);
        lane_map<C>(
            team, d, [&](Index j) { return C((load(x(i, j)) - mu) * rs * gamma(j) + beta(j)); },
            [&](Index j, C v) { y(i, j) = store<T>(v); });
        Kokkos::single(Kokkos::PerThread(team), [&] {
          mean(i) = mu;
          rstd(i) = rs;
        });
      });
}

template <class T>
void layer_norm_backward(In2<T> x, In1<param_t<T>> gamma, In1<compute_t<T>> mean,
                         In1<compute_t<T>> rstd, In2<T> dy, View2<T> dx, View1<param_t<T>> dgamma,
                         View1<param_t<T>> dbeta) {
  using C = compute_t<T>;
  using P = param_t<T>;
  const char* op = "layer_norm_backward";
  const Index n = x.extent(0), d = x.extent(1);
  require_extent(op, "gamma", gamma, 0, d);
  require_extent(op, "mean", mean, 0, n);
  require_extent(op, "rstd", rstd, 0, n);
  require_same_shape(op, "x", x, "dy", dy);
  require_same_shape(op, "x", x, "dx", dx);
  require_extent(op, "dgamma", dgamma, 0, d);
  require_extent(op, "dbeta", dbeta, 0, d);
  if (n == 0) return;
  // One launch: the rows go in blocks of block_rows; each block writes
  // its part of dgamma and dbeta to its own row of a buffer, and the block that
  // finishes last adds the rows in block order (detail::arrives_last).
  const Index block_rows = backward_block_rows(n);
  const Index n_blocks = (n + block_rows - 1) / block_rows;
  const auto sums = detail::block_sums<P>(n_blocks, 2 * d);
  const auto blocks = sums.blocks;
  if (row_kernels() == RowKernels::threads) {
    // A thread per block of rows, taking its rows in turn with loops that
    // vectorise (see the forward pass). Each row's share of dgamma and dbeta is
    // taken first, as dx may be dy. float and double: dx then holds dy * gamma.
    // bf16: dx cannot hold it (a rounding), so the sums read dy and gamma again;
    // each element of dy is read before the same element of dx is written.
    Kokkos::parallel_for(
        "layer_norm_backward", range(n_blocks), KOKKOS_LAMBDA(Index b) {
          P* part_g = &blocks(b, 0);
          P* part_b = part_g + d;
          // nvcc: a device lambda may not capture a variable first inside an
          // `if constexpr` branch, so the width is read here.
          const Index width = d;
          for (Index j = 0; j < width; ++j) part_g[j] = part_b[j] = P(0);
          const Index end = (b + 1) * block_rows < n ? (b + 1) * block_rows : n;
          for (Index i = b * block_rows; i < end; ++i) {
            const T* xi = &x(i, 0);
            const T* dyi = &dy(i, 0);
            const P* g = gamma.data();
            T* dxi = &dx(i, 0);
            const C mu = mean(i), r = rstd(i);
            for (Index j = 0; j < width; ++j) {
              const C dyj = load(dyi[j]);
              part_g[j] += dyj * ((load(xi[j]) - mu) * r);
              part_b[j] += dyj;
            }
            if constexpr (is_reduced_precision<T>) {
              const C mean_g = dot_values(dyi, g, width) / C(width);
              const C mean_gx = r * (dot_values(dyi, g, xi, width) / C(width) - mu * mean_g);
              for (Index j = 0; j < width; ++j)
                dxi[j] =
                    store<T>(r * (load(dyi[j]) * g[j] - mean_g - (load(xi[j]) - mu) * r * mean_gx));
            } else {
              for (Index j = 0; j < width; ++j) dxi[j] = dyi[j] * g[j];
              const C mean_g = sum_values(dxi, width) / C(width);
              const C mean_gx = r * (dot_values(dxi, xi, width) / C(width) - mu * mean_g);
              for (Index j = 0; j < width; ++j)
                dxi[j] = r * (dxi[j] - mean_g - (xi[j] - mu) * r * mean_gx);
            }
          }
          if (!detail::arrives_last(sums)) return;
          // The blocks' rows into row 0 in block order, then into the gradients.
          for (Index c = 1; c < n_blocks; ++c)
            for (Index j = 0; j < 2 * width; ++j)
              blocks(0, j) += load_from_other_team(blocks(c, j));
          for (Index j = 0; j < width; ++j) {
            dgamma(j) += blocks(0, j);
            dbeta(j) += blocks(0, width + j);
          }
        });
    return;
  }
  // A group of lanes per row for the row sums (see the forward pass), then the
  // team's lanes across the features for dx and the parameter sums, kGroupRows
  // rows at a time; dx may be dy: each lane reads its elements of dy before it
  // writes the same elements of dx.
  const Index lanes = kRowLanes;
  TeamPolicy policy = lane_row_policy(n_blocks);
  policy.set_scratch_size(0, Kokkos::PerTeam(2 * kGroupRows * sizeof(C)));
  Kokkos::parallel_for(
      "layer_norm_backward", policy, KOKKOS_LAMBDA(const TeamMember& team) {
        const Index b = team.league_rank();
        const Index begin = b * block_rows;
        const Index end = begin + block_rows < n ? begin + block_rows : n;
        C* row_sums = static_cast<C*>(team.team_shmem().get_shmem(2 * kGroupRows * sizeof(C)));
        for_each_feature(team, 2 * d, lanes, [&](Index j) { blocks(b, j) = P(0); });
        for (Index g0 = begin; g0 < end; g0 += kGroupRows) {
          const Index rows = g0 + kGroupRows < end ? kGroupRows : end - g0;
          team.team_barrier();  // the previous group's row sums are read
          Kokkos::parallel_for(Kokkos::TeamThreadRange(team, rows), [&](Index r) {
            const Index i = g0 + r;
            const C mu = mean(i), rs = rstd(i);
            const C sum_g =
                lane_sum<C>(team, d, [&](Index j) { return load(dy(i, j)) * gamma(j); });
            const C sum_gx = lane_sum<C>(team, d, [&](Index j) {
              return load(dy(i, j)) * gamma(j) * (load(x(i, j)) - mu) * rs;
            });
            Kokkos::single(Kokkos::PerThread(team), [&] {
              row_sums[2 * r] = sum_g / C(d);
              row_sums[2 * r + 1] = sum_gx / C(d);
            });
          });
          team.team_barrier();
          // kLaneGroup rows' loads before their stores: a store to dx may
          // not move above the next row's loads of dy (dx may be dy), so one
          // row at a time left each lane one load in flight.
          for_each_feature(team, d, lanes, [&](Index j) {
            P part_g = 0, part_b = 0;
            for (Index r0 = 0; r0 < rows; r0 += kLaneGroup) {
              C dyv[kLaneGroup], xhat[kLaneGroup], rs[kLaneGroup];
              for (Index k = 0; k < kLaneGroup; ++k) {
                if (r0 + k >= rows) break;
                const Index i = g0 + r0 + k;
                rs[k] = rstd(i);
                dyv[k] = load(dy(i, j));
                xhat[k] = (load(x(i, j)) - mean(i)) * rs[k];
              }
              for (Index k = 0; k < kLaneGroup; ++k) {
                if (r0 + k >= rows) break;
                const Index r = r0 + k;
                part_g += dyv[k] * xhat[k];
                part_b += dyv[k];
                dx(g0 + r, j) = store<T>(
                    rs[k] * (dyv[k] * gamma(j) - row_sums[2 * r] - xhat[k] * row_sums[2 * r + 1]));
              }
            }
            blocks(b, j) += part_g;
            blocks(b, d + j) += part_b;
          });
        }
        Kokkos::memory_fence();
        team.team_barrier();
        int last = 0;
        Kokkos::single(
            Kokkos::PerTeam(team), [&](int& is_last) { is_last = detail::arrives_last(sums); },
            last);
        if (!last) return;
        for_each_feature(team, d, lanes, [&](Index j) {
          P total_g = 0, total_b = 0;
          for (Index c = 0; c < n_blocks; ++c) {
            total_g += load_from_other_team(blocks(c, j));
            total_b += load_from_other_team(blocks(c, d + j));
          }
          dgamma(j) += total_g;
          dbeta(j) += total_b;
        });
      });
}

#define REFORMER_INSTANTIATE(T)                                                                \
  template void layer_norm_forward<T>(In2<T>, In1<param_t<T>>, In1<param_t<T>>, compute_t<T>,  \
                                      View2<T>, View1<compute_t<T>>, View1<compute_t<T>>);     \
  template void layer_norm_backward<T>(In2<T>, In1<param_t<T>>, In1<compute_t<T>>,             \
                                       In1<compute_t<T>>, In2<T>, View2<T>, View1<param_t<T>>, \
                                       View1<param_t<T>>);
REFORMER_INSTANTIATE_STORAGE_TYPES(REFORMER_INSTANTIATE)

}  // namespace reformer::ops
