// Training with train.precision = "bf16" (issue 34): bf16 activations on
// float32 master weights, gradients and Adam moments. Checkpoints hold the
// float32 state either way, so a bf16 run resumes bitwise, a float32
// checkpoint fine-tunes in bf16 and back, and evaluation and generation read
// a bf16 run like any other.
#include "reformer/config/run_config.hpp"
#include "reformer/core/bfloat16.hpp"
#include "reformer/core/error.hpp"
#include "reformer/io/checkpoint.hpp"
#include "reformer/models/reformer_lm.hpp"
#include "reformer/train/optimizer.hpp"
#include "reformer/train/trainer.hpp"
#include "support/checks.hpp"
#include "support/gradcheck.hpp"
#include "support/run_configs.hpp"
#include "support/temp_dir.hpp"

#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

namespace reformer {
namespace {

using namespace reformer::testing;

// The tiny duplication run (support/run_configs.hpp) with LSH layers in bf16.
config::RunConfig bf16_run(const std::string& dir, std::int64_t steps,
                           const std::string& precision = "bf16",
                           const std::vector<std::string>& more = {}) {
  std::vector<std::string> overrides = {"model.attention=[\"lsh\"]",
                                        "train.precision=\"" + precision + "\""};
  overrides.insert(overrides.end(), more.begin(), more.end());
  return tiny_run(dir, steps, true, overrides);
}

// The checkpoint's parameters and Adam moments as float32 host values.
std::vector<std::vector<float>> float_state(const config::RunConfig& config,
                                            const std::string& path) {
  ParameterSet<float> params;
  models::ReformerLM<float> model(lm_model_of(config), params);
  train::Adam<float> adam(params);
  io::load_checkpoint<float>(path, params, &adam);
  std::vector<std::vector<float>> out;
  for (const auto& view : {params.values(), adam.first_moments(), adam.second_moments()}) {
    const auto host = Kokkos::create_mirror_view_and_copy(HostSpace(), view);
    out.emplace_back(host.data(), host.data() + host.size());
  }
  return out;
}

// That bf16 runs learn (a task to an accuracy chance cannot reach, within a
// small bound of float32's) is asserted in test_learning.cpp; here, what bf16
// changes about resuming, checkpoints, evaluation and generation.
TEST(Bf16Training, ResumesBitwiseAndKeepsFloat32Checkpoints) {
  TempDir dir;
  train::TrainOptions options = quiet_options();
  const auto whole = train::run_training(bf16_run(dir.path() + "/whole", 8), options);
  const auto first = train::run_training(bf16_run(dir.path() + "/split", 4), options);
  options.resume = true;
  const auto rest = train::run_training(bf16_run(dir.path() + "/split", 8), options);
  ASSERT_EQ(first.losses.size() + rest.losses.size(), whole.losses.size());
  for (std::size_t i = 0; i < whole.losses.size(); ++i)
    EXPECT_EQ(i < 4 ? first.losses[i] : rest.losses[i - 4], whole.losses[i]) << "step " << i + 1;
  // The checkpoints hold float32 master weights and moments (they load into a
  // float32 model), equal bitwise after the split run.
  const auto a = float_state(bf16_run(dir.path() + "/whole", 8), whole.checkpoint);
  const auto b = float_state(bf16_run(dir.path() + "/split", 8), rest.checkpoint);
  EXPECT_TRUE(a == b);
  // The master weights are float32 values, not bf16 ones: nearly every
  // parameter has bits below bf16's 8 significant bits.
  std::size_t finer = 0;
  for (float w : a[0]) finer += (float_to_bits(w) & 0xffffu) != 0;
  EXPECT_GT(finer, a[0].size() / 2);
  // Evaluation and generation read the bf16 run.
  const auto e = train::evaluate_checkpoint(dir.path() + "/whole", {}, data::Split::Valid, 1);
  EXPECT_GT(e.tokens, 0);
  EXPECT_EQ(e.unit, "token");  // a language model scores tokens
  EXPECT_NEAR(e.loss, whole.last_eval.loss, 1e-6);
  train::GenerateOptions generate;
  generate.prompt = {0, 3, 5};
  generate.tokens = 3;
  const auto g = train::generate(dir.path() + "/whole", {}, generate);
  ASSERT_EQ(g.generated.size(), 3u);
}

// The encoder-decoder trains in bf16 and decodes (greedy, exact matches) with
// a float32 copy of its weights; its checkpoints are float32 too.
TEST(Bf16Training, EncoderDecoderTrainsAndDecodes) {
  TempDir dir;
  train::TrainOptions options = quiet_options();
  auto config =
      seq2seq_run(dir.path() + "/s", 8, {"train.precision=\"bf16\"", "train.eval_every=4"});
  const auto summary = train::run_training(config, options);
  EXPECT_GT(summary.last_eval.tokens, 0);
  // Greedy decoding ran on the evaluated pairs (a rate in [0, 1], not the -1
  // of a workload that does not decode), and evaluating the checkpoint again
  // decodes the same pairs to the same rate.
  ASSERT_GE(summary.last_eval.exact_match, 0.0);
  ASSERT_LE(summary.last_eval.exact_match, 1.0);
  const auto e = train::evaluate_checkpoint(dir.path() + "/s", {}, data::Split::Valid, 2);
  EXPECT_NEAR(e.loss, summary.last_eval.loss, 1e-6);
  EXPECT_EQ(e.exact_match, summary.last_eval.exact_match);
}

// A float32 run continues in bf16 and back: the step's loss and the
// parameters after it stay within bf16's reach of the float32 continuation.
TEST(Bf16Training, Float32CheckpointsFineTuneInBf16AndBack) {
  TempDir dir;
  train::TrainOptions options = quiet_options();
  train::run_training(bf16_run(dir.path() + "/f", 4, "float32"), options);
  train::run_training(bf16_run(dir.path() + "/g", 4, "float32"), options);
  options.resume = true;
  const auto as_float = train::run_training(bf16_run(dir.path() + "/f", 6, "float32"), options);
  const auto as_bf16 = train::run_training(bf16_run(dir.path() + "/g", 6, "bf16"), options);
  ASSERT_EQ(as_bf16.losses.size(), as_float.losses.size());
  for (std::size_t i = 0; i < as_float.losses.size(); ++i)
    EXPECT_NEAR(as_bf16.losses[i], as_float.losses[i], 0.05 * as_float.losses[i]) << i;
  // ... and back to float32 from the bf16 checkpoint.
  const auto back = train::run_training(bf16_run(dir.path() + "/g", 8, "float32"), options);
  EXPECT_EQ(back.first_step, 6);
  EXPECT_EQ(back.losses.size(), 2u);
}

// Transformer-XL trains in bf16 with bf16 memories; its checkpoints hold the
// memories widened to float32 (exactly), so a split run resumes bitwise, and
// generation reads the bf16 run with the float32 model.
TEST(Bf16Training, TransformerXLTrainsResumesBitwiseAndGenerates) {
  TempDir dir;
  std::string text;
  for (int i = 0; text.size() < 12000; ++i)
    text += std::string(i % 3 ? "segments carry " : "a memory of ") + char('a' + i % 23) + " ";
  const std::string corpus = dir.path() + "/corpus.txt";
  std::ofstream(corpus) << text;
  const std::vector<std::string> bf16 = {"train.precision=\"bf16\""};
  auto options = quiet_options();
  const auto whole = train::run_training(xl_run(dir.path() + "/whole", corpus, 7, bf16), options);
  ASSERT_EQ(whole.losses.size(), 7u);
  const auto first = train::run_training(xl_run(dir.path() + "/split", corpus, 4, bf16), options);
  // Memories of both stream groups and layers, float32 values that are bf16 ones.
  const auto state = io::read_checkpoint_state(first.checkpoint);
  ASSERT_EQ(state.size(), 4u);
  ParameterSet<float> memories;
  for (const auto& p : state) memories.add(p.name, p.shape);
  io::load_checkpoint_state<float>(first.checkpoint, memories);
  const auto values = to_host(memories.values());
  ASSERT_FALSE(values.empty());
  std::size_t nonzero = 0;
  for (double v : values) {
    EXPECT_EQ(float_to_bits(float(v)) & 0xffffu, 0u) << v;
    nonzero += v != 0.0;
  }
  EXPECT_GT(nonzero, values.size() / 2);
  options.resume = true;
  const auto rest = train::run_training(xl_run(dir.path() + "/split", corpus, 7, bf16), options);
  ASSERT_EQ(rest.losses.size(), 3u);
  for (std::size_t i = 0; i < 7; ++i)
    EXPECT_EQ(i < 4 ? first.losses[i] : rest.losses[i - 4], whole.losses[i]) << "step " << i + 1;
  EXPECT_EQ(rest.last_eval.loss, whole.last_eval.loss);
  const auto e = train::evaluate_checkpoint(dir.path() + "/whole", {}, data::Split::Valid, 3);
  EXPECT_NEAR(e.loss, whole.last_eval.loss, 1e-6);
  train::GenerateOptions generate;
  generate.prompt = {97, 32, 109};
  generate.tokens = 4;
  EXPECT_EQ(train::generate(dir.path() + "/whole", {}, generate).generated.size(), 4u);
}

TEST(Bf16Training, EveryKindTrainsAndOptionsBf16CannotHonourAreNamedErrors) {
  TempDir dir;
  train::TrainOptions options = quiet_options();
  // Float32 master weights: not with train.dtype = "double".
  expect_error<ConfigError>(
      [&] { bf16_run(dir.path() + "/a", 2, "bf16", {"train.dtype=\"double\""}); },
      {"train.precision", "train.dtype"});
  // Every attention kind of the Reformer LM trains in bf16.
  const auto mixed =
      bf16_run(dir.path() + "/b", 2, "bf16", {"model.attention=[\"local\", \"exact\", \"full\"]"});
  EXPECT_EQ(train::run_training(mixed, options).losses.size(), 2u);
  // An unknown precision lists the choices.
  expect_error<ConfigError>([&] { bf16_run(dir.path() + "/d", 2, "fp16"); },
                            {"train.precision", "fp16", "bf16"});
}

}  // namespace
}  // namespace reformer
