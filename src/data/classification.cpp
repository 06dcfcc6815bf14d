#include "reformer/data/classification.hpp"

#include "data/task_detail.hpp"
#include "io/text.hpp"
#include "reformer/core/error.hpp"
#include "reformer/io/files.hpp"
#include "reformer/io/png.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <numeric>
#include <sstream>
#include <tuple>
#include <utility>
#include <vector>

namespace reformer::data {

namespace {

using internal::uniform_below;

constexpr std::uint64_t kClassStream = 0x636c617373;  // "class"
constexpr std::uint64_t kTextSplitSeed = 0x74657874;  // "text": one split for every seed

// The stream of row `row` of training batch `batch_index`.
RandomKey row_key(std::uint64_t seed, ClassTaskKind kind, Split split, std::uint64_t batch_index,
                  Index row) {
  return {seed, stream_id(stream_id(kClassStream, std::uint64_t(kind), std::uint64_t(split)),
                          batch_index, std::uint64_t(row))};
}

// The base of every task: which example each row holds, and the batch layout.
class ExampleTask : public ClassTask {
 public:
  ClassBatch batch(Split split, std::uint64_t batch_index, Index batch_size, Index first_row = 0,
                   Index rows = -1) const override {
    require<ConfigError>(batch_size >= 1, "classification batch: batch_size is ", batch_size,
                         "; it must be at least 1");
    if (rows < 0) rows = batch_size - first_row;
    require<ConfigError>(first_row >= 0 && first_row + rows <= batch_size,
                         "classification batch: rows [", first_row, ", ", first_row + rows,
                         ") are not rows of a batch of ", batch_size);
    const Index length = this->length(), docs = documents();
    ClassBatch out{HostTokens("class_tokens", rows * docs, length),
                   HostTokens("class_valid", rows * docs, length),
                   Kokkos::View<int*, HostSpace>("class_labels", rows)};
    const std::uint64_t n = examples(split);
    std::vector<std::vector<int>> tokens(static_cast<std::size_t>(docs));
    for (Index r = 0; r < rows; ++r) {
      const Index b = first_row + r;  // the row of the whole batch
      std::uint64_t index = batch_index * std::uint64_t(batch_size) + std::uint64_t(b);
      if (split == Split::Train) {
        index = uniform_below(random_bits(row_key(seed(), kind(), split, batch_index, b), 0), n);
      } else if (index >= n) {
        out.labels(r) = -1;  // past the end of the split
        continue;
      }
      out.labels(r) = example(split, index, tokens.data());
      for (Index k = 0; k < docs; ++k) {  // sequence r * docs + k
        const auto& doc = tokens[std::size_t(k)];
        const Index used = std::min<Index>(Index(doc.size()), length);
        for (Index t = 0; t < used; ++t) {
          out.tokens(r * docs + k, t) = doc[std::size_t(t)];
          out.valid(r * docs + k, t) = 1;
        }
      }
    }
    return out;
  }

 protected:
  // Example `index` of `split`: the tokens of its documents() sequences
  // (tokens[0], ...; cut to length() by the caller) and its label.
  virtual int example(Split split, std::uint64_t index, std::vector<int>* tokens) const = 0;
  virtual std::uint64_t seed() const = 0;
  virtual ClassTaskKind kind() const = 0;
};

// The tokens of `n` byte values (bytes of a text, gray levels of an image):
// value + 1, id 0 being padding.
void byte_tokens(const std::uint8_t* values, std::size_t n, std::vector<int>& tokens) {
  tokens.resize(n);
  for (std::size_t t = 0; t < n; ++t) tokens[t] = 1 + int(values[t]);
}

std::uint64_t examples_or(const ClassDataConfig& c, Split split, std::uint64_t fallback) {
  return c.examples[int(split)] ? c.examples[int(split)] : fallback;
}

class ListOpsTask : public ExampleTask {
 public:
  explicit ListOpsTask(const ClassDataConfig& c) : config_(c) {
    config_.listops.seed = c.seed;
    const std::uint64_t lra[3] = {96000, 2000, 2000};
    for (int s = 0; s < 3; ++s) examples_[s] = examples_or(c, Split(s), lra[s]);
  }
  Index vocab() const override { return listops::kVocab; }
  Index length() const override { return config_.length; }
  Index classes() const override { return listops::kClasses; }
  std::uint64_t examples(Split split) const override { return examples_[int(split)]; }
  std::string describe() const override {
    const auto& o = config_.listops;
    return detail::concat("listops: depth <= ", o.max_depth, ", <= ", o.max_args, " arguments, ",
                          o.min_length, " < tokens < ", o.max_length, "; ", examples_[0], " / ",
                          examples_[1], " / ", examples_[2], " examples, length ", config_.length);
  }

