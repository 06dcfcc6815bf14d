// The Reformer language model (Kitaev et al. 2020):
//   e      = dropout(Embedding(ids) + Positions)           [batch, length, d_model]
//   x1, x2 = e, e                                           (the embedding in both halves)
//   [y1, y2] = Block_{n-1}( ... Block_0([x1, x2]))          (layers/blocks.hpp)
//   h      = LayerNorm([y1 ; y2])                           [batch * length, 2 d_model]
//   loss   = label-smoothed cross-entropy of h W_out + b    (chunks of rows)
// With tied weights the output projection is the embedding table E [vocab, d]
// applied to the sum of the two halves of h: logits = (h[:, :d] + h[:, d:]) E^T + b.
//
// Layer i uses attention kind config.attention[i % size] (full, LSH or local).
// With config.reversible the backward pass rebuilds every block's input from
// its output, so between forward and backward only the top streams and each
// layer's LSH plan (bucket ids and sort) are alive; otherwise the same network
// is computed with stored activations (memory linear in the depth), on the same
// parameters, which is what the two can be compared on.
//
// Ownership: the model owns its parameters (in the caller's ParameterSet);
// activations live in a ReformerState that the caller owns and can drop.
// Randomness (dropout masks, LSH rotations) is a pure function of the call's
// key, so a step can be replayed exactly.
#pragma once

#include "reformer/layers/blocks.hpp"
#include "reformer/models/reformer_config.hpp"
#include "reformer/ops/cross_entropy.hpp"

#include <memory>
#include <vector>

namespace reformer::models {

using IdMatrix = Kokkos::View<const int**, Layout, MemSpace>;  // [batch, length]

// Per call: the stream of this step's randomness and whether dropout is on.
struct ReformerCall {
  RandomKey key{};
  bool training = true;
  // forward_backward's gradients are those of loss_scale x the mean loss (the
  // trainer weights accumulated micro-batches by their share of the tokens).
  double loss_scale = 1.0;
};

// Activations of one model, owned by the caller; reused across steps (views
// are reallocated only when the batch shape changes).
template <class T>
struct ReformerState {
  Index batch = 0, length = 0;
  ReformerCall call{};
  View3<T> x1, x2;                            // the two streams (after forward: the top outputs)
  View3<T> dx1, dx2;                          // their gradients
  std::vector<layers::BlockState<T>> blocks;  // per layer: LSH plan (+ stored activations)
  attention::AttentionState<T> scratch;       // the layer being recomputed
  Workspace workspace{"reformer_workspace"};
  void release();
};

template <class T>
class ReformerLM {
 public:
  // Registers every parameter in `params`; ConfigError for a bad config.
  ReformerLM(const ReformerConfig& config, ParameterSet<T>& params);
  // Embeddings N(0, 1), projections Xavier-uniform, LayerNorm gains 1, biases 0.
  void init(RandomKey key);

  // Forward through the stack: fills state.x1, state.x2 (the top streams) and
  // what backward needs (reversible: only the LSH plans).
  void forward(IdMatrix ids, const ReformerCall& call, ReformerState<T>& state) const;
  // Loss of the batch (mean over the counted targets) and its gradients,
  // accumulated into the parameters' gradients. Targets equal to ignore_id do
  // not count (-1: all count). Runs forward, the loss and backward.
  ops::CrossEntropyResult forward_backward(IdMatrix ids, IdMatrix targets, int ignore_id,
                                           const ReformerCall& call, ReformerState<T>& state) const;
  // Loss and accuracy without gradients (forward with call.training as given).
  ops::CrossEntropyResult evaluate(IdMatrix ids, IdMatrix targets, int ignore_id,
                                   const ReformerCall& call, ReformerState<T>& state) const;
  // Logits [batch, vocab] of the given position of every sequence, after a
  // forward pass on ids (dropout off).
  void logits_at(IdMatrix ids, Index position, View2<T> logits, ReformerState<T>& state) const;

  const ReformerConfig& config() const { return config_; }
  Index layers() const { return Index(blocks_.size()); }

 private:
  void check_batch(const char* op, IdMatrix ids) const;
  void prepare(ReformerState<T>& state, Index batch, Index length) const;
  void embed(IdMatrix ids, const ReformerCall& call, ReformerState<T>& state) const;
  void embed_backward(IdMatrix ids, ReformerState<T>& state) const;
  // LayerNorm([x1 ; x2]) of the given rows (all rows when `rows` is empty).
  void head_forward(const ReformerState<T>& state,
                    Kokkos::View<const Index*, Layout, MemSpace> rows, View2<T> hidden,
                    View1<T> mean, View1<T> rstd) const;
  // dhidden -> dx1, dx2 (overwritten); `scratch` [rows, 2 d_model] is clobbered.
  void head_backward(ReformerState<T>& state, In2<T> dhidden, In1<T> mean, In1<T> rstd,
                     View2<T> scratch) const;
  ops::CrossEntropyResult loss(IdMatrix targets, int ignore_id, ReformerState<T>& state,
                               bool gradients) const;
  layers::BlockCall block_call(const ReformerCall& call, Index layer) const;

  ReformerConfig config_;
  Parameter<T>* embedding_ = nullptr;
  Parameter<T>* positions_ = nullptr;  // learned
  Parameter<T>* axial1_ = nullptr;
  Parameter<T>* axial2_ = nullptr;
  std::vector<std::unique_ptr<layers::ReversibleBlock<T>>> blocks_;
  Parameter<T>* out_gamma_ = nullptr;
  Parameter<T>* out_beta_ = nullptr;
  Parameter<T>* out_weight_ = nullptr;  // null with tied weights
  Parameter<T>* out_bias_ = nullptr;
};

}  // namespace reformer::models
