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
#include "reformer/layers/vocabulary_head.hpp"
#include "reformer/models/model_call.hpp"
#include "reformer/models/reformer_config.hpp"
#include "reformer/models/token_input.hpp"
#include "reformer/ops/cross_entropy.hpp"

#include <functional>
#include <memory>
#include <vector>

namespace reformer::models {

// Activations of one model, owned by the caller; reused across steps (views
// are reallocated only when the batch shape changes).
template <class T>
struct ReformerState {
  Index batch = 0, length = 0;  // length: as run (the caller's, padded to the chunks)
  Index given_length = 0;       // the caller's length
  // When the call has a mask or its length does not fit the chunks: the ids
  // padded to `length` and the mask of real tokens (empty otherwise).
  View2<int> ids, valid;
  IdMatrix input;  // the ids the last forward ran on (the caller's or `ids`)
  ModelCall call{};
  View3<T> x1, x2;                            // the two streams (after forward: the top outputs)
  View3<T> dx1, dx2;                          // their gradients
  std::vector<layers::BlockState<T>> blocks;  // per layer: LSH plan (+ stored activations)
  attention::AttentionState<T> scratch;       // the layer being recomputed
  Workspace workspace{"reformer_workspace"};
  void release();
};

// Cached generation (ReformerLM::start_generation / generation_step), owned by
// the caller: per layer the key/value cache (LSH: with buckets and
// rotations), and the streams of the position being decoded. A reversible
// stack keeps no other activation: each step runs every layer on one position.
template <class T>
struct ReformerGeneration {
  Index batch = 0, capacity = 0;
  std::vector<Index> next;  // per row: the position the next token takes
  std::vector<attention::AttentionCache<T>> caches;
  View2<T> x1, x2;  // [batch, d_model]
  // A step's row positions [0, batch) and tokens (as ints, in the slots from
  // batch on), staged on the host and moved in one copy that does not wait for
  // the device (made by start_generation, then reused: a generation step
  // allocates nothing); positions views the first part.
  Kokkos::View<Index*, Layout, MemSpace> staged;
  typename Kokkos::View<Index*, Layout, MemSpace>::HostMirror host_staged;
  Kokkos::View<Index*, Layout, MemSpace> positions;
  RandomKey key{};
  Workspace workspace{"reformer_generation"};
  void release();
};

template <class T>
class ReformerLM {
 public:
  // Registers every parameter in `params`; ConfigError for a bad config.
  ReformerLM(const ReformerConfig& config, ParameterSet<param_t<T>>& params);
  // Embeddings N(0, 1), projections Xavier-uniform, LayerNorm gains 1, biases 0.
  void init(RandomKey key);

  // Forward through the stack: fills state.x1, state.x2 (the top streams) and
  // what backward needs (reversible: only the LSH plans). A length that is not
  // a multiple of the chunk lengths is padded internally (padded_length) and
  // masked; with LSH, set lsh.n_buckets (the trainer sets it from data.length)
  // so that the bucket count does not follow the padded length.
  void forward(IdMatrix ids, const ModelCall& call, ReformerState<T>& state) const;
  // Loss of the batch (mean over the counted targets) and its gradients,
  // accumulated into the parameters' gradients. Targets equal to ignore_id do
  // not count (-1: all count). Runs forward, the loss and backward.
  // `after_layer(i)`, when given, is called once per layer as soon as the
  // backward has finished layer i's parameter gradients (the top layer
  // first; reversible or stored): a data-parallel run starts summing them
  // over the processes while the layers below recompute.
  ops::CrossEntropyResult forward_backward(
      IdMatrix ids, IdMatrix targets, int ignore_id, const ModelCall& call, ReformerState<T>& state,
      const std::function<void(Index)>& after_layer = {}) const;
  // Loss and accuracy without gradients (forward with call.training as given).
  ops::CrossEntropyResult evaluate(IdMatrix ids, IdMatrix targets, int ignore_id,
                                   const ModelCall& call, ReformerState<T>& state) const;
  // Logits [batch, vocab] of the given position of every sequence, after a
  // forward pass on ids (dropout off; `valid` as ModelCall::valid).
  void logits_at(IdMatrix ids, Index position, View2<T> logits, ReformerState<T>& state,
                 Kokkos::View<const int**, Layout, MemSpace> valid = {}) const;

