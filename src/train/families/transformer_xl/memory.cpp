// Transformer-XL's memory: its parameters, memories and training step
// predicted from the shapes, its synthetic step and its `reformer memory`
// variants (by memory length).
#include "reformer/train/memory_sweep.hpp"

#include "reformer/attention/relative.hpp"
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

namespace {

// Values uniform in [-1, 1) keyed by position (Transformer-XL's memory).
template <class T>
void fill_random_values(View1<T> values, RandomKey key) {
  Kokkos::parallel_for(
      "synthetic_values", range(values.extent(0)), KOKKOS_LAMBDA(Index i) {
        values(i) = store<T>(compute_t<T>(2 * random_uniform(key, std::uint64_t(i)) - 1));
      });
}

}  // namespace

template <class T>
XLSyntheticStep<T>::XLSyntheticStep(const XLStepConfig& config, Index batch, Index length)
    : model_(config.model, params_),
      adam_(params_),
      ids_("synthetic_ids", batch, length),
      targets_("synthetic_targets", batch, length) {
  model_.init({1, 1});
  sweep::fill_random_tokens(ids_, targets_, config.model.vocab);
  memory_.mem_len = config.mem_len;
  if (config.mem_len > 0) {
    memory_.hidden.resize(std::size_t(config.model.layers));
    for (std::size_t i = 0; i < memory_.hidden.size(); ++i) {
      memory_.hidden[i] = View3<T>("txl_memory", batch, config.mem_len, config.model.d_model);
      fill_random_values<T>(View1<T>(memory_.hidden[i].data(), memory_.hidden[i].size()),
                            {3, std::uint64_t(i)});
    }
  }
  adam_.step(0.0);
  Kokkos::fence();
}

template <class T>
std::int64_t XLSyntheticStep<T>::id_bytes() const {
  std::int64_t bytes = 2 * std::int64_t(ids_.size()) * std::int64_t(sizeof(int));
  for (const auto& h : memory_.hidden) bytes += std::int64_t(h.size() * sizeof(T));
  return bytes;
}

template <class T>
void XLSyntheticStep<T>::run(std::uint64_t n) {
  params_.zero_grad();
  model_.forward_backward(ids_, targets_, -1, {{7, n}, true}, memory_, state_);
  {
    ScopedMemoryPhase phase("optimizer");
    adam_.step(1e-4);
  }
  Kokkos::fence();
}

template class XLSyntheticStep<float>;
template class XLSyntheticStep<double>;
template class XLSyntheticStep<bf16>;

const char* sweep_base_xl() {
  return R"([model]
vocab = 256
d_model = 256
d_ff = 1024
heads = 4
d_head = 64
layers = 2
dropout = 0.0
ff_chunk = 1024
loss_chunk = 1024
)";
}

const std::vector<std::string>& sweep_xl_variant_names() {
  static const std::vector<std::string> names = {"xl-mem0", "xl", "xl-mem4x"};
  return names;
}

namespace {

void require_xl_variant(const std::string& variant) {
  const auto& names = sweep_xl_variant_names();
  require<ConfigError>(std::find(names.begin(), names.end(), variant) != names.end(),
                       "memory sweep: variant '", variant,
                       "' is unknown for Transformer-XL; choose xl-mem0, xl or xl-mem4x");
}

}  // namespace

XLStepConfig variant_config(const std::string& variant, models::TransformerXLConfig base,
                            Index length) {
  require_xl_variant(variant);
  base.validate();
  return {base, variant == "xl-mem0" ? 0 : variant == "xl" ? length : 4 * length};
}

std::vector<SweepSetKey> variant_keys(const std::string& variant,
                                      const models::TransformerXLConfig&) {
  require_xl_variant(variant);
  return {{"model.layers", "--layers"},
          {"model.xl.mem_len", "the variant " + variant +
                                   " (xl-mem0: 0, xl: the length, "
                                   "xl-mem4x: 4 lengths)"}};
}

SweepPoint run_sweep_point(const std::string& variant, const models::TransformerXLConfig& base,
                           Index batch, Index length, const SweepOptions& options) {
  sweep::check_point(options, batch, length);
  const auto config = variant_config(variant, base, length);
  return sweep::run_point<XLSyntheticStep>(variant, config, config.model.layers, batch, length,
                                           options);
}

std::int64_t predict_state_bytes(const XLStepConfig& config, std::int64_t scalar_bytes) {
  const auto& c = config.model;
  const double d = c.d_model, inner = double(c.heads) * c.d_head, f = c.d_ff, v = c.vocab;
  // Embedding, output (bias; weight when untied; the final LayerNorm of pre-LN),
  // and per layer w_q, w_k, w_v, w_r, w_o, u, v, two LayerNorms, w1, b1, w2, b2.
  double count = v * d + v + (c.tie_embeddings ? 0 : d * v) + (c.pre_norm ? 2 * d : 0);
  count += double(c.layers) * (5 * d * inner + 2 * inner + 4 * d + 2 * d * f + f + d);
  return saturated_bytes(4 * count * double(scalar_bytes));
}

std::int64_t predict_xl_memory_bytes(const XLStepConfig& config, Index batch,
                                     std::int64_t scalar_bytes) {
  return saturated_bytes(double(config.model.layers) * double(batch) * double(config.mem_len) *
                         double(config.model.d_model) * double(scalar_bytes));
}

