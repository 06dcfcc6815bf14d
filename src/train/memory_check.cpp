#include "train/memory_check.hpp"

#include "reformer/core/error.hpp"
#include "reformer/core/runtime.hpp"
#include "reformer/train/chunk_choice.hpp"
#include "reformer/train/model_family.hpp"

#include <sstream>

namespace reformer::train {

namespace {

std::string gib(std::int64_t bytes) {
  std::ostringstream text;
  text.precision(4);
  text << double(bytes) / double(1 << 30) << " GiB";
  return text.str();
}

}  // namespace

config::RunConfig require_memory_fits(const config::RunConfig& asked, Index batch, bool training,
                                      const char* op) {
  const config::RunConfig config = resolve_auto_chunks(asked, batch, training);
  const Index length = config.data.length;
  const RunMemory need = model_family(config).predict_run_memory(config, batch, training);
  const std::int64_t available = available_memory_bytes();
  if (available < 0) return config;  // unknown: nothing to compare with
  require<MemoryError>(
      need.total() <= available, op, ": the run needs about ", gib(need.total()), " (",
      training ? "parameters, gradients and Adam moments " : "parameters ", gib(need.state),
      " + the ", training ? "training step's" : "forward pass's", " peak ", gib(need.peak),
      " at batch ", batch, " and length ", length, ", as `reformer memory` predicts) but only ",
      gib(available), " are free in the ", MemSpace::name(), " memory space",
      "; lower train.batch or data.length, use LSH, local or exact attention (model.attention), "
      "reversible layers or a smaller model");
  return config;
}

}  // namespace reformer::train
