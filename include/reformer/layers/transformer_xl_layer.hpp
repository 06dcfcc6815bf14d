// One layer of Transformer-XL (Dai et al. 2019): relative multi-head attention
// over [memory; segment] and the position-wise feed-forward, pre- or
// post-LayerNorm. For a segment x [batch, L, d_model] and a memory m [batch,
// M, d_model] (the previous segment's inputs of this layer, M >= 0):
//   c   = [m; x]                               [batch, M + L, d_model]
//   a   = LN_attn(c) (pre-LN) or c (post-LN)   (keys and values from every row,
//                                               queries from the segment's rows)
//   q   = a_seg W_q, k = a W_k, v = a W_v, rk = R W_r
//   o   = RelativeAttention(q, k, v, rk, u, v_bias)   (attention/relative.hpp,
//                                                      dropout on the probabilities)
//   pre-LN:  y = x + drop(o W_o),          out = y + FF(y)      (FF with its LayerNorm)
//   post-LN: y = LN_attn(x + drop(o W_o)), out = LN_ff(y + FF(y)) (FF without one)
// FF is layers/feed_forward.hpp's FeedForward (its dropout on the hidden
// activation and its output). R [P, d_model] (with optional dropout) holds
// the sinusoidal encodings of the distances 0 .. P - 1 (P =
// relative_attention_positions(M, L, ...)) in the project's interleaved
// layout of ops::sinusoidal_positions_forward (pe(p, 2i) = sin, pe(p, 2i + 1)
// = cos), not the reference's concatenated [sin, cos]: the two differ by a
// fixed permutation of W_r's rows, so the model family is the same. u and
// v_bias are this layer's own ([heads, d_head]).
//
// The memory is an input without a gradient (stop-gradient): backward returns
// the segment's gradient only. The state keeps a copy of c, so the caller may
// overwrite its memory buffer between forward and backward (a model updates
// its memories right after the layer's forward pass). The LayerNorm of a pre-LN layer also
// normalises the memory rows, so its gain and shift get gradients from them.
//
// bf16 (train.precision = "bf16"): activations, c, q, k, v, R W_r and the
// memory in bf16; parameters, their gradients and the logsumexps float32 (see
// docs/design.md, "Mixed precision"). Cached decoding runs in float32 only.
//
// Parameters under a dotted prefix: attn.w_q, attn.w_k, attn.w_v, attn.w_r
// [d_model, heads * d_head], attn.w_o [heads * d_head, d_model], attn.bias_u,
// attn.bias_v [heads, d_head], attn_norm.gamma / .beta, ff.* (FeedForward),
// and for post-LN ff_norm.gamma / .beta.
#pragma once

#include "reformer/attention/relative.hpp"
#include "reformer/layers/feed_forward.hpp"

#include <string>

namespace reformer::layers {

struct TransformerXLLayerConfig {
  Index d_model = 256;
  Index heads = 4;
  Index d_head = 64;
  // d_ff, activation, chunk and dropout of the feed-forward; its d_model and
  // layer_norm are set from this config (layer_norm = pre_norm).
  FeedForwardConfig feed_forward{};
  double attention_dropout = 0.0;  // on the attention probabilities
  double dropout = 0.0;            // on the attention output, before the residual
  // On the distance encodings R before W_r. The reference drops R once per
  // model: a model gives all its layers the same call.position_key.
  double position_dropout = 0.0;
  bool pre_norm = false;  // the reference's default is post-LN
  double layer_norm_eps = 1e-5;
  // clamp_len, same_length with mem_len, scale (attention/relative.hpp).
  attention::RelativeAttentionConfig relative{};

