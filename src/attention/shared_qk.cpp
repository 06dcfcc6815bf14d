#include "reformer/attention/shared_qk.hpp"

#include "reformer/core/fast_math.hpp"
#include "reformer/core/instantiate.hpp"
#include "reformer/core/vector_loops.hpp"

namespace reformer::attention {
using detail::shared_key_factor;

template <class T>
void shared_key_scale(In4<T> qk, View3<compute_t<T>> scale) {
  const Index length = qk.extent(1), heads = qk.extent(2), dh = qk.extent(3);
  Kokkos::parallel_for(
      "shared_key_scale", range(Index(qk.extent(0)) * length * heads), KOKKOS_LAMBDA(Index idx) {
        const Index h = idx % heads, i = idx / heads % length, b = idx / (heads * length);
        scale(b, i, h) = shared_key_factor(&qk(b, i, h, 0), dh);
      });
}

template <class T>
void shared_keys(In4<T> qk, View4<T> k) {
  using C = compute_t<T>;
  const Index length = qk.extent(1), heads = qk.extent(2), dh = qk.extent(3);
  Kokkos::parallel_for(
      "shared_keys_scaled", range(Index(qk.extent(0)) * length * heads), KOKKOS_LAMBDA(Index idx) {
        const Index h = idx % heads, i = idx / heads % length, b = idx / (heads * length);
        const C s = shared_key_factor(&qk(b, i, h, 0), dh);
        for (Index d = 0; d < dh; ++d) k(b, i, h, d) = store<T>(load(qk(b, i, h, d)) * s);
      });
}

template <class T>
void shared_keys(In4<T> qk, In3<compute_t<T>> scale, View4<T> k) {
  using C = compute_t<T>;
  const Index length = qk.extent(1), heads = qk.extent(2), dh = qk.extent(3);
  Kokkos::parallel_for(
      "shared_keys", range(Index(qk.extent(0)) * length * heads), KOKKOS_LAMBDA(Index idx) {
        const Index h = idx % heads, i = idx / heads % length, b = idx / (heads * length);
        const C s = scale(b, i, h);
        for (Index d = 0; d < dh; ++d) k(b, i, h, d) = store<T>(load(qk(b, i, h, d)) * s);
      });
}

template <class T>
void shared_keys_backward(In4<T> qk, In3<compute_t<T>> scale, In4<T> dk, View4<T> dqk) {
  using C = compute_t<T>;
  const Index length = qk.extent(1), heads = qk.extent(2), dh = qk.extent(3);
  Kokkos::parallel_for(
      "shared_keys_backward", range(Index(qk.extent(0)) * length * heads),
      KOKKOS_LAMBDA(Index idx) {
        const Index h = idx % heads, i = idx / heads % length, b = idx / (heads * length);
        const T* gk = &dk(b, i, h, 0);
        const T* x = &qk(b, i, h, 0);
        const C gk_dot_x = dot_values(gk, x, dh);
        const C s = scale(b, i, h), a = s * compat::sqrt(C(dh));
        const C c = a * a * gk_dot_x / C(dh);
        T* g = &dqk(b, i, h, 0);
        for (Index d = 0; d < dh; ++d)
          g[d] = store<T>(load(g[d]) + s * (load(gk[d]) - load(x[d]) * c));
      });
}

#define REFORMER_INSTANTIATE(T)                                      \
  template void shared_key_scale<T>(In4<T>, View3<compute_t<T>>);    \
  template void shared_keys<T>(In4<T>, In3<compute_t<T>>, View4<T>); \
  template void shared_keys<T>(In4<T>, View4<T>);                    \
  template void shared_keys_backward<T>(In4<T>, In3<compute_t<T>>, In4<T>, View4<T>);
REFORMER_INSTANTIATE_STORAGE_TYPES(REFORMER_INSTANTIATE)

}  // namespace reformer::attention
