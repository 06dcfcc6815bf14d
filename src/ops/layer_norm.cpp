#include "reformer/ops/layer_norm.hpp"

#include "ops/column_sums.hpp"
#include "reformer/core/cpu_target.hpp"
#include "reformer/core/instantiate.hpp"
#include "reformer/core/shape.hpp"
#include "reformer/core/team_scratch.hpp"
#include "reformer/core/vector_loops.hpp"

namespace reformer::ops {
namespace {

// RowKernels::lanes (core/team_scratch.hpp): teams of GpuTarget::rows_per_team
// rows, each row on GpuTarget::row_lanes vector lanes. A host team is one
// thread with one lane, which takes the team's rows in turn (the same kernel,
// run serially: what the tests check).
constexpr int kRowsPerTeam = GpuTarget::rows_per_team;
TeamPolicy row_lane_policy(Index n) {
  const Index league = (n + kRowsPerTeam - 1) / kRowsPerTeam;
  return kHostMemory ? TeamPolicy(league, 1, 1)
                     : TeamPolicy(league, kRowsPerTeam, GpuTarget::row_lanes);
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
  Kokkos::parallel_for(
      "layer_norm_forward", row_lane_policy(n), KOKKOS_LAMBDA(const TeamMember& team) {
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, kRowsPerTeam), [&](Index r) {
          const Index i = team.league_rank() * kRowsPerTeam + r;
          if (i >= n) return;
          C sum = 0;
          Kokkos::parallel_reduce(
              Kokkos::ThreadVectorRange(team, d), [&](Index j, C& acc) { acc += load(x(i, j)); },
              sum);
          const C mu = sum / C(d);
          C sq = 0;
          Kokkos::parallel_reduce(
              Kokkos::ThreadVectorRange(team, d),
              [&](Index j, C& acc) {
                const C c = load(x(i, j)) - mu;
                acc += c * c;
              },
              sq);
          const C rs = C(1) / compat::sqrt(sq / C(d) + eps);
          Kokkos::parallel_for(Kokkos::ThreadVectorRange(team, d), [&](Index j) {
            y(i, j) = store<T>((load(x(i, j)) - mu) * rs * gamma(j) + beta(j));
          });
          Kokkos::single(Kokkos::PerThread(team), [&] {
            mean(i) = mu;
            rstd(i) = rs;
          });
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
  if (row_kernels() == RowKernels::threads) {
    // One thread per row (see the forward pass). float and double: dx holds
    // dy * gamma first. bf16: dx cannot hold it (a rounding), so the sums read
    // dy and gamma again; each element of dy is read before the same element
    // of dx is written (dx may be dy).
    Kokkos::parallel_for(
        "layer_norm_backward_input", range(n), KOKKOS_LAMBDA(Index i) {
          const T* xi = &x(i, 0);
          const T* dyi = &dy(i, 0);
          const P* g = gamma.data();
          T* dxi = &dx(i, 0);
          const C mu = mean(i), r = rstd(i);
          // nvcc: a device lambda may not capture a variable first inside an
          // `if constexpr` branch, so the width is read here.
          const Index width = d;
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
        });
  } else {
    // A row per group of lanes (see the forward pass); dx may be dy: each lane
    // reads its elements of dy before it writes the same elements of dx.
    Kokkos::parallel_for(
        "layer_norm_backward_input", row_lane_policy(n), KOKKOS_LAMBDA(const TeamMember& team) {
          Kokkos::parallel_for(Kokkos::TeamThreadRange(team, kRowsPerTeam), [&](Index r) {
            const Index i = team.league_rank() * kRowsPerTeam + r;
            if (i >= n) return;
            const C mu = mean(i), rs = rstd(i);
            C sum_g = 0, sum_gx = 0;
            Kokkos::parallel_reduce(
                Kokkos::ThreadVectorRange(team, d),
                [&](Index j, C& acc) { acc += load(dy(i, j)) * gamma(j); }, sum_g);
            Kokkos::parallel_reduce(
                Kokkos::ThreadVectorRange(team, d),
                [&](Index j, C& acc) {
                  acc += load(dy(i, j)) * gamma(j) * (load(x(i, j)) - mu) * rs;
                },
                sum_gx);
            const C mean_g = sum_g / C(d), mean_gx = sum_gx / C(d);
            Kokkos::parallel_for(Kokkos::ThreadVectorRange(team, d), [&](Index j) {
              const C xhat = (load(x(i, j)) - mu) * rs;
              dx(i, j) = store<T>(rs * (load(dy(i, j)) * gamma(j) - mean_g - xhat * mean_gx));
            });
          });
        });
  }
  // Parameter gradients: sums over all rows, split across the threads of a team.
  detail::add_column_sums<P>(
      "layer_norm_backward_dgamma", n, dgamma, KOKKOS_LAMBDA(Index i, Index j) {
        return load(dy(i, j)) * (load(x(i, j)) - mean(i)) * rstd(i);
      });
  detail::add_column_sums<P>(
      "layer_norm_backward_dbeta", n, dbeta,
      KOKKOS_LAMBDA(Index i, Index j) { return load(dy(i, j)); });
}

#define REFORMER_INSTANTIATE(T)                                                                \
  template void layer_norm_forward<T>(In2<T>, In1<param_t<T>>, In1<param_t<T>>, compute_t<T>,  \
                                      View2<T>, View1<compute_t<T>>, View1<compute_t<T>>);     \
  template void layer_norm_backward<T>(In2<T>, In1<param_t<T>>, In1<compute_t<T>>,             \
                                       In1<compute_t<T>>, In2<T>, View2<T>, View1<param_t<T>>, \
                                       View1<param_t<T>>);
REFORMER_INSTANTIATE_STORAGE_TYPES(REFORMER_INSTANTIATE)

}  // namespace reformer::ops
