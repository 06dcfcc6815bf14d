// The configuration of a run: model, data and training, read from a TOML file
// plus "section.key=value" overrides (docs/config.md lists every key).
//
//   auto config = reformer::config::load_run_config("experiments/duplication_lsh.toml",
//                                                  {"train.steps=100", "model.lsh.n_hashes=4"});
//
// Loading is strict: an unknown key (with a suggestion), a value of the wrong
// type, an out-of-range value or two contradictory settings is a ConfigError
// naming the key, the value and the rule; a missing file is an IoError. Keys
// that are not written take the defaults of the structs.
#pragma once

#include "reformer/config/model_type.hpp"
#include "reformer/config/train_config.hpp"
#include "reformer/data/data_config.hpp"
#include "reformer/models/reformer_config.hpp"
#include "reformer/models/transformer.hpp"
#include "reformer/models/transformer_xl.hpp"

#include <functional>
#include <string>
#include <vector>

namespace reformer::config {

// [model.xl]: Transformer-XL's own settings (the sizes come from [model]).
struct XLConfig {
  Index mem_len = 64;           // memory positions per layer in training
  Index clamp_len = 0;          // distances above it share its encoding; 0: none
  bool same_length = false;     // every query sees mem_len keys
  bool pre_norm = false;        // the reference's default is post-LN
  bool scale_embedding = true;  // the embedding times sqrt(d_model)
};

// [eval]: how Transformer-XL is evaluated (in training and by `reformer
// eval`), each defaulting to the training's setting. The paper trains enwik8
// base with tgt_len 512, mem_len 512 and evaluates with tgt_len 80, mem_len
// 2100, clamp_len 820 and same_length.
struct EvalConfig {
  Index tgt_len = 0;                  // segment length; 0: data.length
  Index mem_len = -1;                 // -1: model.xl.mem_len; 0: no recurrence (the ablation)
  Index clamp_len = -1;               // -1: model.xl.clamp_len
  std::string same_length = "model";  // "model" (model.xl.same_length), "on" or "off"
  // Instead of a memory, rerun the model (mem_len 0) on the mem_len tokens
  // before each segment plus the segment, scoring the segment: the baseline
  // Transformer-XL's evaluation speed is compared with.
  bool recompute = false;
};

// [model]'s defaults in a run: the model's, except that on GPUs the
// feed-forward and loss chunks are "auto" (the largest that do not raise the
// predicted peak; train/chunk_choice.hpp). The host keeps all rows at once
// and 1024-row loss chunks.
inline models::ReformerConfig run_model_defaults() {
  models::ReformerConfig m;
  if (!kHostMemory) m.ff_chunk = m.loss_chunk = kAutoChunk;
  return m;
}

struct RunConfig {
  // [model] type: a family of the registry (config/model_type.hpp), e.g.
  // "reformer" (the language model), "transformer" (the encoder-decoder,
  // which reads the [model] keys that apply to it and [model.seq2seq];
  // transformer_config() below) or "transformer_xl" (the [model] keys that
  // apply and [model.xl]; xl_config() below).
  ModelType model_type{};                               // index 0 of the registry: the Reformer LM
  models::ReformerConfig model = run_model_defaults();  // [model], [model.lsh], [model.local]
  models::TransformerConfig transformer{};              // [model.seq2seq] (the rest from [model])
  XLConfig xl{};                                        // [model.xl]
  EvalConfig eval{};                                    // [eval] (Transformer-XL only)
  // The keys a family declares in its own folder (ModelSection::own_keys),
  // by dotted name ("model.<family>.<key>", "data.<task>.<key>").
  FamilySettings settings{};
  data::DataConfig data{};  // [data]
  TrainConfig train{};      // [train], [train.adam]
  std::string run_dir{};    // [run] dir: default "runs/<config file stem>"
  std::string name{};       // [run] name: default "<config file stem>"