namespace {

// Transformer-XL's step (docs/memory.md): `kept` layers' stored activations
// (all of them in training, one in evaluation), the model's streams, and the
// deepest workspace of a layer's forward or backward or of the loss. With
// x = B L segment rows, y = B (M + L) context rows and P distances:
// a layer keeps [m; x] (y d), q and attended (x inner), k and v (y inner),
// R W_r (P inner), the logsumexps (x heads), the feed-forward's input (x d)
// and for post-LN the two LayerNorm inputs (2 x d). Activations take a bytes
// (bf16: 2), the row statistics, logsumexps and the kernels' partial sums s.
StepMemory xl_step_memory(const XLStepConfig& config, Index batch, Index length,
                          std::int64_t scalar_bytes, std::int64_t activation_bytes, Index kept) {
  const auto& c = config.model;
  const double s = double(scalar_bytes), d = c.d_model, heads = c.heads;
  const double a = activation_bytes > 0 ? double(activation_bytes) : s;
  const double inner = heads * c.d_head, f = c.d_ff, v = c.vocab;
  const double x = double(batch) * length, y = double(batch) * double(config.mem_len + length);
  attention::RelativeAttentionConfig relative;
  relative.clamp_len = c.clamp_len;
  relative.same_length = c.same_length && config.mem_len > 0;
  relative.mem_len = std::max<Index>(1, config.mem_len);
  const double p =
      double(attention::relative_attention_positions(config.mem_len, length, relative));
  const double post = c.pre_norm ? 0 : 1;
  const double layer =
      (y * d + 2 * x * inner + 2 * y * inner + p * inner + (1 + 2 * post) * x * d) * a +
      x * heads * s;
  const double ff_rows = c.ff_chunk > 0 ? std::min(double(c.ff_chunk), x) : x;
  const double ff_forward = ff_rows * ((2 * d + f) * a + 2 * s);
  const double ff_backward = ff_rows * ((3 * d + 3 * f) * a + 2 * s);
  const double pre_a = c.pre_norm ? y * d * a + 2 * y * s : 0;
  // Forward: the attention's input (pre-LN), its segment rows, the distance
  // encodings, the output projection, then the feed-forward.
  const double forward = pre_a + (x * d + p * d + x * d) * a + 2 * x * s + ff_forward;
  // Backward: statistics and the upstream gradient (post-LN: a scratch copy),
  // then the feed-forward's backward or the attention's: d(attended), dq, dk,
  // dv, dr, and inside the kernel delta and the per-tile u, v and distance
  // partial sums, or after it the rebuilt input, dk W_k^T + ... and dcontext.
  const double tiles = std::ceil(double(length) / double(TileTraits<float>::query_tile));
  const double kernel =
      (x * heads + 2 * double(batch) * tiles * inner + double(batch) * p * inner) * s;
  const double after = 2 * pre_a + (x * d + p * d + y * d) * a;
  const double attention_backward =
      (2 * x * inner + 2 * y * inner + p * inner) * a + std::max(kernel, after);
  const double backward =
      2 * y * s + (x * d + post * x * d) * a + std::max(ff_backward, attention_backward);
  // The model: the stream, the loss's input and its gradient. The workspace
  // keeps its deepest size from step to step, so every phase holds it; the
  // cross-entropy takes its chunk of logits (float32 h W) from it.
  const double alive = double(kept) * layer + 3 * x * d * a;
  const double loss_rows = std::min(double(c.loss_chunk), x);
  const double loss_frame = c.pre_norm ? 2 * x * d * a + 2 * x * s : 0;
  const double workspace = std::max({forward, backward, loss_frame, loss_rows * v * s});
  const double panels = a < s
                            ? sweep::mixed_panel_bytes(
                                  {{y, d, inner}, {x, inner, d}, {ff_rows, d, f}, {ff_rows, f, d}})
                            : 0.0;
  StepMemory m;
  m.workspace = saturated_bytes(workspace);
  m.forward = m.backward = m.optimizer = saturated_bytes(alive + workspace + panels);
  // The loss phase's: the logits h W, dh = dz W^T, dW += h^T dz.
  const double loss_panels =
      a < s ? sweep::mixed_panel_bytes(
                  {{loss_rows, d, v, true}, {loss_rows, 0, d}, {loss_rows, d, v, true, true}})
            : 0.0;
  m.loss = saturated_bytes(alive + workspace + loss_panels + x * s);
  return m;
}

}  // namespace

StepMemory predict_step_memory(const XLStepConfig& config, Index batch, Index length,
                               std::int64_t scalar_bytes, std::int64_t activation_bytes) {
  return xl_step_memory(config, batch, length, scalar_bytes, activation_bytes, config.model.layers);
}

RunMemory predict_run_memory(const XLStepConfig& config, Index batch, Index length,
                             std::int64_t scalar_bytes, bool training, Index groups,
                             std::int64_t activation_bytes) {
  // As the other families' (training: every layer's activations; evaluation:
  // one layer's), and the memories of `groups` batches in the state.
  const Index stored = training ? config.model.layers : 1;
  RunMemory memory = sweep::run_memory_at(
      [&](std::int64_t a) {
        return xl_step_memory(config, batch, length, scalar_bytes, a, stored);
      },
      predict_state_bytes(config, scalar_bytes), training, scalar_bytes, activation_bytes);
  memory.state =
      saturated_bytes(double(memory.state) + double(groups) * double(predict_xl_memory_bytes(
                                                                  config, batch, scalar_bytes)));
  return memory;
}

}  // namespace reformer::train
