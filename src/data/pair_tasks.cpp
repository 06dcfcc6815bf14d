// Source/target pair tasks: copy, reverse and a parallel text file.
#include "data/task_detail.hpp"
#include "reformer/core/error.hpp"
#include "reformer/data/pairs.hpp"
#include "reformer/io/files.hpp"

#include <algorithm>
#include <cctype>
#include <map>
#include <numeric>
#include <sstream>

namespace reformer::data {
namespace {

using internal::uniform_below;
constexpr const char* kOp = "PairDataConfig";
// Stream of the parallel split's shuffle: a constant, so every data.seed splits
// a file the same way.
constexpr std::uint64_t kSplitSeed = 0x73706c6974;  // "split"

RandomKey pair_row_key(std::uint64_t seed, PairTaskKind task, Split split,
                       std::uint64_t batch_index, Index row) {
  constexpr std::uint64_t kPairStream = 0x7061697273;  // "pairs"
  return {seed, stream_id(stream_id(kPairStream, std::uint64_t(task), std::uint64_t(split)),
                          batch_index, std::uint64_t(row))};
}

PairBatch allocate(Index batch_size, Index length) {
  require<ConfigError>(batch_size >= 1, "PairTask::batch: batch_size is ", batch_size,
                       " but must be >= 1");
  auto make = [&](const char* label) { return HostTokens(std::string(label), batch_size, length); };
  return {make("source"), make("source_valid"), make("target_in"), make("target_out"),
          make("target_valid")};
}

// Row b of the batch from the symbols of a source and a target (each shorter
// than the length: the end symbol takes one position).
void fill_row(const PairBatch& out, Index b, const std::vector<int>& source,
              const std::vector<int>& target) {
  const Index length = out.source.extent(1);
  for (Index t = 0; t < length; ++t) {
    const Index ns = Index(source.size()), nt = Index(target.size());
    out.source(b, t) = t < ns ? source[t] : t == ns ? PairTask::kEnd : PairTask::kPad;
    out.source_valid(b, t) = t <= ns;
    out.target_in(b, t) = t == 0 ? PairTask::kStart : t <= nt ? target[t - 1] : PairTask::kPad;
    out.target_out(b, t) = t < nt ? target[t] : t == nt ? PairTask::kEnd : PairTask::kPad;
    out.target_valid(b, t) = t <= nt;
  }
}

// Ids of the synthetic tasks' texts: integers that are symbols.
std::vector<int> parse_ids(const std::string& text, Index vocab) {
  const auto ids = parse_token_ids(text, "pairs: the source");
  for (const int id : ids)
    require<ConfigError>(id >= PairTask::kFirstSymbol && id < vocab, "pairs: token ", id,
                         " is not a symbol; symbols are in [", PairTask::kFirstSymbol, ", ", vocab,
                         ")");
  return ids;
}

class SyntheticPairs final : public PairTask {
 public:
  explicit SyntheticPairs(const PairDataConfig& config) : config_(config) {
    if (config_.max_symbols == 0) config_.max_symbols = config_.length - 1;
  }
  PairBatch batch(Split split, std::uint64_t batch_index, Index batch_size) const override {
    PairBatch out = allocate(batch_size, config_.length);
    const std::uint64_t span = std::uint64_t(config_.max_symbols - config_.min_symbols + 1);
    const std::uint64_t symbols = std::uint64_t(config_.vocab - kFirstSymbol);
    for (Index b = 0; b < batch_size; ++b) {
      const RandomKey key = pair_row_key(config_.seed, config_.task, split, batch_index, b);
      // Counter 0 draws |w|, counters 1..n the symbols.
      const Index n = config_.min_symbols + Index(uniform_below(random_bits(key, 0), span));
      std::vector<int> w(static_cast<std::size_t>(n));
      for (Index j = 0; j < n; ++j)
        w[std::size_t(j)] = kFirstSymbol + int(uniform_below(random_bits(key, 1 + j), symbols));
      std::vector<int> target = w;
      if (config_.task == PairTaskKind::Reverse) std::reverse(target.begin(), target.end());
      fill_row(out, b, w, target);
    }
    return out;
  }
  Index vocab() const override { return config_.vocab; }
  Index length() const override { return config_.length; }
  std::string describe() const override {
    return detail::concat(to_string(config_.task), ": |w| in [", config_.min_symbols, ", ",
                          config_.max_symbols, "], symbols 3..", config_.vocab - 1, ", length ",
                          config_.length, " (pad 0, start 1, end 2), seed ", config_.seed);
  }
  std::vector<int> encode(const std::string& text) const override {
    return parse_ids(text, config_.vocab);
  }
  std::string decode(const std::vector<int>& ids) const override {
    std::string text;
    for (int id : ids) text += (text.empty() ? "" : " ") + std::to_string(id);
    return text;
  }

