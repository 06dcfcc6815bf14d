#include "reformer/attention/attention_layer.hpp"

#include "attention/attention_checks.hpp"

#include "reformer/attention/shared_qk.hpp"
#include "reformer/core/initializers.hpp"
#include "reformer/core/instantiate.hpp"
#include "reformer/core/shape.hpp"
#include "reformer/core/team_scratch.hpp"
#include "reformer/ops/dropout.hpp"
#include "reformer/ops/elementwise.hpp"
#include "reformer/ops/gemm.hpp"
#include "reformer/ops/layer_norm.hpp"
#include "reformer/ops/rows_linear.hpp"
#include "reformer/ops/softmax.hpp"

#include <algorithm>
#include <cmath>

namespace reformer::attention {
namespace {

using ops::Trans;

// Streams of one forward call's randomness.
enum Stream : std::uint64_t { kRotations = 1, kAttentionDropout = 2, kOutputDropout = 3 };

RandomKey sub_key(RandomKey key, Stream stream) {
  return {key.seed, stream_id(key.stream, stream)};
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

// Full and exact attention with shared q/k score against the normalised
// queries, as LSH does (shared_qk.hpp), so the scale is already in the keys;
// the own position is masked.
FullAttentionConfig full_config(bool shared_qk) {
  FullAttentionConfig full;
  full.self_mask = shared_qk;
  full.scale = shared_qk ? 1.0 : 0.0;
  return full;
}

// The first cached position that the query at `last` sees: local attention
// (chunk > 0) starts at the n_before-th chunk before the query's; otherwise 0.
KOKKOS_INLINE_FUNCTION Index first_cached(Index last, Index chunk, Index n_before) {
  if (chunk <= 0) return 0;
  const Index start = (last / chunk - n_before) * chunk;
  return start > 0 ? start : 0;
}

// The position of each row in a decoding step: per_row(b), or `all` for every
// row when per_row is empty (one position for the whole batch, as in the
// fixed-position step and cross-attention: no view to fill, so no launch).
struct RowPositions {
  Kokkos::View<const Index*, Layout, MemSpace> per_row;
  Index all = 0;
  KOKKOS_INLINE_FUNCTION Index operator()(Index b) const {
    return per_row.extent(0) > 0 ? per_row(b) : all;
  }
};

// The new position's key and value of a decoding step, written into the
// caches by the kernel that attends (one launch fewer a layer; LSH's step
// writes them in its hashing launch, lsh_attention_step): k_cache(b,
// positions(b), :) = k(b, :) and the same for v. shared: k holds the projected
// queries, and each head's key is its query normalised (shared_qk.hpp, the
// same bits as shared_keys). Empty k: nothing to write.
template <class T>
struct CacheWrite {
  Kokkos::View<const T**, Layout, MemSpace> k, v;
  View3<T> k_cache, v_cache;
  bool shared = false;
};

// Cached attention of one query per sequence (decoding):
//   a(b, h) = sum_{j = first(b)..last(b)} softmax_j(scale q(b, h) . k(b, j, h)) v(b, j, h)
// with first(b) = first_cached(last(b), chunk, n_before), over the positions
// whose key_valid is 1 (all when key_valid is empty); with self_mask (shared q
// and k) position last(b), the query's own, scores MaskValues::self. `widest`
// bounds last(b) - first(b) + 1. With `write`, each team first writes its
// head's new key and value at last(b) (CacheWrite).
template <class T>
void attend_cached(In2<T> q, In3<T> k, In3<T> v, Index chunk, Index n_before, RowPositions last,
                   Index widest, Kokkos::View<const int**, Layout, MemSpace> key_valid,
                   bool self_mask, Index heads, Index d_head, T scale, View2<T> a,
                   Workspace& workspace, const CacheWrite<T>& write = {}) {
  using C = compute_t<T>;
  const Index batch = q.extent(0);
  const bool masked = key_valid.extent(0) > 0, writes = write.k.extent(0) > 0;
  Workspace::Frame frame(workspace);
  auto scores = frame.take<View2<T>>(batch * heads, widest);
  // One team per (batch, head), one launch: the cache write, scores, softmax, values.
  Kokkos::parallel_for(
      "attend_cached", TeamPolicy(batch * heads, Kokkos::AUTO),
      KOKKOS_LAMBDA(const TeamMember& team) {
        const Index bh = team.league_rank(), b = bh / heads, h = bh % heads;
        const Index first = first_cached(last(b), chunk, n_before), n = last(b) - first + 1;
        if (writes) {
          const Index p = last(b), o = h * d_head;
          const T* from = &write.k(b, o);
          const C f = write.shared ? detail::shared_key_factor(from, d_head) : C(1);
          Kokkos::parallel_for(Kokkos::TeamThreadRange(team, d_head), [&](Index x) {
            write.k_cache(b, p, o + x) = write.shared ? store<T>(load(from[x]) * f) : from[x];
            write.v_cache(b, p, o + x) = write.v(b, o + x);
          });
          // The scores below read the key just written (the team's own writes).
          team.team_barrier();
        }
        T* row = &scores(bh, 0);
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, n), [&](Index j) {
          const Index pos = first + j;
          if (masked && key_valid(b, pos) == 0) {
            row[j] = T(-1e30);  // padded: exp underflows to 0 after the row maximum
          } else if (self_mask && pos == last(b)) {
            row[j] = T(MaskValues<T>::self);
          } else {
            T s = 0;
            for (Index x = 0; x < d_head; ++x)
              s += q(b, h * d_head + x) * k(b, pos, h * d_head + x);
            row[j] = scale * s;
          }
        });
        team.team_barrier();
        ops::team_softmax_row<false>(team, row, row, n);
        team.team_barrier();
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, d_head), [&](Index x) {
          T sum = 0;
          for (Index j = 0; j < n; ++j) sum += row[j] * v(b, first + j, h * d_head + x);
          a(b, h * d_head + x) = sum;
        });
      });
}

}  // namespace

