#include "reformer/models/transformer.hpp"

#include "models/transformer_detail.hpp"

#include "reformer/core/error.hpp"
#include "reformer/core/initializers.hpp"
#include "reformer/core/instantiate.hpp"
#include "reformer/core/memory_tracker.hpp"
#include "reformer/core/shape.hpp"
#include "reformer/ops/dropout.hpp"
#include "reformer/ops/elementwise.hpp"
#include "reformer/ops/embedding.hpp"
#include "reformer/ops/layer_norm.hpp"
#include "reformer/ops/softmax.hpp"

#include <algorithm>
#include <climits>
#include <cmath>
#include <numeric>
#include <string>

namespace reformer::models {
namespace {

using attention::AttentionKind;

constexpr const char* kOp = "TransformerConfig";

// Streams of a call's randomness and of the initialisation.
enum Stream : std::uint64_t { kSourceDropout = 1, kTargetDropout, kEncoder, kDecoder };
enum InitStream : std::uint64_t {
  kInitSource = 1,
  kInitTarget,
  kInitSourcePositions,
  kInitTargetPositions,
  kInitEncoder,
  kInitDecoder,
  kInitGenerator
};

using internal::flat;

}  // namespace

// ---------------------------------------------------------------- config

void TransformerConfig::validate() const {
  validate_sizes(kOp);
  for (const auto& [key, value] :
       std::vector<std::pair<const char*, Index>>{{"source_vocab", source_vocab},
                                                  {"target_vocab", target_vocab},
                                                  {"seq2seq.encoder_layers", encoder_layers},
                                                  {"seq2seq.decoder_layers", decoder_layers},
                                                  {"max_length", max_length}})
    require<ConfigError>(value > 0, kOp, ": model.", key, " is ", value, " but must be positive");
  require<ConfigError>(source_vocab <= INT_MAX && target_vocab <= INT_MAX, kOp,
                       ": the vocabularies (", source_vocab, ", ", target_vocab,
                       ") must be at most ", INT_MAX, " (ids are ints)");
  require<ConfigError>(encoder_layers <= 100000 && decoder_layers <= 100000, kOp,
                       ": model.seq2seq.encoder_layers and decoder_layers must be at most 100000");
  require<ConfigError>(positions == PositionKind::Sinusoidal || positions == PositionKind::Learned,
                       kOp, ": model.positions is ", to_string(positions),
                       " but the encoder-decoder takes sinusoidal or learned positions");
  require<ConfigError>(
      decoder_attention != AttentionKind::Lsh, kOp,
      ": model.seq2seq.decoder_attention is lsh but the decoder's self-attention must "
      "be full, exact or local (LSH serves the encoder)");
  require<ConfigError>(!share_embeddings || source_vocab == target_vocab, kOp,
                       ": model.seq2seq.share_embeddings is true but source_vocab (", source_vocab,
                       ") and target_vocab (", target_vocab,
                       ") differ; one table needs one vocabulary");
  encoder_attention_config().validate();
  // An "auto" feed-forward chunk is valid here; the layer refuses it unless a
  // run has resolved it first.
  auto block = decoder_block_config();
  if (ff_chunk == kAutoChunk) block.feed_forward.chunk = 0;
  block.validate();
}

void TransformerConfig::validate_lengths(Index ls, Index lt) const {
  const auto encoder = encoder_attention_config();
  // The next length that fits `chunk`.
  const auto fit = [](Index length, Index chunk) { return (length / chunk + 1) * chunk; };
  if (encoder.kind == AttentionKind::Local)
    require<ConfigError>(ls % local.chunk == 0, kOp, ": the source length ", ls,
                         " is not a multiple of model.local.chunk = ", local.chunk,
                         " (the encoder uses local attention); use a length of ",
                         fit(ls, local.chunk), " or pad the sources");
  if (encoder.kind == AttentionKind::Lsh && ls > lsh.chunk)
    require<ConfigError>(ls % lsh.chunk == 0, kOp, ": the source length ", ls,
                         " is not a multiple of model.lsh.chunk = ", lsh.chunk,
                         " (the encoder uses LSH attention, which needs a multiple or at most "
                         "one chunk); use a length of ",
                         fit(ls, lsh.chunk), " or pad the sources");
  if (decoder_attention == AttentionKind::Local)
    require<ConfigError>(lt % local.chunk == 0, kOp, ": the target length ", lt,
                         " is not a multiple of model.local.chunk = ", local.chunk,
                         " (the decoder uses local attention); use a length of ",
                         fit(lt, local.chunk), " or pad the targets");
}

attention::AttentionLayerConfig TransformerConfig::encoder_attention_config() const {
  attention::AttentionLayerConfig c;
  c.kind = encoder_attention;
  c.d_model = d_model;
  c.heads = heads;
  c.d_head = d_head;
  c.causal = false;
  c.attention_dropout = attention_dropout;
  c.output_dropout = dropout;
  c.lsh = lsh;
  c.local = local;
  return c;
}

layers::DecoderBlockConfig TransformerConfig::decoder_block_config() const {
  layers::DecoderBlockConfig c;
  c.self_attention = encoder_attention_config();
  c.self_attention.kind = decoder_attention;
  c.self_attention.causal = true;
  c.cross_attention = encoder_attention_config();
  c.cross_attention.kind = cross_attention;
  c.feed_forward = {d_model, d_ff, ops::Activation::ReLU, dropout, ff_chunk, layer_norm_eps};
  c.layer_norm_eps = layer_norm_eps;
  return c;
}

// ---------------------------------------------------------------- state

template <class T>
void TransformerState<T>::release() {
  call = ModelCall();
  batch = source_length = target_length = 0;
  source = target = memory = dsource = dtarget = dmemory = View3<T>();
  source2 = target2 = source_top = target_top = dsource2 = dtarget2 = View3<T>();
  memory_mean = memory_rstd = View1<compute_t<T>>();
  encoder.clear();
  decoder.clear();
  scratch.release();
  workspace.release();
}

// ---------------------------------------------------------------- model

template <class T>
EncoderDecoder<T>::EncoderDecoder(const TransformerConfig& config, ParameterSet<param_t<T>>& params)
    : config_(config) {
  config_.validate();
  const Index d = config.d_model;
  source_embedding_ = &params.add("src_embed.table", {config.source_vocab, d});
  target_embedding_ = config.share_embeddings
                          ? source_embedding_
                          : &params.add("tgt_embed.table", {config.target_vocab, d});
  if (config.positions == PositionKind::Learned) {
    source_positions_ = &params.add("src_pos.table", {config.max_length, d});
    target_positions_ = &params.add("tgt_pos.table", {config.max_length, d});
  }
  layers::BlockConfig encoder_block;
  encoder_block.attention = config.encoder_attention_config();
  encoder_block.feed_forward = config.decoder_block_config().feed_forward;
  encoder_block.layer_norm_eps = config.layer_norm_eps;
  for (Index i = 0; i < config.encoder_layers; ++i) {
    const std::string prefix = "encoder." + std::to_string(i);
    if (config.reversible)
      reversible_encoder_.push_back(
          std::make_unique<layers::ReversibleBlock<T>>(prefix, encoder_block, params));
    else
      encoder_.push_back(std::make_unique<layers::ResidualBlock<T>>(prefix, encoder_block, params));
  }
  encoder_gamma_ = &params.add("encoder.norm.gamma", {d});
  encoder_beta_ = &params.add("encoder.norm.beta", {d});
  for (Index i = 0; i < config.decoder_layers; ++i)
    decoder_.push_back(std::make_unique<layers::DecoderBlock<T>>(
        "decoder." + std::to_string(i), config.decoder_block_config(), params));
  decoder_gamma_ = &params.add("decoder.norm.gamma", {d});
  decoder_beta_ = &params.add("decoder.norm.beta", {d});
  generator_ = std::make_unique<layers::VocabularyHead<T>>(
      "generator",
      layers::VocabularyHeadConfig{d, config.target_vocab, config.label_smoothing,
                                   config.loss_chunk},
      params, config.tie_generator ? target_embedding_ : nullptr);
}

template <class T>
void EncoderDecoder<T>::init(RandomKey key) {
  auto sub = [&](std::uint64_t a, std::uint64_t b = 0) {
    return RandomKey{key.seed, stream_id(key.stream, a, b)};
  };
  // Embeddings are scaled by sqrt(d): N(0, 1/d) makes them unit-variance.
  const double std = 1.0 / std::sqrt(double(config_.d_model));
  init_normal(*source_embedding_, std, sub(kInitSource));
  if (target_embedding_ != source_embedding_)
    init_normal(*target_embedding_, std, sub(kInitTarget));
  if (source_positions_) init_normal(*source_positions_, 0.02, sub(kInitSourcePositions));
  if (target_positions_) init_normal(*target_positions_, 0.02, sub(kInitTargetPositions));
  for (std::size_t i = 0; i < encoder_.size(); ++i) encoder_[i]->init(sub(kInitEncoder, i));
  for (std::size_t i = 0; i < reversible_encoder_.size(); ++i)
    reversible_encoder_[i]->init(sub(kInitEncoder, i));
  for (std::size_t i = 0; i < decoder_.size(); ++i) decoder_[i]->init(sub(kInitDecoder, i));
  init_constant(*encoder_gamma_, 1.0);
  init_constant(*decoder_gamma_, 1.0);
  init_constant(*encoder_beta_, 0.0);
  init_constant(*decoder_beta_, 0.0);
  generator_->init(sub(kInitGenerator));
}

template <class T>
void EncoderDecoder<T>::check_batch(const char* op, const Seq2SeqBatch& batch) const {
  const Index b = batch.source.extent(0), ls = batch.source.extent(1);
  const Index lt = batch.target_in.extent(1);
  require<ShapeError>(b > 0 && ls > 0 && lt > 0, op, ": source ", shape_string(batch.source),
                      " and target_in ", shape_string(batch.target_in),
                      " need at least one sequence of one token");
  require_same_shape(op, "target_in", batch.target_in, "target_out", batch.target_out);
  require_same_shape(op, "source", batch.source, "source_valid", batch.source_valid);
  require_same_shape(op, "target_in", batch.target_in, "target_valid", batch.target_valid);
  require<ShapeError>(Index(batch.target_in.extent(0)) == b, op, ": source has ", b,
                      " sequences but target_in ", batch.target_in.extent(0));
  require<ShapeError>(ls <= config_.max_length, op, ": the source has length ", ls,
                      " but the model takes at most model.max_length = ", config_.max_length);
  require<ShapeError>(lt <= config_.max_length, op, ": the target has length ", lt,
                      " but the model takes at most model.max_length = ", config_.max_length);
  // The kernels' own length rules (local and LSH chunks) name the chunk key.
  config_.validate_lengths(ls, lt);
  ops::require_ids_in_range(op, "source", flat(batch.source), config_.source_vocab);
  ops::require_ids_in_range(op, "target_in", flat(batch.target_in), config_.target_vocab);
}

template <class T>
void EncoderDecoder<T>::embed(const Parameter<param_t<T>>& table,
                              const Parameter<param_t<T>>* positions, IdMatrix ids, Index offset,
                              const ModelCall& call, std::uint64_t stream, View3<T> out) const {
  const Index length = ids.extent(1);
  auto e = as_matrix(out);
  // e = sqrt(d) Embed(ids) + Positions, then dropout.
  ops::token_embedding_forward<T>(table.matrix(), flat(ids), true, e);
  if (positions)
    ops::learned_positions_forward<T>(e, positions->matrix(), length, offset, e);
  else
    ops::sinusoidal_positions_forward<T>(e, length, offset, e);
  if (call.training && config_.dropout > 0)
    ops::dropout_forward<T>(as_vector(e), config_.dropout,
                            {call.key.seed, stream_id(call.key.stream, stream)},
                            ops::dropout_offset(call.first_row, row_elements(out)), as_vector(e));
}

template <class T>
void EncoderDecoder<T>::embed_backward(Parameter<param_t<T>>& table,
                                       Parameter<param_t<T>>* positions, IdMatrix ids,
                                       const ModelCall& call, std::uint64_t stream,
                                       View3<T> dout) const {
  const Index length = ids.extent(1);
  auto de = as_matrix(dout);
  if (call.training && config_.dropout > 0)
    ops::dropout_backward<T>(
        as_vector(de), config_.dropout, {call.key.seed, stream_id(call.key.stream, stream)},
        ops::dropout_offset(call.first_row, row_elements(dout)), as_vector(de));
  if (positions) ops::learned_positions_backward<T>(de, length, 0, positions->grad_matrix());
  ops::token_embedding_backward<T>(flat(ids), de, true, table.grad_matrix());
}

template <class T>
View3<T> EncoderDecoder<T>::encoder_top(TransformerState<T>& state) const {
  return config_.reversible ? state.source_top : state.source;
}

template <class T>
View3<T> EncoderDecoder<T>::decoder_top(TransformerState<T>& state) const {
  return config_.reversible ? state.target_top : state.target;
}

template <class T>
void EncoderDecoder<T>::join_stream_gradients(View3<T> d1, View3<T> d2) const {
  if (config_.reversible) ops::axpby<T>(1, as_vector(d2), 1, as_vector(d1));
}

namespace {

// second = first (both streams start as the embedding).
template <class T>
View3<T> second_stream(View3<T>& slot, View3<T> first, const char* label) {
  ensure_view(slot, label, first.extent(0), first.extent(1), first.extent(2));
  Kokkos::deep_copy(slot, first);
  return slot;
}

// top = (x1 + x2) / 2.
template <class T>
void average_streams(In3<T> x1, In3<T> x2, View3<T>& top, const char* label) {
  ensure_view(top, label, x1.extent(0), x1.extent(1), x1.extent(2));
  Kokkos::deep_copy(top, x2);
  ops::axpby<T>(0.5, as_vector(x1), 0.5, as_vector(top));
}

// From the gradient of the streams' average: d1 = d2 = dtop / 2 (d1 is dtop).
template <class T>
void split_top_gradient(View3<T> d1, View3<T>& d2, const char* label) {
  ensure_view(d2, label, d1.extent(0), d1.extent(1), d1.extent(2));
  ops::axpby<T>(0, as_vector(d1), 0.5, as_vector(d1));
  Kokkos::deep_copy(d2, d1);
}

}  // namespace

template <class T>
void EncoderDecoder<T>::encode(IdMatrix source, MaskMatrix source_valid, const ModelCall& call,
                               TransformerState<T>& state) const {
  const Index b = source.extent(0), ls = source.extent(1), d = config_.d_model;
  state.batch = b;
  state.source_length = ls;
  ensure_view(state.source, "transformer_source", b, ls, d);
  embed(*source_embedding_, source_positions_, source, 0, call, kSourceDropout, state.source);
  const std::size_t layers = std::max(encoder_.size(), reversible_encoder_.size());
  state.encoder.resize(layers);
  auto block_call = [&](std::size_t i) {
    return layers::BlockCall{{call.key.seed, stream_id(call.key.stream, kEncoder, i)},
                             source_valid,
                             call.training,
                             call.first_row};
  };
  if (config_.reversible) {
    auto x2 = second_stream(state.source2, state.source, "transformer_source2");
    for (std::size_t i = 0; i < layers; ++i)
      reversible_encoder_[i]->forward(state.source, x2, block_call(i), state.encoder[i],
                                      state.workspace, attention::Save::PlanOnly);
    average_streams<T>(state.source, x2, state.source_top, "transformer_source_top");
  } else {
    for (std::size_t i = 0; i < layers; ++i)
      encoder_[i]->forward(state.source, block_call(i), state.encoder[i], state.workspace);
  }
  // m = LayerNorm(the encoder's top).
  ensure_view(state.memory, "transformer_memory", b, ls, d);
  ensure_view(state.memory_mean, "transformer_memory_mean", b * ls);
  ensure_view(state.memory_rstd, "transformer_memory_rstd", b * ls);
  ops::layer_norm_forward<T>(as_matrix(encoder_top(state)), encoder_gamma_->value,
                             encoder_beta_->value, compute_t<T>(config_.layer_norm_eps),
                             as_matrix(state.memory), state.memory_mean, state.memory_rstd);
}

template <class T>
void EncoderDecoder<T>::decode(const Seq2SeqBatch& batch, const ModelCall& call,
                               TransformerState<T>& state) const {
  const Index b = batch.target_in.extent(0), lt = batch.target_in.extent(1), d = config_.d_model;
  state.target_length = lt;
  ensure_view(state.target, "transformer_target", b, lt, d);
  embed(*target_embedding_, target_positions_, batch.target_in, 0, call, kTargetDropout,
        state.target);
  state.decoder.resize(decoder_.size());
  auto block_call = [&](std::size_t i) {
    return layers::DecoderBlockCall{{call.key.seed, stream_id(call.key.stream, kDecoder, i)},
                                    batch.target_valid,
                                    batch.source_valid,
                                    call.training,
                                    call.first_row};
  };
  if (config_.reversible) {
    auto t2 = second_stream(state.target2, state.target, "transformer_target2");
    for (std::size_t i = 0; i < decoder_.size(); ++i)
      decoder_[i]->forward_reversible(state.target, t2, state.memory, block_call(i),
                                      state.decoder[i], state.workspace);
    average_streams<T>(state.target, t2, state.target_top, "transformer_target_top");
  } else {
    for (std::size_t i = 0; i < decoder_.size(); ++i)
      decoder_[i]->forward(state.target, state.memory, block_call(i), state.decoder[i],
                           state.workspace);
  }
}

template <class T>
void EncoderDecoder<T>::head_log_probs(In2<T> top, View2<T> out, Workspace& workspace) const {
  Workspace::Frame frame(workspace);
  const Index rows = top.extent(0);
  auto hidden = frame.take<View2<T>>(rows, config_.d_model);
  auto mean = frame.take<View1<compute_t<T>>>(rows), rstd = frame.take<View1<compute_t<T>>>(rows);
  ops::layer_norm_forward<T>(top, decoder_gamma_->value, decoder_beta_->value,
                             compute_t<T>(config_.layer_norm_eps), hidden, mean, rstd);
  auto logits = frame.take<View2<T>>(rows, config_.target_vocab);
  generator_->logits(hidden, logits);
  ops::log_softmax_forward<T>(logits, out);
}

template <class T>
ops::CrossEntropyResult EncoderDecoder<T>::loss(const Seq2SeqBatch& batch, int pad_id,
                                                TransformerState<T>& state, bool gradients) const {
  const Index rows = state.batch * state.target_length, d = config_.d_model;
  Workspace::Frame frame(state.workspace);
  auto hidden = frame.take<View2<T>>(rows, d);
  auto mean = frame.take<View1<compute_t<T>>>(rows), rstd = frame.take<View1<compute_t<T>>>(rows);
  ops::layer_norm_forward<T>(as_matrix(decoder_top(state)), decoder_gamma_->value,
                             decoder_beta_->value, compute_t<T>(config_.layer_norm_eps), hidden,
                             mean, rstd);
  const auto targets = flat(batch.target_out);
  // Reported as the KL divergence to the smoothed targets (the annotated
  // transformer's KLDivLoss): the cross-entropy minus the targets' entropy.
  const double entropy =
      ops::smoothed_target_entropy(config_.label_smoothing, config_.target_vocab, pad_id);
  // The chunks' logits come from the workspace, past this frame's buffers.
  if (!gradients) {
    auto result = generator_->forward(hidden, targets, pad_id, &state.workspace);
    if (result.tokens > 0) result.loss -= entropy;
    return result;
  }
  auto dhidden = frame.take<View2<T>>(rows, d);
  auto result = generator_->forward_backward(hidden, targets, pad_id, state.call.loss_scale,
                                             dhidden, &state.workspace);
  if (result.tokens > 0) result.loss -= entropy;
  ensure_view(state.dtarget, "transformer_dtarget", state.batch, state.target_length, d);
  ops::layer_norm_backward<T>(as_matrix(decoder_top(state)), decoder_gamma_->value, mean, rstd,
                              dhidden, as_matrix(state.dtarget), decoder_gamma_->grad,
                              decoder_beta_->grad);
  return result;
}

template <class T>
ops::CrossEntropyResult EncoderDecoder<T>::forward_backward(const Seq2SeqBatch& batch, int pad_id,
                                                            const ModelCall& call,
                                                            TransformerState<T>& state) const {
  check_batch("EncoderDecoder::forward_backward", batch);
  state.call = call;
  {
    ScopedMemoryPhase phase("forward");
    encode(batch.source, batch.source_valid, call, state);
    decode(batch, call, state);
  }
  ops::CrossEntropyResult result;
  {
    ScopedMemoryPhase phase("loss");
    result = loss(batch, pad_id, state, /*gradients=*/true);
  }
  ScopedMemoryPhase phase("backward");
  const Index d = config_.d_model;
  // The decoder from the top down (the memory's gradient gathers over its
  // layers), the target embedding, the encoder's LayerNorm, the encoder, the
  // source embedding. Reversible stacks rebuild each layer's input from its
  // output on the way down.
  Kokkos::deep_copy(
      ensure_view(state.dmemory, "transformer_dmemory", state.batch, state.source_length, d),
      store<T>(0));
  if (config_.reversible) {
    split_top_gradient<T>(state.dtarget, state.dtarget2, "transformer_dtarget2");
    for (Index i = Index(decoder_.size()) - 1; i >= 0; --i)
      decoder_[i]->backward_reversible(state.target, state.target2, state.dtarget, state.dtarget2,
                                       state.memory, state.dmemory, state.decoder[i], state.scratch,
                                       state.workspace);
    join_stream_gradients(state.dtarget, state.dtarget2);
  } else {
    for (Index i = Index(decoder_.size()) - 1; i >= 0; --i)
      decoder_[i]->backward(state.dtarget, state.memory, state.dmemory, state.decoder[i],
                            state.workspace);
  }
  embed_backward(*target_embedding_, target_positions_, batch.target_in, call, kTargetDropout,
                 state.dtarget);
  ensure_view(state.dsource, "transformer_dsource", state.batch, state.source_length, d);
  ops::layer_norm_backward<T>(as_matrix(encoder_top(state)), encoder_gamma_->value,
                              state.memory_mean, state.memory_rstd, as_matrix(state.dmemory),
                              as_matrix(state.dsource), encoder_gamma_->grad, encoder_beta_->grad);
  if (config_.reversible) {
    split_top_gradient<T>(state.dsource, state.dsource2, "transformer_dsource2");
    for (Index i = Index(reversible_encoder_.size()) - 1; i >= 0; --i)
      reversible_encoder_[i]->backward_reversible(state.source, state.source2, state.dsource,
                                                  state.dsource2, state.encoder[i], state.scratch,
                                                  state.workspace);
    join_stream_gradients(state.dsource, state.dsource2);
  } else {
    for (Index i = Index(encoder_.size()) - 1; i >= 0; --i)
      encoder_[i]->backward(state.dsource, state.encoder[i], state.workspace);
  }
  embed_backward(*source_embedding_, source_positions_, batch.source, call, kSourceDropout,
                 state.dsource);
  return result;
}

template <class T>
ops::CrossEntropyResult EncoderDecoder<T>::evaluate(const Seq2SeqBatch& batch, int pad_id,
                                                    const ModelCall& call,
                                                    TransformerState<T>& state) const {
  check_batch("EncoderDecoder::evaluate", batch);
  state.call = call;
  encode(batch.source, batch.source_valid, call, state);
  decode(batch, call, state);
  return loss(batch, pad_id, state, /*gradients=*/false);
}

template <class T>
void EncoderDecoder<T>::log_probs(const Seq2SeqBatch& batch, View3<T> out,
                                  TransformerState<T>& state, bool encode_source) const {
  const char* op = "EncoderDecoder::log_probs";
  check_batch(op, batch);
  const Index b = batch.target_in.extent(0), lt = batch.target_in.extent(1);
  require<ShapeError>(Index(out.extent(0)) == b && Index(out.extent(1)) == lt &&
                          Index(out.extent(2)) == config_.target_vocab,
                      op, ": out has shape ", shape_string(out), " but must be [", b, ", ", lt,
                      ", ", config_.target_vocab, "]");
  const ModelCall call{{}, false};
  state.call = call;
  if (encode_source || state.batch != b || state.source_length != Index(batch.source.extent(1)) ||
      !state.memory.data())
    encode(batch.source, batch.source_valid, call, state);
  decode(batch, call, state);
  head_log_probs(as_matrix(decoder_top(state)), as_matrix(out), state.workspace);
}

// Instantiates the members defined here; the decoding members are instantiated
// in transformer_decode.cpp.
#define REFORMER_INSTANTIATE(T)        \
  template struct TransformerState<T>; \
  template class EncoderDecoder<T>;
REFORMER_INSTANTIATE_FLOAT_AND_DOUBLE(REFORMER_INSTANTIATE)
// bf16 activations (train.precision = "bf16"): the training calls; a bf16 run
// decodes with EncoderDecoder<float> on the same float32 weights.
template struct TransformerState<bf16>;
template EncoderDecoder<bf16>::EncoderDecoder(const TransformerConfig&, ParameterSet<float>&);
template void EncoderDecoder<bf16>::init(RandomKey);
template ops::CrossEntropyResult EncoderDecoder<bf16>::forward_backward(
    const Seq2SeqBatch&, int, const ModelCall&, TransformerState<bf16>&) const;
template ops::CrossEntropyResult EncoderDecoder<bf16>::evaluate(const Seq2SeqBatch&, int,
                                                                const ModelCall&,
                                                                TransformerState<bf16>&) const;

}  // namespace reformer::models
