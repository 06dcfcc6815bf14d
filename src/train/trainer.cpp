#include "reformer/train/trainer.hpp"

#include "reformer/core/distributed.hpp"
#include "reformer/core/error.hpp"
#include "reformer/core/memory_tracker.hpp"
#include "reformer/core/runtime.hpp"
#include "reformer/data/pairs.hpp"
#include "reformer/io/checkpoint.hpp"
#include "reformer/io/files.hpp"
#include "reformer/models/reformer_lm.hpp"
#include "reformer/ops/elementwise.hpp"
#include "reformer/train/chunk_choice.hpp"
#include "reformer/train/grad_clip.hpp"
#include "reformer/train/memory_sweep.hpp"
#include "reformer/train/model_family.hpp"
#include "reformer/train/optimizer.hpp"
#include "reformer/train/schedule.hpp"
#include "train/memory_check.hpp"
#include "train/run_folder.hpp"
#include "train/workload.hpp"

#include <fcntl.h>
#include <unistd.h>
#include <optional>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <set>
#include <sstream>

namespace reformer::train {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// Streams of the run's randomness (all from train.seed).
enum Stream : std::uint64_t { kInit = 1, kStep = 2, kEval = 3 };  // 4: sampling.cpp

// Keys whose change does not change what a resumed run computes.
// train.precision too: a float32 checkpoint fine-tunes in bf16 and back (the
// checkpoint holds the float32 master weights and moments either way).
const std::vector<std::string> kResumableKeys = {"train.steps",
                                                 "train.precision",
                                                 "train.eval_every",
                                                 "train.eval_batches",
                                                 "train.log_every",
                                                 "train.checkpoint_every",
                                                 "train.keep_checkpoints",
                                                 "train.skip_nonfinite",
                                                 "train.target_accuracy",
                                                 "train.overlap_allreduce",
                                                 "train.allreduce_timeout",
                                                 "train.init_from",
                                                 "run.dir",
                                                 "run.name"};

std::atomic<int> stop_requested{0};
extern "C" void request_stop(int) { stop_requested.store(1); }

// SIGINT and SIGTERM set a flag for the life of the object; the loop finishes
// its step, writes a checkpoint and returns.
class SignalGuard {
 public:
  explicit SignalGuard(bool active) : active_(active) {
    stop_requested.store(0);
    if (!active_) return;
    struct sigaction action {};
    action.sa_handler = request_stop;
    sigemptyset(&action.sa_mask);
    sigaction(SIGINT, &action, &old_int_);
    sigaction(SIGTERM, &action, &old_term_);
  }
  ~SignalGuard() {
    if (!active_) return;
    sigaction(SIGINT, &old_int_, nullptr);
    sigaction(SIGTERM, &old_term_, nullptr);
  }
  SignalGuard(const SignalGuard&) = delete;
  SignalGuard& operator=(const SignalGuard&) = delete;

