#include "reformer/models/transformer_xl.hpp"

#include "reformer/core/error.hpp"
#include "reformer/core/initializers.hpp"
#include "reformer/core/matrix_policy.hpp"
#include "reformer/core/memory_tracker.hpp"
#include "reformer/core/shape.hpp"
#include "reformer/ops/dropout.hpp"
#include "reformer/ops/elementwise.hpp"
#include "reformer/ops/embedding.hpp"
#include "reformer/ops/layer_norm.hpp"

#include <algorithm>
#include <cmath>
#include <string>

namespace reformer::models {
namespace {

enum Stream : std::uint64_t {
  kEmbeddingDropout = 1,
  kLayers = 2,
  kOutputDropout = 3,
  kPositionDropout = 4
};
enum InitStream : std::uint64_t { kInitEmbedding = 1, kInitLayers, kInitOutput };

Kokkos::View<const int*, Layout, MemSpace> ids_of(IdMatrix ids) {
  return Kokkos::View<const int*, Layout, MemSpace>(ids.data(), ids.extent(0) * ids.extent(1));
}

// out(b, j, :) = c(b, K - M' + j, :): the last M' rows of [batch, K, d].
template <class T>
void last_rows(In3<T> c, View3<T> out) {
  const Index batch = out.extent(0), kept = out.extent(1), width = out.extent(2);
  const Index skip = Index(c.extent(1)) - kept;
  using Policy3 = Kokkos::MDRangePolicy<ExecSpace, Kokkos::Rank<3>>;
  Kokkos::parallel_for(
      "txl_memory_rows", Policy3({0, 0, 0}, {batch, kept, width}),
      KOKKOS_LAMBDA(Index b, Index j, Index f) { out(b, j, f) = c(b, skip + j, f); });
}

// out(b, :) = x(b, position, :).
template <class T>
void row_at(In3<T> x, Index position, View2<T> out) {
  Kokkos::parallel_for(
      "txl_row_at", matrix_policy(Index(out.extent(0)), Index(out.extent(1))),
      KOKKOS_LAMBDA(Index b, Index f) { out(b, f) = x(b, position, f); });
}

// out(b, t) = ids(b, first + t).
void id_columns(IdMatrix ids, Index first, Kokkos::View<int**, Layout, MemSpace> out) {
  Kokkos::parallel_for(
      "txl_id_columns", matrix_policy(Index(out.extent(0)), Index(out.extent(1))),
      KOKKOS_LAMBDA(Index b, Index t) { out(b, t) = ids(b, first + t); });
}

}  // namespace

template <class T>
TransformerXLMemory<T> TransformerXLMemory<T>::copy() const {
  TransformerXLMemory<T> out;
  out.mem_len = mem_len;
  out.clamp_len = clamp_len;
  out.same_length = same_length;
  for (const auto& h : hidden) {
    View3<T> c(Kokkos::view_alloc(Kokkos::WithoutInitializing, "txl_memory"), h.extent(0),
               h.extent(1), h.extent(2));
    Kokkos::deep_copy(c, h);
    out.hidden.push_back(c);
  }
  return out;
}

template <class T>
void TransformerXLGeneration<T>::release() {
  batch = segment_length = filled = 0;
  memory = TransformerXLMemory<T>();
  layers.clear();
  workspace.release();
}

void TransformerXLConfig::validate() const {
  const char* op = "TransformerXLConfig";
  require<ConfigError>(vocab > 1, op, ": model.vocab is ", vocab, " but must be at least 2");
  require<ConfigError>(layers > 0, op, ": model.layers is ", layers, " but must be positive");
  validate_sizes(op);
  // An "auto" feed-forward chunk is valid here; the layer refuses it unless a
  // run has resolved it first.
  auto layer = layer_config();
  if (ff_chunk == kAutoChunk) layer.feed_forward.chunk = 0;
  layer.validate();
}

layers::TransformerXLLayerConfig TransformerXLConfig::layer_config() const {
  layers::TransformerXLLayerConfig c;
  c.d_model = d_model;
  c.heads = heads;
  c.d_head = d_head;
  c.feed_forward.d_ff = d_ff;
  c.feed_forward.activation = ff_activation;
  c.feed_forward.dropout = dropout;
  c.feed_forward.chunk = ff_chunk;
  c.attention_dropout = attention_dropout;
  c.dropout = dropout;
  c.position_dropout = dropout;
  c.pre_norm = pre_norm;
  c.layer_norm_eps = layer_norm_eps;
  c.relative.clamp_len = clamp_len;
  c.relative.same_length = same_length;
  c.relative.mem_len = 1;  // a placeholder: each call sets the memory's mem_len
  return c;
}

template <class T>
void TransformerXLState<T>::release() {
  call = ModelCall();
  batch = length = 0;
  x = out = dx = View3<T>();
  layers.clear();
  workspace.release();
}

template <class T>
TransformerXL<T>::TransformerXL(const TransformerXLConfig& config, ParameterSet<param_t<T>>& params)
    : config_((config.validate(), config)) {
  const Index d = config.d_model;
  embedding_ = &params.add("embedding", {config.vocab, d});
  const auto layer = config.layer_config();
  for (Index i = 0; i < config.layers; ++i)
    layers_.push_back(std::make_unique<layers::TransformerXLLayer<T>>("layers." + std::to_string(i),
                                                                      layer, params));
  if (config.pre_norm) {
    out_gamma_ = &params.add("out.norm.gamma", {d});
    out_beta_ = &params.add("out.norm.beta", {d});
  }
  head_ = std::make_unique<layers::VocabularyHead<T>>(
      "out",
      layers::VocabularyHeadConfig{d, config.vocab, config.label_smoothing, config.loss_chunk},
      params, config.tie_embeddings ? embedding_ : nullptr);
}

template <class T>
void TransformerXL<T>::init(RandomKey key) {
  auto sub = [&](std::uint64_t a, std::uint64_t b = 0) {
    return RandomKey{key.seed, stream_id(key.stream, a, b)};
  };
  init_normal(*embedding_, 1.0 / std::sqrt(double(config_.d_model)), sub(kInitEmbedding));
  for (std::size_t i = 0; i < layers_.size(); ++i) layers_[i]->init(sub(kInitLayers, i));
  if (out_gamma_) {
    init_constant(*out_gamma_, 1.0);
    init_constant(*out_beta_, 0.0);
  }
  head_->init(sub(kInitOutput));
}

template <class T>
layers::TransformerXLLayerCall TransformerXL<T>::layer_call(
    const ModelCall& call, Index layer, const TransformerXLMemory<T>& memory) const {
  return {{call.key.seed, stream_id(call.key.stream, kLayers, std::uint64_t(layer))},
          call.training,
          memory.mem_len,
          {call.key.seed, stream_id(call.key.stream, kPositionDropout)},
          memory.clamp_len,
          memory.same_length,
          call.first_row};
}

template <class T>
void TransformerXL<T>::check_memory(const char* op, const TransformerXLMemory<T>& memory,
                                    Index batch) const {
  require<ConfigError>(memory.mem_len >= 0, op, ": the memory's mem_len is ", memory.mem_len,
                       " but must be >= 0");
  require<ConfigError>(
      memory.clamp_len >= -1 && memory.same_length >= -1 && memory.same_length <= 1, op,
      ": the memory's clamp_len is ", memory.clamp_len, " and same_length ", memory.same_length,
      "; clamp_len must be >= 0 (-1: the model's) and same_length 0, 1 or -1 "
      "(the model's)");
  if (memory.length() > 0)
    require<ShapeError>(
        memory.hidden.size() == layers_.size() && Index(memory.hidden[0].extent(0)) == batch, op,
        ": the memory holds ", memory.hidden.size(), " layers of shape ",
        shape_string(memory.hidden[0]), " but the model has ", layers_.size(),
        " layers and the batch ", batch, " rows; reset() it for a new stream");
}

template <class T>
void TransformerXL<T>::forward(IdMatrix ids, const ModelCall& call, TransformerXLMemory<T>& memory,
                               TransformerXLState<T>& state, bool keep_layers) const {
  const char* op = "TransformerXL::forward";
  const Index batch = ids.extent(0), length = ids.extent(1), d = config_.d_model;
  require<ShapeError>(batch > 0 && length > 0, op, ": ids has shape ", shape_string(ids),
                      " but needs at least one sequence of one token");
  require<ConfigError>(call.valid.extent(0) == 0, op,
                       ": a padding mask was given, but a stream of segments has no padding "
                       "(leave ModelCall::valid empty)");
  check_memory(op, memory, batch);
  ops::require_ids_in_range(op, "ids", ids_of(ids), config_.vocab);
  state.call = call;
  state.batch = batch;
  state.length = length;
  // Evaluation keeps no layer's activations for a backward pass: one state
  // serves every layer in turn (a long evaluation memory costs one layer's).
  state.layers.resize(keep_layers ? layers_.size() : 1);
  auto x = ensure_view(state.x, "txl_x", batch, length, d);
  auto e = as_matrix(x);
  ops::token_embedding_forward<T>(embedding_->matrix(), ids_of(ids), config_.scale_embedding, e);
  if (call.training && config_.dropout > 0)
    ops::dropout_forward<T>(as_vector(e), config_.dropout,
                            {call.key.seed, stream_id(call.key.stream, kEmbeddingDropout)},
                            ops::dropout_offset(call.first_row, row_elements(x)), as_vector(e));
  // The new memories: the last rows of each layer's [memory; input], which
  // the layer's state holds, so that layer i's memory is replaced as soon as
  // layer i has read it.
  const Index mem_before = memory.length();
  const Index kept = std::min(memory.mem_len, mem_before + length);
  if (kept > 0) memory.hidden.resize(layers_.size());
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    auto& layer_state = state.layers[keep_layers ? i : 0];
    const In3<T> m = mem_before > 0 ? In3<T>(memory.hidden[i]) : In3<T>();
    layers_[i]->forward(x, m, layer_call(call, Index(i), memory), layer_state, state.workspace);
    if (kept > 0)
      last_rows<T>(layer_state.context,
                   ensure_view(memory.hidden[i], "txl_memory", batch, kept, d));
  }
  if (kept == 0) memory.hidden.clear();
  // The loss's input.
  auto out = ensure_view(state.out, "txl_out", batch, length, d);
  if (out_gamma_) {
    Workspace::Frame frame(state.workspace);
    auto mean = frame.take<View1<compute_t<T>>>(batch * length),
         rstd = frame.take<View1<compute_t<T>>>(batch * length);
    ops::layer_norm_forward<T>(as_matrix(x), out_gamma_->value, out_beta_->value,
                               compute_t<T>(config_.layer_norm_eps), as_matrix(out), mean, rstd);
  } else {
    Kokkos::deep_copy(out, x);
  }
  if (call.training && config_.dropout > 0)
    ops::dropout_forward<T>(as_vector(out), config_.dropout,
                            {call.key.seed, stream_id(call.key.stream, kOutputDropout)},
                            ops::dropout_offset(call.first_row, row_elements(out)), as_vector(out));
}

