#include "reformer/ops/layer_norm.hpp"

#include "ops/column_sums.hpp"
#include "reformer/core/instantiate.hpp"
#include "reformer/core/shape.hpp"
#include "reformer/core/vector_loops.hpp"

namespace reformer::ops {
namespace {

using TeamPolicy = Kokkos::TeamPolicy<ExecSpace>;
using Member = TeamPolicy::member_type;

template <class T>
void check_parameters(const char* op, Index d, const In1<T>& gamma, const In1<T>& beta) {
  require_extent(op, "gamma", gamma, 0, d);
  require_extent(op, "beta", beta, 0, d);
}

}  // namespace

template <class T>
void layer_norm_forward(In2<T> x, In1<T> gamma, In1<T> beta, T eps, View2<T> y, View1<T> mean,
                        View1<T> rstd) {
  const char* op = "layer_norm_forward";
  require_nonempty(op, "x", x);
  const Index n = x.extent(0), d = x.extent(1);
  check_parameters<T>(op, d, gamma, beta);
  require_same_shape(op, "x", x, "y", y);
  require_extent(op, "mean", mean, 0, n);
  require_extent(op, "rstd", rstd, 0, n);
  require<ConfigError>(eps > T(0), op, ": eps is ", eps, " but must be positive");
  if constexpr (kHostMemory) {
    // One thread per row, loops over the row that vectorise (a team per row
    // costs more than the row itself at small widths). In place (y = x) is fine.
    Kokkos::parallel_for(
        "layer_norm_forward", range(n), KOKKOS_LAMBDA(Index i) {
          const T* xi = &x(i, 0);
          T* yi = &y(i, 0);
          const T* g = gamma.data();
          const T* b = beta.data();
          const T mu = sum_values(xi, d) / T(d);
          const T r = T(1) / compat::sqrt(sum_squared_differences(xi, mu, d) / T(d) + eps);
          for (Index j = 0; j < d; ++j) yi[j] = (xi[j] - mu) * r * g[j] + b[j];
          mean(i) = mu;
          rstd(i) = r;
        });
    return;
  }
  // One team per row; two team reductions for the mean and the variance.
  Kokkos::parallel_for(
      "layer_norm_forward", TeamPolicy(n, Kokkos::AUTO), KOKKOS_LAMBDA(const Member& team) {
        const Index i = team.league_rank();
        T sum = 0;
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, d), [&](Index j, T& acc) { acc += x(i, j); }, sum);
        const T mu = sum / d;
        T sq = 0;
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, d),
            [&](Index j, T& acc) {
              const T c = x(i, j) - mu;
              acc += c * c;
            },
            sq);
        const T r = T(1) / compat::sqrt(sq / d + eps);
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, d),
                             [&](Index j) { y(i, j) = (x(i, j) - mu) * r * gamma(j) + beta(j); });
        Kokkos::single(Kokkos::PerTeam(team), [&] {
          mean(i) = mu;
          rstd(i) = r;
        });
      });
}

template <class T>
void layer_norm_backward(In2<T> x, In1<T> gamma, In1<T> mean, In1<T> rstd, In2<T> dy, View2<T> dx,
                         View1<T> dgamma, View1<T> dbeta) {
  const char* op = "layer_norm_backward";
  const Index n = x.extent(0), d = x.extent(1);
  require_extent(op, "gamma", gamma, 0, d);
  require_extent(op, "mean", mean, 0, n);
  require_extent(op, "rstd", rstd, 0, n);
  require_same_shape(op, "x", x, "dy", dy);
  require_same_shape(op, "x", x, "dx", dx);
  require_extent(op, "dgamma", dgamma, 0, d);
  require_extent(op, "dbeta", dbeta, 0, d);
  if constexpr (kHostMemory) {
    // One thread per row (see the forward pass); dx holds dy * gamma first.
    Kokkos::parallel_for(
        "layer_norm_backward_input", range(n), KOKKOS_LAMBDA(Index i) {
          const T* xi = &x(i, 0);
          const T* dyi = &dy(i, 0);
          const T* g = gamma.data();
          T* dxi = &dx(i, 0);
          const T mu = mean(i), r = rstd(i);
          for (Index j = 0; j < d; ++j) dxi[j] = dyi[j] * g[j];
          const T mean_g = sum_values(dxi, d) / T(d);
          const T mean_gx = r * (dot_values(dxi, xi, d) / T(d) - mu * mean_g);
          for (Index j = 0; j < d; ++j) dxi[j] = r * (dxi[j] - mean_g - (xi[j] - mu) * r * mean_gx);
        });
  } else {
    Kokkos::parallel_for(
        "layer_norm_backward_input", TeamPolicy(n, Kokkos::AUTO),
        KOKKOS_LAMBDA(const Member& team) {
          const Index i = team.league_rank();
          const T mu = mean(i), r = rstd(i);
          T sum_g = 0, sum_gx = 0;
          Kokkos::parallel_reduce(
              Kokkos::TeamThreadRange(team, d),
              [&](Index j, T& acc) { acc += dy(i, j) * gamma(j); }, sum_g);
          Kokkos::parallel_reduce(
              Kokkos::TeamThreadRange(team, d),
              [&](Index j, T& acc) { acc += dy(i, j) * gamma(j) * (x(i, j) - mu) * r; }, sum_gx);
          const T mean_g = sum_g / d, mean_gx = sum_gx / d;
          Kokkos::parallel_for(Kokkos::TeamThreadRange(team, d), [&](Index j) {
            const T xhat = (x(i, j) - mu) * r;
            dx(i, j) = r * (dy(i, j) * gamma(j) - mean_g - xhat * mean_gx);
          });
        });
  }
  // Parameter gradients: sums over all rows, split across the threads of a team.
  detail::add_column_sums<T>(
      "layer_norm_backward_dgamma", n, dgamma,
      KOKKOS_LAMBDA(Index i, Index j) { return dy(i, j) * (x(i, j) - mean(i)) * rstd(i); });
  detail::add_column_sums<T>(
      "layer_norm_backward_dbeta", n, dbeta, KOKKOS_LAMBDA(Index i, Index j) { return dy(i, j); });
}

#define REFORMER_INSTANTIATE(T)                                                                    \
  template void layer_norm_forward<T>(In2<T>, In1<T>, In1<T>, T, View2<T>, View1<T>, View1<T>);    \
  template void layer_norm_backward<T>(In2<T>, In1<T>, In1<T>, In1<T>, In2<T>, View2<T>, View1<T>, \
                                       View1<T>);
REFORMER_INSTANTIATE_FLOAT_AND_DOUBLE(REFORMER_INSTANTIATE)

}  // namespace reformer::ops
