#include "reformer/layers/blocks.hpp"

#include "reformer/core/error.hpp"
#include "reformer/core/initializers.hpp"
#include "reformer/core/shape.hpp"
#include "reformer/ops/elementwise.hpp"
#include "reformer/ops/layer_norm.hpp"

namespace reformer::layers {
namespace {

using attention::AttentionLayerCall;
using attention::AttentionState;
using attention::Save;

enum Stream : std::uint64_t { kAttention = 1, kFeedForward = 2 };

AttentionLayerCall attention_call(const BlockCall& call) {
  return {{call.key.seed, stream_id(call.key.stream, kAttention)},
          call.key_valid,
          call.training,
          call.first_row};
}

// The feed-forward's rows are the positions of the [batch, length] streams.
FeedForwardCall feed_forward_call(const BlockCall& call, Index length) {
  return {{call.key.seed, stream_id(call.key.stream, kFeedForward)},
          call.training,
          call.first_row * length};
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
PreNormAttention<T>::PreNormAttention(const std::string& norm_prefix,
                                      const std::string& attention_prefix,
                                      const attention::AttentionLayerConfig& config,
                                      double layer_norm_eps, ParameterSet<param_t<T>>& params)
    : eps_(layer_norm_eps),
      gamma_(&params.add(norm_prefix + ".gamma", {config.d_model})),
      beta_(&params.add(norm_prefix + ".beta", {config.d_model})),
      attention_(attention_prefix, config, params) {}

template <class T>
void PreNormAttention<T>::init(RandomKey key) {
  init_constant(*gamma_, 1.0);
  init_constant(*beta_, 0.0);
  attention_.init(key);
}

template <class T>
void PreNormAttention<T>::norm(In3<T> x, View3<T> normed, View1<compute_t<T>> mean,
                               View1<compute_t<T>> rstd) const {
  ops::layer_norm_forward<T>(as_matrix(x), gamma_->value, beta_->value, compute_t<T>(eps_),
                             as_matrix(normed), mean, rstd);
}

template <class T>
void PreNormAttention<T>::forward(In3<T> x, View3<T> y, const AttentionLayerCall& call,
                                  AttentionState<T>& state, Workspace& workspace, Save save,
                                  In3<T> memory) const {
  Workspace::Frame frame(workspace);
  const Index rows = x.extent(0) * x.extent(1);
  auto normed = frame.take<View3<T>>(x.extent(0), x.extent(1), x.extent(2));
  auto f = frame.take<View3<T>>(x.extent(0), x.extent(1), x.extent(2));
  auto mean = frame.take<View1<compute_t<T>>>(rows), rstd = frame.take<View1<compute_t<T>>>(rows);
  norm(x, normed, mean, rstd);
  if (memory.data())
    attention_.forward_cross(normed, memory, f, call, state, workspace, save);
  else
    attention_.forward(normed, f, call, state, workspace, save);
  ops::axpby<T>(1, as_vector(f), 1, as_vector(y));
}

template <class T>
void PreNormAttention<T>::backward(In3<T> x, View3<T> normed, In1<compute_t<T>> mean,
                                   In1<compute_t<T>> rstd, In3<T> dy, View3<T> dx,
                                   const AttentionState<T>& state, Workspace& workspace,
                                   In3<T> memory, View3<T> dmemory) const {
  Workspace::Frame frame(workspace);
  auto dnormed = frame.take<View3<T>>(x.extent(0), x.extent(1), x.extent(2));
  if (memory.data())
    attention_.backward_cross(normed, memory, dy, dnormed, dmemory, state, workspace, 0);
  else
    attention_.backward(normed, dy, dnormed, state, workspace);
  // The LayerNorm's input gradient goes to `normed` (no longer needed), then into dx.
  ops::layer_norm_backward<T>(as_matrix(x), gamma_->value, mean, rstd, as_matrix(dnormed),
                              as_matrix(normed), gamma_->grad, beta_->grad);
  ops::axpby<T>(1, as_vector(normed), 1, as_vector(dx));
}

template <class T>
void PreNormAttention<T>::backward(In3<T> x, In3<T> dy, View3<T> dx, const AttentionState<T>& state,
                                   Workspace& workspace, In3<T> memory, View3<T> dmemory) const {
  Workspace::Frame frame(workspace);
  const Index rows = x.extent(0) * x.extent(1);
  auto normed = frame.take<View3<T>>(x.extent(0), x.extent(1), x.extent(2));
  auto mean = frame.take<View1<compute_t<T>>>(rows), rstd = frame.take<View1<compute_t<T>>>(rows);
  norm(x, normed, mean, rstd);
  backward(x, normed, mean, rstd, dy, dx, state, workspace, memory, dmemory);
}

// The layer norm that a decoding step's attention applies to its rows.
template <class T>
ops::RowNorm<T> PreNormAttention<T>::row_norm() const {
  return {gamma_->value, beta_->value, compute_t<T>(eps_)};
}

template <class T>
void PreNormAttention<T>::step(In2<T> x, View2<T> y, View3<T> k_cache, View3<T> v_cache,
                               Index position, Workspace& workspace) const {
  // y += Attention(LayerNorm(x)): the output projection adds into y (x, if y
  // is x, is read no more).
  attention_.step(x, k_cache, v_cache, position, y, workspace, T(1), row_norm());
}

template <class T>
void PreNormAttention<T>::start_cache(In3<T> x, const AttentionLayerCall& call, Index capacity,
                                      attention::AttentionCache<T>& cache,
                                      Workspace& workspace) const {
  Workspace::Frame frame(workspace);
  const Index rows = x.extent(0) * x.extent(1);
  auto normed = frame.take<View3<T>>(x.extent(0), x.extent(1), x.extent(2));
  auto mean = frame.take<View1<compute_t<T>>>(rows), rstd = frame.take<View1<compute_t<T>>>(rows);
  norm(x, normed, mean, rstd);
  attention_.start_cache(normed, call, capacity, cache, workspace);
}

template <class T>
void PreNormAttention<T>::step(In2<T> x, View2<T> y, attention::AttentionCache<T>& cache,
                               Kokkos::View<const Index*, Layout, MemSpace> positions,
                               Index max_position, Workspace& workspace) const {
  attention_.step(x, cache, positions, max_position, y, workspace, T(1), row_norm());
}

template <class T>
void PreNormAttention<T>::step_cross(In2<T> x, View2<T> y, In3<T> k, In3<T> v,
                                     Kokkos::View<const int**, Layout, MemSpace> key_valid,
                                     Workspace& workspace) const {
  attention_.step_cross(x, k, v, key_valid, y, workspace, T(1), row_norm());
}

template <class T>
ReversibleBlock<T>::ReversibleBlock(const std::string& prefix, const BlockConfig& config,
                                    ParameterSet<param_t<T>>& params)
    : config_((config.validate(), config)),
      f_(prefix + ".attn_norm", prefix + ".attn", config.attention, config.layer_norm_eps, params),
      feed_forward_(prefix + ".ff", config.feed_forward, params) {}

template <class T>
void ReversibleBlock<T>::init(RandomKey key) {
  f_.init({key.seed, stream_id(key.stream, kAttention)});
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
  f_.forward(x2, x1, attention_call(call), state.attention, workspace, save);
  if (state.stored) keep_copy<T>(state.g_input, x1, "block_g_input");
  feed_forward_.forward(as_matrix(x1), as_matrix(x2), feed_forward_call(call, x1.extent(1)),
                        workspace, 1);
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
                         feed_forward_call(state.call, y1.extent(1)), workspace, 1, as_matrix(g));
  ops::axpby<T>(-1, as_vector(g), 1, as_vector(y2));
  // F: recompute Attention(LayerNorm(x2)) with the saved plan and dropout
  // stream; x1 = y1 - F(x2); dx2 = dy2 + dF/dx2^T dy1.
  auto normed = g;  // G(y1) is no longer needed
  auto f = like(y1, frame);
  auto mean = frame.take<View1<compute_t<T>>>(rows), rstd = frame.take<View1<compute_t<T>>>(rows);
  f_.norm(y2, normed, mean, rstd);
  scratch.use_plan_of(state.attention);
  f_.attention().recompute(normed, f, scratch, workspace);
  ops::axpby<T>(-1, as_vector(f), 1, as_vector(y1));
  f_.backward(y2, normed, mean, rstd, dy1, dy2, scratch, workspace);
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
                         feed_forward_call(state.call, dy1.extent(1)), workspace, 1);
  f_.backward(state.f_input, dy1, dy2, state.attention, workspace);
}

template <class T>
ResidualBlock<T>::ResidualBlock(const std::string& prefix, const BlockConfig& config,
                                ParameterSet<param_t<T>>& params)
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
  block_.f_.forward(state.f_input, x, attention_call(call), state.attention, workspace, Save::All);
  keep_copy<T>(state.g_input, x, "block_g_input");
  block_.feed_forward_.forward(as_matrix(state.g_input), as_matrix(x),
                               feed_forward_call(call, x.extent(1)), workspace, 1);
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
                                feed_forward_call(state.call, dz.extent(1)), workspace, 1);
  Kokkos::deep_copy(upstream, dz);
  block_.f_.backward(state.f_input, upstream, dz, state.attention, workspace);
}