template <class T>
ops::CrossEntropyResult TransformerXL<T>::loss(IdMatrix targets, int ignore_id,
                                               TransformerXLState<T>& state, bool gradients) const {
  const Index batch = state.batch, length = state.length, rows = batch * length;
  const Index d = config_.d_model;
  require<ShapeError>(Index(targets.extent(0)) == batch && Index(targets.extent(1)) == length,
                      "TransformerXL: targets has shape ", shape_string(targets),
                      " but the ids were [", batch, ", ", length, "]");
  const auto t = ids_of(targets);
  // The chunks' logits come from the workspace, idle while the loss runs.
  if (!gradients) return head_->forward(as_matrix(state.out), t, ignore_id, &state.workspace);
  auto dx = ensure_view(state.dx, "txl_dx", batch, length, d);
  const auto result = head_->forward_backward(
      as_matrix(state.out), t, ignore_id, state.call.loss_scale, as_matrix(dx), &state.workspace);
  const ModelCall& call = state.call;
  if (call.training && config_.dropout > 0)
    ops::dropout_backward<T>(as_vector(dx), config_.dropout,
                             {call.key.seed, stream_id(call.key.stream, kOutputDropout)},
                             ops::dropout_offset(call.first_row, row_elements(dx)), as_vector(dx));
  if (out_gamma_) {
    Workspace::Frame frame(state.workspace);
    auto normed = frame.take<View2<T>>(rows, d), dnormed = frame.take<View2<T>>(rows, d);
    auto mean = frame.take<View1<compute_t<T>>>(rows), rstd = frame.take<View1<compute_t<T>>>(rows);
    ops::layer_norm_forward<T>(as_matrix(state.x), out_gamma_->value, out_beta_->value,
                               compute_t<T>(config_.layer_norm_eps), normed, mean, rstd);
    Kokkos::deep_copy(dnormed, as_matrix(dx));
    ops::layer_norm_backward<T>(as_matrix(state.x), out_gamma_->value, mean, rstd, dnormed,
                                as_matrix(dx), out_gamma_->grad, out_beta_->grad);
  }
  return result;
}

