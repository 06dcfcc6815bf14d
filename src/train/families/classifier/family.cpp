#include "train/families/classifier/classifier.hpp"

#include "reformer/core/error.hpp"
#include "reformer/data/listops.hpp"
#include "train/memory_check.hpp"

#include <filesystem>
#include <map>
#include <mutex>

namespace reformer::train {

using detail::concat;
using Kind = config::FamilyKey::Kind;

namespace classifier {

Index task_documents(data::TaskKind task) {
  return task == data::TaskKind::Retrieval ? 2 : 1;  // pairs of documents
}

data::ClassDataConfig data_config(const config::RunConfig& c) {
  data::ClassDataConfig d;
  d.task = data::parse_class_task_kind(data::to_string(c.data.task));
  d.length = c.data.length;
  d.seed = c.data.seed;
  d.vocab = c.data.vocab;
  d.path = c.data.path;
  const auto& s = c.settings;
  d.examples[0] = std::uint64_t(std::max<std::int64_t>(0, s.integer("data.examples.train")));
  d.examples[1] = std::uint64_t(std::max<std::int64_t>(0, s.integer("data.examples.valid")));
  d.examples[2] = std::uint64_t(std::max<std::int64_t>(0, s.integer("data.examples.test")));
  d.listops.min_length = s.integer("data.listops.min_length");
  d.listops.max_length = s.integer("data.listops.max_length");
  d.listops.max_depth = int(s.integer("data.listops.max_depth"));
  d.listops.max_args = int(s.integer("data.listops.max_args"));
  d.listops.seed = c.data.seed;
  return d;
}

models::ClassifierConfig model_config(const config::RunConfig& c, Index classes) {
  models::ClassifierConfig m;
  m.encoder = config::lm_config(c);
  const Index declared = c.settings.integer("model.classifier.classes");
  m.classes = classes > 0 ? classes : declared > 0 ? declared : 2;
  m.pooling = models::parse_pooling(c.settings.text("model.classifier.pooling"));
  const Index documents = c.settings.integer("model.classifier.documents");
  m.documents = documents > 0 ? documents : task_documents(c.data.task);
  return m;
}

}  // namespace classifier

namespace {

// The classes of the run's head as its workload will build it:
// model.classifier.classes, or the task's. The text and retrieval tasks' come
// from their files (the largest label + 1): a label of 16,000,000 makes a
// head of 16,000,001 rows, which the memory check must see before the run
// allocates it. A text file is read once per size and time (the check runs for
// several chunk sizes); retrieval keeps its own index. A file that cannot be
// read counts 2 classes here: check_data names it.
Index head_classes(const config::RunConfig& c) {
  const Index declared = c.settings.integer("model.classifier.classes");
  if (declared > 0 ||
      (c.data.task != data::TaskKind::Text && c.data.task != data::TaskKind::Retrieval))
    return declared;  // 0: model_config's default (2; ListOps' and Image's 10 are a small head)
  std::string key;
  if (c.data.task == data::TaskKind::Text) {
    std::error_code size_error, time_error;
    const auto size = std::filesystem::file_size(c.data.path, size_error);
    const auto time = std::filesystem::last_write_time(c.data.path, time_error);
    if (size_error || time_error) return 0;
    key = concat(c.data.path, '\n', size, '\n', time.time_since_epoch().count());
  }
  static std::mutex mutex;
  static std::map<std::string, Index> known;
  std::lock_guard<std::mutex> lock(mutex);
  if (!key.empty() && known.count(key)) return known[key];
  Index classes = 0;
  try {
    classes = data::make_class_task(classifier::data_config(c))->classes();
  } catch (const std::exception&) {  // check_data names what is wrong with the files
    return 0;
  }
  if (!key.empty()) known[key] = classes;
  return classes;
}

// The token ids a task's rows hold, known without reading a file.
Index task_vocab(const config::RunConfig& c) {
  switch (c.data.task) {
    case data::TaskKind::ListOps:
      return data::listops::kVocab;
    case data::TaskKind::Text:
    case data::TaskKind::Image:
    case data::TaskKind::Pathfinder:
    case data::TaskKind::Retrieval:
      return data::kByteVocab;
    default:
      return c.data.vocab;
  }
}

// model.classifier.classes against the task's class count.
void require_task_classes(const char* op, Index declared, Index classes) {
  require<ConfigError>(declared == 0 || declared == classes, op, ": model.classifier.classes is ",
                       declared, " but the task has ", classes, " classes; set it to ", classes,
                       " or 0 (the task's)");
}

class ClassifierFamily final : public ModelFamily {
 public:
  const char* name() const override { return "classifier"; }
  const char* description() const override { return "an encoder classifier"; }
  bool takes_task(data::TaskKind task) const override { return data::is_class_task(task); }
  // The language model's keys (its encoder), not the encoder-decoder's or
  // Transformer-XL's, nor the language model's output (its head has no tied
  // weights and no loss chunks: models/classifier.cpp).
  bool reads(const std::string& key) const override {
    return !config::key_in(
        key, {"model.seq2seq", "model.xl", "model.tie_embeddings", "model.loss_chunk"});
  }
  std::vector<config::FamilyKey> own_keys() const override {
    return {
        {"model.classifier.classes",
         Kind::Integer,
         "0",
         {},
         "classes of the head; 0: the task's (listops 10, image 10, matching_ends and pathfinder "
         "2, text and retrieval: the files')"},
        {"model.classifier.documents",
         Kind::Integer,
         "0",
         {},
         "sequences of an example: 1, or 2 (a two-tower model over pairs of documents, each "
         "encoded alone; the head reads [u, v, u*v, u-v]); 0: the task's (retrieval 2, the "
         "others 1)"},
        {"model.classifier.pooling",
         Kind::String,
         "\"mean\"",
         {"mean", "first"},
         "the summary of a sequence: the mean over its real positions, or position 0",
         true},
        {"data.examples.train", Kind::Integer, "0", {}, "examples of train; 0: the task's"},
        {"data.examples.valid", Kind::Integer, "0", {}, "examples of valid; 0: the task's"},
        {"data.examples.test", Kind::Integer, "0", {}, "examples of test; 0: the task's"},
        {"data.listops.min_length", Kind::Integer, "500", {}, "a tree is longer than this"},
        {"data.listops.max_length", Kind::Integer, "2000", {}, "... and shorter than this"},
        {"data.listops.max_depth", Kind::Integer, "10", {}, "nesting depth at most"},
        {"data.listops.max_args", Kind::Integer, "10", {}, "arguments of an operator at most"},
    };
  }
  void validate(const config::RunConfig& c, const char* op) const override {
    config::require_default_eval(c, op);
    config::require_family_task(c, op);
    config::validate_common(c, op);
    const auto& s = c.settings;
    require<ConfigError>(
        s.integer("model.classifier.classes") == 0 || s.integer("model.classifier.classes") >= 2,
        op, ": model.classifier.classes is ", s.integer("model.classifier.classes"),
        " but must be 0 (the task's) or at least 2");
    const Index documents = s.integer("model.classifier.documents");
    const Index task_docs = classifier::task_documents(c.data.task);
    require<ConfigError>(
        documents == 0 || documents == task_docs, op, ": model.classifier.documents is ", documents,
        " but data.task ", data::to_string(c.data.task), " has ", task_docs,
        task_docs == 2 ? " documents per example (pairs)" : " sequence per example", "; set it to ",
        task_docs, " or 0 (the task's)");
    for (const char* key : {"data.examples.train", "data.examples.valid", "data.examples.test"})
      require<ConfigError>(s.integer(key) >= 0, op, ": ", key, " is ", s.integer(key),
                           " but must be >= 0 (0: the task's)");
    classifier::data_config(c).validate();
    // The tasks whose class count is known without a file are checked here,
    // with the config (the text and retrieval tasks' once their files are
    // read, check_data).
    if (c.data.task != data::TaskKind::Text && c.data.task != data::TaskKind::Retrieval) {
      const Index classes = c.data.task == data::TaskKind::ListOps ? data::listops::kClasses
                            : c.data.task == data::TaskKind::Image ? data::image::kClasses
                                                                   : 2;
      require_task_classes(op, s.integer("model.classifier.classes"), classes);
    }
    require<ConfigError>(!c.model.causal, op,
                         ": model.causal is true but the classifier's encoder reads the whole "
                         "sequence in both directions; set model.causal = false");
    const auto m = classifier::model_config(c);
    m.validate();
    config::require_length_fits(c, op, [&] { m.encoder.validate_length(c.data.length); });
    require<ConfigError>(task_vocab(c) <= c.model.vocab, op, ": data.task ",
                         data::to_string(c.data.task), " has token ids below ", task_vocab(c),
                         " but model.vocab is ", c.model.vocab,
                         "; set model.vocab >= ", task_vocab(c));
  }
  void check_data(const config::RunConfig& config) const override {
    const auto task = data::make_class_task(classifier::data_config(config));
    require_task_classes("data", config.settings.integer("model.classifier.classes"),
                         task->classes());
    require<ConfigError>(task->vocab() <= config.model.vocab, "data.task ",
                         data::to_string(config.data.task), " has token ids below ", task->vocab(),
                         " but model.vocab is ", config.model.vocab);
  }
  RunMemory predict_run_memory(const config::RunConfig& config, Index batch,
                               bool training) const override {
    return classifier::predict_run_memory(classifier::model_config(config, head_classes(config)),
                                          batch, config.data.length, scalar_bytes(config), training,
                                          activation_bytes(config));
  }
  std::string summary(const config::RunConfig& config) const override {
    return concat("classifier, ", counted(config.model.layers, "layer"), ", ",
                  config.model.reversible ? "reversible" : "stored", ", ",
                  config.settings.text("model.classifier.pooling"), " pooling");
  }
  const char* sweep_base() const override { return classifier::sweep_base(); }
  const std::vector<std::string>& sweep_variants() const override {
    return classifier::sweep_variants();
  }
  std::unique_ptr<SweepModel> sweep(const std::vector<std::string>& overrides) const override {
    return classifier::make_sweep(overrides);
  }
  std::unique_ptr<Workload<float>> workload(const config::RunConfig& config, float) const override {
    return classifier::make_workload<float>(config);
  }
  std::unique_ptr<Workload<double>> workload(const config::RunConfig& config,
                                             double) const override {
    return classifier::make_workload<double>(config);
  }
  void read_prompts(const config::RunConfig&, const std::vector<std::string>&,
                    GenerateOptions&) const override {
    refuse();
  }
  GenerateResult generate(const std::string&, const config::RunConfig&,
                          const GenerateOptions&) const override {
    refuse();
  }

 private:
  [[noreturn]] static void refuse() {
    throw ConfigError(
        "generate: model.type = \"classifier\" labels whole sequences and generates no tokens; "
        "run `reformer eval RUN` for its accuracy and loss on the valid or test split");
  }
};

}  // namespace

const ModelFamily& classifier_family() {
  static const ClassifierFamily family{};
  return family;
}

}  // namespace reformer::train
