#include "train/sampling.hpp"

#include "reformer/core/random.hpp"

#include <algorithm>
#include <cmath>

namespace reformer::train {
namespace {
// The run's stream of sampling draws (trainer.cpp numbers the others 1-3).
constexpr std::uint64_t kSample = 4;
}  // namespace

int pick(const std::vector<double>& logits, const GenerateOptions& options, std::uint64_t draw) {
  const auto best = std::max_element(logits.begin(), logits.end()) - logits.begin();
  if (options.temperature <= 0) return int(best);
  std::vector<int> order(logits.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = int(i);
  std::sort(order.begin(), order.end(), [&](int a, int b) { return logits[a] > logits[b]; });
  std::size_t keep =
      options.top_k > 0 ? std::min<std::size_t>(options.top_k, order.size()) : order.size();
  std::vector<double> weight(keep);
  double total = 0;
  for (std::size_t i = 0; i < keep; ++i) {
    weight[i] = std::exp((logits[order[i]] - logits[best]) / options.temperature);
    total += weight[i];
  }
  if (options.top_p < 1.0) {
    double mass = 0;
    std::size_t nucleus = 0;
    while (nucleus < keep && mass < options.top_p * total) mass += weight[nucleus++];
    keep = std::max<std::size_t>(1, nucleus);
    total = mass > 0 ? mass : weight[0];
  }
  double u = random_uniform({options.seed, stream_id(kSample)}, draw) * total;
  for (std::size_t i = 0; i < keep; ++i) {
    if (u < weight[i]) return order[i];
    u -= weight[i];
  }
  return order[keep - 1];
}

}  // namespace reformer::train
