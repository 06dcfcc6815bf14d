#include "train/families/transformer_xl/transformer_xl.hpp"

#include "reformer/core/error.hpp"
#include "reformer/core/instantiate.hpp"
#include "reformer/core/shape.hpp"
#include "reformer/io/checkpoint.hpp"
#include "reformer/models/transformer_xl.hpp"

#include <algorithm>
#include <cmath>

namespace reformer::train {
namespace {

using workload::count_other_than;
using workload::row_range;

// Transformer-XL on a text read as streams of consecutive segments. Training
// runs train.batch x train.accumulate streams; micro-batch `index` is segment
// index / A of the rows [j B, (j + 1) B), j = index % A, and each j keeps its
// own memories (the reference's batch_chunk), so that an optimizer step
// covers one segment of every stream. Evaluation runs train.batch streams of
// the split with memories of its own; batch i = 0 starts them afresh.
// Over N processes each takes its rows (rows_of) of every such batch and keeps
// the memories of those rows only; checkpoints gather every row's memories.
// Parameters, gradients and the optimizer in T; activations and memories in A
// (T, or bf16 with train.precision = "bf16"; checkpoints hold the memories
// widened to T, exactly).
template <class T, class A = T>
class SegmentStreams final : public Workload<T> {
 public:
  explicit SegmentStreams(const config::RunConfig& config)
      : config_(config),
        task_(data::make_task(config.data)),
        model_(config::xl_config(config), this->params),
        accumulate_(config.train.accumulate),
        streams_(config.train.batch * config.train.accumulate),
        memories_(std::size_t(config.train.accumulate)) {
    for (auto& m : memories_) m.mem_len = config.xl.mem_len;
    const auto& e = config.eval;
    eval_length_ = e.tgt_len > 0 ? e.tgt_len : config.data.length;
    eval_memory_.mem_len = e.mem_len >= 0 ? e.mem_len : config.xl.mem_len;
    eval_memory_.clamp_len = e.clamp_len;
    eval_memory_.same_length = e.same_length == "on" ? 1 : e.same_length == "off" ? 0 : -1;
    // Every split must hold its streams (IoError naming the split otherwise):
    // training's, and evaluation's train.batch streams of eval_length.
    task_->segments_per_stream(data::Split::Train, streams_, config.data.length);
    for (const auto split : {data::Split::Valid, data::Split::Test})
      task_->segments_per_stream(split, config.train.batch, eval_length_);
  }
  void init(RandomKey key) override { model_.init(key); }
  void shard(const Communicator& comm) override {
    const Index batch = config_.train.batch;
    require<ConfigError>(batch % comm.size() == 0, "transformer_xl: train.batch is ", batch,
                         " streams but the run has ", comm.size(),
                         " processes; each process carries its own streams and their memories, "
                         "so train.batch must be a multiple of the processes, e.g. ",
                         (batch / comm.size() + 1) * comm.size());
    Workload<T>::shard(comm);
  }

  ops::CrossEntropyResult forward_backward(std::uint64_t index, Index batch,
                                           const models::ModelCall& call) override {
    require_batch(batch);
    const std::uint64_t segment = index / std::uint64_t(accumulate_);
    const Index part = Index(index % std::uint64_t(accumulate_));
    auto& memory = memories_[std::size_t(part)];
    // Memories belong to the data just before `index`: anything else (a run
    // started afresh, a resume without stored memories) starts empty, and so
    // does every stream when it wraps around to its beginning.
    const std::uint64_t count =
        task_->segments_per_stream(data::Split::Train, streams_, config_.data.length);
    if (index != expected_ || segment % count == 0) memory.reset();
    expected_ = index + 1;
    const auto [first, rows] = this->rows_of(batch);
    load(task_->segments(data::Split::Train, segment, part * batch + first, rows, streams_,
                         config_.data.length));
    const auto result = model_.forward_backward(device_.inputs, device_.targets, -1,
                                                this->call_for_rows(call, batch), memory, state_);
    // A segment whose loss is not finite (the trainer skips it or stops) may
    // have left non-finite values in the memory: its streams start afresh,
    // on every process when any process's rows are not finite (as one
    // process with every row would), so that all keep memories of one length.
    double bad = std::isfinite(result.loss) ? 0.0 : 1.0;
    if (this->ranks_ > 1) {
      std::vector<double> sum = {bad};
      this->comm().sum(sum, "the segment's finiteness", config_.train.allreduce_timeout);
      bad = sum[0];
    }
    if (bad > 0) memory.reset();
    return result;
  }
  Index target_tokens(std::uint64_t, Index batch) override {
    return this->rows_of(batch).second * config_.data.length;
  }

