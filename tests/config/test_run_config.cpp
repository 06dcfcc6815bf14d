#include "reformer/config/run_config.hpp"
#include "reformer/core/error.hpp"
#include "support/checks.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <unistd.h>

namespace reformer {
namespace {

using attention::AttentionKind;
using config::first_difference;
using config::parse_run_config;
using config::RunConfig;
using config::to_toml;
using testing::expect_error;

RunConfig parse(const std::string& text, const std::vector<std::string>& overrides = {}) {
  return parse_run_config(text, "exp.toml", overrides);
}

// Every field away from its default (and valid together).
RunConfig everything_changed() {
  RunConfig c;
  c.run_dir = "runs/a \"quoted\" dir\\with\ttabs";
  c.name = "héllo\nworld";
  c.model.vocab = 300;
  c.model.d_model = 96;
  c.model.d_ff = 200;
  c.model.heads = 3;
  c.model.d_head = 32;
  c.model.layers = 5;
  c.model.attention = {AttentionKind::Local, AttentionKind::Lsh, AttentionKind::Full};
  c.model.causal = false;
  c.model.reversible = false;
  c.model.positions = models::PositionKind::Axial;
  c.model.max_length = 1024;
  c.model.axial_shape = {16, 64};
  c.model.axial_dims = {32, 64};
  c.model.ff_chunk = 16;
  c.model.ff_activation = ops::Activation::GELU;
  c.model.dropout = 0.1;
  c.model.attention_dropout = 1.0 / 3.0;
  c.model.lsh_attention_dropout = 0.05;
  c.model.local_attention_dropout = 0.0;
  c.model.layer_norm_eps = 1e-12;
  c.model.tie_embeddings = true;
  c.model.loss_chunk = 77;
  c.model.label_smoothing = 1e-7;
  c.model.lsh.chunk = 32;
  c.model.lsh.n_hashes = 3;
  c.model.lsh.n_buckets = {4, 8};
  c.model.lsh.n_before = 2;
  c.model.lsh.duplicate_correction = true;
  c.model.local.chunk = 16;
  c.model.local.n_before = 3;
  c.data.task = data::TaskKind::Copy;
  c.data.length = 512;
  c.data.vocab = 200;
  c.data.seed = 9007199254740993ull;  // not exact as a double
  c.train.steps = 12345;
  c.train.batch = 3;
  c.train.accumulate = 4;
  c.train.optimizer = "adamw";
  c.train.adam.decoupled_weight_decay = true;
  c.train.adam.beta1 = 0.8;
  c.train.adam.beta2 = 0.98;
  c.train.adam.eps = 1e-9;
  c.train.adam.weight_decay = 0.01;
  c.train.learning_rate = 0.03125;
  c.train.schedule = config::ScheduleKind::warmup_rsqrt;
  c.train.warmup_steps = 2000;
  c.train.clip_norm = 0.5;
  c.train.eval_every = 7;
  c.train.eval_batches = 2;
  c.train.log_every = 0;
  c.train.checkpoint_every = 500;
  c.train.keep_checkpoints = 1;
  c.train.metrics_format = "jsonl";
  c.train.target_accuracy = 0.99;
  c.train.seed = 42;
  c.train.dtype = "double";
  return c;
}

TEST(RunConfig, DefaultsWhenKeysAreMissing) {
  const RunConfig c = parse_run_config("", "experiments/my_run.toml", {});
  const RunConfig defaults{};
  EXPECT_EQ(c.run_dir, "runs/my_run");
  EXPECT_EQ(c.name, "my_run");
  EXPECT_EQ(c.model.d_model, defaults.model.d_model);
  EXPECT_EQ(c.model.attention, defaults.model.attention);
  EXPECT_EQ(c.data.length, defaults.data.length);
  EXPECT_EQ(c.train.steps, defaults.train.steps);
  EXPECT_EQ(c.train.adam.beta2, defaults.train.adam.beta2);
  EXPECT_FALSE(c.train.adam.decoupled_weight_decay);
}

TEST(RunConfig, ReadsEveryKind) {
  const RunConfig c = parse(R"(
[run]
name = "dup"
[model]
d_model = 128
attention = ["local", "lsh"]
positions = "learned"
max_length = 512
ff_activation = "gelu"
dropout = 0          # an integer is a valid float
reversible = false
[model.lsh]
chunk = 32
n_buckets = [16]
[data]
length = 256
[train]
optimizer = "adamw"
learning_rate = 2e-3
schedule = "noam"
warmup_steps = 100
[train.adam]
beta2 = 0.98
)");
  EXPECT_EQ(c.name, "dup");
  EXPECT_EQ(c.run_dir, "runs/exp");
  EXPECT_EQ(c.model.d_model, 128);
  EXPECT_EQ(c.model.attention,
            (std::vector<AttentionKind>{AttentionKind::Local, AttentionKind::Lsh}));
  EXPECT_EQ(c.model.positions, models::PositionKind::Learned);
  EXPECT_EQ(c.model.ff_activation, ops::Activation::GELU);
  EXPECT_EQ(c.model.dropout, 0.0);
  EXPECT_FALSE(c.model.reversible);
  EXPECT_EQ(c.model.lsh.chunk, 32);
  EXPECT_EQ(c.model.lsh.n_buckets, std::vector<Index>{16});
  EXPECT_EQ(c.train.optimizer, "adamw");
  EXPECT_TRUE(c.train.adam.decoupled_weight_decay);  // follows the optimizer
  EXPECT_EQ(c.train.learning_rate, 2e-3);
  EXPECT_EQ(c.train.schedule, config::ScheduleKind::noam);
  EXPECT_EQ(c.train.adam.beta2, 0.98);
}

TEST(RunConfig, RoundTripsThroughToml) {
  // The defaults and everything changed. (Built without a braced list of
  // RunConfig: nvcc 11.8's front end crashes on one.)
  std::vector<RunConfig> originals(2);
  originals[1] = everything_changed();
  for (const RunConfig& original : originals) {
    RunConfig c = original;
    if (c.run_dir.empty()) c.run_dir = "runs/x";
    const std::string text = to_toml(c);
    const RunConfig back = parse_run_config(text, "resolved.toml", {});
    EXPECT_EQ(first_difference(c, back), "") << text;
    EXPECT_EQ(to_toml(back), text);
  }
  const RunConfig c = everything_changed();
  const RunConfig back = parse(to_toml(c));
  // Field by field, so that a field missing from the key table cannot hide.
  EXPECT_EQ(back.run_dir, c.run_dir);
  EXPECT_EQ(back.name, c.name);
  EXPECT_EQ(back.model.vocab, c.model.vocab);
  EXPECT_EQ(back.model.d_model, c.model.d_model);
  EXPECT_EQ(back.model.d_ff, c.model.d_ff);
  EXPECT_EQ(back.model.heads, c.model.heads);
  EXPECT_EQ(back.model.d_head, c.model.d_head);
  EXPECT_EQ(back.model.layers, c.model.layers);
  EXPECT_EQ(back.model.attention, c.model.attention);
  EXPECT_EQ(back.model.causal, c.model.causal);
  EXPECT_EQ(back.model.reversible, c.model.reversible);
  EXPECT_EQ(back.model.qk, c.model.qk);
  EXPECT_EQ(back.model.positions, c.model.positions);
  EXPECT_EQ(back.model.max_length, c.model.max_length);
  EXPECT_EQ(back.model.axial_shape, c.model.axial_shape);
  EXPECT_EQ(back.model.axial_dims, c.model.axial_dims);
  EXPECT_EQ(back.model.ff_chunk, c.model.ff_chunk);
  EXPECT_EQ(back.model.ff_activation, c.model.ff_activation);
  EXPECT_EQ(back.model.dropout, c.model.dropout);
  EXPECT_EQ(back.model.attention_dropout, c.model.attention_dropout);
  EXPECT_EQ(back.model.tie_embeddings, c.model.tie_embeddings);
  EXPECT_EQ(back.model.loss_chunk, c.model.loss_chunk);
  EXPECT_EQ(back.model.label_smoothing, c.model.label_smoothing);
  EXPECT_EQ(back.model.lsh.chunk, c.model.lsh.chunk);
  EXPECT_EQ(back.model.lsh.n_hashes, c.model.lsh.n_hashes);
  EXPECT_EQ(back.model.lsh.n_buckets, c.model.lsh.n_buckets);
  EXPECT_EQ(back.model.lsh.n_before, c.model.lsh.n_before);
  EXPECT_EQ(back.model.lsh.duplicate_correction, c.model.lsh.duplicate_correction);
  EXPECT_EQ(back.model.local.chunk, c.model.local.chunk);
  EXPECT_EQ(back.model.local.n_before, c.model.local.n_before);
  EXPECT_EQ(back.data.task, c.data.task);
  EXPECT_EQ(back.data.length, c.data.length);
  EXPECT_EQ(back.data.vocab, c.data.vocab);
  EXPECT_EQ(back.data.seed, c.data.seed);
  EXPECT_EQ(back.data.path, c.data.path);
  EXPECT_EQ(back.train.steps, c.train.steps);
  EXPECT_EQ(back.train.batch, c.train.batch);
  EXPECT_EQ(back.train.accumulate, c.train.accumulate);
  EXPECT_EQ(back.train.optimizer, c.train.optimizer);
  EXPECT_EQ(back.train.adam.beta1, c.train.adam.beta1);
  EXPECT_EQ(back.train.adam.beta2, c.train.adam.beta2);
  EXPECT_EQ(back.train.adam.eps, c.train.adam.eps);
  EXPECT_EQ(back.train.adam.weight_decay, c.train.adam.weight_decay);
  EXPECT_EQ(back.train.adam.decoupled_weight_decay, c.train.adam.decoupled_weight_decay);
  EXPECT_EQ(back.train.learning_rate, c.train.learning_rate);
  EXPECT_EQ(back.train.schedule, c.train.schedule);
  EXPECT_EQ(back.train.warmup_steps, c.train.warmup_steps);
  EXPECT_EQ(back.train.clip_norm, c.train.clip_norm);
  EXPECT_EQ(back.train.eval_every, c.train.eval_every);
  EXPECT_EQ(back.train.eval_batches, c.train.eval_batches);
  EXPECT_EQ(back.train.log_every, c.train.log_every);
  EXPECT_EQ(back.train.checkpoint_every, c.train.checkpoint_every);
  EXPECT_EQ(back.train.keep_checkpoints, c.train.keep_checkpoints);
  EXPECT_EQ(back.train.metrics_format, c.train.metrics_format);
  EXPECT_EQ(back.train.target_accuracy, c.train.target_accuracy);
  EXPECT_EQ(back.train.seed, c.train.seed);
  EXPECT_EQ(back.train.dtype, c.train.dtype);
}

TEST(RunConfig, FloatsRoundTripExactly) {
  for (const double value : {0.0, 0.1, 1.0 / 3.0, 100.0, 2e-3, 1e-5, 9.999e-6, 1e15, 1e-300, 5e-324,
                             1.7976931348623157e308, 123456789.123456789, 6.02214076e23}) {
    RunConfig c;
    c.run_dir = "runs/x";
    c.train.clip_norm = value;
    const std::string text = to_toml(c);
    const RunConfig back = parse(text);
    EXPECT_EQ(back.train.clip_norm, value) << text.substr(text.find("clip_norm"), 40);
  }
  RunConfig c;
  c.run_dir = "runs/x";
  c.train.clip_norm = 100;
  EXPECT_NE(to_toml(c).find("clip_norm = 100.0\n"), std::string::npos);
  c.train.clip_norm = 6.02214076e23;
  EXPECT_NE(to_toml(c).find("clip_norm = 6.02214076e23\n"), std::string::npos);
}

TEST(RunConfig, WritesEveryKeyAndNotesAutomaticValues) {
  RunConfig c;
  c.run_dir = "runs/x";
  c.model.max_length = 4096;
  const std::string text = to_toml(c);
  for (const std::string& key : config::config_keys()) {
    const auto dot = key.rfind('.');
    EXPECT_NE(text.find("\n" + key.substr(dot + 1) + " = "), std::string::npos) << key;
    EXPECT_NE(text.find("[" + key.substr(0, dot) + "]"), std::string::npos) << key;
  }
  EXPECT_NE(text.find("axial_shape = []  # automatic: [64, 64]"), std::string::npos) << text;
  EXPECT_NE(text.find("axial_dims = []  # automatic: [128, 128]"), std::string::npos) << text;
  EXPECT_NE(text.find("n_buckets = []  # automatic: [8] at data.length 256"), std::string::npos)
      << text;
  EXPECT_NE(text.find("attention = [\"lsh\"]"), std::string::npos) << text;
  EXPECT_NE(text.find("learning_rate = 0.001\n"), std::string::npos) << text;
  EXPECT_NE(text.find("eps = 1e-8\n"), std::string::npos) << text;
  EXPECT_NE(text.find("weight_decay = 0.0\n"), std::string::npos) << text;
}

TEST(RunConfig, OverridesApplyInOrder) {
  const std::string file = "[train]\nsteps = 5\n[model.lsh]\nchunk = 32\nn_hashes = 2\n";
  const RunConfig c =
      parse(file, {"train.steps=100", "model.attention=[\"lsh\", \"local\"]",
                   "model.lsh.n_hashes = 4", "data.task=bytes", "data.vocab=256",
                   "data.path=corpus/text.txt", "model.positions=learned", "train.learning_rate=1",
                   "model.local={chunk = 32}", "train.steps=200"});
  EXPECT_EQ(c.train.steps, 200);  // the last one wins
  EXPECT_EQ(c.model.attention,
            (std::vector<AttentionKind>{AttentionKind::Lsh, AttentionKind::Local}));
  EXPECT_EQ(c.model.lsh.n_hashes, 4);
  EXPECT_EQ(c.model.lsh.chunk, 32);           // an override of one key keeps the others
  EXPECT_EQ(c.data.path, "corpus/text.txt");  // a bare word is a string
  EXPECT_EQ(c.model.positions, models::PositionKind::Learned);
  EXPECT_EQ(c.train.learning_rate, 1.0);
  EXPECT_EQ(c.model.local.chunk, 32);  // an inline table merges into the section
  EXPECT_EQ(c.model.local.n_before, 1);
  EXPECT_EQ(parse("", {"run.name=\"quoted # not a comment\""}).name, "quoted # not a comment");
  expect_error<ConfigError>([] { parse("", {"run.dir="}); }, {"run.dir is empty"});
}

// Exact attention is a layer kind like the others, in files and overrides.
TEST(RunConfig, ParsesExactAttention) {
  const RunConfig c = parse("[model]\nattention = [\"exact\", \"lsh\"]\n", {});
  EXPECT_EQ(c.model.attention,
            (std::vector<AttentionKind>{AttentionKind::Exact, AttentionKind::Lsh}));
  const RunConfig o = parse("", {"model.attention=[\"exact\"]"});
  EXPECT_EQ(o.model.attention, std::vector<AttentionKind>{AttentionKind::Exact});
  EXPECT_EQ(o.model.attention_config(0).kind, AttentionKind::Exact);
  EXPECT_NE(config::to_toml(o).find("attention = [\"exact\"]"), std::string::npos);
}

TEST(RunConfig, UnknownKeysSuggestTheClosest) {
  expect_error<ConfigError>(
      [] { parse("[model]\nvocab = 256\nd_modle = 512\n"); },
      {"exp.toml:3:1", "unknown key model.d_modle", "did you mean model.d_model?"});
  expect_error<ConfigError>([] { parse("[modle]\nd_model = 512\n"); },
                            {"exp.toml:1:2", "unknown key modle", "did you mean model?"});
  // A key written in the wrong section.
  expect_error<ConfigError>([] { parse("[model]\nn_hashes = 4\n"); },
                            {"unknown key model.n_hashes", "did you mean model.lsh.n_hashes?"});
  // Nothing close: the keys of the section are listed.
  expect_error<ConfigError>(
      [] { parse("[model.local]\nwindow = 4\n"); },
      {"unknown key model.local.window", "the keys of [model.local] are chunk, n_before"});
  expect_error<ConfigError>(
      [] { parse("", {"train.stpes=100"}); },
      {"override 'train.stpes=100'", "unknown key train.stpes", "did you mean train.steps?"});
  expect_error<ConfigError>([] { parse("model = 3\n"); }, {"model is a section", "the integer 3"});
}

TEST(RunConfig, WrongTypesNameKeyAndValue) {
  expect_error<ConfigError>(
      [] { parse("[model]\nd_model = \"256\"\n"); },
      {"exp.toml:2:1", "model.d_model", "expected an integer", "the string \"256\""});
  expect_error<ConfigError>([] { parse("[train]\nsteps = 100.0\n"); },
                            {"train.steps", "the float 100.0", "without a decimal point"});
  expect_error<ConfigError>([] { parse("[train]\nsteps = 1e3\n"); },
                            {"train.steps", "expected an integer"});
  expect_error<ConfigError>([] { parse("[model]\ncausal = \"yes\"\n"); },
                            {"model.causal", "expected a boolean", "\"yes\""});
  expect_error<ConfigError>([] { parse("[model]\ncausal = 1\n"); },
                            {"model.causal", "the integer 1"});
  expect_error<ConfigError>([] { parse("[train]\nlearning_rate = \"1e-3\"\n"); },
                            {"train.learning_rate", "expected a number", "\"1e-3\""});
  expect_error<ConfigError>([] { parse("[model]\nattention = \"lsh\"\n"); },
                            {"model.attention", "expected an array", "[\"lsh\"]"});
  expect_error<ConfigError>([] { parse("[model]\naxial_shape = [64, 64.5]\n"); },
                            {"model.axial_shape", "array of integers", "[64, 64.5]"});
  expect_error<ConfigError>([] { parse("[data]\npath = 3\n"); },
                            {"data.path", "expected a string", "the integer 3"});
  expect_error<ConfigError>([] { parse("[model]\nlsh = 3\n"); },
                            {"model.lsh is a section", "expected a table"});
  expect_error<ConfigError>(
      [] { parse("", {"train.steps=many"}); },
      {"override 'train.steps=many'", "expected an integer", "the string \"many\""});
}

TEST(RunConfig, OutOfRangeValuesNameKeyValueAndRule) {
  expect_error<ConfigError>(
      [] { parse("[model.lsh]\nn_hashes = 0\n"); },
      {"exp.toml", "model.lsh.n_hashes is 0", "[1, 64]", "model.lsh.n_hashes from exp.toml:2:1"});
  expect_error<ConfigError>(
      [] { parse("", {"model.d_model=0"}); },
      {"model.d_model is 0", "must be positive", "model.d_model from override 'model.d_model=0'"});
  expect_error<ConfigError>([] { parse("[model]\ndropout = 1.0\n"); },
                            {"model.dropout is 1", "[0, 1)"});
  expect_error<ConfigError>(
      [] { parse("[model]\npositions = \"axiall\"\n"); },
      {"model.positions", "\"axiall\" is unknown", "none, sinusoidal, learned or axial"});
  expect_error<ConfigError>([] { parse("[model]\nattention = [\"lsh\", \"ful\"]\n"); },
                            {"model.attention", "\"ful\" is unknown", "full, lsh, local or exact"});
  expect_error<ConfigError>([] { parse("[train]\nlearning_rate = -0.001\n"); },
                            {"train.learning_rate is -0.001", "positive"});
  expect_error<ConfigError>([] { parse("[train]\ntarget_accuracy = 1.5\n"); },
                            {"train.target_accuracy is 1.5", "[0, 1]"});
  expect_error<ConfigError>([] { parse("[train]\noptimizer = \"sgd\"\n"); },
                            {"train.optimizer", "\"sgd\" is unknown", "adam or adamw"});
  expect_error<ConfigError>([] { parse("[train.adam]\nbeta2 = 1\n"); },
                            {"train.adam.beta2 is 1", "[0, 1)"});
  expect_error<ConfigError>([] { parse("[train]\nseed = -3\n"); }, {"train.seed", "-3", ">= 0"});
  expect_error<ConfigError>([] { parse("[model]\nd_head = 256\n"); },
                            {"model.d_head is 256", "lsh attention supports at most 128"});
  expect_error<ConfigError>([] { parse("[model.lsh]\nn_buckets = [6, 3]\n"); },
                            {"model.lsh.n_buckets is [6, 3]", "even"});
  // The options of pretrained Hugging Face Reformers (issue 20).
  expect_error<ConfigError>([] { parse("[model]\nlayer_norm_eps = 0\n"); },
                            {"model.layer_norm_eps is 0", "(0, 1]"});
  expect_error<ConfigError>([] { parse("[model.lsh]\nattention_dropout = 1.5\n"); },
                            {"model.lsh.attention_dropout is 1.5", "[0, 1)", "or -1"});
  expect_error<ConfigError>([] { parse("[model.local]\nattention_dropout = -0.5\n"); },
                            {"model.local.attention_dropout is -0.5", "or -1"});
  expect_error<ConfigError>(
      [] { parse("[data]\ntask = \"bytes\"\npath = \"x\"\nvocab = 256\nid_offset = 2\n"); },
      {"data.vocab is 256", "set data.vocab = 258"});
}

// model.ff_chunk and model.loss_chunk take rows or "auto" (kAutoChunk, which a
// run resolves: train/chunk_choice.hpp), written back as they were given; a
// run's defaults are "auto" on GPUs and rows on the host.
TEST(RunConfig, ChunksTakeRowsOrAuto) {
  const RunConfig rows = parse("[model]\nff_chunk = 512\nloss_chunk = 256\n");
  EXPECT_EQ(rows.model.ff_chunk, 512);
  EXPECT_EQ(rows.model.loss_chunk, 256);
  const RunConfig automatic = parse("[model]\nff_chunk = \"auto\"\nloss_chunk = \"auto\"\n");
  EXPECT_EQ(automatic.model.ff_chunk, kAutoChunk);
  EXPECT_EQ(automatic.model.loss_chunk, kAutoChunk);
  const std::string text = to_toml(automatic);
  EXPECT_NE(text.find("ff_chunk = \"auto\""), std::string::npos) << text;
  EXPECT_NE(text.find("loss_chunk = \"auto\""), std::string::npos) << text;
  const RunConfig back = parse(text);
  EXPECT_EQ(back.model.ff_chunk, kAutoChunk);
  EXPECT_EQ(back.model.loss_chunk, kAutoChunk);
  EXPECT_NE(first_difference(rows, automatic, {}), "");
  // The defaults of this backend.
  const RunConfig defaults{};
  EXPECT_EQ(defaults.model.ff_chunk, kHostMemory ? 0 : kAutoChunk);
  EXPECT_EQ(defaults.model.loss_chunk, kHostMemory ? 1024 : kAutoChunk);
  // Anything else is refused by name; -1 is not a way to write "auto".
  expect_error<ConfigError>([] { parse("[model]\nff_chunk = \"Auto\"\n"); },
                            {"model.ff_chunk", "\"Auto\" is unknown", "\"auto\""});
  expect_error<ConfigError>([] { parse("", {"model.loss_chunk=all"}); },
                            {"model.loss_chunk", "\"all\" is unknown", "\"auto\""});
  expect_error<ConfigError>([] { parse("[model]\nff_chunk = -1\n"); },
                            {"model.ff_chunk", "-1 is negative", ">= 0 or \"auto\""});
  expect_error<ConfigError>([] { parse("[model]\nff_chunk = 1.5\n"); },
                            {"model.ff_chunk", "expected an integer"});
}

// The keys every family shares (models::ModelSizes) are refused in the same
// words by each family's config, naming the key as a run's config writes it.
TEST(RunConfig, EveryFamilyNamesASharedKeyTheSameWay) {
  const std::vector<std::pair<std::string, std::vector<std::string>>> cases{
      {"model.loss_chunk=0", {"model.loss_chunk is 0", "must be positive or \"auto\""}},
      {"model.dropout=1.5", {"model.dropout is 1.5", "must be in [0, 1)"}},
      {"model.attention_dropout=-0.5", {"model.attention_dropout is -0.5", "[0, 1)"}},
      {"model.label_smoothing=1", {"model.label_smoothing is 1", "[0, 1)"}},
      {"model.d_head=0", {"model.d_head is 0", "must be positive"}},
      {"model.d_ff=-4", {"model.d_ff is -4", "must be positive"}},
      {"model.layer_norm_eps=0", {"model.layer_norm_eps is 0", "(0, 1]"}}};
  const std::vector<std::vector<std::string>> families{
      {},
      {"model.type=\"transformer\"", "data.task=\"seq2seq_copy\""},
      {"model.type=\"transformer_xl\"", "data.task=\"bytes\"", "data.path=\"corpus\"",
       "data.vocab=256", "model.vocab=256"}};
  for (const auto& family : families)
    for (const auto& [override_, parts] : cases) {
      std::vector<std::string> overrides = family;
      overrides.push_back(override_);
      SCOPED_TRACE((family.empty() ? "reformer" : family[0]) + " " + override_);
      expect_error<ConfigError>([&] { parse("", overrides).validate(); }, parts);
    }
}

// Per-kind attention dropout reaches the layers of that kind only; -1 follows
// model.attention_dropout. The encoder-decoder refuses per-kind rates.
TEST(RunConfig, PerKindAttentionDropout) {
  const RunConfig c = parse(
      "[model]\nlayers = 3\nattention = [\"local\", \"lsh\", \"full\"]\nattention_dropout = "
      "0.1\nlayer_norm_eps = 1e-12\n[model.lsh]\nattention_dropout = 0.2\n");
  EXPECT_DOUBLE_EQ(c.model.attention_config(0).attention_dropout, 0.1);
  EXPECT_DOUBLE_EQ(c.model.attention_config(1).attention_dropout, 0.2);
  EXPECT_DOUBLE_EQ(c.model.attention_config(2).attention_dropout, 0.1);
  EXPECT_DOUBLE_EQ(c.model.layer_norm_eps, 1e-12);
  expect_error<ConfigError>(
      [] {
        parse(
            "[model]\ntype = \"transformer\"\n[model.local]\nattention_dropout = 0.2\n"
            "[data]\ntask = \"seq2seq_copy\"\n")
            .validate();
      },
      {"model.local.attention_dropout is 0.2", "model.attention_dropout instead"});
}

TEST(RunConfig, ContradictionsNameBothKeys) {
  expect_error<ConfigError>([] { parse("[model.lsh]\nchunk = 64\n[data]\nlength = 1000\n"); },
                            {"data.length = 1000", "not a multiple of model.lsh.chunk = 64", "1024",
                             "data.length from exp.toml:4:1", "model.lsh.chunk from exp.toml:2:1"});
  expect_error<ConfigError>(
      [] { parse("[model]\nattention = [\"local\"]\n[model.local]\nchunk = 100\n"); },
      {"data.length = 256", "model.local.chunk = 100", "300"});
  expect_error<ConfigError>(
      [] { parse("[model]\nmax_length = 4096\naxial_shape = [64, 32]\n"); },
      {"model.axial_shape is [64, 32]", "product 2048", "model.max_length = 4096"});
  expect_error<ConfigError>([] { parse("[model]\naxial_dims = [100, 100]\n"); },
                            {"model.axial_dims is [100, 100]", "model.d_model = 256"});
  expect_error<ConfigError>(
      [] { parse("[model]\npositions = \"learned\"\nmax_length = 128\n[data]\nlength = 256\n"); },
      {"data.length = 256", "longer than model.max_length = 128"});
  expect_error<ConfigError>([] { parse("[model]\nvocab = 100\n[data]\nvocab = 128\n"); },
                            {"data.vocab is 128", "model.vocab is 100"});
  expect_error<ConfigError>([] { parse("[train]\nwarmup_steps = 100\n"); },
                            {"train.warmup_steps is 100", "constant has no warmup"});
  expect_error<ConfigError>([] { parse("[train]\nschedule = \"noam\"\n"); },
                            {"train.warmup_steps is 0", "noam needs warmup_steps >= 1"});
}

// A key an error names that neither the file nor an override set is said to
// be at its default, with the value: a short config of another family than
// the language model's often fails on one of [model]'s defaults (axial
// positions, data.vocab 128), which it never wrote.
TEST(RunConfig, ErrorsSayWhichNamedKeysAreAtTheirDefaults) {
  expect_error<ConfigError>(
      [] { parse("[model]\ntype = \"transformer\"\n[data]\ntask = \"seq2seq_copy\"\n"); },
      {"model.positions is axial",
       "(not set in exp.toml, so at its default: model.positions = "
       "\"axial\")"});
  expect_error<ConfigError>(
      [] { parse("[data]\ntask = \"bytes\"\npath = \"x.txt\"\n"); },
      {"data.vocab is 128", "so at their defaults: data.vocab = 128, data.id_offset = 0"});
  // A key the file set is named with its line, not as a default.
  try {
    parse("[model.lsh]\nchunk = 64\n[data]\nlength = 1000\n");
    ADD_FAILURE() << "no error";
  } catch (const ConfigError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("model.lsh.chunk from exp.toml:2:1"), std::string::npos) << message;
    EXPECT_EQ(message.find("not set in"), std::string::npos) << message;
  }
}

// A key the run's family does not read, set to anything but its default, is
// refused by name with the families that read it; at its default (as every
// run's config.toml writes it) it is accepted.
TEST(RunConfig, KeysTheFamilyDoesNotReadAreRefused) {
  const std::vector<std::string> seq2seq{"model.type=\"transformer\"", "data.task=\"seq2seq_copy\"",
                                         "model.positions=\"sinusoidal\""};
  const std::vector<std::string> xl{"model.type=\"transformer_xl\"", "data.task=\"bytes\"",
                                    "data.path=\"corpus\"", "data.vocab=256", "model.vocab=256"};
  auto with = [](std::vector<std::string> family, const std::string& extra) {
    family.push_back(extra);
    return family;
  };
  const std::vector<std::pair<std::vector<std::string>, std::vector<std::string>>> refused{
      {{"model.xl.mem_len=5"},
       {"model.xl.mem_len is 5", "model.type = \"reformer\"", "does not read it",
        "read by model.type = \"transformer_xl\""}},
      {{"model.seq2seq.encoder_layers=3"},
       {"model.seq2seq.encoder_layers is 3", "\"transformer\""}},
      {{"model.classifier.classes=3"}, {"model.classifier.classes is 3", "\"classifier\""}},
      {{"data.listops.min_length=3"}, {"data.listops.min_length is 3", "\"classifier\""}},
      {with(seq2seq, "model.layers=7"),
       {"model.layers is 7", "model.type = \"transformer\" (the encoder-decoder)",
        "\"reformer\", \"transformer_xl\", \"classifier\""}},
      {with(seq2seq, "model.attention=[\"local\"]"), {"model.attention is [\"local\"]"}},
      {with(seq2seq, "model.xl.mem_len=3"), {"model.xl.mem_len is 3"}},
      {with(xl, "model.attention=[\"full\"]"),
       {"model.attention is [\"full\"]", "(from override", "Transformer-XL"}},
      {with(xl, "model.lsh.n_hashes=4"), {"model.lsh.n_hashes is 4"}},
      {with(xl, "model.positions=\"learned\""), {"model.positions is \"learned\""}}};
  for (const auto& c : refused) {  // (nvcc: no structured bindings in a lambda)
    SCOPED_TRACE(c.first.back());
    expect_error<ConfigError>([&] { parse("", c.first); }, c.second);
  }
  // What each family reads is accepted, and so is any key at its default.
  EXPECT_NO_THROW(parse("", with(seq2seq, "model.lsh.n_hashes=4")));
  EXPECT_NO_THROW(parse("", with(seq2seq, "model.seq2seq.encoder_layers=3")));
  EXPECT_NO_THROW(parse("", with(xl, "model.xl.mem_len=5")));
  EXPECT_NO_THROW(parse("", with(xl, "model.layers=3")));
  EXPECT_NO_THROW(parse("", {"model.lsh.n_hashes=4", "model.layers=3"}));
  for (const auto& family : {std::vector<std::string>{}, seq2seq, xl}) {
    const RunConfig c = parse("", family);
    EXPECT_EQ(first_difference(parse(to_toml(c), {}), c), "");
  }
}

// model.type = "transformer" reads [model] and [model.seq2seq] into the
// encoder-decoder's config and needs a pair task; the language model refuses one.
TEST(RunConfig, EncoderDecoderType) {
  const std::string base =
      "[model]\ntype = \"transformer\"\npositions = \"learned\"\nd_model = 32\nheads = 2\n"
      "d_head = 16\nmax_length = 64\n[model.seq2seq]\nencoder_layers = 3\n"
      "cross_attention = \"exact\"\ntie_generator = true\nreversible = true\n[data]\n"
      "task = \"seq2seq_reverse\"\n"
      "length = 20\nvocab = 30\nmin_symbols = 2\n";
  const RunConfig c = parse(base);
  EXPECT_EQ(config::to_string(c.model_type), "transformer");
  const auto t = config::transformer_config(c, 30);
  EXPECT_EQ(t.encoder_layers, 3);
  EXPECT_EQ(t.decoder_layers, 2);
  EXPECT_EQ(t.cross_attention, AttentionKind::Exact);
  EXPECT_TRUE(t.tie_generator);
  EXPECT_TRUE(t.reversible);
  EXPECT_FALSE(
      config::transformer_config(parse(base, {"model.seq2seq.reversible=false"}), 30).reversible);
  EXPECT_EQ(t.d_model, 32);
  EXPECT_EQ(t.positions, models::PositionKind::Learned);
  EXPECT_EQ(t.source_vocab, 30);
  const RunConfig back = parse(to_toml(c));
  EXPECT_EQ(first_difference(c, back), "");
  expect_error<ConfigError>([&] { parse(base, {"data.task=\"bytes\""}); },
                            {"model.type is transformer", "data.task is bytes"});
  expect_error<ConfigError>([&] { parse(base, {"model.type=\"reformer\""}); },
                            {"data.task is seq2seq_reverse", "model.type = \"transformer\""});
  expect_error<ConfigError>([&] { parse(base, {"model.seq2seq.decoder_attention=\"lsh\""}); },
                            {"model.seq2seq.decoder_attention is lsh"});
  expect_error<ConfigError>([&] { parse(base, {"data.length=65"}); },
                            {"data.length is 65", "model.max_length is 64"});
  expect_error<ConfigError>([&] { parse(base, {"data.max_symbols=20"}); },
                            {"data.max_symbols 20", "data.length - 1 = 19"});
  expect_error<ConfigError>([&] { parse(base, {"model.type=\"gru\""}); }, {"model.type", "gru"});
}

TEST(RunConfig, SyntaxErrorsGiveTheLine) {
  expect_error<ConfigError>([] { parse("[model]\nd_model = 256\nheads = = 4\n"); },
                            {"exp.toml:3:", "TOML syntax error"});
  expect_error<ConfigError>([] { parse("[model]\nd_model = 1\nd_model = 2\n"); },
                            {"exp.toml:3:", "TOML syntax error"});
  expect_error<ConfigError>(
      [] { parse("", {"model.attention=[lsh, local]"}); },
      {"override 'model.attention=[lsh, local]'", "not valid TOML", "need quotes"});
  expect_error<ConfigError>([] { parse("", {"train.steps"}); },
                            {"override 'train.steps'", "section.key=value"});
  // A number too large for 64 bits is TOML's error, not a bare string.
  expect_error<ConfigError>([] { parse("", {"train.steps=9999999999999999999"}); },
                            {"not valid TOML", "not representable in 64 bits"});
  // model.qk against the kinds that fix it, by its own name.
  expect_error<ConfigError>([] { parse("", {"model.qk=separate"}); },
                            {"model.qk is separate but layers 0 and 1 use LSH attention",
                             "set model.qk = \"auto\" or \"shared\""});
  expect_error<ConfigError>(
      [] {
        parse("", {"model.qk=shared", "model.attention=[\"local\", \"full\"]"});
      },
      {"model.qk is shared but layer 0 uses local attention", "\"separate\""});
}

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() /
          ("reformer_test_" + std::to_string(::getpid()) + "_" + name))
      .string();
}