 private:
  bool active_;
  struct sigaction old_int_ {};
  struct sigaction old_term_ {};
};

std::string duration(double seconds) {
  const long s = long(std::max(0.0, seconds) + 0.5);
  char text[32];
  if (s >= 3600)
    std::snprintf(text, sizeof text, "%ld:%02ld:%02ld", s / 3600, s / 60 % 60, s % 60);
  else
    std::snprintf(text, sizeof text, "%ld:%02ld", s / 60, s % 60);
  return text;
}

std::string number(double value, int precision = 6) {
  std::ostringstream text;
  text.precision(precision);
  text << value;
  return text.str();
}

std::string mib(std::int64_t bytes) { return number(double(bytes) / (1 << 20), 5); }

template <class T>
EvalResult evaluate_workload(Workload<T>& w, data::Split split, std::int64_t batches,
                             std::int64_t batch_size, std::uint64_t seed,
                             const Communicator& comm = Communicator::self(), double timeout = 0) {
  EvalResult result;
  result.unit = w.scored_unit();
  const auto start = Clock::now();
  double loss_sum = 0;
  std::int64_t correct = 0;
  Index same = 0, decoded = 0;
  for (std::int64_t i = 0; i < batches; ++i) {
    const auto r = w.evaluate(split, std::uint64_t(i), batch_size,
                              {{seed, stream_id(kEval, std::uint64_t(i))}, false});
    // The targets' negative log-likelihood: model.label_smoothing shapes the
    // training objective, not what an evaluation reports.
    loss_sum += r.nll * double(r.tokens);
    result.tokens += r.tokens;
    correct += r.correct;
    const auto [match, total] = w.exact_matches(split, std::uint64_t(i), batch_size);
    same += match;
    decoded += total;
  }
  // Each process scored its rows: the sums over all of them.
  std::vector<double> sums = {loss_sum, double(result.tokens), double(correct), double(same),
                              double(decoded)};
  comm.sum(sums, "the evaluation's sums", timeout);
  loss_sum = sums[0];
  result.tokens = std::int64_t(sums[1]);
  correct = std::int64_t(sums[2]);
  same = Index(sums[3]);
  decoded = Index(sums[4]);
  if (result.tokens > 0) {
    result.loss = loss_sum / double(result.tokens);
    result.accuracy = double(correct) / double(result.tokens);
  }
  result.bits_per_token = result.loss / std::log(2.0);
  if (decoded > 0) result.exact_match = double(same) / double(decoded);
  Kokkos::fence();
  result.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return result;
}

// Peak bytes of each phase the tracker closed since the last clear.
std::vector<std::string> phase_peaks() {
  std::map<std::string, std::int64_t> peak;
  for (const auto& p : MemoryTracker::instance().phases())
    peak[p.phase] = std::max(peak[p.phase], p.peak_bytes);
  std::vector<std::string> out;
  for (const char* name : {"forward", "loss", "backward", "optimizer"})
    out.push_back(peak.count(name) ? mib(peak[name]) : "");
  return out;
}

// The metadata of the checkpoint a run resumes from must agree with itself and
// with the run: its name, its optimizer's steps, the data position (steps and
// skipped batches times accumulate), the seed and the run's configured steps.
// A disagreement means the file was edited or mixed up; nothing is loaded.
void check_resume_point(const std::string& path, const io::CheckpointMeta& meta,
                        const config::RunConfig& stored) {
  const std::string where = "train --resume: \"" + path + "\"";
  const char* fix =
      "; the file was edited, renamed or damaged: restore it or use an earlier "
      "checkpoint of the run";
  require<IoError>(io::checkpoint_step(path) == meta.step, where, " holds step ", meta.step,
                   " but its name says step ", io::checkpoint_step(path), fix);
  // -1: written without an optimizer (the Hugging Face importer's default).
  require<IoError>(meta.optimizer_steps != -1, where,
                   " holds parameters but no optimizer state (a checkpoint written without "
                   "one, as experiments/hf_import/import_hf_reformer.py writes by default), so "
                   "training cannot resume from it; start a new run from its weights with "
                   "train --init-from (train.init_from), or import the model again with "
                   "--optimizer-state to continue it with train --resume");
  require<IoError>(meta.optimizer_steps == meta.step, where, " is at step ", meta.step,
                   " but its optimizer took ", meta.optimizer_steps, " steps", fix);
  const std::uint64_t position =
      std::uint64_t(meta.step + meta.skipped_batches) * std::uint64_t(stored.train.accumulate);
  require<IoError>(meta.data_position == position, where, " has data position ", meta.data_position,
                   " but ", meta.step, " steps and ", meta.skipped_batches,
                   " skipped batches of train.accumulate = ", stored.train.accumulate,
                   " micro-batches make ", position, fix);
  require<IoError>(meta.step <= stored.train.steps, where, " is at step ", meta.step,
                   " beyond the train.steps = ", stored.train.steps, " of the run that wrote it",
                   fix);
  require<IoError>(meta.seed == stored.train.seed, where, " has seed ", meta.seed,
                   " but its config says train.seed = ", stored.train.seed, fix);
}

// The flat gradient buffer cut into buckets: each layer's range (as its
// model registered it, Workload::layer_gradient_ranges) and the runs between
// them (embedding, positions, head), covering the buffer exactly once;
// layer_bucket[i] is layer i's bucket (-1 without per-layer ranges).
struct Buckets {
  std::vector<std::pair<Index, Index>> ranges;
  std::vector<std::int64_t> layer_bucket;
};

Buckets gradient_buckets(const std::vector<std::pair<Index, Index>>& layers, Index total,
                         Index layer_count) {
  Buckets b;
  b.layer_bucket.assign(std::size_t(layer_count), -1);
  std::vector<std::size_t> order(layers.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(),
            [&](std::size_t x, std::size_t y) { return layers[x].first < layers[y].first; });
  Index at = 0;
  for (const std::size_t i : order) {
    const auto [first, end] = layers[i];
    require<Error>(first >= at && end > first && end <= total, "gradient_buckets: layer ", i,
                   "'s range [", first, ", ", end, ") overlaps another or leaves the buffer of ",
                   total);
    if (first > at) b.ranges.push_back({at, first});
    if (std::int64_t(i) < std::int64_t(layer_count))
      b.layer_bucket[i] = std::int64_t(b.ranges.size());
    b.ranges.push_back({first, end});
    at = end;
  }
  if (at < total || b.ranges.empty()) b.ranges.push_back({at, total});
  return b;
}

// The newest checkpoint of the run folder, for error messages.
std::string newest_checkpoint(const std::string& run_dir) {
  const auto latest = io::latest_checkpoint(run_dir);
  return latest ? *latest : std::string("none (no checkpoint was saved yet)");
}

// Every key whose value differs between a run's stored config and the one
// with the overrides, in to_toml's order, as "model.d_model: 64 in the run,
// 128 here".
std::vector<std::string> changed_keys(const config::RunConfig& stored,
                                      const config::RunConfig& overridden) {
  std::vector<std::string> changed, seen;
  for (;;) {
    const auto difference = config::first_difference(stored, overridden, seen, "in the run");
    if (difference.empty()) return changed;
    changed.push_back(difference);
    seen.push_back(difference.substr(0, difference.find(':')));
  }
}

// The differences of changed_keys joined by "; ".
std::string joined(const std::vector<std::string>& differences) {
  std::string list;
  for (const auto& difference : differences) list += (list.empty() ? "" : "; ") + difference;
  return list;
}

// The checkpoint a warm start (train.init_from) loads its parameters from.
struct InitPoint {
  std::string checkpoint;  // "" without train.init_from
  io::CheckpointMeta meta;
};

// train.init_from resolved and checked as eval reads a checkpoint (a missing
// or damaged file, a name that says another step: IoError), and its
// parameters' dtype against train.dtype (ConfigError).
InitPoint init_point(const config::RunConfig& config) {
  InitPoint init;
  const std::string& from = config.train.init_from;
  if (from.empty()) return init;
  try {
    init.checkpoint = resolve_checkpoint(from);
    init.meta = io::read_target_meta(from, init.checkpoint);
    check_checkpoint_name(init.checkpoint, init.meta.step);
  } catch (const IoError& e) {
    throw IoError(detail::concat("train.init_from = \"", from, "\": ", e.what()));
  }
  require<ConfigError>(init.meta.dtype == config.train.dtype, "train.init_from: ", init.checkpoint,
                       " holds ", init.meta.dtype, " parameters but train.dtype is \"",
                       config.train.dtype,
                       "\"; a warm start loads the parameters as they are: set "
                       "train.dtype = \"",
                       init.meta.dtype, "\"");
  return init;
}

// A warm start whose checkpoint the model does not match: the keys of the
// model (and the vocabulary) in which this config differs from the
// checkpoint's run, with the fix.
ConfigError init_mismatch(const io::CheckpointMismatchError& e, const InitPoint& init,
                          const config::RunConfig& config) {
  // The model keys that differ, less those that never shape a parameter
  // (rates, rounds, chunks), which a fine-tuning run may change.
  std::vector<std::string> shaping;
  try {
    for (const auto& difference :
         changed_keys(config::parse_run_config(init.meta.config, init.checkpoint), config)) {
      const std::string key = difference.substr(0, difference.find(':'));
      const bool never_shapes = key.find("dropout") != std::string::npos ||
                                key.find("label_smoothing") != std::string::npos ||
                                key.find("chunk") != std::string::npos ||
                                key.find("n_hashes") != std::string::npos ||
                                key.find("n_buckets") != std::string::npos;
      if ((key.rfind("model.", 0) == 0 || key == "data.vocab") && !never_shapes)
        shaping.push_back(difference);
    }
  } catch (const Error&) {  // a stored config this build no longer reads: no list
  }
  return ConfigError(detail::concat(
      "train.init_from: ", e.what(), ". ",
      shaping.empty()
          ? std::string("This config builds another model than the checkpoint's run")
          : "This config's model differs from the checkpoint's run in " + joined(shaping),
      "; a warm start loads every parameter of the checkpoint into the model of this config, "
      "so the keys that shape the weights (among them model.type, model.vocab, model.d_model, "
      "model.d_ff, model.layers, the attention kinds and model.qk) must be as in that run"));
}

// Every process must run the same config (a different data.path or model on
// one rank would average unrelated gradients): ConfigError naming the first
// difference otherwise.
void require_same_config(const config::RunConfig& config, const Communicator& comm) {
  const int ranks = comm.size();
  const std::string mine = config::to_toml(config);
  const std::string lead = comm.broadcast(mine);
  std::vector<double> differs(std::size_t(ranks), 0.0);
  differs[std::size_t(comm.rank())] = mine == lead ? 0.0 : 1.0;
  comm.sum(differs, "the config check", config.train.allreduce_timeout);
  const auto first = std::find(differs.begin(), differs.end(), 1.0);
  if (first != differs.end()) {
    const int other = int(first - differs.begin());
    const std::string theirs = comm.broadcast(mine, other);
    throw ConfigError(detail::concat(
        "train: the processes' configs differ (",
        config::first_difference(config::parse_run_config(lead, "rank 0"),
                                 config::parse_run_config(theirs, "rank " + std::to_string(other)),
                                 {}, "on rank 0", "on rank " + std::to_string(other)),
        "; ", std::count(differs.begin(), differs.end(), 1.0), " of ", ranks,
        " processes differ from rank 0); start every process with the same config and "
        "overrides"));
  }
}

// What setup_training builds for one call of train, and what its steps read
// and update. The members are built in their order here, so they are taken
// down in reverse: the signal handlers first, the run folder's lock last.
template <class T>
struct TrainingRun {
  TrainingRun(const config::RunConfig& config, const TrainOptions& options)
      : config(config),
        tc(config.train),
        comm(options.comm ? *options.comm : Communicator::world()),
        ranks(comm.size()),
        leader(comm.rank() == 0),
        out(!leader ? null_stream : (options.out ? *options.out : std::cout)) {}
  TrainingRun(const TrainingRun&) = delete;
  TrainingRun& operator=(const TrainingRun&) = delete;

