#include "reformer/models/model_sizes.hpp"

#include <cmath>
#include <utility>

#include "config/value_rules.hpp"

namespace reformer::models {

void ModelSizes::validate_sizes(const char* op) const {
  // (An array, not a braced list: nvcc 11.8 cannot deduce a list of pairs.)
  const std::pair<const char*, Index> sizes[] = {{"model.d_model", d_model},
                                                 {"model.d_ff", d_ff},
                                                 {"model.heads", heads},
                                                 {"model.d_head", d_head}};
  for (const auto& [key, value] : sizes)
    require<ConfigError>(value > 0, op, ": ", key, " is ", value, " but must be positive");
  require_rate(op, "model.dropout", dropout);
  require_rate(op, "model.attention_dropout", attention_dropout);
  require_rate(op, "model.label_smoothing", label_smoothing);
  require<ConfigError>(std::isfinite(layer_norm_eps) && layer_norm_eps > 0 && layer_norm_eps <= 1,
                       op, ": model.layer_norm_eps is ", layer_norm_eps,
                       " but must be in (0, 1] (1e-5 by default, 1e-12 for Hugging Face's "
                       "pretrained Reformers)");
  require_ff_chunk(op, ff_chunk);
  require_loss_chunk(op, loss_chunk);
}

}  // namespace reformer::models