AttentionKind parse_attention_kind(const std::string& name) {
  if (name == "full") return AttentionKind::Full;
  if (name == "lsh") return AttentionKind::Lsh;
  if (name == "local") return AttentionKind::Local;
  if (name == "exact") return AttentionKind::Exact;
  throw ConfigError("attention: unknown kind '" + name + "' (expected full, lsh, local or exact)");
}

const char* to_string(AttentionKind kind) {
  switch (kind) {
    case AttentionKind::Full:
      return "full";
    case AttentionKind::Lsh:
      return "lsh";
    case AttentionKind::Local:
      return "local";
    case AttentionKind::Exact:
      return "exact";
  }
  return "?";
}

bool AttentionLayerConfig::shares_qk() const {
  if (shared_qk) return *shared_qk;
  return kind == AttentionKind::Lsh;
}

void AttentionLayerConfig::validate() const {
  const char* op = "AttentionLayerConfig";
  require<ConfigError>(d_model > 0 && heads > 0 && d_head > 0, op,
                       ": d_model, heads and d_head must be positive, got ", d_model, ", ", heads,
                       ", ", d_head);
  require<ConfigError>(d_head <= kMaxHeadDim || kind == AttentionKind::Full, op, ": d_head is ",
                       d_head, " but ", to_string(kind), " attention supports at most ",
                       kMaxHeadDim);
  require<ConfigError>(!(kind == AttentionKind::Local && shares_qk()), op,
                       ": shared_qk is true but local attention has separate q and k; leave "
                       "shared_qk unset or false");
  require<ConfigError>(!(kind == AttentionKind::Lsh && !shares_qk()), op,
                       ": shared_qk is false but LSH attention always shares q and k (keys are "
                       "the normalised queries); leave shared_qk unset or true");
  require<ConfigError>(attention_dropout >= 0.0 && attention_dropout < 1.0, op,
                       ": attention_dropout is ", attention_dropout, " but must be in [0, 1)");
  require<ConfigError>(output_dropout >= 0.0 && output_dropout < 1.0, op, ": output_dropout is ",
                       output_dropout, " but must be in [0, 1)");
  if (kind == AttentionKind::Lsh) lsh.validate();
  if (kind == AttentionKind::Local) local.validate();
}

template <class T>
void AttentionState<T>::release(bool keep_plan) {
  const AttentionLayerCall kept_call = call;
  LshPlan kept_plan = keep_plan ? plan : LshPlan();
  *this = AttentionState<T>();
  if (keep_plan) {
    call = kept_call;
    plan = kept_plan;
  }
}

template <class T>
void AttentionState<T>::use_plan_of(const AttentionState& other) {
  call = other.call;
  cross = other.cross;
  plan = other.plan;
}

template <class T>
AttentionLayer<T>::AttentionLayer(const std::string& prefix, const AttentionLayerConfig& config,
                                  ParameterSet<param_t<T>>& params)
    : config_(config) {
  config_.validate();
  const bool shared = config_.shares_qk();
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
    if (p) init_xavier_uniform(*p, {key.seed, stream_id(key.stream, ++i)});
}

template <class T>
double AttentionLayer<T>::attention_rate(const AttentionLayerCall& call) const {
  return call.training ? config_.attention_dropout : 0.0;
}

template <class T>
AttentionDropout AttentionLayer<T>::attention_dropout(const AttentionLayerCall& call) const {
  return {attention_rate(call), sub_key(call.key, kAttentionDropout), call.first_row};
}

template <class T>
double AttentionLayer<T>::output_rate(const AttentionLayerCall& call) const {
  return call.training ? config_.output_dropout : 0.0;
}

