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
  Index first_row = 0;  // the global index of the streams' batch row 0 (dropout masks)
};

template <class T>
class ResidualBlock;

// The attention sub-layer of every block, pre-LayerNorm:
//   F(x) = Attention(LayerNorm(x))                (self-attention)
//   F(x, m) = Attention(LayerNorm(x), m)          (cross-attention: keys and values
//                                                  from the memory m as it is)
// Its LayerNorm is registered as "<norm_prefix>.gamma" / ".beta", the attention
// under "<attention_prefix>".
template <class T>
class PreNormAttention {
 public:
  PreNormAttention(const std::string& norm_prefix, const std::string& attention_prefix,
                   const attention::AttentionLayerConfig& config, double layer_norm_eps,
                   ParameterSet<param_t<T>>& params);
  // Unit gain, zero shift; the attention's projections from `key`.
  void init(RandomKey key);
  // normed = LayerNorm(x) with its statistics.
  void norm(In3<T> x, View3<T> normed, View1<compute_t<T>> mean, View1<compute_t<T>> rstd) const;
  // y += F(x) (memory empty) or F(x, memory), saving into `state` as `save` says.
  void forward(In3<T> x, View3<T> y, const attention::AttentionLayerCall& call,
               attention::AttentionState<T>& state, Workspace& workspace, attention::Save save,
               In3<T> memory = In3<T>()) const;
  // dx += dF/dx^T dy (and, for cross-attention, dmemory += dF/dm^T dy) for the
  // state filled by a forward pass on x. The first form takes LayerNorm(x) and
  // its statistics from norm() (and clobbers `normed`); the second computes them.
  void backward(In3<T> x, View3<T> normed, In1<compute_t<T>> mean, In1<compute_t<T>> rstd,
                In3<T> dy, View3<T> dx, const attention::AttentionState<T>& state,
                Workspace& workspace, In3<T> memory = In3<T>(),
                View3<T> dmemory = View3<T>()) const;
  void backward(In3<T> x, In3<T> dy, View3<T> dx, const attention::AttentionState<T>& state,
                Workspace& workspace, In3<T> memory = In3<T>(),
                View3<T> dmemory = View3<T>()) const;
  // Decoding, one position per sequence (no dropout): y [batch, d_model] +=
  // F(x) with the key/value caches at `position` (attention/attention_layer.hpp
  // step), or over projected memory keys and values (step_cross). y may be x.
  void step(In2<T> x, View2<T> y, View3<T> k_cache, View3<T> v_cache, Index position,
            Workspace& workspace) const;
  // The same with a layer cache and one position per row (AttentionLayer::step);
  // start_cache fills it from a whole input x [batch, length, d_model].
  void start_cache(In3<T> x, const attention::AttentionLayerCall& call, Index capacity,
                   attention::AttentionCache<T>& cache, Workspace& workspace) const;
  void step(In2<T> x, View2<T> y, attention::AttentionCache<T>& cache,
            Kokkos::View<const Index*, Layout, MemSpace> positions, Index max_position,
            Workspace& workspace) const;
  void step_cross(In2<T> x, View2<T> y, In3<T> k, In3<T> v,
                  Kokkos::View<const int**, Layout, MemSpace> key_valid,
                  Workspace& workspace) const;
  const attention::AttentionLayer<T>& attention() const { return attention_; }

 private:
  // The layer norm's parameters for the attention's decoding steps.
  ops::RowNorm<T> row_norm() const;
  double eps_;
  Parameter<param_t<T>>* gamma_ = nullptr;
  Parameter<param_t<T>>* beta_ = nullptr;
  attention::AttentionLayer<T> attention_;
};

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
  ReversibleBlock(const std::string& prefix, const BlockConfig& config,
                  ParameterSet<param_t<T>>& params);
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
  // Decoding with a cache (no dropout): start_cache fills `cache` from the
  // input x2 [batch, length, d_model] that forward with `call` would read;
  // step advances the streams x1, x2 [batch, d_model] of one position per row
  // (positions(b); max_position the largest), in place, equal to forward on
  // the positions up to it.
  void start_cache(In3<T> x2, const BlockCall& call, Index capacity,
                   attention::AttentionCache<T>& cache, Workspace& workspace) const;
  void step(View2<T> x1, View2<T> x2, attention::AttentionCache<T>& cache,
            Kokkos::View<const Index*, Layout, MemSpace> positions, Index max_position,
            Workspace& workspace) const;
  const BlockConfig& config() const { return config_; }

 private:
  BlockConfig config_;
  PreNormAttention<T> f_;
  FeedForward<T> feed_forward_;
  friend class ResidualBlock<T>;
};

template <class T>
class ResidualBlock {
 public:
  ResidualBlock(const std::string& prefix, const BlockConfig& config,
                ParameterSet<param_t<T>>& params);
  void init(RandomKey key);
  // x -> z = y + G(y), y = x + F(x), in place; saves F's and G's inputs.
  void forward(View3<T> x, const BlockCall& call, BlockState<T>& state, Workspace& workspace) const;
  // dz -> dx in place; parameter gradients are accumulated.
  void backward(View3<T> dz, const BlockState<T>& state, Workspace& workspace) const;

