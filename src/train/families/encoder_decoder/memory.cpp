// The encoder-decoder's memory: its parameters and training step predicted
// from the shapes, its synthetic step and its `reformer memory` variants.
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

namespace {

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

template class Seq2SeqSyntheticStep<float>;
template class Seq2SeqSyntheticStep<double>;
template class Seq2SeqSyntheticStep<bf16>;

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
  // The kernels' length rules, named as a run's would be, with the variant.
  check_variant_length(variant, length, [&] { base.validate_lengths(length, length); });
  return base;
}

std::vector<SweepSetKey> variant_keys(const std::string& variant,
                                      const models::TransformerConfig&) {
  const Seq2SeqVariant& spec = find_variant(seq2seq_variants(), variant);
  std::vector<SweepSetKey> keys{{"model.seq2seq.encoder_layers", "--layers"},
                                {"model.seq2seq.decoder_layers", "--layers"},
                                {"model.max_length", "--lengths"}};
  for (const char* key : {"model.seq2seq.encoder_attention", "model.seq2seq.decoder_attention",
                          "model.seq2seq.cross_attention", "model.seq2seq.reversible"})
    keys.push_back({key, "the variant " + variant});
  if (spec.n_hashes > 0) keys.push_back({"model.lsh.n_hashes", "the variant " + variant});
  if (!spec.chunked)
    for (const char* key : {"model.ff_chunk", "model.loss_chunk"})
      keys.push_back({key, "the variant " + variant + " (unchunked)"});
  return keys;
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

SweepPoint run_sweep_point(const std::string& variant, const models::TransformerConfig& base,
                           Index batch, Index length, const SweepOptions& options) {
  sweep::check_point(options, batch, length);
  const auto config = variant_config(variant, base, length);
  return sweep::run_point<Seq2SeqSyntheticStep>(variant, config, config.encoder_layers, batch,
                                                length, options);
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
// Sources and targets have `length` positions. Activations take a bytes (bf16:
// 2), the row statistics, logsumexps and the loss's logits s.
StepMemory predict_step_memory(const models::TransformerConfig& c, Index batch, Index length,
                               std::int64_t scalar_bytes, std::int64_t activation_bytes) {
  const double s = double(scalar_bytes), x = double(batch) * length, d = c.d_model;
  const double a = activation_bytes > 0 ? double(activation_bytes) : s;
  const double heads = c.heads, inner = heads * c.d_head, f = c.d_ff, v = c.target_vocab;
  const double scores = double(batch) * heads * double(length) * length;
  const double ff_rows = c.ff_chunk > 0 ? std::min(double(c.ff_chunk), x) : x;
  const double loss_rows = std::min(double(c.loss_chunk), x);
  const bool dropout = c.attention_dropout > 0;
  struct Attention {
    double state, forward, backward, plan;  // bytes
  };
  // What one attention layer keeps (q, k, v, attended; the logsumexps or full
  // attention's probabilities), its kernels' forward and backward temporaries,
  // and its LSH plan.
  auto attention = [&](AttentionKind kind, bool shared_qk) {
    const double k_sep = shared_qk ? 0 : 1;
    const double rounds = kind == AttentionKind::Lsh ? double(c.lsh.n_hashes) : 0;
    Attention t{
        x * inner * (3 + k_sep) * a + (kind == AttentionKind::Full ? scores * a : x * heads * s), 0,
        0, 3 * rounds * x * heads * 4};
    if (kind == AttentionKind::Lsh) {
      t.forward = x * heads * s + rounds * x * (inner * a + heads * s);
      t.backward = 2 * x * heads * s + x * inner * a;
    } else if (kind == AttentionKind::Local || kind == AttentionKind::Exact) {
      t.backward = x * heads * s;  // D
      if (kind == AttentionKind::Exact)
        t.backward += sweep::exact_bf16_dq_bytes(batch, c.heads, x, inner, a, s);
    } else if (a == s) {
      t.forward = (4 * x * inner + (dropout ? scores : 0)) * a;
      t.backward = (8 * x * inner + scores + (dropout ? scores : 0)) * a;
    } else {
      // bf16: the per-head copies and the scores are float32 (full.cpp), the
      // dropout mask's probabilities bf16.
      t.forward = (4 * x * inner + scores) * s + (dropout ? scores * a : 0);
      t.backward = (8 * x * inner + scores) * s + (dropout ? scores * a : 0);
    }
    return t;
  };
  const auto encoder = attention(c.encoder_attention, c.encoder_attention_config().shares_qk());
  const auto self = attention(c.decoder_attention, false);
  const auto cross = attention(c.cross_attention, false);
  const double ff_forward = ff_rows * ((2 * d + f) * a + 2 * s);
  const double ff_backward = ff_rows * ((3 * d + 3 * f) * a + 2 * s);
  // Streams, memory and their gradients, the memory's statistics (reversible:
  // second streams, their gradients and the streams' averages).
  double alive = (6 * x * d + (c.reversible ? 6 * x * d : 0)) * a + 2 * x * s;
  double plans = double(c.encoder_layers) * encoder.plan;
  // The loss: the normed top, its statistics and gradient, then one chunk of
  // the generator's logits (float32 h W, taken from the workspace).
  double workspace = 2 * x * d * a + 2 * x * s + loss_rows * v * s;
  // Per sub-layer: forward (LayerNorm output, its output, statistics; the
  // activations too when they are not kept), and backward (the upstream copy
  // or the recomputed G, then LayerNorm output, statistics, its gradient,
  // dq, dk, dv, d(attended) and the kernels' temporaries).
  auto sublayer = [&](const Attention& t, double k_sep) {
    const double unsaved = c.reversible ? t.state : 0;
    workspace = std::max(workspace, 2 * x * d * a + 2 * x * s + unsaved + t.forward);
    const double attention_bwd = (x * d + x * inner * (3 + k_sep)) * a + t.backward;
    const double recompute = c.reversible ? std::max(t.forward, attention_bwd) : attention_bwd;
    workspace =
        std::max(workspace, x * d * a + std::max(ff_backward, x * d * a + 2 * x * s + recompute));
  };
  workspace = std::max(workspace, ff_forward);
  sublayer(encoder, c.encoder_attention_config().shares_qk() ? 0 : 1);
  sublayer(self, 1);
  sublayer(cross, 1);
  // The batched shapes' own workspace: the largest slice of its LSH, local or
  // exact layers (encoder, decoder self-attention, cross-attention: source and
  // target have the same length here).
  alive += std::max({sweep::chunk_slice_bytes(c.encoder_attention, c.lsh, c.local, batch, c.heads,
                                              c.d_head, length, s, a),
                     sweep::chunk_slice_bytes(c.decoder_attention, c.lsh, c.local, batch, c.heads,
                                              c.d_head, length, s, a),
                     sweep::chunk_slice_bytes(c.cross_attention, c.lsh, c.local, batch, c.heads,
                                              c.d_head, length, s, a)});
  if (c.reversible) {  // one layer's recomputed activations
    alive += std::max({encoder.state, self.state, cross.state});
  } else {
    alive += double(c.encoder_layers) * (2 * x * d * a + encoder.state);
    alive += double(c.decoder_layers) * (3 * x * d * a + self.state + cross.state);
  }
  const double panels = a < s
                            ? sweep::mixed_panel_bytes(
                                  {{x, d, inner}, {x, inner, d}, {ff_rows, d, f}, {ff_rows, f, d}})
                            : 0.0;
  // The loss phase's: the generator's logits h W, dh = dz W^T, dW += h^T dz.
  const double loss_panels =
      a < s ? sweep::mixed_panel_bytes(
                  {{loss_rows, d, v, true}, {loss_rows, 0, d}, {loss_rows, d, v, true, true}})
            : 0.0;
  const double bytes = alive + workspace + plans;
  StepMemory m;
  m.workspace = saturated_bytes(workspace);
  m.forward = m.backward = m.optimizer = saturated_bytes(bytes + panels);
  m.loss = saturated_bytes(bytes + loss_panels + x * s);
  return m;
}

RunMemory predict_run_memory(const models::TransformerConfig& config, Index batch, Index length,
                             std::int64_t scalar_bytes, bool training,
                             std::int64_t activation_bytes) {
  return sweep::run_memory(config, batch, length, scalar_bytes, training, activation_bytes);
}

}  // namespace reformer::train
