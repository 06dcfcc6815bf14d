#include "reformer/data/tasks.hpp"

#include "data/task_detail.hpp"
#include "reformer/core/error.hpp"
#include "reformer/core/shape.hpp"

#include <algorithm>

#include <climits>

namespace reformer::data {

const char* to_string(Split split) {
  switch (split) {
    case Split::Train:
      return "train";
    case Split::Valid:
      return "valid";
    case Split::Test:
      return "test";
  }
  throw Error("to_string: invalid Split");
}

DeviceBatch to_device(const Batch& batch) {
  DeviceBatch device{
      View2<int>(Kokkos::view_alloc(Kokkos::WithoutInitializing, std::string("batch_inputs")),
                 batch.batch_size(), batch.length()),
      View2<int>(Kokkos::view_alloc(Kokkos::WithoutInitializing, std::string("batch_targets")),
                 batch.batch_size(), batch.length())};
  if (batch.valid.extent(0) > 0)
    device.valid =
        View2<int>(Kokkos::view_alloc(Kokkos::WithoutInitializing, std::string("batch_valid")),
                   batch.batch_size(), batch.length());
  copy_to_device(batch, device);
  return device;
}

void copy_to_device(const Batch& batch, const DeviceBatch& device) {
  const char* op = "copy_to_device";
  require_same_shape(op, "device.inputs", device.inputs, "batch.inputs", batch.inputs);
  require_same_shape(op, "device.targets", device.targets, "batch.targets", batch.targets);
  require<ShapeError>((device.valid.extent(0) > 0) == (batch.valid.extent(0) > 0), op,
                      ": the batch ", batch.valid.extent(0) > 0 ? "has" : "has no",
                      " padding mask but the device batch ",
                      device.valid.extent(0) > 0 ? "has one" : "has none");
  Kokkos::deep_copy(device.inputs, batch.inputs);
  Kokkos::deep_copy(device.targets, batch.targets);
  if (batch.valid.extent(0) > 0) {
    require_same_shape(op, "device.valid", device.valid, "batch.valid", batch.valid);
    Kokkos::deep_copy(device.valid, batch.valid);
  }
}

namespace internal {

Batch allocate_batch(const char* op, Index batch_size, Index length) {
  require<ConfigError>(batch_size >= 1, op, ": batch_size is ", batch_size, " but must be >= 1");
  return {HostTokens(Kokkos::view_alloc(Kokkos::WithoutInitializing, std::string("inputs")),
                     batch_size, length),
          HostTokens(Kokkos::view_alloc(Kokkos::WithoutInitializing, std::string("targets")),
                     batch_size, length)};
}

}  // namespace internal

namespace {

using internal::row_key;
using internal::uniform_below;
using HostPolicy = Kokkos::RangePolicy<Kokkos::DefaultHostExecutionSpace>;

// s = 0 w 0 w, |w| = length/2 - 1; only the second copy is scored.
class DuplicationTask final : public Task {
 public:
  explicit DuplicationTask(const DataConfig& config) : config_(config) {}

  Batch batch(Split split, std::uint64_t batch_index, Index batch_size) const override {
    Batch out = internal::allocate_batch("DuplicationTask::batch", batch_size, config_.length);
    const Index length = config_.length, half = length / 2;
    const std::uint64_t symbols = std::uint64_t(config_.vocab - 1);
    const std::uint64_t seed = config_.seed;
    const auto inputs = out.inputs, targets = out.targets;
    Kokkos::parallel_for("duplication_batch", HostPolicy(0, batch_size), [=](Index b) {
      const RandomKey key = row_key(seed, TaskKind::Duplication, split, batch_index, b);
      inputs(b, 0) = 0;
      inputs(b, half) = 0;
      for (Index j = 1; j < half; ++j) {
        const int symbol = 1 + int(uniform_below(random_bits(key, j), symbols));
        inputs(b, j) = symbol;
        inputs(b, half + j) = symbol;
      }
      // Position t predicts inputs(t + 1); scored for t in [half, length - 2].
      for (Index t = 0; t < length; ++t)
        targets(b, t) = (t >= half && t + 1 < length) ? inputs(b, t + 1) : 0;
    });
    Kokkos::DefaultHostExecutionSpace().fence();
    return out;
  }

  int ignore_id() const override { return 0; }
  Index vocab() const override { return config_.vocab; }
  Index length() const override { return config_.length; }
  std::string describe() const override {
    return detail::concat("duplication: 0 w 0 w, length ", config_.length,
                          ", |w| = ", config_.length / 2 - 1, ", symbols 1..", config_.vocab - 1,
                          ", scored on the second copy (ignore id 0), seed ", config_.seed);
  }

 private:
  DataConfig config_;
};

// s = w 1 w 0 ... 0, |w| uniform in [1, (length - 1) / 2]; only the copy is scored.
class CopyTask final : public Task {
 public:
  explicit CopyTask(const DataConfig& config) : config_(config) {}

