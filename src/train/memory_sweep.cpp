#include "reformer/train/memory_sweep.hpp"

#include <cmath>
#include "reformer/attention/relative.hpp"
#include "reformer/core/error.hpp"
#include "reformer/core/runtime.hpp"
#include "reformer/core/tile_multiply.hpp"
#include "reformer/models/reformer_lm.hpp"
#include "reformer/train/optimizer.hpp"
#include "reformer/train/synthetic_step.hpp"

#include <algorithm>
#include <chrono>
#include <map>

namespace reformer::train {
namespace {

// Uniform random ids and targets below vocab, keyed by position (a free
// function: nvcc limits which member functions may hold a device lambda).
void fill_random_tokens(Kokkos::View<int**, Layout, MemSpace> ids,
                        Kokkos::View<int**, Layout, MemSpace> targets, Index vocab) {
  const Index length = ids.extent(1);
  const auto v = std::uint64_t(vocab);
  Kokkos::parallel_for(
      "synthetic_ids", range(ids.extent(0) * length), KOKKOS_LAMBDA(Index i) {
        ids(i / length, i % length) = int(random_bits({1, 1}, i) % v);
        targets(i / length, i % length) = int(random_bits({1, 2}, i) % v);
      });
}

// Values uniform in [-1, 1) keyed by position (Transformer-XL's memory).
template <class T>
void fill_random_values(View1<T> values, RandomKey key) {
  Kokkos::parallel_for(
      "synthetic_values", range(values.extent(0)),
      KOKKOS_LAMBDA(Index i) { values(i) = T(2 * random_uniform(key, std::uint64_t(i)) - 1); });
}

// Random pairs: source and target_out ids in [3, vocab), target_in the start
// symbol (1) and then target_out shifted right.
void fill_random_pairs(Kokkos::View<int**, Layout, MemSpace> source,
                       Kokkos::View<int**, Layout, MemSpace> target_in,
                       Kokkos::View<int**, Layout, MemSpace> target_out, Index source_vocab,
                       Index target_vocab) {
  const Index length = source.extent(1);
  const auto vs = std::uint64_t(source_vocab - 3), vt = std::uint64_t(target_vocab - 3);
  Kokkos::parallel_for(
      "synthetic_pairs", range(source.extent(0) * length), KOKKOS_LAMBDA(Index i) {
        source(i / length, i % length) = 3 + int(random_bits({1, 3}, i) % vs);
        target_out(i / length, i % length) = 3 + int(random_bits({1, 4}, i) % vt);
      });
  Kokkos::parallel_for(
      "synthetic_target_in", range(source.extent(0) * length), KOKKOS_LAMBDA(Index i) {
        const Index b = i / length, t = i % length;
        target_in(b, t) = t == 0 ? 1 : target_out(b, t - 1);
      });
}

}  // namespace

template <class T>
SyntheticStep<T>::SyntheticStep(const models::ReformerConfig& config, Index batch, Index length)
    : model_(config, params_),
      adam_(params_),
      ids_("synthetic_ids", batch, length),
      targets_("synthetic_targets", batch, length) {
  model_.init({1, 1});
  fill_random_tokens(ids_, targets_, config.vocab);
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

template <class T>
Seq2SeqSyntheticStep<T>::Seq2SeqSyntheticStep(const models::TransformerConfig& config, Index batch,
                                              Index length)
    : model_(config, params_),
      adam_(params_),
      source_("synthetic_source", batch, length),
      target_in_("synthetic_target_in", batch, length),
      target_out_("synthetic_target_out", batch, length),
      valid_("synthetic_valid", batch, length) {
  require<ConfigError>(config.source_vocab > 3 && config.target_vocab > 3,
                       "Seq2SeqSyntheticStep: the vocabularies (", config.source_vocab, ", ",
                       config.target_vocab, ") must hold ids beyond 0, 1 and 2");
  model_.init({1, 1});
  fill_random_pairs(source_, target_in_, target_out_, config.source_vocab, config.target_vocab);
  Kokkos::deep_copy(valid_, 1);
  adam_.step(0.0);
  Kokkos::fence();
}

template <class T>
void Seq2SeqSyntheticStep<T>::run(std::uint64_t n) {
  params_.zero_grad();
  model_.forward_backward({source_, target_in_, target_out_, valid_, valid_}, 0, {{7, n}, true},
                          state_);
  {
    ScopedMemoryPhase phase("optimizer");
    adam_.step(1e-4);
  }
  Kokkos::fence();
}

template <class T>
XLSyntheticStep<T>::XLSyntheticStep(const XLStepConfig& config, Index batch, Index length)
    : model_(config.model, params_),
      adam_(params_),
      ids_("synthetic_ids", batch, length),
      targets_("synthetic_targets", batch, length) {
  model_.init({1, 1});
  fill_random_tokens(ids_, targets_, config.model.vocab);
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

template class SyntheticStep<float>;
template class SyntheticStep<double>;
template class Seq2SeqSyntheticStep<float>;
template class Seq2SeqSyntheticStep<double>;
template class XLSyntheticStep<float>;
template class XLSyntheticStep<double>;

namespace {

using attention::AttentionKind;

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

std::int64_t phase_peak(const std::vector<PhaseMemory>& phases, const std::string& name,
                        const std::string& space, std::int64_t base) {
  std::int64_t peak = base;
  for (const auto& p : phases)
    if (p.phase == name && p.space == space) peak = std::max(peak, p.peak_bytes);
  return peak - base;
}

// Bytes of the backend's own allocations in a composition: Kokkos names them
// "[unlabeled]" (host thread scratch) or "Kokkos::..." (a GPU's team scratch
// pool, "Kokkos::CudaSpace::TeamScratchMemory", and internal buffers); no View
// of ours has such a label.
std::int64_t backend_bytes(const std::vector<LabelBytes>& composition) {
  std::int64_t bytes = 0;
  for (const auto& entry : composition)
    if (entry.label.empty() || entry.label == "[unlabeled]" ||
        entry.label.rfind("Kokkos::", 0) == 0)
      bytes += entry.bytes;
  return bytes;
}

// One point of either model: Step is SyntheticStep<T> or Seq2SeqSyntheticStep<T>.
template <class Step, class Config>
SweepPoint measure(SweepPoint point, const Config& config, const SweepOptions& options) {
  auto& tracker = MemoryTracker::instance();
  tracker.install();
  const std::string space = MemSpace::name();
  const std::int64_t start = tracker.space(space).current_bytes;
  Step synthetic(config, point.batch, point.length);
  const std::int64_t before = tracker.space(space).current_bytes;
  const std::int64_t backend_before = backend_bytes(tracker.live_composition(space));
  point.state_bytes = before - start - synthetic.id_bytes();
  // The first step grows the workspace (in pieces until it is consolidated);
  // the measured step is the second one, as every later step of a training run.
  tracker.reset_peaks();
  synthetic.run(0);
  point.warmup_peak = tracker.space(space).peak_bytes - before;
  tracker.reset_peaks();
  tracker.clear_phases();
  const auto measured_start = std::chrono::steady_clock::now();
  synthetic.run(1);
  const double measured_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - measured_start).count();
  const auto phases = tracker.phases();
  point.measured = {phase_peak(phases, "forward", space, before),
                    phase_peak(phases, "loss", space, before),
                    phase_peak(phases, "backward", space, before),
                    phase_peak(phases, "optimizer", space, before)};
  point.composition = tracker.peak_composition(space);
  // The backend's allocations made during this point and live at its peak.
  point.backend_bytes =
      std::max<std::int64_t>(0, backend_bytes(point.composition) - backend_before);
  std::vector<double> seconds;
  for (int n = 0; n < options.timed_steps; ++n) {
    const auto t0 = std::chrono::steady_clock::now();
    synthetic.run(std::uint64_t(n) + 2);
    seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(seconds.begin(), seconds.end());
  // Without timed steps, the measured step's time (the tracker adds a label
  // lookup per phase, nothing per kernel).
  point.seconds_per_step = seconds.empty() ? measured_seconds : seconds[seconds.size() / 2];
  point.ran = true;
  return point;
}

}  // namespace

std::int64_t StepMemory::peak() const { return std::max({forward, loss, backward, optimizer}); }

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

const char* sweep_base_transformer() {
  return R"([model]
vocab = 256
d_model = 256
d_ff = 1024
heads = 4
d_head = 64
positions = "sinusoidal"
max_length = 1024
dropout = 0.0
ff_chunk = 1024
loss_chunk = 1024
[model.lsh]
chunk = 64
n_hashes = 2
[model.local]
chunk = 128
[model.seq2seq]
encoder_layers = 2
decoder_layers = 2
)";
}

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

XLStepConfig variant_config(const std::string& variant, models::TransformerXLConfig base,
                            Index length) {
  const auto& names = sweep_xl_variant_names();
  require<ConfigError>(std::find(names.begin(), names.end(), variant) != names.end(),
                       "memory sweep: variant '", variant,
                       "' is unknown for Transformer-XL; choose xl-mem0, xl or xl-mem4x");
  base.validate();
  return {base, variant == "xl-mem0" ? 0 : variant == "xl" ? length : 4 * length};
}

const std::vector<std::string>& sweep_variant_names() {
  static const std::vector<std::string> names = {"full",      "full-rev", "lsh-1", "lsh-2",
                                                 "lsh-4",     "lsh-8",    "local", "exact",
                                                 "exact-rev", "reformer"};
  return names;
}

// The spec of a variant; ConfigError naming it and the known ones otherwise.
template <class Spec>
const Spec& find_variant(const std::map<std::string, Spec>& specs, const std::string& variant) {
  auto it = specs.find(variant);
  if (it == specs.end()) {
    std::string known;
    for (const auto& name : sweep_variant_names()) known += (known.empty() ? "" : ", ") + name;
    throw ConfigError("memory sweep: unknown variant '" + variant + "' (expected one of " + known +
                      ")");
  }
  return it->second;
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

namespace {

// The point with its predictions, measured unless the prediction exceeds the
// budget (then skipped with the reason, nothing allocated).
template <template <class> class Step, class Config>
SweepPoint run_point(const std::string& variant, const Config& config, Index layers, Index batch,
                     Index length, const SweepOptions& options) {
  SweepPoint point;
  point.variant = variant;
  point.length = length;
  point.batch = batch;
  point.layers = layers;
  const std::int64_t scalar = options.dtype == "float" ? 4 : 8;
  point.predicted = predict_step_memory(config, batch, length, scalar);
  point.predicted_state_bytes = predict_state_bytes(config, scalar);
  const std::int64_t needed = point.predicted.peak() + point.predicted_state_bytes;
  const std::int64_t budget =
      options.budget_bytes >= 0 ? options.budget_bytes : available_memory_bytes();
  if (budget >= 0 && needed > budget) {
    point.skipped = "predicted " + format_bytes(needed) + " (step peak + parameters, gradients " +
                    "and Adam moments) exceeds the budget of " + format_bytes(budget);
    return point;
  }
  return options.dtype == "float" ? measure<Step<float>>(point, config, options)
                                  : measure<Step<double>>(point, config, options);
}

void check_point(const SweepOptions& options, Index batch, Index length) {
  require<ConfigError>(options.dtype == "float" || options.dtype == "double",
                       "memory sweep: dtype is '", options.dtype,
                       "' but must be \"float\" or \"double\"");
  require<ConfigError>(batch > 0 && length > 0, "memory sweep: batch ", batch, " and length ",
                       length, " must be positive");
}

}  // namespace

// The encoder-decoder's variants: attention of the encoder, the decoder and
// the cross-attention, reversibility and chunking.
struct Seq2SeqVariant {
  AttentionKind encoder, decoder, cross;
  Index n_hashes;  // 0: the base config's
  bool reversible, chunked;
};

const std::map<std::string, Seq2SeqVariant>& seq2seq_variants() {
  using K = AttentionKind;
  static const std::map<std::string, Seq2SeqVariant> specs = {
      {"full", {K::Full, K::Full, K::Full, 0, false, false}},
      {"full-rev", {K::Full, K::Full, K::Full, 0, true, false}},
      {"lsh-1", {K::Lsh, K::Local, K::Exact, 1, false, false}},
      {"lsh-2", {K::Lsh, K::Local, K::Exact, 2, false, false}},
      {"lsh-4", {K::Lsh, K::Local, K::Exact, 4, false, false}},
      {"lsh-8", {K::Lsh, K::Local, K::Exact, 8, false, false}},
      {"local", {K::Local, K::Local, K::Exact, 0, false, false}},
      {"exact", {K::Exact, K::Exact, K::Exact, 0, false, false}},
      {"exact-rev", {K::Exact, K::Exact, K::Exact, 0, true, false}},
      {"reformer", {K::Lsh, K::Local, K::Exact, 0, true, true}},
  };
  return specs;
}

models::TransformerConfig variant_config(const std::string& variant, models::TransformerConfig base,
                                         Index length) {
  const Seq2SeqVariant& spec = find_variant(seq2seq_variants(), variant);
  base.encoder_attention = spec.encoder;
  base.decoder_attention = spec.decoder;
  base.cross_attention = spec.cross;
  if (spec.n_hashes > 0) base.lsh.n_hashes = spec.n_hashes;
  base.reversible = spec.reversible;
  if (!spec.chunked) {
    base.ff_chunk = 0;
    base.loss_chunk = length;
  }
  base.max_length = length;
  base.validate();
  // The kernels' length rules, named as a run's would be.
  if (spec.encoder == AttentionKind::Lsh && length > base.lsh.chunk)
    require<ConfigError>(length % base.lsh.chunk == 0, "memory sweep: length ", length,
                         " is not a multiple of model.lsh.chunk = ", base.lsh.chunk, " (", variant,
                         ")");
  if (spec.encoder == AttentionKind::Local || spec.decoder == AttentionKind::Local)
    require<ConfigError>(length % base.local.chunk == 0, "memory sweep: length ", length,
                         " is not a multiple of model.local.chunk = ", base.local.chunk, " (",
                         variant, ")");
  return base;
}

SweepPoint run_sweep_point(const std::string& variant, const models::ReformerConfig& base,
                           Index batch, Index length, const SweepOptions& options) {
  check_point(options, batch, length);
  const auto config = variant_config(variant, base, length);
  return run_point<SyntheticStep>(variant, config, config.layers, batch, length, options);
}

SweepPoint run_sweep_point(const std::string& variant, const models::TransformerConfig& base,
                           Index batch, Index length, const SweepOptions& options) {
  check_point(options, batch, length);
  const auto config = variant_config(variant, base, length);
  return run_point<Seq2SeqSyntheticStep>(variant, config, config.encoder_layers, batch, length,
                                         options);
}

SweepPoint run_sweep_point(const std::string& variant, const models::TransformerXLConfig& base,
                           Index batch, Index length, const SweepOptions& options) {
  check_point(options, batch, length);
  const auto config = variant_config(variant, base, length);
  return run_point<XLSyntheticStep>(variant, config, config.model.layers, batch, length, options);
}

}  // namespace reformer::train

namespace reformer::train {
namespace {

// A byte count from a double, capped far below where int64 would overflow.
std::int64_t saturated_bytes(double bytes) { return std::int64_t(std::min(bytes, 9.0e18)); }

}  // namespace

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

// Parameters of the encoder-decoder, counted from the config's shapes (as
// registered by EncoderDecoder, DecoderBlock, ReversibleBlock, AttentionLayer
// and FeedForward).
std::int64_t predict_state_bytes(const models::TransformerConfig& c, std::int64_t scalar_bytes) {
  const double d = c.d_model, inner = double(c.heads) * c.d_head, f = c.d_ff;
  const double vs = c.source_vocab, vt = c.target_vocab;
  double count = vs * d + (c.share_embeddings ? 0 : vt * d) + (c.tie_generator ? 0 : d * vt) + vt;
  if (c.positions == models::PositionKind::Learned) count += 2.0 * double(c.max_length) * d;
  const double ff = 2 * d + 2 * d * f + f + d;  // LayerNorm, w1, b1, w2, b2
  const double encoder_projections = c.encoder_attention_config().shares_qk() ? 3 : 4;
  count += double(c.encoder_layers) * (2 * d + encoder_projections * d * inner + ff);
  count += double(c.decoder_layers) * (2 * (2 * d + 4 * d * inner) + ff);
  count += 4 * d;  // the encoder's and the decoder's final LayerNorms
  // Value, gradient and Adam's two moments.
  return saturated_bytes(4 * count * double(scalar_bytes));
}

// The encoder-decoder's step, in the terms of the language model's
// predict_step_memory below (docs/memory.md): what stays alive between steps
// (streams, memory, their gradients; per layer the stored sub-layer inputs and
// attention activations, or for reversible stacks only the LSH plans and one
// layer's recomputed activations) and the workspace at its deepest nesting.
// Sources and targets have `length` positions.
StepMemory predict_step_memory(const models::TransformerConfig& c, Index batch, Index length,
                               std::int64_t scalar_bytes) {
  using attention::AttentionKind;
  const double s = double(scalar_bytes), x = double(batch) * length, d = c.d_model;
  const double heads = c.heads, inner = heads * c.d_head, f = c.d_ff, v = c.target_vocab;
  const double scores = double(batch) * heads * double(length) * length;
  const double ff_rows = c.ff_chunk > 0 ? std::min(double(c.ff_chunk), x) : x;
  const double loss_rows = std::min(double(c.loss_chunk), x);
  const bool dropout = c.attention_dropout > 0;
  struct Attention {
    double state, forward, backward, plan;  // elements (plan: bytes)
  };
  // What one attention layer keeps (q, k, v, attended; the logsumexps or full
  // attention's probabilities), its kernels' forward and backward temporaries,
  // and its LSH plan.
  auto attention = [&](AttentionKind kind, bool shared_qk) {
    const double k_sep = shared_qk ? 0 : 1;
    const double rounds = kind == AttentionKind::Lsh ? double(c.lsh.n_hashes) : 0;
    Attention a{x * inner * (3 + k_sep) + (kind == AttentionKind::Full ? scores : x * heads), 0, 0,
                3 * rounds * x * heads * 4};
    if (kind == AttentionKind::Lsh) {
      a.forward = x * heads + rounds * x * (inner + heads);
      a.backward = 2 * x * heads + x * inner;
    } else if (kind == AttentionKind::Local || kind == AttentionKind::Exact) {
      a.backward = x * heads;
    } else {
      a.forward = 4 * x * inner + (dropout ? scores : 0);
      a.backward = 8 * x * inner + scores + (dropout ? scores : 0);
    }
    return a;
  };
  const auto encoder = attention(c.encoder_attention, c.encoder_attention_config().shares_qk());
  const auto self = attention(c.decoder_attention, false);
  const auto cross = attention(c.cross_attention, false);
  const double ff_forward = ff_rows * (2 * d + f + 2);
  const double ff_backward = ff_rows * (3 * d + 3 * f + 2);
  // Streams, memory and their gradients, the memory's statistics (reversible:
  // second streams, their gradients and the streams' averages).
  double alive = 6 * x * d + 2 * x + (c.reversible ? 6 * x * d : 0);
  double plans = double(c.encoder_layers) * encoder.plan;
  double workspace = 2 * x * d + 2 * x;  // the loss: the normed top and its gradient
  // Per sub-layer: forward (LayerNorm output, its output, statistics; the
  // activations too when they are not kept), and backward (the upstream copy
  // or the recomputed G, then LayerNorm output, statistics, its gradient,
  // dq, dk, dv, d(attended) and the kernels' temporaries).
  auto sublayer = [&](const Attention& a, double k_sep) {
    const double unsaved = c.reversible ? a.state : 0;
    workspace = std::max(workspace, 2 * x * d + 2 * x + unsaved + a.forward);
    const double attention_bwd = x * d + x * inner * (3 + k_sep) + a.backward;
    const double recompute = c.reversible ? std::max(a.forward, attention_bwd) : attention_bwd;
    workspace = std::max(workspace, x * d + std::max(ff_backward, x * d + 2 * x + recompute));
  };
  workspace = std::max(workspace, ff_forward);
  sublayer(encoder, c.encoder_attention_config().shares_qk() ? 0 : 1);
  sublayer(self, 1);
  sublayer(cross, 1);
  if (c.reversible) {  // one layer's recomputed activations
    alive += std::max({encoder.state, self.state, cross.state});
  } else {
    alive += double(c.encoder_layers) * (2 * x * d + encoder.state);
    alive += double(c.decoder_layers) * (3 * x * d + self.state + cross.state);
  }
  const double bytes = (alive + workspace) * s + plans;
  StepMemory m;
  m.forward = m.backward = m.optimizer = saturated_bytes(bytes);
  m.loss = saturated_bytes(bytes + (loss_rows * v + x) * s);
  return m;
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
// and for post-LN the two LayerNorm inputs (2 x d).
StepMemory xl_step_memory(const XLStepConfig& config, Index batch, Index length,
                          std::int64_t scalar_bytes, Index kept) {
  const auto& c = config.model;
  const double s = double(scalar_bytes), d = c.d_model, heads = c.heads;
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
      y * d + 2 * x * inner + 2 * y * inner + p * inner + x * heads + (1 + 2 * post) * x * d;
  const double ff_rows = c.ff_chunk > 0 ? std::min(double(c.ff_chunk), x) : x;
  const double ff_forward = ff_rows * (2 * d + f + 2);
  const double ff_backward = ff_rows * (3 * d + 3 * f + 2);
  const double pre_a = c.pre_norm ? y * d + 2 * y : 0;
  // Forward: the attention's input (pre-LN), its segment rows, the distance
  // encodings, the output projection, then the feed-forward.
  const double forward = pre_a + x * d + p * d + x * d + 2 * x + ff_forward;
  // Backward: statistics and the upstream gradient (post-LN: a scratch copy),
  // then the feed-forward's backward or the attention's: d(attended), dq, dk,
  // dv, dr, and inside the kernel delta and the per-tile u, v and distance
  // partial sums, or after it the rebuilt input, dk W_k^T + ... and dcontext.
  const double tiles = std::ceil(double(length) / double(TileTraits<float>::query_tile));
  const double kernel = x * heads + 2 * double(batch) * tiles * inner + double(batch) * p * inner;
  const double after = 2 * pre_a + x * d + p * d + y * d;
  const double attention_backward =
      2 * x * inner + 2 * y * inner + p * inner + std::max(kernel, after);
  const double backward = 2 * y + x * d + post * x * d + std::max(ff_backward, attention_backward);
  // The model: the stream, the loss's input and its gradient. The workspace
  // keeps its deepest size from step to step, so every phase holds it; the
  // loss adds the cross-entropy's chunk of logits (outside the workspace).
  const double alive = double(kept) * layer + 3 * x * d;
  const double loss_frame = c.pre_norm ? 2 * x * d + 2 * x : 0;
  const double workspace = std::max({forward, backward, loss_frame});
  const double loss_rows = std::min(double(c.loss_chunk), x);
  StepMemory m;
  m.forward = m.backward = m.optimizer = saturated_bytes((alive + workspace) * s);
  m.loss = saturated_bytes((alive + workspace + loss_rows * v + x) * s);
  return m;
}

}  // namespace

StepMemory predict_step_memory(const XLStepConfig& config, Index batch, Index length,
                               std::int64_t scalar_bytes) {
  return xl_step_memory(config, batch, length, scalar_bytes, config.model.layers);
}

RunMemory predict_run_memory(const XLStepConfig& config, Index batch, Index length,
                             std::int64_t scalar_bytes, bool training, Index groups) {
  const StepMemory step =
      xl_step_memory(config, batch, length, scalar_bytes, training ? config.model.layers : 1);
  const std::int64_t state = predict_state_bytes(config, scalar_bytes);
  RunMemory memory;
  memory.state = saturated_bytes(double(training ? state : state / 4) +
                                 double(groups) *
                                     double(predict_xl_memory_bytes(config, batch, scalar_bytes)));
  memory.peak = training ? step.peak() : std::max(step.forward, step.loss);
  return memory;
}

std::int64_t RunMemory::total() const { return saturated_bytes(double(state) + double(peak)); }

namespace {

// Either model's run: the state (training: parameters, gradients and Adam
// moments; evaluation: the values alone) and a step's peak (training) or a
// forward pass's and the loss's.
template <class Config>
RunMemory run_memory(const Config& config, Index batch, Index length, std::int64_t scalar_bytes,
                     bool training) {
  const StepMemory step = predict_step_memory(config, batch, length, scalar_bytes);
  const std::int64_t state = predict_state_bytes(config, scalar_bytes);
  RunMemory memory;
  memory.state = training ? state : state / 4;
  memory.peak = training ? step.peak() : std::max(step.forward, step.loss);
  return memory;
}

}  // namespace

RunMemory predict_run_memory(const models::ReformerConfig& config, Index batch, Index length,
                             std::int64_t scalar_bytes, bool training) {
  return run_memory(config, batch, length, scalar_bytes, training);
}

RunMemory predict_run_memory(const models::TransformerConfig& config, Index batch, Index length,
                             std::int64_t scalar_bytes, bool training) {
  return run_memory(config, batch, length, scalar_bytes, training);
}

// Bytes of one training step above the state, from the shapes: what stays
// alive (the two streams and their gradients; per layer the stored activations
// or only the LSH plan) plus the workspace, which is as large as the deepest
// stack of temporaries of any call (docs/memory.md lists the terms). The model
// is the one of ReformerLM with its layers, blocks and attention variants.
StepMemory predict_step_memory(const models::ReformerConfig& c, Index batch, Index length,
                               std::int64_t scalar_bytes) {
  using attention::AttentionKind;
  const double s = double(scalar_bytes), x = double(batch) * length, d = c.d_model;
  const double heads = c.heads, inner = heads * c.d_head, f = c.d_ff, v = c.vocab;
  const double scores = double(batch) * heads * double(length) * length;  // one L x L per head
  const double ff_rows = c.ff_chunk > 0 ? std::min(double(c.ff_chunk), x) : x;
  const double loss_rows = std::min(double(c.loss_chunk), x);
  // Per kind (the largest layer of the stack decides the workspace).
  double stored = 0, plans = 0, scratch = 0, ws_forward = 0, ws_backward = 0;
  for (Index i = 0; i < c.layers; ++i) {
    const AttentionKind kind = c.layer_kind(i);
    const auto layer = c.attention_config(i);
    const double k_sep = layer.shares_qk() ? 0 : 1;
    const double rounds = kind == AttentionKind::Lsh ? double(c.lsh.n_hashes) : 0;
    const bool full = kind == AttentionKind::Full;
    const bool dropout = c.attention_dropout > 0;
    // What AttentionState keeps (q, k, v, attended; lse; full: P) and the plan.
    const double attention_state = x * inner * (3 + k_sep) + (full ? scores : x * heads);
    const double plan_bytes = 3 * rounds * x * heads * 4;  // buckets, perm, undo (int)
    plans += plan_bytes;
    if (!c.reversible) stored += (2 * x * d + attention_state) * s;  // + block inputs
    scratch = std::max(scratch, c.reversible ? attention_state * s : 0.0);
    // Temporaries of the attention kernels.
    const double shared_keys =
        (full || kind == AttentionKind::Exact) && !k_sep ? 2 * x * inner + x * heads : 0;
    double fwd = 0, bwd = 0;
    if (kind == AttentionKind::Lsh) {
      fwd = x * heads + rounds * x * (inner + heads);  // key scale, per-round out and lse
      bwd = 2 * x * heads + x * inner;                 // key scale, D, dk
    } else if (kind == AttentionKind::Local || kind == AttentionKind::Exact) {
      bwd = x * heads;  // D
      fwd = shared_keys;
    } else {
      fwd = 4 * x * inner + (dropout ? scores : 0) + shared_keys;  // per-head copies
      bwd = 7 * x * inner + scores + (dropout ? scores : 0) + shared_keys + x * inner;  // + dS
    }
    // F's forward: LayerNorm output, F's output, mean and rstd, then the layer
    // (without Save::All its q, k, v, attended, lse and P are temporaries too).
    const double f_frame = 2 * x * d + 2 * x;
    const double unsaved = c.reversible ? attention_state : 0;
    ws_forward = std::max(ws_forward, f_frame + unsaved + fwd);
    // Backward of F: dLN input, then the layer: dq, dv, (dk), d(attended).
    const double attention_bwd = x * d + x * inner * (3 + k_sep) + bwd;
    // FF (chunk rows): forward LN out, hidden, out; backward LN out, pre-activation,
    // hidden, d hidden, d out, d LN out.
    const double ff_forward = ff_rows * (2 * d + f + 2);
    const double ff_backward = ff_rows * (3 * d + 3 * f + 2);
    ws_forward = std::max(ws_forward, ff_forward);
    if (c.reversible)  // G(y1), then F's recompute and backward
      ws_backward = std::max(
          ws_backward, x * d + std::max(ff_backward, x * d + 2 * x + std::max(fwd, attention_bwd)));
    else  // the upstream gradient, then G's and F's backward
      ws_backward =
          std::max(ws_backward, x * d + std::max(ff_backward, x * d + 2 * x + attention_bwd));
  }
  // The head: [y1; y2] and its LayerNorm, d[y1; y2] twice.
  const double ws_loss = x * 6 * d + 2 * x;
  // A training step after the first one (the measured one) starts with what the
  // previous step left: the streams and their gradients, the stored layers or
  // plans, the recompute state and the workspace at its high-water mark. Every
  // phase holds all of that; the loss adds one chunk of logits and the per-row
  // losses, which are not workspace.
  const double alive =
      4 * x * d * s + stored + plans + scratch + std::max({ws_forward, ws_loss, ws_backward}) * s;
  StepMemory m;
  m.forward = m.backward = m.optimizer = saturated_bytes(alive);
  m.loss = saturated_bytes(alive + (loss_rows * v + x) * s);
  return m;
}

}  // namespace reformer::train