 protected:
  int example(Split split, std::uint64_t index, std::vector<int>* tokens) const override {
    auto e = listops_example(config_.listops, split, index);
    tokens[0] = std::move(e.tokens);
    return e.label;
  }
  std::uint64_t seed() const override { return config_.seed; }
  ClassTaskKind kind() const override { return ClassTaskKind::ListOps; }

 private:
  ClassDataConfig config_;
  std::uint64_t examples_[3];
};

class MatchingEndsTask : public ExampleTask {
 public:
  explicit MatchingEndsTask(const ClassDataConfig& c) : config_(c) {
    const std::uint64_t defaults[3] = {1000000, 2000, 2000};
    for (int s = 0; s < 3; ++s) examples_[s] = examples_or(c, Split(s), defaults[s]);
  }
  Index vocab() const override { return config_.vocab; }
  Index length() const override { return config_.length; }
  Index classes() const override { return 2; }
  std::uint64_t examples(Split split) const override { return examples_[int(split)]; }
  std::string describe() const override {
    return detail::concat("matching_ends: symbols 1..", config_.vocab - 1, ", length ",
                          config_.length, "; ", examples_[0], " / ", examples_[1], " / ",
                          examples_[2], " examples");
  }

 protected:
  int example(Split split, std::uint64_t index, std::vector<int>* tokens) const override {
    const RandomKey key{
        config_.seed, stream_id(stream_id(kClassStream, std::uint64_t(ClassTaskKind::MatchingEnds),
                                          std::uint64_t(split)),
                                0x656e6473, index)};  // "ends"
    const std::uint64_t symbols = std::uint64_t(config_.vocab - 1);
    auto& row = tokens[0];
    row.resize(std::size_t(config_.length));
    for (std::size_t t = 0; t < row.size(); ++t)
      row[t] = 1 + int(uniform_below(random_bits(key, t), symbols));
    const int label = int(random_bits(key, row.size()) >> 63);
    // The last symbol: the first one, or one of the others (uniform).
    const int other = 1 + int(uniform_below(random_bits(key, row.size() + 1), symbols - 1));
    row.back() = label ? row.front() : (other >= row.front() ? other + 1 : other);
    return label;
  }
  std::uint64_t seed() const override { return config_.seed; }
  ClassTaskKind kind() const override { return ClassTaskKind::MatchingEnds; }

