// Transformer blocks built from an attention sub-layer
//   F(x) = dropout(Attention(LayerNorm(x)))      (the dropout is the attention layer's)
// and a chunked feed-forward sub-layer G (layers/feed_forward.hpp).
//
// ReversibleBlock (Reformer section 3, after RevNets, Gomez et al. 2017) keeps two
// streams of activations, [x1, x2] -> [y1, y2]:
//   y1 = x1 + F(x2),   y2 = x2 + G(y1)
// and can rebuild its input from its output in the backward pass:
//   x2 = y2 - G(y1),   x1 = y1 - F(x2),
// so a stack of them stores no per-layer activations: only the LSH plan of each
// layer's forward pass (the same buckets and the same dropout masks are replayed
// when F is recomputed). The same block also runs "stored" (reversible = false
// in a model): forward saves F's and G's inputs and the attention state, and
// backward reads them instead of rebuilding, on identical parameters.
//
// ResidualBlock is the ordinary pre-LN Transformer block on one stream:
//   y = x + F(x),   z = y + G(y).
//
// Ownership: blocks own parameters only (registered under "<prefix>.attn_norm",
// "<prefix>.attn", "<prefix>.ff"); what backward needs is in a BlockState that
// the caller owns. Streams are [batch, length, d_model] tensors updated in place.
#pragma once

#include "reformer/attention/attention_layer.hpp"
#include "reformer/layers/feed_forward.hpp"

#include <string>

namespace reformer::layers {

struct BlockConfig {
  attention::AttentionLayerConfig attention{};
  FeedForwardConfig feed_forward{};
  double layer_norm_eps = 1e-5;
  // ConfigError naming the first bad field (d_model of the two sub-layers differ, ...).
  void validate() const;
};

// Per call: the block's random stream (attention and feed-forward streams are
// derived from it), the padding mask of the keys and whether dropout is on.
struct BlockCall {
  RandomKey key{};
  Kokkos::View<const int**, Layout, MemSpace> key_valid{};
  bool training = true;
};

template <class T>
class ResidualBlock;

template <class T>
struct BlockState {
  BlockCall call{};
  attention::AttentionState<T> attention{};  // plan only, or everything when stored
  View3<T> f_input, g_input;  // stored forward only: x2 and y1 (ResidualBlock: x and y)
  bool stored = false;
  // Frees the activations; keep_plan keeps the call and the LSH plan.
  void release(bool keep_plan = false);
};

template <class T>
class ReversibleBlock {
 public:
  ReversibleBlock(const std::string& prefix, const BlockConfig& config, ParameterSet<T>& params);
  void init(RandomKey key);
  // [x1, x2] -> [y1, y2] in place. save = PlanOnly keeps only the call and the
  // LSH plan (for backward_reversible); save = All also copies F's and G's
  // inputs and the attention activations into the state (for backward_stored).
  void forward(View3<T> x1, View3<T> x2, const BlockCall& call, BlockState<T>& state,
               Workspace& workspace, attention::Save save) const;
  // From the outputs [y1, y2] and their gradients [dy1, dy2], all in place:
  // y -> x (rebuilt), dy -> dx; parameter gradients are accumulated. `scratch`
  // holds the recomputed attention activations of this layer (one scratch
  // state can serve every layer of a stack).
  void backward_reversible(View3<T> y1, View3<T> y2, View3<T> dy1, View3<T> dy2,
                           const BlockState<T>& state, attention::AttentionState<T>& scratch,
                           Workspace& workspace) const;
  // The same gradients from a forward pass run with save = All; the streams'
  // values are not needed.
  void backward_stored(View3<T> dy1, View3<T> dy2, const BlockState<T>& state,
                       Workspace& workspace) const;
  const BlockConfig& config() const { return config_; }

 private:
  // normed = LayerNorm(x) with its statistics.
  void f_norm(In3<T> x, View3<T> normed, View1<T> mean, View1<T> rstd) const;
  // y += F(x) = Attention(LayerNorm(x)), saving into `state` as `save` says.
  void f_forward(In3<T> x, View3<T> y, const BlockCall& call, attention::AttentionState<T>& state,
                 Workspace& workspace, attention::Save save) const;
  // F's backward: dx += dF/dx^T dy, for the attention state filled by a
  // forward pass (or recompute) on x. The first form takes LayerNorm(x) and
  // its statistics from f_norm (and clobbers `normed`); the second computes them.
  void f_backward(In3<T> x, View3<T> normed, In1<T> mean, In1<T> rstd, In3<T> dy, View3<T> dx,
                  const attention::AttentionState<T>& state, Workspace& workspace) const;
  void f_backward(In3<T> x, In3<T> dy, View3<T> dx, const attention::AttentionState<T>& state,
                  Workspace& workspace) const;
  BlockConfig config_;
  Parameter<T>* gamma_ = nullptr;
  Parameter<T>* beta_ = nullptr;
  attention::AttentionLayer<T> attention_;
  FeedForward<T> feed_forward_;
  friend class ResidualBlock<T>;
};

template <class T>
class ResidualBlock {
 public:
  ResidualBlock(const std::string& prefix, const BlockConfig& config, ParameterSet<T>& params);
  void init(RandomKey key);
  // x -> z = y + G(y), y = x + F(x), in place; saves F's and G's inputs.
  void forward(View3<T> x, const BlockCall& call, BlockState<T>& state, Workspace& workspace) const;
  // dz -> dx in place; parameter gradients are accumulated.
  void backward(View3<T> dz, const BlockState<T>& state, Workspace& workspace) const;

 private:
  ReversibleBlock<T> block_;  // the same sub-layers and parameter names
};

}  // namespace reformer::layers
