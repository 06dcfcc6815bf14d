// Hyper-parameters of the Reformer language model (models/reformer_lm.hpp).
//
// A config holds hyper-parameters only: no activations, no per-call state.
// validate() checks every field and every contradiction between fields and
// throws ConfigError naming the first bad one; validate_length() checks a
// sequence length against the chunk sizes and the position encoding.
#pragma once

#include "reformer/attention/attention_layer.hpp"
#include "reformer/models/model_sizes.hpp"
#include "reformer/ops/activations.hpp"

#include <string>
#include <vector>

namespace reformer::models {

enum class PositionKind { None, Sinusoidal, Learned, Axial };
// "none", "sinusoidal", "learned", "axial"; ConfigError naming the value otherwise.
PositionKind parse_position_kind(const std::string& name);
const char* to_string(PositionKind kind);

enum class QkProjection { Auto, Shared, Separate };
// "auto", "shared", "separate"; ConfigError naming the value otherwise.
QkProjection parse_qk_projection(const std::string& name);
const char* to_string(QkProjection qk);

// The sizes (models/model_sizes.hpp) with ModelSizes' defaults: dropout on
// the attention output, FF hidden and FF output, embeddings; layer_norm_eps
// of every LayerNorm (Hugging Face's pretrained Reformers use 1e-12).
struct ReformerConfig : ModelSizes {
  Index vocab = 256;  // token ids are in [0, vocab)
  Index layers = 2;
  // Attention kind of layer i is attention[i % attention.size()]:
  // {"local", "lsh"} alternates local and LSH layers up to the depth.
  std::vector<attention::AttentionKind> attention{attention::AttentionKind::Lsh};
  bool causal = true;
  // Queries and keys: one shared projection, or separate ones. Auto: each
  // kind's own rule (LSH shares, full and local do not). Shared full attention
  // can be evaluated with LSH and the reverse (the paper's Table 2).
  QkProjection qk = QkProjection::Auto;
  // Reversible blocks (Y1 = X1 + F(X2), Y2 = X2 + G(Y1)) that store no
  // per-layer activations; false: pre-LN residual blocks storing them, on the
  // same parameters (the two can be compared on identical weights).
  bool reversible = true;
  PositionKind positions = PositionKind::Axial;
  Index max_length = 4096;           // longest sequence (learned and axial tables)
  std::vector<Index> axial_shape{};  // {n1, n2} with n1 * n2 = max_length; empty: chosen
  std::vector<Index> axial_dims{};   // {d1, d2} with d1 + d2 = d_model; empty: d/2 each
  ops::Activation ff_activation = ops::Activation::ReLU;
  // Per-kind attention-probability dropout (Hugging Face's
  // lsh_attention_probs_dropout_prob / local_attention_probs_dropout_prob);
  // -1: attention_dropout.
  double lsh_attention_dropout = -1.0;
  double local_attention_dropout = -1.0;
  bool tie_embeddings = false;  // output projection = embedding table (no separate W_out)
  attention::LshAttentionConfig lsh{};
  attention::LocalAttentionConfig local{};

  // Throws ConfigError naming the first bad or contradictory field.
  void validate() const;
  // ConfigError unless `length` fits: positive, <= max_length, a multiple of
  // every chunk length used by the layers (LSH chunk, local chunk; the FF chunk
  // need not divide it).
  void validate_length(Index length) const;
  // The shortest length >= `length` that validate_length accepts (a multiple
  // of the chunk lengths the layers need): what a shorter sequence is padded
  // to. ConfigError when that exceeds model.max_length.
  Index padded_length(Index length) const;
  attention::AttentionKind layer_kind(Index layer) const;
  // The attention-probability dropout of layers of this kind.
  double attention_dropout_of(attention::AttentionKind kind) const;
  // The attention layer config of layer i (dropouts, causal, variant configs).
  attention::AttentionLayerConfig attention_config(Index layer) const;
  // {n1, n2}: axial_shape, or a factorisation of max_length chosen near its
  // square root when axial_shape is empty.
  std::vector<Index> resolved_axial_shape() const;
  std::vector<Index> resolved_axial_dims() const;
};

}  // namespace reformer::models