 private:
  ReversibleBlock<T> block_;  // the same sub-layers and parameter names
};

// The decoder block of the encoder-decoder Transformer (Vaswani et al. 2017),
// pre-LayerNorm, on one stream x [batch, Lt, d_model] and the encoder's output
// m [batch, Ls, d_model]:
//   y = x + SelfAttention(LayerNorm(x))        (causal; padding of the target)
//   z = y + CrossAttention(LayerNorm(y), m)     (full or exact; padding of the source)
//   out = z + G(z)                              (the chunked feed-forward)
// The same sub-layers also run reversibly on two streams (the decoder of trax's
// Reformer encoder-decoder: each sub-layer a half-residual from one stream into
// the other), [x1, x2] -> [y1, y2] in place:
//   a = x1 + SelfAttention(LayerNorm(x2)),  y2 = x2 + CrossAttention(LayerNorm(a), m),
//   y1 = a + G(y2)
// and backward rebuilds the inputs from the outputs: a = y1 - G(y2),
// x2 = y2 - CrossAttention(LayerNorm(a), m), x1 = a - SelfAttention(LayerNorm(x2)).
// With x1 and x2 the same tensor the two-stream formulas are the one-stream
// block, so one decoding step serves both.
// Parameters under "<prefix>.self_norm", "<prefix>.self", "<prefix>.cross_norm",
// "<prefix>.cross" and "<prefix>.ff".
struct DecoderBlockConfig {
  attention::AttentionLayerConfig self_attention{};   // causal
  attention::AttentionLayerConfig cross_attention{};  // full or exact, not causal
  FeedForwardConfig feed_forward{};
  double layer_norm_eps = 1e-5;
  // ConfigError naming the first bad field.
  void validate() const;
};

// Per call: the block's random stream and the padding masks (1 = token) of the
// target (the self-attention's keys) and of the source (the cross-attention's).
struct DecoderBlockCall {
  RandomKey key{};
  Kokkos::View<const int**, Layout, MemSpace> target_valid{};
  Kokkos::View<const int**, Layout, MemSpace> source_valid{};
  bool training = true;
  Index first_row = 0;  // the global index of x's batch row 0 (dropout masks)
};

template <class T>
struct DecoderBlockState {
  DecoderBlockCall call{};
  attention::AttentionState<T> self{}, cross{};  // reversible: the calls only
  View3<T> self_input, cross_input, ff_input;    // x, y and z of a stored forward pass
  bool stored = false;
  void release();
};

template <class T>
class DecoderBlock {
 public:
  DecoderBlock(const std::string& prefix, const DecoderBlockConfig& config,
               ParameterSet<param_t<T>>& params);
  void init(RandomKey key);
  // x -> out in place; memory is read only. Saves what backward needs.
  void forward(View3<T> x, In3<T> memory, const DecoderBlockCall& call, DecoderBlockState<T>& state,
               Workspace& workspace) const;
  // dout -> dx in place, dmemory += the memory's gradient; parameter gradients
  // are accumulated.
  void backward(View3<T> dx, In3<T> memory, View3<T> dmemory, const DecoderBlockState<T>& state,
                Workspace& workspace) const;
  // The two-stream form: [x1, x2] -> [y1, y2] in place, keeping only the calls
  // (masks and dropout streams) in the state.
  void forward_reversible(View3<T> x1, View3<T> x2, In3<T> memory, const DecoderBlockCall& call,
                          DecoderBlockState<T>& state, Workspace& workspace) const;
  // From the outputs and their gradients, in place: y -> x (rebuilt), dy -> dx,
  // dmemory += the memory's gradient; parameter gradients accumulated.
  // `scratch` holds one recomputed sub-layer at a time (one can serve a stack).
  void backward_reversible(View3<T> y1, View3<T> y2, View3<T> dy1, View3<T> dy2, In3<T> memory,
                           View3<T> dmemory, const DecoderBlockState<T>& state,
                           attention::AttentionState<T>& scratch, Workspace& workspace) const;
  // Decoding: the cross-attention's keys and values of a memory, once per
  // source ([batch, Ls, heads * d_head] each).
  void project_memory(In3<T> memory, View3<T> k, View3<T> v) const;
  // Decoding: one position per sequence, the streams x1 and x2 [batch,
  // d_model] in place (the same view for the one-stream block), with this
  // block's self-attention caches (written at `position`) and the projected
  // memory; no dropout. Equal to forward (forward_reversible) on the whole
  // prefix at that position.
  void step(View2<T> x1, View2<T> x2, View3<T> k_cache, View3<T> v_cache, Index position,
            In3<T> cross_k, In3<T> cross_v,
            Kokkos::View<const int**, Layout, MemSpace> source_valid, Workspace& workspace) const;
  const DecoderBlockConfig& config() const { return config_; }

 private:
  DecoderBlockConfig config_;
  PreNormAttention<T> self_, cross_;
  FeedForward<T> feed_forward_;
};

}  // namespace reformer::layers
