// The classifier's memory: its parameters and training step predicted from
// the shapes (the LM's encoder stack plus the pooled head), its synthetic
// step, and its `reformer memory` variants (the LM's: full, full-rev, lsh-N,
// local, exact, exact-rev, reformer) on Long Range Arena's text sizes.
#include "train/families/classifier/classifier.hpp"

#include "reformer/core/error.hpp"
#include "reformer/core/random.hpp"
#include "reformer/train/optimizer.hpp"
#include "train/sweep_detail.hpp"

#include <algorithm>

namespace reformer::train::classifier {
namespace {

using sweep::saturated_bytes;

// Random labels in [0, classes), keyed by row.
void fill_random_labels(Kokkos::View<int*, Layout, MemSpace> labels, Index classes) {
  const auto c = std::uint64_t(classes);
  Kokkos::parallel_for(
      "synthetic_labels", range(labels.extent(0)), KOKKOS_LAMBDA(Index b) {
        labels(b) = int(random_bits({1, 3}, b) % c);
      });
}

// A training step of the classifier on random tokens and labels, as
// SyntheticStep is the LM's (train/synthetic_step.hpp).
template <class T>
class ClassifierStep {
 public:
  ClassifierStep(const models::ClassifierConfig& config, Index batch, Index length)
      : model_(config, params_),
        adam_(params_),
        ids_("synthetic_ids", batch * config.documents, length),
        unused_("synthetic_targets", batch * config.documents, length),
        labels_("synthetic_labels", batch) {
    model_.init({1, 1});
    sweep::fill_random_tokens(ids_, unused_, config.encoder.vocab);
    fill_random_labels(labels_, config.classes);
    adam_.step(0.0);
    Kokkos::fence();
  }
  void run(std::uint64_t n) {
    params_.zero_grad();
    model_.forward_backward(ids_, labels_, {{7, n}, true}, state_);
    {
      ScopedMemoryPhase phase("optimizer");
      adam_.step(1e-4);
    }
    Kokkos::fence();
  }
  std::int64_t id_bytes() const {
    return std::int64_t(2 * ids_.size() + labels_.size()) * std::int64_t(sizeof(int));
  }
  Workspace& workspace() { return state_.workspace; }

 private:
  ParameterSet<param_t<T>> params_;
  models::Classifier<T> model_;
  Adam<param_t<T>> adam_;
  Kokkos::View<int**, Layout, MemSpace> ids_, unused_;
  Kokkos::View<int*, Layout, MemSpace> labels_;
  models::ClassifierState<T> state_;
};

// The sweep's base with the user's model.* overrides, at a depth.
class ClassifierSweep final : public SweepModel {
 public:
  explicit ClassifierSweep(models::ClassifierConfig base) : base_(std::move(base)) {}
  void check(const std::string& variant, Index layers, Index length,
             const std::string& precision) const override {
    variant_of(variant, layers, length);
    check_sweep_precision(precision);
  }
  std::vector<SweepSetKey> keys_set(const std::string& variant) const override {
    return variant_keys(variant, base_.encoder);  // the language model's encoder keys
  }
  SweepPoint run(const std::string& variant, Index layers, Index batch, Index length,
                 const SweepOptions& options) const override {
    sweep::check_point(options, batch, length);
    const auto config = variant_of(variant, layers, length);
    return sweep::run_point_with<ClassifierStep>(
        variant, config, layers, batch, length, options,
        [](const models::ClassifierConfig& c, Index b, Index l, std::int64_t s, std::int64_t a) {
          return predict_step_memory(c, b, l, s, a);
        },
        [](const models::ClassifierConfig& c, std::int64_t s) {
          return predict_state_bytes(c, s);
        });
  }

 private:
  // The LM's variant of the encoder (attention, rounds, reversibility, chunks).
  models::ClassifierConfig variant_of(const std::string& variant, Index layers,
                                      Index length) const {
    models::ClassifierConfig config = base_;
    config.encoder.layers = layers;
    config.encoder = variant_config(variant, config.encoder, length);
    config.validate();
    return config;
  }
  models::ClassifierConfig base_;
};

}  // namespace

const char* sweep_base() {
  // Long Range Arena's byte-level text classifier (lra_benchmarks/
  // text_classification/configs/base_tc_config.py): bytes + 1 (257 ids), 4
  // layers of width 256, 4 heads, feed-forward 1024 (GELU), sinusoidal
  // positions, 2 classes; our LSH chunk 64 with 2 rounds and local chunk 128.
  return R"([model]
type = "classifier"
vocab = 257
layers = 4
d_model = 256
d_ff = 1024
heads = 4
d_head = 64
attention = ["lsh"]
causal = false
positions = "sinusoidal"
max_length = 1024
ff_chunk = 1024
ff_activation = "gelu"
[model.lsh]
chunk = 64
n_hashes = 2
[model.local]
chunk = 128
[model.classifier]
classes = 2
pooling = "mean"
)";
}

