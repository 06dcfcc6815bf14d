#include "train/families/encoder_decoder/encoder_decoder.hpp"

#include "reformer/core/error.hpp"
#include "reformer/data/pairs.hpp"
#include "reformer/io/checkpoint.hpp"
#include "reformer/models/transformer.hpp"
#include "train/memory_check.hpp"
#include "train/sampling.hpp"

namespace reformer::train {

namespace {

// The symbols of a row up to the end id (not included).
std::vector<int> until_end(const data::HostTokens& t, Index row) {
  std::vector<int> out;
  for (Index j = 0; j < Index(t.extent(1)) && t(row, j) != data::PairTask::kEnd; ++j)
    out.push_back(t(row, j));
  return out;
}

}  // namespace

// Decoding a source with the encoder-decoder: greedy, or beam search.
template <class T>
GenerateResult generate_encoder_decoder(const std::string& checkpoint, const config::RunConfig& run,
                                        const GenerateOptions& options) {
  const auto built = require_memory_fits(run, std::max<Index>(1, options.beam), false, "generate");
  const auto task = data::make_pair_task(data::pair_config(run.data));
  ParameterSet<T> params;
  models::EncoderDecoder<T> model(config::transformer_config(built, task->vocab()), params);
  io::load_checkpoint<T>(checkpoint, params, nullptr);
  const Index length = task->length();
  GenerateResult result;
  result.seq2seq = true;
  if (options.source_text.empty()) {
    const auto pair = task->batch(data::Split::Valid, 0, 1);
    result.prompt = until_end(pair.source, 0);
    result.expected = until_end(pair.target_out, 0);
  } else {
    result.prompt = task->encode(options.source_text);
  }
  require<ConfigError>(!result.prompt.empty() && Index(result.prompt.size()) < length,
                       "generate: the source has ", result.prompt.size(),
                       " symbols but must have between 1 and data.length - 1 = ", length - 1);
  // The source in the pair tasks' layout (w end pad..., its mask), on the device.
  const auto row = data::pair_row(result.prompt, {}, length);
  Kokkos::View<int**, Layout, MemSpace> source("generate_source", 1, length);
  Kokkos::View<int**, Layout, MemSpace> valid("generate_source_valid", 1, length);
  Kokkos::deep_copy(source, row.source);
  Kokkos::deep_copy(valid, row.source_valid);
  require<ConfigError>(options.tokens <= length, "generate: --tokens ", options.tokens,
                       " but the encoder-decoder's targets hold at most data.length = ", length,
                       " symbols; ask for at most ", length);
  const Index limit = options.tokens > 0 ? Index(options.tokens) : length;
  std::vector<std::vector<int>> out;
  if (options.beam != 1) {  // beam_search checks the size
    models::BeamOptions beam;
    beam.beam = options.beam;
    beam.length_penalty = options.length_penalty;
    out =
        model.beam_search(source, valid, data::PairTask::kStart, data::PairTask::kEnd, limit, beam);
  } else {
    out = model.greedy(source, valid, data::PairTask::kStart, data::PairTask::kEnd, limit);
  }
  result.generated = out[0];
  if (!result.generated.empty() && result.generated.back() == data::PairTask::kEnd)
    result.generated.pop_back();
  result.prompt_text = task->decode(result.prompt);
  result.generated_text = task->decode(result.generated);
  result.expected_text = task->decode(result.expected);
  return result;
}

template GenerateResult generate_encoder_decoder<float>(const std::string&,
                                                        const config::RunConfig&,
                                                        const GenerateOptions&);
template GenerateResult generate_encoder_decoder<double>(const std::string&,
                                                         const config::RunConfig&,
                                                         const GenerateOptions&);

}  // namespace reformer::train