void DecoderBlockConfig::validate() const {
  const char* op = "DecoderBlockConfig";
  self_attention.validate();
  cross_attention.validate();
  feed_forward.validate();
  require<ConfigError>(self_attention.causal, op,
                       ": self_attention.causal is false but a decoder's self-attention must be "
                       "causal (a position may not see later target tokens)");
  require<ConfigError>(cross_attention.kind == attention::AttentionKind::Full ||
                           cross_attention.kind == attention::AttentionKind::Exact,
                       op, ": cross_attention is ", attention::to_string(cross_attention.kind),
                       " but must be full or exact (queries and keys come from two sequences)");
  require<ConfigError>(!cross_attention.causal, op,
                       ": cross_attention.causal is true but every target position may see the "
                       "whole source");
  require<ConfigError>(self_attention.d_model == feed_forward.d_model &&
                           cross_attention.d_model == feed_forward.d_model,
                       op, ": d_model differs between the sub-layers (self ",
                       self_attention.d_model, ", cross ", cross_attention.d_model,
                       ", feed-forward ", feed_forward.d_model, ")");
  require<ConfigError>(layer_norm_eps > 0.0, op, ": layer_norm_eps is ", layer_norm_eps,
                       " but must be positive");
}

template <class T>
void DecoderBlockState<T>::release() {
  self.release();
  cross.release();
  self_input = cross_input = ff_input = View3<T>();
  stored = false;
  call = DecoderBlockCall();
}

