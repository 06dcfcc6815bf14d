// The Transformer-XL language model (Dai et al. 2019) on a stream of
// segments. For a segment of ids [batch, L] and per-layer memories m_l
// [batch, M, d_model] (the inputs of layer l over the previous M positions):
//   h_0     = dropout(s * Embedding(ids))        s = sqrt(d_model) or 1
//   h_{l+1} = Layer_l(h_l, m_l)                  (layers/transformer_xl_layer.hpp:
//                                                 relative attention over [m_l; h_l];
//                                                 R dropped with one mask for all layers)
//   out     = dropout(LayerNorm(h_N))            (pre-LN; post-LN: dropout(h_N))
//   loss    = cross-entropy of out W + b         (ops/cross_entropy.hpp, chunked;
//                                                 W the embedding table when tied)
// and the new memories m_l' = the last min(mem_len, M + L) rows of [m_l; h_l],
// copies without a gradient (the memory is a stop-gradient input). A
// segment's memories are the previous segment's: the data must give each
// batch row consecutive segments of one text.
//
// mem_len belongs to the memory, not to the parameters: the same model
// trains with one memory length and evaluates with another (eval.mem_len,
// longer, or 0 for the ablation without recurrence). same_length's window is
// the memory's mem_len (attention/relative.hpp); with mem_len = 0 it is off.
//
// bf16 activations (train.precision = "bf16"): TransformerXL<bf16> on
// float32 parameters keeps its activations and memories in bf16 and trains
// (forward, forward_backward, evaluate); logits_at and cached generation
// run the float32 model (a TransformerXL<float> on the same parameters).
//
// Ownership: parameters in the caller's ParameterSet; activations in a
// TransformerXLState and memories in a TransformerXLMemory that the caller
// owns. Dropout masks are pure functions of the call's key.
#pragma once

#include "reformer/layers/blocks.hpp"
#include "reformer/layers/transformer_xl_layer.hpp"
#include "reformer/layers/vocabulary_head.hpp"
#include "reformer/models/model_call.hpp"
#include "reformer/models/model_sizes.hpp"
#include "reformer/models/reformer_config.hpp"
#include "reformer/ops/cross_entropy.hpp"

#include <memory>
#include <vector>

namespace reformer::models {

// The sizes (models/model_sizes.hpp): d_model 128 and d_head 32, the rest
// ModelSizes' defaults; dropout on the embedding, the distance encodings (one
// mask for all layers), the attention output, the feed-forward and the final
// output.
struct TransformerXLConfig : ModelSizes {
  TransformerXLConfig() {
    d_model = 128;
    d_head = 32;
  }
  Index vocab = 256;  // token ids are in [0, vocab)
  Index layers = 2;
  Index clamp_len = 0;          // distances above it share its encoding; 0: none
  bool same_length = false;     // every query sees mem_len keys (the memory's mem_len)
  bool pre_norm = false;        // the reference's default is post-LN
  bool scale_embedding = true;  // the embedding times sqrt(d_model)
  bool tie_embeddings = false;  // output projection = the embedding table
  ops::Activation ff_activation = ops::Activation::ReLU;

