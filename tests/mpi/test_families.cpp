// Every model family trains data-parallel (issue 33), run by
// `mpirun --oversubscribe -np 2` (tests/CMakeLists.txt, ctest mpi_families):
// the encoder-decoder and Transformer-XL give under two processes what one
// process with the whole batch gives (the language model's tests are in
// test_data_parallel.cpp). The single-process references run on process 0
// alone (Communicator::self()). Dropout is on (0.1 in every layer): its
// masks are drawn by the global row, as one process draws them.
#include "mpi/mpi_test_support.hpp"
#include "reformer/config/run_config.hpp"
#include "reformer/core/distributed.hpp"
#include "reformer/core/error.hpp"
#include "reformer/data/pairs.hpp"
#include "reformer/io/checkpoint.hpp"
#include "reformer/models/transformer.hpp"
#include "reformer/models/transformer_xl.hpp"
#include "reformer/train/trainer.hpp"
#include "support/checks.hpp"
#include "support/fake_retrieval.hpp"
#include "support/gradcheck.hpp"
#include "support/run_configs.hpp"
#include "support/temp_dir.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace reformer {
namespace {

using namespace reformer::testing;

// The encoder-decoder on the reverse task (support/run_configs.hpp), 4 pairs
// per micro-batch, 2 micro-batches a step, an evaluation every 5 steps,
// dropout 0.1 on the embeddings, attention probabilities and outputs and the
// feed-forwards.
config::RunConfig seq2seq(const std::string& dir, std::int64_t steps,
                          const std::vector<std::string>& overrides = {}) {
  std::vector<std::string> all = {"model.dropout=0.1", "model.attention_dropout=0.1",
                                  "train.eval_every=5"};
  all.insert(all.end(), overrides.begin(), overrides.end());
  return seq2seq_run(dir, steps, all);
}

// Transformer-XL on a byte corpus: 4 streams per micro-batch (2 per process),
// 2 micro-batch groups, memory 12, evaluations every 3 steps, dropout 0.1
// (embedding, relative positions, attention probabilities, outputs,
// feed-forwards; xl_run's). Adam's eps is 1e-5: the slowest sinusoids of the
// relative positions are nearly constant, so some entries of attn.w_r get
// gradients that are rounding noise (a constant score offset does not change
// a softmax), which eps = 1e-8 would turn into steps of the learning rate.
config::RunConfig xl(const std::string& dir, const std::string& corpus, std::int64_t steps,
                     const std::vector<std::string>& overrides = {}) {
  std::vector<std::string> all = {"train.batch=4", "train.adam.eps=1e-5"};
  all.insert(all.end(), overrides.begin(), overrides.end());
  return xl_run(dir, corpus, steps, all);
}

// A text of words, `bytes` long (process 0 writes it; every process reads it).
std::string write_corpus(const std::string& dir, std::size_t bytes = 20000) {
  const std::string path = dir + "/corpus.txt";
  if (world().rank() == 0) {
    std::string text;
    const char* words[] = {"the",     "reformer", "hashes", "keys", "into",   "buckets", "and",
                           "attends", "within",   "chunks", "of",   "sorted", "queries", "memory"};
    for (int i = 0; text.size() < bytes; ++i)
      text += std::string(words[(i * 7 + i / 13) % 14]) + ((i % 11) == 10 ? ".\n" : " ");
    std::ofstream(path) << text;
  }
  barrier();
  return path;
}

std::vector<double> seq2seq_parameters(const config::RunConfig& config, const std::string& path) {
  const auto task = data::make_pair_task(data::pair_config(config.data));
  ParameterSet<float> params;
  models::EncoderDecoder<float> model(config::transformer_config(config, task->vocab()), params);
  io::load_checkpoint<float>(path, params, nullptr);
  return to_host(params.values());
}

std::vector<double> xl_parameters(const config::RunConfig& config, const std::string& path) {
  ParameterSet<float> params;
  models::TransformerXL<float> model(config::xl_config(config), params);
  io::load_checkpoint<float>(path, params, nullptr);
  return to_host(params.values());
}

// Largest difference relative to the largest value of `b`.
double max_relative(const std::vector<double>& a, const std::vector<double>& b) {
  double worst = 0, scale = 0;
  for (std::size_t i = 0; i < b.size(); ++i) scale = std::max(scale, std::abs(b[i]));
  for (std::size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(a[i] - b[i]) / scale);
  return worst;
}

void expect_losses_near(const std::vector<double>& got, const std::vector<double>& want,
                        std::size_t offset = 0) {
  for (std::size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], want[offset + i], 1e-5 * std::abs(want[offset + i]))
        << "step " << offset + i + 1;
}

