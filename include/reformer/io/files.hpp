// Files of a run folder that must survive a kill at any moment, and the checks
// that keep special files (FIFOs, devices, directories) out of every reader.
//
//   <run_dir>/.lock          held (flock) by the one `train` that writes the folder
//   <path>.tmp.<pid>         a file being written by process <pid>; renamed over
//                            <path> when complete, removed by the next start when
//                            that process is gone
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace reformer::io {

// Throws IoError unless `path` names a regular file that can be read:
// "<op>: cannot open "<path>": No such file or directory", "... is a FIFO, not a
// regular file; <fix>". Follows symlinks; never opens the file, so a FIFO cannot
// block it.
void require_regular_file(const std::string& path, const std::string& op, const std::string& fix);

// The whole content of a regular file (require_regular_file first).
std::string read_text_file(const std::string& path, const std::string& op, const std::string& fix);

// fsync of a file or a directory, so that its data (or its entries) are on disk.
void sync_path(const std::string& path, bool directory, const std::string& op);

// "<path>.tmp.<this process's pid>": where a file is written before it is
// renamed over `path`.
std::string temporary_path(const std::string& path);

// Writes `text` to temporary_path(path), syncs it, renames it over `path` and
// syncs the folder: a reader (or a kill) sees the old content or the new, never
// a mix or an empty file.
void write_file_atomically(const std::string& path, const std::string& text, const std::string& op);

// Removes the "*.tmp.<pid>" files in `run_dir` and `run_dir`/checkpoints whose
// writing process no longer runs; returns their paths.
std::vector<std::string> remove_stale_temporaries(const std::string& run_dir);

// An exclusive lock on a run folder: flock on <run_dir>/.lock, which holds the
// owner's pid. The kernel releases it when the process ends, however it ends.
// Taking it when another process holds it throws IoError naming that pid.
class RunLock {
 public:
  RunLock(const std::string& run_dir, const std::string& op);
  ~RunLock();
  RunLock(const RunLock&) = delete;
  RunLock& operator=(const RunLock&) = delete;

  // The pid written in the lock file of `run_dir` by its holder, or -1 when
  // nobody holds it.
  static long holder(const std::string& run_dir);

 private:
  int fd_ = -1;
};

}  // namespace reformer::io
