#include "train/families/encoder_decoder/encoder_decoder.hpp"

#include "reformer/core/error.hpp"
#include "reformer/core/instantiate.hpp"
#include "reformer/core/shape.hpp"
#include "reformer/data/pairs.hpp"
#include "reformer/models/transformer.hpp"

#include <array>

#include <memory>
#include <type_traits>

namespace reformer::train {
namespace {

using workload::count_other_than;
using workload::row_range;

// The five parts of a pair batch (a named array: nvcc 11.8 cannot range over
// a braced list).
std::array<data::HostTokens*, 5> parts_of(data::PairBatch& batch) {
  return {&batch.source, &batch.source_valid, &batch.target_in, &batch.target_out,
          &batch.target_valid};
}

// The encoder-decoder Transformer on a source/target pair task: parameters,
// gradients and the optimizer in T, activations in A (T, or bf16 with
// train.precision = "bf16"; greedy decoding then runs a float32 copy of the
// model on the same weights).
template <class T, class A = T>
class Seq2Seq final : public Workload<T> {
 public:
  explicit Seq2Seq(const config::RunConfig& config)
      : task_(data::make_pair_task(data::pair_config(config.data))),
        model_(config::transformer_config(config, task_->vocab()), this->params) {}
  void init(RandomKey key) override { model_.init(key); }
  ops::CrossEntropyResult forward_backward(std::uint64_t index, Index batch,
                                           const models::ModelCall& call) override {
    load(data::Split::Train, index, batch);
    return model_.forward_backward(device_batch(), data::PairTask::kPad,
                                   this->call_for_rows(call, batch), state_);
  }
  ops::CrossEntropyResult evaluate(data::Split split, std::uint64_t index, Index batch,
                                   const models::ModelCall& call) override {
    load(split, index, batch);
    return model_.evaluate(device_batch(), data::PairTask::kPad, this->call_for_rows(call, batch),
                           state_);
  }
  Index target_tokens(std::uint64_t index, Index batch) override {
    return count_other_than(load(data::Split::Train, index, batch).target_out,
                            data::PairTask::kPad);
  }
  std::pair<Index, Index> exact_matches(data::Split split, std::uint64_t index,
                                        Index batch) override {
    const auto& host = load(split, index, batch);
    const auto decoded = decoding_model().greedy(views_[0], views_[1], data::PairTask::kStart,
                                                 data::PairTask::kEnd, task_->length());
    Index same = 0;
    const Index rows = host.batch_size();
    for (Index b = 0; b < rows; ++b) {
      std::vector<int> want;
      for (Index t = 0; t < Index(host.target_out.extent(1)); ++t) {
        want.push_back(host.target_out(b, t));
        if (host.target_out(b, t) == data::PairTask::kEnd) break;
      }
      same += decoded[std::size_t(b)] == want;
    }
    return {same, rows};
  }
  Workspace& workspace() override { return state_.workspace; }
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
    if (loaded_ && split == split_ && index == index_ && batch == batch_) return host_;
    host_ = task_->batch(split, index, batch);
    const auto [first, count] = this->rows_of(batch);
    if (count != batch)
      for (data::HostTokens* part : parts_of(host_)) *part = row_range(*part, first, count);
    batch_ = batch;
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
  // The model that decodes: model_ itself, or (bf16 activations) a T model
  // whose parameters are copied from this->params (registered in the same
  // order, so the flat buffers match).
  const models::EncoderDecoder<T>& decoding_model() {
    if constexpr (std::is_same<A, T>::value) {
      return model_;
    } else {
      if (!decoder_)
        decoder_ = std::make_unique<models::EncoderDecoder<T>>(model_.config(), decoder_params_);
      Kokkos::deep_copy(decoder_params_.values(), this->params.values());
      return *decoder_;
    }
  }
  models::EncoderDecoder<A> model_;
  models::TransformerState<A> state_;
  ParameterSet<T> decoder_params_;
  std::unique_ptr<models::EncoderDecoder<T>> decoder_;
  View2<int> views_[5];
  data::PairBatch host_;
  bool loaded_ = false;
  data::Split split_ = data::Split::Train;
  std::uint64_t index_ = 0;
  Index batch_ = 0;
};

}  // namespace

template <class T>
std::unique_ptr<Workload<T>> make_encoder_decoder_workload(const config::RunConfig& config) {
  if constexpr (std::is_same<T, float>::value)
    if (config.train.precision == "bf16") return std::make_unique<Seq2Seq<float, bf16>>(config);
  return std::make_unique<Seq2Seq<T>>(config);
}

template std::unique_ptr<Workload<float>> make_encoder_decoder_workload<float>(
    const config::RunConfig&);
template std::unique_ptr<Workload<double>> make_encoder_decoder_workload<double>(
    const config::RunConfig&);

}  // namespace reformer::train