template <class T>
void AttentionLayer<T>::run(In3<T> x, In3<T> memory, View3<T> y, AttentionState<T>& state,
                            Workspace& workspace, Save save, bool reuse_plan) const {
  using C = compute_t<T>;
  using P = param_t<T>;
  const Index batch = x.extent(0), lq = x.extent(1), lk = memory.extent(1);
  const Index h = config_.heads, d = config_.d_head, inner = h * d;
  const bool keep = save == Save::All;
  Workspace::Frame frame(workspace);
  // Activations live in the state when they are kept, else in the workspace.
  auto matrix = [&](View2<T>& slot, const char* label, Index rows) {
    return keep ? ensure_view(slot, label, rows, inner) : frame.take<View2<T>>(rows, inner);
  };
  state.saved = false;
  const View2<T> q = matrix(state.q, "attention_q", batch * lq);
  const View2<T> k = w_k_ ? matrix(state.k, "attention_k", batch * lk) : q;
  const View2<T> v = matrix(state.v, "attention_v", batch * lk);
  const View2<T> attended = matrix(state.attended, "attention_attended", batch * lq);
  if (!w_k_) state.k = View2<T>();
  const auto xr = as_rows<T>(x);
  const auto mr = as_rows<T>(memory);
  if (!state.cross) {
    if (w_k_)
      ops::projections_forward<T>(xr, {w_q_->matrix(), w_k_->matrix(), w_v_->matrix()}, {q, k, v});
    else
      ops::projections_forward<T>(xr, {w_q_->matrix(), w_v_->matrix()}, {q, v});
  } else {
    ops::product<T, P, T>(xr, Trans::No, w_q_->matrix(), Trans::No, q);
    ops::projections_forward<T>(mr, {w_k_->matrix(), w_v_->matrix()}, {k, v});
  }
  const auto qh = per_head(q, batch, lq, h, d), kh = per_head(k, batch, lk, h, d);
  const auto vh = per_head(v, batch, lk, h, d), out = per_head(attended, batch, lq, h, d);
  const AttentionCall call{{config_.causal && !state.cross, state.call.key_valid},
                           attention_dropout(state.call)};
  auto lse = [&] {
    return keep ? ensure_view(state.lse, "attention_lse", batch, lq, h)
                : frame.take<View3<C>>(batch, lq, h);
  };
  // Full and exact attention with shared q/k score against the normalised queries.
  View4<T> keys = kh;
  if (!w_k_ && (config_.kind == AttentionKind::Full || config_.kind == AttentionKind::Exact)) {
    auto scale = frame.take<View3<C>>(batch, lq, h);
    keys = frame.take<View4<T>>(batch, lq, h, d);
    shared_key_scale<T>(qh, scale);
    shared_keys<T>(qh, scale, keys);
  }
  switch (config_.kind) {
    case AttentionKind::Full: {
      FullAttentionSaved<T> temporary;
      if (!keep) {
        check_full_attention_fits(batch, h, lq, lk, sizeof(T), attention_rate(state.call) > 0);
        temporary.probs = frame.take<View3<T>>(batch * h, lq, lk);
      }
      full_attention_forward<T>(qh, keys, vh, full_config(!w_k_), call, out,
                                keep ? state.full : temporary, workspace);
      break;
    }
    case AttentionKind::Lsh: {
      if (!reuse_plan) {
        Workspace::Frame rotation_frame(workspace);
        auto rotations = rotation_frame.take<View4<C>>(h, d, config_.lsh.n_hashes,
                                                       lsh_rotation_width(config_.lsh, lq));
        lsh_random_rotations<C>(sub_key(state.call.key, kRotations), rotations);
        lsh_build_plan<T>(qh, rotations, config_.lsh, call.masks, state.plan, workspace);
      }
      lsh_attention_forward<T>(qh, vh, state.plan, config_.lsh, call, out, lse(), workspace);
      break;
    }
    case AttentionKind::Local:
      local_attention_forward<T>(qh, kh, vh, config_.local, call, out, lse());
      break;
    case AttentionKind::Exact:
      exact_attention_forward<T>(qh, keys, vh, full_config(!w_k_), call, out, lse(), workspace);
      break;
  }
  // Output projection and its dropout.
  auto yr = as_rows<T>(y);
  ops::product<T, P, T>(attended, Trans::No, w_o_->matrix(), Trans::No, yr);
  if (output_rate(state.call) > 0)
    ops::dropout_forward<T>(
        as_vector(yr), output_rate(state.call), sub_key(state.call.key, kOutputDropout),
        ops::dropout_offset(state.call.first_row, row_elements(y)), as_vector(yr));
  state.batch = batch;
  state.length_q = lq;
  state.length_k = lk;
  state.saved = keep;
}

