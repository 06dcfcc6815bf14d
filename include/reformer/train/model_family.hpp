// The seam between the model families and everything around the training
// loop. A family (the Reformer LM, the encoder-decoder Transformer,
// Transformer-XL) lives in one folder, src/train/families/<family>/, and owns:
//   - its config: the mapping from the run config to its model config and the
//     rules it adds (config::ModelSection, config/model_type.hpp);
//   - its workload: batches, forward/backward, evaluation, checkpoint state and
//     the per-layer gradient ranges data parallelism overlaps (workload.hpp);
//   - its memory prediction and the synthetic step `reformer memory` measures;
//   - its generation.
// One registry (src/train/families/registry.cpp) maps a config::ModelType to
// its family. The trainer, eval, generate, the memory check and the CLI reach a
// family only through this interface; a new family is a folder and a line in
// the registry (docs/design.md).
#pragma once

#include "reformer/config/model_type.hpp"
#include "reformer/config/run_config.hpp"
#include "reformer/train/memory_sweep.hpp"
#include "reformer/train/trainer.hpp"

#include <memory>
#include <string>
#include <vector>

namespace reformer::train {

// "1 layer", "6 layers": a count and its noun for the progress lines.
inline std::string counted(long long n, const std::string& noun) {
  return std::to_string(n) + ' ' + noun + (n == 1 ? "" : "s");
}

template <class T>
class Workload;  // src/train/workload.hpp (private to the library)

// The sweep of `reformer memory` for one family: its base model with the
// user's model.* overrides, turned into each variant at a depth and a length.
class SweepModel {
 public:
  virtual ~SweepModel() = default;
  // ConfigError naming the variant or the value when the point cannot be built
  // (at `precision`: "float32" or "bf16", SweepOptions::precision).
  virtual void check(const std::string& variant, Index layers, Index length,
                     const std::string& precision = "float32") const = 0;
  // The base config's keys that a point of `variant` sets itself (an override
  // of one would have no effect; ConfigError naming an unknown variant).
  virtual std::vector<SweepSetKey> keys_set(const std::string& variant) const = 0;
  // One point (skipped with the reason when it does not fit options' budget).
  virtual SweepPoint run(const std::string& variant, Index layers, Index batch, Index length,
                         const SweepOptions& options) const = 0;
};

class ModelFamily : public config::ModelSection {
 public:
  // Opens the run's data as training will (IoError naming a missing or
  // malformed file, or a split too short for the family's batches).
  virtual void check_data(const config::RunConfig& config) const = 0;
  // The family's model on its data (the task is built here).
  virtual std::unique_ptr<Workload<float>> workload(const config::RunConfig& config,
                                                    float scalar) const = 0;
  virtual std::unique_ptr<Workload<double>> workload(const config::RunConfig& config,
                                                     double scalar) const = 0;
  // What a run needs at most, as `reformer memory` predicts it: training (a
  // step at `batch` rows) or evaluation and generation (a forward pass).
  virtual RunMemory predict_run_memory(const config::RunConfig& config, Index batch,
                                       bool training) const = 0;
  // The model for the progress line: "reformer, 6 layers, reversible".
  virtual std::string summary(const config::RunConfig& config) const = 0;
  // Reads prompts given as text (the command line's --prompt) into options,
  // in the run's units: a language model's bytes or token ids, the
  // encoder-decoder's one source. ConfigError naming a bad one.
  virtual void read_prompts(const config::RunConfig& config, const std::vector<std::string>& texts,
                            GenerateOptions& options) const = 0;
  // Whether generate() decodes by beam search (GenerateOptions::beam,
  // length_penalty) rather than by sampling (temperature, top_k, top_p) with
  // stop ids and caches; train::generate refuses the options the family
  // does not read (check_generate_options).
  virtual bool decodes_by_beam_search() const { return false; }
  // Decodes from the checkpoint's parameters (the run's config, overrides
  // applied); ConfigError naming a bad prompt or option.
  virtual GenerateResult generate(const std::string& checkpoint, const config::RunConfig& config,
                                  const GenerateOptions& options) const = 0;
  // `reformer memory --model <name>`: the base model as a [model] TOML table,
  // the variants it sweeps by default, and the sweep of the base with the
  // model.* overrides (ConfigError naming a bad key).
  virtual const char* sweep_base() const = 0;
  virtual const std::vector<std::string>& sweep_variants() const = 0;
  virtual std::unique_ptr<SweepModel> sweep(const std::vector<std::string>& overrides) const = 0;
};

// The registry: the family of a model type, of a run.
const ModelFamily& model_family(config::ModelType type);
inline const ModelFamily& model_family(const config::RunConfig& config) {
  return model_family(config.model_type);
}

}  // namespace reformer::train
