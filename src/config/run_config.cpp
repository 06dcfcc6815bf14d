#include "reformer/config/run_config.hpp"

#include "config/toml_document.hpp"
#include "reformer/attention/lsh.hpp"
#include "reformer/core/error.hpp"
#include "reformer/io/files.hpp"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <sstream>

namespace reformer::config {
namespace {

using detail::TomlNode;
using reformer::detail::concat;
using Type = TomlNode::Type;

// ---------------------------------------------------------------------------
// The keys: one entry per config field, read from a TOML value and written back
// as TOML text (the same text serves to_toml and first_difference).

struct Key {
  std::string name;  // dotted: "model.lsh.n_hashes"
  // Sets the field from a value; throws ConfigError "expected ..., found ..."
  // (the caller adds where and which key).
  std::function<void(RunConfig&, const TomlNode&)> read;
  std::function<std::string(const RunConfig&)> write;
  // A comment for to_toml (automatic values), or "".
  std::function<std::string(const RunConfig&)> note = [](const RunConfig&) { return ""; };
};

template <class Field>
using Access = std::function<Field&(RunConfig&)>;

// Fields are read through a non-const accessor; writing only reads them.
template <class Field>
const Field& get(const Access<Field>& field, const RunConfig& c) {
  return field(const_cast<RunConfig&>(c));
}

[[noreturn]] void wrong_type(const std::string& expected, const TomlNode& value,
                             const std::string& hint = "") {
  throw ConfigError(concat("expected ", expected, ", found ", detail::describe(value), hint));
}

Key integer_key(std::string name, Access<std::int64_t> field) {
  return {std::move(name),
          [field](RunConfig& c, const TomlNode& v) {
            if (v.type == Type::Float && std::isfinite(v.floating) &&
                v.floating == std::floor(v.floating))
              wrong_type("an integer", v, " (write it without a decimal point or exponent)");
            if (v.type != Type::Integer) wrong_type("an integer", v);
            field(c) = v.integer;
          },
          [field](const RunConfig& c) { return std::to_string(get(field, c)); }};
}

// A chunk of rows (model.ff_chunk, model.loss_chunk): an integer, or "auto"
// (kAutoChunk: the run picks it, train/chunk_choice.hpp).
Key chunk_key(std::string name, Access<std::int64_t> field) {
  Key key = integer_key(std::move(name), field);
  key.read = [field, integer = key.read](RunConfig& c, const TomlNode& v) {
    if (v.type == Type::String && v.string != "auto")
      throw ConfigError(concat("value ", detail::to_toml_text(v),
                               " is unknown; give rows (an integer) or \"auto\""));
    if (v.type == Type::String) {
      field(c) = kAutoChunk;
      return;
    }
    integer(c, v);
    if (field(c) < 0)
      throw ConfigError(
          concat("value ", field(c), " is negative but must be rows >= 0 or \"auto\""));
  };
  key.write = [field](const RunConfig& c) {
    const auto rows = get(field, c);
    return rows == kAutoChunk ? std::string("\"auto\"") : std::to_string(rows);
  };
  return key;
}

// TOML integers are signed 64-bit: seeds are in [0, 2^63).
Key seed_key(std::string name, Access<std::uint64_t> field) {
  return {std::move(name),
          [field](RunConfig& c, const TomlNode& v) {
            if (v.type != Type::Integer) wrong_type("a non-negative integer", v);
            if (v.integer < 0)
              throw ConfigError(concat("value ", v.integer, " is negative but must be >= 0"));
            field(c) = std::uint64_t(v.integer);
          },
          [field](const RunConfig& c) { return std::to_string(get(field, c)); }};
}

Key float_key(std::string name, Access<double> field) {
  return {std::move(name),
          [field](RunConfig& c, const TomlNode& v) {
            if (v.type == Type::Integer)
              field(c) = double(v.integer);
            else if (v.type == Type::Float)
              field(c) = v.floating;
            else
              wrong_type("a number", v);
          },
          [field](const RunConfig& c) { return detail::toml_float(get(field, c)); }};
}

Key bool_key(std::string name, Access<bool> field) {
  return {std::move(name),
          [field](RunConfig& c, const TomlNode& v) {
            if (v.type != Type::Boolean) wrong_type("a boolean (true or false)", v);
            field(c) = v.boolean;
          },
          [field](const RunConfig& c) { return std::string(get(field, c) ? "true" : "false"); }};
}

Key string_key(std::string name, Access<std::string> field) {
  return {std::move(name),
          [field](RunConfig& c, const TomlNode& v) {
            if (v.type != Type::String) wrong_type("a string", v, " (quote it: \"...\")");
            field(c) = v.string;
          },
          [field](const RunConfig& c) { return detail::toml_quote(get(field, c)); }};
}

std::string joined(const std::vector<std::string>& names) {
  std::string out;
  for (std::size_t i = 0; i < names.size(); ++i) out += (i ? ", " : "") + names[i];
  return out;
}

std::string choice_list(const std::vector<std::string>& choices) {
  std::string out;
  for (std::size_t i = 0; i < choices.size(); ++i)
    out += (i == 0 ? "" : (i + 1 == choices.size() ? " or " : ", ")) + choices[i];
  return out;
}

void check_choice(const TomlNode& v, const std::vector<std::string>& choices) {
  if (v.type != Type::String) wrong_type("a string (" + choice_list(choices) + ")", v);
  if (std::find(choices.begin(), choices.end(), v.string) == choices.end())
    throw ConfigError(
        concat("value ", detail::to_toml_text(v), " is unknown; choose ", choice_list(choices)));
}

// A string field with a fixed set of values.
Key choice_key(std::string name, Access<std::string> field, std::vector<std::string> choices) {
  return {std::move(name),
          [field, choices](RunConfig& c, const TomlNode& v) {
            check_choice(v, choices);
            field(c) = v.string;
          },
          [field](const RunConfig& c) { return detail::toml_quote(get(field, c)); }};
}

// An enum written as its lowercase name; `parse` is the enum's own parser.
template <class E>
Key enum_key(std::string name, Access<E> field, std::vector<E> values,
             std::function<std::string(E)> print, std::function<E(const std::string&)> parse) {
  std::vector<std::string> choices;
  for (const E value : values) choices.push_back(print(value));
  return {std::move(name),
          [field, choices, parse](RunConfig& c, const TomlNode& v) {
            check_choice(v, choices);
            field(c) = parse(v.string);
          },
          [field, print](const RunConfig& c) { return detail::toml_quote(print(get(field, c))); }};
}

std::string integer_list(const std::vector<Index>& values) {
  std::string out = "[";
  for (std::size_t i = 0; i < values.size(); ++i)
    out += (i ? ", " : "") + std::to_string(values[i]);
  return out + "]";
}

Key integer_list_key(std::string name, Access<std::vector<Index>> field, std::string example) {
  return {std::move(name),
          [field, example](RunConfig& c, const TomlNode& v) {
            const std::string expected = "an array of integers (e.g. " + example + ")";
            if (v.type != Type::Array) wrong_type(expected, v);
            std::vector<Index> values;
            for (const TomlNode& element : v.array) {
              if (element.type != Type::Integer) wrong_type(expected, v);
              values.push_back(element.integer);
            }
            field(c) = values;
          },
          [field](const RunConfig& c) { return integer_list(get(field, c)); }};
}

Key attention_list_key() {
  using attention::AttentionKind;
  const std::vector<std::string> choices{"full", "lsh", "local", "exact"};
  return {"model.attention",
          [choices](RunConfig& c, const TomlNode& v) {
            const std::string expected =
                "an array of attention kinds (e.g. [\"lsh\"] or [\"local\", \"lsh\"])";
            if (v.type != Type::Array) wrong_type(expected, v);
            std::vector<AttentionKind> kinds;
            for (const TomlNode& element : v.array) {
              if (element.type != Type::String) wrong_type(expected, v);
              check_choice(element, choices);
              kinds.push_back(attention::parse_attention_kind(element.string));
            }
            c.model.attention = kinds;
          },
          [](const RunConfig& c) {
            std::string out = "[";
            for (std::size_t i = 0; i < c.model.attention.size(); ++i)
              out += std::string(i ? ", " : "") + "\"" + to_string(c.model.attention[i]) + "\"";
            return out + "]";
          }};
}

std::string activation_name(ops::Activation a) {
  switch (a) {
    case ops::Activation::ReLU:
      return "relu";
    case ops::Activation::GELU:
      return "gelu";
  }
  throw Error("activation_name: invalid Activation");
}

// A family's own key, its value kept as TOML text in RunConfig::settings.
Key family_key(const FamilyKey& declared) {
  using Kind = FamilyKey::Kind;
  const FamilyKey key = declared;
  return {key.name,
          [key](RunConfig& c, const TomlNode& v) {
            std::string text;
            switch (key.kind) {
              case Kind::Integer:
                if (v.type != Type::Integer) wrong_type("an integer", v);
                text = std::to_string(v.integer);
                break;
              case Kind::Number:
                if (v.type == Type::Integer)
                  text = detail::toml_float(double(v.integer));
                else if (v.type == Type::Float)
                  text = detail::toml_float(v.floating);
                else
                  wrong_type("a number", v);
                break;
              case Kind::Boolean:
                if (v.type != Type::Boolean) wrong_type("a boolean (true or false)", v);
                text = v.boolean ? "true" : "false";
                break;
              case Kind::String:
                if (!key.choices.empty()) check_choice(v, key.choices);
                if (v.type != Type::String) wrong_type("a string", v, " (quote it: \"...\")");
                text = detail::toml_quote(v.string);
                break;
              case Kind::IntegerList: {
                std::vector<Index> values;
                const std::string expected =
                    "an array of integers (e.g. " + key.default_value + ")";
                if (v.type != Type::Array) wrong_type(expected, v);
                for (const TomlNode& element : v.array) {
                  if (element.type != Type::Integer) wrong_type(expected, v);
                  values.push_back(element.integer);
                }
                text = integer_list(values);
                break;
              }
            }
            c.settings.values[key.name] = text;
          },
          [key](const RunConfig& c) { return c.settings.toml(key.name); }};
}

#define REFORMER_FIELD(member) \
  [](RunConfig & c) -> auto& { return c.member; }

std::vector<Key> make_keys() {
  using attention::AttentionKind;
  using models::PositionKind;
  std::vector<Key> k;
  k.push_back(string_key("run.dir", REFORMER_FIELD(run_dir)));
  k.push_back(string_key("run.name", REFORMER_FIELD(name)));

  std::vector<ModelType> model_types;
  for (std::size_t i = 0; i < model_type_names().size(); ++i) model_types.push_back(ModelType(i));
  k.push_back(enum_key<ModelType>(
      "model.type", REFORMER_FIELD(model_type), model_types,
      [](ModelType t) { return to_string(t); },
      [](const std::string& name) { return parse_model_type(name, "model.type"); }));
  k.push_back(integer_key("model.vocab", REFORMER_FIELD(model.vocab)));
  k.push_back(integer_key("model.d_model", REFORMER_FIELD(model.d_model)));
  k.push_back(integer_key("model.d_ff", REFORMER_FIELD(model.d_ff)));
  k.push_back(integer_key("model.heads", REFORMER_FIELD(model.heads)));
  k.push_back(integer_key("model.d_head", REFORMER_FIELD(model.d_head)));
  k.push_back(integer_key("model.layers", REFORMER_FIELD(model.layers)));
  k.push_back(attention_list_key());
  k.push_back(bool_key("model.causal", REFORMER_FIELD(model.causal)));
  k.push_back(bool_key("model.reversible", REFORMER_FIELD(model.reversible)));
  k.push_back(enum_key<models::QkProjection>(
      "model.qk", REFORMER_FIELD(model.qk),
      {models::QkProjection::Auto, models::QkProjection::Shared, models::QkProjection::Separate},
      [](models::QkProjection q) { return std::string(models::to_string(q)); },
      models::parse_qk_projection));
  k.push_back(enum_key<PositionKind>(
      "model.positions", REFORMER_FIELD(model.positions),
      {PositionKind::None, PositionKind::Sinusoidal, PositionKind::Learned, PositionKind::Axial},
      [](PositionKind p) { return std::string(models::to_string(p)); },
      models::parse_position_kind));
  k.push_back(integer_key("model.max_length", REFORMER_FIELD(model.max_length)));
  k.push_back(
      integer_list_key("model.axial_shape", REFORMER_FIELD(model.axial_shape), "[128, 512]"));
  k.back().note = [](const RunConfig& c) -> std::string {
    if (!c.model.axial_shape.empty() || c.model.positions != PositionKind::Axial ||
        c.model.max_length <= 0)
      return "";
    return "automatic: " + integer_list(c.model.resolved_axial_shape());
  };
  k.push_back(integer_list_key("model.axial_dims", REFORMER_FIELD(model.axial_dims), "[256, 768]"));
  k.back().note = [](const RunConfig& c) -> std::string {
    if (!c.model.axial_dims.empty() || c.model.positions != PositionKind::Axial) return "";
    return "automatic: " + integer_list(c.model.resolved_axial_dims());
  };
  k.push_back(chunk_key("model.ff_chunk", REFORMER_FIELD(model.ff_chunk)));
  k.push_back(enum_key<ops::Activation>("model.ff_activation", REFORMER_FIELD(model.ff_activation),
                                        {ops::Activation::ReLU, ops::Activation::GELU},
                                        activation_name, ops::parse_activation));
  k.push_back(float_key("model.dropout", REFORMER_FIELD(model.dropout)));
  k.push_back(float_key("model.attention_dropout", REFORMER_FIELD(model.attention_dropout)));
  k.push_back(float_key("model.layer_norm_eps", REFORMER_FIELD(model.layer_norm_eps)));
  k.push_back(bool_key("model.tie_embeddings", REFORMER_FIELD(model.tie_embeddings)));
  k.push_back(chunk_key("model.loss_chunk", REFORMER_FIELD(model.loss_chunk)));
  k.push_back(float_key("model.label_smoothing", REFORMER_FIELD(model.label_smoothing)));

  k.push_back(integer_key("model.lsh.chunk", REFORMER_FIELD(model.lsh.chunk)));
  k.push_back(integer_key("model.lsh.n_hashes", REFORMER_FIELD(model.lsh.n_hashes)));
  k.push_back(integer_list_key("model.lsh.n_buckets", REFORMER_FIELD(model.lsh.n_buckets), "[64]"));
  k.back().note = [](const RunConfig& c) -> std::string {
    const auto& lsh = c.model.lsh;
    if (!lsh.n_buckets.empty() || lsh.chunk <= 0 || c.data.length <= 0) return "";
    return concat("automatic: ", integer_list(attention::lsh_bucket_factors(lsh, c.data.length)),
                  " at data.length ", c.data.length);
  };
  k.push_back(integer_key("model.lsh.n_before", REFORMER_FIELD(model.lsh.n_before)));
  k.push_back(
      float_key("model.lsh.attention_dropout", REFORMER_FIELD(model.lsh_attention_dropout)));
  k.push_back(
      bool_key("model.lsh.duplicate_correction", REFORMER_FIELD(model.lsh.duplicate_correction)));

  k.push_back(integer_key("model.local.chunk", REFORMER_FIELD(model.local.chunk)));
  k.push_back(integer_key("model.local.n_before", REFORMER_FIELD(model.local.n_before)));
  k.push_back(
      float_key("model.local.attention_dropout", REFORMER_FIELD(model.local_attention_dropout)));

  // model.type = "transformer" (the encoder-decoder): the keys above that apply
  // (widths, heads, positions, dropout, chunks, lsh, local) and these.
  k.push_back(
      integer_key("model.seq2seq.encoder_layers", REFORMER_FIELD(transformer.encoder_layers)));
  k.push_back(
      integer_key("model.seq2seq.decoder_layers", REFORMER_FIELD(transformer.decoder_layers)));
  for (const auto& [name, member] :
       std::vector<std::pair<std::string, AttentionKind models::TransformerConfig::*>>{
           {"model.seq2seq.encoder_attention", &models::TransformerConfig::encoder_attention},
           {"model.seq2seq.decoder_attention", &models::TransformerConfig::decoder_attention},
           {"model.seq2seq.cross_attention", &models::TransformerConfig::cross_attention}}) {
    const auto field = member;
    k.push_back(enum_key<AttentionKind>(
        name, [field](RunConfig& c) -> AttentionKind& { return c.transformer.*field; },
        {AttentionKind::Full, AttentionKind::Lsh, AttentionKind::Local, AttentionKind::Exact},
        [](AttentionKind a) { return std::string(attention::to_string(a)); },
        attention::parse_attention_kind));
  }
  k.push_back(
      bool_key("model.seq2seq.share_embeddings", REFORMER_FIELD(transformer.share_embeddings)));
  k.push_back(bool_key("model.seq2seq.tie_generator", REFORMER_FIELD(transformer.tie_generator)));
  k.push_back(bool_key("model.seq2seq.reversible", REFORMER_FIELD(transformer.reversible)));

  // model.type = "transformer_xl": the keys above that apply (widths, heads,
  // layers, dropout, chunks, tie_embeddings, ff_activation) and these.
  k.push_back(integer_key("model.xl.mem_len", REFORMER_FIELD(xl.mem_len)));
  k.push_back(integer_key("model.xl.clamp_len", REFORMER_FIELD(xl.clamp_len)));
  k.push_back(bool_key("model.xl.same_length", REFORMER_FIELD(xl.same_length)));
  k.push_back(bool_key("model.xl.pre_norm", REFORMER_FIELD(xl.pre_norm)));
  k.push_back(bool_key("model.xl.scale_embedding", REFORMER_FIELD(xl.scale_embedding)));

  // The families' own keys ([model.<family>], [data.<task>]), each declared in
  // the family's folder (config::ModelSection::own_keys), in registry order.
  for (const ModelSection* family : model_sections())
    for (const FamilyKey& key : family->own_keys()) k.push_back(family_key(key));

  k.push_back(enum_key<data::TaskKind>(
      "data.task", REFORMER_FIELD(data.task), data::task_kinds(),
      [](data::TaskKind t) { return std::string(data::to_string(t)); }, data::parse_task_kind));
  k.push_back(integer_key("data.length", REFORMER_FIELD(data.length)));
  k.push_back(integer_key("data.vocab", REFORMER_FIELD(data.vocab)));
  k.push_back(integer_key("data.id_offset", REFORMER_FIELD(data.id_offset)));
  k.push_back(seed_key("data.seed", REFORMER_FIELD(data.seed)));
  k.push_back(string_key("data.path", REFORMER_FIELD(data.path)));
  k.push_back(choice_key("data.units", REFORMER_FIELD(data.units), {"bytes", "chars"}));
  k.push_back(integer_key("data.min_symbols", REFORMER_FIELD(data.min_symbols)));
  k.push_back(integer_key("data.max_symbols", REFORMER_FIELD(data.max_symbols)));

  k.push_back(integer_key("train.steps", REFORMER_FIELD(train.steps)));
  k.push_back(integer_key("train.batch", REFORMER_FIELD(train.batch)));
  k.push_back(integer_key("train.accumulate", REFORMER_FIELD(train.accumulate)));
  k.push_back(choice_key("train.optimizer", REFORMER_FIELD(train.optimizer), {"adam", "adamw"}));
  k.push_back(float_key("train.learning_rate", REFORMER_FIELD(train.learning_rate)));
  k.push_back(enum_key<ScheduleKind>(
      "train.schedule", REFORMER_FIELD(train.schedule),
      {ScheduleKind::constant, ScheduleKind::noam, ScheduleKind::warmup_rsqrt},
      [](ScheduleKind s) { return to_string(s); }, parse_schedule_kind));
  k.push_back(integer_key("train.warmup_steps", REFORMER_FIELD(train.warmup_steps)));
  k.push_back(float_key("train.clip_norm", REFORMER_FIELD(train.clip_norm)));
  k.push_back(integer_key("train.eval_every", REFORMER_FIELD(train.eval_every)));
  k.push_back(integer_key("train.eval_batches", REFORMER_FIELD(train.eval_batches)));
  k.push_back(integer_key("train.log_every", REFORMER_FIELD(train.log_every)));
  k.push_back(integer_key("train.checkpoint_every", REFORMER_FIELD(train.checkpoint_every)));
  k.push_back(integer_key("train.keep_checkpoints", REFORMER_FIELD(train.keep_checkpoints)));
  k.push_back(integer_key("train.skip_nonfinite", REFORMER_FIELD(train.skip_nonfinite)));
  k.push_back(
      choice_key("train.metrics_format", REFORMER_FIELD(train.metrics_format), {"csv", "jsonl"}));
  k.push_back(float_key("train.target_accuracy", REFORMER_FIELD(train.target_accuracy)));
  k.push_back(seed_key("train.seed", REFORMER_FIELD(train.seed)));
  k.push_back(choice_key("train.dtype", REFORMER_FIELD(train.dtype), {"float", "double"}));
  k.push_back(choice_key("train.precision", REFORMER_FIELD(train.precision), {"float32", "bf16"}));
  k.push_back(bool_key("train.overlap_allreduce", REFORMER_FIELD(train.overlap_allreduce)));
  k.push_back(float_key("train.allreduce_timeout", REFORMER_FIELD(train.allreduce_timeout)));
  k.push_back(string_key("train.init_from", REFORMER_FIELD(train.init_from)));

  k.push_back(float_key("train.adam.beta1", REFORMER_FIELD(train.adam.beta1)));
  k.push_back(float_key("train.adam.beta2", REFORMER_FIELD(train.adam.beta2)));
  k.push_back(float_key("train.adam.eps", REFORMER_FIELD(train.adam.eps)));
  k.push_back(float_key("train.adam.weight_decay", REFORMER_FIELD(train.adam.weight_decay)));

  k.push_back(integer_key("eval.tgt_len", REFORMER_FIELD(eval.tgt_len)));
  k.push_back(integer_key("eval.mem_len", REFORMER_FIELD(eval.mem_len)));
  k.push_back(integer_key("eval.clamp_len", REFORMER_FIELD(eval.clamp_len)));
  k.push_back(
      choice_key("eval.same_length", REFORMER_FIELD(eval.same_length), {"model", "on", "off"}));
  k.push_back(bool_key("eval.recompute", REFORMER_FIELD(eval.recompute)));
  return k;
}

#undef REFORMER_FIELD

const std::vector<Key>& keys() {
  static const std::vector<Key> table = make_keys();
  return table;
}

std::string section_of(const std::string& key) {
  const auto dot = key.rfind('.');
  return dot == std::string::npos ? "" : key.substr(0, dot);
}

// Every section holding a key, and the tables above them ("model" for
// "model.lsh"), in the order the keys are written.
const std::vector<std::string>& sections() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out;
    for (const Key& key : keys())
      for (std::string s = section_of(key.name); !s.empty(); s = section_of(s))
        if (std::find(out.begin(), out.end(), s) == out.end()) out.push_back(s);
    return out;
  }();
  return names;
}

