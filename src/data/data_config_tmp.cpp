// TEMPORARY (branch cli-config only): stand-ins for DataConfig::validate,
// parse_task_kind and to_string(TaskKind) so that the config loader links and
// its tests run before the data branch lands. The data branch owns the real
// definitions in src/data/; delete this file when merging it.
#include "reformer/data/data_config.hpp"

#include "reformer/core/error.hpp"

namespace reformer::data {

const char* to_string(TaskKind kind) {
  switch (kind) {
    case TaskKind::Duplication:
      return "duplication";
    case TaskKind::Copy:
      return "copy";
    case TaskKind::Bytes:
      return "bytes";
  }
  throw Error("to_string: invalid TaskKind");
}

TaskKind parse_task_kind(const std::string& name) {
  for (const TaskKind kind : {TaskKind::Duplication, TaskKind::Copy, TaskKind::Bytes})
    if (name == to_string(kind)) return kind;
  throw ConfigError("data.task \"" + name + "\" is unknown; choose duplication, copy or bytes");
}

void DataConfig::validate() const {
  const char* op = "DataConfig";
  require<ConfigError>(length >= 4, op, ": data.length is ", length, " but must be >= 4");
  require<ConfigError>(vocab >= 2, op, ": data.vocab is ", vocab, " but must be >= 2");
  if (task == TaskKind::Duplication)
    require<ConfigError>(length % 2 == 0, op, ": data.length is ", length,
                         " but the duplication task needs an even length");
  if (task == TaskKind::Bytes) {
    require<ConfigError>(!path.empty(), op, ": data.path is empty but the bytes task reads a file");
    require<ConfigError>(vocab == 256, op, ": data.vocab is ", vocab,
                         " but the bytes task has exactly 256 ids");
  }
}

}  // namespace reformer::data
