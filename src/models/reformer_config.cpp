#include "reformer/models/reformer_config.hpp"

#include "config/value_rules.hpp"
#include "reformer/core/error.hpp"
#include "reformer/core/key_errors.hpp"

#include <algorithm>
#include <climits>
#include <cmath>
#include <numeric>
#include <sstream>

namespace reformer::models {
namespace {

using attention::AttentionKind;
using reformer::detail::concat;

constexpr const char* kOp = "ReformerConfig";

std::string list(const std::vector<Index>& values) {
  std::ostringstream out;
  out << "[";
  for (std::size_t i = 0; i < values.size(); ++i) out << (i ? ", " : "") << values[i];
  out << "]";
  return out.str();
}

void require_positive(const char* key, Index value) {
  require<ConfigError>(value > 0, kOp, ": ", key, " is ", value, " but must be positive");
}

// The product of two sizes that must fit a 64-bit index (it sizes a tensor);
// ConfigError naming both keys and values when it does not.
Index checked_product(const char* key_a, Index a, const char* key_b, Index b) {
  Index product = 0;
  require<ConfigError>(!__builtin_mul_overflow(a, b, &product), kOp, ": ", key_a, " * ", key_b,
                       " = ", a, " * ", b,
                       " overflows a 64-bit size; no tensor can be that large: lower them");
  return product;
}

// Layers using `kind`, as "layers 0, 2 and 4" (for messages).
std::string layers_of(const ReformerConfig& c, AttentionKind kind) {
  std::vector<Index> found;
  for (Index i = 0; i < c.layers; ++i)
    if (c.layer_kind(i) == kind) found.push_back(i);
  std::ostringstream out;
  out << (found.size() == 1 ? "layer " : "layers ");
  const std::size_t shown = std::min<std::size_t>(found.size(), 6);
  for (std::size_t i = 0; i < shown; ++i)
    out << (i == 0 ? "" : (i + 1 == found.size() ? " and " : ", ")) << found[i];
  if (shown < found.size()) out << ", ... (" << found.size() << " in all)";
  out << (found.size() == 1 ? " uses" : " use");
  return out.str();
}

bool uses(const ReformerConfig& c, AttentionKind kind) {
  for (Index i = 0; i < c.layers; ++i)
    if (c.layer_kind(i) == kind) return true;
  return false;
}

}  // namespace

PositionKind parse_position_kind(const std::string& name) {
  for (const PositionKind kind :
       {PositionKind::None, PositionKind::Sinusoidal, PositionKind::Learned, PositionKind::Axial})
    if (name == to_string(kind)) return kind;
  throw ConfigError(concat("position encoding \"", name,
                           "\" is unknown; choose none, sinusoidal, learned or axial"));
}

const char* to_string(PositionKind kind) {
  switch (kind) {
    case PositionKind::None:
      return "none";
    case PositionKind::Sinusoidal:
      return "sinusoidal";
    case PositionKind::Learned:
      return "learned";
    case PositionKind::Axial:
      return "axial";
  }
  throw Error("to_string: invalid PositionKind");
}

QkProjection parse_qk_projection(const std::string& name) {
  for (const QkProjection qk : {QkProjection::Auto, QkProjection::Shared, QkProjection::Separate})
    if (name == to_string(qk)) return qk;
  throw ConfigError(
      concat("qk projection \"", name, "\" is unknown; choose auto, shared or separate"));
}

const char* to_string(QkProjection qk) {
  switch (qk) {
    case QkProjection::Auto:
      return "auto";
    case QkProjection::Shared:
      return "shared";
    case QkProjection::Separate:
      return "separate";
  }
  throw Error("to_string: invalid QkProjection");
}

void ReformerConfig::validate() const {
  require_positive("model.vocab", vocab);
  // Token ids are ints on the device.
  require<ConfigError>(vocab <= INT_MAX, kOp, ": model.vocab is ", vocab, " but must be at most ",
                       INT_MAX);
  validate_sizes(kOp);
  require_positive("model.layers", layers);
  require<ConfigError>(layers <= 100000, kOp, ": model.layers is ", layers,
                       " but must be at most 100000");
  // Every weight's element count must be a valid size (the memory check before
  // a run then says whether it fits).
  const Index inner = checked_product("model.heads", heads, "model.d_head", d_head);
  checked_product("model.d_model", d_model, "model.heads * model.d_head", inner);
  checked_product("model.d_model", d_model, "model.d_ff", d_ff);
  checked_product("model.vocab", vocab, "model.d_model", d_model);
  require<ConfigError>(!attention.empty(), kOp,
                       ": model.attention is empty but must name at least one attention kind "
                       "(full, exact, lsh or local)");
  require_positive("model.max_length", max_length);
  checked_product("model.max_length", max_length, "model.d_model", d_model);
  if (lsh_attention_dropout != -1.0)
    require_rate(kOp, "model.lsh.attention_dropout", lsh_attention_dropout,
                 " or -1 (model.attention_dropout)");
  if (local_attention_dropout != -1.0)
    require_rate(kOp, "model.local.attention_dropout", local_attention_dropout,
                 " or -1 (model.attention_dropout)");

  if (positions == PositionKind::Axial) {
    require<ConfigError>(axial_shape.empty() || axial_shape.size() == 2, kOp,
                         ": model.axial_shape is ", list(axial_shape),
                         " but must be two factors [n1, n2] of model.max_length, or [] to "
                         "choose them");
    if (!axial_shape.empty()) {
      require<ConfigError>(axial_shape[0] > 0 && axial_shape[1] > 0, kOp, ": model.axial_shape is ",
                           list(axial_shape), " but both factors must be positive");
      Index product = 0;
      require<ConfigError>(!__builtin_mul_overflow(axial_shape[0], axial_shape[1], &product), kOp,
                           ": model.axial_shape is ", list(axial_shape),
                           " but its product overflows a 64-bit size; it must be model.max_length "
                           "= ",
                           max_length);
      require<ConfigError>(product == max_length, kOp, ": model.axial_shape is ", list(axial_shape),
                           " (product ", product,
                           ") but its product must be "
                           "model.max_length = ",
                           max_length);
    }
    require<ConfigError>(axial_dims.empty() || axial_dims.size() == 2, kOp,
                         ": model.axial_dims is ", list(axial_dims),
                         " but must be two widths [d1, d2] with d1 + d2 = model.d_model, or [] "
                         "for d_model / 2 each");
    if (!axial_dims.empty()) {
      require<ConfigError>(axial_dims[0] > 0 && axial_dims[1] > 0, kOp, ": model.axial_dims is ",
                           list(axial_dims), " but both widths must be positive");
      require<ConfigError>(axial_dims[0] + axial_dims[1] == d_model, kOp, ": model.axial_dims is ",
                           list(axial_dims), " (sum ", axial_dims[0] + axial_dims[1],
                           ") but its sum must be model.d_model = ", d_model);
    } else {
      require<ConfigError>(d_model >= 2, kOp, ": model.d_model is ", d_model,
                           " but axial positions need d_model >= 2 (two halves)");
    }
  }

  for (const Index f : lsh.n_buckets)
    require<ConfigError>(f >= 2 && f % 2 == 0, kOp, ": model.lsh.n_buckets is ",
                         list(lsh.n_buckets),
                         " but every bucket count must be even and at least 2 (hashing takes "
                         "the argmax over [xR, -xR])");
  detail::with_key_prefix(kOp, "model.lsh", [&] { lsh.validate(); });
  detail::with_key_prefix(kOp, "model.local", [&] { local.validate(); });
  // model.qk against the kinds that fix it (AttentionLayerConfig::shares_qk).
  if (qk == QkProjection::Separate && uses(*this, AttentionKind::Lsh))
    throw ConfigError(concat(kOp, ": model.qk is separate but ",
                             layers_of(*this, AttentionKind::Lsh),
                             " LSH attention, which always shares q and k (its keys are the "
                             "normalised queries); set model.qk = \"auto\" or \"shared\""));
  if (qk == QkProjection::Shared && uses(*this, AttentionKind::Local))
    throw ConfigError(concat(kOp, ": model.qk is shared but ",
                             layers_of(*this, AttentionKind::Local),
                             " local attention, which has separate q and k; set model.qk = "
                             "\"auto\" or \"separate\""));
  // Per kind: d_head limits of the fused kernels and the variant's own rules.
  for (const AttentionKind kind :
       {AttentionKind::Full, AttentionKind::Lsh, AttentionKind::Local, AttentionKind::Exact})
    for (Index i = 0; i < layers; ++i)
      if (layer_kind(i) == kind) {
        detail::with_key_prefix(kOp, "model", [&] { attention_config(i).validate(); });
        break;
      }
}

namespace {

// The largest chunk of at most `chunk` that divides `length` (a length that
// cannot grow past model.max_length fits a smaller chunk instead).
Index dividing_chunk(Index length, Index chunk) {
  Index c = std::min(chunk, length);
  while (c > 1 && length % c != 0) --c;
  return c;
}

}  // namespace

void ReformerConfig::validate_length(Index length) const {
  require<ConfigError>(length > 0, kOp, ": sequence length ", length, " must be positive");
  if (positions == PositionKind::Learned || positions == PositionKind::Axial)
    require<ConfigError>(length <= max_length, kOp, ": sequence length ", length,
                         " is longer than model.max_length = ", max_length, " (the ",
                         to_string(positions), " position table); raise model.max_length");
  if (uses(*this, AttentionKind::Lsh) && length > lsh.chunk)
    require<ConfigError>(length % lsh.chunk == 0, kOp, ": sequence length ", length,
                         " is not a multiple of model.lsh.chunk = ", lsh.chunk, " (",
                         layers_of(*this, AttentionKind::Lsh),
                         " LSH attention, which needs a multiple or at most one chunk); "
                         "use a length of ",
                         (length / lsh.chunk + 1) * lsh.chunk, ", a chunk that divides ", length,
                         " (model.lsh.chunk = ", dividing_chunk(length, lsh.chunk),
                         ") or pad the sequence");
  if (uses(*this, AttentionKind::Local))
    require<ConfigError>(
        length % local.chunk == 0, kOp, ": sequence length ", length,
        " is not a multiple of model.local.chunk = ", local.chunk, " (",
        layers_of(*this, AttentionKind::Local), " local attention); use a length of ",
        (length / local.chunk + 1) * local.chunk, ", a chunk that divides ", length,
        " (model.local.chunk = ", dividing_chunk(length, local.chunk), ") or pad the sequence");
}

Index ReformerConfig::padded_length(Index length) const {
  require<ConfigError>(length > 0, kOp, ": sequence length ", length, " must be positive");
  // LSH needs a multiple of its chunk unless the sequence is one chunk at most.
  Index multiple = 1;
  if (uses(*this, AttentionKind::Local)) multiple = std::lcm(multiple, local.chunk);
  if (uses(*this, AttentionKind::Lsh) && (length > lsh.chunk || multiple > 1))
    multiple = std::lcm(multiple, lsh.chunk);
  const Index padded = (length + multiple - 1) / multiple * multiple;
  validate_length(padded);
  return padded;
}

attention::AttentionKind ReformerConfig::layer_kind(Index layer) const {
  require<ConfigError>(!attention.empty(), kOp, ": model.attention is empty");
  require<ConfigError>(layer >= 0 && layer < layers, kOp, ": layer ", layer,
                       " does not exist; the model has ", layers, " layers");
  return attention[std::size_t(layer) % attention.size()];
}

double ReformerConfig::attention_dropout_of(attention::AttentionKind kind) const {
  if (kind == AttentionKind::Lsh && lsh_attention_dropout != -1.0) return lsh_attention_dropout;
  if (kind == AttentionKind::Local && local_attention_dropout != -1.0)
    return local_attention_dropout;
  return attention_dropout;
}

attention::AttentionLayerConfig ReformerConfig::attention_config(Index layer) const {
  attention::AttentionLayerConfig c;
  c.kind = layer_kind(layer);
  c.d_model = d_model;
  c.heads = heads;
  c.d_head = d_head;
  c.causal = causal;
  if (qk != QkProjection::Auto) c.shared_qk = qk == QkProjection::Shared;
  c.attention_dropout = attention_dropout_of(c.kind);
  c.output_dropout = dropout;
  c.lsh = lsh;
  c.local = local;
  return c;
}

std::vector<Index> ReformerConfig::resolved_axial_shape() const {
  if (!axial_shape.empty()) return axial_shape;
  require<ConfigError>(max_length > 0, kOp, ": model.max_length is ", max_length,
                       " but must be positive");
  // The factor pair nearest the square root: n1 <= n2, n1 * n2 = max_length.
  Index n1 = Index(std::sqrt(double(max_length)));
  while (n1 * n1 > max_length) --n1;
  while ((n1 + 1) * (n1 + 1) <= max_length) ++n1;
  while (max_length % n1 != 0) --n1;
  return {n1, max_length / n1};
}

std::vector<Index> ReformerConfig::resolved_axial_dims() const {
  if (!axial_dims.empty()) return axial_dims;
  return {d_model / 2, d_model - d_model / 2};
}

}  // namespace reformer::models
