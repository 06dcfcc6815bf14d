// `reformer generate` on a Transformer-XL run (issue 33): the prompt fed
// through segments of eval.tgt_len (or data.length) positions with memories
// of eval.mem_len (or model.xl.mem_len) as evaluation reads a stream, then
// tokens drawn with the language model's sampling (train/sampling.hpp).
#pragma once

#include "reformer/config/run_config.hpp"
#include "reformer/train/trainer.hpp"

#include <string>

namespace reformer::train {

// Loads the parameters of `checkpoint` (a file) for the Transformer-XL of
// `config`, and decodes options.prompts (or options.prompt; empty: the first
// data.length tokens of the validation text cut after their first half, the
// rest being result.expected). Prompts of equal length decode as the rows of
// one batch; prompts of another length form batches of their own (a stream
// of segments has no padding), with the same draws either way. options.cache:
// TransformerXL::generation_step (each token attends to the cached keys and
// values of its segment and memory); false: every token reruns forward on
// its segment so far over the segment's memory. ConfigError naming the value
// and the rule for a bad prompt, stop id or sampling option.
template <class T>
GenerateResult generate_transformer_xl(const std::string& checkpoint,
                                       const config::RunConfig& config,
                                       const GenerateOptions& options);

}  // namespace reformer::train
