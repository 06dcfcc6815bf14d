#include "reformer/attention/shared_qk.hpp"

#include "reformer/core/fast_math.hpp"
#include "reformer/core/instantiate.hpp"

namespace reformer::attention {
namespace {
constexpr double kNormEps = 1e-6;
}  // namespace

template <class T>
void shared_key_scale(In4<T> qk, View3<T> scale) {
  const Index length = qk.extent(1), heads = qk.extent(2), dh = qk.extent(3);
  Kokkos::parallel_for(
      "shared_key_scale", range(Index(qk.extent(0)) * length * heads), KOKKOS_LAMBDA(Index idx) {
        const Index h = idx % heads, i = idx / heads % length, b = idx / (heads * length);
        T sq = 0;
        for (Index d = 0; d < dh; ++d) sq += qk(b, i, h, d) * qk(b, i, h, d);
        scale(b, i, h) = T(1) / compat::sqrt(sq / dh + T(kNormEps)) / compat::sqrt(T(dh));
      });
}

template <class T>
void shared_keys(In4<T> qk, In3<T> scale, View4<T> k) {
  const Index length = qk.extent(1), heads = qk.extent(2), dh = qk.extent(3);
  Kokkos::parallel_for(
      "shared_keys", range(Index(qk.extent(0)) * length * heads), KOKKOS_LAMBDA(Index idx) {
        const Index h = idx % heads, i = idx / heads % length, b = idx / (heads * length);
        const T s = scale(b, i, h);
        for (Index d = 0; d < dh; ++d) k(b, i, h, d) = qk(b, i, h, d) * s;
      });
}

template <class T>
void shared_keys_backward(In4<T> qk, In3<T> scale, In4<T> dk, View4<T> dqk) {
  const Index length = qk.extent(1), heads = qk.extent(2), dh = qk.extent(3);
  Kokkos::parallel_for(
      "shared_keys_backward", range(Index(qk.extent(0)) * length * heads),
      KOKKOS_LAMBDA(Index idx) {
        const Index h = idx % heads, i = idx / heads % length, b = idx / (heads * length);
        const T* gk = &dk(b, i, h, 0);
        const T* x = &qk(b, i, h, 0);
        T gk_dot_x = 0;
        for (Index d = 0; d < dh; ++d) gk_dot_x += gk[d] * x[d];
        const T s = scale(b, i, h), a = s * compat::sqrt(T(dh));
        const T c = a * a * gk_dot_x / T(dh);
        T* g = &dqk(b, i, h, 0);
        for (Index d = 0; d < dh; ++d) g[d] += s * (gk[d] - x[d] * c);
      });
}

#define REFORMER_INSTANTIATE(T)                           \
  template void shared_key_scale<T>(In4<T>, View3<T>);    \
  template void shared_keys<T>(In4<T>, In3<T>, View4<T>); \
  template void shared_keys_backward<T>(In4<T>, In3<T>, In4<T>, View4<T>);
REFORMER_INSTANTIATE_FLOAT_AND_DOUBLE(REFORMER_INSTANTIATE)

}  // namespace reformer::attention
