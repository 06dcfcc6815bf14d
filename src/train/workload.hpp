// The one interface between the trainer (train/trainer.cpp) and a model with its
// data, built by the model's family (train/model_family.hpp; each family's
// workload is in src/train/families/<family>/workload.cpp). The trainer, eval
// and checkpoints see only this (private to the library).
#pragma once

#include "reformer/config/run_config.hpp"
#include "reformer/core/distributed.hpp"
#include "reformer/core/parameter_set.hpp"
#include "reformer/core/workspace.hpp"
#include "reformer/data/tasks.hpp"
#include "reformer/models/model_call.hpp"
#include "reformer/ops/cross_entropy.hpp"

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace reformer::train {

template <class T>
class Workload {
 public:
  virtual ~Workload() = default;
  ParameterSet<T> params;  // the model registers its parameters here
  virtual void init(RandomKey key) = 0;
  // Micro-batch `index` of the training split: the loss, with its gradients
  // accumulated into params.
  virtual ops::CrossEntropyResult forward_backward(std::uint64_t index, Index batch,
                                                   const models::ModelCall& call) = 0;
  // Targets that count in the loss of micro-batch `index` of the training
  // split (not padding, not ignored): the trainer weights accumulated
  // micro-batches by these.
  virtual Index target_tokens(std::uint64_t index, Index batch) = 0;
  // Batch `index` of a split, no gradients.
  virtual ops::CrossEntropyResult evaluate(data::Split split, std::uint64_t index, Index batch,
                                           const models::ModelCall& call) = 0;
  // Sequences of batch `index` decoded exactly (greedy, the encoder-decoder):
  // {matching, total}; {0, 0} when the model does not decode.
  virtual std::pair<Index, Index> exact_matches(data::Split split, std::uint64_t index,
                                                Index batch) = 0;
  virtual std::string describe() const = 0;
  // The workspace a training step takes its temporaries from: the trainer
  // reserves the step's predicted need in it before the first step
  // (core/workspace.hpp) and shrinks it to the high-water mark after it.
  virtual Workspace& workspace() = 0;
  // Target tokens a sequence holds (for tokens per second).
  virtual Index sequence_tokens() const = 0;
  // What one scored target is, for the evaluation's lines ("bits/token",
  // "bits/example"): a family that labels whole sequences scores examples.
  virtual const char* scored_unit() const { return "token"; }
  // Layers for the progress line.
  virtual Index layers() const = 0;
  // Batches that cover a split once (Transformer-XL: the segments of a
  // stream at evaluation's tgt_len); -1 for workloads whose batches are
  // random windows or generated, which have no end.
  virtual std::int64_t batches_in_split(data::Split split, Index batch) const;
  // State a resumed run needs besides the parameters and the data position
  // (Transformer-XL's memories, which were computed with earlier parameters
  // and cannot be rebuilt): written into `state` for a checkpoint, read back
  // from one. Nothing for the other workloads. Every process calls
  // save_state; the state of all rows lands on process 0 (which writes), and
  // load_state takes this process's rows of it.
  virtual void save_state(ParameterSet<T>& state) const { (void)state; }
  virtual void load_state(const std::string& checkpoint, std::uint64_t data_position) {
    (void)checkpoint;
    (void)data_position;
  }

  // Data parallelism (docs/distributed.md): this process computes its share
  // of the rows of every batch, training and evaluation alike (rows_of), and
  // the trainer sums losses, counts and gradients over the processes. A
  // workload that cannot split its batches throws a ConfigError.
  virtual void shard(const Communicator& comm) {
    comm_ = &comm;
    rank_ = comm.rank();
    ranks_ = comm.size();
  }
  // When set, called by forward_backward after the backward has finished a
  // layer's parameter gradients (top layer first), for an allreduce to
  // start on them; workloads whose model has no such hook never call it.
  std::function<void(Index)> after_layer;
  // {first, end} offsets in params' flat gradient buffer of each layer that
  // after_layer names, in layer order (the model knows where it registered
  // them); empty when the workload never calls after_layer.
  virtual std::vector<std::pair<Index, Index>> layer_gradient_ranges() const { return {}; }

 protected:
  // {first, count}: this process's rows of a batch of `batch` rows (the
  // trainer checks that the processes divide it).
  std::pair<Index, Index> rows_of(Index batch) const {
    const Index count = batch / Index(ranks_);
    return {Index(rank_) * count, count};
  }
  // The call for this process's rows of a batch of `batch` rows: its
  // first_row is where they start, so they draw the whole batch's masks.
  models::ModelCall call_for_rows(models::ModelCall call, Index batch) const {
    call.first_row = rows_of(batch).first;
    return call;
  }
  // The processes (workloads whose state spans them: Transformer-XL's memories).
  const Communicator& comm() const { return *comm_; }
  int rank_ = 0, ranks_ = 1;

 private:
  const Communicator* comm_ = &Communicator::self();
};

// The workload of a validated config, built by its family (the task is built,
// a data file read, here).
template <class T>
std::unique_ptr<Workload<T>> make_workload(const config::RunConfig& config);

namespace workload {

// Entries of a host batch that are not `skip`.
Index count_other_than(const data::HostTokens& tokens, int skip);

// Rows [first, first + count) of a host batch (a view: rows are contiguous).
data::HostTokens row_range(const data::HostTokens& tokens, Index first, Index count);

}  // namespace workload

}  // namespace reformer::train