// The encoder-decoder: two processes with 2 pairs each give the losses, the
// evaluation (loss, tokens, exact matches of greedy decoding) and the final
// parameters of one process with 4 pairs; with and without accumulation.
TEST(Families, EncoderDecoderTwoProcessesEqualOne) {
  ASSERT_EQ(world().size(), 2) << "run under mpirun -np 2";
  SharedDir dir;
  const std::vector<std::vector<std::string>> variants = {{}, {"train.accumulate=1"}};
  for (std::size_t v = 0; v < variants.size(); ++v) {
    SCOPED_TRACE("variant " + std::to_string(v));
    const std::string many = dir.path + "/many" + std::to_string(v);
    const std::string one = dir.path + "/one" + std::to_string(v);
    const auto parallel = train::run_training(seq2seq(many, 10, variants[v]), options_for(world()));
    EXPECT_EQ(parallel.processes, 2);
    ASSERT_EQ(parallel.losses.size(), 10u);
    if (world().rank() == 0) {
      const auto single =
          train::run_training(seq2seq(one, 10, variants[v]), options_for(Communicator::self()));
      EXPECT_LT(single.losses.back(), single.losses.front());
      expect_losses_near(parallel.losses, single.losses);
      EXPECT_NEAR(parallel.last_eval.loss, single.last_eval.loss, 1e-5 * single.last_eval.loss);
      EXPECT_EQ(parallel.last_eval.tokens, single.last_eval.tokens);
      EXPECT_GE(single.last_eval.exact_match, 0.0);
      EXPECT_EQ(parallel.last_eval.exact_match, single.last_eval.exact_match);
      const auto config = seq2seq(one, 10);
      EXPECT_LT(max_relative(seq2seq_parameters(config, parallel.checkpoint),
                             seq2seq_parameters(config, single.checkpoint)),
                1e-5);
    }
    barrier();
  }
}

// Transformer-XL: each process carries 2 of the 4 streams of each group and
// their memories; the losses of every step, the evaluations (memories of
// their own) and the final parameters are those of one process with all
// streams, also with recomputed evaluation (eval.recompute).
TEST(Families, TransformerXLTwoProcessesEqualOne) {
  ASSERT_EQ(world().size(), 2) << "run under mpirun -np 2";
  SharedDir dir;
  const std::string corpus = write_corpus(dir.path);
  const std::vector<std::vector<std::string>> variants = {
      {}, {"train.accumulate=1", "eval.recompute=true"}};
  for (std::size_t v = 0; v < variants.size(); ++v) {
    SCOPED_TRACE("variant " + std::to_string(v));
    const std::string many = dir.path + "/many" + std::to_string(v);
    const std::string one = dir.path + "/one" + std::to_string(v);
    const auto parallel =
        train::run_training(xl(many, corpus, 8, variants[v]), options_for(world()));
    EXPECT_EQ(parallel.processes, 2);
    ASSERT_EQ(parallel.losses.size(), 8u);
    if (world().rank() == 0) {
      const auto single =
          train::run_training(xl(one, corpus, 8, variants[v]), options_for(Communicator::self()));
      EXPECT_LT(single.losses.back(), single.losses.front());
      expect_losses_near(parallel.losses, single.losses);
      EXPECT_NEAR(parallel.last_eval.loss, single.last_eval.loss, 1e-5 * single.last_eval.loss);
      EXPECT_EQ(parallel.last_eval.tokens, single.last_eval.tokens);
      EXPECT_NEAR(parallel.last_eval.accuracy, single.last_eval.accuracy, 1e-9);
      const auto config = xl(one, corpus, 8);
      EXPECT_LT(max_relative(xl_parameters(config, parallel.checkpoint),
                             xl_parameters(config, single.checkpoint)),
                1e-5);
    }
    barrier();
  }
}