std::string leaf_of(const std::string& key) {
  const auto dot = key.rfind('.');
  return dot == std::string::npos ? key : key.substr(dot + 1);
}

const Key* find_key(const std::string& name) {
  for (const Key& key : keys())
    if (key.name == name) return &key;
  return nullptr;
}

bool is_section(const std::string& name) {
  const auto& s = sections();
  return std::find(s.begin(), s.end(), name) != s.end();
}

// ---------------------------------------------------------------------------
// Unknown keys: suggest the closest known name.

std::size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

std::string unknown_key_message(const std::string& name) {
  std::vector<std::string> known = sections();
  for (const Key& key : keys()) known.push_back(key.name);
  // Closest within edit distance 2, else the same leaf in another section
  // ("model.n_hashes" -> "model.lsh.n_hashes").
  std::string best;
  std::size_t best_distance = 3;
  for (const auto& candidate : known) {
    const std::size_t d = edit_distance(name, candidate);
    if (d < best_distance) best_distance = d, best = candidate;
  }
  if (best.empty())
    for (const auto& candidate : known)
      if (leaf_of(candidate) == leaf_of(name)) {
        best = candidate;
        break;
      }
  std::string message = "unknown key " + name;
  if (!best.empty()) return message + "; did you mean " + best + "?";
  const std::string section = section_of(name);
  std::vector<std::string> siblings;
  if (is_section(section)) {
    for (const auto& candidate : known)
      if (section_of(candidate) == section) siblings.push_back(leaf_of(candidate));
    return message + " (the keys of [" + section + "] are " + joined(siblings) + ")";
  }
  return message + " (the sections are " + joined(sections()) + ")";
}