  // ConfigError naming the first bad field.
  void validate() const;
  // The config of every layer (its relative.mem_len is set per call).
  layers::TransformerXLLayerConfig layer_config() const;
};

// Per-layer memories of one stream of segments, owned by the caller.
template <class T>
struct TransformerXLMemory {
  Index mem_len = 0;  // positions kept per layer after each segment
  // How this stream is read when it differs from the model's config (the
  // paper's evaluation: clamp_len 820, same_length): -1 keeps the config's
  // clamp_len; same_length -1 keeps the config's, 0 off, 1 on.
  Index clamp_len = -1;
  int same_length = -1;
  std::vector<View3<T>> hidden;  // per layer [batch, M, d_model], M <= mem_len; empty at first
  Index length() const { return hidden.empty() ? 0 : Index(hidden[0].extent(1)); }
  // Forgets the positions (a new text); mem_len stays.
  void reset() { hidden.clear(); }
  // A deep copy (the same settings, hidden states in new buffers).
  TransformerXLMemory copy() const;
};

// Cached decoding (TransformerXL::start_generation / generation_step), owned
// by the caller: the memory of the current segment and, per layer, the rows
// of the segment fed so far with their keys and values.
template <class T>
struct TransformerXLGeneration {
  Index batch = 0, segment_length = 0;
  Index filled = 0;               // positions of the current segment fed so far
  TransformerXLMemory<T> memory;  // the current segment's memory (rolled as forward does)
  std::vector<layers::TransformerXLLayerCache<T>> layers;
  Workspace workspace{"transformer_xl_generation"};
  void release();
};

template <class T>
struct TransformerXLState {
  ModelCall call{};
  Index batch = 0, length = 0;
  View3<T> x;    // the stream; after forward the top layer's output h_N
  View3<T> out;  // dropout(LayerNorm(h_N)) or dropout(h_N): the loss's input
  View3<T> dx;
  std::vector<layers::TransformerXLLayerState<T>> layers;
  Workspace workspace{"transformer_xl_workspace"};
  void release();
};

template <class T>
class TransformerXL {
 public:
  // Registers every parameter: "embedding" [vocab, d_model], "layers.<i>.*"
  // (the layer's names), "out.norm.gamma" / ".beta" (pre-LN), "out.w"
  // [d_model, vocab] (untied) and "out.b" [vocab].
  TransformerXL(const TransformerXLConfig& config, ParameterSet<param_t<T>>& params);
  // Embedding N(0, 1 / d_model) (unit scale after sqrt(d_model)), layers as
  // TransformerXLLayer::init, output Xavier-uniform, gains 1, biases 0.
  void init(RandomKey key);
  // Forward on a segment ids [batch, L] over `memory`, then the memory
  // becomes the new one (see the top of the file). call.valid must be empty.
  // keep_layers = false keeps no layer's activations for a backward pass
  // (one layer state serves all layers: what evaluate does).
  void forward(IdMatrix ids, const ModelCall& call, TransformerXLMemory<T>& memory,
               TransformerXLState<T>& state, bool keep_layers = true) const;
  // forward, the loss (targets equal to ignore_id do not count; -1: all
  // count) and backward, accumulating the parameters' gradients (those of
  // call.loss_scale x the mean loss). The memory is updated as forward does.
  ops::CrossEntropyResult forward_backward(IdMatrix ids, IdMatrix targets, int ignore_id,
                                           const ModelCall& call, TransformerXLMemory<T>& memory,
                                           TransformerXLState<T>& state) const;
  // The loss without gradients; the memory is updated. Activations of one
  // layer at a time.
  ops::CrossEntropyResult evaluate(IdMatrix ids, IdMatrix targets, int ignore_id,
                                   const ModelCall& call, TransformerXLMemory<T>& memory,
                                   TransformerXLState<T>& state) const;
  // Logits [batch, vocab] of the given position of every row after forward
  // (the loss's input projected: out W + b, or out E^T + b when tied).
  void logits_at(TransformerXLState<T>& state, Index position, View2<T> logits) const;

  // Cached generation, segment by segment as evaluation reads a stream.
  // start_generation begins `batch` rows over a copy of `memory` (its
  // mem_len, clamp_len and same_length; empty for a new text) with segments
  // of segment_length positions. generation_step feeds ids [batch, n] (n >= 1,
  // e.g. a prompt, then one token at a time) and writes the logits [batch,
  // vocab] of the last one. Each position attends to the memory and to the
  // positions of its segment so far through the cached keys and values (no
  // rerun of the context); when a segment fills up, the memory becomes the
  // last mem_len rows of [memory; segment] per layer, as forward leaves it,
  // and a new segment starts. The logits equal forward's (dropout off) on the
  // current segment's ids so far over the segment's memory, at the last one.
  void start_generation(Index batch, Index segment_length, const TransformerXLMemory<T>& memory,
                        TransformerXLGeneration<T>& generation) const;
  void generation_step(IdMatrix ids, TransformerXLGeneration<T>& generation, View2<T> logits) const;

  const TransformerXLConfig& config() const { return config_; }
  Index layers() const { return Index(layers_.size()); }

 private:
  // logits [n, vocab] of the rows hidden [n, d_model] of h_N (LayerNorm'd
  // here when pre-LN, unless `normed`).
  void project(View2<T> hidden, bool normed, View2<T> logits, Workspace& workspace) const;
  void check_memory(const char* op, const TransformerXLMemory<T>& memory, Index batch) const;
  ops::CrossEntropyResult loss(IdMatrix targets, int ignore_id, TransformerXLState<T>& state,
                               bool gradients) const;
  layers::TransformerXLLayerCall layer_call(const ModelCall& call, Index layer,
                                            const TransformerXLMemory<T>& memory) const;

  TransformerXLConfig config_;
  Parameter<param_t<T>>* embedding_ = nullptr;
  std::vector<std::unique_ptr<layers::TransformerXLLayer<T>>> layers_;
  Parameter<param_t<T>>* out_gamma_ = nullptr;  // pre-LN
  Parameter<param_t<T>>* out_beta_ = nullptr;
  // out.w [d_model, vocab] (tied: the embedding table), out.b, the loss.
  std::unique_ptr<layers::VocabularyHead<T>> head_;
};

}  // namespace reformer::models