 private:
  ClassDataConfig config_;
  std::uint64_t examples_[3];
};

class TextTask : public ExampleTask {
 public:
  explicit TextTask(const ClassDataConfig& c) : config_(c) {
    const std::string op = "text classification";
    const std::string text = io::read_text_file(c.path, op, "check data.path");
    std::istringstream in(text);
    std::string line;
    for (Index number = 1; std::getline(in, line); ++number) {
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (line.empty()) continue;
      const std::string where = detail::concat(op, ": \"", c.path, "\" line ", number);
      const auto tab = line.find('\t');
      require<IoError>(tab != std::string::npos, where,
                       " has no tab; every line must be <label> TAB <text>");
      const std::string label = line.substr(0, tab);
      require<IoError>(!label.empty() && label.size() <= 9 &&
                           label.find_first_not_of("0123456789") == std::string::npos,
                       where, ": the label '", label,
                       "' is not a whole number below 10^9 (classes are 0, 1, ...)");
      require<IoError>(tab + 1 < line.size(), where,
                       ": the text after the tab is empty; every example needs at least one byte");
      rows_.emplace_back(std::stoi(label), line.substr(tab + 1));
      classes_ = std::max<Index>(classes_, rows_.back().first + 1);
    }
    require<IoError>(rows_.size() >= 3, op, ": \"", c.path, "\" holds ", rows_.size(),
                     " labelled lines but needs at least 3 (one for each of train, valid and "
                     "test)");
    require<IoError>(classes_ >= 2, op, ": \"", c.path,
                     "\" has one class (every label is 0); classification needs at least 2");
    // A fixed shuffle, then 90% / 5% / 5% (at least one line each).
    auto splits = internal::fixed_split(rows_.size(), kTextSplitSeed);
    for (int s = 0; s < 3; ++s) split_[s] = std::move(splits[std::size_t(s)]);
  }
  Index vocab() const override { return kByteVocab; }
  Index length() const override { return config_.length; }
  Index classes() const override { return classes_; }
  std::uint64_t examples(Split split) const override { return split_[int(split)].size(); }
  std::string describe() const override {
    return detail::concat("text: \"", config_.path, "\", ", rows_.size(), " lines (",
                          split_[0].size(), " train, ", split_[1].size(), " valid, ",
                          split_[2].size(), " test), ", classes_, " classes, bytes, length ",
                          config_.length);
  }

 protected:
  int example(Split split, std::uint64_t index, std::vector<int>* tokens) const override {
    const auto& [label, text] = rows_[split_[int(split)][std::size_t(index)]];
    const std::size_t n = std::min<std::size_t>(text.size(), std::size_t(config_.length));
    byte_tokens(reinterpret_cast<const std::uint8_t*>(text.data()), n, tokens[0]);
    return label;
  }
  std::uint64_t seed() const override { return config_.seed; }
  ClassTaskKind kind() const override { return ClassTaskKind::Text; }

 private:
  ClassDataConfig config_;
  std::vector<std::pair<int, std::string>> rows_;
  std::vector<std::size_t> split_[3];
  Index classes_ = 0;
};

class ImageTask : public ExampleTask {
 public:
  explicit ImageTask(const ClassDataConfig& c) : config_(c) {
    const std::string op = "image classification";
    std::uint64_t training = 0;  // records of the five training files
    for (int f = 0; f < 6; ++f) {
      const std::string file = c.path + "/" + image::kCifarFiles[f];
      const std::string bytes = io::read_text_file(
          file, op,
          "data.path must be the folder of CIFAR-10's binary version (cifar-10-batches-bin: "
          "data_batch_1.bin .. data_batch_5.bin and test_batch.bin)");
      const auto record = std::size_t(image::kRecordBytes);
      require<IoError>(!bytes.empty() && bytes.size() % record == 0, op, ": \"", file, "\" holds ",
                       bytes.size(), " bytes, not a whole number of ", record,
                       "-byte records (a label byte and 3 x 1024 colour bytes); data.path must "
                       "hold CIFAR-10's binary version, not its Python or MATLAB one");
      const std::size_t n = bytes.size() / record;
      levels_.reserve(levels_.size() + n * std::size_t(image::kPixels));
      for (std::size_t r = 0; r < n; ++r) {
        const auto* at = reinterpret_cast<const unsigned char*>(bytes.data()) + r * record;
        require<IoError>(at[0] < image::kClasses, op, ": \"", file, "\" record ", r, " has label ",
                         int(at[0]),
                         " but CIFAR-10's are 0..9 (CIFAR-100's binary version has two label "
                         "bytes and is not this task)");
        labels_.push_back(at[0]);
        const unsigned char* red = at + 1;
        for (Index p = 0; p < image::kPixels; ++p)
          levels_.push_back(std::uint8_t(
              image::gray_level(red[p], red[p + image::kPixels], red[p + 2 * image::kPixels])));
      }
      if (f < 5) training += n;
    }
    // LRA: train[:90%], train[90%:], test (at least one record in each).
    const std::uint64_t train = training * 9 / 10;
    require<IoError>(train >= 1 && train < training, op, ": \"", c.path, "\" holds ", training,
                     " training records but needs at least 2 (90% train, 10% valid)");
    begin_[0] = 0;
    begin_[1] = train;
    begin_[2] = training;
    begin_[3] = labels_.size();
  }
  Index vocab() const override { return kByteVocab; }
  Index length() const override { return config_.length; }
  Index classes() const override { return image::kClasses; }
  std::uint64_t examples(Split split) const override {
    return begin_[int(split) + 1] - begin_[int(split)];
  }
  std::string describe() const override {
    return detail::concat("image: CIFAR-10 in grayscale from \"", config_.path, "\", ",
                          examples(Split::Train), " train, ", examples(Split::Valid), " valid, ",
                          examples(Split::Test), " test, 1024 pixels, length ", config_.length);
  }

