#include "reformer/models/reformer_lm.hpp"

#include "reformer/core/element_map.hpp"
#include "reformer/core/error.hpp"
#include "reformer/core/initializers.hpp"
#include "reformer/core/matrix_policy.hpp"
#include "reformer/core/memory_tracker.hpp"
#include "reformer/core/shape.hpp"
#include "reformer/ops/dropout.hpp"
#include "reformer/ops/elementwise.hpp"
#include "reformer/ops/embedding.hpp"
#include "reformer/ops/layer_norm.hpp"

#include <cstring>
#include <string>
#include <type_traits>

namespace reformer::models {
namespace {

using attention::Save;
using RowList = Kokkos::View<const Index*, Layout, MemSpace>;

enum Stream : std::uint64_t { kEmbeddingDropout = 1, kLayers = 2 };
enum InitStream : std::uint64_t { kInitEmbedding = 1, kInitPositions, kInitBlocks, kInitOutput };

Kokkos::View<const int*, Layout, MemSpace> flat_ids(IdMatrix ids) {
  return Kokkos::View<const int*, Layout, MemSpace>(ids.data(), ids.size());
}

// Device kernels of the head live in free functions: CUDA does not allow
// extended lambdas in private member functions.

// out[r] = [x1 ; x2] of row rows(r) (of row r when rows is empty).
template <class T>
void concat_streams(View2<T> x1, View2<T> x2, RowList rows, View2<T> out) {
  const Index d = x1.extent(1), n = out.extent(0);
  const bool all = rows.extent(0) == 0;
  Kokkos::parallel_for(
      "reformer_concat_streams", matrix_policy(n, 2 * d), KOKKOS_LAMBDA(Index r, Index j) {
        const Index src = all ? r : rows(r);
        out(r, j) = j < d ? x1(src, j) : x2(src, j - d);
      });
}

// dx1 = dcat[:, :d], dx2 = dcat[:, d:].
template <class T>
void split_halves(View2<T> dcat, View2<T> dx1, View2<T> dx2) {
  const Index d = dx1.extent(1);
  Kokkos::parallel_for(
      "reformer_split_gradient", matrix_policy(Index(dx1.extent(0)), d),
      KOKKOS_LAMBDA(Index r, Index j) {
        dx1(r, j) = dcat(r, j);
        dx2(r, j) = dcat(r, j + d);
      });
}

// folded = h[:, :d] + h[:, d:] (tied weights read the sum of the halves).
template <class T>
void fold_halves(View2<T> h, View2<T> folded) {
  const Index d = folded.extent(1);
  Kokkos::parallel_for(
      "reformer_fold_halves", matrix_policy(Index(folded.extent(0)), d),
      KOKKOS_LAMBDA(Index r, Index j) {
        folded(r, j) = store<T>(load(h(r, j)) + load(h(r, j + d)));
      });
}

// The fold's gradient: both halves receive dfolded.
template <class T>
void unfold_halves(View2<T> dfolded, View2<T> dh) {
  const Index d = dfolded.extent(1);
  Kokkos::parallel_for(
      "reformer_unfold_halves", matrix_policy(Index(dfolded.extent(0)), d),
      KOKKOS_LAMBDA(Index r, Index j) {
        dh(r, j) = dfolded(r, j);
        dh(r, j + d) = dfolded(r, j);
      });
}

// rows(b) = b * length + position.
inline void position_rows(Kokkos::View<Index*, Layout, MemSpace> rows, Index length,
                          Index position) {
  Kokkos::parallel_for(
      "reformer_logit_rows", range(rows.extent(0)),
      KOKKOS_LAMBDA(Index b) { rows(b) = b * length + position; });
}

// Targets as run: the caller's where valid, `ignored` elsewhere.
inline void pad_targets(IdMatrix targets, Kokkos::View<const int**, Layout, MemSpace> valid,
                        int ignored, View2<int> out) {
  const Index given = targets.extent(1);
  Kokkos::parallel_for(
      "reformer_pad_targets", matrix_policy(Index(out.extent(0)), Index(out.extent(1))),
      KOKKOS_LAMBDA(Index b, Index t) {
        out(b, t) = t < given && valid(b, t) != 0 ? targets(b, t) : ignored;
      });
}

}  // namespace

template <class T>
void ReformerState<T>::release() {
  batch = length = given_length = 0;
  call = ModelCall();
  ids = valid = View2<int>();
  input = IdMatrix();
  x1 = x2 = dx1 = dx2 = View3<T>();
  blocks.clear();
  scratch.release();
  workspace.release();
}

template <class T>
void ReformerGeneration<T>::release() {
  batch = capacity = 0;
  next.clear();
  caches.clear();
  x1 = x2 = View2<T>();
  positions = staged = Kokkos::View<Index*, Layout, MemSpace>();
  host_staged = decltype(host_staged)();
  workspace.release();
}

template <class T>
ReformerLM<T>::ReformerLM(const ReformerConfig& config, ParameterSet<param_t<T>>& params)
    : config_((config.validate(), config)), input_(config, params) {
  const Index d = config.d_model;
  std::vector<std::size_t> first_params;  // of each layer
  blocks_ = block_stack<T>(config, params, first_params);
  out_gamma_ = &params.add("out.norm.gamma", {2 * d});
  layer_ranges_ = stack_parameter_ranges(params, first_params, params.size() - 1);
  out_beta_ = &params.add("out.norm.beta", {2 * d});
  // Tied: the projection reads the sum of the two halves (width d).
  head_ = std::make_unique<layers::VocabularyHead<T>>(
      "out",
      layers::VocabularyHeadConfig{config.tie_embeddings ? d : 2 * d, config.vocab,
                                   config.label_smoothing, config.loss_chunk},
      params, config.tie_embeddings ? input_.embedding : nullptr);
}

template <class T>
void ReformerLM<T>::init(RandomKey key) {
  auto sub = [&](std::uint64_t a, std::uint64_t b = 0) {
    return RandomKey{key.seed, stream_id(key.stream, a, b)};
  };
  input_.init(sub(kInitEmbedding), [&](std::uint64_t i) { return sub(kInitPositions, i); });
  for (std::size_t i = 0; i < blocks_.size(); ++i) blocks_[i]->init(sub(kInitBlocks, i));
  init_constant(*out_gamma_, 1.0);
  init_constant(*out_beta_, 0.0);
  head_->init(sub(kInitOutput));
}

template <class T>
layers::BlockCall ReformerLM<T>::block_call(const ModelCall& call, Index layer,
                                            const ReformerState<T>& state) const {
  return {{call.key.seed, stream_id(call.key.stream, kLayers, std::uint64_t(layer))},
          state.valid,
          call.training,
          call.first_row};
}

template <class T>
void ReformerLM<T>::check_batch(const char* op, IdMatrix ids, const ModelCall& call) const {
  check_ids(op, config_, ids, call);
}

template <class T>
IdMatrix ReformerLM<T>::input_ids(IdMatrix ids, const ModelCall& call,
                                  ReformerState<T>& state) const {
  state.given_length = ids.extent(1);
  if (state.length == Index(ids.extent(1)) && call.valid.extent(0) == 0) {
    state.valid = View2<int>();
    return state.input = ids;
  }
  ensure_view(state.ids, "reformer_ids", state.batch, state.length);
  ensure_view(state.valid, "reformer_valid", state.batch, state.length);
  pad_ids(ids, call.valid, state.ids, state.valid);
  return state.input = state.ids;
}

template <class T>
void ReformerLM<T>::prepare(ReformerState<T>& state, Index batch, Index length) const {
  const Index d = config_.d_model;
  ensure_view(state.x1, "reformer_x1", batch, length, d);
  ensure_view(state.x2, "reformer_x2", batch, length, d);
  state.blocks.resize(blocks_.size());
  state.batch = batch;
  state.length = length;
}

template <class T>
void ReformerLM<T>::embed(IdMatrix ids, const ModelCall& call, ReformerState<T>& state) const {
  // e = dropout(Embedding(ids) + Positions); both streams start as e.
  input_.forward(ids, call, {call.key.seed, stream_id(call.key.stream, kEmbeddingDropout)},
                 state.x1);
  copy_elements("reformer_copy_stream", state.x2, state.x1);
}

template <class T>
void ReformerLM<T>::embed_backward(IdMatrix ids, ReformerState<T>& state) const {
  // de = dx1 + dx2 (the embedding fed both streams).
  ops::axpby<T>(1, as_vector(state.dx2), 1, as_vector(state.dx1));
  const ModelCall& call = state.call;
  input_.backward(ids, call, {call.key.seed, stream_id(call.key.stream, kEmbeddingDropout)},
                  state.dx1);
}

template <class T>
void ReformerLM<T>::forward(IdMatrix ids, const ModelCall& call, ReformerState<T>& state) const {
  check_batch("ReformerLM::forward", ids, call);
  prepare(state, ids.extent(0), config_.padded_length(ids.extent(1)));
  state.call = call;
  const Save save = config_.reversible || !call.training ? Save::PlanOnly : Save::All;
  embed(input_ids(ids, call, state), call, state);
  for (std::size_t i = 0; i < blocks_.size(); ++i)
    blocks_[i]->forward(state.x1, state.x2, block_call(call, Index(i), state), state.blocks[i],
                        state.workspace, save);
}

template <class T>
void ReformerLM<T>::head_forward(const ReformerState<T>& state, RowList rows, View2<T> hidden,
                                 View1<compute_t<T>> mean, View1<compute_t<T>> rstd) const {
  // hidden = [y1 ; y2] of the selected rows, then LayerNorm over 2 d_model in place.
  concat_streams<T>(as_matrix(state.x1), as_matrix(state.x2), rows, hidden);
  ops::layer_norm_forward<T>(hidden, out_gamma_->value, out_beta_->value,
                             compute_t<T>(config_.layer_norm_eps), hidden, mean, rstd);
}

template <class T>
void ReformerLM<T>::head_backward(ReformerState<T>& state, In2<T> dhidden, In1<compute_t<T>> mean,
                                  In1<compute_t<T>> rstd, View2<T> scratch) const {
  const Index n = scratch.extent(0);
  // The LayerNorm's input [y1 ; y2] is rebuilt in `scratch`.
  concat_streams<T>(as_matrix(state.x1), as_matrix(state.x2), RowList(), scratch);
  Workspace::Frame frame(state.workspace);
  auto dcat = frame.take<View2<T>>(n, 2 * config_.d_model);
  ops::layer_norm_backward<T>(scratch, out_gamma_->value, mean, rstd, dhidden, dcat,
                              out_gamma_->grad, out_beta_->grad);
  split_halves<T>(dcat, as_matrix(state.dx1), as_matrix(state.dx2));
}

template <class T>
ops::CrossEntropyResult ReformerLM<T>::loss(IdMatrix targets, int ignore_id,
                                            ReformerState<T>& state, bool gradients) const {
  const Index rows = state.batch * state.length, d = config_.d_model;
  Workspace::Frame frame(state.workspace);
  auto hidden = frame.take<View2<T>>(rows, 2 * d);
  auto mean = frame.take<View1<compute_t<T>>>(rows), rstd = frame.take<View1<compute_t<T>>>(rows);
  head_forward(state, RowList(), hidden, mean, rstd);
  // Padded or masked: the targets of padding count for nothing.
  if (state.valid.extent(0) > 0) {
    auto padded = frame.take<View2<int>>(state.batch, state.length);
    pad_targets(targets, state.valid, ignore_id >= 0 ? ignore_id : -1, padded);
    targets = padded;
  }
  const auto t = flat_ids(targets);
  // Tied weights: the projection reads the sum of the two halves.
  View2<T> input = hidden;
  if (config_.tie_embeddings) {
    input = frame.take<View2<T>>(rows, d);
    fold_halves<T>(hidden, input);
  }
  // The chunks' logits come from the workspace, which is idle while the loss
  // runs (its high-water mark is the backward's).
  if (!gradients) return head_->forward(input, t, ignore_id, &state.workspace);
  auto dinput = frame.take<View2<T>>(rows, input.extent(1));
  const auto result =
      head_->forward_backward(input, t, ignore_id, state.call.loss_scale, dinput, &state.workspace);
  View2<T> dhidden = dinput;
  if (config_.tie_embeddings) {
    dhidden = frame.take<View2<T>>(rows, 2 * d);
    unfold_halves<T>(dinput, dhidden);
  }
  ensure_view(state.dx1, "reformer_dx1", state.batch, state.length, d);
  ensure_view(state.dx2, "reformer_dx2", state.batch, state.length, d);
  head_backward(state, dhidden, mean, rstd, hidden);
  return result;
}

template <class T>
ops::CrossEntropyResult ReformerLM<T>::forward_backward(
    IdMatrix ids, IdMatrix targets, int ignore_id, const ModelCall& call, ReformerState<T>& state,
    const std::function<void(Index)>& after_layer) const {
  const char* op = "ReformerLM::forward_backward";
  require_same_shape(op, "ids", ids, "targets", targets);
  // Memory-tracker phases: the trainer reports each one's peak.
  {
    ScopedMemoryPhase phase("forward");
    forward(ids, call, state);
  }
  ops::CrossEntropyResult result;
  {
    ScopedMemoryPhase phase("loss");
    result = loss(targets, ignore_id, state, /*gradients=*/true);
  }
  ScopedMemoryPhase phase("backward");
  // The stack from the top layer down, then the embedding.
  for (Index i = layers() - 1; i >= 0; --i) {
    if (config_.reversible)
      blocks_[i]->backward_reversible(state.x1, state.x2, state.dx1, state.dx2, state.blocks[i],
                                      state.scratch, state.workspace);
    else
      blocks_[i]->backward_stored(state.dx1, state.dx2, state.blocks[i], state.workspace);
    if (after_layer) after_layer(i);
  }
  embed_backward(state.input, state);
  return result;
}

template <class T>
ops::CrossEntropyResult ReformerLM<T>::evaluate(IdMatrix ids, IdMatrix targets, int ignore_id,
                                                const ModelCall& call,
                                                ReformerState<T>& state) const {
  require_same_shape("ReformerLM::evaluate", "ids", ids, "targets", targets);
  forward(ids, call, state);
  return loss(targets, ignore_id, state, /*gradients=*/false);
}

template <class T>
void ReformerLM<T>::logits_at(IdMatrix ids, Index position, View2<T> logits,
                              ReformerState<T>& state,
                              Kokkos::View<const int**, Layout, MemSpace> valid) const {
  const char* op = "ReformerLM::logits_at";
  const Index batch = ids.extent(0), d = config_.d_model;
  require<ShapeError>(position >= 0 && position < Index(ids.extent(1)), op, ": position ", position,
                      " is outside the sequence of length ", ids.extent(1));
  require<ShapeError>(Index(logits.extent(0)) == batch && Index(logits.extent(1)) == config_.vocab,
                      op, ": logits has shape ", shape_string(logits), " but must be [", batch,
                      ", ", config_.vocab, "]");
  ModelCall call;
  call.key = state.call.key;
  call.training = false;
  call.valid = valid;
  forward(ids, call, state);
  Workspace::Frame frame(state.workspace);
  auto rows = frame.take<Kokkos::View<Index*, Layout, MemSpace>>(batch);
  position_rows(rows, state.length, position);
  auto hidden = frame.take<View2<T>>(batch, 2 * d);
  auto mean = frame.take<View1<compute_t<T>>>(batch), rstd = frame.take<View1<compute_t<T>>>(batch);
  head_forward(state, rows, hidden, mean, rstd);
  project(hidden, logits, state.workspace);
}

template <class T>
void ReformerLM<T>::project(View2<T> hidden, View2<T> logits, Workspace& workspace) const {
  if (config_.tie_embeddings) {
    Workspace::Frame frame(workspace);
    auto folded = frame.take<View2<T>>(hidden.extent(0), config_.d_model);
    fold_halves<T>(hidden, folded);
    head_->logits(folded, logits);
  } else {
    head_->logits(hidden, logits);
  }
}

template <class T>
void ReformerLM<T>::add_positions(View2<T> x, In1<Index> positions, Index end) const {
  // One launch for all rows (issue 31: no host loop of launches per row).
  switch (config_.positions) {
    case PositionKind::Learned:
      ops::learned_positions_forward_at<T>(x, input_.learned()->matrix(), positions, end, x);
      break;
    case PositionKind::Axial:
      ops::axial_positions_forward_at<T>(x, input_.axial1()->matrix(), input_.axial2()->matrix(),
                                         positions, end, x);
      break;
    case PositionKind::Sinusoidal:
      ops::sinusoidal_positions_forward_at<T>(x, positions, end, x);
      break;
    case PositionKind::None:
      break;
  }
}

template <class T>
void ReformerLM<T>::start_generation(IdMatrix ids, const std::vector<Index>& lengths,
                                     Index capacity, RandomKey key,
                                     ReformerGeneration<T>& generation, View2<T> logits,
                                     ReformerState<T>& state) const {
  const char* op = "ReformerLM::start_generation";
  const Index batch = ids.extent(0), length = ids.extent(1), d = config_.d_model;
  require<ShapeError>(Index(lengths.size()) == batch, op, ": ", lengths.size(),
                      " prompt lengths for a batch of ", batch);
  Index longest = 0;
  for (std::size_t b = 0; b < lengths.size(); ++b) {
    require<ShapeError>(lengths[b] >= 1 && lengths[b] <= length, op, ": prompt ", b, " has ",
                        lengths[b], " tokens but must have between 1 and ", length);
    longest = std::max(longest, lengths[b]);
  }
  require<ConfigError>(capacity >= longest, op, ": capacity ", capacity,
                       " is shorter than the longest prompt (", longest, " tokens)");
  if (config_.positions == PositionKind::Learned || config_.positions == PositionKind::Axial)
    require<ConfigError>(capacity <= config_.max_length, op, ": capacity ", capacity,
                         " is longer than model.max_length = ", config_.max_length, " (the ",
                         to_string(config_.positions), " position table)");
  require<ShapeError>(Index(logits.extent(0)) == batch && Index(logits.extent(1)) == config_.vocab,
                      op, ": logits has shape ", shape_string(logits), " but must be [", batch,
                      ", ", config_.vocab, "]");
  // The prompts' mask: row b's first lengths[b] tokens.
  Kokkos::View<int**, Layout, HostSpace> host_valid("generation_valid", batch, length);
  for (Index b = 0; b < batch; ++b)
    for (Index t = 0; t < length; ++t) host_valid(b, t) = t < lengths[std::size_t(b)];
  Kokkos::View<int**, Layout, MemSpace> valid("generation_valid", batch, length);
  Kokkos::deep_copy(valid, host_valid);
  ModelCall call;
  call.key = key;
  call.training = false;
  call.valid = valid;
  // The forward pass on the prompts, each layer's cache filled from its input.
  check_batch(op, ids, call);
  prepare(state, batch, config_.padded_length(length));
  state.call = call;
  embed(input_ids(ids, call, state), call, state);
  generation.caches.resize(blocks_.size());
  for (std::size_t i = 0; i < blocks_.size(); ++i) {
    const auto block = block_call(call, Index(i), state);
    blocks_[i]->start_cache(state.x2, block, capacity, generation.caches[i], state.workspace);
    blocks_[i]->forward(state.x1, state.x2, block, state.blocks[i], state.workspace,
                        Save::PlanOnly);
  }
  {
    Workspace::Frame frame(state.workspace);
    auto host_rows = Kokkos::View<Index*, Layout, HostSpace>("generation_rows", batch);
    for (Index b = 0; b < batch; ++b) host_rows(b) = b * state.length + lengths[std::size_t(b)] - 1;
    auto rows = frame.take<Kokkos::View<Index*, Layout, MemSpace>>(batch);
    Kokkos::deep_copy(rows, host_rows);
    auto hidden = frame.take<View2<T>>(batch, 2 * d);
    auto mean = frame.take<View1<compute_t<T>>>(batch),
         rstd = frame.take<View1<compute_t<T>>>(batch);
    head_forward(state, rows, hidden, mean, rstd);
    project(hidden, logits, state.workspace);
  }
  generation.batch = batch;
  generation.capacity = capacity;
  generation.next = lengths;
  generation.key = key;
  ensure_view(generation.x1, "generation_x1", batch, d);
  ensure_view(generation.x2, "generation_x2", batch, d);
  ensure_view(generation.staged, "generation_staged", 2 * batch);
  generation.host_staged = Kokkos::create_mirror_view(generation.staged);
  generation.positions = Kokkos::subview(generation.staged, Kokkos::make_pair(Index(0), batch));
}

template <class T>
void ReformerLM<T>::generation_step(const std::vector<int>& tokens,
                                    ReformerGeneration<T>& generation, View2<T> logits) const {
  const char* op = "ReformerLM::generation_step";
  const Index batch = generation.batch, d = config_.d_model;
  require<ConfigError>(batch > 0 && Index(generation.caches.size()) == layers(), op,
                       ": the generation has not started; call start_generation first");
  require<ShapeError>(Index(tokens.size()) == batch, op, ": ", tokens.size(),
                      " tokens for a batch of ", batch);
  Index last = 0;
  const auto host_positions = generation.host_staged;
  // The tokens go into the bytes of slots [batch, 2 batch) as ints.
  auto* const host_ids = reinterpret_cast<unsigned char*>(generation.host_staged.data() + batch);
  // The copy below does not wait: the host buffer may be refilled by the next
  // step because a pageable host buffer is staged before the copy returns (a
  // pinned one would need a buffer per step in flight).
  static_assert(
      std::is_same<typename decltype(generation.host_staged)::memory_space, HostSpace>::value,
      "the staged tokens must live in pageable host memory");
  for (Index b = 0; b < batch; ++b) {
    const Index p = generation.next[std::size_t(b)];
    require<ConfigError>(p < generation.capacity, op, ": row ", b, " is at position ", p,
                         " but the cache holds ", generation.capacity,
                         " positions; start with a larger capacity");
    require<ConfigError>(tokens[std::size_t(b)] >= 0 && tokens[std::size_t(b)] < config_.vocab, op,
                         ": token ", tokens[std::size_t(b)], " of row ", b,
                         " is outside the vocabulary [0, ", config_.vocab, ")");
    std::memcpy(host_ids + b * sizeof(int), &tokens[std::size_t(b)], sizeof(int));
    host_positions(b) = p;
    last = std::max(last, p);
  }
  // One copy on the execution space's stream: no fence before or after (the
  // last step's kernels that read the positions run before it in the stream;
  // Kokkos::deep_copy without a space fenced twice, and there were two).
  Kokkos::deep_copy(ExecSpace(), generation.staged, generation.host_staged);
  Workspace::Frame frame(generation.workspace);
  const In1<int> ids(reinterpret_cast<const int*>(generation.staged.data() + batch), batch);
  // The token's embedding and position, in both streams, then every layer on
  // this one position, then the head.
  // (The tokens were checked above, on the host: no device check that waits.)
  ops::token_embedding_forward<T>(input_.embedding->matrix(), ids, false, generation.x1,
                                  ops::IdCheck::AlreadyChecked);
  add_positions(generation.x1, generation.positions, last + 1);
  copy_elements("reformer_copy_stream", generation.x2, generation.x1);
  for (std::size_t i = 0; i < blocks_.size(); ++i)
    blocks_[i]->step(generation.x1, generation.x2, generation.caches[i], generation.positions, last,
                     generation.workspace);
  auto hidden = frame.take<View2<T>>(batch, 2 * d);
  auto mean = frame.take<View1<compute_t<T>>>(batch), rstd = frame.take<View1<compute_t<T>>>(batch);
  concat_streams<T>(generation.x1, generation.x2, RowList(), hidden);
  const ops::RowNorm<T> norm{out_gamma_->value, out_beta_->value,
                             compute_t<T>(config_.layer_norm_eps)};
  if (!head_->step_logits(hidden, norm, logits)) {
    ops::layer_norm_forward<T>(hidden, norm.gamma, norm.beta, norm.eps, hidden, mean, rstd);
    project(hidden, logits, generation.workspace);
  }
  for (auto& p : generation.next) ++p;
}

template struct ReformerGeneration<float>;
template struct ReformerGeneration<double>;
template struct ReformerState<float>;
template struct ReformerState<double>;
template struct ReformerState<bf16>;
template class ReformerLM<float>;
template class ReformerLM<double>;
// bf16 activations (train.precision = "bf16"): the training calls only; a bf16
// run evaluates and decodes with ReformerLM<float> on the same float32 weights.
template ReformerLM<bf16>::ReformerLM(const ReformerConfig&, ParameterSet<float>&);
template void ReformerLM<bf16>::init(RandomKey);
template void ReformerLM<bf16>::forward(IdMatrix, const ModelCall&, ReformerState<bf16>&) const;
template ops::CrossEntropyResult ReformerLM<bf16>::forward_backward(
    IdMatrix, IdMatrix, int, const ModelCall&, ReformerState<bf16>&,
    const std::function<void(Index)>&) const;
template ops::CrossEntropyResult ReformerLM<bf16>::evaluate(IdMatrix, IdMatrix, int,
                                                            const ModelCall&,
                                                            ReformerState<bf16>&) const;

}  // namespace reformer::models
