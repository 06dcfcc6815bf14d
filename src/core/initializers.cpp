#include "reformer/core/initializers.hpp"

#include "reformer/core/error.hpp"
#include "reformer/core/instantiate.hpp"

#include <cmath>

namespace reformer {
namespace {

// value_i = scale * normal(key, i)
template <class T>
void fill_normal(View1<T> value, double scale, RandomKey key) {
  Kokkos::parallel_for(
      "init_normal", range(value.extent(0)),
      KOKKOS_LAMBDA(Index i) { value(i) = static_cast<T>(scale * random_normal(key, i)); });
}

// value_i = limit * (2 * uniform(key, i) - 1), in [-limit, limit)
template <class T>
void fill_symmetric_uniform(View1<T> value, double limit, RandomKey key) {
  Kokkos::parallel_for(
      "init_xavier_uniform", range(value.extent(0)), KOKKOS_LAMBDA(Index i) {
        value(i) = static_cast<T>(limit * (2.0 * random_uniform(key, i) - 1.0));
      });
}

}  // namespace

std::pair<Index, Index> xavier_fans(const std::vector<Index>& shape) {
  const std::size_t rank = shape.size();
  require<ShapeError>(rank >= 1 && rank <= 3, "xavier_fans: shape ", shape_string(shape),
                      " has rank ", rank, " but Xavier fans are defined for ranks 1 to 3");
  if (rank == 1) return {shape[0], shape[0]};
  return {shape[rank - 2], shape[rank - 1]};
}

template <class T>
void init_normal(Parameter<T>& param, double std, RandomKey key) {
  require<ConfigError>(std::isfinite(std) && std >= 0, "init_normal: std for ", param.name, " is ",
                       std, " but must be finite and >= 0");
  fill_normal(param.value, std, key);
}

template <class T>
void init_xavier_uniform(Parameter<T>& param, RandomKey key) {
  const auto [fan_in, fan_out] = xavier_fans(param.shape);
  fill_symmetric_uniform(param.value, std::sqrt(6.0 / double(fan_in + fan_out)), key);
}

template <class T>
void init_constant(Parameter<T>& param, double value) {
  require<ConfigError>(std::isfinite(value), "init_constant: value for ", param.name, " is ", value,
                       " but must be finite");
  Kokkos::deep_copy(param.value, static_cast<T>(value));
}

#define REFORMER_INSTANTIATE(T)                                   \
  template void init_normal<T>(Parameter<T>&, double, RandomKey); \
  template void init_xavier_uniform<T>(Parameter<T>&, RandomKey); \
  template void init_constant<T>(Parameter<T>&, double);
REFORMER_INSTANTIATE_FLOAT_AND_DOUBLE(REFORMER_INSTANTIATE)

}  // namespace reformer