 protected:
  int example(Split split, std::uint64_t index, std::vector<int>* tokens) const override {
    const std::size_t record = std::size_t(begin_[int(split)] + index);
    byte_tokens(levels_.data() + record * std::size_t(image::kPixels), std::size_t(image::kPixels),
                tokens[0]);
    return labels_[record];
  }
  std::uint64_t seed() const override { return config_.seed; }
  ClassTaskKind kind() const override { return ClassTaskKind::Image; }

 private:
  ClassDataConfig config_;
  std::vector<std::uint8_t> levels_;  // [record, pixel]: train files, then the test file
  std::vector<int> labels_;
  std::uint64_t begin_[4] = {};  // first record of train, valid, test, and the end
};

class PathfinderTask : public ExampleTask {
 public:
  explicit PathfinderTask(const ClassDataConfig& c) : config_(c) {
    const std::string metadata = c.path + "/metadata";
    std::error_code error;
    require<IoError>(std::filesystem::is_directory(metadata, error), kOp, ": \"", metadata,
                     "\" is not a folder; data.path must be one difficulty of LRA's Pathfinder "
                     "release (e.g. lra_release/pathfinder32/curv_contour_length_14), which "
                     "holds metadata/ and the images");
    // metadata/<n>.npy in the order of n (other names after them, by name).
    std::vector<std::pair<std::uint64_t, std::string>> files;
    std::filesystem::directory_iterator it(metadata, error), end;
    for (; !error && it != end; it.increment(error)) {
      if (it->path().extension() != ".npy") continue;
      const std::string stem = it->path().stem().string();
      const bool numbered = stem.size() <= 18 && io::text::all_digits(stem);
      files.emplace_back(numbered ? std::stoull(stem) : ~std::uint64_t(0), it->path().string());
    }
    require<IoError>(!error, kOp, ": cannot list \"", metadata, "\" (", error.message(), ")");
    std::sort(files.begin(), files.end());
    require<IoError>(!files.empty(), kOp, ": \"", metadata,
                     "\" holds no .npy metadata files (LRA's release: metadata/0.npy, ...)");
    for (const auto& file : files) read_metadata(file.second);
    // LRA: [:80%], [80%:90%], [90%:] of every line, then the empty images
    // filtered out of each part.
    const std::size_t n = lines_.size(), bounds[4] = {0, n * 8 / 10, n * 9 / 10, n};
    for (int s = 0; s < 3; ++s) {
      for (std::size_t i = bounds[s]; i < bounds[s + 1]; ++i)
        if (lines_[i].second >= 0) split_[s].push_back(i);
      require<IoError>(!split_[s].empty(), kOp, ": \"", c.path, "\" lists ", n, " images (",
                       skipped_, " of them empty), which leaves the ", to_string(Split(s)),
                       " split (lines ", bounds[s] + 1, " to ", bounds[s + 1],
                       " of 80% / 10% / 10%) without a non-empty image");
    }
    const std::string& first_path = lines_[split_[0][0]].first;
    const auto first = io::read_gray_png(first_path, kOp);
    side_ = first.width;
    require<IoError>(first.width == first.height, kOp, ": \"", first_path, "\" is ", first.width,
                     " x ", first.height, " pixels; Pathfinder's images are square");
    require<ConfigError>(side_ * side_ <= c.length, "data.length is ", c.length,
                         " but the Pathfinder images of \"", c.path, "\" are ", side_, " x ", side_,
                         " = ", side_ * side_, " pixels; set data.length to ", side_ * side_);
  }
  Index vocab() const override { return kByteVocab; }
  Index length() const override { return config_.length; }
  Index classes() const override { return 2; }
  std::uint64_t examples(Split split) const override { return split_[int(split)].size(); }
  std::string describe() const override {
    return detail::concat("pathfinder: \"", config_.path, "\", ", examples(Split::Train),
                          " train, ", examples(Split::Valid), " valid, ", examples(Split::Test),
                          " test (", skipped_, " empty images left out), ", side_, " x ", side_,
                          " pixels, length ", config_.length);
  }

