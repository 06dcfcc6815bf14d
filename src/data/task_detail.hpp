// Pieces shared by the task implementations (private to the library).
#pragma once

#include "reformer/core/random.hpp"
#include "reformer/data/tasks.hpp"

#include <cstdint>
#include <memory>

namespace reformer::data::internal {

// The key of row `row` of batch `batch_index` of a split: one independent stream
// per row, so a row does not depend on the batch size.
inline RandomKey row_key(std::uint64_t seed, TaskKind task, Split split, std::uint64_t batch_index,
                         Index row) {
  constexpr std::uint64_t kDataStream = 0x64617461;  // "data"
  return {seed, stream_id(stream_id(kDataStream, std::uint64_t(task), std::uint64_t(split)),
                          batch_index, std::uint64_t(row))};
}

// floor(bits * n / 2^64): maps 64 uniform bits to [0, n) with a bias below n / 2^64.
inline std::uint64_t uniform_below(std::uint64_t bits, std::uint64_t n) {
  const std::uint64_t a_hi = bits >> 32, a_lo = bits & 0xffffffffu;
  const std::uint64_t b_hi = n >> 32, b_lo = n & 0xffffffffu;
  const std::uint64_t lo_lo = a_lo * b_lo, hi_lo = a_hi * b_lo, lo_hi = a_lo * b_hi;
  const std::uint64_t cross = (lo_lo >> 32) + (hi_lo & 0xffffffffu) + lo_hi;
  return a_hi * b_hi + (hi_lo >> 32) + (cross >> 32);
}

// An empty [batch_size, length] batch; ConfigError unless batch_size >= 1.
Batch allocate_batch(const char* op, Index batch_size, Index length);

// The bytes task of a validated config (bytes_task.cpp).
std::unique_ptr<Task> make_bytes_task(const DataConfig& config);

}  // namespace reformer::data::internal
