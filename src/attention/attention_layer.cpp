#include "reformer/attention/attention_layer.hpp"

#include "reformer/core/instantiate.hpp"
#include "reformer/core/shape.hpp"
#include "reformer/ops/dropout.hpp"
#include "reformer/ops/gemm.hpp"
#include "reformer/train/initializers.hpp"

namespace reformer::attention {
namespace {

using ops::Trans;

// Streams of one forward call's randomness.
enum Stream : std::uint64_t { kRotations = 1, kAttentionDropout = 2, kOutputDropout = 3 };

RandomKey sub_key(RandomKey key, Stream stream) {
  return {key.seed, stream_id(key.stream, stream)};
}

// A variant's config with the masks and dropout of the current call.
template <class Config>
Config for_call(Config config, const MaskOptions& masks, const AttentionDropout& dropout) {
  config.masks = masks;
  config.dropout = dropout;
  return config;
}

template <class T>
View4<T> per_head(const View2<T>& m, Index batch, Index length, Index heads, Index d_head) {
  return View4<T>(m.data(), batch, length, heads, d_head);
}

template <class T>
View2<T> as_rows(const Kokkos::View<T***, Layout, MemSpace>& x) {
  return View2<T>(x.data(), x.extent(0) * x.extent(1), x.extent(2));
}
template <class T>
Kokkos::View<const T**, Layout, MemSpace> as_rows(
    const Kokkos::View<const T***, Layout, MemSpace>& x) {
  return Kokkos::View<const T**, Layout, MemSpace>(x.data(), x.extent(0) * x.extent(1),
                                                   x.extent(2));
}

// y += x, element-wise over same-shaped matrices.
template <class T>
void add_into(View2<T> x, View2<T> y) {
  auto fx = as_vector(x);
  auto fy = as_vector(y);
  Kokkos::parallel_for(
      "attention_add_into", range(fx.extent(0)), KOKKOS_LAMBDA(Index i) { fy(i) += fx(i); });
}

}  // namespace

AttentionKind parse_attention_kind(const std::string& name) {
  if (name == "full") return AttentionKind::Full;
  if (name == "lsh") return AttentionKind::Lsh;
  if (name == "local") return AttentionKind::Local;
  throw ConfigError("attention: unknown kind '" + name + "' (expected full, lsh or local)");
}

const char* to_string(AttentionKind kind) {
  switch (kind) {
    case AttentionKind::Full:
      return "full";
    case AttentionKind::Lsh:
      return "lsh";
    case AttentionKind::Local:
      return "local";
  }
  return "?";
}

template <class T>
AttentionLayer<T>::AttentionLayer(const std::string& prefix, const AttentionLayerConfig& config,
                                  train::ParameterSet<T>& params)
    : config_(config) {
  const char* op = "AttentionLayer";
  require<ConfigError>(config.d_model > 0 && config.heads > 0 && config.d_head > 0, op,
                       ": d_model, heads and d_head must be positive, got ", config.d_model, ", ",
                       config.heads, ", ", config.d_head);
  require<ConfigError>(config.d_head <= kMaxHeadDim || config.kind == AttentionKind::Full, op,
                       ": d_head is ", config.d_head, " but ", to_string(config.kind),
                       " attention supports at most ", kMaxHeadDim);
  require<ConfigError>(!(config.kind == AttentionKind::Local && config.shared_qk), op,
                       ": local attention has separate q and k; shared_qk must be false");
  for (double rate : {config.attention_dropout, config.output_dropout})
    require<ConfigError>(rate >= 0.0 && rate < 1.0, op, ": dropout rate ", rate,
                         " must be in [0, 1)");
  const bool shared = config.kind == AttentionKind::Lsh || config.shared_qk;
  config_.shared_qk = shared;
  const Index inner = config.heads * config.d_head;
  w_q_ = &params.add(prefix + (shared ? ".w_qk" : ".w_q"), {config.d_model, inner});
  if (!shared) w_k_ = &params.add(prefix + ".w_k", {config.d_model, inner});
  w_v_ = &params.add(prefix + ".w_v", {config.d_model, inner});
  w_o_ = &params.add(prefix + ".w_o", {inner, config.d_model});
}

template <class T>
void AttentionLayer<T>::init(RandomKey key) {
  std::uint64_t i = 0;
  for (auto* p : {w_q_, w_k_, w_v_, w_o_})
    if (p) train::init_xavier_uniform(*p, {key.seed, stream_id(key.stream, ++i)});
}

template <class T>
void AttentionLayer<T>::project(In3<T> x, In3<T> memory) {
  const Index inner = config_.heads * config_.d_head;
  const auto xr = as_rows<T>(x);
  const auto mr = as_rows<T>(memory);
  auto alloc = [](View2<T>& v, const char* label, Index rows, Index cols) {
    if (Index(v.extent(0)) != rows || Index(v.extent(1)) != cols)
      v = View2<T>(Kokkos::view_alloc(Kokkos::WithoutInitializing, std::string(label)), rows, cols);
  };
  alloc(q_, "attention_q", xr.extent(0), inner);
  alloc(v_, "attention_v", mr.extent(0), inner);
  alloc(attended_, "attention_out", xr.extent(0), inner);
  ops::matmul<T>(xr, Trans::No, w_q_->matrix(), Trans::No, q_);
  if (w_k_) {
    alloc(k_, "attention_k", mr.extent(0), inner);
    ops::matmul<T>(mr, Trans::No, w_k_->matrix(), Trans::No, k_);
  } else {
    k_ = q_;  // shared queries and keys
  }
  ops::matmul<T>(mr, Trans::No, w_v_->matrix(), Trans::No, v_);
}

template <class T>
View4<T> AttentionLayer<T>::query_heads(const View2<T>& m) const {
  return per_head(m, batch_, length_q_, config_.heads, config_.d_head);
}

template <class T>
View4<T> AttentionLayer<T>::key_heads(const View2<T>& m) const {
  return per_head(m, batch_, length_k_, config_.heads, config_.d_head);
}

template <class T>
MaskOptions AttentionLayer<T>::call_masks() const {
  return {config_.causal && length_q_ == length_k_, key_valid_};
}

template <class T>
AttentionDropout AttentionLayer<T>::call_dropout() const {
  return {config_.attention_dropout, sub_key(key_, kAttentionDropout)};
}

template <class T>
void AttentionLayer<T>::attend() {
  const Index h = config_.heads, d = config_.d_head;
  auto q = query_heads(q_);
  auto k = key_heads(k_);
  auto v = key_heads(v_);
  auto out = query_heads(attended_);
  const AttentionDropout dropout = call_dropout();
  const MaskOptions masks = call_masks();
  switch (config_.kind) {
    case AttentionKind::Full: {
      auto c = for_call(FullAttentionConfig{}, masks, dropout);
      c.self_mask = config_.shared_qk;
      full_attention_forward<T>(q, k, v, c, out, full_saved_);
      break;
    }
    case AttentionKind::Lsh: {
      const auto c = for_call(config_.lsh, masks, dropout);
      rotations_ = View4<T>("lsh_rotations", h, d, c.n_hashes, lsh_rotation_width(c, length_q_));
      lsh_random_rotations<T>(sub_key(key_, kRotations), rotations_);
      lsh_attention_forward<T>(q, v, rotations_, c, out, lsh_saved_);
      break;
    }
    case AttentionKind::Local: {
      const auto c = for_call(config_.local, masks, dropout);
      local_lse_ = View3<T>("local_lse", batch_, length_q_, h);
      local_attention_forward<T>(q, k, v, c, out, local_lse_);
      break;
    }
  }
}

template <class T>
void AttentionLayer<T>::output(View3<T> y) {
  auto yr = as_rows<T>(y);
  ops::matmul<T>(attended_, Trans::No, w_o_->matrix(), Trans::No, yr);
  if (config_.output_dropout > 0)
    ops::dropout_forward<T>(as_vector(yr), config_.output_dropout, sub_key(key_, kOutputDropout), 0,
                            as_vector(yr));
}

template <class T>
void AttentionLayer<T>::forward(In3<T> x, View3<T> y, RandomKey key,
                                Kokkos::View<const int**, Layout, MemSpace> key_valid) {
  require_extent("AttentionLayer::forward", "x", x, 2, config_.d_model);
  require_same_shape("AttentionLayer::forward", "x", x, "y", y);
  key_ = key;
  key_valid_ = key_valid;
  batch_ = x.extent(0);
  length_q_ = length_k_ = x.extent(1);
  project(x, x);
  attend();
  output(y);
}

template <class T>
void AttentionLayer<T>::forward_cross(In3<T> x, In3<T> memory, View3<T> y, RandomKey key,
                                      Kokkos::View<const int**, Layout, MemSpace> memory_valid) {
  const char* op = "AttentionLayer::forward_cross";
  require<ConfigError>(config_.kind == AttentionKind::Full && !config_.shared_qk, op,
                       ": cross-attention needs full attention with separate q and k, got ",
                       to_string(config_.kind), config_.shared_qk ? " (shared qk)" : "");
  require_extent(op, "x", x, 2, config_.d_model);
  require_extent(op, "memory", memory, 2, config_.d_model);
  require_same_shape(op, "x", x, "y", y);
  key_ = key;
  key_valid_ = memory_valid;
  batch_ = x.extent(0);
  length_q_ = x.extent(1);
  length_k_ = memory.extent(1);
  project(x, memory);
  attend();
  output(y);
}

template <class T>
void AttentionLayer<T>::backward_common(In3<T> dy, View2<T> dq, View2<T> dk, View2<T> dv) {
  // Output projection (and its dropout).
  View2<T> dy_rows("attention_dy", dy.extent(0) * dy.extent(1), dy.extent(2));
  Kokkos::deep_copy(dy_rows, as_rows<T>(dy));
  if (config_.output_dropout > 0)
    ops::dropout_backward<T>(as_vector(dy_rows), config_.output_dropout,
                             sub_key(key_, kOutputDropout), 0, as_vector(dy_rows));
  View2<T> dattended("attention_dout", attended_.extent(0), attended_.extent(1));
  ops::matmul<T>(dy_rows, Trans::No, w_o_->matrix(), Trans::Yes, dattended);
  ops::matmul<T>(attended_, Trans::Yes, dy_rows, Trans::No, w_o_->grad_matrix(), T(1), T(1));
  // The attention itself.
  auto q = query_heads(q_);
  auto k = key_heads(k_);
  auto v = key_heads(v_);
  auto out = query_heads(attended_);
  auto dout = query_heads(dattended);
  auto gq = query_heads(dq);
  auto gk = key_heads(dk);
  auto gv = key_heads(dv);
  const AttentionDropout dropout = call_dropout();
  const MaskOptions masks = call_masks();
  switch (config_.kind) {
    case AttentionKind::Full: {
      auto c = for_call(FullAttentionConfig{}, masks, dropout);
      c.self_mask = config_.shared_qk;
      full_attention_backward<T>(q, k, v, full_saved_, dout, c, gq, gk, gv);
      break;
    }
    case AttentionKind::Lsh:
      lsh_attention_backward<T>(q, v, lsh_saved_, dout, for_call(config_.lsh, masks, dropout), gq,
                                gv);
      break;
    case AttentionKind::Local:
      local_attention_backward<T>(q, k, v, out, local_lse_, dout,
                                  for_call(config_.local, masks, dropout), gq, gk, gv);
      break;
  }
}

template <class T>
void AttentionLayer<T>::backward(In3<T> x, In3<T> dy, View3<T> dx) {
  const char* op = "AttentionLayer::backward";
  require<ConfigError>(
      batch_ == Index(x.extent(0)) && length_q_ == Index(x.extent(1)) && length_q_ == length_k_, op,
      ": no self-attention forward on an input of shape ", shape_string(x));
  require_same_shape(op, "x", x, "dy", dy);
  require_same_shape(op, "x", x, "dx", dx);
  const Index rows = q_.extent(0), inner = q_.extent(1);
  View2<T> dq("attention_dq", rows, inner), dv("attention_dv", rows, inner);
  // LSH returns one gradient for the shared qk; shared-QK full attention returns
  // separate q and k gradients of the same projection, which add up.
  const bool full_shared = !w_k_ && config_.kind == AttentionKind::Full;
  View2<T> dk = w_k_ || full_shared ? View2<T>("attention_dk", rows, inner) : View2<T>();
  backward_common(dy, dq, dk, dv);
  if (full_shared) add_into<T>(dk, dq);
  // Projections: dx = dq W_q^T + dk W_k^T + dv W_v^T, dW += x^T d(.).
  const auto xr = as_rows<T>(x);
  auto dxr = as_rows<T>(dx);
  ops::matmul<T>(dq, Trans::No, w_q_->matrix(), Trans::Yes, dxr);
  ops::matmul<T>(xr, Trans::Yes, dq, Trans::No, w_q_->grad_matrix(), T(1), T(1));
  if (w_k_) {
    ops::matmul<T>(dk, Trans::No, w_k_->matrix(), Trans::Yes, dxr, T(1), T(1));
    ops::matmul<T>(xr, Trans::Yes, dk, Trans::No, w_k_->grad_matrix(), T(1), T(1));
  }
  ops::matmul<T>(dv, Trans::No, w_v_->matrix(), Trans::Yes, dxr, T(1), T(1));
  ops::matmul<T>(xr, Trans::Yes, dv, Trans::No, w_v_->grad_matrix(), T(1), T(1));
}

template <class T>
void AttentionLayer<T>::backward_cross(In3<T> x, In3<T> memory, In3<T> dy, View3<T> dx,
                                       View3<T> dmemory) {
  const char* op = "AttentionLayer::backward_cross";
  require<ConfigError>(batch_ == Index(x.extent(0)) && length_q_ == Index(x.extent(1)) &&
                           length_k_ == Index(memory.extent(1)),
                       op, ": no cross-attention forward on inputs of shapes ", shape_string(x),
                       " and ", shape_string(memory));
  require_same_shape(op, "x", x, "dx", dx);
  require_same_shape(op, "memory", memory, "dmemory", dmemory);
  const Index inner = q_.extent(1);
  View2<T> dq("attention_dq", q_.extent(0), inner), dk("attention_dk", k_.extent(0), inner),
      dv("attention_dv", v_.extent(0), inner);
  backward_common(dy, dq, dk, dv);
  const auto xr = as_rows<T>(x);
  const auto mr = as_rows<T>(memory);
  ops::matmul<T>(dq, Trans::No, w_q_->matrix(), Trans::Yes, as_rows<T>(dx));
  ops::matmul<T>(xr, Trans::Yes, dq, Trans::No, w_q_->grad_matrix(), T(1), T(1));
  auto dmr = as_rows<T>(dmemory);
  ops::matmul<T>(dk, Trans::No, w_k_->matrix(), Trans::Yes, dmr);
  ops::matmul<T>(dv, Trans::No, w_v_->matrix(), Trans::Yes, dmr, T(1), T(1));
  ops::matmul<T>(mr, Trans::Yes, dk, Trans::No, w_k_->grad_matrix(), T(1), T(1));
  ops::matmul<T>(mr, Trans::Yes, dv, Trans::No, w_v_->grad_matrix(), T(1), T(1));
}

template class AttentionLayer<float>;
template class AttentionLayer<double>;

}  // namespace reformer::attention