 protected:
  int example(Split split, std::uint64_t index, std::vector<int>* tokens) const override {
    const auto& [path, label] = lines_[split_[int(split)][std::size_t(index)]];
    const auto decoded = io::read_gray_png(path, kOp, side_ * side_);
    require<IoError>(decoded.width == side_ && decoded.height == side_, kOp, ": \"", path, "\" is ",
                     decoded.width, " x ", decoded.height, " pixels but the task's first image is ",
                     side_, " x ", side_, "; every image must have its size");
    byte_tokens(decoded.levels.data(), decoded.levels.size(), tokens[0]);
    return label;
  }
  std::uint64_t seed() const override { return config_.seed; }
  ClassTaskKind kind() const override { return ClassTaskKind::Pathfinder; }

 private:
  static constexpr const char* kOp = "pathfinder";

  // One metadata file: "<folder> <file> <n> <label> ..." a line, appended to
  // lines_ (label -1 for an empty image).
  void read_metadata(const std::string& file) {
    const std::string text = io::read_text_file(file, kOp, "check data.path");
    std::istringstream in(text);
    std::string line;
    for (Index number = 1; std::getline(in, line); ++number) {
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (line.empty()) continue;
      std::istringstream words(line);
      std::vector<std::string> fields;
      for (std::string word; words >> word;) fields.push_back(word);
      const std::string where = detail::concat(kOp, ": \"", file, "\" line ", number);
      require<IoError>(fields.size() >= 4 && (fields[3] == "0" || fields[3] == "1"), where, " is '",
                       line,
                       "' but each line must be '<folder> <file> <n> <label> ...' with the label "
                       "0 or 1 (LRA's Pathfinder metadata)");
      const std::string image = config_.path + "/" + fields[0] + "/" + fields[1];
      std::error_code error;
      const auto size = std::filesystem::file_size(image, error);
      require<IoError>(!error, where, " names \"", image, "\", which cannot be read (",
                       error.message(), ")");
      skipped_ += size == 0;  // LRA filters the release's empty images out
      lines_.emplace_back(image, size == 0 ? -1 : fields[3] == "1" ? 1 : 0);
    }
  }

  ClassDataConfig config_;
  std::vector<std::pair<std::string, int>> lines_;  // (path, label) a line; -1: empty image
  std::vector<std::size_t> split_[3];               // each split's lines with an image
  std::uint64_t skipped_ = 0;
  Index side_ = 0;
};

// LRA's Retrieval files, indexed: each pair's label and where its two texts
// start in its file, their bytes cut to the length.
struct RetrievalIndex {
  struct Pair {
    std::uint64_t offset[2];
    std::uint32_t size[2];
    int label;
    Index line;
  };
  std::vector<Pair> pairs[3];
  Index classes = 0;
};

class RetrievalTask : public ExampleTask {
 public:
  explicit RetrievalTask(const ClassDataConfig& c) : config_(c), index_(cached_index(c)) {}
  Index vocab() const override { return kByteVocab; }
  Index length() const override { return config_.length; }
  Index classes() const override { return index_->classes; }
  Index documents() const override { return 2; }
  std::uint64_t examples(Split split) const override { return index_->pairs[int(split)].size(); }
  std::string describe() const override {
    return detail::concat("retrieval: \"", config_.path, "\" (.train/.eval/.test.tsv), ",
                          examples(Split::Train), " train, ", examples(Split::Valid), " valid, ",
                          examples(Split::Test), " test pairs, ", classes(),
                          " classes, bytes, two documents of length ", config_.length);
  }

