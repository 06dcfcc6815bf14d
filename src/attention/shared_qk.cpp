#include "reformer/attention/shared_qk.hpp"

#include "attention/item_rows.hpp"
#include "reformer/core/fast_math.hpp"
#include "reformer/core/instantiate.hpp"
#include "reformer/core/vector_loops.hpp"

namespace reformer::attention {
using detail::ItemIndex;
using detail::shared_key_factor;
using detail::shared_key_factor_of_squares;

// Each kernel has a thread form and a lanes form (detail::for_items); the
// lanes form sums a row's squares or products across the lanes, so the two
// agree to rounding, not bit for bit.

template <class T>
void shared_key_scale(In4<T> qk, View3<compute_t<T>> scale) {
  using C = compute_t<T>;
  const Index length = qk.extent(1), heads = qk.extent(2), dh = qk.extent(3);
  detail::for_items(
      "shared_key_scale", qk.extent(0), length, heads,
      KOKKOS_LAMBDA(const ItemIndex& at) {
        scale(at.b, at.i, at.h) = shared_key_factor(&qk(at.b, at.i, at.h, 0), dh);
      },
      KOKKOS_LAMBDA(const TeamMember& team, const ItemIndex& at) {
        const T* x = &qk(at.b, at.i, at.h, 0);
        const C squares =
            lane_sum<C>(team, dh, [&](Index d) { return C(load(x[d])) * load(x[d]); });
        Kokkos::single(Kokkos::PerThread(team), [&] {
          scale(at.b, at.i, at.h) = shared_key_factor_of_squares(squares, dh);
        });
      });
}

template <class T>
void shared_keys(In4<T> qk, View4<T> k) {
  using C = compute_t<T>;
  const Index length = qk.extent(1), heads = qk.extent(2), dh = qk.extent(3);
  detail::for_items(
      "shared_keys_scaled", qk.extent(0), length, heads,
      KOKKOS_LAMBDA(const ItemIndex& at) {
        const T* x = &qk(at.b, at.i, at.h, 0);
        T* y = &k(at.b, at.i, at.h, 0);
        const C s = shared_key_factor(x, dh);
        for (Index d = 0; d < dh; ++d) y[d] = store<T>(load(x[d]) * s);
      },
      KOKKOS_LAMBDA(const TeamMember& team, const ItemIndex& at) {
        const T* x = &qk(at.b, at.i, at.h, 0);
        T* y = &k(at.b, at.i, at.h, 0);
        const C s = shared_key_factor_of_squares(
            lane_sum<C>(team, dh, [&](Index d) { return C(load(x[d])) * load(x[d]); }), dh);
        lane_map<C>(
            team, dh, [&](Index d) { return C(load(x[d]) * s); },
            [&](Index d, C v) { y[d] = store<T>(v); });
      });
}

template <class T>
void shared_keys(In4<T> qk, In3<compute_t<T>> scale, View4<T> k) {
  using C = compute_t<T>;
  const Index length = qk.extent(1), heads = qk.extent(2), dh = qk.extent(3);
  detail::for_items(
      "shared_keys", qk.extent(0), length, heads,
      KOKKOS_LAMBDA(const ItemIndex& at) {
        const T* x = &qk(at.b, at.i, at.h, 0);
        T* y = &k(at.b, at.i, at.h, 0);
        const C s = scale(at.b, at.i, at.h);
        for (Index d = 0; d < dh; ++d) y[d] = store<T>(load(x[d]) * s);
      },
      KOKKOS_LAMBDA(const TeamMember& team, const ItemIndex& at) {
        const T* x = &qk(at.b, at.i, at.h, 0);
        T* y = &k(at.b, at.i, at.h, 0);
        const C s = scale(at.b, at.i, at.h);
        lane_map<C>(
            team, dh, [&](Index d) { return C(load(x[d]) * s); },
            [&](Index d, C v) { y[d] = store<T>(v); });
      });
}

// dqk += s * (dk - x * c) with c = a^2 (dk . x) / d_head: the key
// normalisation's gradient (k = x * s, s = a / sqrt(d_head)).
template <class T>
void shared_keys_backward(In4<T> qk, In3<compute_t<T>> scale, In4<T> dk, View4<T> dqk) {
  using C = compute_t<T>;
  const Index length = qk.extent(1), heads = qk.extent(2), dh = qk.extent(3);
  const auto factor = KOKKOS_LAMBDA(C s, C gk_dot_x) {
    const C a = s * compat::sqrt(C(dh));
    return a * a * gk_dot_x / C(dh);
  };
  detail::for_items(
      "shared_keys_backward", qk.extent(0), length, heads,
      KOKKOS_LAMBDA(const ItemIndex& at) {
        const T* gk = &dk(at.b, at.i, at.h, 0);
        const T* x = &qk(at.b, at.i, at.h, 0);
        T* g = &dqk(at.b, at.i, at.h, 0);
        const C s = scale(at.b, at.i, at.h), c = factor(s, dot_values(gk, x, dh));
        for (Index d = 0; d < dh; ++d)
          g[d] = store<T>(load(g[d]) + s * (load(gk[d]) - load(x[d]) * c));
      },
      KOKKOS_LAMBDA(const TeamMember& team, const ItemIndex& at) {
        const T* gk = &dk(at.b, at.i, at.h, 0);
        const T* x = &qk(at.b, at.i, at.h, 0);
        T* g = &dqk(at.b, at.i, at.h, 0);
        const C s = scale(at.b, at.i, at.h);
        const C c =
            factor(s, lane_sum<C>(team, dh, [&](Index d) { return C(load(gk[d])) * load(x[d]); }));
        lane_map<C>(
            team, dh, [&](Index d) { return C(load(g[d]) + s * (load(gk[d]) - load(x[d]) * c)); },
            [&](Index d, C v) { g[d] = store<T>(v); });
      });
}

#define REFORMER_INSTANTIATE(T)                                      \
  template void shared_key_scale<T>(In4<T>, View3<compute_t<T>>);    \
  template void shared_keys<T>(In4<T>, In3<compute_t<T>>, View4<T>); \
  template void shared_keys<T>(In4<T>, View4<T>);                    \
  template void shared_keys_backward<T>(In4<T>, In3<compute_t<T>>, In4<T>, View4<T>);
REFORMER_INSTANTIATE_STORAGE_TYPES(REFORMER_INSTANTIATE)

}  // namespace reformer::attention
