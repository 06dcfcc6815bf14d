// The registry of model families: one line per family. A new family is a
// folder under src/train/families/, an enumerator of config::ModelType with
// its name (config/run_config.cpp), and a line here (docs/design.md).
#include "reformer/train/model_family.hpp"

#include "reformer/core/error.hpp"
#include "train/families/encoder_decoder/encoder_decoder.hpp"
#include "train/families/reformer_lm/reformer_lm.hpp"
#include "train/families/transformer_xl/transformer_xl.hpp"

#include <array>

namespace reformer {

const train::ModelFamily& train::model_family(config::ModelType type) {
  // Indexed by config::ModelType.
  static const std::array<const ModelFamily*, 3> families = {
      &reformer_lm_family(), &encoder_decoder_family(), &transformer_xl_family()};
  const auto index = std::size_t(type);
  require<ConfigError>(index < families.size(), "model_family: model type ", index,
                       " has no family in the registry");
  const ModelFamily* family = families[index];
  require<Error>(family->type() == type, "model_family: the registry's entry ", index,
                 " is the family of another model type");
  return *family;
}

const config::ModelSection& config::model_section(ModelType type) {
  return train::model_family(type);
}

}  // namespace reformer
