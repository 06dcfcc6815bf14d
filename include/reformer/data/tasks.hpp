// Training data: synthetic sequence tasks and a byte-level text corpus.
//
// Every task follows the language-model convention: a batch holds `batch_size`
// sequences of `length` token ids as inputs, and targets[b][t] is the token
// that follows inputs[b][t] (the token the model must predict at position t).
// Targets equal to ignore_id() are excluded from the loss and the accuracy
// (ops::CrossEntropyOptions::pad_id).
//
// A batch is a pure function of (seed, split, batch index, batch size), drawn
// from the counter-based RNG (core/random.hpp): the same seed gives the same
// batches on every backend and at every thread count, and a resumed run only
// needs the index of its next batch (the checkpoint's data position). Row b of
// a batch does not depend on the batch size, so batch (i, 16) starts with the
// rows of batch (i, 8).
//
// The tasks (s is the sequence, inputs = s, targets = s shifted left by one):
//
//   duplication  The Reformer paper's task: s = 0 w 0 w with |w| = length/2 - 1
//                (length even, >= 4) and the symbols of w uniform in
//                [1, vocab). Only the second copy is scored: the position of
//                the second 0 (t = length/2) predicts w_1, ..., the position
//                of w_{n-1} of the second copy (t = length - 2) predicts w_n.
//                All other targets are 0, the ignore id (0 is never a symbol).
//                length 8: inputs  0 a b c 0 a b c
//                          targets 0 0 0 0 a b c 0
//   copy         Variable-length copy: s = w 1 w 0 ... 0 with |w| uniform in
//                [1, (length - 1) / 2] (length >= 4), symbols uniform in
//                [2, vocab), separator 1 and padding 0 up to `length`. Only
//                the copy is scored: the separator (t = |w|) predicts w_1, ...,
//                the copy's w_{n-1} (t = 2|w| - 1) predicts w_n. All other
//                targets are 0, the ignore id.
//                length 8, w = a b: inputs  a b 1 a b 0 0 0
//                                   targets 0 0 a b 0 0 0 0
//                                   valid   1 1 1 1 1 0 0 0
//   bytes        A file read as bytes (ids 0..255, e.g. enwik8), memory-mapped
//                read-only. The file is split by bytes into train (the first
//                90%), valid (the next 5%) and test (the last 5%), rounded
//                down to whole bytes; for enwik8 (100,000,000 bytes) that is the
//                standard 90M / 5M / 5M split. A sequence is a window of
//                length + 1 bytes starting at a uniform position inside one
//                split (it never crosses into another split): inputs are its
//                first `length` bytes, targets the `length` bytes after the
//                first. Every target is scored (ignore id -1).
#pragma once

#include "reformer/core/types.hpp"
#include "reformer/data/data_config.hpp"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace reformer::data {

enum class Split { Train, Valid, Test };
// "train", "valid", "test".
const char* to_string(Split split);

// Token ids on the host, [batch, length], row-major.
using HostTokens = Kokkos::View<int**, Layout, HostSpace>;

struct Batch {
  HostTokens inputs;   // [batch, length]
  HostTokens targets;  // [batch, length]; ignore_id() where not scored
  // [batch, length]: 1 for a token, 0 for padding behind a sequence that ended
  // early (the copy task); empty when every position is a token.
  HostTokens valid;

  Index batch_size() const { return Index(inputs.extent(0)); }
  Index length() const { return Index(inputs.extent(1)); }
};

// A batch in the default memory space (what the model reads).
struct DeviceBatch {
  View2<int> inputs;
  View2<int> targets;
  View2<int> valid;  // empty when the batch's is
};

// Allocates device views of the batch's shape and copies it there.
DeviceBatch to_device(const Batch& batch);
// Copies into existing device views (no allocation); ShapeError naming both
// shapes unless they equal the batch's.
void copy_to_device(const Batch& batch, const DeviceBatch& device);

class Task {
 public:
  virtual ~Task() = default;

  // `batch_size` sequences of the split (batch_size >= 1, ConfigError otherwise).
  virtual Batch batch(Split split, std::uint64_t batch_index, Index batch_size) const = 0;
  // The target id whose positions the loss ignores; -1 when every target counts.
  virtual int ignore_id() const = 0;
  // Ids are in [0, vocab()).
  virtual Index vocab() const = 0;
  // Tokens per sequence.
  virtual Index length() const = 0;
  // One line for logs: the task, its sizes and its scoring rule.
  virtual std::string describe() const = 0;
  // The line for a reader of segments() (Transformer-XL): the text and its
  // splits, without how batch() draws from it (the bytes task's random
  // windows).
  virtual std::string describe_text() const { return describe(); }

  // Streams of consecutive segments (Transformer-XL's data): the split is cut
  // into `streams` equal parts and stream r reads its part from the start,
  // `length` tokens per segment, targets one token further on. Returns rows
  // [first, first + rows) of segment `segment`, which wraps around after
  // segments_per_stream() segments (every stream at the same segment). A pure
  // function of its arguments, like batch(). Tasks that are not one text
  // (the synthetic ones) throw a ConfigError; the bytes task has them.
  virtual Batch segments(Split split, std::uint64_t segment, Index first, Index rows, Index streams,
                         Index length) const;
  // Whole segments in each stream: (split bytes / streams - 1) / length.
  // IoError when that is 0 (the split too short for so many streams).
  virtual std::uint64_t segments_per_stream(Split split, Index streams, Index length) const;
};

// The task of a validated config (validate() is called here). The bytes task
// maps its file now: IoError naming the path when it is missing, unreadable,
// empty or too short for a window in one of its splits.
std::unique_ptr<Task> make_task(const DataConfig& config);

// Token ids written as integers separated by spaces or commas ("0 5 17"), as
// prompts and sources are given on the command line. ConfigError naming a word
// that is not a token id (digits only, at most 9 of them); `what` names the input
// in the message ("generate: --prompt").
std::vector<int> parse_token_ids(const std::string& text, const std::string& what);

// Byte ranges [begin, end) of the three splits of a corpus of `size` bytes.
struct SplitBounds {
  std::uint64_t begin[3] = {0, 0, 0};
  std::uint64_t end[3] = {0, 0, 0};
  std::uint64_t bytes(Split split) const { return end[int(split)] - begin[int(split)]; }
};
SplitBounds split_bytes(std::uint64_t size);

}  // namespace reformer::data