// ---------------------------------------------------------------------------
// Reading a document into a RunConfig.

struct Reader {
  RunConfig config;
  std::map<std::string, std::string> origins;  // key -> where its value was written

  void read_table(const TomlNode& table, const std::string& path) {
    for (const auto& [name, value] : table.table) {
      const std::string full = path.empty() ? name : path + "." + name;
      if (is_section(full)) {
        if (value.type != Type::Table)
          throw ConfigError(concat(value.origin, ": ", full, " is a section: expected a table ([",
                                   full, "]), found ", detail::describe(value)));
        read_table(value, full);
        continue;
      }
      const Key* key = find_key(full);
      if (key == nullptr) throw ConfigError(concat(value.origin, ": ", unknown_key_message(full)));
      try {
        key->read(config, value);
      } catch (const ConfigError& e) {
        throw ConfigError(concat(value.origin, ": ", full, ": ", e.what()));
      }
      origins[full] = value.origin;
    }
  }
};

void mark_origin(TomlNode& node, const std::string& origin) {
  node.origin = origin;
  for (auto& entry : node.table) mark_origin(entry.second, origin);
  for (auto& element : node.array) mark_origin(element, origin);
}

// Tables merge key by key; anything else replaces what was there.
void merge(TomlNode& into, TomlNode&& value) {
  if (into.type != Type::Table || value.type != Type::Table) {
    into = std::move(value);
    return;
  }
  for (auto& [name, entry] : value.table) {
    if (TomlNode* existing = into.find(name))
      merge(*existing, std::move(entry));
    else
      into.table.emplace_back(name, std::move(entry));
  }
}