// A user's file is refused for a key its family does not read; a stored
// config's text (a checkpoint's, perhaps written before the rule) is not, and
// only the overrides given with it are.
TEST(RunConfig, UnreadKeysInAFileAreRefusedInAStoredTextOnlyInOverrides) {
  const std::string path = temp_path("unread.toml");
  const std::string text = "[model.xl]\nmem_len = 5\n";
  {
    std::ofstream out(path);
    out << text;
  }
  expect_error<ConfigError>([&] { config::load_run_config(path); },
                            {"model.xl.mem_len is 5", path + ":2:", "does not read it"});
  // train --resume reads the file that began the run as it is (its overrides
  // are checked): a run begun before the rule still resumes.
  EXPECT_EQ(config::load_run_config(path, {}, false).xl.mem_len, 5);
  expect_error<ConfigError>([&] { config::load_run_config(path, {"model.xl.clamp_len=3"}, false); },
                            {"model.xl.clamp_len is 3", "override"});
  std::filesystem::remove(path);
  EXPECT_EQ(parse(text).xl.mem_len, 5);
  expect_error<ConfigError>([&] { parse(text, {"model.seq2seq.encoder_layers=4"}); },
                            {"model.seq2seq.encoder_layers is 4", "override"});
}

TEST(RunConfig, LoadsFilesAndReportsMissingOnes) {
  const std::string path = temp_path("dup.toml");
  {
    std::ofstream out(path);
    out << "[train]\nsteps = 7\n";
  }
  const RunConfig c = config::load_run_config(path, {"train.batch=2"});
  EXPECT_EQ(c.train.steps, 7);
  EXPECT_EQ(c.train.batch, 2);
  EXPECT_EQ(c.run_dir, "runs/" + std::filesystem::path(path).stem().string());
  std::filesystem::remove(path);

  expect_error<IoError>([] { config::load_run_config("/no/such/dir/run.toml"); },
                        {"/no/such/dir/run.toml", "No such file"});
  const std::string dir = std::filesystem::temp_directory_path().string();
  expect_error<IoError>([&] { config::load_run_config(dir); }, {dir, "directory"});
  // Syntax errors name the file.
  {
    std::ofstream out(path);
    out << "[train]\nsteps = \n";
  }
  expect_error<ConfigError>([&] { config::load_run_config(path); }, {path + ":2:"});
  std::filesystem::remove(path);
}