// Transformer-XL checkpoints hold the memories of every stream whatever the
// number of processes that wrote them (process 0 gathers the others' rows):
// one written by two processes resumes on two exactly as the uninterrupted
// two-process run goes on, and on one process as the uninterrupted
// single-process run does (to rounding); one written by one process resumes
// on two.
TEST(Families, TransformerXLCheckpointsKeepEveryStreamsMemories) {
  SharedDir dir;
  const std::string corpus = write_corpus(dir.path);
  const std::string whole = dir.path + "/whole", split = dir.path + "/split";
  const std::string copy = dir.path + "/copy", single_split = dir.path + "/single";
  const auto uninterrupted = train::run_training(xl(whole, corpus, 7), options_for(world()));
  const auto first = train::run_training(xl(split, corpus, 4), options_for(world()));
  std::vector<double> reference;
  if (world().rank() == 0) {
    // The memories of both groups, all 4 streams, every layer, full length.
    const auto state = io::read_checkpoint_state(first.checkpoint);
    ASSERT_EQ(state.size(), 4u);
    EXPECT_EQ(state[0].name, "memory.0.0");
    EXPECT_EQ(state[3].name, "memory.1.1");
    for (const auto& s : state) EXPECT_EQ(s.shape, (std::vector<Index>{4, 12, 16})) << s.name;
    std::filesystem::copy(split, copy, std::filesystem::copy_options::recursive);
    reference =
        train::run_training(xl(dir.path + "/ref", corpus, 7), options_for(Communicator::self()))
            .losses;
    // Two processes' checkpoint, one process.
    const auto resumed =
        train::run_training(xl(copy, corpus, 7), options_for(Communicator::self(), true));
    ASSERT_EQ(resumed.losses.size(), 3u);
    expect_losses_near(resumed.losses, reference, 4);
    EXPECT_NEAR(resumed.last_eval.loss, uninterrupted.last_eval.loss,
                1e-5 * uninterrupted.last_eval.loss);
    train::run_training(xl(single_split, corpus, 4), options_for(Communicator::self()));
  }
  barrier();
  // Two processes' checkpoint, two processes: the uninterrupted run exactly.
  const auto rest = train::run_training(xl(split, corpus, 7), options_for(world(), true));
  ASSERT_EQ(rest.losses.size(), 3u);
  for (std::size_t i = 0; i < 3; ++i)
    EXPECT_EQ(rest.losses[i], uninterrupted.losses[4 + i]) << "step " << 5 + i;
  EXPECT_EQ(rest.last_eval.loss, uninterrupted.last_eval.loss);
  // One process's checkpoint, two processes.
  const auto moved = train::run_training(xl(single_split, corpus, 7), options_for(world(), true));
  ASSERT_EQ(moved.losses.size(), 3u);
  if (world().rank() == 0) {
    expect_losses_near(moved.losses, reference, 4);
    const auto config = xl(whole, corpus, 7);
    EXPECT_EQ(xl_parameters(config, rest.checkpoint),
              xl_parameters(config, uninterrupted.checkpoint));
  }
  barrier();
}

// The experiments/ folder of the source tree: the first folder at or above the
// working folder (ctest's is the build folder's tests/) that holds it; empty
// when there is none.
std::string experiments_dir() {
  for (auto p = std::filesystem::current_path();; p = p.parent_path()) {
    if (std::filesystem::exists(p / "experiments" / "txl_cpu.toml"))
      return (p / "experiments").string();
    if (p == p.root_path()) return {};
  }
}