std::string trim(const std::string& text) {
  const auto begin = text.find_first_not_of(" \t");
  if (begin == std::string::npos) return "";
  const auto end = text.find_last_not_of(" \t");
  return text.substr(begin, end - begin + 1);
}

// "section.key=value" into the document tree.
void apply_override(TomlNode& root, const std::string& override_text) {
  const std::string origin = "override '" + override_text + "'";
  const auto equals = override_text.find('=');
  require<ConfigError>(equals != std::string::npos, origin,
                       ": an override must be section.key=value (e.g. train.steps=100)");
  const std::string name = override_key(override_text);
  const std::string text = trim(override_text.substr(equals + 1));
  require<ConfigError>(!name.empty() && name.front() != '.' && name.back() != '.' &&
                           name.find("..") == std::string::npos &&
                           name.find_first_of(" \t\"'") == std::string::npos,
                       origin, ": \"", name, "\" is not a dotted key such as train.steps");

  TomlNode value;
  try {
    TomlNode document = detail::parse_toml("value = " + text + "\n", origin);
    require<ConfigError>(document.table.size() == 1, origin, ": the value must be one TOML value");
    value = std::move(document.table.front().second);
  } catch (const ConfigError& e) {
    // A bare word is a string: data.path=corpus.txt, model.positions=axial;
    // but not a number TOML refused (one too large for 64 bits).
    // (An integer: a sign only in front; "2024-06" and "1.2.3" stay strings.)
    const bool number = text.find_first_not_of("+-0123456789_") == std::string::npos &&
                        text.find_first_of("0123456789") != std::string::npos &&
                        text.find_first_of("+-", 1) == std::string::npos;
    if (!text.empty() && (number || std::string("[{\"'").find(text.front()) != std::string::npos)) {
      const std::string message = e.what();
      const auto what = message.find("TOML syntax error: ");
      throw ConfigError(concat(origin, ": the value is not valid TOML (",
                               what == std::string::npos ? message : message.substr(what + 19), ")",
                               number ? ""
                                      : "; strings inside arrays and tables need quotes, e.g. "
                                        "model.attention=[\"lsh\"]"));
    }
    value.type = Type::String;
    value.string = text;
  }
  mark_origin(value, origin);

  // Walk down to the parent table, creating sections as needed.
  TomlNode* table = &root;
  std::string rest = name;
  for (auto dot = rest.find('.'); dot != std::string::npos; dot = rest.find('.')) {
    const std::string part = rest.substr(0, dot);
    rest = rest.substr(dot + 1);
    TomlNode* next = table->find(part);
    if (next == nullptr) {
      TomlNode section;
      section.origin = origin;
      table->table.emplace_back(part, std::move(section));
      next = &table->table.back().second;
    }
    if (next->type != Type::Table) {
      next->type = Type::Table;
      next->array.clear();
      next->origin = origin;
    }
    table = next;
  }
  if (TomlNode* existing = table->find(rest))
    merge(*existing, std::move(value));
  else
    table->table.emplace_back(rest, std::move(value));
}

