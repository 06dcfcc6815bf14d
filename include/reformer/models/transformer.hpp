// The encoder-decoder Transformer (Vaswani et al. 2017), pre-LayerNorm as the
// annotated-transformer tutorials build it, on the kernels of the Reformer:
//   es = dropout(sqrt(d) Embed_src(source) + Positions)     [batch, Ls, d_model]
//   m  = LayerNorm(Encoder_{N-1}( ... Encoder_0(es)))       (ResidualBlocks, no causal
//                                                             mask, source padding)
//   et = dropout(sqrt(d) Embed_tgt(target_in) + Positions)   [batch, Lt, d_model]
//   h  = LayerNorm(Decoder_{M-1}( ... Decoder_0(et, m)))     (DecoderBlocks: causal
//                                                             self-attention, cross-attention)
//   loss = KL(q || softmax(h W_gen + b)) against target_out (padding ignored), q the
//          label-smoothed target distribution (ops/cross_entropy.hpp): the
//          cross-entropy minus the entropy of q, so a perfect model reaches 0
// Reversible (the two-stream form of trax's Reformer encoder-decoder): the
// embedding is both streams, every block a pair of half-residuals between them
// (layers/blocks.hpp ReversibleBlock, DecoderBlock::forward_reversible), and the
// final LayerNorms take the streams' average,
//   m = LayerNorm((x1 + x2) / 2),  h = LayerNorm((t1 + t2) / 2);
// backward rebuilds each layer's input from its output, so no layer keeps
// activations (only its call: masks, dropout streams, LSH plan).
// Encoder self-attention may be full, exact, LSH or local; decoder self-attention
// full, exact or local; cross-attention full or exact. The source and target
// embeddings may be one table (share_embeddings, one vocabulary), and the
// generator may be the target embedding (tie_generator).
//
// Decoding with caches (DecodeCache): the encoder runs once per source, the
// cross-attention keys and values are projected once, and every decoder
// self-attention keeps the keys and values of the positions decoded so far, so
// a step costs one position per layer. Greedy and beam search run on it.
//
// Ownership: parameters in the caller's ParameterSet; activations in a
// TransformerState (training, evaluation) or a DecodeCache (decoding) that the
// caller owns.
#pragma once

#include "reformer/layers/blocks.hpp"
#include "reformer/layers/vocabulary_head.hpp"
#include "reformer/models/model_call.hpp"
#include "reformer/models/model_sizes.hpp"
#include "reformer/models/reformer_config.hpp"
#include "reformer/ops/cross_entropy.hpp"

#include <memory>
#include <vector>

namespace reformer::models {

// The sizes (models/model_sizes.hpp) default smaller than ModelSizes': dropout
// on embeddings, sub-layer outputs and the feed-forward hidden layer.
struct TransformerConfig : ModelSizes {
  TransformerConfig() {
    d_model = 64, d_ff = 128, heads = 4, d_head = 16;
    dropout = 0.1;
    label_smoothing = 0.1;
  }
  Index source_vocab = 16, target_vocab = 16;  // ids in [0, vocab)
  Index encoder_layers = 2, decoder_layers = 2;
  Index max_length = 128;  // longest source and target (learned position tables)
  attention::AttentionKind encoder_attention = attention::AttentionKind::Full;
  attention::AttentionKind decoder_attention = attention::AttentionKind::Full;
  attention::AttentionKind cross_attention = attention::AttentionKind::Full;
  PositionKind positions = PositionKind::Sinusoidal;  // sinusoidal or learned
  bool share_embeddings = false;            // one table for source and target (equal vocabularies)
  bool tie_generator = false;               // the generator is the target embedding table
  bool reversible = false;                  // two-stream reversible layers (see above)
  attention::LshAttentionConfig lsh{};      // encoder LSH layers
  attention::LocalAttentionConfig local{};  // local layers

