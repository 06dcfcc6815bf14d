#include "reformer/models/classifier.hpp"

#include "reformer/core/element_map.hpp"
#include "reformer/core/error.hpp"
#include "reformer/core/initializers.hpp"
#include "reformer/core/matrix_policy.hpp"
#include "reformer/core/memory_tracker.hpp"
#include "reformer/core/shape.hpp"
#include "reformer/ops/elementwise.hpp"
#include "reformer/ops/embedding.hpp"
#include "reformer/ops/layer_norm.hpp"

namespace reformer::models {
namespace {

using attention::Save;

enum Stream : std::uint64_t { kEmbeddingDropout = 1, kLayers = 2 };
enum InitStream : std::uint64_t { kInitEmbedding = 1, kInitPositions, kInitBlocks, kInitHead };

// weights(b, t): what position t of row b contributes to p_b (1 / n_b for
// each of its n_b real positions, or 1 at position 0): the pooling is
//   p_b = sum_t weights(b, t) [y1 ; y2](b, t)
// and its gradient dy(b, t) = weights(b, t) dp_b.
template <class C>
void pooling_weights(Pooling pooling, Kokkos::View<const int**, Layout, MemSpace> valid,
                     Kokkos::View<C**, Layout, MemSpace> weights) {
  const Index length = weights.extent(1);
  const bool masked = valid.extent(0) > 0, first = pooling == Pooling::First;
  Kokkos::parallel_for(
      "classifier_pooling_weights", range(weights.extent(0)), KOKKOS_LAMBDA(Index b) {
        Index n = 0;
        for (Index t = 0; t < length; ++t) n += !masked || valid(b, t) != 0;
        const C w = n > 0 ? C(1) / C(n) : C(0);
        for (Index t = 0; t < length; ++t) {
          const bool real = !masked || valid(b, t) != 0;
          weights(b, t) = first ? C(t == 0 && real) : real ? w : C(0);
        }
      });
}

// p(b, j) = sum_t weights(b, t) [x1 ; x2](b, t, j).
template <class T, class C>
void pool_forward(View3<T> x1, View3<T> x2, Kokkos::View<const C**, Layout, MemSpace> weights,
                  View2<T> p) {
  const Index d = x1.extent(2), length = x1.extent(1);
  Kokkos::parallel_for(
      "classifier_pool", matrix_policy(Index(p.extent(0)), 2 * d), KOKKOS_LAMBDA(Index b, Index j) {
        C sum = 0;
        for (Index t = 0; t < length; ++t) {
          const C w = weights(b, t);
          if (w != C(0)) sum += w * C(load(j < d ? x1(b, t, j) : x2(b, t, j - d)));
        }
        p(b, j) = store<T>(sum);
      });
}

// dx1(b, t, j) = weights(b, t) dp(b, j), dx2(b, t, j) = weights(b, t) dp(b, d + j).
template <class T, class C>
void pool_backward(View2<T> dp, Kokkos::View<const C**, Layout, MemSpace> weights, View3<T> dx1,
                   View3<T> dx2) {
  const Index d = dx1.extent(2), length = dx1.extent(1);
  Kokkos::parallel_for(
      "classifier_pool_backward", matrix_policy(Index(dx1.extent(0)) * length, d),
      KOKKOS_LAMBDA(Index bt, Index j) {
        const Index b = bt / length, t = bt % length;
        const C w = weights(b, t);
        dx1(b, t, j) = store<T>(w * C(load(dp(b, j))));
        dx2(b, t, j) = store<T>(w * C(load(dp(b, d + j))));
      });
}

// Pairs (LRA's dual encoder): z_b = [u ; v ; u * v ; u - v] with u = h_2b,
// v = h_2b+1 (each 2 d_model wide).
template <class T, class C>
void pair_features(View2<T> h, View2<T> z) {
  const Index w = h.extent(1);
  Kokkos::parallel_for(
      "classifier_pair_features", matrix_policy(Index(z.extent(0)), w),
      KOKKOS_LAMBDA(Index b, Index j) {
        const C u = load(h(2 * b, j)), v = load(h(2 * b + 1, j));
        z(b, j) = store<T>(u);
        z(b, w + j) = store<T>(v);
        z(b, 2 * w + j) = store<T>(u * v);
        z(b, 3 * w + j) = store<T>(u - v);
      });
}

// Its gradient: du = dz1 + v dz3 + dz4, dv = dz2 + u dz3 - dz4.
template <class T, class C>
void pair_features_backward(View2<T> h, View2<T> dz, View2<T> dh) {
  const Index w = h.extent(1);
  Kokkos::parallel_for(
      "classifier_pair_features_backward", matrix_policy(Index(dz.extent(0)), w),
      KOKKOS_LAMBDA(Index b, Index j) {
        const C u = load(h(2 * b, j)), v = load(h(2 * b + 1, j));
        const C d1 = load(dz(b, j)), d2 = load(dz(b, w + j)), d3 = load(dz(b, 2 * w + j)),
                d4 = load(dz(b, 3 * w + j));
        dh(2 * b, j) = store<T>(d1 + v * d3 + d4);
        dh(2 * b + 1, j) = store<T>(d2 + u * d3 - d4);
      });
}

}  // namespace

Pooling parse_pooling(const std::string& name) {
  if (name == "mean") return Pooling::Mean;
  if (name == "first") return Pooling::First;
  throw ConfigError(detail::concat("pooling \"", name,
                                   "\" is unknown; choose mean (the real positions' average) or "
                                   "first (position 0)"));
}

const char* to_string(Pooling pooling) { return pooling == Pooling::Mean ? "mean" : "first"; }

void ClassifierConfig::validate() const {
  encoder.validate();
  require<ConfigError>(classes >= 2 && classes <= (Index(1) << 24), "ClassifierConfig: classes is ",
                       classes, " but must be in [2, 2^24] (labels 0..classes-1)");
  require<ConfigError>(documents == 1 || documents == 2, "ClassifierConfig: documents is ",
                       documents, " but must be 1 (sequences) or 2 (pairs of documents)");
}

template <class T>
void ClassifierState<T>::release() {
  batch = length = 0;
  call = ModelCall();
  ids = valid = View2<int>();
  input = IdMatrix();
  x1 = x2 = dx1 = dx2 = View3<T>();
  blocks.clear();
  scratch.release();
  pooled = hidden = features = View2<T>();
  mean = rstd = View1<compute_t<T>>();
  workspace.release();
}

template <class T>
Classifier<T>::Classifier(const ClassifierConfig& config, ParameterSet<param_t<T>>& params)
    : config_((config.validate(), config)), input_(config.encoder, params) {
  const ReformerConfig& e = config.encoder;
  const Index d = e.d_model;
  std::vector<std::size_t> first_params;  // of each layer
  blocks_ = block_stack<T>(e, params, first_params);
  gamma_ = &params.add("head.norm.gamma", {2 * d});
  layer_ranges_ = stack_parameter_ranges(params, first_params, params.size() - 1);
  beta_ = &params.add("head.norm.beta", {2 * d});
  head_ = std::make_unique<layers::VocabularyHead<T>>(
      "head",
      layers::VocabularyHeadConfig{config.head_width(), config.classes, e.label_smoothing, 0},
      params);
}

template <class T>
void Classifier<T>::init(RandomKey key) {
  auto sub = [&](std::uint64_t a, std::uint64_t b = 0) {
    return RandomKey{key.seed, stream_id(key.stream, a, b)};
  };
  input_.init(sub(kInitEmbedding), [&](std::uint64_t i) { return sub(kInitPositions, i); });
  for (std::size_t i = 0; i < blocks_.size(); ++i) blocks_[i]->init(sub(kInitBlocks, i));
  init_constant(*gamma_, 1.0);
  init_constant(*beta_, 0.0);
  head_->init(sub(kInitHead));
}

template <class T>
void Classifier<T>::check_batch(const char* op, IdMatrix ids, const ModelCall& call) const {
  check_documents(op, ids);
  check_ids(op, config_.encoder, ids, call);
}

template <class T>
void Classifier<T>::check_documents(const char* op, IdMatrix ids) const {
  require<ShapeError>(ids.extent(0) % std::size_t(config_.documents) == 0, op, ": ids has ",
                      ids.extent(0),
                      " rows but the model reads pairs of documents (rows 2b and "
                      "2b + 1 of example b); give an even number of rows");
}

template <class T>
View2<T> Classifier<T>::head_input(const ClassifierState<T>& state) const {
  return config_.documents == 2 ? state.features : state.hidden;
}

template <class T>
void Classifier<T>::check_labels(const char* op, IdMatrix ids, LabelVector labels) const {
  check_documents(op, ids);
  const std::size_t examples = ids.extent(0) / std::size_t(config_.documents);
  require<ShapeError>(
      labels.extent(0) == examples, op, ": labels has ", labels.extent(0), " entries but ids has ",
      ids.extent(0), " rows", config_.documents == 2 ? " (pairs of documents)" : "",
      "; give one label per ", config_.documents == 2 ? "pair" : "row", " (", examples, ")");
  ops::require_ids_in_range(op, "labels", labels, config_.classes, -1);
}

template <class T>
void Classifier<T>::forward(IdMatrix ids, const ModelCall& call, ClassifierState<T>& state) const {
  check_batch("Classifier::forward", ids, call);
  const ReformerConfig& e = config_.encoder;
  const Index batch = ids.extent(0), length = e.padded_length(ids.extent(1)), d = e.d_model;
  ensure_view(state.x1, "classifier_x1", batch, length, d);
  ensure_view(state.x2, "classifier_x2", batch, length, d);
  state.blocks.resize(blocks_.size());
  state.batch = batch;
  state.length = length;
  state.call = call;
  // The ids as run: the caller's, or padded to the chunks with the mask of
  // real tokens.
  if (length == Index(ids.extent(1)) && call.valid.extent(0) == 0) {
    state.valid = View2<int>();
    state.input = ids;
  } else {
    ensure_view(state.ids, "classifier_ids", batch, length);
    ensure_view(state.valid, "classifier_valid", batch, length);
    pad_ids(ids, call.valid, state.ids, state.valid);
    state.input = state.ids;
  }
  // Dropout is keyed by the encoder's global row: a process's first example
  // times the documents of one.
  ModelCall encoder = call;
  encoder.first_row = call.first_row * config_.documents;
  input_.forward(state.input, encoder,
                 {call.key.seed, stream_id(call.key.stream, kEmbeddingDropout)}, state.x1);
  copy_elements("classifier_copy_stream", state.x2, state.x1);
  const Save save = e.reversible || !call.training ? Save::PlanOnly : Save::All;
  for (std::size_t i = 0; i < blocks_.size(); ++i) {
    const layers::BlockCall block{
        {call.key.seed, stream_id(call.key.stream, kLayers, std::uint64_t(i))},
        state.valid,
        call.training,
        encoder.first_row};
    blocks_[i]->forward(state.x1, state.x2, block, state.blocks[i], state.workspace, save);
  }
  // p = pool([y1 ; y2]), h = LayerNorm(p).
  using C = compute_t<T>;
  ensure_view(state.pooled, "classifier_pooled", batch, 2 * d);
  ensure_view(state.hidden, "classifier_hidden", batch, 2 * d);
  ensure_view(state.mean, "classifier_mean", batch);
  ensure_view(state.rstd, "classifier_rstd", batch);
  Workspace::Frame frame(state.workspace);
  auto weights = frame.take<View2<C>>(batch, length);
  pooling_weights<C>(config_.pooling, state.valid, weights);
  pool_forward<T, C>(state.x1, state.x2, weights, state.pooled);
  ops::layer_norm_forward<T>(state.pooled, gamma_->value, beta_->value, C(e.layer_norm_eps),
                             state.hidden, state.mean, state.rstd);
  if (config_.documents == 2) {
    ensure_view(state.features, "classifier_features", batch / 2, config_.head_width());
    pair_features<T, C>(state.hidden, state.features);
  }
}

template <class T>
ops::CrossEntropyResult Classifier<T>::loss(LabelVector labels, ClassifierState<T>& state,
                                            bool gradients) const {
  if (!gradients) return head_->forward(head_input(state), labels, -1);
  using C = compute_t<T>;
  const Index batch = state.batch, length = state.length, d = config_.encoder.d_model;
  Workspace::Frame frame(state.workspace);
  auto dh = frame.take<View2<T>>(batch, 2 * d);
  ops::CrossEntropyResult result;
  if (config_.documents == 2) {  // dz, then dh through the pair features
    auto dz = frame.take<View2<T>>(batch / 2, config_.head_width());
    result = head_->forward_backward(state.features, labels, -1, state.call.loss_scale, dz);
    pair_features_backward<T, C>(state.hidden, dz, dh);
  } else {
    result = head_->forward_backward(state.hidden, labels, -1, state.call.loss_scale, dh);
  }
  // dp from dh through the LayerNorm, then spread over the pooled positions.
  auto dp = frame.take<View2<T>>(batch, 2 * d);
  ops::layer_norm_backward<T>(state.pooled, gamma_->value, state.mean, state.rstd, dh, dp,
                              gamma_->grad, beta_->grad);
  auto weights = frame.take<View2<C>>(batch, length);
  pooling_weights<C>(config_.pooling, state.valid, weights);
  ensure_view(state.dx1, "classifier_dx1", batch, length, d);
  ensure_view(state.dx2, "classifier_dx2", batch, length, d);
  pool_backward<T, C>(dp, weights, state.dx1, state.dx2);
  return result;
}

template <class T>
ops::CrossEntropyResult Classifier<T>::forward_backward(
    IdMatrix ids, LabelVector labels, const ModelCall& call, ClassifierState<T>& state,
    const std::function<void(Index)>& after_layer) const {
  const char* op = "Classifier::forward_backward";
  check_labels(op, ids, labels);
  {
    ScopedMemoryPhase phase("forward");
    forward(ids, call, state);
  }
  ops::CrossEntropyResult result;
  {
    ScopedMemoryPhase phase("loss");
    result = loss(labels, state, /*gradients=*/true);
  }
  ScopedMemoryPhase phase("backward");
  for (Index i = layers() - 1; i >= 0; --i) {
    if (config_.encoder.reversible)
      blocks_[i]->backward_reversible(state.x1, state.x2, state.dx1, state.dx2, state.blocks[i],
                                      state.scratch, state.workspace);
    else
      blocks_[i]->backward_stored(state.dx1, state.dx2, state.blocks[i], state.workspace);
    if (after_layer) after_layer(i);
  }
  // de = dx1 + dx2 (the embedding fed both streams).
  ops::axpby<T>(1, as_vector(state.dx2), 1, as_vector(state.dx1));
  ModelCall encoder = call;
  encoder.first_row = call.first_row * config_.documents;
  input_.backward(state.input, encoder,
                  {call.key.seed, stream_id(call.key.stream, kEmbeddingDropout)}, state.dx1);
  return result;
}

template <class T>
ops::CrossEntropyResult Classifier<T>::evaluate(IdMatrix ids, LabelVector labels,
                                                const ModelCall& call,
                                                ClassifierState<T>& state) const {
  check_labels("Classifier::evaluate", ids, labels);
  forward(ids, call, state);
  return loss(labels, state, /*gradients=*/false);
}

template <class T>
void Classifier<T>::logits(IdMatrix ids, const ModelCall& call, View2<T> logits,
                           ClassifierState<T>& state) const {
  check_documents("Classifier::logits", ids);
  const std::size_t examples = ids.extent(0) / std::size_t(config_.documents);
  require<ShapeError>(logits.extent(0) == examples && Index(logits.extent(1)) == config_.classes,
                      "Classifier::logits: logits has shape ", shape_string(logits),
                      " but must be [", examples, ", ", config_.classes, "]");
  forward(ids, call, state);
  head_->logits(head_input(state), logits);
}

template struct ClassifierState<float>;
template struct ClassifierState<double>;
template struct ClassifierState<bf16>;
template class Classifier<float>;
template class Classifier<double>;
// bf16 activations (train.precision = "bf16"): the training calls; a bf16 run
// evaluates with Classifier<float> on the same float32 weights.
template Classifier<bf16>::Classifier(const ClassifierConfig&, ParameterSet<float>&);
template void Classifier<bf16>::init(RandomKey);
template void Classifier<bf16>::forward(IdMatrix, const ModelCall&, ClassifierState<bf16>&) const;
template ops::CrossEntropyResult Classifier<bf16>::forward_backward(
    IdMatrix, LabelVector, const ModelCall&, ClassifierState<bf16>&,
    const std::function<void(Index)>&) const;
template ops::CrossEntropyResult Classifier<bf16>::evaluate(IdMatrix, LabelVector, const ModelCall&,
                                                            ClassifierState<bf16>&) const;

}  // namespace reformer::models
