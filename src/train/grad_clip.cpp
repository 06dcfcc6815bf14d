#include "reformer/train/grad_clip.hpp"

#include "reformer/core/error.hpp"
#include "reformer/core/instantiate.hpp"

#include <cmath>

namespace reformer::train {
namespace {

// sum_i g_i^2
template <class T>
double sum_of_squares(In1<T> g) {
  double sum = 0;
  Kokkos::parallel_reduce(
      "grad_sum_of_squares", range(g.extent(0)),
      KOKKOS_LAMBDA(Index i, double& acc) { acc += double(g(i)) * double(g(i)); }, sum);
  return sum;
}

// g_i <- scale * g_i
template <class T>
void scale_in_place(View1<T> g, T scale) {
  Kokkos::parallel_for(
      "grad_clip_scale", range(g.extent(0)), KOKKOS_LAMBDA(Index i) { g(i) *= scale; });
}

}  // namespace

template <class T>
double global_grad_norm(const ParameterSet<T>& params) {
  return std::sqrt(sum_of_squares<T>(params.grads()));
}

template <class T>
double clip_grad_norm(ParameterSet<T>& params, double max_norm) {
  require<ConfigError>(std::isfinite(max_norm) && max_norm > 0, "clip_grad_norm: max_norm is ",
                       max_norm, " but must be finite and positive");
  return clip_grad_norm(params, max_norm, global_grad_norm(params));
}

template <class T>
double clip_grad_norm(ParameterSet<T>& params, double max_norm, double norm) {
  require<ConfigError>(std::isfinite(max_norm) && max_norm > 0, "clip_grad_norm: max_norm is ",
                       max_norm, " but must be finite and positive");
  require<Error>(std::isfinite(norm), "clip_grad_norm: the global gradient norm is ", norm,
                 "; a gradient holds inf or nan");
  if (norm > max_norm) scale_in_place<T>(params.grads(), static_cast<T>(max_norm / norm));
  return norm;
}

template <class T>
std::int64_t count_nonfinite(In1<T> x) {
  std::int64_t count = 0;
  Kokkos::parallel_reduce(
      "count_nonfinite", range(x.extent(0)),
      KOKKOS_LAMBDA(Index i, std::int64_t & acc) { acc += compat::isfinite(x(i)) ? 0 : 1; }, count);
  return count;
}

#define REFORMER_INSTANTIATE(T)                                        \
  template double global_grad_norm<T>(const ParameterSet<T>&);         \
  template double clip_grad_norm<T>(ParameterSet<T>&, double);         \
  template double clip_grad_norm<T>(ParameterSet<T>&, double, double); \
  template std::int64_t count_nonfinite<T>(In1<T>);
REFORMER_INSTANTIATE_FLOAT_AND_DOUBLE(REFORMER_INSTANTIATE)

}  // namespace reformer::train
