#include "train/memory_check.hpp"

#include "core/device.hpp"
#include "reformer/core/error.hpp"
#include "reformer/core/runtime.hpp"
#include "reformer/train/chunk_choice.hpp"
#include "reformer/train/model_family.hpp"

#include <algorithm>
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
  // When the model's state alone does not fit, no batch or length helps.
  const bool state_alone = need.state > available;
  require<MemoryError>(
      need.total() <= available, op, ": the run needs about ", gib(need.total()), " (",
      training ? "parameters, gradients and Adam moments " : "parameters ", gib(need.state),
      " + the ", training ? "training step's" : "forward pass's", " peak ", gib(need.peak),
      " at batch ", batch, " and length ", length, ", as `reformer memory` predicts) but only ",
      gib(available), " are free in the ", MemSpace::name(), " memory space",
      state_alone ? "; the model's state alone does not fit: a smaller model (model.layers, "
                    "model.d_model, model.d_ff, the vocabulary or the number of classes)"
                  : "; lower train.batch or data.length, use LSH, local or exact attention "
                    "(model.attention), reversible layers or a smaller model");
  return config;
}

void require_generated_ids_fit(std::int64_t rows, std::int64_t positions, const char* op) {
  const double need = 2.0 * double(sizeof(int)) * double(rows) * double(positions);
  const std::int64_t available = device::host_free_memory_bytes();
  if (available < 0) return;  // unknown: nothing to compare with
  require<MemoryError>(need <= double(available), op, ": ", rows, rows == 1 ? " row" : " rows",
                       " of up to ", positions, " token ids ", rows == 1 ? "needs" : "need",
                       " about ", gib(std::int64_t(std::min(need, 9e18))),
                       " on the host (the decoding buffer and the result) but only ",
                       gib(available), " are free; ask for fewer tokens (--tokens)");
}

}  // namespace reformer::train