TEST(RunConfig, FirstDifferenceNamesKeyAndBothValues) {
  RunConfig a, b;
  a.run_dir = b.run_dir = "runs/x";
  EXPECT_EQ(first_difference(a, b), "");
  b.model.d_model = 512;
  b.train.steps = 5;
  EXPECT_EQ(first_difference(a, b), "model.d_model: 256 in the checkpoint, 512 here");
  EXPECT_EQ(first_difference(a, b, {"model.d_model"}),
            "train.steps: 1000 in the checkpoint, 5 here");
  EXPECT_EQ(first_difference(a, b, {"model", "train.steps"}), "");
  EXPECT_EQ(first_difference(a, b, {"model.d_mod"}, "in a", "in b"),
            "model.d_model: 256 in a, 512 in b");  // a prefix must end at a dot
  b = a;
  b.model.attention = {AttentionKind::Local, AttentionKind::Lsh};
  EXPECT_EQ(first_difference(a, b),
            "model.attention: [\"lsh\"] in the checkpoint, "
            "[\"local\", \"lsh\"] here");
  b = a;
  b.train.learning_rate = std::nextafter(a.train.learning_rate, 1.0);  // exact comparison
  EXPECT_NE(first_difference(a, b), "");
}

}  // namespace
}  // namespace reformer
