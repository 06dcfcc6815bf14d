// The model families a run config can name (model.type), and the config-level
// half of a family: its name, the [model.*] / [data.*] keys it declares, the
// data tasks it takes and the rules it adds to a run config. The rest of a
// family (workload, memory, generation) is in train/model_family.hpp; one
// registry (src/train/families/registry.cpp) lists the families, so config
// asks it without including train/ and without naming any family here.
#pragma once

#include "reformer/data/data_config.hpp"

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <string>
#include <vector>

namespace reformer::config {

struct RunConfig;

// A family: its index in the registry (0, the default, is the Reformer LM).
enum class ModelType : std::size_t {};

// A key a family declares in its own folder (ModelSection::own_keys): its
// dotted name, its kind and its default, written as TOML text.
struct FamilyKey {
  enum class Kind { Integer, Number, Boolean, String, IntegerList };
  std::string name;  // "model.<family>.<key>" or "data.<task>.<key>"
  Kind kind = Kind::Integer;
  std::string default_value;           // TOML: "2", "0.5", "true", "\"mean\"", "[0, 0, 0]"
  std::vector<std::string> choices{};  // String: the allowed values (empty: any)
  std::string help{};                  // one line for docs and messages
  // The key changes what trained weights compute while every parameter keeps
  // its name and shape: eval and generate refuse to override it.
  bool changes_function = false;
};

// The values of the families' own keys in a run config, by dotted name, as
// TOML text; a key that is not set reads as its declared default. The typed
// readers throw a ConfigError naming a key that no family declares.
struct FamilySettings {
  std::map<std::string, std::string> values;
  std::int64_t integer(const std::string& key) const;
  double number(const std::string& key) const;
  bool boolean(const std::string& key) const;
  std::string text(const std::string& key) const;
  std::vector<std::int64_t> integers(const std::string& key) const;
  // The TOML text of a key's value (its default when not set).
  std::string toml(const std::string& key) const;
};

// The model.type names, in the registry's order.
const std::vector<std::string>& model_type_names();
const std::string& to_string(ModelType type);
// ConfigError naming the value and the choices for an unknown name; `what`
// names the setting ("model.type", "memory: --model").
ModelType parse_model_type(const std::string& name, const std::string& what);

// What a family checks in a run config beyond the parts every run shares.
class ModelSection {
 public:
  virtual ~ModelSection() = default;
  // The model.type name ("reformer") and a few words for lists of families
  // ("the language model").
  virtual const char* name() const = 0;
  virtual const char* description() const = 0;
  // Keys of the family's own sections, in the order to_toml writes them
  // (after the shared [model] keys); none by default.
  virtual std::vector<FamilyKey> own_keys() const { return {}; }
  // Whether the family trains on data.task = `task`.
  virtual bool takes_task(data::TaskKind task) const = 0;
  // Whether the family reads the shared model.* key `key` (a dotted name such
  // as "model.lsh.chunk"). A run config that sets a key its family does not
  // read to anything but its default is refused by name; own_keys() belong to
  // their family alone and are not asked about.
  virtual bool reads(const std::string& key) const = 0;
  // ConfigError naming the first bad key: the family's own section, the data
  // task it reads, and how the model fits the data (`op` begins the message).
  virtual void validate(const RunConfig& config, const char* op) const = 0;
};

// Whether `key` is one of `names` or lies in one of them as a section
// ("model.lsh.chunk" lies in "model.lsh"), for ModelSection::reads.
bool key_in(const std::string& key, std::initializer_list<const char*> names);
// The keys of models::ModelSizes, which every family reads (model.d_model,
// model.dropout, model.ff_chunk, ...), and model.type.
bool is_shared_size_key(const std::string& key);

// The registry's families, by ModelType, and the family of `type`.
const std::vector<const ModelSection*>& model_sections();
const ModelSection& model_section(ModelType type);

// ConfigError unless the family of config.model_type takes config.data.task,
// naming the families that do (every family calls it in validate).
void require_family_task(const RunConfig& config, const char* op);

}  // namespace reformer::config