  // Validates the run as its family does (config::ModelSection): each part,
  // then what ties them together (data.length must fit the model, data.vocab
  // <= model.vocab, the task suits the model), run.dir set, seeds that fit a
  // TOML integer. ConfigError naming the first bad key.
  void validate() const;
};

// The checks every family makes (each calls it where its own rules want it):
// [data] and [train] each valid, run.dir set, seeds that fit a TOML integer.
void validate_common(const RunConfig& config, const char* op);

// Runs `check` (a model's length rule, such as ReformerConfig::validate_length
// at data.length) and rethrows its ConfigError as "op: data.length = N does not
// fit the model: <its rule>", so that the message names the run's key.
void require_length_fits(const RunConfig& config, const char* op,
                         const std::function<void()>& check);

// ConfigError unless [eval] keeps its defaults (for the families it does not
// apply to), naming model.type and the fix.
void require_default_eval(const RunConfig& config, const char* op);

// The encoder-decoder's config of a run with model.type = "transformer": sizes,
// positions, dropout, label smoothing, chunks and the LSH and local settings from
// [model], layers, attention kinds and sharing from [model.seq2seq], both
// vocabularies from the data task (`vocab`, the task's; 0: data.vocab, or 259 for
// a parallel file, whose character vocabulary is known only once it is read).
models::TransformerConfig transformer_config(const RunConfig& config, Index vocab = 0);

// Transformer-XL's config of a run with model.type = "transformer_xl": sizes,
// dropout, eps, label smoothing, chunks, tie_embeddings and ff_activation from
// [model], the rest from [model.xl], the vocabulary model.vocab.
models::TransformerXLConfig xl_config(const RunConfig& config);

// The language model's config of a run: [model], with an automatic LSH bucket
// count (model.lsh.n_buckets = []) resolved at data.length, so that the run's
// shorter, padded or generated sequences hash into the buckets it trained with.
models::ReformerConfig lm_config(const RunConfig& config);

// Reads and validates the TOML file at `path` with `overrides` applied in order.
// An override is "section.key=value", the value a TOML value (train.steps=100,
// model.attention=["lsh","local"], data.path="corpus.txt"); a value that is not
// valid TOML and does not start with [ { " or ' is taken as a bare string
// (data.path=corpus.txt, model.positions=axial). IoError if the file cannot be read.
// A key that the family of model.type does not read (ModelSection::reads, a
// family's own keys), set to anything but its default in the file or an
// override, is a ConfigError naming it and the families that read it; with
// `file_keys_checked` false only in the overrides (train --resume: the file
// began a run, perhaps before the rule, and must match its stored config).
RunConfig load_run_config(const std::string& path, const std::vector<std::string>& overrides = {},
                          bool file_keys_checked = true);

// The dotted key of an override ("model.lsh.n_hashes" of "model.lsh.n_hashes = 8"),
// as load_run_config reads it; the whole text, trimmed, when it has no '='.
std::string override_key(const std::string& override_text);
// Every dotted key an override sets: its key, or the keys of a table it gives
// ("model.lsh={chunk=32, n_hashes=4}": model.lsh.chunk and model.lsh.n_hashes).
// ConfigError for an override that is not section.key=value with a TOML value.
std::vector<std::string> override_keys(const std::string& override_text);

// ConfigError naming the first override (section.key=value) whose key, or
// section, `family` does not read (its own keys and ModelSection::reads), for
// readers of a model alone (`reformer memory`'s sweeps).
void require_family_reads(const ModelSection& family, const std::vector<std::string>& overrides,
                          const std::string& source_name);

// The same from TOML text; `source_name` names it in messages and gives the
// default run.dir and run.name (its file stem). The text may be a stored
// config (a checkpoint's, written before a family declared what it reads), so
// only the overrides are refused for keys the family does not read.
RunConfig parse_run_config(const std::string& toml_text, const std::string& source_name,
                           const std::vector<std::string>& overrides = {});

// Only a model: the [model] sections of the text and model.* overrides (any
// other key is a ConfigError naming it), validated as a model.
models::ReformerConfig parse_model_config(const std::string& toml_text,
                                          const std::string& source_name,
                                          const std::vector<std::string>& overrides = {});

// Only an encoder-decoder: the [model] and [model.seq2seq] sections of the text
// and model.* overrides (any other key is a ConfigError naming it), both
// vocabularies model.vocab, validated as an encoder-decoder.
models::TransformerConfig parse_transformer_config(const std::string& toml_text,
                                                   const std::string& source_name,
                                                   const std::vector<std::string>& overrides = {});

// Only a Transformer-XL: the [model] and [model.xl] sections of the text and
// model.* overrides (any other key is a ConfigError naming it), validated.
models::TransformerXLConfig parse_xl_config(const std::string& toml_text,
                                            const std::string& source_name,
                                            const std::vector<std::string>& overrides = {});

// The whole config as TOML, every key written (automatic values as empty lists
// with a comment); parse_run_config of it gives back an identical config.
std::string to_toml(const RunConfig& config);

// Dotted names of every key, in the order to_toml writes them ("run.dir", ...).
std::vector<std::string> config_keys();

// The first key (in to_toml's order) whose value differs between a and b, as
// "model.d_model: 256 in the checkpoint, 512 here" (with the given labels), or
// "" when none does. A key is skipped when it, or a section holding it, is in
// `ignore` ("train.steps", or "train" for the whole section).
std::string first_difference(const RunConfig& a, const RunConfig& b,
                             const std::vector<std::string>& ignore = {},
                             const std::string& a_label = "in the checkpoint",
                             const std::string& b_label = "here");

}  // namespace reformer::config
