#include "reformer/layers/blocks.hpp"

#include "reformer/core/error.hpp"
#include "reformer/core/shape.hpp"
#include "reformer/ops/elementwise.hpp"
#include "reformer/ops/layer_norm.hpp"
#include "reformer/train/initializers.hpp"

namespace reformer::layers {
namespace {

using attention::AttentionLayerCall;
using attention::AttentionState;
using attention::Save;

enum Stream : std::uint64_t { kAttention = 1, kFeedForward = 2 };

AttentionLayerCall attention_call(const BlockCall& call) {
  return {{call.key.seed, stream_id(call.key.stream, kAttention)}, call.key_valid, call.training};
}

FeedForwardCall feed_forward_call(const BlockCall& call) {
  return {{call.key.seed, stream_id(call.key.stream, kFeedForward)}, call.training};
}

template <class T>
View3<T> like(const Kokkos::View<T***, Layout, MemSpace>& x, Workspace::Frame& frame) {
  return frame.take<View3<T>>(x.extent(0), x.extent(1), x.extent(2));
}

// slot = a copy of x (allocated once per shape).
template <class T>
void keep_copy(View3<T>& slot, In3<T> x, const char* label) {
  Kokkos::deep_copy(ensure_view(slot, label, x.extent(0), x.extent(1), x.extent(2)), x);
}

}  // namespace

void BlockConfig::validate() const {
  attention.validate();
  feed_forward.validate();
  require<ConfigError>(attention.d_model == feed_forward.d_model,
                       "BlockConfig: attention.d_model (", attention.d_model,
                       ") and feed_forward.d_model (", feed_forward.d_model, ") must be equal");
  require<ConfigError>(layer_norm_eps > 0.0, "BlockConfig: layer_norm_eps is ", layer_norm_eps,
                       " but must be positive");
}

template <class T>
void BlockState<T>::release(bool keep_plan) {
  attention.release(keep_plan);
  f_input = View3<T>();
  g_input = View3<T>();
  stored = false;
  if (!keep_plan) call = BlockCall();
}

template <class T>
ReversibleBlock<T>::ReversibleBlock(const std::string& prefix, const BlockConfig& config,
                                    ParameterSet<T>& params)
    : config_((config.validate(), config)),
      gamma_(&params.add(prefix + ".attn_norm.gamma", {config.attention.d_model})),
      beta_(&params.add(prefix + ".attn_norm.beta", {config.attention.d_model})),
      attention_(prefix + ".attn", config.attention, params),
      feed_forward_(prefix + ".ff", config.feed_forward, params) {}

template <class T>
void ReversibleBlock<T>::init(RandomKey key) {
  train::init_constant(*gamma_, 1.0);
  train::init_constant(*beta_, 0.0);
  attention_.init({key.seed, stream_id(key.stream, kAttention)});
  feed_forward_.init({key.seed, stream_id(key.stream, kFeedForward)});
}

template <class T>
void ReversibleBlock<T>::forward(View3<T> x1, View3<T> x2, const BlockCall& call,
                                 BlockState<T>& state, Workspace& workspace, Save save) const {
  const char* op = "ReversibleBlock::forward";
  require_extent(op, "x1", x1, 2, config_.attention.d_model);
  require_same_shape(op, "x1", x1, "x2", x2);
  state.call = call;
  state.stored = save == Save::All;
  // y1 = x1 + F(x2), then y2 = x2 + G(y1).
  if (state.stored) keep_copy<T>(state.f_input, x2, "block_f_input");
  f_forward(x2, x1, call, state.attention, workspace, save);
  if (state.stored) keep_copy<T>(state.g_input, x1, "block_g_input");
  feed_forward_.forward(as_matrix(x1), as_matrix(x2), feed_forward_call(call), workspace, T(1));
}

template <class T>
void ReversibleBlock<T>::f_norm(In3<T> x, View3<T> normed, View1<T> mean, View1<T> rstd) const {
  ops::layer_norm_forward<T>(as_matrix(x), gamma_->value, beta_->value, T(config_.layer_norm_eps),
                             as_matrix(normed), mean, rstd);
}

template <class T>
void ReversibleBlock<T>::f_forward(In3<T> x, View3<T> y, const BlockCall& call,
                                   AttentionState<T>& state, Workspace& workspace,
                                   Save save) const {
  Workspace::Frame frame(workspace);
  const Index rows = x.extent(0) * x.extent(1);
  auto normed = frame.take<View3<T>>(x.extent(0), x.extent(1), x.extent(2));
  auto f = frame.take<View3<T>>(x.extent(0), x.extent(1), x.extent(2));
  auto mean = frame.take<View1<T>>(rows), rstd = frame.take<View1<T>>(rows);
  f_norm(x, normed, mean, rstd);
  attention_.forward(normed, f, attention_call(call), state, workspace, save);
  ops::axpby<T>(T(1), as_vector(f), T(1), as_vector(y));
}

template <class T>
void ReversibleBlock<T>::f_backward(In3<T> x, View3<T> normed, In1<T> mean, In1<T> rstd, In3<T> dy,
                                    View3<T> dx, const AttentionState<T>& state,
                                    Workspace& workspace) const {
  Workspace::Frame frame(workspace);
  auto dnormed = frame.take<View3<T>>(x.extent(0), x.extent(1), x.extent(2));
  attention_.backward(normed, dy, dnormed, state, workspace);
  // The LayerNorm's input gradient goes to `normed` (no longer needed), then into dx.
  ops::layer_norm_backward<T>(as_matrix(x), gamma_->value, mean, rstd, as_matrix(dnormed),
                              as_matrix(normed), gamma_->grad, beta_->grad);
  ops::axpby<T>(T(1), as_vector(normed), T(1), as_vector(dx));
}

template <class T>
void ReversibleBlock<T>::f_backward(In3<T> x, In3<T> dy, View3<T> dx,
                                    const AttentionState<T>& state, Workspace& workspace) const {
  Workspace::Frame frame(workspace);
  const Index rows = x.extent(0) * x.extent(1);
  auto normed = frame.take<View3<T>>(x.extent(0), x.extent(1), x.extent(2));
  auto mean = frame.take<View1<T>>(rows), rstd = frame.take<View1<T>>(rows);
  f_norm(x, normed, mean, rstd);
  f_backward(x, normed, mean, rstd, dy, dx, state, workspace);
}

template <class T>
void ReversibleBlock<T>::backward_reversible(View3<T> y1, View3<T> y2, View3<T> dy1, View3<T> dy2,
                                             const BlockState<T>& state, AttentionState<T>& scratch,
                                             Workspace& workspace) const {
  const char* op = "ReversibleBlock::backward_reversible";
  require_same_shape(op, "y1", y1, "y2", y2);
  require_same_shape(op, "y1", y1, "dy1", dy1);
  require_same_shape(op, "y1", y1, "dy2", dy2);
  Workspace::Frame frame(workspace);
  const Index rows = y1.extent(0) * y1.extent(1);
  auto g = like(y1, frame);
  // G: dy1 += dG/dy1^T dy2 and g = G(y1), from one recomputation; x2 = y2 - G(y1).
  feed_forward_.backward(as_matrix(y1), as_matrix(dy2), as_matrix(dy1),
                         feed_forward_call(state.call), workspace, T(1), as_matrix(g));
  ops::axpby<T>(T(-1), as_vector(g), T(1), as_vector(y2));
  // F: recompute Attention(LayerNorm(x2)) with the saved plan and dropout
  // stream; x1 = y1 - F(x2); dx2 = dy2 + dF/dx2^T dy1.
  auto normed = g;  // G(y1) is no longer needed
  auto f = like(y1, frame);
  auto mean = frame.take<View1<T>>(rows), rstd = frame.take<View1<T>>(rows);
  f_norm(y2, normed, mean, rstd);
  scratch.use_plan_of(state.attention);
  attention_.recompute(normed, f, scratch, workspace);
  ops::axpby<T>(T(-1), as_vector(f), T(1), as_vector(y1));
  f_backward(y2, normed, mean, rstd, dy1, dy2, scratch, workspace);
}

template <class T>
void ReversibleBlock<T>::backward_stored(View3<T> dy1, View3<T> dy2, const BlockState<T>& state,
                                         Workspace& workspace) const {
  const char* op = "ReversibleBlock::backward_stored";
  require<ConfigError>(state.stored, op,
                       ": the state holds no stored forward pass; run forward with Save::All");
  require_same_shape(op, "dy1", dy1, "dy2", dy2);
  require_same_shape(op, "stored input", state.f_input, "dy1", dy1);
  feed_forward_.backward(as_matrix(state.g_input), as_matrix(dy2), as_matrix(dy1),
                         feed_forward_call(state.call), workspace, T(1));
  f_backward(state.f_input, dy1, dy2, state.attention, workspace);
}

template <class T>
ResidualBlock<T>::ResidualBlock(const std::string& prefix, const BlockConfig& config,
                                ParameterSet<T>& params)
    : block_(prefix, config, params) {}

template <class T>
void ResidualBlock<T>::init(RandomKey key) {
  block_.init(key);
}

template <class T>
void ResidualBlock<T>::forward(View3<T> x, const BlockCall& call, BlockState<T>& state,
                               Workspace& workspace) const {
  require_extent("ResidualBlock::forward", "x", x, 2, block_.config_.attention.d_model);
  state.call = call;
  state.stored = true;
  // y = x + F(x), then z = y + G(y), in place.
  keep_copy<T>(state.f_input, x, "block_f_input");
  block_.f_forward(state.f_input, x, call, state.attention, workspace, Save::All);
  keep_copy<T>(state.g_input, x, "block_g_input");
  block_.feed_forward_.forward(as_matrix(state.g_input), as_matrix(x), feed_forward_call(call),
                               workspace, T(1));
}

template <class T>
void ResidualBlock<T>::backward(View3<T> dz, const BlockState<T>& state,
                                Workspace& workspace) const {
  const char* op = "ResidualBlock::backward";
  require<ConfigError>(state.stored, op, ": the state holds no forward pass; run forward first");
  require_same_shape(op, "stored input", state.f_input, "dz", dz);
  Workspace::Frame frame(workspace);
  auto upstream = like(dz, frame);
  // dy = dz + dG/dy^T dz, then dx = dy + dF/dx^T dy.
  Kokkos::deep_copy(upstream, dz);
  block_.feed_forward_.backward(as_matrix(state.g_input), as_matrix(upstream), as_matrix(dz),
                                feed_forward_call(state.call), workspace, T(1));
  Kokkos::deep_copy(upstream, dz);
  block_.f_backward(state.f_input, upstream, dz, state.attention, workspace);
}

template struct BlockState<float>;
template struct BlockState<double>;
template class ReversibleBlock<float>;
template class ReversibleBlock<double>;
template class ResidualBlock<float>;
template class ResidualBlock<double>;

}  // namespace reformer::layers
