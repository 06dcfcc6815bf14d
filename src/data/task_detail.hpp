// Pieces shared by the task implementations (private to the library).
#pragma once

#include "reformer/core/random.hpp"
#include "reformer/data/tasks.hpp"

#include <algorithm>
#include <array>
#include <cstdint>
#include <memory>
#include <numeric>
#include <vector>

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

// Items 0..n-1 of a file-backed task in a fixed shuffle (its own stream, the
// same for every data.seed), split 90% / 5% / 5% into train, valid and test
// (at least one each; n >= 3).
inline std::array<std::vector<std::size_t>, 3> fixed_split(std::size_t n, std::uint64_t stream) {
  std::vector<std::size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  for (std::size_t i = n - 1; i > 0; --i)
    std::swap(order[i], order[uniform_below(random_bits({stream, 1}, i), i + 1)]);
  const std::size_t held = std::max<std::size_t>(1, n / 20);
  return {std::vector<std::size_t>(order.begin(), order.end() - long(2 * held)),
          std::vector<std::size_t>(order.end() - long(2 * held), order.end() - long(held)),
          std::vector<std::size_t>(order.end() - long(held), order.end())};
}

// An empty [batch_size, length] batch; ConfigError unless batch_size >= 1.
Batch allocate_batch(const char* op, Index batch_size, Index length);

// The bytes task of a validated config (bytes_task.cpp).
std::unique_ptr<Task> make_bytes_task(const DataConfig& config);

}  // namespace reformer::data::internal