template <class T>
void AttentionLayer<T>::forward(In3<T> x, View3<T> y, const AttentionLayerCall& call,
                                AttentionState<T>& state, Workspace& workspace, Save save) const {
  require_extent("AttentionLayer::forward", "x", x, 2, config_.d_model);
  require_same_shape("AttentionLayer::forward", "x", x, "y", y);
  state.call = call;
  state.cross = false;
  run(x, x, y, state, workspace, save, /*reuse_plan=*/false);
}

template <class T>
void AttentionLayer<T>::recompute(In3<T> x, View3<T> y, AttentionState<T>& state,
                                  Workspace& workspace) const {
  const char* op = "AttentionLayer::recompute";
  require_extent(op, "x", x, 2, config_.d_model);
  require_same_shape(op, "x", x, "y", y);
  require<ConfigError>(!state.cross, op, ": the state holds a cross-attention call");
  if (config_.kind == AttentionKind::Lsh)
    require<ConfigError>(!state.plan.empty() && state.plan.batch == Index(x.extent(0)) &&
                             state.plan.length == Index(x.extent(1)),
                         op, ": the state has no LSH plan for an input of shape ", shape_string(x),
                         "; run forward (Save::PlanOnly or Save::All) on it first");
  run(x, x, y, state, workspace, Save::All, /*reuse_plan=*/config_.kind == AttentionKind::Lsh);
}

template <class T>
void AttentionLayer<T>::forward_cross(In3<T> x, In3<T> memory, View3<T> y,
                                      const AttentionLayerCall& call, AttentionState<T>& state,
                                      Workspace& workspace, Save save) const {
  const char* op = "AttentionLayer::forward_cross";
  require<ConfigError>(
      (config_.kind == AttentionKind::Full || config_.kind == AttentionKind::Exact) &&
          w_k_ != nullptr,
      op, ": cross-attention needs full or exact attention with separate q and k, got ",
      to_string(config_.kind), w_k_ ? "" : " (shared qk)");
  require_extent(op, "x", x, 2, config_.d_model);
  require_extent(op, "memory", memory, 2, config_.d_model);
  require_same_shape(op, "x", x, "y", y);
  require<ShapeError>(x.extent(0) == memory.extent(0), op, ": x has batch ", x.extent(0),
                      " but memory has batch ", memory.extent(0));
  state.call = call;
  state.cross = true;
  run(x, memory, y, state, workspace, save, /*reuse_plan=*/false);
}

template <class T>
void AttentionLayer<T>::attention_backward(const AttentionState<T>& state, In3<T> dy, View2<T> dq,
                                           View2<T> dk, View2<T> dv, Workspace& workspace) const {
  using P = param_t<T>;
  const Index batch = state.batch, lq = state.length_q, lk = state.length_k;
  const Index h = config_.heads, d = config_.d_head, inner = h * d;
  Workspace::Frame frame(workspace);
  // Output projection (and its dropout).
  Kokkos::View<const T**, Layout, MemSpace> dy_rows = as_rows<T>(dy);
  if (output_rate(state.call) > 0) {
    auto dropped = frame.take<View2<T>>(batch * lq, config_.d_model);
    ops::dropout_backward<T>(
        as_vector(dy_rows), output_rate(state.call), sub_key(state.call.key, kOutputDropout),
        ops::dropout_offset(state.call.first_row, row_elements(dy)), as_vector(dropped));
    dy_rows = dropped;
  }
  auto dattended = frame.take<View2<T>>(batch * lq, inner);
  ops::product<T, P, T>(dy_rows, Trans::No, w_o_->matrix(), Trans::Yes, dattended);
  ops::product<T, T, P>(state.attended, Trans::Yes, dy_rows, Trans::No, w_o_->grad_matrix(), 1, 1);
  // The attention itself.
  const View2<T> k = state.k.data() ? state.k : state.q;
  const auto qh = per_head(state.q, batch, lq, h, d), kh = per_head(k, batch, lk, h, d);
  const auto vh = per_head(state.v, batch, lk, h, d);
  const auto out = per_head(state.attended, batch, lq, h, d);
  const auto dout = per_head(dattended, batch, lq, h, d);
  const auto gq = per_head(dq, batch, lq, h, d), gv = per_head(dv, batch, lk, h, d);
  const AttentionCall call{{config_.causal && !state.cross, state.call.key_valid},
                           attention_dropout(state.call)};
  switch (config_.kind) {
    case AttentionKind::Full:
    case AttentionKind::Exact: {
      const bool full = config_.kind == AttentionKind::Full;
      if (w_k_) {
        const auto gk = per_head(dk, batch, lk, h, d);
        if (full)
          full_attention_backward<T>(qh, kh, vh, state.full, dout, full_config(false), call, gq, gk,
                                     gv, workspace);
        else
          exact_attention_backward<T>(qh, kh, vh, out, state.lse, dout, full_config(false), call,
                                      gq, gk, gv, workspace);
        break;
      }
      // Shared q/k: rebuild the normalised keys, then send their gradient
      // through the normalisation into the one q/k gradient.
      auto scale = frame.take<View3<compute_t<T>>>(batch, lq, h);
      auto keys = frame.take<View4<T>>(batch, lq, h, d);
      auto dkeys = frame.take<View4<T>>(batch, lq, h, d);
      shared_key_scale<T>(qh, scale);
      shared_keys<T>(qh, scale, keys);
      if (full)
        full_attention_backward<T>(qh, keys, vh, state.full, dout, full_config(true), call, gq,
                                   dkeys, gv, workspace);
      else
        exact_attention_backward<T>(qh, keys, vh, out, state.lse, dout, full_config(true), call, gq,
                                    dkeys, gv, workspace);
      shared_keys_backward<T>(qh, scale, dkeys, gq);
      break;
    }
    case AttentionKind::Lsh:
      lsh_attention_backward<T>(qh, vh, state.plan, out, state.lse, dout, config_.lsh, call, gq, gv,
                                workspace);
      break;
    case AttentionKind::Local:
      local_attention_backward<T>(qh, kh, vh, out, state.lse, dout, config_.local, call, gq,
                                  per_head(dk, batch, lk, h, d), gv, workspace);
      break;
  }
}