// Whether `key` occurs in `text` as a whole dotted name.
bool mentions(const std::string& text, const std::string& key, std::size_t& at) {
  auto is_name_char = [](char c) { return std::isalnum((unsigned char)c) || c == '_'; };
  for (auto pos = text.find(key); pos != std::string::npos; pos = text.find(key, pos + 1)) {
    const std::size_t end = pos + key.size();
    const bool starts = pos == 0 || (!is_name_char(text[pos - 1]) && text[pos - 1] != '.');
    const bool ends = end == text.size() ||
                      !(is_name_char(text[end]) ||
                        (text[end] == '.' && end + 1 < text.size() && is_name_char(text[end + 1])));
    if (starts && ends) {
      at = pos;
      return true;
    }
  }
  return false;
}

// Validates; a ConfigError gets the source name in front and, for each key it
// names that the file or an override set, where that value came from; the
// keys it names that neither set are said to be at their defaults, with the
// values (a family's defaults are the language model's where it shares
// [model]'s keys, so a short config of another family often fails on one).
template <class Validate>
void validate_with_origins(const Validate& validate, const std::string& source_name,
                           const Reader& reader) {
  try {
    validate();
  } catch (const ConfigError& e) {
    const std::string message = e.what();
    std::vector<std::pair<std::size_t, std::string>> found, unset;
    for (const Key& key : keys()) {
      std::size_t at = 0;
      if (!mentions(message, key.name, at)) continue;
      const auto origin = reader.origins.find(key.name);
      if (origin != reader.origins.end())
        found.emplace_back(at, key.name + " from " + origin->second);
      else
        unset.emplace_back(at, key.name + " = " + key.write(reader.config));
    }
    std::sort(found.begin(), found.end());
    std::sort(unset.begin(), unset.end());
    std::string where;
    for (const auto& entry : found) where += (where.empty() ? " (" : "; ") + entry.second;
    if (!where.empty()) where += ")";
    std::string defaults;
    for (const auto& entry : unset) defaults += (defaults.empty() ? "" : ", ") + entry.second;
    if (!defaults.empty())
      where += concat(" (not set in ", source_name, ", so at ",
                      unset.size() == 1 ? "its default: " : "their defaults: ", defaults, ")");
    throw ConfigError(concat(source_name, ": ", message, where));
  }
}

}  // namespace

