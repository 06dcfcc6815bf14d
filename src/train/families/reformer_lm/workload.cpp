#include "train/families/reformer_lm/reformer_lm.hpp"

#include "reformer/core/error.hpp"
#include "reformer/core/instantiate.hpp"
#include "reformer/models/reformer_lm.hpp"

#include <type_traits>

namespace reformer::train {
namespace {

using workload::count_other_than;
using workload::row_range;

// The Reformer language model on a language-model task: parameters, their
// gradients and the optimizer in T, activations in A (T, or bf16 with
// train.precision = "bf16").
template <class T, class A = T>
class LanguageModel final : public Workload<T> {
 public:
  explicit LanguageModel(const config::RunConfig& config)
      : task_(data::make_task(config.data)), model_(config::lm_config(config), this->params) {}
  void init(RandomKey key) override { model_.init(key); }
  ops::CrossEntropyResult forward_backward(std::uint64_t index, Index batch,
                                           const models::ModelCall& call) override {
    load(data::Split::Train, index, batch);
    return model_.forward_backward(device_.inputs, device_.targets, task_->ignore_id(),
                                   with_mask(this->call_for_rows(call, batch)), state_,
                                   this->after_layer);
  }
  ops::CrossEntropyResult evaluate(data::Split split, std::uint64_t index, Index batch,
                                   const models::ModelCall& call) override {
    load(split, index, batch);
    return model_.evaluate(device_.inputs, device_.targets, task_->ignore_id(),
                           with_mask(this->call_for_rows(call, batch)), state_);
  }
  Index target_tokens(std::uint64_t index, Index batch) override {
    return count_other_than(mine(task_->batch(data::Split::Train, index, batch)).targets,
                            task_->ignore_id());
  }
  std::pair<Index, Index> exact_matches(data::Split, std::uint64_t, Index) override {
    return {0, 0};
  }
  Workspace& workspace() override { return state_.workspace; }
  std::string describe() const override { return task_->describe(); }
  Index sequence_tokens() const override { return task_->length(); }
  Index layers() const override { return model_.layers(); }
  std::vector<std::pair<Index, Index>> layer_gradient_ranges() const override {
    return model_.layer_ranges();
  }

 private:
  // The call with the loaded batch's padding mask (tasks whose sequences end early).
  models::ModelCall with_mask(models::ModelCall call) const {
    call.valid = device_.valid;
    return call;
  }
  // This process's rows of a batch.
  data::Batch mine(const data::Batch& all) const {
    const auto [first, count] = this->rows_of(all.batch_size());
    if (count == all.batch_size()) return all;
    return {row_range(all.inputs, first, count), row_range(all.targets, first, count),
            row_range(all.valid, first, count)};
  }
  void load(data::Split split, std::uint64_t index, Index batch) {
    const auto host = mine(task_->batch(split, index, batch));
    if (!device_.inputs.data() || device_.inputs.extent(0) != host.inputs.extent(0) ||
        (device_.valid.extent(0) > 0) != (host.valid.extent(0) > 0))
      device_ = data::to_device(host);
    else
      data::copy_to_device(host, device_);
  }
  std::unique_ptr<data::Task> task_;
  models::ReformerLM<A> model_;
  models::ReformerState<A> state_;
  data::DeviceBatch device_;
};

}  // namespace

template <class T>
std::unique_ptr<Workload<T>> make_lm_workload(const config::RunConfig& config) {
  if constexpr (std::is_same<T, float>::value)
    if (config.train.precision == "bf16")
      return std::make_unique<LanguageModel<float, bf16>>(config);
  return std::make_unique<LanguageModel<T>>(config);
}

template std::unique_ptr<Workload<float>> make_lm_workload<float>(const config::RunConfig&);
template std::unique_ptr<Workload<double>> make_lm_workload<double>(const config::RunConfig&);

}  // namespace reformer::train
