// The byte-level corpus: a memory-mapped file split into train, valid and test.
#include "data/task_detail.hpp"
#include "reformer/core/error.hpp"
#include "reformer/io/files.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace reformer::data {

SplitBounds split_bytes(std::uint64_t size) {
  // 90% / 5% / 5%, each boundary floor(size * percent / 100), computed without
  // overflowing 64 bits.
  const auto fraction = [size](std::uint64_t percent) {
    return size / 100 * percent + size % 100 * percent / 100;
  };
  SplitBounds bounds;
  const std::uint64_t cuts[4] = {0, fraction(90), fraction(95), size};
  for (int s = 0; s < 3; ++s) {
    bounds.begin[s] = cuts[s];
    bounds.end[s] = cuts[s + 1];
  }
  return bounds;
}

namespace {

using HostPolicy = Kokkos::RangePolicy<Kokkos::DefaultHostExecutionSpace>;

std::string errno_text(int error) { return std::strerror(error); }

// A whole file mapped read-only; unmapped on destruction.
class MappedFile {
 public:
  explicit MappedFile(const std::string& path) : path_(path) {
    const char* op = "bytes corpus";
    // O_NONBLOCK: opening a FIFO must not wait for a writer (fstat refuses it below).
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
      const int error = errno;
      throw IoError(detail::concat(op, ": cannot open \"", path, "\": ", errno_text(error),
                                   io::relative_path_note(path), "; check data.path"));
    }
    struct stat info {};
    if (::fstat(fd, &info) != 0) {
      const int error = errno;
      ::close(fd);
      throw IoError(detail::concat(op, ": cannot stat \"", path, "\": ", errno_text(error)));
    }
    if (!S_ISREG(info.st_mode)) {
      ::close(fd);
      throw IoError(
          detail::concat(op, ": \"", path, "\" is not a regular file; data.path must name a file"));
    }
    size_ = std::uint64_t(info.st_size);
    if (size_ == 0) {
      ::close(fd);
      throw IoError(detail::concat(op, ": \"", path, "\" is empty; data.path must name a corpus"));
    }
    void* data = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    const int error = errno;
    ::close(fd);  // the mapping keeps the file open
    if (data == MAP_FAILED)
      throw IoError(detail::concat(op, ": cannot map \"", path, "\" (", size_,
                                   " bytes): ", errno_text(error)));
    data_ = static_cast<const unsigned char*>(data);
  }
  ~MappedFile() { ::munmap(const_cast<unsigned char*>(data_), size_); }
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const unsigned char* data() const { return data_; }
  std::uint64_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  const unsigned char* data_ = nullptr;
  std::uint64_t size_ = 0;
};

class BytesTask final : public Task {
 public:
  explicit BytesTask(const DataConfig& config)
      : config_(config), file_(config.path), bounds_(split_bytes(file_.size())) {
    const std::uint64_t window = std::uint64_t(config.length) + 1;
    require<IoError>(file_.size() >= window, "bytes corpus: \"", config.path, "\" has ",
                     file_.size(), " bytes but one window needs data.length + 1 = ", window,
                     "; use a longer file or a shorter data.length");
    for (const Split split : {Split::Train, Split::Valid, Split::Test})
      require<IoError>(bounds_.bytes(split) >= window, "bytes corpus: the ", to_string(split),
                       " split of \"", config.path, "\" (", file_.size(), " bytes) has ",
                       bounds_.bytes(split), " bytes (", bounds_.begin[int(split)], " to ",
                       bounds_.end[int(split)], ") but one window needs data.length + 1 = ", window,
                       "; use a longer file or a shorter data.length");
  }