template <class T>
ops::CrossEntropyResult TransformerXL<T>::forward_backward(IdMatrix ids, IdMatrix targets,
                                                           int ignore_id, const ModelCall& call,
                                                           TransformerXLMemory<T>& memory,
                                                           TransformerXLState<T>& state) const {
  {
    ScopedMemoryPhase phase("forward");
    forward(ids, call, memory, state);
  }
  ops::CrossEntropyResult result;
  {
    ScopedMemoryPhase phase("loss");
    result = loss(targets, ignore_id, state, /*gradients=*/true);
  }
  ScopedMemoryPhase phase("backward");
  for (Index i = layers() - 1; i >= 0; --i)
    layers_[i]->backward(state.dx, state.layers[i], state.workspace);
  auto de = as_matrix(state.dx);
  if (call.training && config_.dropout > 0)
    ops::dropout_backward<T>(as_vector(de), config_.dropout,
                             {call.key.seed, stream_id(call.key.stream, kEmbeddingDropout)},
                             ops::dropout_offset(call.first_row, row_elements(state.dx)),
                             as_vector(de));
  ops::token_embedding_backward<T>(ids_of(ids), de, config_.scale_embedding,
                                   embedding_->grad_matrix());
  return result;
}

template <class T>
ops::CrossEntropyResult TransformerXL<T>::evaluate(IdMatrix ids, IdMatrix targets, int ignore_id,
                                                   const ModelCall& call,
                                                   TransformerXLMemory<T>& memory,
                                                   TransformerXLState<T>& state) const {
  forward(ids, call, memory, state, /*keep_layers=*/false);
  return loss(targets, ignore_id, state, /*gradients=*/false);
}