std::string override_key(const std::string& override_text) {
  return trim(override_text.substr(0, override_text.find('=')));
}

std::vector<std::string> override_keys(const std::string& override_text) {
  TomlNode root;
  apply_override(root, override_text);
  std::vector<std::string> out;
  const std::function<void(const TomlNode&, const std::string&)> leaves =
      [&](const TomlNode& node, const std::string& path) {
        if (node.type != Type::Table) {
          out.push_back(path);
          return;
        }
        for (const auto& [name, value] : node.table)
          leaves(value, path.empty() ? name : path + "." + name);
      };
  leaves(root, "");
  return out;
}

void validate_common(const RunConfig& c, const char* op) {
  c.data.validate();
  c.train.validate();
  require<ConfigError>(!c.run_dir.empty(), op, ": run.dir is empty but must name the run folder");
  constexpr auto kMaxSeed = std::uint64_t(std::numeric_limits<std::int64_t>::max());
  require<ConfigError>(c.data.seed <= kMaxSeed, op, ": data.seed is ", c.data.seed,
                       " but must be at most ", kMaxSeed, " (a TOML integer)");
  require<ConfigError>(c.train.seed <= kMaxSeed, op, ": train.seed is ", c.train.seed,
                       " but must be at most ", kMaxSeed, " (a TOML integer)");
}

void RunConfig::validate() const { model_section(model_type).validate(*this, "RunConfig"); }

void require_length_fits(const RunConfig& c, const char* op, const std::function<void()>& check) {
  try {
    check();
  } catch (const ConfigError& e) {
    const std::string message = e.what();
    const auto colon = message.find(": ");
    throw ConfigError(concat(op, ": data.length = ", c.data.length, " does not fit the model: ",
                             colon == std::string::npos ? message : message.substr(colon + 2)));
  }
}

void require_default_eval(const RunConfig& c, const char* op) {
  const EvalConfig defaults{};
  const auto& e = c.eval;
  const bool default_eval = e.tgt_len == defaults.tgt_len && e.mem_len == defaults.mem_len &&
                            e.clamp_len == defaults.clamp_len &&
                            e.same_length == defaults.same_length &&
                            e.recompute == defaults.recompute;
  require<ConfigError>(default_eval, op, ": model.type is ", to_string(c.model_type),
                       " but [eval] is set; its keys (tgt_len, mem_len, clamp_len, same_length, "
                       "recompute) apply to model.type = \"transformer_xl\"; remove them");
}

