// The checkpoints of a run folder: names, the newest one, pruning.
#include "io/text.hpp"
#include "reformer/core/error.hpp"
#include "reformer/io/checkpoint.hpp"
#include "reformer/io/files.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <system_error>
#include <utility>

namespace reformer::io {
namespace {
using text::all_digits;

namespace fs = std::filesystem;

fs::path checkpoint_folder(const std::string& run_dir) { return fs::path(run_dir) / "checkpoints"; }

// The step of "step_<digits>.h5", or -1 for any other name.
std::int64_t step_of(const std::string& name) {
  const std::string prefix = "step_", suffix = ".h5";
  if (name.size() <= prefix.size() + suffix.size() || name.compare(0, prefix.size(), prefix) ||
      name.compare(name.size() - suffix.size(), suffix.size(), suffix))
    return -1;
  const std::string digits =
      name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
  if (!all_digits(digits) || digits.size() > 18) return -1;
  return std::stoll(digits);
}

// (step, path) of every checkpoint in the folder, highest step first.
std::vector<std::pair<std::int64_t, fs::path>> checkpoints_of(const std::string& run_dir,
                                                              const char* op) {
  std::vector<std::pair<std::int64_t, fs::path>> out;
  const fs::path folder = checkpoint_folder(run_dir);
  std::error_code error;
  if (!fs::is_directory(folder, error)) return out;
  for (fs::directory_iterator it(folder, error), end; !error && it != end; it.increment(error)) {
    const std::int64_t step = checkpoint_step(it->path().string());
    if (step < 0) continue;
    // A checkpoint's name on anything but a readable regular file (a folder, a
    // dangling link, a FIFO) is damage to report, not a file to skip: skipping
    // it would resume silently from an older step.
    require_regular_file(it->path().string(), op,
                         "it has a checkpoint's name; restore the checkpoint or remove it");
    out.emplace_back(step, it->path());
  }
  require<IoError>(!error, op, ": cannot list \"", folder.string(), "\": ", error.message());
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  return out;
}

void remove_file(const fs::path& path, const char* op) {
  std::error_code error;
  fs::remove(path, error);
  require<IoError>(!error, op, ": cannot remove \"", path.string(), "\": ", error.message());
}

}  // namespace

std::int64_t checkpoint_step(const std::string& path) {
  return step_of(fs::path(path).filename().string());
}

std::string checkpoint_file(const std::string& run_dir, std::int64_t step) {
  require<ConfigError>(step >= 0, "checkpoint_file: step is ", step, " but must be >= 0");
  char name[48];
  std::snprintf(name, sizeof(name), "step_%08lld.h5", static_cast<long long>(step));
  return (checkpoint_folder(run_dir) / name).string();
}

std::optional<std::string> latest_checkpoint(const std::string& run_dir) {
  const auto checkpoints = checkpoints_of(run_dir, "latest_checkpoint");
  if (checkpoints.empty()) return std::nullopt;
  return checkpoints.front().second.string();
}

CheckpointMeta read_target_meta(const std::string& target, const std::string& checkpoint) {
  try {
    return read_checkpoint_meta(checkpoint);
  } catch (const IoError& e) {
    std::error_code error;
    if (!fs::is_directory(target, error)) throw;
    std::vector<std::pair<std::int64_t, fs::path>> checkpoints;
    try {
      checkpoints = checkpoints_of(target, "read_target_meta");
    } catch (const IoError&) {
      throw e;
    }
    if (checkpoints.size() < 2) throw;
    const std::string older = checkpoints[1].second.string();
    throw IoError(detail::concat(
        e.what(), ". The run also holds ", checkpoints.size() - 1, " older checkpoint",
        checkpoints.size() == 2 ? "" : "s", ", the newest \"", older,
        "\": eval, generate or warm-start (train.init_from) from it by that path, or move "
        "the damaged file out of the checkpoints folder to resume from it"));
  }
}

void prune_checkpoints(const std::string& run_dir, int keep) {
  const char* op = "prune_checkpoints";
  require<ConfigError>(keep >= 1, op, ": keep is ", keep,
                       " but must be >= 1 (the newest checkpoint is always kept)");
  const auto checkpoints = checkpoints_of(run_dir, op);
  for (std::size_t i = std::size_t(keep); i < checkpoints.size(); ++i)
    remove_file(checkpoints[i].second, op);
  // Temporary files of writers that were killed mid-write.
  remove_stale_temporaries(run_dir);
}

}  // namespace reformer::io
