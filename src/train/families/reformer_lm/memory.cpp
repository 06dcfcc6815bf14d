// The Reformer language model's memory: its parameters and training step
// predicted from the shapes, its synthetic step, and its `reformer memory`
// variants (the rows of the paper's Table 3 plus local and exact attention).
#include "reformer/train/memory_sweep.hpp"

#include "reformer/core/error.hpp"
#include "reformer/core/random.hpp"
#include "reformer/core/tile_multiply.hpp"
#include "reformer/train/synthetic_step.hpp"
#include "train/sweep_detail.hpp"

#include <algorithm>
#include <cmath>
#include <map>

namespace reformer::train {

using attention::AttentionKind;
using sweep::find_variant;
using sweep::saturated_bytes;

template <class T>
SyntheticStep<T>::SyntheticStep(const models::ReformerConfig& config, Index batch, Index length)
    : model_(config, params_),
      adam_(params_),
      ids_("synthetic_ids", batch, length),
      targets_("synthetic_targets", batch, length) {
  model_.init({1, 1});
  sweep::fill_random_tokens(ids_, targets_, config.vocab);
  // Adam allocates its moments on the first update: make them part of the state.
  adam_.step(0.0);
  Kokkos::fence();
}

template <class T>
void SyntheticStep<T>::run(std::uint64_t n) {
  params_.zero_grad();
  model_.forward_backward(ids_, targets_, -1, {{7, n}, true}, state_);
  {
    ScopedMemoryPhase phase("optimizer");
    adam_.step(1e-4);
  }
  Kokkos::fence();
}

template class SyntheticStep<float>;
template class SyntheticStep<double>;
template class SyntheticStep<bf16>;

namespace {

struct VariantSpec {
  AttentionKind kind;
  Index n_hashes;  // 0: the base config's
  bool reversible;
  bool chunked;  // chunked feed-forward and loss
};

const std::map<std::string, VariantSpec>& variant_specs() {
  static const std::map<std::string, VariantSpec> specs = {
      {"full", {AttentionKind::Full, 0, false, false}},
      {"full-rev", {AttentionKind::Full, 0, true, false}},
      {"lsh-1", {AttentionKind::Lsh, 1, false, false}},
      {"lsh-2", {AttentionKind::Lsh, 2, false, false}},
      {"lsh-4", {AttentionKind::Lsh, 4, false, false}},
      {"lsh-8", {AttentionKind::Lsh, 8, false, false}},
      {"local", {AttentionKind::Local, 0, false, false}},
      {"exact", {AttentionKind::Exact, 0, false, false}},
      {"exact-rev", {AttentionKind::Exact, 0, true, false}},
      {"reformer", {AttentionKind::Lsh, 0, true, true}},
  };
  return specs;
}

}  // namespace

const char* sweep_base_model() {
  return R"([model]
vocab = 256
layers = 2
d_model = 256
d_ff = 1024
heads = 4
d_head = 64
attention = ["lsh"]
causal = true
positions = "axial"
max_length = 1024
ff_chunk = 1024
loss_chunk = 1024
[model.lsh]
chunk = 64
n_hashes = 2
[model.local]
chunk = 128
)";
}

const std::vector<std::string>& sweep_variant_names() {
  static const std::vector<std::string> names = {"full",      "full-rev", "lsh-1", "lsh-2",
                                                 "lsh-4",     "lsh-8",    "local", "exact",
                                                 "exact-rev", "reformer"};
  return names;
}

models::ReformerConfig variant_config(const std::string& variant, models::ReformerConfig base,
                                      Index length) {
  const VariantSpec& spec = find_variant(variant_specs(), variant);
  base.attention = {spec.kind};
  if (spec.n_hashes > 0) base.lsh.n_hashes = spec.n_hashes;
  base.reversible = spec.reversible;
  if (!spec.chunked) {
    base.ff_chunk = 0;
    base.loss_chunk = length;
  }
  base.max_length = length;
  base.axial_shape.clear();
  base.validate();
  base.validate_length(length);
  return base;
}

SweepPoint run_sweep_point(const std::string& variant, const models::ReformerConfig& base,
                           Index batch, Index length, const SweepOptions& options) {
  sweep::check_point(options, batch, length);
  const auto config = variant_config(variant, base, length);
  return sweep::run_point<SyntheticStep>(variant, config, config.layers, batch, length, options);
}

