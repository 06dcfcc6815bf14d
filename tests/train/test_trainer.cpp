#include "reformer/config/run_config.hpp"
#include "reformer/core/error.hpp"
#include "reformer/core/memory_tracker.hpp"
#include "reformer/io/checkpoint.hpp"
#include "reformer/io/files.hpp"
#include "reformer/models/reformer_lm.hpp"
#include "reformer/models/transformer_xl.hpp"
#include "reformer/train/chunk_choice.hpp"
#include "reformer/train/optimizer.hpp"
#include "reformer/train/trainer.hpp"
#include "support/checks.hpp"
#include "support/run_configs.hpp"
#include "support/temp_dir.hpp"

#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <sstream>
#include <tuple>
#include <type_traits>

namespace reformer {
namespace {

using namespace reformer::testing;

// Generation of a trained language model (issue 20): decoding with caches
// gives the tokens of rerunning the model on each row's prefix (the LSH layer
// is the top one here), for a batch of prompts of different lengths, greedy
// and sampled (temperature, top-p); stop ids end a row; bad options are named.
TEST(Trainer, CachedGenerationMatchesRerunningTheModel) {
  TempDir dir;
  auto config = tiny_run(dir.path() + "/g", 2, true);
  config.train.dtype = "double";
  train::run_training(config, quiet_options());
  const std::string run = dir.path() + "/g";
  train::GenerateOptions options;
  options.prompts = {{0, 3, 5}, {1, 2, 3, 4, 5, 6, 7, 1, 2}, {4}};
  options.tokens = 6;
  const auto cached = train::generate(run, {}, options);
  ASSERT_EQ(cached.generations.size(), 3u);
  for (const auto& row : cached.generations) EXPECT_EQ(row.size(), 6u);
  EXPECT_EQ(cached.prompt, options.prompts[0]);
  EXPECT_EQ(cached.generated, cached.generations[0]);
  options.cache = false;
  EXPECT_EQ(train::generate(run, {}, options).generations, cached.generations);
  // Sampling draws the same way with and without the caches.
  options.temperature = 1.5;
  options.top_p = 0.7;
  const auto sampled = train::generate(run, {}, options);
  options.cache = true;
  EXPECT_EQ(train::generate(run, {}, options).generations, sampled.generations);
  // A nucleus of one token is greedy.
  options.top_p = 1e-9;
  EXPECT_EQ(train::generate(run, {}, options).generations, cached.generations);
  // A stop id ends each row after its first occurrence.
  options.temperature = 0;
  options.top_p = 1;
  const int first = cached.generations[0][0];
  options.stop = {first};
  const auto stopped = train::generate(run, {}, options);
  for (std::size_t b = 0; b < 3; ++b) {
    const auto& full = cached.generations[b];
    const auto end = std::find(full.begin(), full.end(), first);
    const std::size_t expected =
        end == full.end() ? full.size() : std::size_t(end - full.begin()) + 1;
    EXPECT_EQ(stopped.generations[b],
              std::vector<int>(full.begin(), full.begin() + std::ptrdiff_t(expected)));
  }
  options.stop = {8};
  expect_error<ConfigError>([&] { train::generate(run, {}, options); }, {"stop id 8", "[0, 8)"});
  options.stop = {};
  options.top_p = 0;
  expect_error<ConfigError>([&] { train::generate(run, {}, options); }, {"top_p is 0"});
  options.top_p = 1;
  options.prompts = {{1, 2}, std::vector<int>(16, 1)};
  expect_error<ConfigError>([&] { train::generate(run, {}, options); },
                            {"prompt 2 has 16 tokens", "model.max_length - 1 = 15"});
}

// Options a family would not read, or that have no effect at the others'
// values, are refused by name (the CLI calls this before any work).
TEST(Generate, OptionsWithoutEffectAreRefused) {
  using train::check_generate_options;
  auto with = [](auto change) {
    train::GenerateOptions o;
    change(o);
    return o;
  };
  EXPECT_NO_THROW(check_generate_options({}, false));
  EXPECT_NO_THROW(check_generate_options({}, true));
  EXPECT_NO_THROW(check_generate_options(with([](auto& o) {
                                           o.temperature = 0.7;
                                           o.top_k = 5;
                                           o.top_p = 0.9;
                                           o.stop = {1};
                                           o.cache = false;
                                           o.seed = 3;
                                         }),
                                         false));
  EXPECT_NO_THROW(check_generate_options(with([](auto& o) {
                                           o.beam = 4;
                                           o.length_penalty = 1.0;
                                         }),
                                         true));
  const std::vector<std::tuple<train::GenerateOptions, bool, std::vector<std::string>>> refused{
      {with([](auto& o) { o.top_k = 5; }), false, {"top_k 5 has no effect with temperature 0"}},
      {with([](auto& o) { o.top_p = 0.9; }), false, {"top_p 0.9 has no effect", "--temperature"}},
      {with([](auto& o) { o.seed = 5; }), false, {"seed 5 has no effect with temperature 0"}},
      {with([](auto& o) { o.seed_given = true; }), false, {"seed 1 has no effect"}},
      {with([](auto& o) { o.length_penalty = 1.0; }), true, {"length_penalty 1", "beam > 1"}},
      {with([](auto& o) { o.beam = 2; }), false, {"beam is 2", "the encoder-decoder's"}},
      {with([](auto& o) { o.temperature = 1; }),
       true,
       {"temperature 1, top_k 0", "does not sample"}},
      {with([](auto& o) { o.top_k = 5; }), true, {"top_k 5", "does not sample", "--top-k"}},
      {with([](auto& o) { o.stop = {3}; }), true, {"1 stop id(s) given", "leave out --stop"}},
      {with([](auto& o) { o.cache = false; }), true, {"--no-cache given"}},
      {with([](auto& o) { o.seed = 5; }), true, {"seed 5 given", "leave out --seed"}},
      {with([](auto& o) { o.temperature = std::nan(""); }), false, {"must be finite"}},
      {with([](auto& o) { o.top_p = 0; }), false, {"top_p is 0", "(0, 1]"}}};
  for (const auto& c : refused)  // (nvcc: no structured bindings in a lambda)
    expect_error<ConfigError>([&] { check_generate_options(std::get<0>(c), std::get<1>(c)); },
                              std::get<2>(c));
}

// Stopping at step 3 and resuming gives the losses of the uninterrupted run:
// bitwise on Serial, within 1e-6 elsewhere (threaded reductions).
TEST(Trainer, ResumeContinuesTheSameLosses) {
  TempDir dir;
  train::TrainOptions options = quiet_options();
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
  train::TrainOptions options = quiet_options();
  auto config = tiny_run(dir.path() + "/run", 12, false);
  const auto summary = train::run_training(config, options);
  EXPECT_LT(summary.losses.back(), summary.losses.front());
  // evaluate_checkpoint reads the run's config and parameters: the same numbers.
  const auto e = train::evaluate_checkpoint(dir.path() + "/run", {}, data::Split::Valid, 1);
  EXPECT_NEAR(e.loss, summary.last_eval.loss, 1e-6);
  EXPECT_EQ(e.tokens, summary.last_eval.tokens);
  // Overrides that change parameter shapes are refused, naming the parameter.
  expect_error<ConfigError>(
      [&] {
        train::evaluate_checkpoint(dir.path() + "/run", {"model.d_ff=32"}, data::Split::Valid, 1);
      },
      {"w1", "[16, 16]", "[16, 32]", "The overrides changed model.d_ff: 16 in the run, 32 here"});
  // Keys that evaluation does not read are refused, naming the key; those it
  // reads are taken.
  expect_error<ConfigError>(
      [&] {
        train::evaluate_checkpoint(dir.path() + "/run", {"train.learning_rate=1"},
                                   data::Split::Valid, 1);
      },
      {"eval: train.learning_rate:", "would have no effect"});
  expect_error<ConfigError>(
      [&] {
        train::evaluate_checkpoint(dir.path() + "/run", {"run.name=\"x\""}, data::Split::Valid, 1);
      },
      {"eval: run.name:", "would have no effect"});
  EXPECT_GT(
      train::evaluate_checkpoint(dir.path() + "/run", {"train.batch=3"}, data::Split::Valid, 1)
          .tokens,
      0);
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

// ---------------------------------------------------------------- issue 23/24

std::string bytes_of(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// A text corpus for the byte task: 20 KB of varied English-like lines.
std::string write_corpus(const TempDir& dir) {
  std::string text;
  const char* words[] = {"the",     "reformer", "hashes", "keys", "into",   "buckets", "and",
                         "attends", "within",   "chunks", "of",   "sorted", "queries", "memory"};
  for (int i = 0; text.size() < 20000; ++i)
    text += std::string(words[(i * 7 + i / 13) % 14]) + ((i % 11) == 10 ? ".\n" : " ");
  const std::string path = dir.path() + "/corpus.txt";
  std::ofstream(path) << text;
  return path;
}

config::RunConfig bytes_run(const std::string& dir, const std::string& corpus, std::int64_t steps) {
  std::ostringstream toml;
  toml << "[run]\ndir = \"" << dir << "\"\n"
       << "[model]\nvocab = 256\nd_model = 16\nd_ff = 32\nheads = 2\nd_head = 8\nlayers = 2\n"
       << "attention = [\"lsh\", \"local\"]\npositions = \"axial\"\nmax_length = 64\n"
       << "dropout = 0.1\nff_chunk = 16\n[model.lsh]\nchunk = 16\n[model.local]\nchunk = 16\n"
       << "[data]\ntask = \"bytes\"\npath = \"" << corpus << "\"\nlength = 64\nvocab = 256\n"
       << "[train]\nsteps = " << steps << "\nbatch = 3\nlearning_rate = 0.003\n"
       << "eval_every = 0\neval_batches = 1\nlog_every = 1\ncheckpoint_every = 2\n";
  return config::parse_run_config(toml.str(), "bytes.toml");
}

// Parameters and Adam moments of a checkpoint, as raw bytes per tensor.
std::vector<std::string> checkpoint_tensors(const config::RunConfig& config,
                                            const std::string& path) {
  ParameterSet<float> params;
  models::ReformerLM<float> model(lm_model_of(config), params);
  train::Adam<float> adam(params);
  io::load_checkpoint<float>(path, params, &adam);
  std::vector<std::string> out;
  const std::vector<View1<float>> views = {params.values(), adam.first_moments(),
                                           adam.second_moments()};
  for (const auto& view : views) {
    const auto host = Kokkos::create_mirror_view_and_copy(HostSpace(), view);
    out.emplace_back(reinterpret_cast<const char*>(host.data()), host.size() * sizeof(float));
  }
  return out;
}

// Evaluations report the targets' negative log-likelihood, whatever the
// label smoothing: two runs whose weights stay at their (equal) initial values,
// one trained with smoothing, evaluate to the same loss (the smoothed
// cross-entropy of the same batches differs by about 0.1 nats). eval refuses
// to override the smoothing (it would change nothing) and model.causal, the
// positions and layer_norm_eps (the same weights would compute another
// function).
TEST(Trainer, EvaluationsReportTheLikelihoodWhateverTheSmoothing) {
  TempDir dir;
  const std::vector<std::string> frozen = {"train.learning_rate=1e-30"};
  auto smoothed = frozen;
  smoothed.push_back("model.label_smoothing=0.2");
  const auto a =
      train::run_training(tiny_run(dir.path() + "/plain", 2, true, frozen), quiet_options());
  const auto b =
      train::run_training(tiny_run(dir.path() + "/smoothed", 2, true, smoothed), quiet_options());
  // Training reports the smoothed objective, which differs from the likelihood.
  EXPECT_GT(std::abs(b.losses[0] - a.losses[0]), 0.01);
  const auto plain = train::evaluate_checkpoint(dir.path() + "/plain", {}, data::Split::Valid, 2);
  const auto with = train::evaluate_checkpoint(dir.path() + "/smoothed", {}, data::Split::Valid, 2);
  EXPECT_GT(plain.loss, 1.0);  // about ln 8 for weights at their initial values
  EXPECT_NEAR(with.loss, plain.loss, 1e-6 * plain.loss);
  EXPECT_NEAR(with.bits_per_token, plain.loss / std::log(2.0), 1e-6);
  EXPECT_NEAR(b.last_eval.loss, a.last_eval.loss, 1e-6 * a.last_eval.loss);  // the runs' own too
  expect_error<ConfigError>(
      [&] {
        train::evaluate_checkpoint(dir.path() + "/smoothed", {"model.label_smoothing=0"},
                                   data::Split::Valid, 1);
      },
      {"eval: model.label_smoothing:", "would have no effect"});
  for (const std::string key :
       {"model.causal=false", "model.positions=\"sinusoidal\"", "model.layer_norm_eps=0.001"})
    expect_error<ConfigError>(
        [&] { train::evaluate_checkpoint(dir.path() + "/plain", {key}, data::Split::Valid, 1); },
        {key.substr(0, key.find('=')), "compute another function"});
}

// Resuming from step N equals the uninterrupted run bitwise, losses and every
// parameter and moment, at every thread count the suite runs (1, 2 and 4 on
// OpenMP): the host BLAS is made sequential before the first step, so a
// process's first step runs the same code as its later ones.
TEST(Trainer, ResumeIsBitwiseOnDuplicationAndBytes) {
  TempDir dir;
  const std::string corpus = write_corpus(dir);
  train::TrainOptions options = quiet_options();
  for (const bool bytes : {false, true}) {
    SCOPED_TRACE(bytes ? "bytes corpus" : "duplication");
    auto make = [&](const std::string& name, std::int64_t steps) {
      const std::string run = dir.path() + "/" + name + (bytes ? "_bytes" : "_dup");
      return bytes ? bytes_run(run, corpus, steps) : tiny_run(run, steps, true);
    };
    options.resume = false;
    const auto whole = train::run_training(make("whole", 6), options);
    const auto first = train::run_training(make("split", 4), options);
    options.resume = true;
    const auto rest = train::run_training(make("split", 6), options);
    ASSERT_EQ(first.losses.size() + rest.losses.size(), whole.losses.size());
    for (std::size_t i = 0; i < whole.losses.size(); ++i) {
      const double resumed = i < 4 ? first.losses[i] : rest.losses[i - 4];
      EXPECT_EQ(resumed, whole.losses[i]) << "step " << i + 1;
    }
    const auto a = checkpoint_tensors(make("whole", 6), whole.checkpoint);
    const auto b = checkpoint_tensors(make("split", 6), rest.checkpoint);
    EXPECT_TRUE(a[0] == b[0]) << "parameters differ";
    EXPECT_TRUE(a[1] == b[1] && a[2] == b[2]) << "Adam moments differ";
  }
}

// A warm start (train.init_from): a new run whose parameters are another
// run's, whose step, data, optimizer and schedule start afresh. At a learning
// rate too small to move a float parameter, its last checkpoint holds the
// weights it started from; its first loss is the trained model's, far below a
// fresh model's; a checkpoint this model does not match is refused before the
// run folder is made, naming the keys that differ.
TEST(Trainer, WarmStartLoadsAnotherRunsWeightsAndStartsAfresh) {
  TempDir dir;
  const std::string a = dir.path() + "/a";
  const auto pretrained = train::run_training(tiny_run(a, 40, true), quiet_options());
  const std::vector<std::string> still = {"train.learning_rate=1e-30", "data.seed=9"};
  auto from = [&](std::string path, std::vector<std::string> extra = {}) {
    extra.insert(extra.end(), still.begin(), still.end());
    extra.push_back("train.init_from=\"" + path + "\"");
    return extra;
  };
  std::ostringstream lines;
  const auto warm =
      train::run_training(tiny_run(dir.path() + "/b", 2, true, from(a)), quiet_options(&lines));
  const auto fresh =
      train::run_training(tiny_run(dir.path() + "/c", 2, true, still), quiet_options());
  const std::string a_last = *io::latest_checkpoint(a);
  EXPECT_NE(lines.str().find("initialized from " + a_last + " (step 40 of its run)"),
            std::string::npos)
      << lines.str();
  ASSERT_EQ(warm.losses.size(), 2u);
  EXPECT_EQ(warm.first_step, 0);
  EXPECT_LT(warm.losses[0], fresh.losses[0] - 0.3) << pretrained.losses.back();
  // The weights are the pretrained run's; the moments and the step are new.
  const auto config = tiny_run(a, 40, true);
  const auto b_last = *io::latest_checkpoint(dir.path() + "/b");
  const auto trained = checkpoint_tensors(config, a_last),
             started = checkpoint_tensors(config, b_last);
  EXPECT_EQ(started[0], trained[0]);
  EXPECT_NE(checkpoint_tensors(config, *io::latest_checkpoint(dir.path() + "/c"))[0], trained[0]);
  const auto meta = io::read_checkpoint_meta(b_last);
  EXPECT_EQ(meta.step, 2);
  EXPECT_EQ(meta.optimizer_steps, 2);
  EXPECT_EQ(meta.data_position, 4u);  // 2 steps of 2 micro-batches
  // The run records the file it started from; a resume reads its own
  // checkpoint and ignores train.init_from.
  EXPECT_EQ(config::parse_run_config(meta.config, b_last).train.init_from, a_last);
  auto options = quiet_options();
  options.resume = true;
  const auto resumed = train::run_training(
      tiny_run(dir.path() + "/b", 3, true, from(dir.path() + "/nowhere", {})), options);
  EXPECT_EQ(resumed.first_step, 2);
  EXPECT_EQ(resumed.steps, 3);
  const auto resumed_meta = io::read_checkpoint_meta(resumed.checkpoint);
  EXPECT_EQ(config::parse_run_config(resumed_meta.config, resumed.checkpoint).train.init_from,
            a_last);
  // Refused, and no run folder made: another shape, another dtype, a path
  // that holds no checkpoint.
  const std::string d = dir.path() + "/d";
  expect_error<ConfigError>(
      [&] {
        train::run_training(tiny_run(d, 2, true, from(a, {"model.d_ff=32", "model.dropout=0.2"})),
                            quiet_options());
      },
      {"train.init_from:", "[16, 16]", "[16, 32]",
       "differs from the checkpoint's run in model.d_ff: 16 in the run, 32 here; a warm start"});
  expect_error<ConfigError>(
      [&] {
        train::run_training(tiny_run(d, 2, true, from(a, {"train.dtype=\"double\""})),
                            quiet_options());
      },
      {"holds float parameters but train.dtype is \"double\"", "set train.dtype = \"float\""});
  expect_error<IoError>(
      [&] { train::run_training(tiny_run(d, 2, true, from(d)), quiet_options()); },
      {"train.init_from = \"" + d + "\"", "does not exist"});
  EXPECT_FALSE(std::filesystem::exists(d));
  // check_init_from (the CLI's check before any work) resolves the folder.
  EXPECT_EQ(train::check_init_from(tiny_run(d, 2, true, from(a))), a_last);
  EXPECT_EQ(train::check_init_from(tiny_run(d, 2, true)), "");
}

// A learning rate that diverges: the run stops with an error naming the step
// and the newest (finite) checkpoint, which is still on disk and loads.
TEST(Trainer, DivergenceStopsBeforeTheOptimizerAndKeepsFiniteCheckpoints) {
  TempDir dir;
  train::TrainOptions options = quiet_options();
  auto config = tiny_run(dir.path() + "/run", 30, false);
  config.train.learning_rate = 1e30;
  config.train.clip_norm = 0;
  config.train.checkpoint_every = 1;
  config.train.keep_checkpoints = 1;
  std::string message;
  try {
    train::run_training(config, options);
  } catch (const DivergenceError& e) {
    message = e.what();
  }
  ASSERT_FALSE(message.empty()) << "the run did not stop";
  EXPECT_NE(message.find("diverged"), std::string::npos) << message;
  EXPECT_NE(message.find("the parameters were not updated"), std::string::npos) << message;
  EXPECT_NE(message.find("train.skip_nonfinite"), std::string::npos) << message;
  const auto latest = io::latest_checkpoint(config.run_dir);
  ASSERT_TRUE(latest.has_value()) << "the finite checkpoint was pruned";
  EXPECT_NE(message.find(*latest), std::string::npos) << message;
  const auto meta = io::read_checkpoint_meta(*latest);
  EXPECT_NE(message.find("step " + std::to_string(meta.step + 1) + " diverged"), std::string::npos)
      << message;
  // It loads: every value is finite.
  EXPECT_NO_THROW(train::evaluate_checkpoint(config.run_dir, {}, data::Split::Valid, 1));

  // With skipping allowed, the bad batches are skipped up to the limit, then
  // the run stops the same way.
  auto skipping = config;
  skipping.run_dir = dir.path() + "/skip";
  skipping.train.skip_nonfinite = 3;
  std::ostringstream out;
  options.out = &out;
  expect_error<DivergenceError>([&] { train::run_training(skipping, options); }, {"diverged"});
  std::size_t skips = 0;
  for (std::size_t at = 0; (at = out.str().find("skipped the batch", at)) != std::string::npos;
       ++at)
    ++skips;
  EXPECT_EQ(skips, 3u) << out.str();
  EXPECT_NE(out.str().find("(3 of train.skip_nonfinite = 3)"), std::string::npos) << out.str();
}

// Re-saves a run's newest checkpoint with `change` applied to its metadata (a
// consistent checksum: what a mixed-up file would look like), as `name_step`.
void resave(const config::RunConfig& config, std::int64_t name_step,
            const std::function<void(io::CheckpointMeta&, train::Adam<float>&)>& change) {
  const auto latest = *io::latest_checkpoint(config.run_dir);
  ParameterSet<float> params;
  models::ReformerLM<float> model(lm_model_of(config), params);
  train::Adam<float> adam(params);
  auto meta = io::load_checkpoint<float>(latest, params, &adam);
  change(meta, adam);
  std::filesystem::remove(latest);
  io::save_checkpoint<float>(io::checkpoint_file(config.run_dir, name_step), params, &adam, meta);
}

// The metadata of the checkpoint a run resumes from is checked against itself
// and the run; a mismatch names the file and what is wrong, and leaves every
// file of the run as it was.
TEST(Trainer, ResumeChecksTheCheckpointsMetadata) {
  TempDir dir;
  train::TrainOptions options = quiet_options();
  const auto config = tiny_run(dir.path() + "/run", 4, false);  // accumulate 2
  train::run_training(config, options);
  const std::string good = *io::latest_checkpoint(config.run_dir);
  const std::string good_bytes = bytes_of(good);
  auto more = config;
  more.train.steps = 8;
  options.resume = true;
  struct Case {
    std::string what;
    std::int64_t name_step;
    std::function<void(io::CheckpointMeta&, train::Adam<float>&)> change;
    std::vector<std::string> parts;
  };
  const std::vector<Case> cases = {
      {"renamed",
       6,
       [](io::CheckpointMeta&, train::Adam<float>&) {},
       {"step_00000006.h5", "holds step 4 but its name says step 6"}},
      {"optimizer steps",
       4,
       [](io::CheckpointMeta&, train::Adam<float>& a) { a.set_steps(3); },
       {"is at step 4 but its optimizer took 3 steps"}},
      {"data position",
       4,
       [](io::CheckpointMeta& m, train::Adam<float>&) { m.data_position = 7; },
       {"has data position 7", "4 steps and 0 skipped batches", "train.accumulate = 2", "make 8"}},
      {"beyond the run's steps",
       6,
       [](io::CheckpointMeta& m, train::Adam<float>& a) {
         m.step = 6;
         m.data_position = 12;
         a.set_steps(6);
       },
       {"is at step 6 beyond the train.steps = 4 of the run that wrote it"}},
      {"seed",
       4,
       [](io::CheckpointMeta& m, train::Adam<float>&) { m.seed = 99; },
       {"has seed 99", "train.seed = 1"}},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.what);
    resave(config, c.name_step, c.change);
    const std::string path = io::checkpoint_file(config.run_dir, c.name_step);
    const std::string before = bytes_of(path);
    const std::string metrics = bytes_of(config.run_dir + "/metrics.jsonl");
    const std::string toml = bytes_of(config.run_dir + "/config.toml");
    auto parts = c.parts;
    parts.push_back(path);
    expect_error<IoError>([&] { train::run_training(more, options); }, parts);
    EXPECT_EQ(bytes_of(path), before);
    EXPECT_EQ(bytes_of(config.run_dir + "/metrics.jsonl"), metrics);
    EXPECT_EQ(bytes_of(config.run_dir + "/config.toml"), toml);
    std::filesystem::remove(path);
    std::ofstream(good, std::ios::binary) << good_bytes;
  }
  // A skipped batch moves the data on without a step: consistent, and kept.
  resave(config, 4, [](io::CheckpointMeta& m, train::Adam<float>&) {
    m.skipped_batches = 1;
    m.data_position += 2;
  });
  const auto summary = train::run_training(more, options);
  EXPECT_EQ(summary.steps, 8);
  const auto meta = io::read_checkpoint_meta(summary.checkpoint);
  EXPECT_EQ(meta.skipped_batches, 1);
  EXPECT_EQ(meta.data_position, 18u);  // (8 steps + 1 skipped) x 2 micro-batches
  // A checkpoint beyond the train.steps asked for now is named.
  expect_error<ConfigError>([&] { train::run_training(config, options); },
                            {"is at step 8 but train.steps is 4", "set train.steps above 8"});
}

// train, eval and generate compare the predicted need with the free memory
// before they allocate anything.
TEST(Trainer, MemoryIsCheckedBeforeAnyAllocation) {
  TempDir dir;
  train::TrainOptions options = quiet_options();
  auto config = tiny_run(dir.path() + "/huge", 2, false);
  config.model.attention = {attention::AttentionKind::Full};
  config.model.positions = models::PositionKind::Sinusoidal;
  config.model.max_length = config.data.length = Index(1) << 21;
  auto& tracker = MemoryTracker::instance();
  tracker.install();
  tracker.reset_peaks();
  const auto before = tracker.space(MemSpace::name());
  expect_error<MemoryError>([&] { train::run_training(config, options); },
                            {"train: the run needs about", "GiB", "at batch 3 and length 2097152",
                             "are free", "train.batch", "data.length", "model.attention"});
  const auto after = tracker.space(MemSpace::name());
  EXPECT_EQ(after.peak_bytes, before.peak_bytes) << "something was allocated";
  EXPECT_FALSE(std::filesystem::exists(config.run_dir)) << "the run folder was created";
  // eval and generate of a small run asked for the same length.
  auto small = tiny_run(dir.path() + "/small", 2, false);
  small.model.positions = models::PositionKind::Sinusoidal;
  train::run_training(small, options);
  const std::vector<std::string> huge = {"model.attention=[\"full\"]", "data.length=2097152",
                                         "model.max_length=2097152"};
  expect_error<MemoryError>(
      [&] { train::evaluate_checkpoint(small.run_dir, huge, data::Split::Valid, 1); },
      {"eval: the run needs about", "forward pass's peak"});
  expect_error<MemoryError>([&] { train::generate(small.run_dir, huge, {}); },
                            {"generate: the run needs about", "at batch 1"});
}

// The largest phase peak of each logged training step in a run's
// metrics.jsonl, in MiB, in step order.
std::vector<double> step_peaks(const std::string& metrics_path) {
  std::ifstream metrics(metrics_path);
  std::vector<double> peaks;
  std::string line;
  while (std::getline(metrics, line)) {
    if (line.find("\"train\"") == std::string::npos) continue;
    double peak = 0;
    for (auto at = line.find("\"peak_"); at != std::string::npos; at = line.find("\"peak_", at + 1))
      peak = std::max(peak, std::stod(line.substr(line.find(": ", at) + 2)));
    peaks.push_back(peak);
  }
  return peaks;
}

// The trainer reserves the step's predicted workspace before the first step
// and shrinks it to the high-water mark after it (core/workspace.hpp), so the
// first step peaks where the later ones do. Without the reserve, reversible
// full attention's first step held its forward's arena beside its backward's
// overflow: in float32 here 20% above the later steps.
TEST(Trainer, FirstStepPeaksNoHigherThanTheLaterOnes) {
  TempDir dir;
  for (const char* precision : {"float32", "bf16"}) {
    SCOPED_TRACE(precision);
    const auto config = tiny_run(
        dir.path() + "/" + precision, 3, true,
        {"model.attention=[\"full\"]", "model.positions=\"sinusoidal\"", "model.max_length=256",
         "data.length=256", "model.d_model=32", "model.d_ff=64", "train.batch=1", "model.d_head=16",
         "model.dropout=0", "model.attention_dropout=0", "train.accumulate=1", "train.log_every=1",
         "train.eval_every=0", std::string("train.precision=\"") + precision + "\""});
    const auto summary = train::run_training(config, quiet_options());
    const auto peaks = step_peaks(config.run_dir + "/metrics.jsonl");
    ASSERT_EQ(peaks.size(), 3u);
    EXPECT_GT(peaks[1], 0.0);
    // The reserve covered the step and is at most half above it (the
    // prediction is over by a few percent here in float32, more in bf16);
    // the first step is past the later ones by no more than that excess.
    const double used = double(summary.workspace_used),
                 reserved = double(summary.workspace_reserved);
    EXPECT_GT(used, 0.0);
    EXPECT_GE(reserved, used);
    EXPECT_LE(reserved, used * 1.5);
    const double excess_mib = std::max(0.0, reserved - used) / double(1 << 20);
    EXPECT_LE(peaks[0], peaks[1] + excess_mib + peaks[1] * 0.01)
        << "step 1 " << peaks[0] << " MiB, step 2 " << peaks[1] << ", excess " << excess_mib;
    EXPECT_NEAR(peaks[2], peaks[1], peaks[1] * 0.01);
  }
}

// One writer per run folder; stale temporary files are removed at the start.
TEST(Trainer, LockedFolderAndStaleTemporaries) {
  TempDir dir;
  std::ostringstream out;
  train::TrainOptions options;
  options.out = &out;
  options.handle_signals = false;
  const auto config = tiny_run(dir.path() + "/run", 2, false);
  {
    std::filesystem::create_directories(config.run_dir);
    const io::RunLock other(config.run_dir, "train");
    expect_error<IoError>([&] { train::run_training(config, options); },
                          {"is in use by process " + std::to_string(::getpid())});
    EXPECT_FALSE(io::latest_checkpoint(config.run_dir).has_value());
  }
  train::run_training(config, options);
  const std::string stale[] = {config.run_dir + "/metrics.jsonl.tmp.999999999",
                               config.run_dir + "/checkpoints/step_00000003.h5.tmp.999999998"};
  for (const auto& path : stale) std::ofstream(path) << "partial";
  auto more = config;
  more.train.steps = 3;
  options.resume = true;
  train::run_training(more, options);
  for (const auto& path : stale) {
    EXPECT_FALSE(std::filesystem::exists(path)) << path;
    EXPECT_NE(out.str().find("removed " + path), std::string::npos) << out.str();
  }
}

// A new run into a folder whose earlier run saved no checkpoint (stopped
// before its first one) keeps that run's config and metrics beside its own,
// numbered, never written over; a folder with checkpoints is still refused.
TEST(Trainer, NewRunKeepsTheMetricsOfAnEarlierRunWithoutCheckpoints) {
  TempDir dir;
  std::ostringstream out;
  train::TrainOptions options = quiet_options(&out);
  const auto config = tiny_run(dir.path() + "/run", 2, false);
  const std::string metrics = config.run_dir + "/metrics." + config.train.metrics_format;
  const auto read = [](const std::string& path) {
    std::ifstream in(path);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  train::run_training(config, options);
  expect_error<ConfigError>([&] { train::run_training(config, options); },
                            {"already holds checkpoints"});
  std::filesystem::remove_all(config.run_dir + "/checkpoints");
  std::ofstream(metrics + ".2") << "a file of the user's";
  for (const int n : {1, 3}) {  // .2 is taken by metrics, so the second keeps go to .3
    const std::string earlier_metrics = read(metrics),
                      earlier_config = read(config.run_dir + "/config.toml");
    ASSERT_GE(std::count(earlier_metrics.begin(), earlier_metrics.end(), '\n'), 2)
        << earlier_metrics;  // the rows of two steps
    out.str("");
    train::run_training(config, options);
    const std::string kept = "." + std::to_string(n);
    EXPECT_EQ(read(metrics + kept), earlier_metrics) << n;
    EXPECT_EQ(read(config.run_dir + "/config.toml" + kept), earlier_config) << n;
    EXPECT_NE(out.str().find("kept the earlier run's config.toml as config.toml" + kept),
              std::string::npos)
        << out.str();
    EXPECT_TRUE(io::latest_checkpoint(config.run_dir).has_value());
    std::filesystem::remove_all(config.run_dir + "/checkpoints");
  }
  EXPECT_EQ(read(metrics + ".2"), "a file of the user's");
  EXPECT_FALSE(std::filesystem::exists(config.run_dir + "/config.toml.2"));
  // A resumed run appends to its own metrics and keeps nothing aside.
  train::run_training(config, options);
  EXPECT_TRUE(std::filesystem::exists(metrics + ".4"));
  auto more = config;
  more.train.steps = 3;
  options.resume = true;
  out.str("");
  train::run_training(more, options);
  EXPECT_EQ(out.str().find("kept the earlier run's"), std::string::npos) << out.str();
  EXPECT_FALSE(std::filesystem::exists(metrics + ".5"));
}

// The encoder-decoder through the same trainer, checkpoints and evaluation:
// it trains on the reverse task, resumes to the same losses bitwise, and
// reports the exact-match rate of greedy decoding (test_learning.cpp checks
// that it learns the copy task).
TEST(Trainer, EncoderDecoderTrainsResumesAndEvaluates) {
  TempDir dir;
  auto options = quiet_options();
  const auto whole = train::run_training(seq2seq_run(dir.path() + "/a", 6), options);
  ASSERT_EQ(whole.losses.size(), 6u);
  EXPECT_LT(whole.losses.back(), whole.losses.front());
  EXPECT_GE(whole.last_eval.exact_match, 0.0);
  EXPECT_LE(whole.last_eval.exact_match, 1.0);
  const auto first = train::run_training(seq2seq_run(dir.path() + "/b", 4), options);
  options.resume = true;
  const auto rest = train::run_training(seq2seq_run(dir.path() + "/b", 6), options);
  ASSERT_EQ(rest.losses.size(), 2u);
  for (std::size_t i = 0; i < 6; ++i)
    EXPECT_EQ(i < 4 ? first.losses[i] : rest.losses[i - 4], whole.losses[i]) << "step " << i + 1;
  const auto e = train::evaluate_checkpoint(dir.path() + "/b", {}, data::Split::Valid, 2);
  EXPECT_EQ(e.loss, whole.last_eval.loss);
  EXPECT_EQ(e.exact_match, whole.last_eval.exact_match);
  // Greedy and beam decoding of a source given as text.
  train::GenerateOptions generate;
  generate.source_text = "3 4 5";
  const auto g = train::generate(dir.path() + "/b", {}, generate);
  EXPECT_TRUE(g.seq2seq);
  EXPECT_EQ(g.prompt, (std::vector<int>{3, 4, 5}));
  EXPECT_LE(g.generated.size(), 8u);
  generate.beam = 3;
  const auto beam = train::generate(dir.path() + "/b", {}, generate);
  EXPECT_EQ(beam.prompt_text, "3 4 5");
  // A vocabulary that does not match the checkpoint is named.
  expect_error<Error>(
      [&] {
        train::evaluate_checkpoint(dir.path() + "/b", {"data.vocab=9"}, data::Split::Valid, 1);
      },
      {"src_embed.table", "[7, 16]", "[9, 16]"});
  generate.source_text = "3 4 5 6 3 4 5 6";
  expect_error<ConfigError>([&] { train::generate(dir.path() + "/b", {}, generate); },
                            {"the source has 8 symbols", "data.length - 1 = 7"});
}

// Transformer-XL on a text (issue 22): streams of segments, memories carried
// from batch to batch and stored in checkpoints (xl_run, support/run_configs.hpp).

// Every parameter and Adam moment of a Transformer-XL checkpoint, as bytes.
std::vector<std::string> xl_checkpoint_tensors(const config::RunConfig& config,
                                               const std::string& path) {
  ParameterSet<float> params;
  // (A GPU's default chunks are "auto": resolved as a run resolves them.)
  models::TransformerXL<float> model(
      config::xl_config(train::resolve_auto_chunks(config, config.train.batch, true)), params);
  train::Adam<float> adam(params);
  io::load_checkpoint<float>(path, params, &adam);
  std::vector<std::string> out;
  // A named vector, not a braced list: nvcc 11.8 cannot range over one.
  const std::vector<View1<float>> views = {params.values(), adam.first_moments(),
                                           adam.second_moments()};
  for (const auto& view : views) {
    const auto host = Kokkos::create_mirror_view_and_copy(HostSpace(), view);
    out.emplace_back(reinterpret_cast<const char*>(host.data()), host.size() * sizeof(float));
  }
  return out;
}

// Resuming continues the uninterrupted run bitwise: the checkpoint holds each
// micro-batch group's memories (they were computed with earlier parameters and
// cannot be rebuilt), so the first resumed segment reads the memory the
// uninterrupted run read. Accumulation over two groups of streams, dropout
// everywhere, clamp_len, evaluations in between (their own memories).
TEST(Trainer, TransformerXLResumesBitwiseWithStoredMemories) {
  TempDir dir;
  const std::string corpus = write_corpus(dir);
  auto options = quiet_options();
  const auto whole = train::run_training(xl_run(dir.path() + "/whole", corpus, 7), options);
  ASSERT_EQ(whole.losses.size(), 7u);
  EXPECT_LT(whole.losses.back(), whole.losses.front());
  const auto first = train::run_training(xl_run(dir.path() + "/split", corpus, 4), options);
  // The memories of both groups, every layer, full length after 4 x 8 tokens.
  const auto state = io::read_checkpoint_state(first.checkpoint);
  ASSERT_EQ(state.size(), 4u);
  EXPECT_EQ(state[0].name, "memory.0.0");
  EXPECT_EQ(state[3].name, "memory.1.1");
  EXPECT_EQ(state[0].shape, (std::vector<Index>{2, 12, 16}));
  options.resume = true;
  const auto rest = train::run_training(xl_run(dir.path() + "/split", corpus, 7), options);
  ASSERT_EQ(rest.losses.size(), 3u);
  for (std::size_t i = 0; i < 7; ++i)
    EXPECT_EQ(i < 4 ? first.losses[i] : rest.losses[i - 4], whole.losses[i]) << "step " << i + 1;
  EXPECT_TRUE(xl_checkpoint_tensors(xl_run(dir.path() + "/whole", corpus, 7), whole.checkpoint) ==
              xl_checkpoint_tensors(xl_run(dir.path() + "/split", corpus, 7), rest.checkpoint));
  EXPECT_EQ(rest.last_eval.loss, whole.last_eval.loss);
  // A checkpoint whose memories do not fit this run is named.
  auto wider = xl_run(dir.path() + "/split", corpus, 8, {"model.xl.mem_len=6"});
  expect_error<Error>([&] { train::run_training(wider, options); }, {"model.xl.mem_len"});
}

// Evaluation: with one layer, a memory holds the embeddings of the tokens
// before the segment, so evaluating with a memory of M equals recomputing the
// model on the M tokens before each segment (eval.recompute), segment by
// segment to rounding. The memory-free ablation (eval.mem_len = 0) and
// another segment length (eval.tgt_len) are overrides; batches = 0 evaluates
// the whole split.
TEST(Trainer, TransformerXLEvaluationWithMemoryEqualsRecomputeForOneLayer) {
  TempDir dir;
  const std::string corpus = write_corpus(dir);
  const std::string run = dir.path() + "/one";
  train::run_training(
      xl_run(run, corpus, 3,
             {"model.layers=1", "train.dtype=\"double\"", "model.xl.same_length=true"}),
      quiet_options());
  train::EvalResult memory;
  for (const char* same : {"eval.same_length=on", "eval.same_length=off"}) {
    SCOPED_TRACE(same);
    memory = train::evaluate_checkpoint(run, {"eval.mem_len=20", same}, data::Split::Valid, 6);
    const auto recompute = train::evaluate_checkpoint(
        run, {"eval.mem_len=20", "eval.recompute=true", same}, data::Split::Valid, 6);
    EXPECT_EQ(memory.tokens, 6 * 2 * 8);
    EXPECT_EQ(recompute.tokens, memory.tokens);
    EXPECT_NEAR(memory.loss, recompute.loss, 1e-12 * memory.loss);
  }
  const auto none = train::evaluate_checkpoint(run, {"eval.mem_len=0"}, data::Split::Valid, 6);
  EXPECT_GT(std::abs(none.loss - memory.loss), 1e-6);
  const auto short_segments =
      train::evaluate_checkpoint(run, {"eval.tgt_len=4", "eval.mem_len=20"}, data::Split::Valid, 6);
  EXPECT_EQ(short_segments.tokens, 6 * 2 * 4);
  const auto whole_split = train::evaluate_checkpoint(run, {}, data::Split::Valid, 0);
  // 1000 validation bytes in 2 streams of 500: (500 - 1) / 8 = 62 segments.
  EXPECT_EQ(whole_split.tokens, 62 * 2 * 8);
  // Two layers: the memory of layer 2 holds what layer 1 computed with its own
  // (shorter) context, so the two evaluations differ.
  const std::string two = dir.path() + "/two";
  train::run_training(xl_run(two, corpus, 3, {"train.dtype=\"double\""}), quiet_options());
  const auto m2 = train::evaluate_checkpoint(two, {"eval.mem_len=20"}, data::Split::Valid, 6);
  const auto r2 = train::evaluate_checkpoint(two, {"eval.mem_len=20", "eval.recompute=true"},
                                             data::Split::Valid, 6);
  EXPECT_GT(std::abs(m2.loss - r2.loss), 1e-9);
  // Generation runs (tests/train/test_transformer_xl_generate.cpp); a
  // random-window run has no whole split.
  EXPECT_FALSE(train::generate(two, {}, {}).generated.empty());
  const std::string lm = dir.path() + "/lm";
  train::run_training(bytes_run(lm, corpus, 1), quiet_options());
  expect_error<ConfigError>([&] { train::evaluate_checkpoint(lm, {}, data::Split::Valid, 0); },
                            {"drawn at random", "give a number of batches"});
}

// Training's evaluation covers the valid split at most once: more batches
// than a Transformer-XL stream holds would score its first segments again.
TEST(Trainer, TransformerXLEvaluatesItsValidSplitAtMostOnce) {
  TempDir dir;
  const std::string corpus = write_corpus(dir);
  const std::string run = dir.path() + "/x";
  std::ostringstream log;
  const auto summary = train::run_training(
      xl_run(run, corpus, 3,
             {"train.eval_batches=100000", "model.dropout=0", "model.attention_dropout=0"}),
      quiet_options(&log));
  EXPECT_NE(log.str().find("evaluating the whole valid split"), std::string::npos) << log.str();
  const auto whole = train::evaluate_checkpoint(run, {}, data::Split::Valid, 0);
  EXPECT_GT(whole.tokens, 0);
  EXPECT_EQ(summary.last_eval.tokens, whole.tokens);
  EXPECT_NEAR(summary.last_eval.loss, whole.loss, 1e-5 * whole.loss);
  // eval without --batches: 8 batches (2 streams of 8 tokens), at most the split.
  const auto by_default =
      train::evaluate_checkpoint(run, {}, data::Split::Valid, train::kDefaultEvalBatches);
  EXPECT_EQ(by_default.tokens, std::min<std::int64_t>(8 * 16, whole.tokens));
}

// Transformer-XL's config: the task must be a text, [eval] belongs to it.
TEST(Trainer, TransformerXLConfigErrorsNameTheKey) {
  TempDir dir;
  const std::string corpus = write_corpus(dir);
  const std::string run = dir.path() + "/x";
  expect_error<ConfigError>(
      [&] {
        xl_run(run, corpus, 1, {"data.task=copy", "data.vocab=10"});
      },
      {"transformer_xl", "data.task is copy", "\"bytes\""});
  expect_error<ConfigError>([&] { xl_run(run, corpus, 1, {"model.xl.mem_len=-1"}); },
                            {"model.xl.mem_len is -1", ">= 0"});
  expect_error<ConfigError>([&] { xl_run(run, corpus, 1, {"eval.mem_len=-2"}); },
                            {"eval.mem_len is -2"});
  expect_error<ConfigError>([&] { xl_run(run, corpus, 1, {"eval.same_length=yes"}); },
                            {"eval.same_length", "model"});
  expect_error<ConfigError>([&] { xl_run(run, corpus, 1, {"model.vocab=100"}); },
                            {"data.vocab is 256", "model.vocab is 100"});
  auto lm = bytes_run(run, corpus, 1);
  lm.eval.mem_len = 3;
  expect_error<ConfigError>([&] { lm.validate(); },
                            {"model.type is reformer", "[eval]", "transformer_xl"});
}

}  // namespace
}  // namespace reformer