namespace {
enum DecoderStream : std::uint64_t { kSelf = 1, kCross = 2, kDecoderFeedForward = 3 };

AttentionLayerCall decoder_attention_call(const DecoderBlockCall& call, bool cross) {
  return {{call.key.seed, stream_id(call.key.stream, cross ? kCross : kSelf)},
          cross ? call.source_valid : call.target_valid,
          call.training,
          call.first_row};
}

FeedForwardCall decoder_feed_forward_call(const DecoderBlockCall& call, Index length) {
  return {{call.key.seed, stream_id(call.key.stream, kDecoderFeedForward)},
          call.training,
          call.first_row * length};
}
}  // namespace

template <class T>
DecoderBlock<T>::DecoderBlock(const std::string& prefix, const DecoderBlockConfig& config,
                              ParameterSet<param_t<T>>& params)
    : config_((config.validate(), config)),
      self_(prefix + ".self_norm", prefix + ".self", config.self_attention, config.layer_norm_eps,
            params),
      cross_(prefix + ".cross_norm", prefix + ".cross", config.cross_attention,
             config.layer_norm_eps, params),
      feed_forward_(prefix + ".ff", config.feed_forward, params) {}

template <class T>
void DecoderBlock<T>::init(RandomKey key) {
  self_.init({key.seed, stream_id(key.stream, kSelf)});
  cross_.init({key.seed, stream_id(key.stream, kCross)});
  feed_forward_.init({key.seed, stream_id(key.stream, kDecoderFeedForward)});
}

