#include "train/run_folder.hpp"

#include "reformer/io/checkpoint.hpp"
#include "reformer/io/files.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <filesystem>
#include <optional>
#include <sstream>

namespace reformer::train {

namespace fs = std::filesystem;

// What a failed write into the run folder (a full disk, a read-only file
// system) leaves behind and how to go on: the newest checkpoint, which the
// failure did not touch (checkpoints are written aside and renamed), or none.
std::string after_failed_write(const std::string& run_dir) {
  std::optional<std::string> latest;
  try {
    latest = io::latest_checkpoint(run_dir);
  } catch (const Error& e) {
    return detail::concat("; the newest checkpoint is unknown (", e.what(), ")");
  }
  const char* fix =
      "make room on that file system (or make it writable) or move the run folder to another one "
      "(run.dir)";
  if (!latest)
    return detail::concat("; no checkpoint was saved yet: ", fix, ", then start the run again");
  return detail::concat("; nothing saved before was changed, the newest good checkpoint is \"",
                        *latest, "\" (step ", io::checkpoint_step(*latest), "): ", fix,
                        ", then continue the run with --resume");
}

}  // namespace reformer::train
