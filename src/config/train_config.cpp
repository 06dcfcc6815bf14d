#include "reformer/config/train_config.hpp"

#include "reformer/core/error.hpp"
#include "reformer/core/key_errors.hpp"

#include <cmath>

namespace reformer::config {
namespace {

constexpr const char* kOp = "TrainConfig";
// Counts of files or batches: far beyond any run, and within an int.
constexpr std::int64_t kMaxCount = 1000000;

void require_positive(const char* key, std::int64_t value) {
  require<ConfigError>(value > 0, kOp, ": ", key, " is ", value, " but must be positive");
}

void require_not_negative(const char* key, std::int64_t value, const char* zero_means) {
  require<ConfigError>(value >= 0, kOp, ": ", key, " is ", value,
                       " but must be >= 0 (0: ", zero_means, ")");
}

}  // namespace

void validate(const AdamConfig& c) {
  const char* op = "AdamConfig";
  require<ConfigError>(std::isfinite(c.beta1) && c.beta1 >= 0 && c.beta1 < 1, op, ": beta1 is ",
                       c.beta1, " but must be in [0, 1)");
  require<ConfigError>(std::isfinite(c.beta2) && c.beta2 >= 0 && c.beta2 < 1, op, ": beta2 is ",
                       c.beta2, " but must be in [0, 1)");
  require<ConfigError>(std::isfinite(c.eps) && c.eps > 0, op, ": eps is ", c.eps,
                       " but must be finite and > 0");
  require<ConfigError>(std::isfinite(c.weight_decay) && c.weight_decay >= 0, op,
                       ": weight_decay is ", c.weight_decay, " but must be finite and >= 0");
}

std::string to_string(ScheduleKind kind) {
  switch (kind) {
    case ScheduleKind::constant:
      return "constant";
    case ScheduleKind::noam:
      return "noam";
    case ScheduleKind::warmup_rsqrt:
      return "warmup_rsqrt";
  }
  throw Error("to_string: invalid ScheduleKind");
}

ScheduleKind parse_schedule_kind(const std::string& name) {
  for (const ScheduleKind kind :
       {ScheduleKind::constant, ScheduleKind::noam, ScheduleKind::warmup_rsqrt})
    if (name == to_string(kind)) return kind;
  throw ConfigError(reformer::detail::concat(
      "learning-rate schedule \"", name, "\" is unknown; choose constant, noam or warmup_rsqrt"));
}

void TrainConfig::validate() const {
  require_positive("train.steps", steps);
  require_positive("train.batch", batch);
  require_positive("train.accumulate", accumulate);
  require<ConfigError>(optimizer == "adam" || optimizer == "adamw", kOp, ": train.optimizer is \"",
                       optimizer, "\" but must be adam or adamw");
  const bool adamw = optimizer == "adamw";
  require<ConfigError>(adam.decoupled_weight_decay == adamw, kOp, ": train.optimizer is ",
                       optimizer, " but adam.decoupled_weight_decay is ",
                       adam.decoupled_weight_decay ? "true" : "false",
                       "; they contradict each other (adamw decouples the weight decay, adam "
                       "does not): set decoupled_weight_decay = ",
                       adamw ? "true" : "false");
  reformer::detail::with_key_prefix(kOp, "train.adam", [&] { config::validate(adam); });
  require<ConfigError>(std::isfinite(learning_rate) && learning_rate > 0, kOp,
                       ": train.learning_rate is ", learning_rate,
                       " but must be finite and positive");
  require_not_negative("train.warmup_steps", warmup_steps, "no warmup");
  if (schedule == ScheduleKind::constant)
    require<ConfigError>(warmup_steps == 0, kOp, ": train.warmup_steps is ", warmup_steps,
                         " but train.schedule constant has no warmup; set train.schedule to "
                         "warmup_rsqrt or noam, or train.warmup_steps = 0");
  else
    require<ConfigError>(warmup_steps >= 1, kOp, ": train.warmup_steps is ", warmup_steps,
                         " but train.schedule ", to_string(schedule),
                         " needs warmup_steps >= 1 (its peak is at step warmup_steps)");
  require<ConfigError>(std::isfinite(clip_norm) && clip_norm >= 0, kOp, ": train.clip_norm is ",
                       clip_norm, " but must be finite and >= 0 (0: no clipping)");
  require_not_negative("train.eval_every", eval_every, "only at the end");
  require_positive("train.eval_batches", eval_batches);
  require_not_negative("train.log_every", log_every, "only at the end");
  require_not_negative("train.checkpoint_every", checkpoint_every, "only at the end");
  require<ConfigError>(keep_checkpoints >= 1 && keep_checkpoints <= kMaxCount, kOp,
                       ": train.keep_checkpoints is ", keep_checkpoints, " but must be in [1, ",
                       kMaxCount, "]");
  require<ConfigError>(skip_nonfinite >= 0 && skip_nonfinite <= kMaxCount, kOp,
                       ": train.skip_nonfinite is ", skip_nonfinite, " but must be in [0, ",
                       kMaxCount, "] (0: stop at the first non-finite loss)");
  require<ConfigError>(metrics_format == "csv" || metrics_format == "jsonl", kOp,
                       ": train.metrics_format is \"", metrics_format,
                       "\" but must be csv or jsonl");
  require<ConfigError>(target_accuracy >= 0 && target_accuracy <= 1, kOp,
                       ": train.target_accuracy is ", target_accuracy,
                       " but must be in [0, 1] (0: off)");
  require<ConfigError>(dtype == "float" || dtype == "double", kOp, ": train.dtype is \"", dtype,
                       "\" but must be float or double");
  require<ConfigError>(precision == "float32" || precision == "bf16", kOp,
                       ": train.precision is \"", precision, "\" but must be float32 or bf16");
  require<ConfigError>(precision == "float32" || dtype == "float", kOp,
                       ": train.precision = \"bf16\" keeps float32 master weights and needs "
                       "train.dtype = \"float\", not \"",
                       dtype,
                       "\"; use train.dtype = \"double\" with train.precision = \"float32\"");
  require<ConfigError>(std::isfinite(allreduce_timeout) && allreduce_timeout >= 0, kOp,
                       ": train.allreduce_timeout is ", allreduce_timeout,
                       " but must be finite and >= 0 seconds (0: wait forever)");
}

}  // namespace reformer::config