 protected:
  int example(Split split, std::uint64_t index, std::vector<int>* tokens) const override {
    const auto& pair = index_->pairs[int(split)][std::size_t(index)];
    const std::string path = file(config_.path, split);
    std::ifstream in(path, std::ios::binary);
    std::string text;
    for (int k = 0; k < 2; ++k) {
      text.resize(pair.size[k]);
      in.seekg(std::streamoff(pair.offset[k]));
      in.read(&text[0], std::streamsize(text.size()));
      require<IoError>(bool(in), kOp, ": \"", path, "\" line ", pair.line,
                       " cannot be read again (the file changed or went away after the task "
                       "indexed it); restart the run on an unchanged copy");
      byte_tokens(reinterpret_cast<const std::uint8_t*>(text.data()), text.size(), tokens[k]);
    }
    return pair.label;
  }
  std::uint64_t seed() const override { return config_.seed; }
  ClassTaskKind kind() const override { return ClassTaskKind::Retrieval; }

 private:
  static constexpr const char* kOp = "retrieval";

  static std::string file(const std::string& prefix, Split split) {
    const char* suffix[3] = {".train.tsv", ".eval.tsv", ".test.tsv"};  // LRA's names
    return prefix + suffix[int(split)];
  }

  // The index of the files, kept for the next task of the same files
  // (checking a run's data and then training it read them once): keyed by the
  // prefix, the length and each file's size and modification time.
  static std::shared_ptr<const RetrievalIndex> cached_index(const ClassDataConfig& c) {
    static std::mutex mutex;
    static std::string last_key;
    static std::shared_ptr<const RetrievalIndex> last;
    std::string key = detail::concat(c.path, '\n', c.length);
    for (int s = 0; s < 3; ++s) {
      std::error_code size_error, time_error;
      const auto size = std::filesystem::file_size(file(c.path, Split(s)), size_error);
      const auto time = std::filesystem::last_write_time(file(c.path, Split(s)), time_error);
      if (size_error || time_error) return build_index(c);  // index_file names the problem
      key += detail::concat('\n', size, ' ', time.time_since_epoch().count());
    }
    std::lock_guard<std::mutex> lock(mutex);
    if (last && key == last_key) return last;
    last = build_index(c);
    last_key = key;
    return last;
  }

  static std::shared_ptr<const RetrievalIndex> build_index(const ClassDataConfig& c) {
    auto index = std::make_shared<RetrievalIndex>();
    for (int s = 0; s < 3; ++s) index_file(c, Split(s), *index);
    require<IoError>(index->classes >= 2, kOp, ": every pair of \"", c.path,
                     ".*.tsv\" has label 0; classification needs at least 2 classes (check "
                     "that data.path names LRA's Retrieval files, e.g. .../new_aan_pairs)");
    return index;
  }

  // The label column: a whole number below 10^7, as LRA's float32 column
  // reads it ("1", "1.0"); -1 for anything else.
  static int whole_label(const std::string& text) {
    const auto dot = text.find('.');
    const std::string whole = text.substr(0, dot);
    const bool zeros =
        dot == std::string::npos || text.find_first_not_of('0', dot + 1) == std::string::npos;
    if (whole.empty() || whole.size() > 7 || !io::text::all_digits(whole) || !zeros) return -1;
    return std::stoi(whole);
  }