// The parameters of two checkpoints of one model, whatever the family and
// the dtype: the largest difference relative to the largest value of `b`'s,
// and the parameter where it is.
template <class T>
std::pair<double, std::string> parameter_difference(const std::string& a, const std::string& b) {
  ParameterSet<T> pa, pb;
  for (const auto& p : io::read_checkpoint_parameters(b)) {
    pa.add(p.name, p.shape);
    pb.add(p.name, p.shape);
  }
  io::load_checkpoint<T>(a, pa, nullptr);
  io::load_checkpoint<T>(b, pb, nullptr);
  const auto va = to_host(pa.values()), vb = to_host(pb.values());
  double scale = 0, worst = 0;
  for (const double v : vb) scale = std::max(scale, std::abs(v));
  std::string where;
  for (const auto& p : pb)
    for (Index i = p.offset; i < p.offset + Index(p.value.size()); ++i)
      if (std::abs(va[i] - vb[i]) / scale > worst) {
        worst = std::abs(va[i] - vb[i]) / scale;
        where = p.name;
      }
  return {worst, where};
}
std::pair<double, std::string> parameter_difference(const std::string& a, const std::string& b) {
  return io::read_checkpoint_meta(b).dtype == "double" ? parameter_difference<double>(a, b)
                                                       : parameter_difference<float>(a, b);
}

// The shipped configs with their dropout (0.1): char_lm.toml, copy_transformer.toml
// with dropout 0.1 on the embeddings, outputs and feed-forwards and on the
// attention probabilities (it ships without), txl_cpu.toml (16 streams, 8 per
// process). 2 steps on two processes give the losses and parameters of one
// process with the whole batch (1e-5); rank 0 prints them. (Over more steps
// txl_cpu's float parameters part by rounding that Adam and clipping amplify,
// with dropout or without: docs/distributed.md; in double they agree to 1e-15.)
TEST(Families, ShippedConfigsWithDropoutTwoProcessesEqualOne) {
  const std::string experiments = experiments_dir();
  if (experiments.empty())
    GTEST_SKIP() << "no experiments/ folder at or above " << std::filesystem::current_path();
  SharedDir dir;
  // txl_cpu's 16 streams of 64-byte segments need 1,040 bytes in the 5% valid split.
  const std::string corpus = write_corpus(dir.path, 40000);
  const std::string text = "data.path=\"" + corpus + "\"";
  const std::vector<std::pair<std::string, std::vector<std::string>>> cases = {
      {"char_lm.toml", {text}},
      {"copy_transformer.toml",
       {"model.dropout=0.1", "model.attention_dropout=0.1", "train.target_accuracy=0"}},
      {"txl_cpu.toml", {text}}};
  for (const auto& [file, extra] : cases) {
    SCOPED_TRACE(file);
    auto config = [&, &file = file, &extra = extra](const std::string& run) {
      std::vector<std::string> overrides = {"run.dir=\"" + dir.path + "/" + file + run + "\"",
                                            "train.steps=2",
                                            "train.log_every=1",
                                            "train.eval_every=0",
                                            "train.eval_batches=1",
                                            "train.checkpoint_every=2"};
      overrides.insert(overrides.end(), extra.begin(), extra.end());
      return config::load_run_config(experiments + "/" + file, overrides);
    };
    ASSERT_EQ(config(".0").model.dropout, 0.1);
    const auto parallel = train::run_training(config(".2"), options_for(world()));
    ASSERT_EQ(parallel.losses.size(), 2u);
    if (world().rank() == 0) {
      const auto single = train::run_training(config(".1"), options_for(Communicator::self()));
      expect_losses_near(parallel.losses, single.losses);
      const auto [parameters, where] = parameter_difference(parallel.checkpoint, single.checkpoint);
      EXPECT_LT(parameters, 1e-5) << where;
      std::printf("%s, dropout on: step losses", file.c_str());
      for (std::size_t i = 0; i < single.losses.size(); ++i)
        std::printf(" %.6f (2 processes %.6f)", single.losses[i], parallel.losses[i]);
      std::printf("; largest parameter difference %.2e of the largest parameter (%s)\n", parameters,
                  where.c_str());
    }
    barrier();
  }
}

