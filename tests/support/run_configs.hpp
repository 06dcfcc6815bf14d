// Small run configs for the trainer tests (tests/train): one per model family,
// each a TOML text parsed with optional "section.key=value" overrides, and the
// options that keep a test's training quiet.
#pragma once

#include "reformer/config/run_config.hpp"
#include "reformer/train/chunk_choice.hpp"
#include "reformer/train/trainer.hpp"

#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

namespace reformer::testing {

// Where quiet runs write their progress lines.
inline std::ostringstream& quiet_stream() {
  static std::ostringstream quiet;
  return quiet;
}

// Progress lines to `out` (default: quiet_stream()), no signal handlers (the
// test process keeps its own).
inline train::TrainOptions quiet_options(std::ostream* out = nullptr) {
  train::TrainOptions options;
  options.out = out ? out : &quiet_stream();
  options.handle_signals = false;
  return options;
}

// The language model of a run's config as the run builds it: "auto" chunks
// (the default on GPUs) resolved for train.batch rows.
inline models::ReformerConfig lm_model_of(const config::RunConfig& config) {
  return config::lm_config(train::resolve_auto_chunks(config, config.train.batch, true));
}

// The Reformer LM on the duplication task: 2 layers (local, LSH), length 16,
// vocabulary 8.
inline config::RunConfig tiny_run(const std::string& dir, std::int64_t steps, bool reversible,
                                  const std::vector<std::string>& overrides = {}) {
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
  return config::parse_run_config(toml.str(), "tiny.toml", overrides);
}

// The encoder-decoder on the reverse task: 1 + 1 layers, length 8, vocabulary
// 7 (symbols 3..6), the Noam schedule.
inline config::RunConfig seq2seq_run(const std::string& dir, std::int64_t steps,
                                     const std::vector<std::string>& overrides = {}) {
  std::ostringstream toml;
  toml << "[run]\ndir = \"" << dir << "\"\n"
       << "[model]\ntype = \"transformer\"\nd_model = 16\nd_ff = 32\nheads = 2\nd_head = 8\n"
       << "positions = \"sinusoidal\"\nmax_length = 8\ndropout = 0.1\nlabel_smoothing = 0.1\n"
       << "[model.seq2seq]\nencoder_layers = 1\ndecoder_layers = 1\n"
       << "[data]\ntask = \"seq2seq_reverse\"\nlength = 8\nvocab = 7\n"
       << "[train]\nsteps = " << steps << "\nbatch = 4\naccumulate = 2\nlearning_rate = 1.0\n"
       << "schedule = \"noam\"\nwarmup_steps = 10\neval_every = 0\neval_batches = 2\n"
       << "log_every = 1\ncheckpoint_every = 2\n";
  return config::parse_run_config(toml.str(), "seq2seq.toml", overrides);
}

// Transformer-XL on a byte corpus: 2 layers, segments of 8, memory 12.
inline config::RunConfig xl_run(const std::string& dir, const std::string& corpus,
                                std::int64_t steps,
                                const std::vector<std::string>& overrides = {}) {
  std::ostringstream toml;
  toml << "[run]\ndir = \"" << dir << "\"\n"
       << "[model]\ntype = \"transformer_xl\"\nvocab = 256\nd_model = 16\nd_ff = 32\nheads = 2\n"
       << "d_head = 8\nlayers = 2\ndropout = 0.1\nattention_dropout = 0.1\n"
       << "[model.xl]\nmem_len = 12\nclamp_len = 10\n"
       << "[data]\ntask = \"bytes\"\npath = \"" << corpus << "\"\nlength = 8\nvocab = 256\n"
       << "[train]\nsteps = " << steps << "\nbatch = 2\naccumulate = 2\nlearning_rate = 0.003\n"
       << "eval_every = 3\neval_batches = 3\nlog_every = 1\ncheckpoint_every = 2\n";
  return config::parse_run_config(toml.str(), "xl.toml", overrides);
}

// The classifier on matching_ends (the first and the last of `length` symbols
// agree or not): 2 layers of full attention, width 32, sinusoidal positions,
// mean pooling.
inline config::RunConfig classifier_run(const std::string& dir, std::int64_t steps,
                                        const std::vector<std::string>& overrides = {}) {
  std::ostringstream toml;
  toml << "[run]\ndir = \"" << dir << "\"\n"
       << "[model]\ntype = \"classifier\"\nvocab = 8\nd_model = 32\nd_ff = 64\nheads = 2\n"
       << "d_head = 16\nlayers = 2\nattention = [\"full\"]\ncausal = false\n"
       << "positions = \"sinusoidal\"\nmax_length = 32\n"
       << "[model.lsh]\nchunk = 8\n[model.local]\nchunk = 8\n"
       << "[data]\ntask = \"matching_ends\"\nlength = 32\nvocab = 8\n"
       << "[train]\nsteps = " << steps << "\nbatch = 8\naccumulate = 1\nlearning_rate = 0.003\n"
       << "eval_every = 0\neval_batches = 2\nlog_every = 1\ncheckpoint_every = 2\n";
  return config::parse_run_config(toml.str(), "classifier.toml", overrides);
}

}  // namespace reformer::testing