  // Cached generation. start_generation runs the prompts once: ids [batch,
  // L], row b's prompt being its first lengths[b] >= 1 tokens (the rest is
  // padding), with the call key `key` (LSH rotations); it fills the caches for
  // `capacity` positions in all (<= max_length with learned or axial
  // positions) and writes the logits [batch, vocab] of every prompt's last
  // token. generation_step feeds tokens [batch] (host), one per row at the
  // row's next position, and writes the logits there. Each equals the logits
  // of a forward pass on the row's tokens so far at its last position (LSH:
  // for the top LSH layer; see docs/design.md); a step costs O(cache) per
  // layer, never a forward pass. ConfigError when a row would pass capacity.
  void start_generation(IdMatrix ids, const std::vector<Index>& lengths, Index capacity,
                        RandomKey key, ReformerGeneration<T>& generation, View2<T> logits,
                        ReformerState<T>& state) const;
  void generation_step(const std::vector<int>& tokens, ReformerGeneration<T>& generation,
                       View2<T> logits) const;

  const ReformerConfig& config() const { return config_; }
  Index layers() const { return Index(blocks_.size()); }
  // {first, end} of layer i's parameters in the set's flat buffers (padding
  // up to the next parameter included), i in [0, layers()): the gradient
  // ranges a data-parallel backward sums while the layers below still run.
  const std::vector<std::pair<Index, Index>>& layer_ranges() const { return layer_ranges_; }

 private:
  void check_batch(const char* op, IdMatrix ids, const ModelCall& call) const;
  void prepare(ReformerState<T>& state, Index batch, Index length) const;
  // The ids as run: the caller's, or state.ids when padded or masked (which
  // also sets state.valid).
  IdMatrix input_ids(IdMatrix ids, const ModelCall& call, ReformerState<T>& state) const;
  void embed(IdMatrix ids, const ModelCall& call, ReformerState<T>& state) const;
  void embed_backward(IdMatrix ids, ReformerState<T>& state) const;
  // LayerNorm([x1 ; x2]) of the given rows (all rows when `rows` is empty).
  void head_forward(const ReformerState<T>& state,
                    Kokkos::View<const Index*, Layout, MemSpace> rows, View2<T> hidden,
                    View1<compute_t<T>> mean, View1<compute_t<T>> rstd) const;
  // dhidden -> dx1, dx2 (overwritten); `scratch` [rows, 2 d_model] is clobbered.
  void head_backward(ReformerState<T>& state, In2<T> dhidden, In1<compute_t<T>> mean,
                     In1<compute_t<T>> rstd, View2<T> scratch) const;
  // logits [n, vocab] of the LayerNorm'd hidden rows [n, 2 d_model].
  void project(View2<T> hidden, View2<T> logits, Workspace& workspace) const;
  // x [batch, d_model] += the position encoding of position positions[b] of row
  // b (positions on the device, all below end), in one launch.
  void add_positions(View2<T> x, In1<Index> positions, Index end) const;
  ops::CrossEntropyResult loss(IdMatrix targets, int ignore_id, ReformerState<T>& state,
                               bool gradients) const;
  layers::BlockCall block_call(const ModelCall& call, Index layer,
                               const ReformerState<T>& state) const;

  ReformerConfig config_;
  TokenInput<T> input_;  // embedding and positions
  std::vector<std::unique_ptr<layers::ReversibleBlock<T>>> blocks_;
  std::vector<std::pair<Index, Index>> layer_ranges_;
  Parameter<param_t<T>>* out_gamma_ = nullptr;
  Parameter<param_t<T>>* out_beta_ = nullptr;
  // out.w [2 d_model, vocab] (tied: the embedding table), out.b, the loss.
  std::unique_ptr<layers::VocabularyHead<T>> head_;
};

}  // namespace reformer::models