template <class T>
void DecoderBlock<T>::forward(View3<T> x, In3<T> memory, const DecoderBlockCall& call,
                              DecoderBlockState<T>& state, Workspace& workspace) const {
  const char* op = "DecoderBlock::forward";
  const Index d = config_.feed_forward.d_model;
  require_extent(op, "x", x, 2, d);
  require_extent(op, "memory", memory, 2, d);
  require<ShapeError>(memory.extent(0) == x.extent(0), op, ": x has shape ", shape_string(x),
                      " and memory ", shape_string(memory), "; their batch sizes must be equal");
  state.call = call;
  state.stored = true;
  // y = x + Self(LN(x)); z = y + Cross(LN(y), m); out = z + G(z), in place.
  keep_copy<T>(state.self_input, x, "decoder_self_input");
  self_.forward(state.self_input, x, decoder_attention_call(call, false), state.self, workspace,
                Save::All);
  keep_copy<T>(state.cross_input, x, "decoder_cross_input");
  cross_.forward(state.cross_input, x, decoder_attention_call(call, true), state.cross, workspace,
                 Save::All, memory);
  keep_copy<T>(state.ff_input, x, "decoder_ff_input");
  feed_forward_.forward(as_matrix(state.ff_input), as_matrix(x),
                        decoder_feed_forward_call(call, x.extent(1)), workspace, 1);
}

template <class T>
void DecoderBlock<T>::backward(View3<T> dx, In3<T> memory, View3<T> dmemory,
                               const DecoderBlockState<T>& state, Workspace& workspace) const {
  const char* op = "DecoderBlock::backward";
  require<ConfigError>(state.stored, op, ": the state holds no forward pass; run forward first");
  require_same_shape(op, "stored input", state.self_input, "dx", dx);
  require_same_shape(op, "memory", memory, "dmemory", dmemory);
  Workspace::Frame frame(workspace);
  auto upstream = like(dx, frame);
  // dz = dout + dG/dz^T dout; dy = dz + dCross/dy^T dz (dm += dCross/dm^T dz);
  // dx = dy + dSelf/dx^T dy.
  Kokkos::deep_copy(upstream, dx);
  feed_forward_.backward(as_matrix(state.ff_input), as_matrix(upstream), as_matrix(dx),
                         decoder_feed_forward_call(state.call, dx.extent(1)), workspace, 1);
  Kokkos::deep_copy(upstream, dx);
  cross_.backward(state.cross_input, upstream, dx, state.cross, workspace, memory, dmemory);
  Kokkos::deep_copy(upstream, dx);
  self_.backward(state.self_input, upstream, dx, state.self, workspace);
}

template <class T>
void DecoderBlock<T>::project_memory(In3<T> memory, View3<T> k, View3<T> v) const {
  cross_.attention().project_memory(memory, k, v);
}

template <class T>
void DecoderBlock<T>::forward_reversible(View3<T> x1, View3<T> x2, In3<T> memory,
                                         const DecoderBlockCall& call, DecoderBlockState<T>& state,
                                         Workspace& workspace) const {
  const char* op = "DecoderBlock::forward_reversible";
  const Index d = config_.feed_forward.d_model;
  require_extent(op, "x1", x1, 2, d);
  require_same_shape(op, "x1", x1, "x2", x2);
  require_extent(op, "memory", memory, 2, d);
  require<ShapeError>(memory.extent(0) == x1.extent(0), op, ": x1 has shape ", shape_string(x1),
                      " and memory ", shape_string(memory), "; their batch sizes must be equal");
  state.call = call;
  state.stored = false;
  state.self_input = state.cross_input = state.ff_input = View3<T>();
  // a = x1 + Self(LN(x2)) into x1; y2 = x2 + Cross(LN(a), m) into x2; y1 = a + G(y2) into x1.
  self_.forward(x2, x1, decoder_attention_call(call, false), state.self, workspace, Save::PlanOnly);
  cross_.forward(x1, x2, decoder_attention_call(call, true), state.cross, workspace, Save::PlanOnly,
                 memory);
  feed_forward_.forward(as_matrix(x2), as_matrix(x1), decoder_feed_forward_call(call, x1.extent(1)),
                        workspace, 1);
}

