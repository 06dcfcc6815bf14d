#include "train/families/reformer_lm/reformer_lm.hpp"

#include "reformer/attention/lsh.hpp"
#include "reformer/core/error.hpp"
#include "reformer/data/tasks.hpp"
#include "train/families/sweep_model.hpp"
#include "train/memory_check.hpp"
#include "train/sampling.hpp"

namespace reformer {

using detail::concat;

// The mapping from the run config to the model's config (config/run_config.hpp).
namespace config {

models::ReformerConfig lm_config(const RunConfig& config) {
  models::ReformerConfig m = config.model;
  if (m.lsh.n_buckets.empty() && m.lsh.chunk > 0 && config.data.length > 0)
    m.lsh.n_buckets = attention::lsh_bucket_factors(m.lsh, config.data.length);
  return m;
}

}  // namespace config

namespace train {
namespace {

class ReformerLMFamily final : public ModelFamily {
 public:
  const char* name() const override { return "reformer"; }
  const char* description() const override { return "the Reformer language model"; }
  bool takes_task(data::TaskKind task) const override {
    return !data::is_pair_task(task) && !data::is_class_task(task);
  }
  // Every shared model.* key but the encoder-decoder's and Transformer-XL's.
  bool reads(const std::string& key) const override {
    return !config::key_in(key, {"model.seq2seq", "model.xl"});
  }
  void validate(const config::RunConfig& c, const char* op) const override {
    config::require_default_eval(c, op);
    require<ConfigError>(!data::is_pair_task(c.data.task), op, ": data.task is ",
                         data::to_string(c.data.task),
                         ", a source/target pair task, but model.type is reformer; set model.type "
                         "= \"transformer\"");
    config::require_family_task(c, op);
    c.model.validate();
    config::validate_common(c, op);
    config::require_length_fits(c, op, [&] { c.model.validate_length(c.data.length); });
    require<ConfigError>(
        c.data.vocab <= c.model.vocab, op, ": data.vocab is ", c.data.vocab, " but model.vocab is ",
        c.model.vocab, "; the task's token ids must fit the embedding (model.vocab >= data.vocab)");
  }
  void check_data(const config::RunConfig& config) const override { data::make_task(config.data); }
  RunMemory predict_run_memory(const config::RunConfig& config, Index batch,
                               bool training) const override {
    return train::predict_run_memory(config.model, batch, config.data.length, scalar_bytes(config),
                                     training, activation_bytes(config));
  }
  std::string summary(const config::RunConfig& config) const override {
    return concat("reformer, ", counted(config.model.layers, "layer"), ", ",
                  config.model.reversible ? "reversible" : "stored");
  }
  const char* sweep_base() const override { return sweep_base_model(); }
  const std::vector<std::string>& sweep_variants() const override { return sweep_variant_names(); }
  std::unique_ptr<SweepModel> sweep(const std::vector<std::string>& overrides) const override {
    config::require_family_reads(*this, overrides, "reformer memory");
    return make_sweep(config::parse_model_config(sweep_base(), "reformer memory", overrides),
                      [](models::ReformerConfig& c, Index layers) { c.layers = layers; });
  }
  std::unique_ptr<Workload<float>> workload(const config::RunConfig& config, float) const override {
    return make_lm_workload<float>(config);
  }
  std::unique_ptr<Workload<double>> workload(const config::RunConfig& config,
                                             double) const override {
    return make_lm_workload<double>(config);
  }
  void read_prompts(const config::RunConfig& config, const std::vector<std::string>& texts,
                    GenerateOptions& options) const override {
    for (const auto& text : texts) options.prompts.push_back(prompt_ids(text, token_text(config)));
  }
  GenerateResult generate(const std::string& checkpoint, const config::RunConfig& config,
                          const GenerateOptions& options) const override {
    auto r = config.train.dtype == "double" ? generate_lm<double>(checkpoint, config, options)
                                            : generate_lm<float>(checkpoint, config, options);
    r.report = token_report(r, token_text(config), options.cache);
    return r;
  }
};

}  // namespace

const ModelFamily& reformer_lm_family() {
  static const ReformerLMFamily family{};
  return family;
}

}  // namespace train
}  // namespace reformer