template <class T>
void AttentionLayer<T>::backward(In3<T> x, In3<T> dy, View3<T> dx, const AttentionState<T>& state,
                                 Workspace& workspace, compute_t<T> beta) const {
  using P = param_t<T>;
  const char* op = "AttentionLayer::backward";
  require<ConfigError>(state.saved && !state.cross, op,
                       ": the state holds no self-attention forward pass; run forward with "
                       "Save::All (or recompute) first");
  require<ShapeError>(state.batch == Index(x.extent(0)) && state.length_q == Index(x.extent(1)), op,
                      ": the state holds a forward pass of batch ", state.batch, " and length ",
                      state.length_q, " but x has shape ", shape_string(x));
  require_same_shape(op, "x", x, "dy", dy);
  require_same_shape(op, "x", x, "dx", dx);
  const Index rows = state.q.extent(0), inner = state.q.extent(1);
  Workspace::Frame frame(workspace);
  auto dq = frame.take<View2<T>>(rows, inner);
  auto dv = frame.take<View2<T>>(rows, inner);
  // With shared q/k every variant returns one gradient for the shared projection.
  View2<T> dk = w_k_ ? frame.take<View2<T>>(rows, inner) : View2<T>();
  attention_backward(state, dy, dq, dk, dv, workspace);
  // Projections: dx = beta dx + dq W_q^T + dk W_k^T + dv W_v^T, dW += x^T d(.).
  const auto xr = as_rows<T>(x);
  auto dxr = as_rows<T>(dx);
  if (w_k_)
    ops::projections_backward<T>(xr, {w_q_->matrix(), w_k_->matrix(), w_v_->matrix()}, {dq, dk, dv},
                                 dxr, beta,
                                 {w_q_->grad_matrix(), w_k_->grad_matrix(), w_v_->grad_matrix()});
  else
    ops::projections_backward<T>(xr, {w_q_->matrix(), w_v_->matrix()}, {dq, dv}, dxr, beta,
                                 {w_q_->grad_matrix(), w_v_->grad_matrix()});
}

template <class T>
void AttentionLayer<T>::backward_cross(In3<T> x, In3<T> memory, In3<T> dy, View3<T> dx,
                                       View3<T> dmemory, const AttentionState<T>& state,
                                       Workspace& workspace, compute_t<T> beta) const {
  const char* op = "AttentionLayer::backward_cross";
  require<ConfigError>(state.saved && state.cross, op,
                       ": the state holds no cross-attention forward pass; run forward_cross "
                       "with Save::All first");
  require<ShapeError>(state.batch == Index(x.extent(0)) && state.length_q == Index(x.extent(1)) &&
                          state.length_k == Index(memory.extent(1)),
                      op, ": the state holds a forward pass of batch ", state.batch, ", Lq ",
                      state.length_q, " and Lk ", state.length_k, " but x has shape ",
                      shape_string(x), " and memory ", shape_string(memory));
  require_same_shape(op, "x", x, "dx", dx);
  require_same_shape(op, "memory", memory, "dmemory", dmemory);
  const Index inner = state.q.extent(1);
  Workspace::Frame frame(workspace);
  auto dq = frame.take<View2<T>>(state.q.extent(0), inner);
  auto dk = frame.take<View2<T>>(state.k.extent(0), inner);
  auto dv = frame.take<View2<T>>(state.v.extent(0), inner);
  attention_backward(state, dy, dq, dk, dv, workspace);
  const auto xr = as_rows<T>(x);
  const auto mr = as_rows<T>(memory);
  using P = param_t<T>;
  ops::product<T, P, T>(dq, Trans::No, w_q_->matrix(), Trans::Yes, as_rows<T>(dx), 1, beta);
  ops::product<T, T, P>(xr, Trans::Yes, dq, Trans::No, w_q_->grad_matrix(), 1, 1);
  auto dmr = as_rows<T>(dmemory);
  ops::product<T, P, T>(dk, Trans::No, w_k_->matrix(), Trans::Yes, dmr, 1, 1);
  ops::product<T, P, T>(dv, Trans::No, w_v_->matrix(), Trans::Yes, dmr, 1, 1);
  ops::product<T, T, P>(mr, Trans::Yes, dk, Trans::No, w_k_->grad_matrix(), 1, 1);
  ops::product<T, T, P>(mr, Trans::Yes, dv, Trans::No, w_v_->grad_matrix(), 1, 1);
}

