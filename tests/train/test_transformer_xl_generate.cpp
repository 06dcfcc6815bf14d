// `generate` on a trained Transformer-XL run (issue 33,
// train/families/transformer_xl/generate.hpp): decoding with the cached keys
// and values gives the tokens of rerunning the model on each segment so far
// over its memory, greedy and sampled, across segment boundaries, with the
// run's and with evaluation's segment and memory settings; prompts of two
// lengths in one call; the default prompt; bad input named by value and rule.
#include "reformer/core/error.hpp"
#include "reformer/train/trainer.hpp"
#include "support/checks.hpp"
#include "support/run_configs.hpp"
#include "support/temp_dir.hpp"

#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

namespace reformer {
namespace {

using namespace reformer::testing;

// A small text for the byte task: 12 KB of word lines.
std::string write_xl_corpus(const TempDir& dir) {
  std::string text;
  const char* words[] = {"segment", "memory",  "keeps", "the", "hidden", "states",
                         "of",      "earlier", "text",  "and", "reads",  "them"};
  for (int i = 0; text.size() < 12000; ++i)
    text += std::string(words[(i * 5 + i / 7) % 12]) + ((i % 9) == 8 ? ".\n" : " ");
  const std::string path = dir.path() + "/corpus.txt";
  std::ofstream(path) << text;
  return path;
}

std::vector<int> byte_ids(const std::string& text) { return {text.begin(), text.end()}; }

TEST(Trainer, TransformerXLCachedGenerationMatchesRerunning) {
  TempDir dir;
  const std::string corpus = write_xl_corpus(dir);
  const std::string run = dir.path() + "/xl";
  // Segments of 8, memory 12, clamp_len 10 (xl_run), in double.
  auto config = xl_run(run, corpus, 3);
  config.train.dtype = "double";
  train::run_training(config, quiet_options());
  train::GenerateOptions options;
  // Two prompts of 5 bytes (one batch) and one of 11 (a batch of its own):
  // 14 new tokens cross the segment boundaries at 8, 16 and 24.
  options.prompts = {byte_ids("the s"), byte_ids("of me"), byte_ids("keeps the h")};
  options.tokens = 14;
  const auto cached = train::generate(run, {}, options);
  ASSERT_EQ(cached.generations.size(), 3u);
  for (const auto& row : cached.generations) EXPECT_EQ(row.size(), 14u);
  EXPECT_EQ(cached.prompts, options.prompts);
  EXPECT_EQ(cached.generated, cached.generations[0]);
  options.cache = false;
  EXPECT_EQ(train::generate(run, {}, options).generations, cached.generations);
  // Sampling draws the same way with and without the cache.
  options.temperature = 1.3;
  options.top_k = 40;
  options.seed = 11;
  const auto sampled = train::generate(run, {}, options);
  EXPECT_NE(sampled.generations, cached.generations);
  options.cache = true;
  EXPECT_EQ(train::generate(run, {}, options).generations, sampled.generations);
  // Evaluation's reading of a stream: shorter segments, another memory,
  // same_length and clamp_len.
  const std::vector<std::string> eval = {"eval.tgt_len=5", "eval.mem_len=7", "eval.clamp_len=4",
                                         "eval.same_length=on"};
  options.temperature = 0;  // greedy: no top_k and no seed (each would have no effect)
  options.top_k = 0;
  options.seed = train::GenerateOptions{}.seed;
  const auto short_segments = train::generate(run, eval, options);
  options.cache = false;
  EXPECT_EQ(train::generate(run, eval, options).generations, short_segments.generations);
  // A prompt decoded alone gets the tokens it gets in a batch (greedy).
  options.cache = true;
  options.prompts = {byte_ids("the s")};
  EXPECT_EQ(train::generate(run, {}, options).generations[0], cached.generations[0]);
}

TEST(Trainer, TransformerXLGenerationDefaultsAndErrors) {
  TempDir dir;
  const std::string corpus = write_xl_corpus(dir);
  const std::string run = dir.path() + "/xl";
  train::run_training(xl_run(run, corpus, 2), quiet_options());
  // No prompt: the start of the validation text, cut after its first half
  // (5 of data.length = 8), up to data.length in all.
  train::GenerateOptions options;
  const auto result = train::generate(run, {}, options);
  EXPECT_EQ(result.prompt.size(), 5u);
  EXPECT_EQ(result.generated.size(), 3u);
  EXPECT_EQ(result.expected.size(), 3u);
  EXPECT_GE(result.seconds, 0.0);
  options.prompts = {{104, 256, 3}};
  expect_error<ConfigError>([&] { train::generate(run, {}, options); },
                            {"prompt token 256", "[0, 256)", "model.vocab"});
  options.prompts = {{104, 105}, {}};
  expect_error<ConfigError>([&] { train::generate(run, {}, options); }, {"prompt 2 is empty"});
  options.prompts = {{104, 105}};
  options.stop = {-1};
  expect_error<ConfigError>([&] { train::generate(run, {}, options); }, {"stop id -1", "[0, 256)"});
}

}  // namespace
}  // namespace reformer