const std::vector<std::string>& model_type_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out;
    for (const ModelSection* family : model_sections()) out.push_back(family->name());
    return out;
  }();
  return names;
}

const std::string& to_string(ModelType type) {
  const auto& names = model_type_names();
  require<ConfigError>(std::size_t(type) < names.size(), "model type ", std::size_t(type),
                       " has no family in the registry");
  return names[std::size_t(type)];
}

ModelType parse_model_type(const std::string& name, const std::string& what) {
  const auto& names = model_type_names();
  const auto found = std::find(names.begin(), names.end(), name);
  if (found == names.end()) {
    std::vector<std::string> described;
    for (const ModelSection* family : model_sections())
      described.push_back(concat(family->name(), " (", family->description(), ")"));
    throw ConfigError(concat(what, " is '", name, "' but must be ", choice_list(described)));
  }
  return ModelType(std::size_t(found - names.begin()));
}

const ModelSection& model_section(ModelType type) {
  const auto& families = model_sections();
  require<ConfigError>(std::size_t(type) < families.size(), "model_section: model type ",
                       std::size_t(type), " has no family in the registry");
  return *families[std::size_t(type)];
}

bool key_in(const std::string& key, std::initializer_list<const char*> names) {
  for (const char* name : names) {
    const std::string n = name;
    if (key == n ||
        (key.size() > n.size() && key.compare(0, n.size(), n) == 0 && key[n.size()] == '.'))
      return true;
  }
  return false;
}

bool is_shared_size_key(const std::string& key) {
  return key_in(key, {"model.type", "model.d_model", "model.d_ff", "model.heads", "model.d_head",
                      "model.dropout", "model.attention_dropout", "model.layer_norm_eps",
                      "model.label_smoothing", "model.ff_chunk", "model.loss_chunk"});
}

void require_family_task(const RunConfig& c, const char* op) {
  const ModelSection& family = model_section(c.model_type);
  if (family.takes_task(c.data.task)) return;
  std::vector<std::string> takers;
  for (const ModelSection* other : model_sections())
    if (other->takes_task(c.data.task)) takers.push_back(concat("\"", other->name(), "\""));
  throw ConfigError(concat(op, ": data.task is ", data::to_string(c.data.task),
                           " but model.type = \"", family.name(), "\" (", family.description(),
                           ") does not train on it; set model.type = ", choice_list(takers),
                           " or choose another data.task"));
}

// ---------------------------------------------------------------------------
// The families' own keys, read from RunConfig::settings.

namespace {

const FamilyKey& declared_key(const std::string& name) {
  static const std::map<std::string, FamilyKey> table = [] {
    std::map<std::string, FamilyKey> out;
    for (const ModelSection* family : model_sections())
      for (const FamilyKey& key : family->own_keys()) out[key.name] = key;
    return out;
  }();
  const auto found = table.find(name);
  require<ConfigError>(found != table.end(), "settings: ", name,
                       " is not a key any model family declares (ModelSection::own_keys)");
  return found->second;
}

TomlNode setting_value(const FamilySettings& s, const std::string& name) {
  const std::string text = s.toml(name);
  TomlNode document = detail::parse_toml("value = " + text + "\n", name);
  return std::move(document.table.front().second);
}

}  // namespace

std::string FamilySettings::toml(const std::string& key) const {
  const FamilyKey& declared = declared_key(key);
  const auto found = values.find(key);
  return found == values.end() ? declared.default_value : found->second;
}

std::int64_t FamilySettings::integer(const std::string& key) const {
  return setting_value(*this, key).integer;
}

double FamilySettings::number(const std::string& key) const {
  const TomlNode v = setting_value(*this, key);
  return v.type == Type::Integer ? double(v.integer) : v.floating;
}

bool FamilySettings::boolean(const std::string& key) const {
  return setting_value(*this, key).boolean;
}

std::string FamilySettings::text(const std::string& key) const {
  return setting_value(*this, key).string;
}

std::vector<std::int64_t> FamilySettings::integers(const std::string& key) const {
  std::vector<std::int64_t> out;
  for (const TomlNode& element : setting_value(*this, key).array) out.push_back(element.integer);
  return out;
}

namespace {
Reader read_config(const std::string& toml_text, const std::string& source_name,
                   const std::vector<std::string>& overrides) {
  TomlNode root = detail::parse_toml(toml_text, source_name);
  for (const auto& override_text : overrides) apply_override(root, override_text);
  Reader reader;
  std::string stem = std::filesystem::path(source_name).stem().string();
  if (stem.empty()) stem = "run";
  reader.config.run_dir = "runs/" + stem;
  reader.config.name = stem;
  reader.read_table(root, "");
  // The optimizer name decides the weight decay; [train.adam] has no key for it.
  reader.config.train.adam.decoupled_weight_decay = reader.config.train.optimizer == "adamw";
  return reader;
}
}  // namespace

