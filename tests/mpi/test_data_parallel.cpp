// Data-parallel training (issue 21), run by `mpirun --oversubscribe -np 2`
// (tests/CMakeLists.txt): every process runs every test; the single-process
// references run on process 0 alone (Communicator::self()).
#include "mpi/mpi_test_support.hpp"
#include "reformer/config/run_config.hpp"
#include "reformer/core/distributed.hpp"
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

#include <algorithm>
#include <cmath>
#include <sstream>
#include <string>
#include <vector>

namespace reformer {
namespace {

using namespace reformer::testing;

// A reversible LM with local and LSH layers, dropout 0.1 everywhere (the LSH
// rotations are shared by the rows and the dropout masks are drawn by the
// global row, so splitting the rows over processes computes the same function).
config::RunConfig lm_run(const std::string& dir, std::int64_t steps,
                         const std::vector<std::string>& overrides = {}) {
  std::ostringstream toml;
  toml << "[run]\ndir = \"" << dir << "\"\n"
       << "[model]\nvocab = 16\nd_model = 32\nd_ff = 64\nheads = 2\nd_head = 16\nlayers = 3\n"
       << "attention = [\"local\", \"lsh\"]\npositions = \"axial\"\nmax_length = 32\n"
       << "dropout = 0.1\nattention_dropout = 0.1\nreversible = true\n"
       << "[model.lsh]\nchunk = 8\n[model.local]\nchunk = 8\n"
       << "[data]\ntask = \"copy\"\nlength = 32\nvocab = 16\n"
       << "[train]\nsteps = " << steps << "\nbatch = 8\nlearning_rate = 0.003\n"
       << "eval_every = 10\neval_batches = 2\nlog_every = 5\ncheckpoint_every = 5\n";
  return config::parse_run_config(toml.str(), "dp.toml", overrides);
}

std::vector<double> parameters_of(const config::RunConfig& config, const std::string& checkpoint) {
  ParameterSet<float> params;
  models::ReformerLM<float> model(lm_model_of(config), params);
  io::load_checkpoint<float>(checkpoint, params, nullptr);
  return to_host(params.values());
}

double max_relative(const std::vector<double>& a, const std::vector<double>& b) {
  double worst = 0, scale = 0;
  for (std::size_t i = 0; i < a.size(); ++i) scale = std::max(scale, double(std::abs(b[i])));
  for (std::size_t i = 0; i < a.size(); ++i)
    worst = std::max(worst, std::abs(double(a[i]) - double(b[i])) / scale);
  return worst;
}

// Two processes with half of the batch each give the losses, evaluations and
// final parameters of one process with the whole batch (20 steps, dropout
// on; the copy task's padding makes the processes' token counts differ):
// with the sums overlapped with the reversible backward, without, and with
// accumulation.
TEST(DataParallel, TwoProcessesEqualOneWithTheWholeBatch) {
  ASSERT_EQ(world().size(), 2) << "run under mpirun -np 2";
  SharedDir dir;
  const std::vector<std::vector<std::string>> variants = {
      {}, {"train.overlap_allreduce=false"}, {"train.accumulate=2"}};
  for (std::size_t v = 0; v < variants.size(); ++v) {
    SCOPED_TRACE("variant " + std::to_string(v));
    const std::string many = dir.path + "/many" + std::to_string(v);
    const std::string one = dir.path + "/one" + std::to_string(v);
    const auto parallel = train::run_training(lm_run(many, 20, variants[v]), options_for(world()));
    EXPECT_EQ(parallel.processes, 2);
    ASSERT_EQ(parallel.losses.size(), 20u);
    if (world().rank() == 0) {
      const auto single =
          train::run_training(lm_run(one, 20, variants[v]), options_for(Communicator::self()));
      for (std::size_t i = 0; i < 20; ++i)
        EXPECT_NEAR(parallel.losses[i], single.losses[i], 1e-5 * single.losses[i])
            << "step " << i + 1;
      EXPECT_NEAR(parallel.last_eval.loss, single.last_eval.loss, 1e-5 * single.last_eval.loss);
      EXPECT_EQ(parallel.last_eval.tokens, single.last_eval.tokens);
      const auto config = lm_run(one, 20);
      EXPECT_LT(max_relative(parameters_of(config, parallel.checkpoint),
                             parameters_of(config, single.checkpoint)),
                1e-5);
    }
    barrier();
  }
}

// A checkpoint written by two processes resumes on one (and the reverse):
// the data position is global and the dropout masks are drawn by the global
// row, so the losses continue those of an uninterrupted single-process run.
// A warm start from it gives the same losses on two processes as on one.
TEST(DataParallel, CheckpointsMoveBetweenProcessCounts) {
  SharedDir dir;
  const std::string a = dir.path + "/a", b = dir.path + "/b", ref = dir.path + "/ref";
  train::run_training(lm_run(a, 10), options_for(world()));
  std::vector<double> reference;
  if (world().rank() == 0) {
    reference = train::run_training(lm_run(ref, 20), options_for(Communicator::self())).losses;
    const auto resumed =
        train::run_training(lm_run(a, 20), options_for(Communicator::self(), true));
    ASSERT_EQ(resumed.losses.size(), 10u);
    for (std::size_t i = 0; i < 10; ++i)
      EXPECT_NEAR(resumed.losses[i], reference[10 + i], 1e-5 * reference[10 + i])
          << "step " << 11 + i;
    train::run_training(lm_run(b, 10), options_for(Communicator::self()));
  }
  barrier();
  const auto resumed = train::run_training(lm_run(b, 20), options_for(world(), true));
  ASSERT_EQ(resumed.losses.size(), 10u);
  if (world().rank() == 0)
    for (std::size_t i = 0; i < 10; ++i)
      EXPECT_NEAR(resumed.losses[i], reference[10 + i], 1e-5 * reference[10 + i])
          << "step " << 11 + i;
  barrier();
  // A warm start (train.init_from) from that run: every process loads the
  // weights, so two processes give one process's losses.
  const std::vector<std::string> warm = {"train.init_from=\"" + a + "\"",
                                         "train.learning_rate=0.001"};
  const auto parallel =
      train::run_training(lm_run(dir.path + "/w2", 4, warm), options_for(world()));
  ASSERT_EQ(parallel.losses.size(), 4u);
  if (world().rank() == 0) {
    const auto single =
        train::run_training(lm_run(dir.path + "/w1", 4, warm), options_for(Communicator::self()));
    const auto fresh =
        train::run_training(lm_run(dir.path + "/w0", 4, {"train.learning_rate=0.001"}),
                            options_for(Communicator::self()));
    for (std::size_t i = 0; i < 4; ++i)
      EXPECT_NEAR(parallel.losses[i], single.losses[i], 1e-5 * single.losses[i])
          << "step " << i + 1;
    EXPECT_LT(single.losses[0], fresh.losses[0]);  // the trained weights, not train.seed's
  }
  barrier();
}

// Bad input stops every process with the same error before any work: a
// batch the processes do not divide, configs that differ between processes,
// a model that cannot split its batches.
TEST(DataParallel, BadSetupsAreNamedOnEveryProcess) {
  SharedDir dir;
  expect_error<ConfigError>(
      [&] {
        train::run_training(lm_run(dir.path + "/odd", 2, {"train.batch=7"}), options_for(world()));
      },
      {"train.batch is 7", "2 processes", "multiple"});
  const std::string rate = world().rank() == 0 ? "0.003" : "0.004";
  expect_error<ConfigError>(
      [&] {
        train::run_training(lm_run(dir.path + "/differ", 2, {"train.learning_rate=" + rate}),
                            options_for(world()));
      },
      {"configs differ", "train.learning_rate"});
  barrier();
}

// The bucketed sums themselves: every bucket summed once whatever the order
// they are started in, in place and staged through a host copy.
TEST(DataParallel, GradientBucketsAreSummedOnce) {
  for (const bool stage : {false, true}) {
    SCOPED_TRACE(stage ? "staged" : "in place");
    View1<double> buffer("buffer", 1000);
    const double r = world().rank();
    Kokkos::deep_copy(buffer, 0.0);
    auto host = Kokkos::create_mirror_view(buffer);
    for (Index i = 0; i < 1000; ++i) host(i) = double(i) + 1000 * r;
    Kokkos::deep_copy(buffer, host);
    GradientAllreduce<double> sums(world(), buffer, {{0, 10}, {10, 500}, {500, 1000}}, stage);
    EXPECT_EQ(sums.direct(), !stage);
    sums.start(2);
    sums.progress();
    sums.start(0);
    sums.finish(60);
    Kokkos::deep_copy(host, buffer);
    for (Index i = 0; i < 1000; ++i) ASSERT_EQ(host(i), 2.0 * double(i) + 1000.0) << i;
    // A second round on the same buckets.
    sums.finish(60);
    Kokkos::deep_copy(host, buffer);
    EXPECT_EQ(host(7), 4.0 * 7 + 2000.0);
  }
}

// Gathering onto one process (Transformer-XL's memories for a checkpoint):
// every process's values in rank order on the root, nothing elsewhere, one
// process alone gets its own; counts that differ are named on every process.
TEST(DataParallel, GatherCollectsEveryProcessInRankOrder) {
  const int r = world().rank();
  const std::vector<float> mine = {float(10 * r), float(10 * r + 1), float(10 * r + 2)};
  for (const int root : {0, 1}) {
    const auto all = world().gather(mine, "the test's gather", 60, root);
    if (r == root)
      EXPECT_EQ(all, (std::vector<float>{0, 1, 2, 10, 11, 12}));
    else
      EXPECT_TRUE(all.empty());
  }
  EXPECT_EQ(Communicator::self().gather(std::vector<double>{1.5, 2.5}, "alone"),
            (std::vector<double>{1.5, 2.5}));
  expect_error<ShapeError>(
      [&] {
        world().gather(std::vector<double>(std::size_t(2 + r), 1.0), "the uneven gather", 60);
      },
      {"the uneven gather", "process 1 holds 3 values", "process 0 holds 2"});
  barrier();
}

}  // namespace
}  // namespace reformer
