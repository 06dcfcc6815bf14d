#include "train/workload.hpp"

#include "reformer/core/error.hpp"
#include "reformer/train/model_family.hpp"

namespace reformer::train {

template <class T>
std::int64_t Workload<T>::batches_in_split(data::Split, Index) const {
  return -1;
}

template <class T>
std::unique_ptr<Workload<T>> make_workload(const config::RunConfig& config) {
  return model_family(config).workload(config, T{});
}

namespace workload {

Index count_other_than(const data::HostTokens& tokens, int skip) {
  Index n = 0;
  for (Index b = 0; b < Index(tokens.extent(0)); ++b)
    for (Index t = 0; t < Index(tokens.extent(1)); ++t) n += tokens(b, t) != skip;
  return n;
}

data::HostTokens row_range(const data::HostTokens& tokens, Index first, Index count) {
  if (tokens.extent(0) == 0) return tokens;
  return Kokkos::subview(tokens, std::make_pair(first, first + count), Kokkos::ALL);
}

}  // namespace workload

template class Workload<float>;
template class Workload<double>;
template std::unique_ptr<Workload<float>> make_workload<float>(const config::RunConfig&);
template std::unique_ptr<Workload<double>> make_workload<double>(const config::RunConfig&);

}  // namespace reformer::train