  Batch batch(Split split, std::uint64_t batch_index, Index batch_size) const override {
    Batch out = internal::allocate_batch("BytesTask::batch", batch_size, config_.length);
    const Index length = config_.length;
    const std::uint64_t begin = bounds_.begin[int(split)];
    const std::uint64_t starts = bounds_.bytes(split) - std::uint64_t(length);  // >= 1
    const std::uint64_t seed = config_.seed;
    const unsigned char* bytes = file_.data();
    const int offset = int(config_.id_offset);
    const auto inputs = out.inputs, targets = out.targets;
    Kokkos::parallel_for("bytes_batch", HostPolicy(0, batch_size), [=](Index b) {
      const RandomKey key = internal::row_key(seed, TaskKind::Bytes, split, batch_index, b);
      const unsigned char* window =
          bytes + begin + internal::uniform_below(random_bits(key, 0), starts);
      for (Index t = 0; t < length; ++t) {
        inputs(b, t) = window[t] + offset;
        targets(b, t) = window[t + 1] + offset;
      }
    });
    Kokkos::DefaultHostExecutionSpace().fence();
    return out;
  }

  std::uint64_t segments_per_stream(Split split, Index streams, Index length) const override {
    require<ConfigError>(streams >= 1 && length >= 1, "bytes corpus: segments of ", streams,
                         " streams of length ", length, "; both must be >= 1");
    const std::uint64_t part = bounds_.bytes(split) / std::uint64_t(streams);
    const std::uint64_t count = part >= 1 ? (part - 1) / std::uint64_t(length) : 0;
    require<IoError>(count >= 1, "bytes corpus: the ", to_string(split), " split of \"",
                     config_.path, "\" has ", bounds_.bytes(split), " bytes, ", part,
                     " per stream for ", streams, " streams, but a segment needs ", length + 1,
                     "; use fewer streams (train.batch x train.accumulate, or the evaluation's "
                     "train.batch), a shorter segment or a longer file");
    return count;
  }

  // Stream r of the split is bytes [begin + r n, begin + (r + 1) n), n = bytes / streams;
  // segment s reads inputs [r n + s L, r n + s L + L) and the targets one byte on.
  Batch segments(Split split, std::uint64_t segment, Index first, Index rows, Index streams,
                 Index length) const override {
    const std::uint64_t count = segments_per_stream(split, streams, length);
    require<ConfigError>(first >= 0 && rows >= 1 && first + rows <= streams, "bytes corpus: rows [",
                         first, ", ", first + rows, ") of ", streams,
                         " streams; they must lie within the streams");
    Batch out = internal::allocate_batch("BytesTask::segments", rows, length);
    const std::uint64_t part = bounds_.bytes(split) / std::uint64_t(streams);
    const unsigned char* start =
        file_.data() + bounds_.begin[int(split)] + (segment % count) * std::uint64_t(length);
    const int offset = int(config_.id_offset);
    const auto inputs = out.inputs, targets = out.targets;
    Kokkos::parallel_for("bytes_segments", HostPolicy(0, rows), [=](Index b) {
      const unsigned char* row = start + std::uint64_t(first + b) * part;
      for (Index t = 0; t < length; ++t) {
        inputs(b, t) = row[t] + offset;
        targets(b, t) = row[t + 1] + offset;
      }
    });
    Kokkos::DefaultHostExecutionSpace().fence();
    return out;
  }

  int ignore_id() const override { return -1; }
  Index vocab() const override { return 256 + config_.id_offset; }
  Index length() const override { return config_.length; }
  std::string describe() const override {
    return detail::concat(describe_text(), ", length ", config_.length, ", random windows, seed ",
                          config_.seed);
  }
  std::string describe_text() const override {
    return detail::concat(
        "bytes: \"", config_.path, "\", ", file_.size(),
        " bytes, train / valid / test = ", bounds_.bytes(Split::Train), " / ",
        bounds_.bytes(Split::Valid), " / ", bounds_.bytes(Split::Test), " bytes",
        config_.id_offset ? detail::concat(", ids = bytes + ", config_.id_offset) : std::string());
  }

 private:
  DataConfig config_;
  MappedFile file_;
  SplitBounds bounds_;
};

}  // namespace

std::unique_ptr<Task> internal::make_bytes_task(const DataConfig& config) {
  return std::make_unique<BytesTask>(config);
}

}  // namespace reformer::data
