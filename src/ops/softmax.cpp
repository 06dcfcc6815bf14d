#include "reformer/ops/softmax.hpp"

#include "reformer/core/instantiate.hpp"
#include "reformer/core/shape.hpp"

namespace reformer::ops {
namespace {

using TeamPolicy = Kokkos::TeamPolicy<ExecSpace>;
using Member = TeamPolicy::member_type;

template <class T>
void check(const char* op, const In2<T>& a, const char* name_a, const View2<T>& out,
           const char* name_out) {
  require_nonempty(op, name_a, a);
  require_same_shape(op, name_a, a, name_out, out);
}

// Row-wise max and logsumexp, then y = x - lse (log) or exp(x - lse).
template <class T, bool kLog>
void forward(const char* label, In2<T> x, View2<T> y) {
  const Index n = x.extent(0), d = x.extent(1);
  Kokkos::parallel_for(
      label, TeamPolicy(n, Kokkos::AUTO), KOKKOS_LAMBDA(const Member& team) {
        const Index i = team.league_rank();
        team_softmax_row<kLog>(team, &x(i, 0), &y(i, 0), d);
      });
}

}  // namespace

template <class T>
void softmax_forward(In2<T> x, View2<T> y) {
  check<T>("softmax_forward", x, "x", y, "y");
  forward<T, false>("softmax_forward", x, y);
}

template <class T>
void log_softmax_forward(In2<T> x, View2<T> y) {
  check<T>("log_softmax_forward", x, "x", y, "y");
  forward<T, true>("log_softmax_forward", x, y);
}

template <class T>
void softmax_backward(In2<T> y, In2<T> dy, View2<T> dx) {
  check<T>("softmax_backward", y, "y", dx, "dx");
  require_same_shape("softmax_backward", "y", y, "dy", dy);
  const Index n = y.extent(0), d = y.extent(1);
  Kokkos::parallel_for(
      "softmax_backward", TeamPolicy(n, Kokkos::AUTO), KOKKOS_LAMBDA(const Member& team) {
        const Index i = team.league_rank();
        T dot = 0;
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, d), [&](Index j, T& acc) { acc += dy(i, j) * y(i, j); },
            dot);
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, d),
                             [&](Index j) { dx(i, j) = y(i, j) * (dy(i, j) - dot); });
      });
}

template <class T>
void log_softmax_backward(In2<T> y, In2<T> dy, View2<T> dx) {
  check<T>("log_softmax_backward", y, "y", dx, "dx");
  require_same_shape("log_softmax_backward", "y", y, "dy", dy);
  const Index n = y.extent(0), d = y.extent(1);
  Kokkos::parallel_for(
      "log_softmax_backward", TeamPolicy(n, Kokkos::AUTO), KOKKOS_LAMBDA(const Member& team) {
        const Index i = team.league_rank();
        T sum = 0;
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, d), [&](Index j, T& acc) { acc += dy(i, j); }, sum);
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, d),
                             [&](Index j) { dx(i, j) = dy(i, j) - compat::exp(y(i, j)) * sum; });
      });
}

#define REFORMER_INSTANTIATE(T)                                \
  template void softmax_forward<T>(In2<T>, View2<T>);          \
  template void softmax_backward<T>(In2<T>, In2<T>, View2<T>); \
  template void log_softmax_forward<T>(In2<T>, View2<T>);      \
  template void log_softmax_backward<T>(In2<T>, In2<T>, View2<T>);
REFORMER_INSTANTIATE_FLOAT_AND_DOUBLE(REFORMER_INSTANTIATE)

}  // namespace reformer::ops