template <class T>
void DecoderBlock<T>::backward_reversible(View3<T> y1, View3<T> y2, View3<T> dy1, View3<T> dy2,
                                          In3<T> memory, View3<T> dmemory,
                                          const DecoderBlockState<T>& state,
                                          AttentionState<T>& scratch, Workspace& workspace) const {
  const char* op = "DecoderBlock::backward_reversible";
  require_same_shape(op, "y1", y1, "y2", y2);
  require_same_shape(op, "y1", y1, "dy1", dy1);
  require_same_shape(op, "y1", y1, "dy2", dy2);
  require_same_shape(op, "memory", memory, "dmemory", dmemory);
  Workspace::Frame frame(workspace);
  const Index rows = y1.extent(0) * y1.extent(1);
  auto g = like(y1, frame);
  // G: dy2 += dG/dy2^T dy1 and g = G(y2), one recomputation; a = y1 - G(y2).
  feed_forward_.backward(as_matrix(y2), as_matrix(dy1), as_matrix(dy2),
                         decoder_feed_forward_call(state.call, y1.extent(1)), workspace, 1,
                         as_matrix(g));
  ops::axpby<T>(-1, as_vector(g), 1, as_vector(y1));
  // Cross: recomputed at a with the saved call (masks, dropout stream);
  // x2 = y2 - Cross(LN(a), m); da += dCross/da^T dy2; dmemory accumulates.
  auto normed = g;  // G(y2) is no longer needed
  auto f = like(y1, frame);
  auto mean = frame.take<View1<compute_t<T>>>(rows), rstd = frame.take<View1<compute_t<T>>>(rows);
  cross_.norm(y1, normed, mean, rstd);
  cross_.attention().forward_cross(normed, memory, f, state.cross.call, scratch, workspace,
                                   Save::All);
  ops::axpby<T>(-1, as_vector(f), 1, as_vector(y2));
  cross_.backward(y1, normed, mean, rstd, dy2, dy1, scratch, workspace, memory, dmemory);
  // Self: recomputed at x2; x1 = a - Self(LN(x2)); dx2 += dSelf/dx2^T da.
  self_.norm(y2, normed, mean, rstd);
  scratch.use_plan_of(state.self);
  self_.attention().recompute(normed, f, scratch, workspace);
  ops::axpby<T>(-1, as_vector(f), 1, as_vector(y1));
  self_.backward(y2, normed, mean, rstd, dy1, dy2, scratch, workspace);
}

template <class T>
void DecoderBlock<T>::step(View2<T> x1, View2<T> x2, View3<T> k_cache, View3<T> v_cache,
                           Index position, In3<T> cross_k, In3<T> cross_v,
                           Kokkos::View<const int**, Layout, MemSpace> source_valid,
                           Workspace& workspace) const {
  // x1 += Self(LN(x2)); x2 += Cross(LN(x1)); x1 += G(x2) (one stream: x1 = x2).
  self_.step(x2, x1, k_cache, v_cache, position, workspace);
  cross_.step_cross(x1, x2, cross_k, cross_v, source_valid, workspace);
  Workspace::Frame frame(workspace);
  View2<T> g_input = x2;
  if (x1.data() == x2.data()) {  // the feed-forward does not run in place
    g_input = frame.take<View2<T>>(x2.extent(0), x2.extent(1));
    Kokkos::deep_copy(g_input, x2);
  }
  feed_forward_.step(g_input, x1, workspace, 1);
}