template <class T>
void AttentionLayer<T>::require_cacheable(const char* op) const {
  require<ConfigError>(!config_.shares_qk() && config_.kind != AttentionKind::Lsh, op,
                       ": cross-attention needs separate q and k projections, but this ",
                       to_string(config_.kind), " layer shares them");
}

template <class T>
void AttentionLayer<T>::project_keys(In2<T> x, View2<T> q, View2<T> k, View2<T> v,
                                     Workspace& workspace) const {
  const Index n = x.extent(0), h = config_.heads, d = config_.d_head;
  Workspace::Frame frame(workspace);
  if (w_k_) {
    if (q.extent(0)) ops::matmul<T>(x, Trans::No, w_q_->matrix(), Trans::No, q);
    ops::matmul<T>(x, Trans::No, w_k_->matrix(), Trans::No, k);
  } else {
    // Shared q and k: the keys are the normalised queries (shared_qk.hpp);
    // without k (a decoding step) the cache write forms them.
    const View2<T> qk = q.extent(0) ? q : frame.take<View2<T>>(n, h * d);
    ops::matmul<T>(x, Trans::No, w_q_->matrix(), Trans::No, qk);
    if (k.extent(0)) shared_keys<T>(per_head(qk, n, 1, h, d), per_head(k, n, 1, h, d));
  }
  ops::matmul<T>(x, Trans::No, w_v_->matrix(), Trans::No, v);
}

template <class T>
void AttentionLayer<T>::step_projections(In2<T> x, const ops::RowNorm<T>& norm, View2<T> q,
                                         View2<T> k, View2<T> v, Workspace& workspace) const {
  const Index rows = x.extent(0);
  if (ops::fused_step_rows(rows)) {
    // One launch: the layer norm and every projection (shared q/k: the cache
    // write normalises the keys from q, as project_keys leaves them).
    std::vector<ops::RowProduct<T>> products{{w_q_->matrix(), {}, q}};
    if (k.extent(0) > 0) products.push_back({w_k_->matrix(), {}, k});
    if (v.extent(0) > 0) products.push_back({w_v_->matrix(), {}, v});
    ops::rows_linear<T>(x, norm, products, std::nullopt, T(0));
    return;
  }
  Workspace::Frame frame(workspace);
  In2<T> input = x;
  if (norm.active()) {
    auto normed = frame.take<View2<T>>(rows, x.extent(1));
    auto mean = frame.take<View1<compute_t<T>>>(rows), rstd = frame.take<View1<compute_t<T>>>(rows);
    ops::layer_norm_forward<T>(x, norm.gamma, norm.beta, norm.eps, normed, mean, rstd);
    input = normed;
  }
  if (v.extent(0) == 0) {
    ops::matmul<T>(input, Trans::No, w_q_->matrix(), Trans::No, q);
    return;
  }
  project_keys(input, q, k, v, workspace);
}

template <class T>
void AttentionLayer<T>::step_output(In2<T> a, View2<T> y, T beta) const {
  if (ops::fused_step_rows(a.extent(0)))
    ops::rows_linear<T>(a, {}, {{w_o_->matrix(), {}, y}}, std::nullopt, beta);
  else
    ops::matmul<T>(a, Trans::No, w_o_->matrix(), Trans::No, y, T(1), beta);
}

