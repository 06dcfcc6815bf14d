// The check before a run allocates anything (private to the library).
#pragma once

#include "reformer/config/run_config.hpp"

#include <cstdint>

namespace reformer::train {

// Bytes of one value of the run's train.dtype.
inline std::int64_t scalar_bytes(const config::RunConfig& config) {
  return config.train.dtype == "double" ? 8 : 4;
}
// Bytes of a stored activation: 2 with train.precision = "bf16".
inline std::int64_t activation_bytes(const config::RunConfig& config) {
  return config.train.precision == "bf16" ? 2 : scalar_bytes(config);
}

// The run's config as it builds its model: its automatic chunks resolved
// for `batch` rows (train/chunk_choice.hpp). MemoryError naming the need, the
// free memory and the keys to change when the prediction of `reformer memory`
// for this run (its family's, at `batch` rows; training: a step, else a
// forward pass) does not fit the free memory of the device. `op` begins the
// message ("train", "eval", "generate").
[[nodiscard]] config::RunConfig require_memory_fits(const config::RunConfig& config, Index batch,
                                                    bool training, const char* op);

// MemoryError naming the ids and the free memory when `rows` generated rows of
// up to `positions` token ids each (kept twice: the decoding buffer and the
// result) do not fit the free host memory: a generation budget with no length
// limit of its own (Transformer-XL's --tokens) is checked before any work.
void require_generated_ids_fit(std::int64_t rows, std::int64_t positions, const char* op);

}  // namespace reformer::train