namespace {

// Whether `family` reads `key` (a key or a section of keys, "model.lsh"): a
// family's own keys (ModelSection::own_keys) are read by that family alone;
// the shared model.* keys are asked of ModelSection::reads; every other key
// (run, data, train) is read by every family.
bool family_reads(const ModelSection& family, const std::string& key) {
  for (const ModelSection* f : model_sections())
    for (const FamilyKey& own : f->own_keys())
      if (key_in(own.name, {key.c_str()}) || key_in(key, {own.name.c_str()})) return f == &family;
  return key.rfind("model.", 0) != 0 || family.reads(key);
}

// "; it is read by model.type = \"a\", \"b\"", or "" when no family reads it.
std::string readers_of(const std::string& key) {
  std::vector<std::string> readers;
  for (const ModelSection* f : model_sections())
    if (family_reads(*f, key)) readers.push_back(concat("\"", f->name(), "\""));
  return readers.empty() ? std::string() : concat("; it is read by model.type = ", joined(readers));
}

// A run config that sets a key its family does not read, to anything but the
// key's default, is refused by name: the value would be silently ignored.
void refuse_unread_keys(const Reader& reader, const std::string& source_name, bool only_overrides) {
  const RunConfig defaults{};
  const ModelSection& family = model_section(reader.config.model_type);
  for (const Key& key : keys()) {
    if (family_reads(family, key.name)) continue;
    const std::string value = key.write(reader.config);
    if (value == key.write(defaults)) continue;
    const auto origin = reader.origins.find(key.name);
    if (only_overrides &&
        (origin == reader.origins.end() || origin->second.rfind("override '", 0) != 0))
      continue;
    throw ConfigError(concat(
        source_name, ": ", key.name, " is ", value,
        origin != reader.origins.end() ? concat(" (from ", origin->second, ")") : std::string(),
        " but model.type = \"", family.name(), "\" (", family.description(),
        ") does not read it, so it would have no effect", readers_of(key.name), ". Remove it"));
  }
}

}  // namespace

namespace {

RunConfig parse_and_check(const std::string& toml_text, const std::string& source_name,
                          const std::vector<std::string>& overrides, bool only_overrides) {
  const Reader reader = read_config(toml_text, source_name, overrides);
  validate_with_origins([&] { reader.config.validate(); }, source_name, reader);
  // After the family's own rules, which name some of these keys better.
  refuse_unread_keys(reader, source_name, only_overrides);
  return reader.config;
}

}  // namespace

void require_family_reads(const ModelSection& family, const std::vector<std::string>& overrides,
                          const std::string& source_name) {
  for (const auto& override_text : overrides)
    for (const auto& key : override_keys(override_text))
      require<ConfigError>(family_reads(family, key), source_name, ": the override '",
                           override_text, "' sets ", key, ", which model.type = \"", family.name(),
                           "\" (", family.description(), ") does not read", readers_of(key),
                           "; leave it out");
}

RunConfig parse_run_config(const std::string& toml_text, const std::string& source_name,
                           const std::vector<std::string>& overrides) {
  return parse_and_check(toml_text, source_name, overrides, true);
}

namespace {

// A reader of model.* keys only (any other key is a ConfigError naming it).
Reader read_model_config(const std::string& toml_text, const std::string& source_name,
                         const std::vector<std::string>& overrides) {
  Reader reader = read_config(toml_text, source_name, overrides);
  for (const auto& [key, origin] : reader.origins)
    require<ConfigError>(key.rfind("model.", 0) == 0, source_name, ": ", key, " (from ", origin,
                         ") is not a model key; only model.* keys apply here");
  return reader;
}

}  // namespace

models::ReformerConfig parse_model_config(const std::string& toml_text,
                                          const std::string& source_name,
                                          const std::vector<std::string>& overrides) {
  const Reader reader = read_model_config(toml_text, source_name, overrides);
  validate_with_origins([&] { reader.config.model.validate(); }, source_name, reader);
  return reader.config.model;
}

models::TransformerConfig parse_transformer_config(const std::string& toml_text,
                                                   const std::string& source_name,
                                                   const std::vector<std::string>& overrides) {
  const Reader reader = read_model_config(toml_text, source_name, overrides);
  const auto config = transformer_config(reader.config, reader.config.model.vocab);
  validate_with_origins([&] { config.validate(); }, source_name, reader);
  return config;
}

models::TransformerXLConfig parse_xl_config(const std::string& toml_text,
                                            const std::string& source_name,
                                            const std::vector<std::string>& overrides) {
  const Reader reader = read_model_config(toml_text, source_name, overrides);
  const auto config = xl_config(reader.config);
  validate_with_origins([&] { config.validate(); }, source_name, reader);
  return config;
}

RunConfig load_run_config(const std::string& path, const std::vector<std::string>& overrides,
                          bool file_keys_checked) {
  // A FIFO, a device or a folder is refused before it is opened (a FIFO would
  // block the read forever).
  return parse_and_check(
      io::read_text_file(path, "config", "give the path of a TOML run config (experiments/*.toml)"),
      path, overrides, !file_keys_checked);
}

std::string to_toml(const RunConfig& config) {
  std::ostringstream out;
  out << "# Reformer run configuration, every key written (docs/config.md lists them).\n";
  std::string section;
  for (const Key& key : keys()) {
    const std::string key_section = section_of(key.name);
    if (key_section != section) {
      section = key_section;
      out << "\n[" << section << "]\n";
    }
    out << leaf_of(key.name) << " = " << key.write(config);
    const std::string note = key.note(config);
    if (!note.empty()) out << "  # " << note;
    out << "\n";
  }
  return out.str();
}

std::vector<std::string> config_keys() {
  std::vector<std::string> names;
  for (const Key& key : keys()) names.push_back(key.name);
  return names;
}

std::string first_difference(const RunConfig& a, const RunConfig& b,
                             const std::vector<std::string>& ignore, const std::string& a_label,
                             const std::string& b_label) {
  for (const Key& key : keys()) {
    const bool ignored = std::any_of(ignore.begin(), ignore.end(), [&](const std::string& name) {
      return key.name == name ||
             (key.name.size() > name.size() && key.name.compare(0, name.size(), name) == 0 &&
              key.name[name.size()] == '.');
    });
    if (ignored) continue;
    const std::string va = key.write(a), vb = key.write(b);
    if (va != vb) return concat(key.name, ": ", va, " ", a_label, ", ", vb, " ", b_label);
  }
  return "";
}

}  // namespace reformer::config
