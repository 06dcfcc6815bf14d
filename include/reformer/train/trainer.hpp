// Training, evaluation and generation of a Reformer language model from a run
// config (config/run_config.hpp). One run folder holds everything of a run:
//   <run_dir>/config.toml        the resolved config (every key)
//   <run_dir>/metrics.csv|jsonl  one row per logged step and per evaluation
//   <run_dir>/checkpoints/       HDF5 checkpoints (io/checkpoint.hpp), newest N kept
// A run is a pure function of its config: parameters, batches (data position),
// dropout masks and LSH rotations all come from the counter RNG, so resuming
// from a checkpoint continues the same sequence of losses.
#pragma once

#include "reformer/config/run_config.hpp"
#include "reformer/core/distributed.hpp"
#include "reformer/data/tasks.hpp"

#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

namespace reformer::train {

struct TrainOptions {
  bool resume = false;          // continue from the newest checkpoint in the run folder
  bool handle_signals = true;   // SIGINT/SIGTERM: finish the step, checkpoint, stop
  std::ostream* out = nullptr;  // progress lines (default std::cout)
  // The processes of a data-parallel run (core/distributed.hpp); null:
  // Communicator::world() (every process of `mpirun`, or this one alone).
  const Communicator* comm = nullptr;
};

struct EvalResult {
  double loss = 0;             // mean negative log-likelihood (nats) of the scored targets
                               // (without model.label_smoothing, which shapes training only)
  double bits_per_token = 0;   // loss / ln 2
  double accuracy = 0;         // argmax == target over the scored targets
  std::int64_t tokens = 0;     // scored targets: tokens, or examples (sequence labels)
  std::string unit = "token";  // what one scored target is ("token", "example")
  double exact_match = -1;     // encoder-decoder: greedy decodings equal to the target; -1: n/a
  double seconds = 0;          // wall time of the evaluation loop
};

struct TrainSummary {
  std::int64_t first_step = 0;  // steps already taken when this call began
  std::int64_t steps = 0;       // steps taken in total when it returned
  double seconds = 0;           // wall time of this call's training loop
  bool interrupted = false;     // stopped by SIGINT/SIGTERM
  bool reached_target = false;  // stopped at train.target_accuracy
  EvalResult last_eval{};
  std::vector<double> losses;    // training loss of every step this call took
  std::string checkpoint;        // the last checkpoint written
  int processes = 1;             // of a data-parallel run
  double allreduce_seconds = 0;  // waited for the gradient sums after the backwards
  // The step's workspace in bytes (this process's): reserved from the
  // prediction before the first step, and the most that step used (the
  // arena is shrunk to it after the step).
  std::int64_t workspace_reserved = 0, workspace_used = 0;
};

// Opens the run's data as training will: IoError naming a missing, special or
// malformed data file, or a split too short for Transformer-XL's streams
// (training's train.batch x train.accumulate, evaluation's train.batch).
// run_training calls it before it creates the run folder.
void check_run_data(const config::RunConfig& config);

// A new run's warm start (train.init_from): the checkpoint file it loads its
// parameters from (a run folder's newest), "" without one. IoError naming a
// missing or damaged checkpoint, ConfigError for another dtype than
// train.dtype; run_training checks it again, and the checkpoint's parameters
// against the model (a ConfigError naming the keys that differ from its run).
std::string check_init_from(const config::RunConfig& config);

// What train --resume checks before it loads anything: the run folder's newest
// checkpoint exists and is whole (IoError naming it, and an older one when
// the newest is damaged), agrees with itself, and was written by this config
// (ConfigError naming the first key that differs, or train.steps below it).
// Nothing is checked while another process holds the run folder (io::RunLock):
// run_training then stops at the lock, naming that process.
void check_resume(const config::RunConfig& config);

// Trains (or resumes) the run; throws ConfigError/IoError before any work for
// bad input (a resumed run whose config differs names the first key).
TrainSummary run_training(const config::RunConfig& config, const TrainOptions& options = {});

// A checkpoint file, or the newest checkpoint of a run folder (IoError naming
// the path when there is none).
std::string resolve_checkpoint(const std::string& run_or_checkpoint);

// IoError when a checkpoint's name (step_<N>.h5) says another step than the
// `step` it holds: a file renamed or mixed up (any other name is the user's).
void check_checkpoint_name(const std::string& checkpoint, std::int64_t step);

// Loads the checkpoint's config, applies `overrides` (e.g. model.lsh.n_hashes=8
// or model.attention=["full"]: parameters must still match), loads the
// parameters and evaluates `batches` batches of the split: 0 the whole of a
// split with an end (more than it holds is refused), kDefaultEvalBatches
// (`reformer eval` without --batches) 8 or the whole split if it holds fewer.
constexpr std::int64_t kDefaultEvalBatches = -1;
EvalResult evaluate_checkpoint(const std::string& run_or_checkpoint,
                               const std::vector<std::string>& overrides, data::Split split,
                               std::int64_t batches);

struct GenerateOptions {
  std::vector<int> prompt;  // token ids; empty: the task's first validation sequence cut
                            // after its first half (the copy to reproduce follows)
  // Language model: several prompts of any lengths, decoded as one batch
  // (overrides `prompt`); Transformer-XL: one batch per prompt length.
  std::vector<std::vector<int>> prompts;
  // New tokens per prompt; 0: up to data.length (at most model.max_length in all).
  std::int64_t tokens = 0;
  double temperature = 0.0;  // 0: greedy
  std::int64_t top_k = 0;    // sample among the k most likely; 0: all
  double top_p = 1.0;        // sample among the most likely tokens holding top_p of the mass
  std::vector<int> stop;     // language model: a row ends after generating one of these ids
  // Language model: decode with key/value caches (one position per layer and
  // token); false reruns the model on each row's whole prefix for every token.
  // Transformer-XL: false reruns the current segment over its memory.
  bool cache = true;
  std::uint64_t seed = 1;
  // The caller chose `seed` (the CLI's --seed): refused without sampling even
  // at its default value.
  bool seed_given = false;
  // Encoder-decoder: the source as text (the task's units; the synthetic tasks:
  // ids separated by spaces); empty: the first validation pair. Beam search
  // with `beam` > 1, else greedy.
  std::string source_text;
  std::int64_t beam = 1;
  double length_penalty = 0.6;
};

struct GenerateResult {
  std::vector<int> prompt, generated;  // the first row
  std::vector<int> expected;           // the task's continuation when the prompt came from it
  // Language model: every row's prompt and generated ids (stop id included).
  std::vector<std::vector<int>> prompts, generations;
  double seconds = 0;  // the language model's decoding loop, prompts included
  // Cached language-model decoding: our kernel launches per generation step
  // (one token for every row; MemoryTracker::launches()), 0 when not measured.
  double launches_per_token = 0;
  // Encoder-decoder: the same as text (the task's decode), the end id dropped.
  std::string prompt_text, generated_text, expected_text;
  bool seq2seq = false;
  // What `reformer generate` prints: the prompts and generations in the run's
  // units, the speed, and how the output compares with the expected one.
  std::string report;
};

// ConfigError naming an option out of range or one that would have no effect:
// top_k or top_p without a temperature (greedy decoding), a length penalty
// without a beam, and for a family that decodes by beam search (beam_search)
// sampling, stop ids and --no-cache; for the others a beam.
void check_generate_options(const GenerateOptions& options, bool beam_search);

GenerateResult generate(const std::string& run_or_checkpoint,
                        const std::vector<std::string>& overrides, const GenerateOptions& options);

}  // namespace reformer::train