template <class T>
void TransformerXL<T>::project(View2<T> hidden, bool normed, View2<T> logits,
                               Workspace& workspace) const {
  const Index rows = hidden.extent(0), d = config_.d_model;
  Workspace::Frame frame(workspace);
  View2<T> h = hidden;
  if (out_gamma_ && !normed) {
    h = frame.take<View2<T>>(rows, d);
    auto mean = frame.take<View1<T>>(rows), rstd = frame.take<View1<T>>(rows);
    ops::layer_norm_forward<T>(hidden, out_gamma_->value, out_beta_->value,
                               T(config_.layer_norm_eps), h, mean, rstd);
  }
  head_->logits(h, logits);
}

template <class T>
void TransformerXL<T>::logits_at(TransformerXLState<T>& state, Index position,
                                 View2<T> logits) const {
  const char* op = "TransformerXL::logits_at";
  require<ShapeError>(position >= 0 && position < state.length, op, ": position ", position,
                      " is outside the segment of ", state.length,
                      " positions the last forward ran");
  require<ShapeError>(
      Index(logits.extent(0)) == state.batch && Index(logits.extent(1)) == config_.vocab, op,
      ": logits has shape ", shape_string(logits), " but must be [", state.batch, ", ",
      config_.vocab, "]");
  Workspace::Frame frame(state.workspace);
  auto hidden = frame.take<View2<T>>(state.batch, config_.d_model);
  row_at<T>(state.out, position, hidden);
  project(hidden, /*normed=*/true, logits, state.workspace);
}

template <class T>
void TransformerXL<T>::start_generation(Index batch, Index segment_length,
                                        const TransformerXLMemory<T>& memory,
                                        TransformerXLGeneration<T>& generation) const {
  const char* op = "TransformerXL::start_generation";
  require<ConfigError>(batch > 0 && segment_length > 0, op, ": batch is ", batch,
                       " and segment_length ", segment_length, "; both must be positive");
  check_memory(op, memory, batch);
  generation.batch = batch;
  generation.segment_length = segment_length;
  generation.filled = 0;
  generation.memory = memory.copy();
  generation.layers.resize(layers_.size());
}

