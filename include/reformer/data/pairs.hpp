// Source/target pairs for the encoder-decoder Transformer (models/transformer.hpp).
//
// Ids 0, 1 and 2 are padding, start and end in both vocabularies; symbols start
// at 3. A batch holds, per pair,
//   source      w_src end 0 ... 0          source_valid  1 ... 1 0 ... 0
//   target_in   start w_tgt 0 ... 0        target_valid  1 ... 1 0 ... 0
//   target_out  w_tgt end 0 ... 0          (the loss ignores id 0)
// each `length` wide. As for the language-model tasks (data/tasks.hpp), a batch
// is a pure function of (seed, split, batch index, batch size), and row b does
// not depend on the batch size.
//
//   copy      w uniform in symbols 3..vocab-1, |w| uniform in [min_symbols,
//             max_symbols]; the target is w.
//   reverse   the same sources; the target is w reversed.
//   parallel  a text file of pairs, one per line, source and target separated by
//             a tab. Units are bytes (id = byte + 3, vocabulary 259) or the
//             UTF-8 characters of the file (ids 3.. in code-point order, one
//             vocabulary for both sides). The pairs are shuffled with a fixed
//             seed (the same split for every data.seed) and split 90% / 5% / 5%
//             into train, valid and test; a batch row is a pair drawn uniformly
//             from its split.
#pragma once

#include "reformer/data/tasks.hpp"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace reformer::data {

enum class PairTaskKind { Copy, Reverse, Parallel };
// "copy", "reverse", "parallel"; ConfigError naming the value otherwise.
PairTaskKind parse_pair_task_kind(const std::string& name);
const char* to_string(PairTaskKind kind);

struct PairDataConfig {
  PairTaskKind task = PairTaskKind::Copy;
  Index length = 32;            // positions of the source and of the target
  Index min_symbols = 1;        // copy, reverse: shortest w
  Index max_symbols = 0;        // copy, reverse: longest w; 0: length - 1
  Index vocab = 16;             // copy, reverse: ids in [0, vocab), symbols 3..vocab-1
  std::uint64_t seed = 1;       // the batches' randomness
  std::string path{};           // parallel: the tab-separated pairs
  std::string units = "bytes";  // parallel: "bytes" or "chars"
  // ConfigError naming the first bad field.
  void validate() const;
};

struct PairBatch {
  HostTokens source, source_valid, target_in, target_out, target_valid;
  Index batch_size() const { return Index(source.extent(0)); }
};

class PairTask {
 public:
  static constexpr int kPad = 0, kStart = 1, kEnd = 2, kFirstSymbol = 3;
  virtual ~PairTask() = default;
  // `batch_size` pairs of the split (ConfigError unless batch_size >= 1).
  virtual PairBatch batch(Split split, std::uint64_t batch_index, Index batch_size) const = 0;
  virtual Index vocab() const = 0;  // one vocabulary for sources and targets
  virtual Index length() const = 0;
  virtual std::string describe() const = 0;
  // The symbols of a text as ids (parallel: its bytes or characters; the
  // synthetic tasks: integers separated by spaces), and back.
  virtual std::vector<int> encode(const std::string& text) const = 0;
  virtual std::string decode(const std::vector<int>& ids) const = 0;
};

// One pair of the given symbols in the layout above, `length` wide (each side
// shorter than `length`; ShapeError otherwise): what generate feeds the model.
PairBatch pair_row(const std::vector<int>& source, const std::vector<int>& target, Index length);

// The pair config of a run's [data] (task seq2seq_copy, seq2seq_reverse or parallel).
PairDataConfig pair_config(const DataConfig& config);

// The task of a config (validate() is called here). The parallel task reads its
// file now: IoError naming the path and the line for a missing, special or empty
// file, a line without a tab, a side longer than length - 1 symbols, invalid
// UTF-8 (chars), or fewer than 3 pairs (one per split).
std::unique_ptr<PairTask> make_pair_task(const PairDataConfig& config);

}  // namespace reformer::data