const std::vector<std::string>& sweep_variants() { return sweep_variant_names(); }

std::unique_ptr<SweepModel> make_sweep(const std::vector<std::string>& overrides) {
  bool pairs = false;  // model.classifier.documents = 2: the retrieval task's model
  for (const auto& o : overrides) {
    require<ConfigError>(o.rfind("model.", 0) == 0, "reformer memory: the override '", o,
                         "' is not a model key; only model.* keys apply here");
    std::string key = o.substr(0, o.find('=')),
                value = o.substr(std::min(o.size(), key.size() + 1));
    key.erase(key.find_last_not_of(" \t") + 1);
    value.erase(0, value.find_first_not_of(" \t"));
    value.erase(value.find_last_not_of(" \t") + 1);
    if (key != "model.classifier.documents") continue;
    require<ConfigError>(value == "0" || value == "1" || value == "2",
                         "reformer memory: model.classifier.documents is '", value,
                         "' but must be 1 (one sequence an example), 2 (pairs of documents, "
                         "LRA's Retrieval) or 0 (1)");
    pairs = value == "2";
  }
  // A run around the base (its data only makes the config whole; the text and
  // retrieval tasks, whose class counts come from their files, which are never
  // read here, take any model.classifier.classes). Its length, 2, fits every
  // chunk (at most one chunk, or a multiple of 1 and 2), so no chunk override
  // is refused for a length the sweep never runs.
  const auto run = config::parse_run_config(
      std::string(sweep_base()) + "[data]\ntask = \"" + (pairs ? "retrieval" : "text") +
          "\"\npath = \"(not read by the sweep)\"\nlength = 2\n",
      "reformer memory", overrides);
  models::ClassifierConfig base = model_config(run, 0);
  base.encoder = run.model;  // buckets follow each length (no data.length)
  return std::make_unique<ClassifierSweep>(base);
}

std::int64_t predict_state_bytes(const models::ClassifierConfig& c, std::int64_t scalar_bytes) {
  // The LM's count with tied weights has the encoder and the LayerNorm over
  // [y1; y2], plus an output bias of vocab entries; the head has head_width x
  // classes weights (2d, or 8d for pairs) and classes biases instead.
  models::ReformerConfig lm = c.encoder;
  lm.tie_embeddings = true;
  const double head = double(c.head_width() + 1) * double(c.classes);
  return saturated_bytes(double(train::predict_state_bytes(lm, scalar_bytes)) +
                         4 * (head - double(c.encoder.vocab)) * double(scalar_bytes));
}

StepMemory predict_step_memory(const models::ClassifierConfig& c, Index batch, Index length,
                               std::int64_t scalar_bytes, std::int64_t activation_bytes) {
  const double s = double(scalar_bytes), a = activation_bytes > 0 ? double(activation_bytes) : s;
  // The encoder reads `seqs` sequences (examples x documents); the head
  // reads `rows` examples of width w (2d, or 8d for pairs).
  const Index seqs = batch * c.documents;
  const double x = double(seqs) * length, rows = double(batch), d = c.encoder.d_model;
  const double w = double(c.head_width());
  const auto stack = sweep::encoder_stack_memory(c.encoder, seqs, length, s, a);
  // The head: the pooling weights [seqs, length] (compute values) while it
  // pools or spreads; pooled and LayerNorm'd sequences with their statistics
  // kept in the state, and a pair's features z [rows, 8d]; dh and dp (and dz
  // for pairs) while the loss runs.
  const double features = c.documents == 2 ? rows * w * a : 0.0;
  const double head_state = 2 * double(seqs) * 2 * d * a + 2 * double(seqs) * s + features;
  const double ws_head = x * s + 2 * double(seqs) * 2 * d * a + features;
  const double workspace = std::max({stack.ws_forward, ws_head, stack.ws_backward});
  const double alive = stack.alive + head_state + workspace;
  // bf16: the cross-entropy's products widen the head's input [rows, w] and
  // dz into float32 panels (as the LM's loss, at `rows` rows and `classes`
  // columns).
  const double C = double(c.classes);
  const double loss_panels =
      a < s ? sweep::mixed_panel_bytes({{rows, w, C, true}, {rows, 0, w}, {rows, w, C, true, true}})
            : 0.0;
  StepMemory m;
  m.workspace = saturated_bytes(workspace);
  m.forward = m.backward = m.optimizer = saturated_bytes(alive + stack.panels);
  m.loss = saturated_bytes(alive + loss_panels + (rows * C + rows) * s);
  return m;
}

RunMemory predict_run_memory(const models::ClassifierConfig& config, Index batch, Index length,
                             std::int64_t scalar_bytes, bool training,
                             std::int64_t activation_bytes) {
  return sweep::run_memory_at(
      [&](std::int64_t a) { return predict_step_memory(config, batch, length, scalar_bytes, a); },
      predict_state_bytes(config, scalar_bytes), training, scalar_bytes, activation_bytes);
}

}  // namespace reformer::train::classifier