  // Indexes one split's file: each line's label and the place of its texts
  // (blank lines are skipped).
  static void index_file(const ClassDataConfig& c, Split split, RetrievalIndex& index) {
    const std::string path = file(c.path, split);
    io::require_regular_file(path, kOp,
                             "data.path must be the prefix of LRA's Retrieval files (e.g. "
                             "lra_release/tsv_data/new_aan_pairs, which names "
                             "new_aan_pairs.train.tsv, .eval.tsv and .test.tsv)");
    std::ifstream in(path, std::ios::binary);
    require<IoError>(in.is_open(), kOp, ": cannot open \"", path, "\"");
    std::string line;
    std::uint64_t start = 0;
    auto& pairs = index.pairs[int(split)];
    for (Index number = 1; std::getline(in, line); ++number) {
      const std::uint64_t at = start;
      start += line.size() + 1;
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (line.empty()) continue;
      const std::string where = detail::concat(kOp, ": \"", path, "\" line ", number);
      std::vector<std::size_t> tabs;
      for (std::size_t i = 0; i < line.size(); ++i)
        if (line[i] == '\t') tabs.push_back(i);
      require<IoError>(tabs.size() == 4, where, " has ", tabs.size() + 1,
                       " tab-separated fields but each line must be <label> TAB <id1> TAB <id2> "
                       "TAB <text1> TAB <text2> (LRA's Retrieval files)");
      const std::string label_text = line.substr(0, tabs[0]);
      const int label = whole_label(label_text);
      require<IoError>(label >= 0, where, ": the label '", label_text,
                       "' is not a whole number below 10^7 (LRA's labels are 0 and 1, or 0.0 and "
                       "1.0)");
      RetrievalIndex::Pair pair{{0, 0}, {0, 0}, label, number};
      for (int k = 0; k < 2; ++k) {  // text k + 1: after tab 2 + k, to the next tab or the end
        const std::size_t first = tabs[std::size_t(2 + k)] + 1;
        const std::size_t bytes = (k == 0 ? tabs[3] : line.size()) - first;
        require<IoError>(bytes > 0, where, ": text", k + 1,
                         " is empty; every document needs at least one byte");
        pair.offset[k] = at + first;
        pair.size[k] = std::uint32_t(std::min<std::size_t>(bytes, std::size_t(c.length)));
      }
      pairs.push_back(pair);
      index.classes = std::max<Index>(index.classes, label + 1);
    }
    require<IoError>(!pairs.empty(), kOp, ": \"", path, "\" holds no pairs; the ", to_string(split),
                     " split needs at least one");
  }

