// Drawing the next token from a row of logits, for every family's generation
// (the same options and the same draws whatever the model).
#pragma once

#include "reformer/core/types.hpp"
#include "reformer/train/trainer.hpp"

#include <cstdint>
#include <vector>

namespace reformer::train {

// Index of the next token: argmax at temperature 0, else a sample from
// softmax(logits / temperature) restricted to the top_k largest and to the
// smallest set of largest whose probability reaches top_p. `draw` numbers the
// draw in the stream of options.seed.
int pick(const std::vector<double>& logits, const GenerateOptions& options, std::uint64_t draw);

// Host copy of logits row b.
template <class V>
std::vector<double> row_of(const V& logits, Index b) {
  return std::vector<double>(logits.data() + b * logits.extent(1),
                             logits.data() + (b + 1) * logits.extent(1));
}

}  // namespace reformer::train
