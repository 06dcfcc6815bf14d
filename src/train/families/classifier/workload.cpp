#include "train/families/classifier/classifier.hpp"

#include "reformer/core/error.hpp"

#include <type_traits>

namespace reformer::train::classifier {
namespace {

// The classifier on a classification task: parameters, their gradients and
// the optimizer in T, activations in A (T, or bf16 with train.precision =
// "bf16"). A row's loss counts once (labels -1, past an evaluation split's
// end, count nowhere).
template <class T, class A = T>
class Classification final : public Workload<T> {
 public:
  explicit Classification(const config::RunConfig& config)
      : task_(data::make_class_task(data_config(config))),
        model_(model_config(config, task_->classes()), this->params) {}
  void init(RandomKey key) override { model_.init(key); }
  ops::CrossEntropyResult forward_backward(std::uint64_t index, Index batch,
                                           const models::ModelCall& call) override {
    load(data::Split::Train, index, batch);
    return model_.forward_backward(ids_, labels_, with_mask(this->call_for_rows(call, batch)),
                                   state_, this->after_layer);
  }
  ops::CrossEntropyResult evaluate(data::Split split, std::uint64_t index, Index batch,
                                   const models::ModelCall& call) override {
    load(split, index, batch);
    return model_.evaluate(ids_, labels_, with_mask(this->call_for_rows(call, batch)), state_);
  }
  // Every training row is an example with a label (only evaluation batches
  // run past a split's end), so this process's rows count without reading
  // them (the image tasks decode files per row).
  Index target_tokens(std::uint64_t, Index batch) override { return this->rows_of(batch).second; }
  std::pair<Index, Index> exact_matches(data::Split, std::uint64_t, Index) override {
    return {0, 0};
  }
  Workspace& workspace() override { return state_.workspace; }
  std::string describe() const override { return task_->describe(); }
  // An example is one prediction; tokens per second counts its positions (of
  // both documents for a pair).
  Index sequence_tokens() const override { return task_->length() * task_->documents(); }
  const char* scored_unit() const override { return "example"; }
  Index layers() const override { return model_.layers(); }
  std::int64_t batches_in_split(data::Split split, Index batch) const override {
    if (split == data::Split::Train) return -1;  // drawn at random
    return std::int64_t(task_->batches_in_split(split, batch));
  }
  std::vector<std::pair<Index, Index>> layer_gradient_ranges() const override {
    return model_.layer_ranges();
  }

 private:
  models::ModelCall with_mask(models::ModelCall call) const {
    call.valid = valid_;
    return call;
  }
  void load(data::Split split, std::uint64_t index, Index batch) {
    // Only this process's rows are made (and their files read).
    const auto [first, count] = this->rows_of(batch);
    const auto host = task_->batch(split, index, batch, first, count);
    // Sequences: rows x the task's documents (pairs: 2 r and 2 r + 1).
    const Index rows = host.tokens.extent(0), length = host.tokens.extent(1);
    if (Index(ids_.extent(0)) != rows || Index(ids_.extent(1)) != length) {
      ids_ = View2<int>("classifier_ids", rows, length);
      valid_ = View2<int>("classifier_valid", rows, length);
    }
    if (Index(labels_.extent(0)) != host.batch_size())
      labels_ = Kokkos::View<int*, Layout, MemSpace>("classifier_labels", host.batch_size());
    // This process's rows are contiguous in the host batch: one copy each.
    Kokkos::deep_copy(ids_, host.tokens);
    Kokkos::deep_copy(valid_, host.valid);
    Kokkos::deep_copy(labels_, host.labels);
  }
  std::unique_ptr<data::ClassTask> task_;
  models::Classifier<A> model_;
  models::ClassifierState<A> state_;
  View2<int> ids_, valid_;
  Kokkos::View<int*, Layout, MemSpace> labels_;
};

}  // namespace

template <class T>
std::unique_ptr<Workload<T>> make_workload(const config::RunConfig& config) {
  if constexpr (std::is_same<T, float>::value)
    if (config.train.precision == "bf16")
      return std::make_unique<Classification<float, bf16>>(config);
  return std::make_unique<Classification<T>>(config);
}

template std::unique_ptr<Workload<float>> make_workload<float>(const config::RunConfig&);
template std::unique_ptr<Workload<double>> make_workload<double>(const config::RunConfig&);

}  // namespace reformer::train::classifier