// Parameters of the model, counted from the config's shapes (as registered by
// ReformerLM, AttentionLayer and FeedForward).
std::int64_t predict_state_bytes(const models::ReformerConfig& c, std::int64_t scalar_bytes) {
  const double d = c.d_model, inner = double(c.heads) * c.d_head, f = c.d_ff, v = c.vocab;
  double count = v * d;  // embedding
  if (c.positions == models::PositionKind::Learned) count += double(c.max_length) * d;
  if (c.positions == models::PositionKind::Axial) {
    const auto shape = c.resolved_axial_shape();
    const auto dims = c.resolved_axial_dims();
    count += double(shape[0]) * dims[0] + double(shape[1]) * dims[1];
  }
  for (Index i = 0; i < c.layers; ++i) {
    const bool separate = !c.attention_config(i).shares_qk();
    count += 2 * d + (3 + separate) * d * inner;  // LayerNorm, w_q(k), w_k, w_v, w_o
    count += 2 * d + 2 * d * f + f + d;           // LayerNorm, w1, b1, w2, b2
  }
  count += 4 * d + v + (c.tie_embeddings ? 0 : 2 * d * v);  // LayerNorm(2d), b, W_out
  // Value, gradient and Adam's two moments.
  return saturated_bytes(4 * count * double(scalar_bytes));
}

RunMemory predict_run_memory(const models::ReformerConfig& config, Index batch, Index length,
                             std::int64_t scalar_bytes, bool training) {
  return sweep::run_memory(config, batch, length, scalar_bytes, training);
}

