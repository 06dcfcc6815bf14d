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
using sweep::check_variant_length;
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
  check_variant_length(variant, length, [&] { base.validate_length(length); });
  return base;
}

std::vector<SweepSetKey> variant_keys(const std::string& variant, const models::ReformerConfig&) {
  const VariantSpec& spec = find_variant(variant_specs(), variant);
  std::vector<SweepSetKey> keys{{"model.layers", "--layers"},
                                {"model.max_length", "--lengths"},
                                {"model.axial_shape", "--lengths"},
                                {"model.attention", "the variant " + variant},
                                {"model.reversible", "the variant " + variant}};
  if (spec.n_hashes > 0) keys.push_back({"model.lsh.n_hashes", "the variant " + variant});
  if (!spec.chunked)
    for (const char* key : {"model.ff_chunk", "model.loss_chunk"})
      keys.push_back({key, "the variant " + variant + " (unchunked)"});
  return keys;
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
                             std::int64_t scalar_bytes, bool training,
                             std::int64_t activation_bytes) {
  return sweep::run_memory(config, batch, length, scalar_bytes, training, activation_bytes);
}

// Bytes of one training step above the state, from the shapes: what stays
// alive (the two streams and their gradients; per layer the stored activations
// or only the LSH plan) plus the workspace, which is as large as the deepest
// stack of temporaries of any call (docs/memory.md lists the terms). The
// stack's terms are sweep::encoder_stack_memory's (shared with other heads); the
// head is the LM's: LayerNorm over [y1; y2] and the chunked cross-entropy.
StepMemory predict_step_memory(const models::ReformerConfig& c, Index batch, Index length,
                               std::int64_t scalar_bytes, std::int64_t activation_bytes) {
  const double s = double(scalar_bytes), a = activation_bytes > 0 ? double(activation_bytes) : s;
  const double x = double(batch) * length, d = c.d_model, v = c.vocab;
  const double loss_rows = std::min(double(c.loss_chunk), x);
  const auto stack = sweep::encoder_stack_memory(c, batch, length, s, a);
  // The head: [y1; y2] and its LayerNorm, d[y1; y2] twice; while the
  // cross-entropy runs, the LayerNorm's output and d[y1; y2] beside one chunk
  // of logits (float32 h W: the loss takes them from the workspace).
  const double ws_loss = std::max(x * 6 * d * a, x * 4 * d * a + loss_rows * v * s) + 2 * x * s;
  // The loss phase's: the cross-entropy's logits h W (h [loss_rows, 2d], a
  // float32 result), dh = dz W^T and dW += h^T dz.
  const double loss_panels = a < s ? sweep::mixed_panel_bytes({{loss_rows, 2 * d, v, true},
                                                               {loss_rows, 0, 2 * d},
                                                               {loss_rows, 2 * d, v, true, true}})
                                   : 0.0;
  // A training step after the first one (the measured one) starts with what the
  // previous step left: the streams and their gradients, the stored layers or
  // plans, the recompute state and the workspace at its high-water mark. Every
  // phase holds all of that; the loss adds the per-row losses, which are not
  // workspace.
  const double workspace = std::max({stack.ws_forward, ws_loss, stack.ws_backward});
  const double alive = stack.alive + workspace;
  StepMemory m;
  m.workspace = saturated_bytes(workspace);
  m.forward = m.backward = m.optimizer = saturated_bytes(alive + stack.panels);
  m.loss = saturated_bytes(alive + loss_panels + x * s);
  return m;
}

}  // namespace reformer::train