 private:
  PairDataConfig config_;
};

// UTF-8 code points of a line; IoError naming the line when it is not UTF-8.
std::vector<std::uint32_t> code_points(const std::string& text, const std::string& where) {
  std::vector<std::uint32_t> out;
  for (std::size_t i = 0; i < text.size();) {
    const unsigned char c = (unsigned char)text[i];
    const int extra = c < 0x80         ? 0
                      : (c >> 5) == 6  ? 1
                      : (c >> 4) == 14 ? 2
                      : (c >> 3) == 30 ? 3
                                       : -1;
    require<IoError>(extra >= 0, where, ": byte ", i + 1,
                     " is not valid UTF-8; use data.units = \"bytes\"");
    std::uint32_t cp = extra == 0 ? c : c & (0x3f >> extra);
    for (int k = 1; k <= extra; ++k) {
      require<IoError>(
          i + std::size_t(k) < text.size() && ((unsigned char)text[i + std::size_t(k)] >> 6) == 2,
          where, ": byte ", i + 1, " is not valid UTF-8; use data.units = \"bytes\"");
      cp = (cp << 6) | ((unsigned char)text[i + std::size_t(k)] & 0x3f);
    }
    out.push_back(cp);
    i += std::size_t(extra) + 1;
  }
  return out;
}

std::string utf8(std::uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += char(cp);
  } else if (cp < 0x800) {
    s += char(0xc0 | (cp >> 6));
    s += char(0x80 | (cp & 0x3f));
  } else if (cp < 0x10000) {
    s += char(0xe0 | (cp >> 12));
    s += char(0x80 | ((cp >> 6) & 0x3f));
    s += char(0x80 | (cp & 0x3f));
  } else {
    s += char(0xf0 | (cp >> 18));
    s += char(0x80 | ((cp >> 12) & 0x3f));
    s += char(0x80 | ((cp >> 6) & 0x3f));
    s += char(0x80 | (cp & 0x3f));
  }
  return s;
}

class ParallelPairs final : public PairTask {
 public:
  explicit ParallelPairs(const PairDataConfig& config) : config_(config) {
    const std::string op = "parallel pairs";
    const std::string text = io::read_text_file(config.path, op, "check data.path");
    require<IoError>(!text.empty(), op, ": \"", config.path,
                     "\" is empty; data.path must hold one tab-separated pair per line");
    bytes_ = config.units == "bytes";
    // Lines as units (bytes or code points).
    std::vector<std::pair<std::vector<std::uint32_t>, std::vector<std::uint32_t>>> lines;
    std::istringstream in(text);
    std::string line;
    for (Index number = 1; std::getline(in, line); ++number) {
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (line.empty()) continue;
      const std::string where = detail::concat(op, ": \"", config.path, "\" line ", number);
      const auto tab = line.find('\t');
      require<IoError>(tab != std::string::npos, where,
                       " has no tab; every line must be <source> TAB <target>");
      require<IoError>(line.find('\t', tab + 1) == std::string::npos, where,
                       " has more than one tab; every line must be <source> TAB <target>, with "
                       "no tab inside either side");
      const std::string sides[2] = {line.substr(0, tab), line.substr(tab + 1)};
      std::vector<std::uint32_t> units[2];
      for (int s = 0; s < 2; ++s) {
        if (bytes_)
          for (unsigned char c : sides[s]) units[s].push_back(c);
        else
          units[s] = code_points(sides[s], where);
        require<IoError>(!units[s].empty() && Index(units[s].size()) < config.length, where,
                         ": the ", s == 0 ? "source" : "target", " has ", units[s].size(), " ",
                         config.units,
                         " but must have between 1 and data.length - 1 = ", config.length - 1,
                         " (one position is the end symbol)");
      }
      lines.emplace_back(units[0], units[1]);
    }
    require<IoError>(lines.size() >= 3, op, ": \"", config.path, "\" holds ", lines.size(),
                     " pairs but needs at least 3 (one for each of train, valid and test)");
    // The vocabulary: bytes + 3, or the file's characters in code-point order.
    if (!bytes_) {
      for (const auto& [s, t] : lines) {
        for (std::uint32_t cp : s) ids_[cp] = 0;
        for (std::uint32_t cp : t) ids_[cp] = 0;
      }
      int next = kFirstSymbol;
      for (auto& [cp, id] : ids_) {
        id = next++;
        chars_.push_back(cp);
      }
    }
    vocab_ = bytes_ ? 256 + kFirstSymbol : Index(ids_.size()) + kFirstSymbol;
    for (const auto& [s, t] : lines) pairs_.emplace_back(to_ids(s), to_ids(t));
    // A fixed shuffle, then 90% / 5% / 5% (at least one pair each).
    auto splits = internal::fixed_split(pairs_.size(), kSplitSeed);
    for (int s = 0; s < 3; ++s) split_[s] = std::move(splits[std::size_t(s)]);
  }

