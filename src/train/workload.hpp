// The one interface between the trainer (train/trainer.cpp) and a model with its
// data: the Reformer language model on a language-model task, or the
// encoder-decoder Transformer on a source/target pair task. The trainer, eval,
// checkpoints and the memory check see only this (private to the library).
#pragma once

#include "reformer/config/run_config.hpp"
#include "reformer/core/distributed.hpp"
#include "reformer/core/parameter_set.hpp"
#include "reformer/data/pairs.hpp"
#include "reformer/data/tasks.hpp"
#include "reformer/models/reformer_lm.hpp"
#include "reformer/models/transformer.hpp"
#include "reformer/models/transformer_xl.hpp"
#include "reformer/ops/cross_entropy.hpp"

#include <functional>
#include <memory>
#include <string>
#include <utility>

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
  // Target tokens a sequence holds (for tokens per second).
  virtual Index sequence_tokens() const = 0;
  // Layers for the progress line.
  virtual Index layers() const = 0;
  // Batches that cover a split once (Transformer-XL: the segments of a
  // stream at evaluation's tgt_len); ConfigError for workloads whose batches
  // are random windows or generated, which have no end.
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

 protected:
  // {first, count}: this process's rows of a batch of `batch` rows (the
  // trainer checks that the processes divide it).
  std::pair<Index, Index> rows_of(Index batch) const {
    const Index count = batch / Index(ranks_);
    return {Index(rank_) * count, count};
  }
  // The processes (workloads whose state spans them: Transformer-XL's memories).
  const Communicator& comm() const { return *comm_; }
  int rank_ = 0, ranks_ = 1;

 private:
  const Communicator* comm_ = &Communicator::self();
};

// The workload of a validated config; the task is built (a data file is read) here.
template <class T>
std::unique_ptr<Workload<T>> make_workload(const config::RunConfig& config);

// The encoder-decoder's config of a run (its vocabulary from the pair task).
models::TransformerConfig seq2seq_model_config(const config::RunConfig& config,
                                               const data::PairTask& task);

}  // namespace reformer::train