  // ConfigError naming the first bad or contradictory field.
  void validate() const;
  // Sources of `source_length` and targets of `target_length` positions (the
  // pair tasks pad both to data.length): ConfigError naming the chunk key when
  // the encoder's local or LSH chunks, or the decoder's local chunks, do not
  // divide them.
  void validate_lengths(Index source_length, Index target_length) const;
  attention::AttentionLayerConfig encoder_attention_config() const;
  layers::DecoderBlockConfig decoder_block_config() const;
};

using MaskMatrix = Kokkos::View<const int**, Layout, MemSpace>;  // [batch, length], 1 = token

// One batch of pairs. target_in is the target shifted right (it starts with the
// start symbol), target_out the tokens to predict; rows padded with pad_id
// beyond their length, and the masks say which positions are tokens.
struct Seq2SeqBatch {
  IdMatrix source, target_in, target_out;
  MaskMatrix source_valid, target_valid;
};

template <class T>
struct TransformerState {
  ModelCall call{};
  Index batch = 0, source_length = 0, target_length = 0;
  View3<T> source, target;          // the streams; after forward: encoder output and decoder top
  View3<T> source2, target2;        // reversible: the second streams
  View3<T> source_top, target_top;  // reversible: the streams' averages
  View3<T> memory;                  // LayerNorm of the encoder's top
  View3<T> dsource, dtarget, dmemory;
  View3<T> dsource2, dtarget2;  // reversible
  View1<compute_t<T>> memory_mean, memory_rstd;
  std::vector<layers::BlockState<T>> encoder;
  std::vector<layers::DecoderBlockState<T>> decoder;
  attention::AttentionState<T> scratch;  // reversible: the layer being recomputed
  Workspace workspace{"transformer_workspace"};
  void release();
};

// What decoding keeps per batch of sources.
template <class T>
struct DecodeCache {
  Index batch = 0, source_length = 0, capacity = 0;  // capacity: longest target
  Index length = 0;                                  // target positions decoded so far
  View3<T> memory;  // [batch, Ls, d_model], in the order start_decoding got (not reordered)
  Kokkos::View<int**, Layout, MemSpace> source_valid;
  std::vector<View3<T>> cross_k, cross_v;  // per layer [batch, Ls, heads * d_head]
  std::vector<View3<T>> self_k, self_v;    // per layer [batch, capacity, heads * d_head]
  TransformerState<T> encoder_state;       // the encoder's pass
  Workspace workspace{"decode_workspace"};
};

struct BeamOptions {
  Index beam = 4;
  double length_penalty = 0.6;  // score / ((5 + length) / 6)^alpha (GNMT)
};

template <class T>
class EncoderDecoder {
 public:
  EncoderDecoder(const TransformerConfig& config, ParameterSet<param_t<T>>& params);
  // Embeddings N(0, d^-1/2), projections Xavier-uniform, LayerNorm gains 1, biases 0.
  void init(RandomKey key);

  // Loss (mean over the counted target tokens) and its gradients, accumulated
  // into the parameters' gradients. Targets equal to pad_id do not count.
  ops::CrossEntropyResult forward_backward(const Seq2SeqBatch& batch, int pad_id,
                                           const ModelCall& call, TransformerState<T>& state) const;
  ops::CrossEntropyResult evaluate(const Seq2SeqBatch& batch, int pad_id, const ModelCall& call,
                                   TransformerState<T>& state) const;
  // Log-probabilities [batch, Lt, target_vocab] of every position, from the
  // whole target_in (dropout off): what cached decoding must reproduce. With
  // encode_source = false the encoder's output of the previous call on the same
  // sources is reused (decoding by rerunning the decoder on the prefix).
  void log_probs(const Seq2SeqBatch& batch, View3<T> out, TransformerState<T>& state,
                 bool encode_source = true) const;