template <class T>
void TransformerXL<T>::generation_step(IdMatrix ids, TransformerXLGeneration<T>& generation,
                                       View2<T> logits) const {
  const char* op = "TransformerXL::generation_step";
  auto& g = generation;
  const Index batch = g.batch, d = config_.d_model, length = g.segment_length;
  require<ConfigError>(batch > 0 && g.layers.size() == layers_.size(), op,
                       ": the generation has not started; call start_generation first");
  require<ShapeError>(Index(ids.extent(0)) == batch && ids.extent(1) > 0, op, ": ids has shape ",
                      shape_string(ids), " but must be [", batch, ", n >= 1]");
  require<ShapeError>(Index(logits.extent(0)) == batch && Index(logits.extent(1)) == config_.vocab,
                      op, ": logits has shape ", shape_string(logits), " but must be [", batch,
                      ", ", config_.vocab, "]");
  ops::require_ids_in_range(op, "ids", ids_of(ids), config_.vocab);
  ModelCall call;
  call.training = false;
  const Index n = ids.extent(1);
  for (Index done = 0; done < n;) {
    if (g.filled == 0)  // a new segment over the current memory
      for (std::size_t i = 0; i < layers_.size(); ++i)
        layers_[i]->start_segment(g.memory.length() > 0 ? In3<T>(g.memory.hidden[i]) : In3<T>(),
                                  batch, length, layer_call(call, Index(i), g.memory), g.layers[i],
                                  g.workspace);
    const Index chunk = std::min(n - done, length - g.filled);
    Workspace::Frame frame(g.workspace);
    auto part = frame.take<Kokkos::View<int**, Layout, MemSpace>>(batch, chunk);
    id_columns(ids, done, part);
    auto x = frame.take<View3<T>>(batch, chunk, d);
    ops::token_embedding_forward<T>(embedding_->matrix(), ids_of(part), config_.scale_embedding,
                                    as_matrix(x), ops::IdCheck::AlreadyChecked);
    for (std::size_t i = 0; i < layers_.size(); ++i) layers_[i]->step(x, g.layers[i], g.workspace);
    g.filled += chunk;
    done += chunk;
    if (done == n) {
      auto hidden = frame.take<View2<T>>(batch, d);
      row_at<T>(x, chunk - 1, hidden);
      project(hidden, /*normed=*/false, logits, g.workspace);
    }
    if (g.filled < length) continue;
    // The segment is full: the memory rolls as forward rolls it.
    const Index kept = std::min(g.memory.mem_len, g.memory.length() + length);
    if (kept == 0) {
      g.memory.hidden.clear();
    } else {
      g.memory.hidden.resize(layers_.size());
      for (std::size_t i = 0; i < layers_.size(); ++i)
        last_rows<T>(g.layers[i].context,
                     ensure_view(g.memory.hidden[i], "txl_memory", batch, kept, d));
    }
    g.filled = 0;
  }
}

template struct TransformerXLMemory<bf16>;
template struct TransformerXLState<bf16>;
// bf16 activations (train.precision = "bf16"): the training calls only.
template TransformerXL<bf16>::TransformerXL(const TransformerXLConfig&, ParameterSet<float>&);
template void TransformerXL<bf16>::init(RandomKey);
template void TransformerXL<bf16>::forward(IdMatrix, const ModelCall&, TransformerXLMemory<bf16>&,
                                           TransformerXLState<bf16>&, bool) const;
template ops::CrossEntropyResult TransformerXL<bf16>::forward_backward(
    IdMatrix, IdMatrix, int, const ModelCall&, TransformerXLMemory<bf16>&,
    TransformerXLState<bf16>&) const;
template ops::CrossEntropyResult TransformerXL<bf16>::evaluate(IdMatrix, IdMatrix, int,
                                                               const ModelCall&,
                                                               TransformerXLMemory<bf16>&,
                                                               TransformerXLState<bf16>&) const;
template struct TransformerXLGeneration<float>;
template struct TransformerXLGeneration<double>;
template struct TransformerXLMemory<float>;
template struct TransformerXLMemory<double>;
template struct TransformerXLState<float>;
template struct TransformerXLState<double>;
template class TransformerXL<float>;
template class TransformerXL<double>;

}  // namespace reformer::models