  PairBatch batch(Split split, std::uint64_t batch_index, Index batch_size) const override {
    PairBatch out = allocate(batch_size, config_.length);
    const auto& rows = split_[int(split)];
    for (Index b = 0; b < batch_size; ++b) {
      const RandomKey key =
          pair_row_key(config_.seed, PairTaskKind::Parallel, split, batch_index, b);
      const auto& pair = pairs_[rows[uniform_below(random_bits(key, 0), rows.size())]];
      fill_row(out, b, pair.first, pair.second);
    }
    return out;
  }
  Index vocab() const override { return vocab_; }
  Index length() const override { return config_.length; }
  std::string describe() const override {
    return detail::concat("parallel: \"", config_.path, "\", ", pairs_.size(), " pairs (",
                          split_[0].size(), " train, ", split_[1].size(), " valid, ",
                          split_[2].size(), " test), ", config_.units, ", vocabulary ", vocab_,
                          ", length ", config_.length);
  }
  std::vector<int> encode(const std::string& text) const override {
    std::vector<std::uint32_t> units;
    if (bytes_)
      for (unsigned char c : text) units.push_back(c);
    else
      units = code_points(text, "parallel pairs: the text");
    for (std::uint32_t u : units)
      require<ConfigError>(bytes_ || ids_.count(u), "parallel pairs: the character '", utf8(u),
                           "' is not in the vocabulary of \"", config_.path, "\"");
    return to_ids(units);
  }
  std::string decode(const std::vector<int>& ids) const override {
    std::string text;
    for (int id : ids) {
      if (id < kFirstSymbol || id >= vocab_) continue;
      text += bytes_ ? std::string(1, char(id - kFirstSymbol))
                     : utf8(chars_[std::size_t(id - kFirstSymbol)]);
    }
    return text;
  }

 private:
  std::vector<int> to_ids(const std::vector<std::uint32_t>& units) const {
    std::vector<int> out;
    for (std::uint32_t u : units) out.push_back(bytes_ ? int(u) + kFirstSymbol : ids_.at(u));
    return out;
  }
  PairDataConfig config_;
  bool bytes_ = true;
  std::map<std::uint32_t, int> ids_;  // chars: code point -> id
  std::vector<std::uint32_t> chars_;  // chars: id - 3 -> code point
  Index vocab_ = 0;
  std::vector<std::pair<std::vector<int>, std::vector<int>>> pairs_;
  std::vector<std::size_t> split_[3];
};

}  // namespace

PairBatch pair_row(const std::vector<int>& source, const std::vector<int>& target, Index length) {
  require<ShapeError>(Index(source.size()) < length && Index(target.size()) < length,
                      "pair_row: a source of ", source.size(), " and a target of ", target.size(),
                      " symbols do not fit ", length, " positions (the end symbol takes one)");
  PairBatch out = allocate(1, length);
  fill_row(out, 0, source, target);
  return out;
}

PairTaskKind parse_pair_task_kind(const std::string& name) {
  if (name == "copy") return PairTaskKind::Copy;
  if (name == "reverse") return PairTaskKind::Reverse;
  if (name == "parallel") return PairTaskKind::Parallel;
  throw ConfigError("data.task is '" + name + "' but a pair task is copy, reverse or parallel");
}

const char* to_string(PairTaskKind kind) {
  switch (kind) {
    case PairTaskKind::Copy:
      return "copy";
    case PairTaskKind::Reverse:
      return "reverse";
    case PairTaskKind::Parallel:
      return "parallel";
  }
  return "?";
}

void PairDataConfig::validate() const {
  require<ConfigError>(length >= 2 && length <= (Index(1) << 20), kOp, ": data.length is ", length,
                       " but must be in [2, 2^20] (a symbol and the end symbol at least)");
  if (task == PairTaskKind::Parallel) {
    require<ConfigError>(!path.empty(), kOp, ": data.task is parallel but data.path is empty");
    require<ConfigError>(units == "bytes" || units == "chars", kOp, ": data.units is '", units,
                         "' but must be bytes or chars");
    return;
  }
  require<ConfigError>(vocab > PairTask::kFirstSymbol && vocab <= (Index(1) << 30), kOp,
                       ": data.vocab is ", vocab,
                       " but must be at least 4 (ids 0, 1, 2 are padding, start and end)");
  const Index longest = max_symbols == 0 ? length - 1 : max_symbols;
  require<ConfigError>(min_symbols >= 1 && min_symbols <= longest && longest <= length - 1, kOp,
                       ": data.min_symbols is ", min_symbols, " and data.max_symbols ", max_symbols,
                       " but need 1 <= min_symbols <= max_symbols <= data.length - 1 "
                       "= ",
                       length - 1, " (0: data.length - 1)");
}

std::unique_ptr<PairTask> make_pair_task(const PairDataConfig& config) {
  config.validate();
  if (config.task == PairTaskKind::Parallel) return std::make_unique<ParallelPairs>(config);
  return std::make_unique<SyntheticPairs>(config);
}

}  // namespace reformer::data
