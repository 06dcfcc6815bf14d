#include "train/families/encoder_decoder/encoder_decoder.hpp"

#include "reformer/core/error.hpp"
#include "reformer/data/pairs.hpp"
#include "train/families/sweep_model.hpp"
#include "train/memory_check.hpp"

namespace reformer {

using detail::concat;

// The mapping from the run config to the model's config (config/run_config.hpp).
namespace config {

models::TransformerConfig transformer_config(const RunConfig& config, Index vocab) {
  models::TransformerConfig t = config.transformer;
  const auto& m = config.model;
  if (vocab <= 0)  // before the task is read: a parallel file's byte vocabulary
    vocab = config.data.task == data::TaskKind::Parallel ? 259 : config.data.vocab;
  t.source_vocab = t.target_vocab = vocab;
  t.sizes() = m.sizes();  // [model]'s widths, regularisation and chunks
  t.max_length = m.max_length;
  t.positions = m.positions;
  t.lsh = m.lsh;
  t.local = m.local;
  return t;
}

}  // namespace config

namespace train {
namespace {

class EncoderDecoderFamily final : public ModelFamily {
 public:
  const char* name() const override { return "transformer"; }
  const char* description() const override { return "the encoder-decoder"; }
  bool takes_task(data::TaskKind task) const override { return data::is_pair_task(task); }
  // config::transformer_config's keys: the sizes, the lengths and positions,
  // [model.lsh], [model.local] and [model.seq2seq] (its vocabulary is the
  // task's; its depth and attention are [model.seq2seq]'s).
  bool reads(const std::string& key) const override {
    return config::is_shared_size_key(key) ||
           config::key_in(key, {"model.max_length", "model.positions", "model.lsh", "model.local",
                                "model.seq2seq"});
  }
  void validate(const config::RunConfig& c, const char* op) const override {
    config::require_default_eval(c, op);
    require<ConfigError>(data::is_pair_task(c.data.task), op, ": model.type is transformer but ",
                         "data.task is ", data::to_string(c.data.task),
                         "; the encoder-decoder trains on seq2seq_copy, seq2seq_reverse or "
                         "parallel");
    config::validate_common(c, op);
    const auto one_rate = [&](const char* key, double rate) {
      require<ConfigError>(rate == -1.0, op, ": ", key, " is ", rate,
                           " but the encoder-decoder has one attention dropout for every layer; "
                           "set model.attention_dropout instead");
    };
    one_rate("model.lsh.attention_dropout", c.model.lsh_attention_dropout);
    one_rate("model.local.attention_dropout", c.model.local_attention_dropout);
    // The task's vocabulary is known once a parallel file is read; data.vocab
    // stands in for it here.
    const auto model = config::transformer_config(c);
    model.validate();
    require<ConfigError>(c.data.length <= c.model.max_length, op, ": data.length is ",
                         c.data.length, " but model.max_length is ", c.model.max_length,
                         "; sources and targets must fit the model");
    // The pair tasks pad sources and targets to data.length.
    config::require_length_fits(c, op,
                                [&] { model.validate_lengths(c.data.length, c.data.length); });
  }
  void check_data(const config::RunConfig& config) const override {
    data::make_pair_task(data::pair_config(config.data));
  }
  RunMemory predict_run_memory(const config::RunConfig& config, Index batch,
                               bool training) const override {
    return train::predict_run_memory(config::transformer_config(config), batch, config.data.length,
                                     scalar_bytes(config), training, activation_bytes(config));
  }
  std::string summary(const config::RunConfig& config) const override {
    return concat("transformer, ", config.transformer.encoder_layers, " + ",
                  config.transformer.decoder_layers, " layers, ",
                  config.transformer.reversible ? "reversible" : "stored");
  }
  const char* sweep_base() const override { return sweep_base_transformer(); }
  const std::vector<std::string>& sweep_variants() const override { return sweep_variant_names(); }
  std::unique_ptr<SweepModel> sweep(const std::vector<std::string>& overrides) const override {
    // A run's vocabulary is its task's; the sweep's is model.vocab (no task).
    std::vector<std::string> checked;
    for (const auto& o : overrides)
      if (config::override_keys(o) != std::vector<std::string>{"model.vocab"}) checked.push_back(o);
    config::require_family_reads(*this, checked, "reformer memory");
    return make_sweep(config::parse_transformer_config(sweep_base(), "reformer memory", overrides),
                      [](models::TransformerConfig& c, Index layers) {
                        c.encoder_layers = c.decoder_layers = layers;
                      });
  }
  std::unique_ptr<Workload<float>> workload(const config::RunConfig& config, float) const override {
    return make_encoder_decoder_workload<float>(config);
  }
  std::unique_ptr<Workload<double>> workload(const config::RunConfig& config,
                                             double) const override {
    return make_encoder_decoder_workload<double>(config);
  }
  void read_prompts(const config::RunConfig&, const std::vector<std::string>& texts,
                    GenerateOptions& options) const override {
    require<ConfigError>(texts.size() <= 1, "generate: ", texts.size(),
                         " prompts given, but the encoder-decoder decodes one source at a time; "
                         "give one --prompt");
    if (!texts.empty()) options.source_text = texts[0];
  }
  bool decodes_by_beam_search() const override { return true; }
  GenerateResult generate(const std::string& checkpoint, const config::RunConfig& config,
                          const GenerateOptions& options) const override {
    auto r = config.train.dtype == "double"
                 ? generate_encoder_decoder<double>(checkpoint, config, options)
                 : generate_encoder_decoder<float>(checkpoint, config, options);
    r.report = concat("source:    ", r.prompt_text, "\n", "generated: ", r.generated_text, "\n");
    if (!r.expected.empty())
      r.report +=
          concat("expected:  ", r.expected_text, "\n",
                 r.generated == r.expected ? "exact match" : "differs from the target", "\n");
    return r;
  }
};

}  // namespace

const ModelFamily& encoder_decoder_family() {
  static const EncoderDecoderFamily family{};
  return family;
}

}  // namespace train
}  // namespace reformer
