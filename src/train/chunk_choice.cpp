#include "reformer/train/chunk_choice.hpp"

#include "reformer/core/error.hpp"
#include "reformer/train/model_family.hpp"

namespace reformer::train {

config::RunConfig resolve_auto_chunks(const config::RunConfig& config, Index batch, bool training) {
  const ModelFamily& family = model_family(config);
  return with_auto_chunks(
      config, batch * std::max<Index>(1, config.data.length),
      [](config::RunConfig& c) -> models::ModelSizes& { return c.model; },
      [&](const config::RunConfig& c) {
        return family.predict_run_memory(c, batch, training).peak;
      });
}

std::string describe_auto_chunks(const config::RunConfig& asked,
                                 const config::RunConfig& resolved) {
  std::string text;
  if (asked.model.ff_chunk == kAutoChunk)
    text += resolved.model.ff_chunk == 0 ? std::string(", feed-forward on all rows at once (auto)")
                                         : detail::concat(", feed-forward in chunks of ",
                                                          resolved.model.ff_chunk, " rows (auto)");
  if (asked.model.loss_chunk == kAutoChunk)
    text += detail::concat(", loss in chunks of ", resolved.model.loss_chunk, " rows (auto)");
  return text;
}

}  // namespace reformer::train
