#include "reformer/layers/transformer_xl_layer.hpp"

#include "config/value_rules.hpp"
#include "reformer/core/error.hpp"
#include "reformer/core/initializers.hpp"
#include "reformer/core/shape.hpp"
#include "reformer/ops/dropout.hpp"
#include "reformer/ops/elementwise.hpp"
#include "reformer/ops/embedding.hpp"
#include "reformer/ops/gemm.hpp"
#include "reformer/ops/layer_norm.hpp"

namespace reformer::layers {
namespace {

using ops::Trans;

enum Stream : std::uint64_t { kAttentionDropout = 1, kOutputDropout = 2, kFeedForward = 3 };

RandomKey sub_key(RandomKey key, Stream stream) {
  return {key.seed, stream_id(key.stream, stream)};
}

// The feed-forward's rows are the positions of the [batch, length] segment.
FeedForwardCall feed_forward_call(const TransformerXLLayerCall& call, Index length) {
  return {sub_key(call.key, kFeedForward), call.training, call.first_row * length};
}

attention::AttentionDropout attention_dropout(const TransformerXLLayerCall& call, double rate) {
  return {call.training ? rate : 0.0, sub_key(call.key, kAttentionDropout), call.first_row};
}

// c(b, j, :) = m(b, j, :) for j < M, x(b, j - M, :) after.
template <class T>
void concat_rows(In3<T> m, In3<T> x, View3<T> c) {
  const Index batch = c.extent(0), keys = c.extent(1), width = c.extent(2);
  const Index memory = keys - Index(x.extent(1));
  using Policy3 = Kokkos::MDRangePolicy<ExecSpace, Kokkos::Rank<3>>;
  Kokkos::parallel_for(
      "txl_concat_rows", Policy3({0, 0, 0}, {batch, keys, width}),
      KOKKOS_LAMBDA(Index b, Index j, Index f) {
        c(b, j, f) = j < memory ? m(b, j, f) : x(b, j - memory, f);
      });
}

// out(b, i, :) = beta * out(b, i, :) + c(b, M + i, :): the segment's rows of
// a [batch, M + L, width] tensor.
template <class T>
void segment_rows(In3<T> c, View3<T> out, compute_t<T> beta) {
  const Index batch = out.extent(0), length = out.extent(1), width = out.extent(2);
  const Index memory = Index(c.extent(1)) - length;
  using Policy3 = Kokkos::MDRangePolicy<ExecSpace, Kokkos::Rank<3>>;
  Kokkos::parallel_for(
      "txl_segment_rows", Policy3({0, 0, 0}, {batch, length, width}),
      KOKKOS_LAMBDA(Index b, Index i, Index f) {
        const auto value = load(c(b, memory + i, f));
        out(b, i, f) = store<T>(beta == 0 ? value : beta * load(out(b, i, f)) + value);
      });
}

// c(b, M + i, :) += s(b, i, :).
template <class T>
void add_to_segment_rows(In3<T> s, View3<T> c) {
  const Index batch = s.extent(0), length = s.extent(1), width = s.extent(2);
  const Index memory = Index(c.extent(1)) - length;
  using Policy3 = Kokkos::MDRangePolicy<ExecSpace, Kokkos::Rank<3>>;
  Kokkos::parallel_for(
      "txl_add_segment_rows", Policy3({0, 0, 0}, {batch, length, width}),
      KOKKOS_LAMBDA(Index b, Index i, Index f) {
        c(b, memory + i, f) = store<T>(load(c(b, memory + i, f)) + load(s(b, i, f)));
      });
}

// dst(b, first + i, :) = src(b, i, :).
template <class T>
void put_rows(In3<T> src, View3<T> dst, Index first) {
  const Index batch = src.extent(0), rows = src.extent(1), width = src.extent(2);
  using Policy3 = Kokkos::MDRangePolicy<ExecSpace, Kokkos::Rank<3>>;
  Kokkos::parallel_for(
      "txl_put_rows", Policy3({0, 0, 0}, {batch, rows, width}),
      KOKKOS_LAMBDA(Index b, Index i, Index f) { dst(b, first + i, f) = src(b, i, f); });
}

template <class T>
View4<T> heads_of(const View2<T>& m, Index batch, Index length, Index heads, Index d_head) {
  return View4<T>(m.data(), batch, length, heads, d_head);
}

template <class T>
View3<T> rows3(const View2<T>& m, Index batch, Index length) {
  return View3<T>(m.data(), batch, length, m.extent(1));
}

}  // namespace

void TransformerXLLayerConfig::validate() const {
  const char* op = "TransformerXLLayerConfig";
  require<ConfigError>(d_model > 0 && heads > 0 && d_head > 0, op,
                       ": d_model, heads and d_head must be positive, got ", d_model, ", ", heads,
                       ", ", d_head);
  require<ConfigError>(d_head <= attention::kMaxHeadDim, op, ": d_head is ", d_head,
                       " but relative attention supports at most ", attention::kMaxHeadDim);
  require_rate(op, "attention_dropout", attention_dropout);
  require_rate(op, "dropout", dropout);
  require_rate(op, "position_dropout", position_dropout);
  require<ConfigError>(layer_norm_eps > 0.0, op, ": layer_norm_eps is ", layer_norm_eps,
                       " but must be positive");
  relative.validate();
  feed_forward_config().validate();
}

FeedForwardConfig TransformerXLLayerConfig::feed_forward_config() const {
  FeedForwardConfig ff = feed_forward;
  ff.d_model = d_model;
  ff.layer_norm = pre_norm;
  ff.layer_norm_eps = layer_norm_eps;
  return ff;
}

template <class T>
void relative_position_encoding(View2<T> out) {
  Kokkos::deep_copy(out, store<T>(0));
  ops::sinusoidal_positions_forward<T>(out, Index(out.extent(0)), 0, out);
}

template <class T>
void TransformerXLLayer<T>::distance_encoding(const TransformerXLLayerCall& call,
                                              View2<T> out) const {
  relative_position_encoding<T>(out);
  if (call.training && config_.position_dropout > 0)
    ops::dropout_forward<T>(as_vector(out), config_.position_dropout, call.position_key, 0,
                            as_vector(out));
}

template <class T>
TransformerXLLayer<T>::TransformerXLLayer(const std::string& prefix,
                                          const TransformerXLLayerConfig& config,
                                          ParameterSet<param_t<T>>& params)
    : config_((config.validate(), config)),
      feed_forward_(prefix + ".ff", config.feed_forward_config(), params) {
  const Index d = config.d_model, inner = config.heads * config.d_head;
  w_q_ = &params.add(prefix + ".attn.w_q", {d, inner});
  w_k_ = &params.add(prefix + ".attn.w_k", {d, inner});
  w_v_ = &params.add(prefix + ".attn.w_v", {d, inner});
  w_r_ = &params.add(prefix + ".attn.w_r", {d, inner});
  w_o_ = &params.add(prefix + ".attn.w_o", {inner, d});
  bias_u_ = &params.add(prefix + ".attn.bias_u", {config.heads, config.d_head});
  bias_v_ = &params.add(prefix + ".attn.bias_v", {config.heads, config.d_head});
  attn_gamma_ = &params.add(prefix + ".attn_norm.gamma", {d});
  attn_beta_ = &params.add(prefix + ".attn_norm.beta", {d});
  if (!config.pre_norm) {
    ff_gamma_ = &params.add(prefix + ".ff_norm.gamma", {d});
    ff_beta_ = &params.add(prefix + ".ff_norm.beta", {d});
  }
}

template <class T>
void TransformerXLLayer<T>::init(RandomKey key) {
  std::uint64_t i = 0;
  for (auto* p : {w_q_, w_k_, w_v_, w_r_, w_o_})
    init_xavier_uniform(*p, {key.seed, stream_id(key.stream, ++i)});
  init_normal(*bias_u_, 0.02, {key.seed, stream_id(key.stream, ++i)});
  init_normal(*bias_v_, 0.02, {key.seed, stream_id(key.stream, ++i)});
  for (auto* p : {attn_gamma_, ff_gamma_})
    if (p) init_constant(*p, 1.0);
  for (auto* p : {attn_beta_, ff_beta_})
    if (p) init_constant(*p, 0.0);
  feed_forward_.init({key.seed, stream_id(key.stream, ++i)});
}

template <class T>
void TransformerXLLayer<T>::forward(View3<T> x, In3<T> memory, const TransformerXLLayerCall& call,
                                    TransformerXLLayerState<T>& state, Workspace& workspace) const {
  const char* op = "TransformerXLLayer::forward";
  const Index d = config_.d_model, h = config_.heads, dh = config_.d_head, inner = h * dh;
  require_extent(op, "x", x, 2, d);
  require_nonempty(op, "x", x);
  const Index batch = x.extent(0), length = x.extent(1);
  const Index mem = memory.extent(0) == 0 ? 0 : Index(memory.extent(1));
  if (mem > 0) {
    require_extent(op, "memory", memory, 2, d);
    require<ShapeError>(Index(memory.extent(0)) == batch, op, ": x has shape ", shape_string(x),
                        " and memory ", shape_string(memory), "; their batch sizes must be equal");
  }
  const Index keys = mem + length;
  const auto relative = relative_config(call);
  const Index positions = attention::relative_attention_positions(mem, length, relative);
  state.saved = false;
  state.relative = relative;
  state.call = call;
  state.batch = batch;
  state.length = length;
  state.memory = mem;
  state.positions = positions;
  const auto eps = compute_t<T>(config_.layer_norm_eps);
  Workspace::Frame frame(workspace);

  // c = [m; x] and the attention's input a (LN(c) before the attention when pre-LN).
  auto context = ensure_view(state.context, "txl_context", batch, keys, d);
  concat_rows<T>(mem > 0 ? memory : In3<T>(x), x, context);
  View3<T> a = context;
  if (config_.pre_norm) {
    a = frame.take<View3<T>>(batch, keys, d);
    auto mean = frame.take<View1<compute_t<T>>>(batch * keys),
         rstd = frame.take<View1<compute_t<T>>>(batch * keys);
    ops::layer_norm_forward<T>(as_matrix(context), attn_gamma_->value, attn_beta_->value, eps,
                               as_matrix(a), mean, rstd);
  }
  auto a_seg = frame.take<View3<T>>(batch, length, d);
  segment_rows<T>(a, a_seg, 0);

  // Projections.
  auto q = ensure_view(state.q, "txl_q", batch * length, inner);
  auto k = ensure_view(state.k, "txl_k", batch * keys, inner);
  auto v = ensure_view(state.v, "txl_v", batch * keys, inner);
  auto rk = ensure_view(state.rk, "txl_rk", positions, inner);
  ops::product<T, param_t<T>, T>(as_matrix(a_seg), Trans::No, w_q_->matrix(), Trans::No, q);
  ops::projections_forward<T>(as_matrix(a), {w_k_->matrix(), w_v_->matrix()}, {k, v});
  auto encoding = frame.take<View2<T>>(positions, d);
  distance_encoding(call, encoding);
  ops::product<T, param_t<T>, T>(encoding, Trans::No, w_r_->matrix(), Trans::No, rk);

  // Relative attention.
  auto attended = ensure_view(state.attended, "txl_attended", batch * length, inner);
  auto lse = ensure_view(state.lse, "txl_lse", batch, length, h);
  const auto dropout = attention_dropout(call, config_.attention_dropout);
  attention::relative_attention_forward<T>(
      heads_of(q, batch, length, h, dh), heads_of(k, batch, keys, h, dh),
      heads_of(v, batch, keys, h, dh), View3<T>(rk.data(), positions, h, dh), bias_u_->matrix(),
      bias_v_->matrix(), relative, dropout, heads_of(attended, batch, length, h, dh), lse,
      workspace);

  auto ff_input = ensure_view(state.ff_input, "txl_ff_input", batch, length, d);
  View3<T> residual, ff_residual;
  if (config_.pre_norm) {
    state.residual = state.ff_residual = View3<T>();
  } else {
    residual = ensure_view(state.residual, "txl_residual", batch, length, d);
    ff_residual = ensure_view(state.ff_residual, "txl_ff_residual", batch, length, d);
  }
  attention_output(x, attended, call, ff_input, residual, ff_residual, workspace);
  state.saved = true;
}

template <class T>
attention::RelativeAttentionConfig TransformerXLLayer<T>::relative_config(
    const TransformerXLLayerCall& call) const {
  attention::RelativeAttentionConfig relative = config_.relative;
  if (call.clamp_len >= 0) relative.clamp_len = call.clamp_len;
  if (call.same_length >= 0) relative.same_length = call.same_length == 1;
  if (call.mem_len >= 0) {
    relative.mem_len = call.mem_len;
    if (call.mem_len == 0) relative.same_length = false;
  }
  relative.validate();
  return relative;
}

template <class T>
void TransformerXLLayer<T>::attention_output(View3<T> x, View2<T> attended,
                                             const TransformerXLLayerCall& call, View3<T> ff_input,
                                             View3<T> residual, View3<T> ff_residual,
                                             Workspace& workspace) const {
  const Index d = config_.d_model, batch = x.extent(0), length = x.extent(1);
  const auto eps = compute_t<T>(config_.layer_norm_eps);
  Workspace::Frame frame(workspace);
  // Output projection, its dropout and the residual.
  auto o = frame.take<View3<T>>(batch, length, d);
  ops::product<T, param_t<T>, T>(attended, Trans::No, w_o_->matrix(), Trans::No, as_matrix(o));
  const double rate = call.training ? config_.dropout : 0.0;
  if (rate > 0)
    ops::dropout_forward<T>(as_vector(o), rate, sub_key(call.key, kOutputDropout),
                            ops::dropout_offset(call.first_row, row_elements(o)), as_vector(o));
  if (config_.pre_norm) {
    // y = x + o; out = y + FF(y).
    Kokkos::deep_copy(ff_input, x);
    ops::axpby<T>(1, as_vector(o), 1, as_vector(ff_input));
    Kokkos::deep_copy(x, ff_input);
    feed_forward_.forward(as_matrix(ff_input), as_matrix(x), feed_forward_call(call, length),
                          workspace, 1);
  } else {
    // y = LN_attn(x + o); out = LN_ff(y + FF(y)).
    Kokkos::deep_copy(residual, x);
    ops::axpby<T>(1, as_vector(o), 1, as_vector(residual));
    auto mean = frame.take<View1<compute_t<T>>>(batch * length),
         rstd = frame.take<View1<compute_t<T>>>(batch * length);
    ops::layer_norm_forward<T>(as_matrix(residual), attn_gamma_->value, attn_beta_->value, eps,
                               as_matrix(ff_input), mean, rstd);
    Kokkos::deep_copy(ff_residual, ff_input);
    feed_forward_.forward(as_matrix(ff_input), as_matrix(ff_residual),
                          feed_forward_call(call, length), workspace, 1);
    ops::layer_norm_forward<T>(as_matrix(ff_residual), ff_gamma_->value, ff_beta_->value, eps,
                               as_matrix(x), mean, rstd);
  }
}

template <class T>
void TransformerXLLayer<T>::start_segment(In3<T> memory, Index batch, Index length,
                                          const TransformerXLLayerCall& call,
                                          TransformerXLLayerCache<T>& cache,
                                          Workspace& workspace) const {
  const char* op = "TransformerXLLayer::start_segment";
  const Index d = config_.d_model, inner = config_.heads * config_.d_head;
  require<ConfigError>(!call.training, op,
                       ": cached decoding runs without dropout; set the call's training to false");
  require<ShapeError>(batch > 0 && length > 0, op, ": a segment of ", length, " positions for ",
                      batch, " rows; both must be positive");
  const Index mem = memory.extent(0) == 0 ? 0 : Index(memory.extent(1));
  if (mem > 0) {
    require_extent(op, "memory", memory, 2, d);
    require<ShapeError>(Index(memory.extent(0)) == batch, op, ": memory has shape ",
                        shape_string(memory), " but the batch has ", batch, " rows");
  }
  const Index keys = mem + length;
  cache.relative = relative_config(call);
  cache.batch = batch;
  cache.memory = mem;
  cache.length = length;
  cache.filled = 0;
  auto context = ensure_view(cache.context, "txl_cache_context", batch, keys, d);
  auto k = ensure_view(cache.k, "txl_cache_k", batch, keys, inner);
  auto v = ensure_view(cache.v, "txl_cache_v", batch, keys, inner);
  const Index positions = attention::relative_attention_positions(mem, length, cache.relative);
  auto rk = ensure_view(cache.rk, "txl_cache_rk", positions, inner);
  Workspace::Frame frame(workspace);
  auto encoding = frame.take<View2<T>>(positions, d);
  distance_encoding(call, encoding);
  ops::matmul<T>(encoding, Trans::No, w_r_->matrix(), Trans::No, rk);
  if (mem == 0) return;
  // The memory rows of c, and their keys and values.
  put_rows<T>(memory, context, 0);
  View3<T> a = frame.take<View3<T>>(batch, mem, d);
  if (config_.pre_norm) {
    auto mean = frame.take<View1<compute_t<T>>>(batch * mem),
         rstd = frame.take<View1<compute_t<T>>>(batch * mem);
    ops::layer_norm_forward<T>(as_matrix(memory), attn_gamma_->value, attn_beta_->value,
                               compute_t<T>(config_.layer_norm_eps), as_matrix(a), mean, rstd);
  } else {
    Kokkos::deep_copy(a, memory);
  }
  auto projected = frame.take<View3<T>>(batch, mem, inner);
  ops::matmul<T>(as_matrix(a), Trans::No, w_k_->matrix(), Trans::No, as_matrix(projected));
  put_rows<T>(projected, k, 0);
  ops::matmul<T>(as_matrix(a), Trans::No, w_v_->matrix(), Trans::No, as_matrix(projected));
  put_rows<T>(projected, v, 0);
}

template <class T>
void TransformerXLLayer<T>::step(View3<T> x, TransformerXLLayerCache<T>& cache,
                                 Workspace& workspace) const {
  const char* op = "TransformerXLLayer::step";
  const Index d = config_.d_model, h = config_.heads, dh = config_.d_head, inner = h * dh;
  require<ConfigError>(cache.batch > 0, op,
                       ": the cache holds no segment; call start_segment first");
  require_extent(op, "x", x, 2, d);
  require_nonempty(op, "x", x);
  const Index batch = x.extent(0), n = x.extent(1);
  require<ShapeError>(batch == cache.batch && cache.filled + n <= cache.length, op,
                      ": x has shape ", shape_string(x), " but the segment holds ", cache.batch,
                      " rows and ", cache.length - cache.filled, " more positions (", cache.filled,
                      " of ", cache.length, " fed)");
  const Index first = cache.memory + cache.filled, keys = first + n;
  Workspace::Frame frame(workspace);
  // The new rows of c, of the attention's input a, and their projections.
  put_rows<T>(x, cache.context, first);
  View3<T> a = x;
  if (config_.pre_norm) {
    a = frame.take<View3<T>>(batch, n, d);
    auto mean = frame.take<View1<compute_t<T>>>(batch * n),
         rstd = frame.take<View1<compute_t<T>>>(batch * n);
    ops::layer_norm_forward<T>(as_matrix(x), attn_gamma_->value, attn_beta_->value,
                               compute_t<T>(config_.layer_norm_eps), as_matrix(a), mean, rstd);
  }
  auto q = frame.take<View2<T>>(batch * n, inner);
  ops::matmul<T>(as_matrix(a), Trans::No, w_q_->matrix(), Trans::No, q);
  auto projected = frame.take<View3<T>>(batch, n, inner);
  ops::matmul<T>(as_matrix(a), Trans::No, w_k_->matrix(), Trans::No, as_matrix(projected));
  put_rows<T>(projected, cache.k, first);
  ops::matmul<T>(as_matrix(a), Trans::No, w_v_->matrix(), Trans::No, as_matrix(projected));
  put_rows<T>(projected, cache.v, first);
  // The queries over the keys so far: the first `keys` positions of each row
  // of the cache, read where they lie (nothing is copied, for any batch).
  const Index capacity = cache.k.extent(1), positions = cache.rk.extent(0);
  auto attended = frame.take<View2<T>>(batch * n, inner);
  auto lse = frame.take<View3<compute_t<T>>>(batch, n, h);
  attention::relative_attention_forward<T>(
      heads_of(q, batch, n, h, dh), View4<T>(cache.k.data(), batch, capacity, h, dh),
      View4<T>(cache.v.data(), batch, capacity, h, dh), View3<T>(cache.rk.data(), positions, h, dh),
      bias_u_->matrix(), bias_v_->matrix(), cache.relative, attention::AttentionDropout{},
      heads_of(attended, batch, n, h, dh), lse, workspace, keys);
  auto ff_input = frame.take<View3<T>>(batch, n, d);
  View3<T> residual, ff_residual;
  if (!config_.pre_norm) {
    residual = frame.take<View3<T>>(batch, n, d);
    ff_residual = frame.take<View3<T>>(batch, n, d);
  }
  TransformerXLLayerCall call;
  call.training = false;
  attention_output(x, attended, call, ff_input, residual, ff_residual, workspace);
  cache.filled += n;
}

template <class T>
void TransformerXLLayer<T>::backward(View3<T> dx, const TransformerXLLayerState<T>& state,
                                     Workspace& workspace) const {
  const char* op = "TransformerXLLayer::backward";
  require<ConfigError>(state.saved, op, ": the state holds no forward pass; run forward first");
  const Index d = config_.d_model, h = config_.heads, dh = config_.d_head, inner = h * dh;
  const Index batch = state.batch, length = state.length, mem = state.memory;
  const Index keys = mem + length, positions = state.positions, rows = batch * length;
  require<ShapeError>(
      Index(dx.extent(0)) == batch && Index(dx.extent(1)) == length && Index(dx.extent(2)) == d, op,
      ": dx has shape ", shape_string(dx), " but the forward pass had [", batch, ", ", length, ", ",
      d, "]");
  using C = compute_t<T>;
  const auto eps = C(config_.layer_norm_eps);
  const auto ff_call = feed_forward_call(state.call, length);
  Workspace::Frame frame(workspace);
  auto mean = frame.take<View1<C>>(batch * keys), rstd = frame.take<View1<C>>(batch * keys);
  auto mean_l = View1<C>(mean.data(), rows), rstd_l = View1<C>(rstd.data(), rows);
  auto upstream = frame.take<View3<T>>(batch, length, d);

  // Through the feed-forward (and the post-LN LayerNorms): dx becomes the
  // gradient of the attention residual's sum, which is also the gradient that
  // the residual passes on to x.
  if (config_.pre_norm) {
    Kokkos::deep_copy(upstream, dx);
    feed_forward_.backward(as_matrix(state.ff_input), as_matrix(upstream), as_matrix(dx), ff_call,
                           workspace, 1);
  } else {
    auto scratch = frame.take<View3<T>>(batch, length, d);
    // ds2 = LN_ff'(dout), then dy = ds2 + FF'(ds2), then ds1 = LN_attn'(dy).
    ops::layer_norm_forward<T>(as_matrix(state.ff_residual), ff_gamma_->value, ff_beta_->value, eps,
                               as_matrix(scratch), mean_l, rstd_l);
    ops::layer_norm_backward<T>(as_matrix(state.ff_residual), ff_gamma_->value, mean_l, rstd_l,
                                as_matrix(dx), as_matrix(upstream), ff_gamma_->grad,
                                ff_beta_->grad);
    Kokkos::deep_copy(scratch, upstream);
    feed_forward_.backward(as_matrix(state.ff_input), as_matrix(upstream), as_matrix(scratch),
                           ff_call, workspace, 1);
    ops::layer_norm_forward<T>(as_matrix(state.residual), attn_gamma_->value, attn_beta_->value,
                               eps, as_matrix(upstream), mean_l, rstd_l);
    ops::layer_norm_backward<T>(as_matrix(state.residual), attn_gamma_->value, mean_l, rstd_l,
                                as_matrix(scratch), as_matrix(dx), attn_gamma_->grad,
                                attn_beta_->grad);
  }

  // The output projection and its dropout: do = dropout'(dx).
  auto dout = as_matrix(upstream);
  const double rate = state.call.training ? config_.dropout : 0.0;
  if (rate > 0)
    ops::dropout_backward<T>(as_vector(dx), rate, sub_key(state.call.key, kOutputDropout),
                             ops::dropout_offset(state.call.first_row, row_elements(dx)),
                             as_vector(upstream));
  else
    Kokkos::deep_copy(upstream, dx);
  auto dattended = frame.take<View2<T>>(rows, inner);
  ops::product<T, param_t<T>, T>(dout, Trans::No, w_o_->matrix(), Trans::Yes, dattended);
  ops::product<T, T, param_t<T>>(state.attended, Trans::Yes, dout, Trans::No, w_o_->grad_matrix(),
                                 1, 1);

  // The attention.
  auto dq = frame.take<View2<T>>(rows, inner);
  auto dk = frame.take<View2<T>>(batch * keys, inner);
  auto dv = frame.take<View2<T>>(batch * keys, inner);
  auto dr = frame.take<View2<T>>(positions, inner);
  auto du = frame.take<View2<param_t<T>>>(h, dh), dbv = frame.take<View2<param_t<T>>>(h, dh);
  const auto dropout = attention_dropout(state.call, config_.attention_dropout);
  attention::relative_attention_backward<T>(
      heads_of(state.q, batch, length, h, dh), heads_of(state.k, batch, keys, h, dh),
      heads_of(state.v, batch, keys, h, dh), View3<T>(state.rk.data(), positions, h, dh),
      bias_u_->matrix(), bias_v_->matrix(), heads_of(state.attended, batch, length, h, dh),
      state.lse, heads_of(dattended, batch, length, h, dh), state.relative, dropout,
      heads_of(dq, batch, length, h, dh), heads_of(dk, batch, keys, h, dh),
      heads_of(dv, batch, keys, h, dh), View3<T>(dr.data(), positions, h, dh), du, dbv, workspace);
  ops::axpby<param_t<T>>(1, as_vector(du), 1, bias_u_->grad);
  ops::axpby<param_t<T>>(1, as_vector(dbv), 1, bias_v_->grad);

  // The projections' weights, from the attention's input rebuilt.
  View3<T> a = state.context;
  if (config_.pre_norm) {
    a = frame.take<View3<T>>(batch, keys, d);
    ops::layer_norm_forward<T>(as_matrix(state.context), attn_gamma_->value, attn_beta_->value, eps,
                               as_matrix(a), mean, rstd);
  }
  auto a_seg = frame.take<View3<T>>(batch, length, d);
  segment_rows<T>(a, a_seg, 0);
  ops::product<T, T, param_t<T>>(as_matrix(a_seg), Trans::Yes, dq, Trans::No, w_q_->grad_matrix(),
                                 1, 1);
  auto encoding = frame.take<View2<T>>(positions, d);
  distance_encoding(state.call, encoding);
  ops::product<T, T, param_t<T>>(encoding, Trans::Yes, dr, Trans::No, w_r_->grad_matrix(), 1, 1);

  // The gradient of a: keys and values from every row (with W_k's and W_v's
  // gradients), queries from the segment's; then through LN_attn (pre-LN)
  // and the segment's rows into dx.
  auto da = frame.take<View3<T>>(batch, keys, d);
  ops::projections_backward<T>(as_matrix(a), {w_k_->matrix(), w_v_->matrix()}, {dk, dv},
                               as_matrix(da), 0.0, {w_k_->grad_matrix(), w_v_->grad_matrix()});
  ops::product<T, param_t<T>, T>(dq, Trans::No, w_q_->matrix(), Trans::Yes, as_matrix(a_seg));
  add_to_segment_rows<T>(a_seg, da);
  if (config_.pre_norm) {
    auto dcontext = frame.take<View3<T>>(batch, keys, d);
    ops::layer_norm_backward<T>(as_matrix(state.context), attn_gamma_->value, mean, rstd,
                                as_matrix(da), as_matrix(dcontext), attn_gamma_->grad,
                                attn_beta_->grad);
    segment_rows<T>(dcontext, dx, 1);
  } else {
    segment_rows<T>(da, dx, 1);
  }
}

template void relative_position_encoding<float>(View2<float>);
template void relative_position_encoding<double>(View2<double>);
template void relative_position_encoding<bf16>(View2<bf16>);
template class TransformerXLLayer<float>;
template class TransformerXLLayer<double>;
// bf16 activations (train.precision = "bf16"): the training calls only; cached
// decoding runs the float32 layer.
template TransformerXLLayer<bf16>::TransformerXLLayer(const std::string&,
                                                      const TransformerXLLayerConfig&,
                                                      ParameterSet<float>&);
template void TransformerXLLayer<bf16>::init(RandomKey);
template void TransformerXLLayer<bf16>::forward(View3<bf16>, In3<bf16>,
                                                const TransformerXLLayerCall&,
                                                TransformerXLLayerState<bf16>&, Workspace&) const;
template void TransformerXLLayer<bf16>::backward(View3<bf16>, const TransformerXLLayerState<bf16>&,
                                                 Workspace&) const;

}  // namespace reformer::layers