// The classifier (issue 48) with dropout 0.1 everywhere, reversible local +
// LSH layers over a padding mask (matching_ends rows are full; ListOps rows
// end early, so it runs too; Retrieval's pairs of documents key their
// dropout by the encoder's global row, two a pair): two processes with half
// of every batch give the losses, the evaluation over the valid split (loss
// and correct rows) and the parameters of one process with the whole batch;
// with and without accumulation.
TEST(Families, ClassifierTwoProcessesEqualOne) {
  ASSERT_EQ(world().size(), 2) << "run under mpirun -np 2";
  SharedDir dir;
  const std::string pairs = dir.path + "/new_aan_pairs";
  if (world().rank() == 0) write_fake_retrieval(pairs, {24, 40, 5});
  barrier();
  const std::vector<std::vector<std::string>> variants = {
      {"data.task=\"retrieval\"", "data.path=\"" + pairs + "\"", "data.length=24",
       "model.vocab=257", "model.max_length=24"},
      {"train.accumulate=2"},
      {"data.task=\"listops\"", "data.length=64", "data.listops.min_length=8",
       "data.listops.max_length=64", "data.listops.max_depth=3", "model.vocab=16",
       "model.max_length=64", "data.examples.valid=40"}};
  for (std::size_t v = 0; v < variants.size(); ++v) {
    SCOPED_TRACE("variant " + std::to_string(v));
    auto config = [&](const std::string& run) {
      std::vector<std::string> overrides = {"model.dropout=0.1",
                                            "model.attention_dropout=0.1",
                                            "model.attention=[\"local\",\"lsh\"]",
                                            "train.eval_every=4",
                                            "train.eval_batches=5",
                                            "train.checkpoint_every=4"};
      overrides.insert(overrides.end(), variants[v].begin(), variants[v].end());
      return classifier_run(dir.path + "/" + run + std::to_string(v), 4, overrides);
    };
    const auto parallel = train::run_training(config("many"), options_for(world()));
    EXPECT_EQ(parallel.processes, 2);
    ASSERT_EQ(parallel.losses.size(), 4u);
    if (world().rank() == 0) {
      const auto single = train::run_training(config("one"), options_for(Communicator::self()));
      expect_losses_near(parallel.losses, single.losses);
      EXPECT_NEAR(parallel.last_eval.loss, single.last_eval.loss, 1e-5 * single.last_eval.loss);
      EXPECT_EQ(parallel.last_eval.tokens, single.last_eval.tokens);
      EXPECT_GT(single.last_eval.tokens, 0);
      EXPECT_EQ(parallel.last_eval.accuracy, single.last_eval.accuracy);
      const auto [parameters, where] = parameter_difference(parallel.checkpoint, single.checkpoint);
      EXPECT_LT(parameters, 1e-5) << where;
    }
    barrier();
  }
}

// A train.batch the two processes do not divide stops both with the key,
// the value and the process count named, for both families.
TEST(Families, AnOddBatchIsNamed) {
  SharedDir dir;
  const std::string corpus = write_corpus(dir.path);
  expect_error<ConfigError>(
      [&] {
        train::run_training(xl(dir.path + "/odd_xl", corpus, 2, {"train.batch=3"}),
                            options_for(world()));
      },
      {"train.batch is 3", "2 processes", "multiple", "e.g. 4"});
  expect_error<ConfigError>(
      [&] {
        train::run_training(seq2seq(dir.path + "/odd_s2s", 2, {"train.batch=5"}),
                            options_for(world()));
      },
      {"train.batch is 5", "2 processes", "multiple", "e.g. 6"});
  barrier();
}

}  // namespace
}  // namespace reformer