  ops::CrossEntropyResult evaluate(data::Split split, std::uint64_t index, Index batch,
                                   const models::ModelCall& call) override {
    const std::uint64_t count = task_->segments_per_stream(split, batch, eval_length_);
    const std::uint64_t segment = index % count;
    if (config_.eval.recompute) return recompute(split, segment, batch, call);
    if (segment == 0 || index != eval_expected_ || split != eval_split_) eval_memory_.reset();
    eval_expected_ = index + 1;
    eval_split_ = split;
    const auto [first, rows] = this->rows_of(batch);
    load(task_->segments(split, segment, first, rows, batch, eval_length_));
    return model_.evaluate(device_.inputs, device_.targets, -1, this->call_for_rows(call, batch),
                           eval_memory_, state_);
  }
  std::pair<Index, Index> exact_matches(data::Split, std::uint64_t, Index) override {
    return {0, 0};
  }
  std::int64_t batches_in_split(data::Split split, Index batch) const override {
    return std::int64_t(task_->segments_per_stream(split, batch, eval_length_));
  }
  Workspace& workspace() override { return state_.workspace; }
  std::string describe() const override {
    const auto& e = config_.eval;
    return detail::concat(
        task_->describe_text(), "; Transformer-XL: ", streams_, " streams of segments of ",
        config_.data.length, ", mem_len ", config_.xl.mem_len, "; evaluation tgt_len ",
        eval_length_, ", ",
        e.recompute ? detail::concat("recomputing ", eval_memory_.mem_len, " tokens of context")
                    : detail::concat("mem_len ", eval_memory_.mem_len));
  }
  Index sequence_tokens() const override { return config_.data.length; }
  Index layers() const override { return model_.layers(); }

  // The memories as "memory.<j>.<layer>" [train.batch, M, d_model], every
  // process's rows in rank order (gathered onto process 0); none while empty.
  void save_state(ParameterSet<T>& state) const override {
    for (std::size_t j = 0; j < memories_.size(); ++j)
      for (std::size_t l = 0; l < memories_[j].hidden.size(); ++l) {
        const auto& h = memories_[j].hidden[l];
        const Index rows = Index(h.extent(0)), length = Index(h.extent(1));
        const Index d = Index(h.extent(2));
        const View1<T> flat = widened(h);
        if (this->ranks_ == 1) {
          Kokkos::deep_copy(state.add(state_name(j, l), {rows, length, d}).value, flat);
          continue;
        }
        const auto host = Kokkos::create_mirror_view_and_copy(HostSpace(), flat);
        const auto all = this->comm().gather(std::vector<T>(host.data(), host.data() + host.size()),
                                             "the Transformer-XL memories for a checkpoint",
                                             config_.train.allreduce_timeout);
        if (all.empty()) continue;  // not process 0
        auto& p = state.add(state_name(j, l), {rows * this->ranks_, length, d});
        Kokkos::deep_copy(p.value,
                          Kokkos::View<const T*, Layout, HostSpace>(all.data(), all.size()));
      }
  }
  void load_state(const std::string& checkpoint, std::uint64_t data_position) override {
    const auto stored = io::read_checkpoint_state(checkpoint);
    const Index batch = config_.train.batch, d = config_.model.d_model;
    ParameterSet<T> state;
    std::vector<Index> lengths(memories_.size(), 0);
    for (std::size_t j = 0; j < memories_.size(); ++j) {
      for (std::size_t l = 0; l < std::size_t(model_.layers()); ++l) {
        const auto name = state_name(j, l);
        const auto found =
            std::find_if(stored.begin(), stored.end(),
                         [&](const io::StoredParameter& p) { return p.name == name; });
        if (found == stored.end()) continue;
        const auto& shape = found->shape;
        require<IoError>(shape.size() == 3 && shape[0] == batch && shape[2] == d && shape[1] >= 1 &&
                             shape[1] <= config_.xl.mem_len && (l == 0 || shape[1] == lengths[j]),
                         "load_checkpoint: \"", checkpoint, "\": the memory ", name, " has shape ",
                         shape_string(shape), " but this run keeps [", batch, ", 1..",
                         config_.xl.mem_len, ", ", d,
                         "] per layer (train.batch, model.xl.mem_len, model.d_model), the same "
                         "length in every layer; the checkpoint is not this run's");
        lengths[j] = shape[1];
        state.add(name, shape);
      }
    }
    require<IoError>(Index(stored.size()) == state.size(), "load_checkpoint: \"", checkpoint,
                     "\" holds ", stored.size(), " memory tensors but this run (", memories_.size(),
                     " x ", model_.layers(), " layers) reads ", state.size(),
                     " of them; the checkpoint is not this run's");
    for (std::size_t j = 0; j < memories_.size(); ++j) {
      const bool some = lengths[j] > 0;
      for (std::size_t l = 0; some && l < std::size_t(model_.layers()); ++l)
        require<IoError>(state.contains(state_name(j, l)), "load_checkpoint: \"", checkpoint,
                         "\" lacks the memory ", state_name(j, l),
                         " that the other layers of stream group ", j,
                         " have; the checkpoint is damaged");
    }
    io::load_checkpoint_state<T>(checkpoint, state);
    // This process's rows of every memory (contiguous: rows come first).
    const auto [first, rows] = this->rows_of(batch);
    for (std::size_t j = 0; j < memories_.size(); ++j) {
      memories_[j].reset();
      if (lengths[j] == 0) continue;
      memories_[j].hidden.resize(std::size_t(model_.layers()));
      const Index per_row = lengths[j] * d;
      for (std::size_t l = 0; l < memories_[j].hidden.size(); ++l) {
        auto& h = memories_[j].hidden[l];
        h = View3<A>("txl_memory", rows, lengths[j], d);
        const In1<T> mine(state.get(state_name(j, l)).value.data() + first * per_row,
                          rows * per_row);
        if constexpr (std::is_same<A, T>::value)
          Kokkos::deep_copy(View1<T>(h.data(), h.size()), mine);
        else
          convert(mine, View1<A>(h.data(), h.size()));
      }
    }
    expected_ = data_position;
  }

