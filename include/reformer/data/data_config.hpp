// What data a run trains and evaluates on (data/tasks.hpp builds the task).
#pragma once

#include "reformer/core/types.hpp"

#include <cstdint>
#include <string>

namespace reformer::data {

enum class TaskKind { Duplication, Copy, Bytes };
// "duplication", "copy", "bytes"; ConfigError naming the value otherwise.
TaskKind parse_task_kind(const std::string& name);
const char* to_string(TaskKind kind);

struct DataConfig {
  TaskKind task = TaskKind::Duplication;
  Index length = 256;      // tokens per sequence
  Index vocab = 128;       // ids in [0, vocab); the bytes task needs exactly 256
  std::uint64_t seed = 1;  // the batches are a pure function of (seed, split, batch index)
  std::string path{};      // bytes: the corpus file
  // ConfigError naming the first bad field: duplication needs an even length >= 4
  // and vocab >= 2; copy a length >= 4 and vocab >= 3; bytes a path and vocab 256.
  void validate() const;
};

}  // namespace reformer::data
