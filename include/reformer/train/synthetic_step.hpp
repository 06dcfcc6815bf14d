// A training step of a ReformerLM (or an EncoderDecoder) on random tokens, as
// `reformer memory` and bench_model run it: the model (initialised), Adam with its moments already
// allocated, batch x length random ids and targets, and the caller-owned state
// that the steps reuse. run(n) is one step: forward, loss and backward (the
// model's own memory phases), then the Adam update in the phase "optimizer".
// Everything is allocated by the constructor, so the tracker's current bytes
// after it are the run's state (parameters, gradients, moments, ids).
#pragma once

#include "reformer/models/reformer_lm.hpp"
#include "reformer/models/transformer.hpp"
#include "reformer/models/transformer_xl.hpp"
#include "reformer/train/optimizer.hpp"

#include <cstdint>

namespace reformer::train {

template <class T>
class SyntheticStep {
 public:
  SyntheticStep(const models::ReformerConfig& config, Index batch, Index length);
  void run(std::uint64_t n);  // n keys the dropout stream; fences at the end
  Workspace& workspace() { return state_.workspace; }  // the state's (reserved by the sweep)
  std::int64_t id_bytes() const {
    return 2 * std::int64_t(ids_.size()) * std::int64_t(sizeof(int));
  }

 private:
  // T = bf16: bf16 activations on float32 parameters, gradients and Adam.
  ParameterSet<param_t<T>> params_;
  models::ReformerLM<T> model_;
  Adam<param_t<T>> adam_;
  Kokkos::View<int**, Layout, MemSpace> ids_, targets_;
  models::ReformerState<T> state_;
};

// The same for the encoder-decoder (models/transformer.hpp): batch x length
// random source and target ids in [3, vocab) (0, 1 and 2 are the pair tasks'
// padding, start and end symbols), no padding.
template <class T>
class Seq2SeqSyntheticStep {
 public:
  Seq2SeqSyntheticStep(const models::TransformerConfig& config, Index batch, Index length);
  void run(std::uint64_t n);
  Workspace& workspace() { return state_.workspace; }
  std::int64_t id_bytes() const {
    return 4 * std::int64_t(source_.size()) * std::int64_t(sizeof(int));
  }

 private:
  ParameterSet<param_t<T>> params_;  // T = bf16: as SyntheticStep
  models::EncoderDecoder<T> model_;
  Adam<param_t<T>> adam_;
  Kokkos::View<int**, Layout, MemSpace> source_, target_in_, target_out_, valid_;
  models::TransformerState<T> state_;
};

// Transformer-XL and the memory length it trains with.
struct XLStepConfig {
  models::TransformerXLConfig model{};
  Index mem_len = 0;
  // The model's sizes (its chunks).
  models::ModelSizes& sizes() { return model; }
  const models::ModelSizes& sizes() const { return model; }
};

// The same for Transformer-XL (models/transformer_xl.hpp): random ids and a
// memory of mem_len random positions per layer, allocated by the constructor
// like the ids (a run carries it from step to step), so that every step reads
// a full memory.
template <class T>
class XLSyntheticStep {
 public:
  XLSyntheticStep(const XLStepConfig& config, Index batch, Index length);
  void run(std::uint64_t n);
  Workspace& workspace() { return state_.workspace; }
  // The ids, targets and the memory: inputs, not state.
  std::int64_t id_bytes() const;

 private:
  ParameterSet<param_t<T>> params_;  // T = bf16: as SyntheticStep (a bf16 memory)
  models::TransformerXL<T> model_;
  Adam<param_t<T>> adam_;
  Kokkos::View<int**, Layout, MemSpace> ids_, targets_;
  models::TransformerXLMemory<T> memory_;
  models::TransformerXLState<T> state_;
};

extern template class SyntheticStep<float>;
extern template class SyntheticStep<double>;
extern template class SyntheticStep<bf16>;
extern template class Seq2SeqSyntheticStep<float>;
extern template class Seq2SeqSyntheticStep<double>;
extern template class Seq2SeqSyntheticStep<bf16>;
extern template class XLSyntheticStep<float>;
extern template class XLSyntheticStep<double>;
extern template class XLSyntheticStep<bf16>;

}  // namespace reformer::train