  ClassDataConfig config_;
  std::shared_ptr<const RetrievalIndex> index_;
};

}  // namespace

int image::gray_level(unsigned char red, unsigned char green, unsigned char blue) {
  // trunc((0.2989 R + 0.5870 G + 0.1140 B) / 255 * 255.5), exactly:
  // (2989 R + 5870 G + 1140 B) * 511 / (10000 * 255 * 2).
  const std::int64_t weighted =
      2989 * std::int64_t(red) + 5870 * std::int64_t(green) + 1140 * std::int64_t(blue);
  return int(weighted * 511 / 5100000);
}

ClassTaskKind parse_class_task_kind(const std::string& name) {
  if (name == "listops") return ClassTaskKind::ListOps;
  if (name == "text") return ClassTaskKind::Text;
  if (name == "matching_ends") return ClassTaskKind::MatchingEnds;
  if (name == "image") return ClassTaskKind::Image;
  if (name == "pathfinder") return ClassTaskKind::Pathfinder;
  if (name == "retrieval") return ClassTaskKind::Retrieval;
  throw ConfigError(detail::concat("data.task: '", name,
                                   "' is not a classification task (listops, text, "
                                   "matching_ends, image, pathfinder, retrieval)"));
}

const char* to_string(ClassTaskKind kind) {
  switch (kind) {
    case ClassTaskKind::ListOps:
      return "listops";
    case ClassTaskKind::Text:
      return "text";
    case ClassTaskKind::Image:
      return "image";
    case ClassTaskKind::Pathfinder:
      return "pathfinder";
    case ClassTaskKind::Retrieval:
      return "retrieval";
    default:
      return "matching_ends";
  }
}

void ClassDataConfig::validate() const {
  require<ConfigError>(length >= 2, "data.length is ", length,
                       "; a classified sequence needs at "
                       "least 2 positions");
  if (task == ClassTaskKind::ListOps) {
    listops.validate();
    require<ConfigError>(listops.max_length - 1 <= length, "data.length is ", length,
                         " but ListOps trees reach ", listops.max_length - 1,
                         " tokens (data.listops.max_length - 1); set data.length to at least ",
                         listops.max_length - 1, " or lower data.listops.max_length");
  } else {
    // The generator's settings are read by ListOps alone: set on another task,
    // they would have no effect.
    const decltype(listops) unset{};
    const std::tuple<const char*, Index, Index> generator[] = {
        {"max_depth", listops.max_depth, unset.max_depth},
        {"max_args", listops.max_args, unset.max_args},
        {"min_length", listops.min_length, unset.min_length},
        {"max_length", listops.max_length, unset.max_length}};
    for (const auto& [key, value, fallback] : generator)
      require<ConfigError>(value == fallback, "data.listops.", key, " is ", value,
                           " but data.task ", to_string(task),
                           " does not read it (only data.task = \"listops\" does): leave it out");
  }
  if (task == ClassTaskKind::MatchingEnds)
    require<ConfigError>(vocab >= 3, "data.vocab is ", vocab,
                         "; matching_ends needs at least 2 symbols (vocab >= 3)");
  // The tasks that read data.path.
  const char* reads = task == ClassTaskKind::Text ? "label<TAB>text lines from it"
                      : task == ClassTaskKind::Image
                          ? "CIFAR-10's binary version from that folder (cifar-10-batches-bin)"
                      : task == ClassTaskKind::Pathfinder
                          ? "one difficulty of LRA's Pathfinder release from that folder "
                            "(metadata/ and the images)"
                      : task == ClassTaskKind::Retrieval
                          ? "LRA's Retrieval pairs from <path>.train.tsv, <path>.eval.tsv and "
                            "<path>.test.tsv"
                          : nullptr;
  require<ConfigError>(!reads || !path.empty(), "data.path is empty; the ", to_string(task),
                       " task reads ", reads ? reads : "");
  if (task == ClassTaskKind::Image)
    require<ConfigError>(length >= image::kPixels, "data.length is ", length,
                         " but the image task's rows are ", image::kPixels,
                         " pixels (32 x 32); set data.length to ", image::kPixels,
                         " (a longer length pads)");
  // The tasks whose splits come from their files take no example counts.
  const char* from_files = task == ClassTaskKind::Text ? "its file (90% / 5% / 5%)"
                           : task == ClassTaskKind::Image
                               ? "its files (90% / 10% of the training records, and the test file)"
                           : task == ClassTaskKind::Pathfinder ? "its metadata (80% / 10% / 10%)"
                           : task == ClassTaskKind::Retrieval
                               ? "its three files (.train.tsv, .eval.tsv, .test.tsv)"
                               : nullptr;
  for (int s = 0; s < 3; ++s)
    require<ConfigError>(!from_files || examples[s] == 0, "data.examples: the ", to_string(task),
                         " task's splits come from ", from_files ? from_files : "",
                         "; leave the example counts out");
}

std::uint64_t ClassTask::batches_in_split(Split split, Index batch_size) const {
  require<ConfigError>(batch_size >= 1, "batches_in_split: batch_size is ", batch_size,
                       "; it must be at least 1");
  return (examples(split) + std::uint64_t(batch_size) - 1) / std::uint64_t(batch_size);
}

std::unique_ptr<ClassTask> make_class_task(const ClassDataConfig& config) {
  config.validate();
  switch (config.task) {
    case ClassTaskKind::ListOps:
      return std::make_unique<ListOpsTask>(config);
    case ClassTaskKind::Text:
      return std::make_unique<TextTask>(config);
    case ClassTaskKind::Image:
      return std::make_unique<ImageTask>(config);
    case ClassTaskKind::Pathfinder:
      return std::make_unique<PathfinderTask>(config);
    case ClassTaskKind::Retrieval:
      return std::make_unique<RetrievalTask>(config);
    default:
      return std::make_unique<MatchingEndsTask>(config);
  }
}

}  // namespace reformer::data
