#include "train/families/transformer_xl/transformer_xl.hpp"

#include "reformer/core/error.hpp"
#include "reformer/data/tasks.hpp"
#include "train/families/sweep_model.hpp"
#include "train/memory_check.hpp"
#include "train/sampling.hpp"

namespace reformer {

using detail::concat;

// The mapping from the run config to the model's config (config/run_config.hpp).
namespace config {

models::TransformerXLConfig xl_config(const RunConfig& config) {
  models::TransformerXLConfig x;
  const auto& m = config.model;
  x.vocab = m.vocab;
  x.sizes() = m.sizes();  // [model]'s widths, regularisation and chunks
  x.layers = m.layers;
  x.clamp_len = config.xl.clamp_len;
  x.same_length = config.xl.same_length;
  x.pre_norm = config.xl.pre_norm;
  x.scale_embedding = config.xl.scale_embedding;
  x.tie_embeddings = m.tie_embeddings;
  x.ff_activation = m.ff_activation;
  return x;
}

}  // namespace config

namespace train {
namespace {

class TransformerXLFamily final : public ModelFamily {
 public:
  const char* name() const override { return "transformer_xl"; }
  const char* description() const override { return "Transformer-XL"; }
  bool takes_task(data::TaskKind task) const override { return task == data::TaskKind::Bytes; }
  // config::xl_config's keys: the sizes, the vocabulary, depth, output and
  // feed-forward, and [model.xl] (relative positions, its own attention).
  bool reads(const std::string& key) const override {
    return config::is_shared_size_key(key) ||
           config::key_in(key, {"model.vocab", "model.layers", "model.tie_embeddings",
                                "model.ff_activation", "model.xl"});
  }
  void validate(const config::RunConfig& c, const char* op) const override {
    require<ConfigError>(c.data.task == data::TaskKind::Bytes, op,
                         ": model.type is transformer_xl but data.task is ",
                         data::to_string(c.data.task),
                         "; Transformer-XL reads a text as streams of segments: data.task = "
                         "\"bytes\" with data.path");
    config::validate_common(c, op);
    config::xl_config(c).validate();
    require<ConfigError>(c.data.vocab <= c.model.vocab, op, ": data.vocab is ", c.data.vocab,
                         " but model.vocab is ", c.model.vocab,
                         "; the bytes must fit the embedding (model.vocab >= data.vocab)");
    require<ConfigError>(c.xl.mem_len >= 0, op, ": model.xl.mem_len is ", c.xl.mem_len,
                         " but must be >= 0 (0: no recurrence)");
    require<ConfigError>(c.xl.clamp_len >= 0, op, ": model.xl.clamp_len is ", c.xl.clamp_len,
                         " but must be >= 0 (0: no clamping)");
    const auto& e = c.eval;
    require<ConfigError>(e.tgt_len >= 0, op, ": eval.tgt_len is ", e.tgt_len,
                         " but must be >= 0 (0: data.length)");
    require<ConfigError>(e.mem_len >= -1, op, ": eval.mem_len is ", e.mem_len,
                         " but must be >= 0 (0: no recurrence) or -1 (model.xl.mem_len)");
    require<ConfigError>(e.clamp_len >= -1, op, ": eval.clamp_len is ", e.clamp_len,
                         " but must be >= 0 (0: no clamping) or -1 (model.xl.clamp_len)");
  }
  void check_data(const config::RunConfig& config) const override {
    const auto task = data::make_task(config.data);
    const Index eval_length = config.eval.tgt_len > 0 ? config.eval.tgt_len : config.data.length;
    task->segments_per_stream(data::Split::Train, config.train.batch * config.train.accumulate,
                              config.data.length);
    for (const auto split : {data::Split::Valid, data::Split::Test})
      task->segments_per_stream(split, config.train.batch, eval_length);
  }
  // Training: train.accumulate groups of memories; evaluation: one, at its
  // own segment and memory lengths (or the recomputed context).
  RunMemory predict_run_memory(const config::RunConfig& config, Index batch,
                               bool training) const override {
    const Index length = config.data.length;
    const auto& e = config.eval;
    const Index eval_length = e.tgt_len > 0 ? e.tgt_len : length;
    const Index eval_mem = e.mem_len >= 0 ? e.mem_len : config.xl.mem_len;
    XLStepConfig xl{config::xl_config(config), training ? config.xl.mem_len : eval_mem};
    if (!training && e.recompute) xl.mem_len = 0;
    Index rows = length;
    if (!training) rows = e.recompute ? eval_length + eval_mem : eval_length;
    return train::predict_run_memory(xl, batch, rows, scalar_bytes(config), training,
                                     training ? config.train.accumulate : 1,
                                     activation_bytes(config));
  }
  std::string summary(const config::RunConfig& config) const override {
    return concat("transformer_xl, ", counted(config.model.layers, "layer"), ", stored");
  }
  const char* sweep_base() const override { return sweep_base_xl(); }
  const std::vector<std::string>& sweep_variants() const override {
    return sweep_xl_variant_names();
  }
  std::unique_ptr<SweepModel> sweep(const std::vector<std::string>& overrides) const override {
    config::require_family_reads(*this, overrides, "reformer memory");
    return make_sweep(config::parse_xl_config(sweep_base(), "reformer memory", overrides),
                      [](models::TransformerXLConfig& c, Index layers) { c.layers = layers; });
  }
  std::unique_ptr<Workload<float>> workload(const config::RunConfig& config, float) const override {
    return make_transformer_xl_workload<float>(config);
  }
  std::unique_ptr<Workload<double>> workload(const config::RunConfig& config,
                                             double) const override {
    return make_transformer_xl_workload<double>(config);
  }
  void read_prompts(const config::RunConfig& config, const std::vector<std::string>& texts,
                    GenerateOptions& options) const override {
    for (const auto& text : texts) options.prompts.push_back(prompt_ids(text, token_text(config)));
  }
  GenerateResult generate(const std::string& checkpoint, const config::RunConfig& config,
                          const GenerateOptions& options) const override {
    auto r = config.train.dtype == "double"
                 ? generate_transformer_xl<double>(checkpoint, config, options)
                 : generate_transformer_xl<float>(checkpoint, config, options);
    r.report = token_report(r, token_text(config), options.cache);
    return r;
  }
};

}  // namespace

const ModelFamily& transformer_xl_family() {
  static const TransformerXLFamily family{};
  return family;
}

}  // namespace train
}  // namespace reformer
