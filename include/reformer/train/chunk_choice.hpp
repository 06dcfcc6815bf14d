// "auto" feed-forward and loss chunks (model.ff_chunk, model.loss_chunk =
// "auto", kAutoChunk; the default of a run's config on GPUs), resolved before
// a run (train, eval, generate) or a `reformer memory` point builds its model.
//
// Each is the largest chunk, in rows, whose predicted peak (the family's own
// prediction, as `reformer memory` makes it) is no higher than with chunks of
// kAutoChunkFloor rows: chunking further would only add launches, chunking
// less would raise the peak. The candidates are kAutoChunkFloor * 2^j rows
// below the call's rows, and all rows (feed-forward 0, loss `rows`). For the
// Reformer at 16K (d_model 256, d_ff 1024, LSH-2) the feed-forward gets L/4,
// reformer-pytorch's ff_chunks 4, and the loss one chunk: its logits fit in
// the workspace, which is idle while the loss runs (docs/memory.md).
#pragma once

#include "reformer/config/run_config.hpp"

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace reformer::train {

constexpr Index kAutoChunkFloor = 1024;

// The chunks (feed-forward, loss) for the asked ones, each either rows or
// kAutoChunk; peak(ff, loss) is the predicted peak with those chunks, and
// `rows` the most rows one call takes (batch x length).
template <class Peak>
std::pair<Index, Index> choose_chunks(Index ff, Index loss, Index rows, const Peak& peak) {
  std::vector<Index> candidates;
  for (Index c = kAutoChunkFloor; c < rows; c *= 2) candidates.push_back(c);
  const Index loss_all = std::max<Index>(rows, 1);
  // The largest of the candidates and `all` whose peak is no higher than the
  // smallest candidate's.
  auto largest = [&](Index all, auto peak_with) {
    if (candidates.empty()) return all;
    const std::int64_t floor_peak = peak_with(candidates.front());
    if (peak_with(all) <= floor_peak) return all;
    for (auto c = candidates.rbegin(); c != candidates.rend(); ++c)
      if (peak_with(*c) <= floor_peak) return *c;
    return candidates.front();
  };
  const bool auto_ff = ff == kAutoChunk, auto_loss = loss == kAutoChunk;
  // The feed-forward first, with an automatic loss at its smallest chunk.
  if (auto_loss) loss = candidates.empty() ? loss_all : candidates.front();
  if (auto_ff) ff = largest(Index(0), [&](Index c) { return peak(c, loss); });
  if (auto_loss) loss = largest(loss_all, [&](Index c) { return peak(ff, c); });
  return {ff, loss};
}

// The config with its automatic chunks resolved, over `rows` rows: sizes(c)
// is the config's ModelSizes (its ff_chunk and loss_chunk), peak(c) the
// predicted peak of a config.
template <class Config, class Sizes, class Peak>
Config with_auto_chunks(Config config, Index rows, const Sizes& sizes, const Peak& peak) {
  const Index ff = sizes(config).ff_chunk, loss = sizes(config).loss_chunk;
  if (ff != kAutoChunk && loss != kAutoChunk) return config;
  const auto chosen = choose_chunks(ff, loss, rows, [&](Index f, Index l) -> std::int64_t {
    Config c = config;
    sizes(c).ff_chunk = f;
    sizes(c).loss_chunk = l;
    return peak(c);
  });
  sizes(config).ff_chunk = chosen.first;
  sizes(config).loss_chunk = chosen.second;
  return config;
}

// A run's config with its automatic chunks resolved for `batch` sequences of
// data.length on this process (training: a step's peak, else a forward
// pass's), as its family predicts them.
config::RunConfig resolve_auto_chunks(const config::RunConfig& config, Index batch, bool training);

// ", feed-forward in chunks of N rows (auto), loss in chunks of M rows (auto)"
// for the keys `asked` left automatic and `resolved` chose; "" for none.
std::string describe_auto_chunks(const config::RunConfig& asked, const config::RunConfig& resolved);

}  // namespace reformer::train
