#include "train/families/transformer_xl/transformer_xl.hpp"

#include "reformer/core/error.hpp"

namespace reformer::train {

template <class T>
GenerateResult generate_transformer_xl(const std::string&, const config::RunConfig&,
                                       const GenerateOptions&) {
  throw ConfigError(
      "generate: the run is a Transformer-XL (model.type = transformer_xl), which trains and "
      "evaluates here but has no generation yet; use `reformer eval`");
}

template GenerateResult generate_transformer_xl<float>(const std::string&, const config::RunConfig&,
                                                       const GenerateOptions&);
template GenerateResult generate_transformer_xl<double>(const std::string&,
                                                        const config::RunConfig&,
                                                        const GenerateOptions&);

}  // namespace reformer::train