  const config::RunConfig& config;
  const config::TrainConfig& tc;
  // Data parallelism: every process holds a replica and computes its share of
  // the rows of each batch; process 0 alone writes (run folder, metrics,
  // checkpoints, progress).
  const Communicator& comm;
  const int ranks;
  const bool leader;
  std::ostream null_stream{nullptr};
  std::ostream& out;
  std::optional<io::RunLock> lock;

  TrainSummary summary;
  std::uint64_t data_position = 0;
  std::int64_t skipped = 0;  // batches skipped by the divergence guard
  // train.eval_batches, at most the valid split once where it has an end.
  std::int64_t eval_batches = 0;
  std::unique_ptr<Workload<T>> workload;
  std::optional<Adam<T>> adam;
  std::optional<LearningRateSchedule> schedule;
  std::string resolved;  // the config as config.toml and the checkpoints hold it
  std::optional<MetricsLog> metrics;
  Buckets buckets;
  std::optional<GradientAllreduce<T>> allreduce;
  double allreduce_seconds = 0;
  std::optional<SignalGuard> signals;

  // The loop: when it began, the steps taken, and the window of the next log
  // line (the steps since the last one).
  Clock::time_point loop_start, window_start;
  std::int64_t window_tokens = 0;
  double window_loss = 0, window_accuracy = 0;
  std::int64_t window_steps = 0;
  std::int64_t step = 0;
};

// A file in the run folder's place is a config error, not a full disk.
void require_run_dir_is_a_folder(const config::RunConfig& config) {
  require<ConfigError>(!fs::exists(config.run_dir) || fs::is_directory(config.run_dir),
                       "train: run.dir is \"", config.run_dir,
                       "\", which is a file, not a folder; set run.dir to a folder (new or of "
                       "this run)");
}

// A new run into a folder where an earlier run left no checkpoint (it was
// killed or failed before its first one): that run's config.toml and metrics
// are kept as "<name>.<n>", n the first number free for all of them, instead
// of being written over. Returns the "<name> as <name>.<n>" moves.
std::vector<std::string> keep_earlier_run_files(const std::string& run_dir) {
  std::vector<std::string> present;
  for (const char* name : {"config.toml", "metrics.csv", "metrics.jsonl"})
    if (fs::exists(run_dir + "/" + name)) present.push_back(name);
  int n = 1;
  const auto number_is_free = [&] {
    return std::none_of(present.begin(), present.end(), [&](const std::string& name) {
      return fs::exists(run_dir + "/" + name + "." + std::to_string(n));
    });
  };
  while (!present.empty() && !number_is_free()) ++n;
  std::vector<std::string> moves;
  for (const std::string& name : present) {
    const std::string kept = name + "." + std::to_string(n);
    std::error_code error;
    fs::rename(run_dir + "/" + name, run_dir + "/" + kept, error);
    if (error)
      io::throw_write_error("train", "rename to " + kept + " the earlier run's file",
                            run_dir + "/" + name, error.value());
    moves.push_back(name + " as " + kept);
  }
  return moves;
}

// The newest checkpoint of the run folder and its metadata, checked against
// itself and the config (train --resume): IoError for a missing or damaged
// checkpoint, ConfigError for a config that differs from the run's.
struct ResumePoint {
  std::string checkpoint;
  io::CheckpointMeta meta;
  config::RunConfig stored;  // the config the checkpoint holds
};

ResumePoint resume_checks(const config::RunConfig& config) {
  require_run_dir_is_a_folder(config);
  const auto latest = io::latest_checkpoint(config.run_dir);
  require<IoError>(latest.has_value(), "train --resume: no checkpoint in '", config.run_dir,
                   "/checkpoints'; start the run without --resume");
  const auto meta = io::read_target_meta(config.run_dir, *latest);  // checksummed
  const auto stored = config::parse_run_config(meta.config, *latest);
  check_resume_point(*latest, meta, stored);
  const auto difference = config::first_difference(stored, config, kResumableKeys);
  require<ConfigError>(difference.empty(), "train --resume: the config differs from the run's (",
                       difference, "); resume with the run's config or start a new run");
  require<ConfigError>(meta.step <= config.train.steps, "train --resume: ", *latest, " is at step ",
                       meta.step, " but train.steps is ", config.train.steps,
                       "; set train.steps above ", meta.step, " to train further");
  return {*latest, meta, stored};
}

// With --resume, the newest checkpoint of the run folder, checked against
// itself and the config; its step, data position and skipped batches become
// the run's. Empty for a new run, which refuses a run folder that holds
// checkpoints.
template <class T>
std::optional<ResumePoint> resume_point(TrainingRun<T>& run, bool resume) {
  const auto& config = run.config;
  // A new run never overwrites one that is already saved.
  require<ConfigError>(resume || !io::latest_checkpoint(config.run_dir).has_value(),
                       "train: run.dir '", config.run_dir,
                       "' already holds checkpoints; continue it with --resume or choose another "
                       "run.dir");
  if (!resume) return std::nullopt;
  auto point = resume_checks(config);
  run.summary.first_step = point.meta.step;
  run.data_position = point.meta.data_position;
  run.skipped = point.meta.skipped_batches;
  return point;
}

// Everything before the first step: the checks of the config (the same on
// every process), the memory and the data; the run folder (its lock, config.toml,
// the metrics log); with --resume, the checks of the newest checkpoint and its
// weights, moments and data position; the workload, the optimizer, the
// schedule, the gradient sums, the memory tracker and the signal handlers;
// the run's first line.
template <class T>
std::unique_ptr<TrainingRun<T>> setup_training(const config::RunConfig& config,
                                               const TrainOptions& options) {
  auto owned = std::make_unique<TrainingRun<T>>(config, options);
  TrainingRun<T>& run = *owned;
  const auto& tc = config.train;
  const Communicator& comm = run.comm;
  const int ranks = run.ranks;
  const bool leader = run.leader;
  std::ostream& out = run.out;
  TrainSummary& summary = run.summary;
  require<ConfigError>(tc.batch % ranks == 0, "train: train.batch is ", tc.batch,
                       " but the run has ", ranks,
                       " processes; train.batch (the sequences of a micro-batch over all "
                       "processes) must be a multiple of the processes, e.g. ",
                       (tc.batch / ranks + 1) * ranks);
  if (ranks > 1) require_same_config(config, comm);
  // The config the model is built from: "auto" chunks resolved for this
  // process's rows (run.resolved below keeps "auto", as the user wrote it).
  const config::RunConfig built = require_memory_fits(config, tc.batch / ranks, true, "train");
  check_run_data(config);
  // A new run may start from another run's weights (a resumed one has its
  // own), named before the run folder is made; every process loads the file
  // that process 0 resolved (a run folder's newest checkpoint changes while
  // that run goes on).
  InitPoint init = options.resume ? InitPoint{} : init_point(config);
  if (ranks > 1 && !options.resume) {
    const std::string chosen = comm.broadcast(init.checkpoint);
    if (chosen != init.checkpoint) {
      init.checkpoint = chosen;
      init.meta = io::read_checkpoint_meta(chosen);
    }
  }
  // One writer per run folder: a second `train` (fresh or --resume) stops here,
  // naming the first one's pid, before it reads or writes anything.
  bool made_folder = false;  // by this process, for this run
  if (leader) {
    require_run_dir_is_a_folder(config);
    made_folder = !fs::exists(config.run_dir);
    write_run_folder(config.run_dir, [&] {
      std::error_code error;
      fs::create_directories(config.run_dir, error);
      if (error)
        io::throw_write_error("train", "create the run folder", config.run_dir, error.value());
      run.lock.emplace(config.run_dir, "train");
    });
    for (const auto& path : io::remove_stale_temporaries(config.run_dir))
      out << "removed " << path << " (left by a process that was killed while writing it)"
          << std::endl;
  }

  // A run that fails before its first step (data the task refuses, a
  // checkpoint this model does not fit) leaves no new run folder behind.
  const auto discard_new_folder = [&] {
    if (!made_folder) return;
    run.lock.reset();
    std::error_code ignored;
    fs::remove_all(config.run_dir, ignored);
  };
  const std::optional<ResumePoint> resumed = resume_point(run, options.resume);
  const std::string resume_from = resumed ? resumed->checkpoint : "";
  try {
    run.workload = make_workload<T>(built);
  } catch (const std::exception&) {
    discard_new_folder();
    throw;
  }
  Workload<T>& w = *run.workload;
  // More evaluation batches than the valid split holds would score its first
  // ones again (Transformer-XL's streams wrap around): the whole split instead.
  const std::int64_t valid_batches = w.batches_in_split(data::Split::Valid, tc.batch);
  run.eval_batches = tc.eval_batches;
  if (valid_batches >= 0 && tc.eval_batches > valid_batches) {
    run.eval_batches = valid_batches;
    out << "evaluating the whole valid split, " << valid_batches << " batches of " << tc.batch
        << " rows (train.eval_batches = " << tc.eval_batches << " would repeat it)\n";
  }
  w.shard(comm);
  w.init({tc.seed, stream_id(kInit)});
  if (!init.checkpoint.empty()) {
    try {
      io::load_checkpoint<T>(init.checkpoint, w.params, nullptr);  // refuses non-finite values
    } catch (const Error& e) {
      discard_new_folder();
      const auto* mismatch = dynamic_cast<const io::CheckpointMismatchError*>(&e);
      if (mismatch) throw init_mismatch(*mismatch, init, config);
      throw;
    }
  }
  // The step's workspace at its predicted size, so that the first step does
  // not grow it in pieces beside what it already holds (which peaked up to
  // 40% above the later steps); train_step shrinks it to what was used.
  w.workspace().reserve(workspace_reserve(
      model_family(built).predict_run_memory(built, tc.batch / ranks, true).workspace));
  summary.workspace_reserved = w.workspace().capacity_bytes();
  AdamConfig adam_config = tc.adam;
  adam_config.decoupled_weight_decay = tc.optimizer == "adamw";
  Adam<T>& adam = run.adam.emplace(w.params, adam_config);
  run.schedule.emplace(LearningRateSchedule::from_name(to_string(tc.schedule), tc.learning_rate,
                                                       std::max<std::int64_t>(1, tc.warmup_steps),
                                                       config.model.d_model));
  // The run records the file it started from (a folder's newest checkpoint
  // changes as that run goes on), and a resumed run keeps that record
  // whatever its config says (the key does not take part in a resume).
  config::RunConfig recorded = config;
  recorded.train.init_from = resumed ? resumed->stored.train.init_from : init.checkpoint;
  run.resolved = config::to_toml(recorded);
  if (!init.checkpoint.empty())
    out << "initialized from " << init.checkpoint << " (step " << init.meta.step
        << " of its run); step, data, optimizer and schedule start afresh\n";
  if (!resume_from.empty()) {
    io::load_checkpoint<T>(resume_from, w.params, &adam);  // refuses non-finite values
    w.load_state(resume_from, run.data_position);
    out << "resumed from " << resume_from << " at step " << summary.first_step << '\n';
    if (summary.first_step == tc.steps)
      out << "the run has already taken its train.steps = " << tc.steps
          << " steps; raise train.steps to train further\n";
  }
  if (leader)
    write_run_folder(config.run_dir, [&] {
      if (!options.resume)
        for (const std::string& move : keep_earlier_run_files(config.run_dir))
          out << "kept the earlier run's " << move << " (it saved no checkpoint)\n";
      io::write_file_atomically(config.run_dir + "/config.toml", run.resolved, "train");
      run.metrics.emplace(config.run_dir + "/metrics." + tc.metrics_format, tc.metrics_format,
                          options.resume ? summary.first_step : -1);
    });
  // The gradient sum over the processes: one bucket per layer, started by the
  // backward as soon as it has finished that layer (train.overlap_allreduce),
  // the rest when the backward returns.
  run.buckets =
      gradient_buckets(w.layer_gradient_ranges(), Index(w.params.grads().extent(0)), w.layers());
  GradientAllreduce<T>& allreduce =
      run.allreduce.emplace(comm, w.params.grads(), run.buckets.ranges);
  MemoryTracker::instance().install();
  run.signals.emplace(options.handle_signals);

  out << "run " << config.run_dir << ": " << w.describe() << "; " << w.params.size() << " tensors, "
      << w.params.total_elements() << " parameters (" << model_family(config).summary(config)
      << ", " << tc.dtype << (tc.precision == "bf16" ? ", bf16 activations" : "")
      << describe_auto_chunks(config, built) << ")";
  if (ranks > 1)
    out << "; " << ranks << " processes (" << mpi_description() << "), " << tc.batch / ranks
        << " sequences each, gradient sums "
        << (tc.overlap_allreduce ? "overlapped with the backward" : "after the backward") << ", "
        << (allreduce.direct() ? "in place" : "staged through pinned host memory");
  out << '\n';

  run.loop_start = Clock::now();
  run.window_start = run.loop_start;
  run.step = summary.first_step;
  return owned;
}

// What a step the optimizer took leaves to its report.
struct StepResult {
  double loss = 0;  // the mean over the step's counted tokens (of every process)
  std::int64_t tokens = 0, correct = 0;
  double grad_norm = 0;
  bool stop_everywhere = false;  // over several processes: the stop request, summed
};

// One step: the train.accumulate micro-batches, each weighted by its share of
// the step's tokens; the gradient sums over the processes; the divergence
// guard; clipping and the optimizer's update. Empty when the guard skipped the
// batch (the data moved on, the step was not taken).
template <class T>
std::optional<StepResult> train_step(TrainingRun<T>& run) {
  const auto& tc = run.tc;
  const Communicator& comm = run.comm;
  const int ranks = run.ranks;
  Workload<T>& w = *run.workload;
  const std::int64_t step = run.step;
  MemoryTracker::instance().clear_phases();
  w.params.zero_grad();
  double step_loss = 0;
  std::int64_t step_tokens = 0, step_correct = 0;
  // Several micro-batches make one step whose loss is the mean over all of
  // their counted tokens: micro-batch i's gradients are weighted by its share
  // n_i / N of them (padding and ignored targets do not count).
  // Over several processes the shares are of all processes' tokens, so
  // that the summed gradients are those of one process with every row.
  std::vector<double> share(std::size_t(tc.accumulate), 1.0);
  bool stop_everywhere = false;
  if (tc.accumulate > 1 || ranks > 1) {
    std::vector<double> total = {0.0};
    for (std::int64_t micro = 0; micro < tc.accumulate; ++micro)
      total[0] += double(share[std::size_t(micro)] = double(
                             w.target_tokens(run.data_position + std::uint64_t(micro), tc.batch)));
    comm.sum(total, "the token count", tc.allreduce_timeout);
    for (auto& s : share) s = total[0] > 0 ? s / total[0] : 1.0 / double(tc.accumulate * ranks);
  }
  for (std::int64_t micro = 0; micro < tc.accumulate; ++micro) {
    const double weight = share[std::size_t(micro)];
    // The last micro-batch ends the accumulation: its backward starts the
    // sums of the layers it finishes.
    if (ranks > 1 && tc.overlap_allreduce && micro + 1 == tc.accumulate)
      w.after_layer = [&buckets = run.buckets, &allreduce = *run.allreduce](Index layer) {
        const auto bucket = buckets.layer_bucket[std::size_t(layer)];
        if (bucket >= 0) allreduce.start(std::size_t(bucket));
        allreduce.progress();
      };
    const auto r = w.forward_backward(
        run.data_position++, tc.batch,
        {{tc.seed, stream_id(kStep, std::uint64_t(step), std::uint64_t(micro))}, true, weight});
    w.after_layer = nullptr;
    step_loss += r.tokens > 0 ? weight * r.loss : 0.0;
    step_tokens += r.tokens;
    step_correct += r.correct;
  }
  // The workspace reserved before the first step, down to what it used.
  if (step == run.summary.first_step) {
    run.summary.workspace_used = w.workspace().high_water_bytes();
    w.workspace().shrink_to_high_water();
  }
  if (ranks > 1) {
    run.allreduce_seconds += run.allreduce->finish(tc.allreduce_timeout);
    std::vector<double> sums = {step_loss, double(step_tokens), double(step_correct),
                                double(stop_requested.load())};
    comm.sum(sums, "the step's loss", tc.allreduce_timeout);
    step_loss = sums[0];
    step_tokens = std::int64_t(sums[1]);
    step_correct = std::int64_t(sums[2]);
    stop_everywhere = sums[3] > 0;
  }
  double grad_norm = 0;
  {
    ScopedMemoryPhase phase("optimizer");
    if (std::isfinite(step_loss)) grad_norm = global_grad_norm(w.params);
    // The divergence guard: a non-finite loss or gradient norm never reaches
    // the optimizer. The batch is skipped (up to train.skip_nonfinite times)
    // or the run stops, with the parameters as they were.
    if (!std::isfinite(step_loss) || !std::isfinite(grad_norm)) {
      const std::string what = !std::isfinite(step_loss)
                                   ? "the loss is " + number(step_loss)
                                   : "the gradient norm is " + number(grad_norm);
      if (run.skipped < tc.skip_nonfinite) {
        ++run.skipped;
        run.out << "step " << step + 1 << ": " << what
                << "; skipped the batch, the parameters unchanged (" << run.skipped
                << " of train.skip_nonfinite = " << tc.skip_nonfinite << ")\n";
        return std::nullopt;
      }
      const auto saved = io::latest_checkpoint(run.config.run_dir);
      throw DivergenceError(detail::concat(
          "train: step ", step + 1, " diverged: ", what,
          "; the parameters were not updated and no checkpoint was saved. ",
          saved ? detail::concat("The newest checkpoint is ", *saved, ". ")
                : std::string("The run has no checkpoint yet. "),
          "Start a new run with a lower train.learning_rate (", tc.learning_rate,
          ") or with train.clip_norm set (", tc.clip_norm, " now)",
          saved ? detail::concat(", or resume this one with train.skip_nonfinite = N (",
                                 tc.skip_nonfinite, " now) to skip such batches")
                : std::string(", or with train.skip_nonfinite = N (") +
                      std::to_string(tc.skip_nonfinite) + " now) to skip such batches"));
    }
    if (tc.clip_norm > 0) clip_grad_norm(w.params, tc.clip_norm, grad_norm);
    run.adam->step((*run.schedule)(step + 1));
  }
  Kokkos::fence();
  ++run.step;
  run.summary.losses.push_back(step_loss);
  return StepResult{step_loss, step_tokens, step_correct, grad_norm, stop_everywhere};
}

// Adds a step the optimizer took to the window of the log line and, when a
// line is due (train.log_every, the last step or a stop), prints it and writes
// its metrics row. Returns whether the run stops after this step.
template <class T>
bool report_step(TrainingRun<T>& run, const StepResult& result) {
  const auto& tc = run.tc;
  const auto& schedule = *run.schedule;
  const std::int64_t step = run.step;
  std::ostream& out = run.out;
  run.window_tokens += tc.batch * tc.accumulate * run.workload->sequence_tokens();
  run.window_loss += result.loss;
  run.window_accuracy += result.tokens > 0 ? double(result.correct) / double(result.tokens) : 0.0;
  ++run.window_steps;
  const bool last = step == tc.steps;
  // Over several processes, the stop request as summed with the step's loss
  // (a signal that reaches one process late must not split the run).
  const bool stop = run.ranks > 1 ? result.stop_everywhere : stop_requested.load() != 0;
  if ((tc.log_every > 0 && step % tc.log_every == 0) || last || stop) {
    const auto now = Clock::now();
    const double window = std::chrono::duration<double>(now - run.window_start).count();
    const double elapsed = std::chrono::duration<double>(now - run.loop_start).count();
    const double per_step = elapsed / double(step - run.summary.first_step);
    const double rate = window > 0 ? double(run.window_tokens) / window : 0.0;
    const double loss = run.window_loss / double(run.window_steps);
    out << "step " << step << "/" << tc.steps << "  loss " << number(loss, 5) << "  acc "
        << number(run.window_accuracy / double(run.window_steps), 4) << "  lr "
        << number(schedule(step), 3) << "  " << long(rate) << " tok/s  elapsed "
        << duration(elapsed) << "  eta " << duration(per_step * double(tc.steps - step)) << '\n';
    out.flush();
    auto row = std::vector<std::string>{std::to_string(step),
                                        "train",
                                        number(loss),
                                        number(loss / std::log(2.0)),
                                        number(run.window_accuracy / double(run.window_steps)),
                                        std::to_string(run.window_tokens),
                                        number(rate),
                                        number(schedule(step)),
                                        number(result.grad_norm),
                                        number(elapsed)};
    for (const auto& peak : phase_peaks()) row.push_back(peak);
    if (run.metrics) write_run_folder(run.config.run_dir, [&] { run.metrics->row(row); });
    run.window_start = now;
    run.window_tokens = run.window_steps = 0;
    run.window_loss = run.window_accuracy = 0;
  }
  return stop;
}

// The evaluation on the validation split after `step`: its line and metrics
// row. Returns whether it reached train.target_accuracy.
template <class T>
bool evaluate_run(TrainingRun<T>& run, std::int64_t step) {
  const auto& tc = run.tc;
  const auto start = Clock::now();
  run.summary.last_eval = evaluate_workload(*run.workload, data::Split::Valid, run.eval_batches,
                                            tc.batch, tc.seed, run.comm, tc.allreduce_timeout);
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  const auto& e = run.summary.last_eval;
  run.out << "eval step " << step << ": loss " << number(e.loss, 5) << ", bits/" << e.unit << ' '
          << number(e.bits_per_token, 5) << ", accuracy " << number(e.accuracy, 5)
          << (e.exact_match >= 0 ? ", exact match " + number(e.exact_match, 5) : std::string())
          << " (" << e.tokens << ' ' << e.unit << "s, " << number(seconds, 3) << " s)\n";
  if (run.metrics)
    write_run_folder(run.config.run_dir, [&] {
      run.metrics->row({std::to_string(step), "eval", number(e.loss), number(e.bits_per_token),
                        number(e.accuracy), std::to_string(e.tokens), "", "", "", number(seconds),
                        "", "", "", ""});
    });
  // With exact matches (the encoder-decoder), the target is on whole sequences.
  const double score = e.exact_match >= 0 ? e.exact_match : e.accuracy;
  return tc.target_accuracy > 0 && score >= tc.target_accuracy;
}

// The checkpoint of `step`: every process takes part (the workload's memories
// are gathered), process 0 writes it and prunes the old ones.
template <class T>
void write_checkpoint(TrainingRun<T>& run, std::int64_t step) {
  const auto& tc = run.tc;
  Workload<T>& w = *run.workload;
  Adam<T>& adam = *run.adam;
  // Never a non-finite checkpoint: it would be the newest and prune finite ones.
  const std::int64_t bad = count_nonfinite<T>(w.params.values()) +
                           count_nonfinite<T>(adam.first_moments()) +
                           count_nonfinite<T>(adam.second_moments());
  require<DivergenceError>(bad == 0, "train: after step ", step, " ", bad,
                           " parameters or Adam moments are not finite, so no checkpoint was "
                           "saved; the newest checkpoint is ",
                           newest_checkpoint(run.config.run_dir),
                           ". Start a new run with a lower "
                           "train.learning_rate (",
                           tc.learning_rate, ") or with train.clip_norm set");
  io::CheckpointMeta meta;
  meta.step = step;
  meta.data_position = run.data_position;
  meta.seed = tc.seed;
  meta.skipped_batches = run.skipped;
  meta.config = run.resolved;
  const auto path = io::checkpoint_file(run.config.run_dir, step);
  run.summary.checkpoint = path;
  ParameterSet<T> state;    // the workload's memories, if it keeps any (every
  w.save_state(state);      // process takes part: they are gathered onto process 0)
  if (!run.leader) return;  // the replicas are the same: process 0 writes
  write_run_folder(run.config.run_dir, [&] {
    io::save_checkpoint<T>(path, w.params, &adam, meta, state.size() > 0 ? &state : nullptr);
  });
  io::prune_checkpoints(run.config.run_dir, int(tc.keep_checkpoints));
}

// evaluate_run, but an evaluation that fails (a damaged validation file, a
// split too short for the model) first saves the steps trained since the last
// checkpoint, then lets the error go on: the run resumes from there once the
// data is fixed. One process only: with several, the others may still be
// waiting in the evaluation's sums, and the checkpoint gathers from all of them.
template <class T>
bool evaluate_saving_on_error(TrainingRun<T>& run, std::int64_t step) {
  try {
    return evaluate_run(run, step);
  } catch (const std::exception&) {
    if (run.ranks > 1) throw;
    try {
      write_checkpoint(run, step);
      run.out << "the evaluation after step " << step << " failed (below); the step's weights "
              << "were saved first: " << run.summary.checkpoint
              << " (continue with --resume once the evaluation's data reads)\n";
    } catch (const std::exception& save) {
      run.out << "the evaluation after step " << step << " failed (below), and saving step " << step
              << " failed as well: " << save.what() << '\n';
    }
    run.out.flush();
    throw;
  }
}

// After a step the optimizer took: the evaluation (every train.eval_every
// steps and after the last) and the checkpoint (every train.checkpoint_every
// steps, after the last, on reaching the target and on a stop). Returns
// whether the loop ends here: stopped, or at train.target_accuracy.
template <class T>
bool evaluate_and_checkpoint(TrainingRun<T>& run, bool stop) {
  const auto& tc = run.tc;
  const std::int64_t step = run.step;
  TrainSummary& summary = run.summary;
  const bool last = step == tc.steps;
  const bool eval_now = (tc.eval_every > 0 && step % tc.eval_every == 0) || last;
  if (eval_now && evaluate_saving_on_error(run, step)) {
    summary.reached_target = true;
    run.out << "reached target accuracy " << tc.target_accuracy << " at step " << step << '\n';
  }
  if (stop || summary.reached_target || last ||
      (tc.checkpoint_every > 0 && step % tc.checkpoint_every == 0))
    write_checkpoint(run, step);
  if (stop) {
    summary.interrupted = true;
    run.out << "interrupted: stopped after step " << step << ", checkpoint " << summary.checkpoint
            << "; continue with --resume\n";
    return true;
  }
  return summary.reached_target;
}

// The summary of the call and its last lines: the wait for the gradient sums
// (several processes) and the newest checkpoint.
template <class T>
TrainSummary finish_training(TrainingRun<T>& run) {
  TrainSummary& summary = run.summary;
  std::ostream& out = run.out;
  const std::int64_t step = run.step;
  summary.steps = step;
  summary.seconds = std::chrono::duration<double>(Clock::now() - run.loop_start).count();
  summary.processes = run.ranks;
  summary.allreduce_seconds = run.allreduce_seconds;
  if (run.ranks > 1 && step > summary.first_step)
    out << "gradient allreduce: "
        << number(1e3 * run.allreduce_seconds / double(step - summary.first_step), 4)
        << " ms per step waited after the backward (" << run.ranks << " processes, overlap "
        << (run.tc.overlap_allreduce ? "on" : "off") << ")\n";
  if (!summary.checkpoint.empty()) out << "checkpoint " << summary.checkpoint << '\n';
  return summary;
}

// One call of train: the setup, then steps until train.steps (or a stop, or the
// target), each followed by its report, evaluation and checkpoint.
template <class T>
TrainSummary train_typed(const config::RunConfig& config, const TrainOptions& options) {
  const auto run = setup_training<T>(config, options);
  while (run->step < config.train.steps) {
    const auto result = train_step(*run);
    if (!result) continue;  // the divergence guard skipped the batch
    const bool stop = report_step(*run, *result);
    if (evaluate_and_checkpoint(*run, stop)) break;
  }
  return finish_training(*run);
}

struct Loaded {
  std::string checkpoint;
  config::RunConfig config;
  // What the overrides changed, as "model.d_model: 64 in the run, 128 here".
  std::vector<std::string> changed;
};

// Keys that eval and generate do not read: they load the weights and run no
// training step. Overriding one would have no effect, so it is refused.
bool unread_by_eval(const std::string& key) {
  static const std::vector<std::string> read = {"train.batch", "train.seed", "train.precision",
                                                "train.dtype"};
  const bool training_only = key.rfind("train.", 0) == 0 || key.rfind("run.", 0) == 0;
  return (training_only && std::find(read.begin(), read.end(), key) == read.end()) ||
         key == "model.dropout" || key.find("attention_dropout") != std::string::npos ||
         key == "model.label_smoothing";
}

// Keys that make the trained weights compute another function while every
// parameter keeps its name and shape, so a checkpoint would load: eval and
// generate refuse to override them. (Keys that change a shape are refused by
// the checkpoint's own checks; attention settings such as model.lsh.n_hashes
// may differ on purpose.)
// The families declare theirs (config::FamilyKey::changes_function).
std::vector<std::string> function_keys() {
  // model.causal (a causal model read without its mask sees the tokens it
  // predicts), the positions (none and sinusoidal hold no parameter) and the
  // Transformer-XL switches that hold none either; not the attention settings
  // (kinds, rounds, windows, Transformer-XL's memory and clamp lengths), which
  // an evaluation may change on purpose.
  std::vector<std::string> keys = {
      "model.seq2seq.reversible", "model.ff_activation",  "model.causal",
      "model.positions",          "model.layer_norm_eps", "model.xl.pre_norm",
      "model.xl.scale_embedding"};
  for (const config::ModelSection* family : config::model_sections())
    for (const auto& key : family->own_keys())
      if (key.changes_function) keys.push_back(key.name);
  return keys;
}

Loaded load_run(const std::string& run_or_checkpoint, const std::vector<std::string>& overrides,
                const char* command) {
  Loaded loaded;
  loaded.checkpoint = resolve_checkpoint(run_or_checkpoint);
  const auto meta = io::read_target_meta(run_or_checkpoint, loaded.checkpoint);
  check_checkpoint_name(loaded.checkpoint, meta.step);
  loaded.config = config::parse_run_config(meta.config, loaded.checkpoint, overrides);
  const auto stored = config::parse_run_config(meta.config, loaded.checkpoint);
  loaded.changed = changed_keys(stored, loaded.config);
  for (const auto& difference : loaded.changed) {
    const std::string key = difference.substr(0, difference.find(':'));
    require<ConfigError>(!unread_by_eval(key), command, ": ", difference, "; ", command,
                         " loads the checkpoint's weights and trains nothing, so ", key,
                         " would have no effect: leave it out (", command,
                         " reads model.*, data.* and eval.* keys, train.batch, train.seed "
                         "and train.precision)");
  }
  require<ConfigError>(loaded.config.train.dtype == stored.train.dtype, "the checkpoint ",
                       loaded.checkpoint, " holds ", stored.train.dtype,
                       " parameters (train.dtype = \"", stored.train.dtype,
                       "\" in its run) but train.dtype is \"", loaded.config.train.dtype,
                       "\" here; eval and generate run in the checkpoint's dtype: leave "
                       "train.dtype as the run had it");
  for (const auto& key : function_keys())
    for (const auto& difference : loaded.changed)
      require<ConfigError>(difference.rfind(key + ":", 0) != 0, "the checkpoint ",
                           loaded.checkpoint, " was trained with another ", key, " (", difference,
                           "): its weights would compute another function; leave ", key,
                           " as the run had it");
  return loaded;
}

// Runs `body` (which loads the run's weights into a model built from the
// overridden config). A checkpoint whose parameters that model does not
// match is the overrides' doing when they changed anything: a ConfigError
// that names them, with the fix.
template <class F>
auto naming_overrides(const Loaded& run, const char* command, F&& body) {
  try {
    return body();
  } catch (const io::CheckpointMismatchError& e) {
    if (run.changed.empty()) throw;
    const std::string list = joined(run.changed);
    const bool attention = std::any_of(run.changed.begin(), run.changed.end(),
                                       [](auto& d) { return d.rfind("model.attention:", 0) == 0; });
    throw ConfigError(detail::concat(
        e.what(), ". The overrides changed ", list, ": ", command,
        " builds the model from them and loads the run's weights, so keys that shape the "
        "weights must stay as the run had them",
        attention ? " (a layer trained with LSH has one shared query-key projection; another "
                    "kind reads it with model.qk = \"shared\", which every layer then uses)"
                  : ""));
  }
}

template <class T>
EvalResult evaluate_typed(const Loaded& run, data::Split split, std::int64_t batches) {
  const auto workload =
      make_workload<T>(require_memory_fits(run.config, run.config.train.batch, false, "eval"));
  io::load_checkpoint<T>(run.checkpoint, workload->params, nullptr);
  // A split with an end is evaluated at most once: further batches would
  // score its first ones again (Transformer-XL's streams wrap around).
  const std::int64_t all = workload->batches_in_split(split, run.config.train.batch);
  if (batches == kDefaultEvalBatches)  // 8, or the whole of a smaller split
    batches = all >= 0 ? std::min<std::int64_t>(8, all) : 8;
  require<ConfigError>(batches > 0 || all >= 0, "eval: this run's ", data::to_string(split),
                       " batches (", workload->describe(),
                       ") are drawn at random, so the split has no number of batches that "
                       "covers it; give a number of batches (--batches N)");
  require<ConfigError>(all < 0 || batches <= all, "eval: --batches ", batches, " but the ",
                       data::to_string(split), " split holds ", all, " batch", all == 1 ? "" : "es",
                       " of train.batch = ", run.config.train.batch,
                       " rows; more would score its first ones again. Give --batches ", all,
                       " or fewer, or 0 for all of it");
  if (batches == 0) batches = all;
  return evaluate_workload(*workload, split, batches, run.config.train.batch,
                           run.config.train.seed);
}

}  // namespace

