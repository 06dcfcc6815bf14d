#include "reformer/config/run_config.hpp"
#include "reformer/core/error.hpp"
#include "reformer/io/checkpoint.hpp"
#include "reformer/train/trainer.hpp"
#include "support/checks.hpp"
#include "support/temp_dir.hpp"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <type_traits>

namespace reformer {
namespace {

using namespace reformer::testing;

config::RunConfig tiny_run(const std::string& dir, std::int64_t steps, bool reversible) {
  std::ostringstream toml;
  toml << "[run]\ndir = \"" << dir << "\"\n"
       << "[model]\nvocab = 8\nd_model = 16\nd_ff = 16\nheads = 2\nd_head = 8\nlayers = 2\n"
       << "attention = [\"local\", \"lsh\"]\npositions = \"axial\"\nmax_length = 16\n"
       << "dropout = 0.1\nattention_dropout = 0.1\nreversible = " << (reversible ? "true" : "false")
       << "\n[model.lsh]\nchunk = 8\n[model.local]\nchunk = 8\n"
       << "[data]\ntask = \"duplication\"\nlength = 16\nvocab = 8\n"
       << "[train]\nsteps = " << steps
       << "\nbatch = 3\naccumulate = 2\nlearning_rate = 0.01\nclip_norm = 1.0\n"
       << "eval_every = 3\neval_batches = 1\nlog_every = 2\ncheckpoint_every = 2\n"
       << "metrics_format = \"jsonl\"\n";
  return config::parse_run_config(toml.str(), "tiny.toml");
}

std::ostringstream quiet;

// Stopping at step 3 and resuming gives the losses of the uninterrupted run:
// bitwise on Serial, within 1e-6 elsewhere (threaded reductions).
TEST(Trainer, ResumeContinuesTheSameLosses) {
  TempDir dir;
  train::TrainOptions options;
  options.out = &quiet;
  options.handle_signals = false;
  const auto whole = train::run_training(tiny_run(dir.path() + "/a", 7, true), options);
  ASSERT_EQ(whole.losses.size(), 7u);
  const auto first = train::run_training(tiny_run(dir.path() + "/b", 3, true), options);
  EXPECT_EQ(first.steps, 3);
  options.resume = true;
  const auto rest = train::run_training(tiny_run(dir.path() + "/b", 7, true), options);
  EXPECT_EQ(rest.first_step, 3);
  ASSERT_EQ(rest.losses.size(), 4u);
  const bool serial = std::is_same<ExecSpace, Kokkos::DefaultHostExecutionSpace>::value &&
                      ExecSpace().concurrency() == 1;
  for (std::size_t i = 0; i < 7; ++i) {
    const double resumed = i < 3 ? first.losses[i] : rest.losses[i - 3];
    if (serial)
      EXPECT_EQ(resumed, whole.losses[i]) << "step " << i + 1;
    else
      EXPECT_NEAR(resumed, whole.losses[i], 1e-6) << "step " << i + 1;
  }
  // The metrics file holds each logged step once, in order (the first call
  // also logged its last step, 3).
  std::ifstream metrics(dir.path() + "/b/metrics.jsonl");
  std::string line, steps;
  while (std::getline(metrics, line))
    if (line.find("\"train\"") != std::string::npos) steps += line.substr(0, line.find(',')) + ";";
  EXPECT_EQ(steps, "{\"step\": 2;{\"step\": 3;{\"step\": 4;{\"step\": 6;{\"step\": 7;");
  // The checkpoint of the last step records where the data stream stands.
  const auto meta = io::read_checkpoint_meta(*io::latest_checkpoint(dir.path() + "/b"));
  EXPECT_EQ(meta.step, 7);
  EXPECT_EQ(meta.data_position, 14u);  // 7 steps of 2 micro-batches
}

TEST(Trainer, LearnsAndEvaluatesFromCheckpoints) {
  TempDir dir;
  train::TrainOptions options;
  options.out = &quiet;
  options.handle_signals = false;
  auto config = tiny_run(dir.path() + "/run", 12, false);
  const auto summary = train::run_training(config, options);
  EXPECT_LT(summary.losses.back(), summary.losses.front());
  // evaluate_checkpoint reads the run's config and parameters: the same numbers.
  const auto e = train::evaluate_checkpoint(dir.path() + "/run", {}, data::Split::Valid, 1);
  EXPECT_NEAR(e.loss, summary.last_eval.loss, 1e-6);
  EXPECT_EQ(e.tokens, summary.last_eval.tokens);
  // Overrides that change parameter shapes are refused, naming the parameter.
  expect_error<Error>(
      [&] {
        train::evaluate_checkpoint(dir.path() + "/run", {"model.d_ff=32"}, data::Split::Valid, 1);
      },
      {"w1", "[16, 16]", "[16, 32]"});
  // A resumed run refuses a different config, naming the key.
  options.resume = true;
  auto changed = config;
  changed.model.dropout = 0.2;
  expect_error<ConfigError>([&] { train::run_training(changed, options); }, {"model.dropout"});
  // Generation continues a prompt with ids of the vocabulary.
  train::GenerateOptions generate;
  generate.prompt = {0, 3, 5};
  generate.tokens = 4;
  generate.temperature = 0.8;
  generate.top_k = 3;
  const auto g = train::generate(dir.path() + "/run", {}, generate);
  ASSERT_EQ(g.generated.size(), 4u);
  for (int id : g.generated) EXPECT_TRUE(id >= 0 && id < 8) << id;
}

}  // namespace
}  // namespace reformer
