// The registry of model families: one line per family. A new family is a
// folder under src/train/families/ and a line here (docs/design.md); its
// model.type name, its keys and the tasks it takes are declared in its folder.
#include "reformer/train/model_family.hpp"

#include "reformer/core/error.hpp"
#include "train/families/classifier/classifier.hpp"
#include "train/families/encoder_decoder/encoder_decoder.hpp"
#include "train/families/reformer_lm/reformer_lm.hpp"
#include "train/families/transformer_xl/transformer_xl.hpp"

namespace reformer {

namespace {

// In model.type order: index 0 is the default family.
const std::vector<const train::ModelFamily*>& families() {
  static const std::vector<const train::ModelFamily*> list = {
      &train::reformer_lm_family(),
      &train::encoder_decoder_family(),
      &train::transformer_xl_family(),
      &train::classifier_family(),
  };
  return list;
}

}  // namespace

const train::ModelFamily& train::model_family(config::ModelType type) {
  const auto index = std::size_t(type);
  require<ConfigError>(index < families().size(), "model_family: model type ", index,
                       " has no family in the registry");
  return *families()[index];
}

const std::vector<const config::ModelSection*>& config::model_sections() {
  static const std::vector<const ModelSection*> sections(families().begin(), families().end());
  return sections;
}

}  // namespace reformer