// Bytes of one training step above the state, from the shapes: what stays
// alive (the two streams and their gradients; per layer the stored activations
// or only the LSH plan) plus the workspace, which is as large as the deepest
// stack of temporaries of any call (docs/memory.md lists the terms). The model
// is the one of ReformerLM with its layers, blocks and attention variants.
StepMemory predict_step_memory(const models::ReformerConfig& c, Index batch, Index length,
                               std::int64_t scalar_bytes, std::int64_t activation_bytes) {
  // Bytes of a compute value (s: row statistics, logsumexps, key scales, the
  // loss's logits) and of a stored activation (a: bf16 or the same as s).
  const double s = double(scalar_bytes), a = activation_bytes > 0 ? double(activation_bytes) : s;
  const double x = double(batch) * length, d = c.d_model;
  const double heads = c.heads, inner = heads * c.d_head, f = c.d_ff, v = c.vocab;
  const double scores = double(batch) * heads * double(length) * length;  // one L x L per head
  const double ff_rows = c.ff_chunk > 0 ? std::min(double(c.ff_chunk), x) : x;
  const double loss_rows = std::min(double(c.loss_chunk), x);
  // Per kind (the largest layer of the stack decides the workspace); bytes.
  double stored = 0, plans = 0, scratch = 0, ws_forward = 0, ws_backward = 0;
  // The batched chunk shape's own workspace (attention/chunked_scratch.hpp):
  // its largest slice over the LSH and local layers.
  double chunk_slices = 0;
  for (Index i = 0; i < c.layers; ++i) {
    const AttentionKind kind = c.layer_kind(i);
    const auto layer = c.attention_config(i);
    const double k_sep = layer.shares_qk() ? 0 : 1;
    const double rounds = kind == AttentionKind::Lsh ? double(c.lsh.n_hashes) : 0;
    const bool full = kind == AttentionKind::Full;
    const bool dropout = c.attention_dropout > 0;
    // What AttentionState keeps (q, k, v, attended; lse; full: P) and the plan.
    const double attention_state =
        x * inner * (3 + k_sep) * a + (full ? scores * a : x * heads * s);
    const double plan_bytes = 3 * rounds * x * heads * 4;  // buckets, perm, undo (int)
    plans += plan_bytes;
    if (!c.reversible) stored += 2 * x * d * a + attention_state;  // + block inputs
    scratch = std::max(scratch, c.reversible ? attention_state : 0.0);
    chunk_slices = std::max(chunk_slices, sweep::chunk_slice_bytes(kind, c.lsh, c.local, batch,
                                                                   c.heads, c.d_head, length, s));
    // Temporaries of the attention kernels.
    const double shared_keys =
        (full || kind == AttentionKind::Exact) && !k_sep ? (2 * x * inner + x * heads) * a : 0;
    double fwd = 0, bwd = 0;
    if (kind == AttentionKind::Lsh) {
      // key scale, per-round out and lse; key scale, D, dk
      fwd = x * heads * s + rounds * x * (inner * a + heads * s);
      bwd = 2 * x * heads * s + x * inner * a;
    } else if (kind == AttentionKind::Local || kind == AttentionKind::Exact) {
      bwd = x * heads * s;  // D
      if (kind == AttentionKind::Exact)
        bwd += sweep::exact_bf16_dq_bytes(batch, c.heads, x, inner, a, s);
      fwd = shared_keys;
    } else if (a == s) {
      fwd = (4 * x * inner + (dropout ? scores : 0)) * a + shared_keys;  // per-head copies
      bwd = (7 * x * inner + scores + (dropout ? scores : 0) + x * inner) * a + shared_keys;
    } else {
      // bf16: the per-head copies and the scores are float32 (full.cpp), the
      // dropout mask's probabilities bf16.
      fwd = (4 * x * inner + scores) * s + (dropout ? scores * a : 0) + shared_keys;
      bwd = (7 * x * inner + scores + x * inner) * s + (dropout ? scores * a : 0) + shared_keys;
    }
    // F's forward: LayerNorm output, F's output, mean and rstd, then the layer
    // (without Save::All its q, k, v, attended, lse and P are temporaries too).
    const double f_frame = 2 * x * d * a + 2 * x * s;
    const double unsaved = c.reversible ? attention_state : 0;
    ws_forward = std::max(ws_forward, f_frame + unsaved + fwd);
    // Backward of F: dLN input, then the layer: dq, dv, (dk), d(attended).
    const double attention_bwd = x * d * a + x * inner * (3 + k_sep) * a + bwd;
    // FF (chunk rows): forward LN out, hidden, out; backward LN out, pre-activation,
    // hidden, d hidden, d out, d LN out; statistics in s.
    const double ff_forward = ff_rows * ((2 * d + f) * a + 2 * s);
    const double ff_backward = ff_rows * ((3 * d + 3 * f) * a + 2 * s);
    ws_forward = std::max(ws_forward, ff_forward);
    const double stats = 2 * x * s;
    if (c.reversible)  // G(y1), then F's recompute and backward
      ws_backward = std::max(
          ws_backward,
          x * d * a + std::max(ff_backward, x * d * a + stats + std::max(fwd, attention_bwd)));
    else  // the upstream gradient, then G's and F's backward
      ws_backward = std::max(ws_backward,
                             x * d * a + std::max(ff_backward, x * d * a + stats + attention_bwd));
  }
  // The head: [y1; y2] and its LayerNorm, d[y1; y2] twice.
  const double ws_loss = x * 6 * d * a + 2 * x * s;
  // The products of bf16 activations: the projections and the feed-forward.
  const double panels = a < s
                            ? sweep::mixed_panel_bytes(
                                  {{x, d, inner}, {x, inner, d}, {ff_rows, d, f}, {ff_rows, f, d}})
                            : 0.0;
  // The loss phase's: the cross-entropy's logits h W (h [loss_rows, 2d], a
  // float32 result), dh = dz W^T and dW += h^T dz.
  const double loss_panels = a < s ? sweep::mixed_panel_bytes({{loss_rows, 2 * d, v, true},
                                                               {loss_rows, 0, 2 * d},
                                                               {loss_rows, 2 * d, v, true, true}})
                                   : 0.0;
  // A training step after the first one (the measured one) starts with what the
  // previous step left: the streams and their gradients, the stored layers or
  // plans, the recompute state and the workspace at its high-water mark. Every
  // phase holds all of that; the loss adds one chunk of logits and the per-row
  // losses, which are not workspace.
  const double alive = 4 * x * d * a + stored + plans + scratch + chunk_slices +
                       std::max({ws_forward, ws_loss, ws_backward});
  StepMemory m;
  m.forward = m.backward = m.optimizer = saturated_bytes(alive + panels);
  m.loss = saturated_bytes(alive + loss_panels + (loss_rows * v + x) * s);
  return m;
}

}  // namespace reformer::train