  // Runs the encoder on the sources and projects the cross-attention keys and
  // values; the cache then holds no target position.
  void start_decoding(IdMatrix source, MaskMatrix source_valid, Index capacity,
                      DecodeCache<T>& cache) const;
  // Feeds one token per sequence at position cache.length and writes the
  // log-probabilities of the next token [batch, target_vocab].
  void decode_step(Kokkos::View<const int*, Layout, MemSpace> tokens, DecodeCache<T>& cache,
                   View2<T> log_probs) const;
  // Keeps sequence order[i] of the cache as sequence i (beam search).
  void reorder(DecodeCache<T>& cache, Kokkos::View<const int*, Layout, MemSpace> order) const;

  // Greedy decoding of every source, from `start` until `end` (kept) or
  // max_length new tokens; one row per source, padded with `pad` after the end.
  std::vector<std::vector<int>> greedy(IdMatrix source, MaskMatrix source_valid, int start, int end,
                                       Index max_length) const;
  // Beam search per source (batched over sources x beams), with the length
  // penalty; a hypothesis ends at `end`, and the search of a source stops
  // early when its best finished hypothesis cannot be beaten.
  std::vector<std::vector<int>> beam_search(IdMatrix source, MaskMatrix source_valid, int start,
                                            int end, Index max_length,
                                            const BeamOptions& options) const;

  const TransformerConfig& config() const { return config_; }

 private:
  void check_batch(const char* op, const Seq2SeqBatch& batch) const;
  void embed(const Parameter<param_t<T>>& table, const Parameter<param_t<T>>* positions,
             IdMatrix ids, Index offset, const ModelCall& call, std::uint64_t stream,
             View3<T> out) const;
  void embed_backward(Parameter<param_t<T>>& table, Parameter<param_t<T>>* positions, IdMatrix ids,
                      const ModelCall& call, std::uint64_t stream, View3<T> dout) const;
  void encode(IdMatrix source, MaskMatrix source_valid, const ModelCall& call,
              TransformerState<T>& state) const;
  void decode(const Seq2SeqBatch& batch, const ModelCall& call, TransformerState<T>& state) const;
  ops::CrossEntropyResult loss(const Seq2SeqBatch& batch, int pad_id, TransformerState<T>& state,
                               bool gradients) const;
  // What the final LayerNorms read: the stream, or the streams' average.
  View3<T> encoder_top(TransformerState<T>& state) const;
  View3<T> decoder_top(TransformerState<T>& state) const;
  // The embedding's gradient from the streams' gradients (reversible: their sum).
  void join_stream_gradients(View3<T> d1, View3<T> d2) const;
  // out = log_softmax(generator(LayerNorm(top))) for rows of the decoder's top.
  void head_log_probs(In2<T> top, View2<T> out, Workspace& workspace) const;

  TransformerConfig config_;
  Parameter<param_t<T>>* source_embedding_ = nullptr;
  Parameter<param_t<T>>* target_embedding_ = nullptr;  // == source_embedding_ when shared
  Parameter<param_t<T>>* source_positions_ = nullptr;  // learned
  Parameter<param_t<T>>* target_positions_ = nullptr;
  std::vector<std::unique_ptr<layers::ResidualBlock<T>>> encoder_;  // one of the two
  std::vector<std::unique_ptr<layers::ReversibleBlock<T>>> reversible_encoder_;
  Parameter<param_t<T>>* encoder_gamma_ = nullptr;
  Parameter<param_t<T>>* encoder_beta_ = nullptr;
  std::vector<std::unique_ptr<layers::DecoderBlock<T>>> decoder_;
  Parameter<param_t<T>>* decoder_gamma_ = nullptr;
  Parameter<param_t<T>>* decoder_beta_ = nullptr;
  // The generator: generator.w [d_model, target_vocab] (tied: the target
  // embedding table), generator.b, the loss.
  std::unique_ptr<layers::VocabularyHead<T>> generator_;
};

}  // namespace reformer::models