TrainSummary run_training(const config::RunConfig& config, const TrainOptions& options) {
  config.validate();
  if (config.train.dtype == "double") return train_typed<double>(config, options);
  return train_typed<float>(config, options);
}

void check_run_data(const config::RunConfig& config) { model_family(config).check_data(config); }

std::string check_init_from(const config::RunConfig& config) {
  return init_point(config).checkpoint;
}

void check_resume(const config::RunConfig& config) {
  // A run folder that another train holds is in motion (its checkpoints are
  // written and pruned): train names that process once it finds the lock.
  if (io::RunLock::holder(config.run_dir) < 0) resume_checks(config);
}

// A checkpoint's name that says another step than it holds is a mix-up
// (train --resume refuses it too); other names are the user's own.
void check_checkpoint_name(const std::string& checkpoint, std::int64_t step) {
  const std::int64_t named = io::checkpoint_step(checkpoint);
  if (named >= 0 && named != step)
    throw IoError(detail::concat(
        "\"", checkpoint, "\" holds step ", step, " but its name says step ", named,
        "; the file was renamed or mixed up: restore its name (",
        fs::path(io::checkpoint_file(".", step)).filename().string(), ") or give it another name"));
}

std::string resolve_checkpoint(const std::string& run_or_checkpoint) {
  require<IoError>(fs::exists(run_or_checkpoint), "'", run_or_checkpoint,
                   "' does not exist; give a run folder or a checkpoint file");
  if (!fs::is_directory(run_or_checkpoint)) return run_or_checkpoint;
  const auto latest = io::latest_checkpoint(run_or_checkpoint);
  require<IoError>(latest.has_value(), "'", run_or_checkpoint,
                   "' holds no checkpoint (looked in its checkpoints/ folder); train it first");
  return *latest;
}

