// Run-folder files: regular-file checks, atomic writes, stale temporaries, the lock.
#include "reformer/io/files.hpp"
#include "io/text.hpp"

#include "reformer/core/error.hpp"
#include "reformer/core/memory_tracker.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <system_error>

namespace reformer::io {
namespace {
using text::all_digits;
using text::quoted;

namespace fs = std::filesystem;

std::string errno_text(int error) { return std::strerror(error); }

// What a non-regular file is, for messages.
const char* kind_of(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

// The writer's pid of "<anything>.tmp.<pid>", or -1 for any other name.
long temporary_owner(const std::string& name) {
  const std::string marker = ".tmp.";
  const auto at = name.rfind(marker);
  if (at == std::string::npos) return -1;
  const std::string digits = name.substr(at + marker.size());
  if (!all_digits(digits) || digits.size() > 9) return -1;
  return std::stol(digits);
}

bool process_exists(long pid) { return pid > 0 && (::kill(pid_t(pid), 0) == 0 || errno == EPERM); }

// Writes all `size` bytes; false with errno set when a write fails (ENOSPC
// after a short write, as the kernel reports a full disk).
bool write_all(int fd, const char* data, std::size_t size) {
  std::size_t done = 0;
  while (done < size) {
    const ssize_t n = ::write(fd, data + done, size - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return false;
    if (n == 0) {
      errno = EIO;
      return false;
    }
    done += std::size_t(n);
  }
  return true;
}

std::string lock_path(const std::string& run_dir) { return (fs::path(run_dir) / ".lock").string(); }

long read_pid(int fd) {
  char text[32] = {};
  const ssize_t n = ::pread(fd, text, sizeof text - 1, 0);
  if (n <= 0) return -1;
  text[n] = '\0';
  return std::strtol(text, nullptr, 10);
}

}  // namespace

std::string relative_path_note(const std::string& path) {
  if (path.empty() || path.front() == '/') return "";
  std::error_code error;
  const auto folder = std::filesystem::current_path(error);
  return error ? std::string(" (a relative path, read from the working folder)")
               : detail::concat(" (a relative path, read from the working folder ",
                                quoted(folder.string()), ")");
}

void require_regular_file(const std::string& path, const std::string& op, const std::string& fix) {
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0) {
    const int error = errno;
    throw IoError(detail::concat(op, ": cannot open ", quoted(path), ": ", errno_text(error),
                                 relative_path_note(path), fix.empty() ? "" : "; ", fix));
  }
  if (!S_ISREG(info.st_mode))
    throw IoError(detail::concat(op, ": ", quoted(path), " is ", kind_of(info.st_mode),
                                 ", not a regular file", fix.empty() ? "" : "; ", fix));
  if (::access(path.c_str(), R_OK) != 0)
    throw IoError(detail::concat(op, ": cannot read ", quoted(path), ": ", errno_text(errno)));
}

std::string read_text_file(const std::string& path, const std::string& op, const std::string& fix) {
  require_regular_file(path, op, fix);
  // O_NONBLOCK: a file swapped for a FIFO after the check still cannot block.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0)
    throw IoError(detail::concat(op, ": cannot open ", quoted(path), ": ", errno_text(errno)));
  std::string text;
  struct stat info {};
  bool ok = ::fstat(fd, &info) == 0 && S_ISREG(info.st_mode);
  char buffer[1 << 16];
  while (ok) {
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      ok = n == 0;
      break;
    }
    text.append(buffer, std::size_t(n));
  }
  const int error = errno;
  ::close(fd);
  if (!ok)
    throw IoError(detail::concat(op, ": cannot read ", quoted(path), ": ", errno_text(error)));
  return text;
}

void sync_path(const std::string& path, bool directory, const std::string& op) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | (directory ? O_DIRECTORY : 0));
  if (fd < 0)
    throw IoError(
        detail::concat(op, ": cannot open ", quoted(path), " to sync it: ", errno_text(errno)));
  const int status = ::fsync(fd);
  const int error = errno;
  ::close(fd);
  if (status != 0)
    throw IoError(
        detail::concat(op, ": cannot sync ", quoted(path), " to disk: ", errno_text(error)));
}

std::string temporary_path(const std::string& path) {
  return path + ".tmp." + std::to_string(::getpid());
}

FreeSpace free_space(const std::string& path) {
  FreeSpace space;
  // The nearest folder that exists: the file itself may not yet.
  std::error_code error;
  fs::path folder = fs::path(path).parent_path();
  if (fs::is_directory(path, error)) folder = path;
  while (!folder.empty() && !fs::is_directory(folder, error)) folder = folder.parent_path();
  space.folder = folder.empty() ? "." : folder.string();
  struct statvfs info {};
  if (::statvfs(space.folder.c_str(), &info) != 0) return space;
  space.known = true;
  const std::uint64_t blocks = ::geteuid() == 0 ? info.f_bfree : info.f_bavail;
  space.free = std::uint64_t(blocks) * info.f_frsize;
  space.size = std::uint64_t(info.f_blocks) * info.f_frsize;
  space.read_only = (info.f_flag & ST_RDONLY) != 0;
  return space;
}