template <class T>
void ReversibleBlock<T>::start_cache(In3<T> x2, const BlockCall& call, Index capacity,
                                     attention::AttentionCache<T>& cache,
                                     Workspace& workspace) const {
  f_.start_cache(x2, attention_call(call), capacity, cache, workspace);
}

template <class T>
void ReversibleBlock<T>::step(View2<T> x1, View2<T> x2, attention::AttentionCache<T>& cache,
                              Kokkos::View<const Index*, Layout, MemSpace> positions,
                              Index max_position, Workspace& workspace) const {
  // y1 = x1 + F(x2), y2 = x2 + G(y1), one row per sequence.
  f_.step(x2, x1, cache, positions, max_position, workspace);
  feed_forward_.step(x1, x2, workspace, 1);
}

template struct DecoderBlockState<float>;
template struct DecoderBlockState<double>;
template class PreNormAttention<float>;
template class PreNormAttention<double>;
template class DecoderBlock<float>;
template class DecoderBlock<double>;
template struct BlockState<float>;
template struct BlockState<double>;
template class ReversibleBlock<float>;
template class ReversibleBlock<double>;
template class ResidualBlock<float>;
template class ResidualBlock<double>;
// bf16 activations (issue 34): the training calls of the blocks the Reformer
// LM stacks.
template struct BlockState<bf16>;
template PreNormAttention<bf16>::PreNormAttention(const std::string&, const std::string&,
                                                  const attention::AttentionLayerConfig&, double,
                                                  ParameterSet<float>&);
template void PreNormAttention<bf16>::init(RandomKey);
template ReversibleBlock<bf16>::ReversibleBlock(const std::string&, const BlockConfig&,
                                                ParameterSet<float>&);
template void ReversibleBlock<bf16>::init(RandomKey);
template void ReversibleBlock<bf16>::forward(View3<bf16>, View3<bf16>, const BlockCall&,
                                             BlockState<bf16>&, Workspace&, Save) const;
template void ReversibleBlock<bf16>::backward_reversible(View3<bf16>, View3<bf16>, View3<bf16>,
                                                         View3<bf16>, const BlockState<bf16>&,
                                                         AttentionState<bf16>&, Workspace&) const;
template void ReversibleBlock<bf16>::backward_stored(View3<bf16>, View3<bf16>,
                                                     const BlockState<bf16>&, Workspace&) const;
// The encoder-decoder's blocks (its training calls).
template ResidualBlock<bf16>::ResidualBlock(const std::string&, const BlockConfig&,
                                            ParameterSet<float>&);
template void ResidualBlock<bf16>::init(RandomKey);
template void ResidualBlock<bf16>::forward(View3<bf16>, const BlockCall&, BlockState<bf16>&,
                                           Workspace&) const;
template void ResidualBlock<bf16>::backward(View3<bf16>, const BlockState<bf16>&, Workspace&) const;
template struct DecoderBlockState<bf16>;
template DecoderBlock<bf16>::DecoderBlock(const std::string&, const DecoderBlockConfig&,
                                          ParameterSet<float>&);
template void DecoderBlock<bf16>::init(RandomKey);
template void DecoderBlock<bf16>::forward(View3<bf16>, In3<bf16>, const DecoderBlockCall&,
                                          DecoderBlockState<bf16>&, Workspace&) const;
template void DecoderBlock<bf16>::backward(View3<bf16>, In3<bf16>, View3<bf16>,
                                           const DecoderBlockState<bf16>&, Workspace&) const;
template void DecoderBlock<bf16>::forward_reversible(View3<bf16>, View3<bf16>, In3<bf16>,
                                                     const DecoderBlockCall&,
                                                     DecoderBlockState<bf16>&, Workspace&) const;
template void DecoderBlock<bf16>::backward_reversible(View3<bf16>, View3<bf16>, View3<bf16>,
                                                      View3<bf16>, In3<bf16>, View3<bf16>,
                                                      const DecoderBlockState<bf16>&,
                                                      AttentionState<bf16>&, Workspace&) const;

}  // namespace reformer::layers
