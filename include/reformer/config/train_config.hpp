// How a run trains: optimizer, schedule, batches, evaluation, logging and
// checkpoints, the [train] section of a run config (train/trainer.hpp runs it).
// The schema lives in config so that the run config needs nothing from train;
// train/optimizer.hpp and train/schedule.hpp use AdamConfig and ScheduleKind
// from here.
#pragma once

#include <cstdint>
#include <string>

namespace reformer::config {

// Adam's hyper-parameters ([train.adam]; train/optimizer.hpp has the update).
struct AdamConfig {
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0;
  bool decoupled_weight_decay = false;  // true = AdamW
};

// ConfigError naming the value unless betas are in [0, 1), eps > 0 and
// weight_decay >= 0 (all finite).
void validate(const AdamConfig& config);

// The learning-rate schedules of train/schedule.hpp.
enum class ScheduleKind { constant, noam, warmup_rsqrt };

// "constant", "noam", "warmup_rsqrt"; parse_schedule_kind throws ConfigError
// naming an unknown name and listing the known ones.
std::string to_string(ScheduleKind kind);
ScheduleKind parse_schedule_kind(const std::string& name);

struct TrainConfig {
  std::int64_t steps = 1000;  // optimizer steps
  // Sequences per micro-batch over all processes: under `mpirun -np N` each
  // process takes batch / N of them (docs/distributed.md).
  std::int64_t batch = 8;
  std::int64_t accumulate = 1;     // micro-batches per optimizer step
  std::string optimizer = "adam";  // "adam" or "adamw" (decoupled weight decay)
  AdamConfig adam{};
  double learning_rate = 1e-3;  // schedule scale
  ScheduleKind schedule = ScheduleKind::constant;
  std::int64_t warmup_steps = 0;
  double clip_norm = 0.0;         // global gradient-norm clip; 0: off
  std::int64_t eval_every = 100;  // steps between evaluations; 0: only at the end
  std::int64_t eval_batches = 4;
  std::int64_t log_every = 10;         // steps between progress lines
  std::int64_t checkpoint_every = 0;   // steps between checkpoints; 0: only at the end
  std::int64_t keep_checkpoints = 3;   // newest checkpoints kept in the run folder
  std::int64_t skip_nonfinite = 0;     // batches with a non-finite loss or gradient norm
                                       // that may be skipped in a run; 0: stop at the first
  std::string metrics_format = "csv";  // "csv" or "jsonl"
  double target_accuracy = 0.0;        // stop once evaluation accuracy reaches it; 0: off
  std::uint64_t seed = 1;              // parameters, dropout and LSH streams
  std::string dtype = "float";         // "float" or "double"
  // Activations: "float32", or "bf16" (bf16 activations and saved tensors,
  // float32 master weights, gradients and Adam; core/precision.hpp). bf16
  // needs dtype "float".
  std::string precision = "float32";
  // Data-parallel runs (mpirun): start each layer's gradient sum as soon as
  // the backward has finished the layer (false: one sum after the backward),
  // and how long a process waits for the others before the run stops.
  bool overlap_allreduce = true;
  double allreduce_timeout = 300.0;  // seconds; 0: forever
  // A warm start: a new run whose parameters are loaded from this checkpoint
  // file, or the newest checkpoint of this run folder (another run's, or one
  // the Hugging Face importer wrote), instead of drawn from train.seed. The
  // run's step, data position, optimizer moments and schedule start afresh.
  // The run writes the resolved file here; --resume ignores it (the run's own
  // checkpoint holds its weights). "": parameters from train.seed.
  std::string init_from;
  // ConfigError naming the first bad field.
  void validate() const;
};

}  // namespace reformer::config
