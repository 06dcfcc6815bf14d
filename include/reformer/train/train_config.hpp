// How a run trains: optimizer, schedule, batches, evaluation, logging and
// checkpoints (train/trainer.hpp runs it).
#pragma once

#include "reformer/train/optimizer.hpp"
#include "reformer/train/schedule.hpp"

#include <cstdint>
#include <string>

namespace reformer::train {

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
  // Data-parallel runs (mpirun): start each layer's gradient sum as soon as
  // the backward has finished the layer (false: one sum after the backward),
  // and how long a process waits for the others before the run stops.
  bool overlap_allreduce = true;
  double allreduce_timeout = 300.0;  // seconds; 0: forever
  // ConfigError naming the first bad field.
  void validate() const;
};

}  // namespace reformer::train
