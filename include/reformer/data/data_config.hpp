// What data a run trains and evaluates on (data/tasks.hpp builds the task).
#pragma once

#include "reformer/core/types.hpp"

#include <cstdint>
#include <string>

namespace reformer::data {

#include <vector>

// The language-model tasks (data/tasks.hpp), the source/target pair tasks
// (data/pairs.hpp: seq2seq_copy, seq2seq_reverse, parallel) and the sequence
// classification tasks (data/classification.hpp: listops, text, matching_ends,
// image, pathfinder, retrieval).
enum class TaskKind {
  Duplication,
  Copy,
  Bytes,
  PairCopy,
  PairReverse,
  Parallel,
  ListOps,
  Text,
  MatchingEnds,
  Image,
  Pathfinder,
  Retrieval
};
// Every kind, in the order above (data.task's choices).
const std::vector<TaskKind>& task_kinds();
// "duplication", "copy", "bytes", "seq2seq_copy", "seq2seq_reverse",
// "parallel", "listops", "text", "matching_ends", "image",
// "pathfinder", "retrieval"; ConfigError naming the value
// and the choices otherwise.
TaskKind parse_task_kind(const std::string& name);
const char* to_string(TaskKind kind);
// True for the source/target pair tasks.
bool is_pair_task(TaskKind kind);
// True for the sequence classification tasks.
bool is_class_task(TaskKind kind);
// The tasks that read data.path (the others generate their data).
bool reads_file(TaskKind kind);

struct DataConfig {
  TaskKind task = TaskKind::Duplication;
  Index length = 256;  // tokens per sequence
  Index vocab = 128;   // ids in [0, vocab); the bytes task: 256 + id_offset
  // bytes: token id = byte value + id_offset (Hugging Face's enwik8 Reformer
  // uses 2, ids 0 and 1 being special), so vocab = 256 + id_offset.
  Index id_offset = 0;
  std::uint64_t seed = 1;       // the batches are a pure function of (seed, split, batch index)
  std::string path{};           // bytes: the corpus file; parallel: the tab-separated pairs
  std::string units = "bytes";  // parallel: "bytes" or "chars"
  Index min_symbols = 1;        // seq2seq_copy, seq2seq_reverse: shortest sequence
  Index max_symbols = 0;        // ... longest; 0: length - 1
  // ConfigError naming the first bad field: duplication needs an even length >= 4
  // and vocab >= 2; copy a length >= 4 and vocab >= 3; bytes a path and vocab
  // 256 + id_offset; id_offset is only for bytes.
  void validate() const;
};

}  // namespace reformer::data
