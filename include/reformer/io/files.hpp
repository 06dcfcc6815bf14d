// Files of a run folder that must survive a kill at any moment, and the checks
// that keep special files (FIFOs, devices, directories) out of every reader.
//
//   <run_dir>/.lock          held (flock) by the one `train` that writes the folder
//   <path>.tmp.<pid>         a file being written by process <pid>; renamed over
//                            <path> when complete, removed by the next start when
//                            that process is gone
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace reformer::io {

// Throws IoError unless `path` names a regular file that can be read:
// "<op>: cannot open "<path>": No such file or directory", "... is a FIFO, not a
// regular file; <fix>". Follows symlinks; never opens the file, so a FIFO cannot
// block it.
void require_regular_file(const std::string& path, const std::string& op, const std::string& fix);

// For a file that could not be opened: "" when `path` is absolute, else
// " (a relative path, read from the working folder /x/y)": a run's config
// keeps its paths as written, so a run used from another folder misses them.
std::string relative_path_note(const std::string& path);

// The whole content of a regular file (require_regular_file first).
std::string read_text_file(const std::string& path, const std::string& op, const std::string& fix);

// fsync of a file or a directory, so that its data (or its entries) are on disk.
void sync_path(const std::string& path, bool directory, const std::string& op);

// "<path>.tmp.<this process's pid>": where a file is written before it is
// renamed over `path`.
std::string temporary_path(const std::string& path);

// Free bytes on the file system that holds `path` (the nearest folder of it that
// exists) for this process (root may use the blocks reserved for it), and its size.
struct FreeSpace {
  bool known = false;  // statvfs answered
  std::uint64_t free = 0, size = 0;
  bool read_only = false;
  std::string folder;  // the folder asked
};
FreeSpace free_space(const std::string& path);
// "<free> free of <size> on the file system of "<folder>"" (", mounted
// read-only" when it is), for messages.
std::string describe_free_space(const std::string& path);

// Throws WriteError("<op>: cannot <action> "<path>": <strerror(error)> (<free space>)<after>").
[[noreturn]] void throw_write_error(const std::string& op, const std::string& action,
                                    const std::string& path, int error,
                                    const std::string& after = "");

// Writes `size` bytes (`text`) to temporary_path(path), syncs it, renames it over
// `path` and syncs the folder: a reader (or a kill) sees the old content or the
// new, never a mix or an empty file. When the file system is full (a write fails
// part-way) or read-only, or a write fails otherwise, WriteError names the path,
// the reason and the free space; the temporary file is removed and `path` is
// unchanged.
// `check`, when given, reads the written temporary file before it is renamed
// (and may throw: the temporary file is then removed).
void write_file_atomically(const std::string& path, const char* data, std::size_t size,
                           const std::string& op,
                           const std::function<void(const std::string&)>& check = {});
void write_file_atomically(const std::string& path, const std::string& text, const std::string& op);

// Appends `text` to `fd`, a file of `path` opened with O_APPEND, whole or not at
// all: a write that fails part-way (a full disk) is undone by truncating the file
// to its size before, so no torn line is left behind the lines already there.
// WriteError as write_file_atomically.
void append_whole(int fd, const std::string& text, const std::string& path, const std::string& op);

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

  // The pid written in the lock file of `run_dir` by its holder (0 while the
  // holder has not written it yet), or -1 when nobody holds it.
  static long holder(const std::string& run_dir);

 private:
  int fd_ = -1;
};

}  // namespace reformer::io