  // ConfigError naming the first bad field.
  void validate() const;
  // feed_forward with d_model, layer_norm and layer_norm_eps from this config.
  FeedForwardConfig feed_forward_config() const;
};

// Per call: the layer's random stream (attention, output and feed-forward
// dropout derive theirs from it), whether dropout is on, and same_length's
// window when it differs from the config's relative.mem_len (evaluation with
// a longer memory than training): -1 keeps the config's; 0 turns same_length
// off for the call (no memory: the reference's rule would mask every key).
struct TransformerXLLayerCall {
  RandomKey key{};
  bool training = true;
  Index mem_len = -1;
  RandomKey position_key{};  // the stream of position_dropout's mask
  // Evaluation settings that differ from the config's (the paper evaluates
  // with clamp_len 820 and same_length after training without): -1 keeps the
  // config's clamp_len; same_length -1 keeps the config's, 0 off, 1 on.
  Index clamp_len = -1;
  int same_length = -1;
  // The global index of x's batch row 0 (models::ModelCall::first_row): the
  // attention, output and feed-forward masks are drawn by global row (the
  // position dropout's mask has no rows).
  Index first_row = 0;
};

// What backward needs from forward, owned by the caller (reused across calls;
// views are reallocated only when a shape changes).
template <class T>
struct TransformerXLLayerState {
  TransformerXLLayerCall call{};
  attention::RelativeAttentionConfig relative{};  // as run (the call's mem_len)
  Index batch = 0, length = 0, memory = 0, positions = 0;
  bool saved = false;
  View3<T> context;         // c = [m; x], [batch, M + L, d_model]
  View2<T> q, k, v;         // [batch * L or batch * (M + L), heads * d_head]
  View2<T> rk;              // R W_r, [P, heads * d_head]
  View2<T> attended;        // [batch * L, heads * d_head]
  View3<compute_t<T>> lse;  // [batch, L, heads]
  View3<T> residual;        // post-LN: x + drop(o W_o) (LN_attn's input)
  View3<T> ff_input;        // y
  View3<T> ff_residual;     // post-LN: y + FF(y) (LN_ff's input)
  void release() { *this = TransformerXLLayerState(); }
};

// Cached decoding of one segment (TransformerXLLayer::start_segment / step),
// owned by the caller: the rows of c = [m; x] fed so far, their keys and
// values, and R W_r for every distance the segment can need. A step on the
// segment's next n positions computes those n rows only and equals forward's
// rows on the segment so far (no dropout: evaluation).
template <class T>
struct TransformerXLLayerCache {
  attention::RelativeAttentionConfig relative{};  // as run (the call's settings)
  Index batch = 0, memory = 0, length = 0;        // M, the segment's capacity S
  Index filled = 0;                               // segment positions fed so far
  View3<T> context;  // [batch, M + S, d_model], the first M + filled rows set
  View3<T> k, v;     // [batch, M + S, heads * d_head], likewise
  View2<T> rk;       // R W_r, [P(M, S), heads * d_head]
  void release() { *this = TransformerXLLayerCache(); }
};

template <class T>
class TransformerXLLayer {
 public:
  TransformerXLLayer(const std::string& prefix, const TransformerXLLayerConfig& config,
                     ParameterSet<param_t<T>>& params);
  // Xavier-uniform projections, u and v_bias normal(0, 0.02), unit gains, zero shifts.
  void init(RandomKey key);
  // x [batch, L, d_model] -> out in place; memory [batch, M, d_model] is read
  // only (M may be 0: an empty view or one of extent 0).
  void forward(View3<T> x, In3<T> memory, const TransformerXLLayerCall& call,
               TransformerXLLayerState<T>& state, Workspace& workspace) const;
  // dout -> dx in place (the segment's gradient; none for the memory);
  // parameter gradients are accumulated.
  void backward(View3<T> dx, const TransformerXLLayerState<T>& state, Workspace& workspace) const;
  // Cached decoding. start_segment begins a segment of up to `length`
  // positions over memory [batch, M, d_model] (M may be 0): the memory's keys,
  // values and R W_r are computed once (call.training must be false). step
  // feeds x [batch, n, d_model], the segment's next n positions, and writes
  // their outputs in place: forward's last n rows on the segment so far, in
  // O(n (M + filled + n)) attention work instead of a rerun.
  void start_segment(In3<T> memory, Index batch, Index length, const TransformerXLLayerCall& call,
                     TransformerXLLayerCache<T>& cache, Workspace& workspace) const;
  void step(View3<T> x, TransformerXLLayerCache<T>& cache, Workspace& workspace) const;
  const TransformerXLLayerConfig& config() const { return config_; }

 private:
  // The attention's settings for a call (the call's overrides of the config).
  attention::RelativeAttentionConfig relative_config(const TransformerXLLayerCall& call) const;
  // From the attention's output [batch * L, heads * d_head] to the layer's
  // output x [batch, L, d_model] (x holds the layer's input on entry): the
  // output projection, its dropout, the residual and the feed-forward.
  // ff_input receives y; residual and ff_residual (post-LN only) the inputs
  // of the two LayerNorms.
  void attention_output(View3<T> x, View2<T> attended, const TransformerXLLayerCall& call,
                        View3<T> ff_input, View3<T> residual, View3<T> ff_residual,
                        Workspace& workspace) const;
  // R of `positions` rows with the call's position dropout.
  void distance_encoding(const TransformerXLLayerCall& call, View2<T> out) const;
  TransformerXLLayerConfig config_;
  Parameter<param_t<T>>* w_q_ = nullptr;
  Parameter<param_t<T>>* w_k_ = nullptr;
  Parameter<param_t<T>>* w_v_ = nullptr;
  Parameter<param_t<T>>* w_r_ = nullptr;
  Parameter<param_t<T>>* w_o_ = nullptr;
  Parameter<param_t<T>>* bias_u_ = nullptr;
  Parameter<param_t<T>>* bias_v_ = nullptr;
  Parameter<param_t<T>>* attn_gamma_ = nullptr;
  Parameter<param_t<T>>* attn_beta_ = nullptr;
  Parameter<param_t<T>>* ff_gamma_ = nullptr;  // post-LN only
  Parameter<param_t<T>>* ff_beta_ = nullptr;
  FeedForward<T> feed_forward_;
};

// R: row p is the sinusoidal encoding of distance p (interleaved sin / cos, as
// ops::sinusoidal_positions_forward), out [P, d_model].
template <class T>
void relative_position_encoding(View2<T> out);

}  // namespace reformer::layers