  Batch batch(Split split, std::uint64_t batch_index, Index batch_size) const override {
    Batch out = internal::allocate_batch("CopyTask::batch", batch_size, config_.length);
    out.valid = HostTokens(Kokkos::view_alloc(Kokkos::WithoutInitializing, std::string("valid")),
                           batch_size, config_.length);
    const Index length = config_.length;
    const std::uint64_t max_words = std::uint64_t((length - 1) / 2);
    const std::uint64_t symbols = std::uint64_t(config_.vocab - 2);
    const std::uint64_t seed = config_.seed;
    const auto inputs = out.inputs, targets = out.targets, valid = out.valid;
    Kokkos::parallel_for("copy_batch", HostPolicy(0, batch_size), [=](Index b) {
      const RandomKey key = row_key(seed, TaskKind::Copy, split, batch_index, b);
      // Counter 0 draws |w|, counters 1..n the symbols.
      const Index n = 1 + Index(uniform_below(random_bits(key, 0), max_words));
      for (Index j = 0; j < n; ++j) {
        const int symbol = 2 + int(uniform_below(random_bits(key, 1 + j), symbols));
        inputs(b, j) = symbol;
        inputs(b, n + 1 + j) = symbol;
      }
      inputs(b, n) = 1;
      for (Index t = 2 * n + 1; t < length; ++t) inputs(b, t) = 0;
      for (Index t = 0; t < length; ++t) valid(b, t) = t < 2 * n + 1 ? 1 : 0;
      // Position t predicts inputs(t + 1); scored for t in [n, 2n - 1].
      for (Index t = 0; t < length; ++t)
        targets(b, t) = (t >= n && t < 2 * n) ? inputs(b, t + 1) : 0;
    });
    Kokkos::DefaultHostExecutionSpace().fence();
    return out;
  }

  int ignore_id() const override { return 0; }
  Index vocab() const override { return config_.vocab; }
  Index length() const override { return config_.length; }
  std::string describe() const override {
    return detail::concat("copy: w 1 w 0..0, length ", config_.length, ", |w| in [1, ",
                          (config_.length - 1) / 2, "], symbols 2..", config_.vocab - 1,
                          ", scored on the copy (ignore id 0), seed ", config_.seed);
  }

 private:
  DataConfig config_;
};

}  // namespace

namespace {
// The error of a task that is not one text (the synthetic tasks).
[[noreturn]] void no_streams(const Task& task) {
  throw ConfigError(detail::concat("data: the task (", task.describe(),
                                   ") is not a text read as streams of segments; "
                                   "Transformer-XL needs data.task = \"bytes\""));
}
}  // namespace

Batch Task::segments(Split, std::uint64_t, Index, Index, Index, Index) const { no_streams(*this); }

std::uint64_t Task::segments_per_stream(Split, Index, Index) const { no_streams(*this); }

std::vector<int> parse_token_ids(const std::string& text, const std::string& what) {
  std::vector<int> ids;
  std::string word;
  auto flush = [&] {
    if (word.empty()) return;
    require<ConfigError>(
        std::all_of(word.begin(), word.end(), [](char c) { return c >= '0' && c <= '9'; }), what,
        " word '", word, "' is not a token id; give ids separated by spaces, e.g. \"0 5 17\"");
    // Ids are ints on the device: a larger number cannot be one (the caller
    // checks them against the vocabulary). Leading zeros do not count.
    const std::string digits = word.substr(std::min(word.find_first_not_of('0'), word.size() - 1));
    require<ConfigError>(digits.size() <= 10 && std::stoll(digits) <= INT_MAX, what, " token ",
                         word, " is too large to be a token id (an id is below the vocabulary ",
                         "and at most ", INT_MAX, ")");
    ids.push_back(int(std::stoll(digits)));
    word.clear();
  };
  for (const char c : text) {
    if (c == ' ' || c == ',')
      flush();
    else
      word += c;
  }
  flush();
  return ids;
}

std::unique_ptr<Task> make_task(const DataConfig& config) {
  config.validate();
  switch (config.task) {
    case TaskKind::Duplication:
      return std::make_unique<DuplicationTask>(config);
    case TaskKind::Copy:
      return std::make_unique<CopyTask>(config);
    case TaskKind::Bytes:
      return internal::make_bytes_task(config);
    case TaskKind::PairCopy:
    case TaskKind::PairReverse:
    case TaskKind::Parallel:
      throw ConfigError(detail::concat("data.task is ", to_string(config.task),
                                       ", a source/target pair task: it trains model.type = "
                                       "\"transformer\" (data/pairs.hpp)"));
    case TaskKind::ListOps:
    case TaskKind::Text:
    case TaskKind::MatchingEnds:
    case TaskKind::Image:
    case TaskKind::Pathfinder:
    case TaskKind::Retrieval:
      throw ConfigError(detail::concat("data.task is ", to_string(config.task),
                                       ", a sequence classification task "
                                       "(data/classification.hpp), not a language-model task"));
  }
  throw Error("make_task: invalid TaskKind");
}

}  // namespace reformer::data