template <class T>
void AttentionLayer<T>::start_cache(In3<T> x, const AttentionLayerCall& call, Index capacity,
                                    AttentionCache<T>& cache, Workspace& workspace) const {
  const char* op = "AttentionLayer::start_cache";
  require_extent(op, "x", x, 2, config_.d_model);
  const Index batch = x.extent(0), length = x.extent(1);
  const Index h = config_.heads, d = config_.d_head, inner = h * d;
  require<ShapeError>(capacity > 0, op, ": capacity is ", capacity, " but must be positive");
  const Index kept = std::min(length, capacity);  // positions cached
  const bool lsh = config_.kind == AttentionKind::Lsh;
  require<ConfigError>(!lsh || !config_.lsh.n_buckets.empty(), op,
                       ": cached LSH decoding needs a fixed bucket count; set "
                       "model.lsh.n_buckets (the trainer sets it from data.length)");
  ensure_view(cache.k, "attention_cache_k", batch, capacity, inner);
  ensure_view(cache.v, "attention_cache_v", batch, capacity, inner);
  Workspace::Frame frame(workspace);
  auto q = frame.take<View2<T>>(batch * length, inner);
  auto k = frame.take<View2<T>>(batch * length, inner);
  auto v = frame.take<View2<T>>(batch * length, inner);
  project_keys(as_rows<T>(x), lsh ? q : View2<T>(), k, v, workspace);
  const auto span = Kokkos::make_pair(Index(0), kept);
  Kokkos::deep_copy(
      Kokkos::subview(cache.k, Kokkos::ALL, span, Kokkos::ALL),
      Kokkos::subview(View3<T>(k.data(), batch, length, inner), Kokkos::ALL, span, Kokkos::ALL));
  Kokkos::deep_copy(
      Kokkos::subview(cache.v, Kokkos::ALL, span, Kokkos::ALL),
      Kokkos::subview(View3<T>(v.data(), batch, length, inner), Kokkos::ALL, span, Kokkos::ALL));
  if (!lsh) return;
  // The buckets the forward pass on x computes: the same rotations and hashing.
  const Index rounds = config_.lsh.n_hashes;
  ensure_view(cache.buckets, "attention_cache_buckets", batch * h, rounds, capacity);
  ensure_view(cache.rotations, "attention_cache_rotations", h, d, rounds,
              lsh_rotation_width(config_.lsh, capacity));
  lsh_random_rotations<T>(sub_key(call.key, kRotations), cache.rotations);
  // Only the hashing: the cache needs the buckets, not their sorted order.
  const auto planned = frame.take<LshPlan::Ints>(batch * h, rounds * length);
  lsh_hash<T>(per_head(q, batch, length, h, d), cache.rotations, config_.lsh,
              {config_.causal, call.key_valid}, planned);
  const auto buckets = cache.buckets;
  using Policy3 = Kokkos::MDRangePolicy<ExecSpace, Kokkos::Rank<3>>;
  Kokkos::parallel_for(
      "attention_cache_buckets", Policy3({0, 0, 0}, {batch * h, rounds, kept}),
      KOKKOS_LAMBDA(Index bh, Index r, Index i) {
        buckets(bh, r, i) = planned(bh, r * length + i);
      });
}

template <class T>
void AttentionLayer<T>::step(In2<T> x, AttentionCache<T>& cache,
                             Kokkos::View<const Index*, Layout, MemSpace> positions,
                             Index max_position, View2<T> y, Workspace& workspace, T beta,
                             const ops::RowNorm<T>& norm) const {
  const char* op = "AttentionLayer::step";
  const Index batch = x.extent(0), h = config_.heads, d = config_.d_head, inner = h * d;
  require_extent(op, "x", x, 1, config_.d_model);
  require<ShapeError>(Index(cache.k.extent(0)) == batch && Index(cache.k.extent(2)) == inner &&
                          max_position >= 0 && max_position < cache.capacity() &&
                          (positions.extent(0) == 0 || Index(positions.extent(0)) == batch),
                      op, ": position ", max_position, " does not fit the cache of shape ",
                      shape_string(cache.k), " for a batch of ", batch, " and ",
                      positions.extent(0), " row positions (expected ", batch,
                      ", or none for every row at position ", max_position, ")");
  const bool lsh = config_.kind == AttentionKind::Lsh;
  require<ConfigError>(!lsh || cache.rotations.extent(0) > 0, op,
                       ": the LSH cache has no rotations; fill it with start_cache first");
  require<ShapeError>(!lsh || positions.extent(0) > 0, op,
                      ": an LSH step needs the position of each row (got none)");
  const RowPositions rows{positions, max_position};
  Workspace::Frame frame(workspace);
  auto q = frame.take<View2<T>>(batch, inner);
  // Shared QK: no key here; the cache write forms it from the query.
  const bool shared_qk = !w_k_;
  auto k = shared_qk ? View2<T>() : frame.take<View2<T>>(batch, inner);
  auto v = frame.take<View2<T>>(batch, inner);
  auto a = frame.take<View2<T>>(batch, inner);
  step_projections(x, norm, q, k, v, workspace);
  const CacheWrite<T> write{shared_qk ? q : k, v, cache.k, cache.v, shared_qk};
  if (lsh) {
    // (LSH always shares q and k.) One small launch hashes the query into the
    // cache's buckets and writes its key and value; then the sort and the
    // windows among the cached buckets.
    lsh_attention_step<T>(View3<T>(q.data(), batch, h, d), v, cache.rotations, cache.k, cache.v,
                          cache.buckets, positions, max_position, config_.lsh,
                          View3<T>(a.data(), batch, h, d), workspace);
  } else {
    // Causal: positions up to this one; local: from the start of the n_before-th
    // chunk before this position's chunk.
    const bool local = config_.kind == AttentionKind::Local;
    const Index chunk = local ? config_.local.chunk : 0, n_before = config_.local.n_before;
    const Index widest =
        local ? std::min(max_position + 1, (n_before + 1) * chunk) : max_position + 1;
    const T scale = detail::dense_score_scale<T>(full_config(shared_qk), d);
    attend_cached<T>(q, cache.k, cache.v, chunk, n_before, rows, widest, {}, shared_qk, h, d, scale,
                     a, workspace, write);
  }
  step_output(a, y, beta);
}

