// The model families a run config can name (model.type), parsed once into an
// enum, and the config-level half of a family: the rules it adds to a run
// config. The rest of a family (workload, memory, generation) is in
// train/model_family.hpp; one registry (src/train/families/registry.cpp)
// holds both halves, so config asks it without including train/.
#pragma once

#include <string>
#include <vector>

namespace reformer::config {

struct RunConfig;

enum class ModelType {
  ReformerLM,      // "reformer": the Reformer language model
  EncoderDecoder,  // "transformer": the encoder-decoder Transformer
  TransformerXL,   // "transformer_xl"
};

// The model.type names, in the enum's order.
const std::vector<std::string>& model_type_names();
const std::string& to_string(ModelType type);
// ConfigError naming the value and the choices for an unknown name; `what`
// names the setting ("model.type", "memory: --model").
ModelType parse_model_type(const std::string& name, const std::string& what);

// What a family checks in a run config beyond the parts every run shares.
class ModelSection {
 public:
  virtual ~ModelSection() = default;
  virtual ModelType type() const = 0;
  // ConfigError naming the first bad key: the family's own section, the data
  // task it reads, and how the model fits the data (`op` begins the message).
  virtual void validate(const RunConfig& config, const char* op) const = 0;
};

// The registry's family for `type`.
const ModelSection& model_section(ModelType type);

}  // namespace reformer::config
