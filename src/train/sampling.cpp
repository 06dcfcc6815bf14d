#include "train/sampling.hpp"

#include "reformer/core/random.hpp"

#include "reformer/data/tasks.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <sstream>

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

TokenText token_text(const config::RunConfig& config) {
  return {config.data.task == data::TaskKind::Bytes, int(config.data.id_offset)};
}

std::vector<int> prompt_ids(const std::string& text, TokenText units) {
  std::vector<int> ids;
  if (units.bytes) {
    for (unsigned char c : text) ids.push_back(int(c) + units.offset);
    return ids;
  }
  return data::parse_token_ids(text, "generate: --prompt");
}

std::string show(const std::vector<int>& ids, TokenText units) {
  std::string text;
  for (int id : ids) {
    // Below the offset: a special id, shown as a number.
    if (units.bytes && id >= units.offset && id < units.offset + 256) {
      id -= units.offset;
      text += std::isprint(id) || id == '\n' ? std::string(1, char(id)) : "\\x" + [&] {
        char hex[3];
        std::snprintf(hex, sizeof hex, "%02x", id);
        return std::string(hex);
      }();
    } else if (units.bytes) {
      text += "<" + std::to_string(id) + ">";
    } else {
      text += (text.empty() ? "" : " ") + std::to_string(id);
    }
  }
  return text;
}

std::string token_report(const GenerateResult& r, TokenText units, bool cached) {
  std::ostringstream out;
  std::size_t total = 0;
  for (std::size_t b = 0; b < r.prompts.size(); ++b) {
    if (r.prompts.size() > 1) out << "[" << b + 1 << "]\n";
    out << "prompt:    " << show(r.prompts[b], units) << "\n";
    out << "generated: " << show(r.generations[b], units) << "\n";
    total += r.generations[b].size();
  }
  char line[160];
  std::snprintf(line, sizeof line, "%zu tokens in %.3f s (%.1f tokens/s, %s)\n", total, r.seconds,
                r.seconds > 0 ? double(total) / r.seconds : 0.0,
                cached ? "cached" : "rerunning the prefix");
  out << line;
  if (r.launches_per_token > 0) {
    std::snprintf(line, sizeof line, "%.1f kernel launches per generation step (%zu rows)\n",
                  r.launches_per_token, r.prompts.size());
    out << line;
  }
  if (!r.expected.empty()) {
    std::size_t same = 0;
    for (std::size_t i = 0; i < r.expected.size(); ++i) same += r.expected[i] == r.generated[i];
    out << "expected:  " << show(r.expected, units) << "\n";
    out << "matches the expected continuation at " << same << " of " << r.expected.size()
        << " positions\n";
  }
  return out.str();
}

}  // namespace reformer::train