EvalResult evaluate_checkpoint(const std::string& run_or_checkpoint,
                               const std::vector<std::string>& overrides, data::Split split,
                               std::int64_t batches) {
  require<ConfigError>(batches >= 0 || batches == kDefaultEvalBatches, "eval: batches is ", batches,
                       " but must be positive, or 0 for the whole split");
  const auto run = load_run(run_or_checkpoint, overrides, "eval");
  return naming_overrides(run, "eval", [&] {
    if (run.config.train.dtype == "double") return evaluate_typed<double>(run, split, batches);
    return evaluate_typed<float>(run, split, batches);
  });
}

void check_generate_options(const GenerateOptions& o, bool beam_search) {
  require<ConfigError>(o.temperature >= 0 && std::isfinite(o.temperature),
                       "generate: temperature is ", o.temperature,
                       " but must be finite and >= 0 (0 is greedy)");
  require<ConfigError>(o.top_k >= 0, "generate: top_k is ", o.top_k,
                       " but must be >= 0 (0 keeps every token)");
  require<ConfigError>(o.top_p > 0 && o.top_p <= 1, "generate: top_p is ", o.top_p,
                       " but must be in (0, 1] (1 keeps every token)");
  const GenerateOptions defaults{};
  const bool sampling = o.temperature > 0;
  if (beam_search) {  // first: the sampling options are not its to take at all
    const char* why =
        " but the encoder-decoder decodes greedily, or by beam search with --beam, "
        "and ends each target at its end symbol; ";
    require<ConfigError>(!sampling && o.top_k == 0 && o.top_p == 1, "generate: temperature ",
                         o.temperature, ", top_k ", o.top_k, " and top_p ", o.top_p, " given", why,
                         "it does not sample (leave out --temperature, --top-k, --top-p)");
    require<ConfigError>(o.seed == defaults.seed && !o.seed_given, "generate: seed ", o.seed,
                         " given", why, "it does not sample (leave out --seed)");
    require<ConfigError>(o.stop.empty(), "generate: ", o.stop.size(), " stop id(s) given", why,
                         "leave out --stop");
    require<ConfigError>(o.cache, "generate: --no-cache given", why,
                         "it has no cached mode to compare with (leave out --no-cache)");
  } else {
    require<ConfigError>(o.beam == 1, "generate: beam is ", o.beam,
                         " but this model decodes greedily or samples (--temperature, --top-k, "
                         "--top-p); beam search is the encoder-decoder's (leave out --beam)");
  }
  const char* greedy =
      " has no effect with temperature 0 (greedy decoding, the default); give "
      "a temperature > 0 (e.g. --temperature 1) to sample";
  require<ConfigError>(sampling || o.top_k == 0, "generate: top_k ", o.top_k, greedy);
  require<ConfigError>(sampling || o.top_p == 1, "generate: top_p ", o.top_p, greedy);
  require<ConfigError>(sampling || (o.seed == defaults.seed && !o.seed_given), "generate: seed ",
                       o.seed, greedy);
  require<ConfigError>(o.beam > 1 || o.length_penalty == defaults.length_penalty,
                       "generate: length_penalty ", o.length_penalty,
                       " weighs beam search's hypotheses and has no effect without a beam > 1 "
                       "(--beam, the encoder-decoder's)");
}

GenerateResult generate(const std::string& run_or_checkpoint,
                        const std::vector<std::string>& overrides, const GenerateOptions& options) {
  const auto run = load_run(run_or_checkpoint, overrides, "generate");
  const auto& family = model_family(run.config);
  check_generate_options(options, family.decodes_by_beam_search());
  return naming_overrides(run, "generate",
                          [&] { return family.generate(run.checkpoint, run.config, options); });
}

}  // namespace reformer::train
