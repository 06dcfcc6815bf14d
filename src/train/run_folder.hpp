// The run folder's files besides checkpoints (private to the library): the
// metrics log, and what a failed write there leaves behind and how to go on.
#pragma once

#include "reformer/core/error.hpp"
#include "reformer/io/files.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdint>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

namespace reformer::train {

// One row per logged step or evaluation, as CSV or JSON lines. A resumed run
// keeps the rows up to its checkpoint's step and drops later ones.
class MetricsLog {
 public:
  static const std::vector<std::string>& columns() {
    static const std::vector<std::string> names = {"step",
                                                   "kind",
                                                   "loss",
                                                   "bits_per_token",
                                                   "accuracy",
                                                   "tokens",
                                                   "tokens_per_s",
                                                   "learning_rate",
                                                   "grad_norm",
                                                   "seconds",
                                                   "peak_forward_MiB",
                                                   "peak_loss_MiB",
                                                   "peak_backward_MiB",
                                                   "peak_optimizer_MiB"};
    return names;
  }

  // keep_up_to_step < 0: a new run (an old file is replaced by a header). A
  // resumed run keeps the rows up to its checkpoint's step and appends; when
  // later rows (or a torn last line) must go, the kept rows are written to a new
  // file that is renamed over the old one. The file is never truncated in
  // place, so a kill at any moment leaves every row before the checkpoint.
  MetricsLog(const std::string& path, const std::string& format, std::int64_t keep_up_to_step)
      : jsonl_(format == "jsonl"), path_(path) {
    std::string kept;
    bool rewrite = true;
    if (keep_up_to_step >= 0 && std::filesystem::exists(path)) {
      const std::string text = io::read_text_file(path, "metrics", "");
      rewrite = !text.empty() && text.back() != '\n';  // a torn last row
      std::size_t at = 0;
      bool first = true;
      while (at < text.size()) {
        const auto end = text.find('\n', at);
        if (end == std::string::npos) break;
        const std::string line = text.substr(at, end - at);
        at = end + 1;
        if (line.empty()) continue;
        const auto step = row_step(line);
        const bool keep = step < 0 ? !jsonl_ && first : step <= keep_up_to_step;
        first = false;
        if (keep)
          kept += line + '\n';
        else
          rewrite = true;
      }
      if (kept.empty()) rewrite = true;
    }
    if (rewrite) {
      if (!jsonl_ && kept.empty()) kept = join_header() + '\n';
      io::write_file_atomically(path, kept, "metrics");
    }
    fd_ = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
    if (fd_ < 0) io::throw_write_error("metrics", "open", path, errno);
  }
  ~MetricsLog() { ::close(fd_); }
  MetricsLog(const MetricsLog&) = delete;
  MetricsLog& operator=(const MetricsLog&) = delete;

  // values: one per column, as text; "" leaves a CSV cell empty / omits a JSON key.
  // The row goes to the file whole or not at all (a full disk: WriteError, and
  // the rows before are intact).
  void row(const std::vector<std::string>& values) {
    const auto& names = columns();
    std::ostringstream line;
    if (jsonl_) {
      line << '{';
      bool first = true;
      for (std::size_t i = 0; i < names.size(); ++i) {
        if (values[i].empty()) continue;
        const bool text = names[i] == "kind";
        line << (first ? "" : ", ") << '"' << names[i] << "\": " << (text ? "\"" : "") << values[i]
             << (text ? "\"" : "");
        first = false;
      }
      line << "}\n";
    } else {
      for (std::size_t i = 0; i < names.size(); ++i) line << (i ? "," : "") << values[i];
      line << '\n';
    }
    io::append_whole(fd_, line.str(), path_, "metrics");
  }

 private:
  std::string join_header() const {
    std::string header;
    for (const auto& name : columns()) header += (header.empty() ? "" : ",") + name;
    return header;
  }
  // The step of a data row, -1 for the CSV header.
  std::int64_t row_step(const std::string& line) const {
    std::string digits;
    const auto start = jsonl_ ? line.find(':') + 1 : 0;
    for (std::size_t i = start; i < line.size(); ++i) {
      if (std::isdigit(static_cast<unsigned char>(line[i])))
        digits += line[i];
      else if (!digits.empty() || line[i] == ',')
        break;
    }
    return digits.empty() || digits.size() > 18 ? -1 : std::stoll(digits);
  }
  bool jsonl_;
  std::string path_;
  int fd_ = -1;
};

// What a failed write into the run folder (a full disk, a read-only file
// system) leaves behind and how to go on: the newest checkpoint, which the
// failure did not touch (checkpoints are written aside and renamed), or none.
std::string after_failed_write(const std::string& run_dir);

// Runs `write`, a write into the run folder; a WriteError gains the newest
// checkpoint and the fix (one line for the CLI's message).
template <class Write>
void write_run_folder(const std::string& run_dir, Write&& write) {
  try {
    write();
  } catch (const WriteError& e) {
    throw WriteError(e.what() + after_failed_write(run_dir));
  }
}

}  // namespace reformer::train
