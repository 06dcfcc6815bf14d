// What every family's generation shares: drawing the next token from a row of
// logits (the same options and the same draws whatever the model), and a
// language model's tokens as text.
#pragma once

#include "reformer/config/run_config.hpp"
#include "reformer/core/types.hpp"
#include "reformer/train/trainer.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace reformer::train {

// Index of the next token: argmax at temperature 0, else a sample from
// softmax(logits / temperature) restricted to the top_k largest and to the
// smallest set of largest whose probability reaches top_p. `draw` numbers the
// draw in the stream of options.seed.
int pick(const std::vector<double>& logits, const GenerateOptions& options, std::uint64_t draw);

// How a language model's ids are shown and read: bytes (+ data.id_offset)
// or integers.
struct TokenText {
  bool bytes = false;
  int offset = 0;
};
TokenText token_text(const config::RunConfig& config);

// Token ids of a prompt: the bytes of the text for a byte-level model, else
// integers separated by spaces or commas.
std::vector<int> prompt_ids(const std::string& text, TokenText units);
// Ids as text in the same units.
std::string show(const std::vector<int>& ids, TokenText units);

// A language model's report (GenerateResult::report): every row's prompt and
// generation, the speed (cached or rerunning), and the expected continuation.
std::string token_report(const GenerateResult& result, TokenText units, bool cached);

// Host copy of logits row b.
template <class V>
std::vector<double> row_of(const V& logits, Index b) {
  return std::vector<double>(logits.data() + b * logits.extent(1),
                             logits.data() + (b + 1) * logits.extent(1));
}

}  // namespace reformer::train
