#include "train/workload.hpp"

#include "reformer/core/error.hpp"
#include "reformer/core/instantiate.hpp"
#include "reformer/core/shape.hpp"

namespace reformer::train {
namespace {

// Entries of a host batch that are not `skip`.
Index count_other_than(const data::HostTokens& tokens, int skip) {
  Index n = 0;
  for (Index b = 0; b < Index(tokens.extent(0)); ++b)
    for (Index t = 0; t < Index(tokens.extent(1)); ++t) n += tokens(b, t) != skip;
  return n;
}

// The Reformer language model on a language-model task.
template <class T>
class LanguageModel final : public Workload<T> {
 public:
  explicit LanguageModel(const config::RunConfig& config)
      : task_(data::make_task(config.data)), model_(config::lm_config(config), this->params) {}
  void init(RandomKey key) override { model_.init(key); }
  ops::CrossEntropyResult forward_backward(std::uint64_t index, Index batch,
                                           const models::ReformerCall& call) override {
    load(data::Split::Train, index, batch);
    return model_.forward_backward(device_.inputs, device_.targets, task_->ignore_id(),
                                   with_mask(call), state_);
  }
  ops::CrossEntropyResult evaluate(data::Split split, std::uint64_t index, Index batch,
                                   const models::ReformerCall& call) override {
    load(split, index, batch);
    return model_.evaluate(device_.inputs, device_.targets, task_->ignore_id(), with_mask(call),
                           state_);
  }
  Index target_tokens(std::uint64_t index, Index batch) override {
    return count_other_than(task_->batch(data::Split::Train, index, batch).targets,
                            task_->ignore_id());
  }
  std::pair<Index, Index> exact_matches(data::Split, std::uint64_t, Index) override {
    return {0, 0};
  }
  std::string describe() const override { return task_->describe(); }
  Index sequence_tokens() const override { return task_->length(); }
  Index layers() const override { return model_.layers(); }

 private:
  // The call with the loaded batch's padding mask (tasks whose sequences end early).
  models::ReformerCall with_mask(models::ReformerCall call) const {
    call.valid = device_.valid;
    return call;
  }
  void load(data::Split split, std::uint64_t index, Index batch) {
    const auto host = task_->batch(split, index, batch);
    if (!device_.inputs.data() || Index(device_.inputs.extent(0)) != batch ||
        (device_.valid.extent(0) > 0) != (host.valid.extent(0) > 0))
      device_ = data::to_device(host);
    else
      data::copy_to_device(host, device_);
  }
  std::unique_ptr<data::Task> task_;
  models::ReformerLM<T> model_;
  models::ReformerState<T> state_;
  data::DeviceBatch device_;
};

// The encoder-decoder Transformer on a source/target pair task.
template <class T>
class Seq2Seq final : public Workload<T> {
 public:
  explicit Seq2Seq(const config::RunConfig& config)
      : task_(data::make_pair_task(data::pair_config(config.data))),
        model_(seq2seq_model_config(config, *task_), this->params) {}
  void init(RandomKey key) override { model_.init(key); }
  ops::CrossEntropyResult forward_backward(std::uint64_t index, Index batch,
                                           const models::ReformerCall& call) override {
    load(data::Split::Train, index, batch);
    return model_.forward_backward(device_batch(), data::PairTask::kPad, call, state_);
  }
  ops::CrossEntropyResult evaluate(data::Split split, std::uint64_t index, Index batch,
                                   const models::ReformerCall& call) override {
    load(split, index, batch);
    return model_.evaluate(device_batch(), data::PairTask::kPad, call, state_);
  }
  Index target_tokens(std::uint64_t index, Index batch) override {
    return count_other_than(load(data::Split::Train, index, batch).target_out,
                            data::PairTask::kPad);
  }
  std::pair<Index, Index> exact_matches(data::Split split, std::uint64_t index,
                                        Index batch) override {
    const auto& host = load(split, index, batch);
    const auto decoded = model_.greedy(views_[0], views_[1], data::PairTask::kStart,
                                       data::PairTask::kEnd, task_->length());
    Index same = 0;
    for (Index b = 0; b < batch; ++b) {
      std::vector<int> want;
      for (Index t = 0; t < Index(host.target_out.extent(1)); ++t) {
        want.push_back(host.target_out(b, t));
        if (host.target_out(b, t) == data::PairTask::kEnd) break;
      }
      same += decoded[std::size_t(b)] == want;
    }
    return {same, batch};
  }
  std::string describe() const override { return task_->describe(); }
  Index sequence_tokens() const override { return task_->length(); }
  Index layers() const override {
    return model_.config().encoder_layers + model_.config().decoder_layers;
  }

 private:
  // The batch on the device: source, source_valid, target_in, target_out,
  // target_valid. A batch is a pure function of (split, index, size), so the
  // one just loaded (evaluate, then exact_matches) is not built again.
  const data::PairBatch& load(data::Split split, std::uint64_t index, Index batch) {
    if (loaded_ && split == split_ && index == index_ && batch == host_.batch_size()) return host_;
    host_ = task_->batch(split, index, batch);
    const data::HostTokens parts[5] = {host_.source, host_.source_valid, host_.target_in,
                                       host_.target_out, host_.target_valid};
    for (int i = 0; i < 5; ++i) {
      ensure_view(views_[i], "seq2seq_batch", parts[i].extent(0), parts[i].extent(1));
      Kokkos::deep_copy(views_[i], parts[i]);
    }
    loaded_ = true;
    split_ = split;
    index_ = index;
    return host_;
  }
  models::Seq2SeqBatch device_batch() const {
    return {views_[0], views_[2], views_[3], views_[1], views_[4]};
  }
  std::unique_ptr<data::PairTask> task_;
  models::EncoderDecoder<T> model_;
  models::TransformerState<T> state_;
  View2<int> views_[5];
  data::PairBatch host_;
  bool loaded_ = false;
  data::Split split_ = data::Split::Train;
  std::uint64_t index_ = 0;
};

}  // namespace

models::TransformerConfig seq2seq_model_config(const config::RunConfig& config,
                                               const data::PairTask& task) {
  return config::transformer_config(config, task.vocab());
}

template <class T>
std::unique_ptr<Workload<T>> make_workload(const config::RunConfig& config) {
  if (config.model_type == "transformer") return std::make_unique<Seq2Seq<T>>(config);
  return std::make_unique<LanguageModel<T>>(config);
}

template std::unique_ptr<Workload<float>> make_workload<float>(const config::RunConfig&);
template std::unique_ptr<Workload<double>> make_workload<double>(const config::RunConfig&);

}  // namespace reformer::train
