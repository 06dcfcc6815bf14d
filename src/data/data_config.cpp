#include "reformer/data/data_config.hpp"

#include "reformer/core/error.hpp"
#include "reformer/data/pairs.hpp"

#include <climits>

namespace reformer::data {

const char* to_string(TaskKind kind) {
  switch (kind) {
    case TaskKind::Duplication:
      return "duplication";
    case TaskKind::Copy:
      return "copy";
    case TaskKind::Bytes:
      return "bytes";
    case TaskKind::PairCopy:
      return "seq2seq_copy";
    case TaskKind::PairReverse:
      return "seq2seq_reverse";
    case TaskKind::Parallel:
      return "parallel";
    case TaskKind::ListOps:
      return "listops";
    case TaskKind::Text:
      return "text";
    case TaskKind::MatchingEnds:
      return "matching_ends";
    case TaskKind::Image:
      return "image";
    case TaskKind::Pathfinder:
      return "pathfinder";
    case TaskKind::Retrieval:
      return "retrieval";
  }
  throw Error("to_string: invalid TaskKind");
}

bool is_pair_task(TaskKind kind) {
  return kind == TaskKind::PairCopy || kind == TaskKind::PairReverse || kind == TaskKind::Parallel;
}

bool is_class_task(TaskKind kind) {
  return kind == TaskKind::ListOps || kind == TaskKind::Text || kind == TaskKind::MatchingEnds ||
         kind == TaskKind::Image || kind == TaskKind::Pathfinder || kind == TaskKind::Retrieval;
}

bool reads_file(TaskKind kind) {
  return kind == TaskKind::Bytes || kind == TaskKind::Parallel || kind == TaskKind::Text ||
         kind == TaskKind::Image || kind == TaskKind::Pathfinder || kind == TaskKind::Retrieval;
}

const std::vector<TaskKind>& task_kinds() {
  static const std::vector<TaskKind> kinds = {
      TaskKind::Duplication,  TaskKind::Copy,     TaskKind::Bytes,      TaskKind::PairCopy,
      TaskKind::PairReverse,  TaskKind::Parallel, TaskKind::ListOps,    TaskKind::Text,
      TaskKind::MatchingEnds, TaskKind::Image,    TaskKind::Pathfinder, TaskKind::Retrieval};
  return kinds;
}

TaskKind parse_task_kind(const std::string& name) {
  std::string choices;
  for (const TaskKind kind : task_kinds()) {
    if (name == to_string(kind)) return kind;
    choices += std::string(choices.empty() ? "" : ", ") + to_string(kind);
  }
  throw ConfigError(detail::concat("data.task \"", name, "\" is unknown; choose ", choices,
                                   " (language-model, source/target pair and classification "
                                   "tasks)"));
}

PairDataConfig pair_config(const DataConfig& c) {
  PairDataConfig p;
  p.task = c.task == TaskKind::PairReverse ? PairTaskKind::Reverse
           : c.task == TaskKind::Parallel  ? PairTaskKind::Parallel
                                           : PairTaskKind::Copy;
  p.length = c.length;
  p.min_symbols = c.min_symbols;
  p.max_symbols = c.max_symbols;
  p.vocab = c.vocab;
  p.seed = c.seed;
  p.path = c.path;
  p.units = c.units;
  return p;
}

void DataConfig::validate() const {
  const char* op = "DataConfig";
  // Ids are ints on the device and a window of length + 1 must be addressable.
  require<ConfigError>(length >= 1 && length < INT_MAX, op, ": data.length is ", length,
                       " but must be in [1, ", INT_MAX, ")");
  // Keys of other tasks would have no effect (a path given to a task that
  // generates its data most likely meant another task).
  if (!path.empty() && !reads_file(task)) {
    std::string readers;
    for (const TaskKind kind : task_kinds())
      if (reads_file(kind)) readers += std::string(readers.empty() ? "" : ", ") + to_string(kind);
    throw ConfigError(detail::concat(op, ": data.path is \"", path, "\" but data.task = \"",
                                     to_string(task),
                                     "\" generates its data and reads no file; set data.task to "
                                     "the task of that file (",
                                     readers, ") or leave data.path out"));
  }
  const bool sized = task == TaskKind::PairCopy || task == TaskKind::PairReverse;
  require<ConfigError>(sized || (min_symbols == 1 && max_symbols == 0), op,
                       ": data.min_symbols / data.max_symbols are ", min_symbols, " / ",
                       max_symbols, " but only seq2seq_copy and seq2seq_reverse read them, not \"",
                       to_string(task), "\"; leave them out");
  require<ConfigError>(units == "bytes" || task == TaskKind::Parallel, op, ": data.units is \"",
                       units, "\" but only the parallel task reads it, not \"", to_string(task),
                       "\"; leave it out");
  if (is_pair_task(task)) {
    pair_config(*this).validate();
    return;
  }
  switch (task) {
    case TaskKind::Duplication:
      require<ConfigError>(length >= 4 && length % 2 == 0, op, ": data.length is ", length,
                           " but the duplication task (0 w 0 w with |w| = length/2 - 1) needs "
                           "an even length >= 4; use ",
                           length < 4 ? Index(4) : length + 1);
      require<ConfigError>(vocab >= 2 && vocab <= INT_MAX, op, ": data.vocab is ", vocab,
                           " but the duplication task needs vocab in [2, ", INT_MAX,
                           "] (symbols 1..vocab-1, separator 0)");
      break;
    case TaskKind::Copy:
      require<ConfigError>(length >= 4, op, ": data.length is ", length,
                           " but the copy task (w 1 w and padding, 1 <= |w| <= (length-1)/2) "
                           "needs length >= 4");
      require<ConfigError>(vocab >= 3 && vocab <= INT_MAX, op, ": data.vocab is ", vocab,
                           " but the copy task needs vocab in [3, ", INT_MAX,
                           "] (padding 0, separator 1, symbols 2..vocab-1)");
      break;
    case TaskKind::Bytes:
      require<ConfigError>(!path.empty(), op,
                           ": data.path is empty but the bytes task reads a file; set "
                           "data.path to the corpus (e.g. enwik8)");
      require<ConfigError>(id_offset >= 0 && id_offset <= 65536, op, ": data.id_offset is ",
                           id_offset, " but must be in [0, 65536]");
      require<ConfigError>(vocab == 256 + id_offset, op, ": data.vocab is ", vocab,
                           " but with data.id_offset = ", id_offset, " the bytes task's ids are ",
                           id_offset, " ... ", 255 + id_offset,
                           " (each byte plus the offset; the ids below it are reserved), ",
                           256 + id_offset, " in all; set data.vocab = ", 256 + id_offset);
      break;
    default:
      break;
  }
  require<ConfigError>(id_offset == 0 || task == TaskKind::Bytes, op, ": data.id_offset is ",
                       id_offset, " but only the bytes task shifts its ids; set it to 0");
}

}  // namespace reformer::data