std::string describe_free_space(const std::string& path) {
  const FreeSpace space = free_space(path);
  if (!space.known)
    return detail::concat("free space on the file system of ", quoted(space.folder), " unknown");
  return detail::concat(format_bytes(std::int64_t(space.free)), " free of ",
                        format_bytes(std::int64_t(space.size)), " on the file system of ",
                        quoted(space.folder), space.read_only ? ", mounted read-only" : "");
}

void throw_write_error(const std::string& op, const std::string& action, const std::string& path,
                       int error, const std::string& after) {
  throw WriteError(detail::concat(op, ": cannot ", action, " ", quoted(path), ": ",
                                  errno_text(error), " (", describe_free_space(path), ")", after));
}

void write_file_atomically(const std::string& path, const char* data, std::size_t size,
                           const std::string& op,
                           const std::function<void(const std::string&)>& check) {
  const std::string temporary = temporary_path(path);
  const std::string unchanged = "; " + quoted(path) + " is unchanged";
  const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw_write_error(op, "create", temporary, errno, unchanged);
  // Any failure: the partial file goes, the file at `path` stays as it was.
  auto fail = [&](const char* action, int error, bool close_fd) {
    if (close_fd) ::close(fd);
    std::remove(temporary.c_str());
    throw_write_error(op, action, temporary, error, "; removed it" + unchanged);
  };
  // No check of the free space before: the write itself is the one answer that
  // counts (blocks, quotas, reserved space, compression all play in).
  if (!write_all(fd, data, size))
    fail(("write " + format_bytes(std::int64_t(size)) + " to").c_str(), errno, true);
  if (::fsync(fd) != 0) fail("sync", errno, true);
  if (::close(fd) != 0) fail("close", errno, false);
  if (check) {
    try {
      check(temporary);
    } catch (...) {
      std::remove(temporary.c_str());
      throw;
    }
  }
  if (std::rename(temporary.c_str(), path.c_str()) != 0) {
    const int error = errno;
    std::remove(temporary.c_str());
    throw IoError(detail::concat(op, ": cannot rename ", quoted(temporary), " to ", quoted(path),
                                 ": ", errno_text(error)));
  }
  fs::path folder = fs::path(path).parent_path();
  sync_path(folder.empty() ? "." : folder.string(), true, op);
}

void write_file_atomically(const std::string& path, const std::string& text,
                           const std::string& op) {
  write_file_atomically(path, text.data(), text.size(), op);
}

void append_whole(int fd, const std::string& text, const std::string& path, const std::string& op) {
  struct stat before {};
  if (::fstat(fd, &before) != 0) throw_write_error(op, "append to", path, errno);
  if (write_all(fd, text.data(), text.size())) return;
  const int error = errno;
  // Take back what part of the text was written: the file ends where it did.
  const bool undone = ::ftruncate(fd, before.st_size) == 0;
  throw_write_error(op, "append to", path, error,
                    undone ? "; the lines before are intact"
                           : "; the last line may be torn (it could not be removed)");
}

std::vector<std::string> remove_stale_temporaries(const std::string& run_dir) {
  std::vector<std::string> removed;
  for (const fs::path folder : {fs::path(run_dir), fs::path(run_dir) / "checkpoints"}) {
    std::error_code error;
    if (!fs::is_directory(folder, error)) continue;
    std::vector<fs::path> stale;
    for (fs::directory_iterator it(folder, error), end; !error && it != end; it.increment(error)) {
      const long owner = temporary_owner(it->path().filename().string());
      if (owner > 0 && !process_exists(owner)) stale.push_back(it->path());
    }
    for (const fs::path& path : stale) {
      fs::remove(path, error);
      require<IoError>(!error, "run folder: cannot remove the stale temporary file ",
                       quoted(path.string()), ": ", error.message());
      removed.push_back(path.string());
    }
  }
  return removed;
}

RunLock::RunLock(const std::string& run_dir, const std::string& op) {
  const std::string path = lock_path(run_dir);
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NONBLOCK, 0644);
  if (fd_ < 0) throw_write_error(op, "open the lock file", path, errno);
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int error = errno;
    const long pid = read_pid(fd_);
    ::close(fd_);
    fd_ = -1;
    if (error == EWOULDBLOCK)
      throw IoError(detail::concat(
          op, ": the run folder ", quoted(run_dir), " is in use by process ",
          pid > 0 ? std::to_string(pid) : std::string("(unknown pid)"), " (it holds ", quoted(path),
          "); wait for that run to end or stop it, or choose another run.dir"));
    throw IoError(detail::concat(op, ": cannot lock ", quoted(path), ": ", errno_text(error)));
  }
  const std::string pid = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, pid.data(), pid.size(), 0) != ssize_t(pid.size())) {
    const int error = errno;
    ::close(fd_);
    fd_ = -1;
    throw_write_error(op, "write the lock file", path, error);
  }
}

RunLock::~RunLock() {
  if (fd_ >= 0) ::close(fd_);
}

long RunLock::holder(const std::string& run_dir) {
  const int fd = ::open(lock_path(run_dir).c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return -1;
  long pid = -1;
  // Held: its pid, or 0 while the holder has not written it yet.
  if (::flock(fd, LOCK_SH | LOCK_NB) != 0) pid = std::max(0L, read_pid(fd));
  ::close(fd);
  return pid;
}

}  // namespace reformer::io