template <class T>
void AttentionLayer<T>::step(In2<T> x, View3<T> k_cache, View3<T> v_cache, Index position,
                             View2<T> y, Workspace& workspace, T beta,
                             const ops::RowNorm<T>& norm) const {
  require<ConfigError>(config_.kind != AttentionKind::Lsh, "AttentionLayer::step",
                       ": an LSH layer decodes with a cache from start_cache (its buckets and "
                       "rotations)");
  AttentionCache<T> cache;
  cache.k = k_cache;
  cache.v = v_cache;
  // Every row at `position`: no positions view (and no launch to fill one).
  step(x, cache, {}, position, y, workspace, beta, norm);
}

template <class T>
void AttentionLayer<T>::step_cross(In2<T> x, In3<T> k, In3<T> v,
                                   Kokkos::View<const int**, Layout, MemSpace> key_valid,
                                   View2<T> y, Workspace& workspace, T beta,
                                   const ops::RowNorm<T>& norm) const {
  const char* op = "AttentionLayer::step_cross";
  require_cacheable(op);
  const Index batch = x.extent(0), inner = config_.heads * config_.d_head;
  require<ShapeError>(Index(k.extent(0)) == batch && Index(k.extent(2)) == inner, op,
                      ": the keys have shape ", shape_string(k), " for a batch of ", batch, " and ",
                      inner, " projected features");
  Workspace::Frame frame(workspace);
  auto q = frame.take<View2<T>>(batch, inner);
  auto a = frame.take<View2<T>>(batch, inner);
  step_projections(x, norm, q, View2<T>(), View2<T>(), workspace);
  const T scale = detail::dense_score_scale<T>(full_config(false), config_.d_head);
  // Every row's query sees every memory position: the last one is Lk - 1.
  const RowPositions last{{}, Index(k.extent(1)) - 1};
  attend_cached<T>(q, k, v, 0, 0, last, Index(k.extent(1)), key_valid, false, config_.heads,
                   config_.d_head, scale, a, workspace);
  step_output(a, y, beta);
}

template <class T>
void AttentionLayer<T>::project_memory(In3<T> memory, View3<T> k, View3<T> v) const {
  require_cacheable("AttentionLayer::project_memory");
  ops::matmul<T>(as_rows<T>(memory), Trans::No, w_k_->matrix(), Trans::No, as_rows<T>(k));
  ops::matmul<T>(as_rows<T>(memory), Trans::No, w_v_->matrix(), Trans::No, as_rows<T>(v));
}

template struct AttentionCache<float>;
template struct AttentionCache<double>;
template struct AttentionState<float>;
template struct AttentionState<double>;
template struct AttentionState<bf16>;
template class AttentionLayer<float>;
template class AttentionLayer<double>;
// bf16: the training calls only (see the header).
template AttentionLayer<bf16>::AttentionLayer(const std::string&, const AttentionLayerConfig&,
                                              ParameterSet<float>&);
template void AttentionLayer<bf16>::init(RandomKey);
template void AttentionLayer<bf16>::forward(In3<bf16>, View3<bf16>, const AttentionLayerCall&,
                                            AttentionState<bf16>&, Workspace&, Save) const;
template void AttentionLayer<bf16>::recompute(In3<bf16>, View3<bf16>, AttentionState<bf16>&,
                                              Workspace&) const;
template void AttentionLayer<bf16>::backward(In3<bf16>, In3<bf16>, View3<bf16>,
                                             const AttentionState<bf16>&, Workspace&, float) const;
// Cross-attention (full or exact: the encoder-decoder's decoder).
template void AttentionLayer<bf16>::forward_cross(In3<bf16>, In3<bf16>, View3<bf16>,
                                                  const AttentionLayerCall&, AttentionState<bf16>&,
                                                  Workspace&, Save) const;
template void AttentionLayer<bf16>::backward_cross(In3<bf16>, In3<bf16>, In3<bf16>, View3<bf16>,
                                                   View3<bf16>, const AttentionState<bf16>&,
                                                   Workspace&, float) const;

}  // namespace reformer::attention