 private:
  static std::string state_name(std::size_t j, std::size_t layer) {
    return detail::concat("memory.", j, ".", layer);
  }
  // A memory's values as T (the memory itself when A is T; bf16 widens exactly).
  static View1<T> widened(const View3<A>& h) {
    if constexpr (std::is_same<A, T>::value) {
      return View1<T>(h.data(), h.size());
    } else {
      View1<T> out(Kokkos::view_alloc(Kokkos::WithoutInitializing, "txl_memory_widened"), h.size());
      convert(In1<A>(h.data(), h.size()), out);
      return out;
    }
  }
  void require_batch(Index batch) const {
    require<ConfigError>(
        batch == config_.train.batch, "transformer_xl: a training batch of ", batch,
        " rows, but the streams were laid out for train.batch = ", config_.train.batch);
  }
  void load(const data::Batch& host) {
    if (!device_.inputs.data() || device_.inputs.extent(0) != host.inputs.extent(0) ||
        device_.inputs.extent(1) != host.inputs.extent(1))
      device_ = data::to_device(host);
    else
      data::copy_to_device(host, device_);
  }
  // The baseline: no memory; the model reruns on the eval.mem_len tokens
  // before the segment (fewer at the start of a stream) plus the segment,
  // and only the segment's targets count.
  ops::CrossEntropyResult recompute(data::Split split, std::uint64_t segment, Index batch,
                                    const models::ModelCall& call) {
    const Index length = eval_length_;
    const Index context = Index(std::min<std::uint64_t>(std::uint64_t(eval_memory_.mem_len),
                                                        segment * std::uint64_t(length)));
    const Index before = (context + length - 1) / length;  // earlier segments to read
    const auto [first, rows] = this->rows_of(batch);
    data::Batch joined{data::HostTokens("recompute_inputs", rows, context + length),
                       data::HostTokens("recompute_targets", rows, context + length),
                       {}};
    for (Index k = 0; k <= before; ++k) {
      const auto part =
          task_->segments(split, segment - std::uint64_t(before - k), first, rows, batch, length);
      const Index start = context - (before - k) * length;  // may be negative
      for (Index b = 0; b < rows; ++b)
        for (Index t = std::max<Index>(0, -start); t < length; ++t) {
          joined.inputs(b, start + t) = part.inputs(b, t);
          joined.targets(b, start + t) = start + t < context ? -1 : part.targets(b, t);
        }
    }
    load(joined);
    // No memory comes in; mem_len still sets same_length's window (a query
    // sees the keys at distances below it), as with a memory.
    models::TransformerXLMemory<A> none;
    none.mem_len = eval_memory_.mem_len;
    none.clamp_len = eval_memory_.clamp_len;
    none.same_length = eval_memory_.same_length;
    return model_.evaluate(device_.inputs, device_.targets, -1, this->call_for_rows(call, batch),
                           none, state_);
  }

  config::RunConfig config_;
  std::unique_ptr<data::Task> task_;
  models::TransformerXL<A> model_;
  Index accumulate_, streams_;
  std::vector<models::TransformerXLMemory<A>> memories_;
  std::uint64_t expected_ = 0;  // the training index the memories lead to
  Index eval_length_ = 0;
  models::TransformerXLMemory<A> eval_memory_;
  std::uint64_t eval_expected_ = 0;
  data::Split eval_split_ = data::Split::Valid;
  models::TransformerXLState<A> state_;
  data::DeviceBatch device_;
};

}  // namespace

template <class T>
std::unique_ptr<Workload<T>> make_transformer_xl_workload(const config::RunConfig& config) {
  if constexpr (std::is_same<T, float>::value)
    if (config.train.precision == "bf16")
      return std::make_unique<SegmentStreams<float, bf16>>(config);
  return std::make_unique<SegmentStreams<T>>(config);
}

template std::unique_ptr<Workload<float>> make_transformer_xl_workload<float>(
    const config::RunConfig&);
template std::unique_ptr<Workload<double>> make_transformer_xl_workload<double>(
    const config::RunConfig&);

}  // namespace reformer::train
