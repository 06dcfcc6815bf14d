// Sequence classification data for an encoder with a pooled head (issue 48): Long
// Range Arena's tasks and a synthetic one.
//
// A batch holds, per row, `length` token ids (0 is padding), their mask (1: a
// token) and a label in [0, classes), or -1 for a row past the end of an
// evaluation split (counted in no loss and no accuracy). As for the other
// tasks (data/tasks.hpp), a batch is a pure function of (seed, split, batch
// index, batch size):
//   - train: row b of batch i is an example drawn uniformly from the split by
//     its own counter-based stream, so it does not depend on the batch size;
//   - valid and test: batch i holds examples [i * batch_size, (i + 1) *
//     batch_size) in order, so batches 0 .. ceil(examples / batch_size) - 1
//     cover the split once (rows past its end have label -1).
//
//   listops        ListOps as LRA makes it (data/listops.hpp): ids 0..15, 10
//                  classes, LRA's 96,000 / 2,000 / 2,000 examples by default;
//                  every tree must fit in `length` (max_length - 1 <= length).
//   text           `label<TAB>text` lines of a file (for example IMDb, LRA's
//                  byte-level text task): ids are bytes + 1 (vocabulary 257),
//                  a text is cut to `length` bytes or padded; labels are
//                  integers 0..classes - 1 (classes: the largest label + 1).
//                  The lines are shuffled with a fixed seed (the same split for
//                  every seed) and split 90% / 5% / 5%.
//   matching_ends  `length` symbols uniform in [1, vocab), except that the last
//                  equals the first with probability 1/2 (label 1) and differs
//                  from it otherwise (label 0): a model must relate the first
//                  and the last position, so attention whose window cannot
//                  reach across the sequence stays at chance. 1,000,000 / 2,000
//                  / 2,000 examples.
#pragma once

#include "reformer/core/types.hpp"
#include "reformer/data/listops.hpp"
#include "reformer/data/tasks.hpp"

#include <cstdint>
#include <memory>
#include <string>

namespace reformer::data {

enum class ClassTaskKind { ListOps, Text, MatchingEnds };
// "listops", "text", "matching_ends"; ConfigError naming the value otherwise.
ClassTaskKind parse_class_task_kind(const std::string& name);
const char* to_string(ClassTaskKind kind);

struct ClassDataConfig {
  ClassTaskKind task = ClassTaskKind::ListOps;
  Index length = 2000;       // positions of a row
  std::uint64_t seed = 1;    // the batches' randomness (and ListOps' trees)
  ListOpsOptions listops{};  // listops: the recipe (its seed is `seed`)
  // listops and matching_ends: examples of train, valid and test (0: the
  // task's default).
  std::uint64_t examples[3] = {0, 0, 0};
  Index vocab = 16;    // matching_ends: ids in [0, vocab), symbols 1..vocab-1
  std::string path{};  // text: the label<TAB>text file
  // ConfigError naming the first bad field.
  void validate() const;
};

struct ClassBatch {
  HostTokens tokens, valid;              // [batch, length]
  Kokkos::View<int*, HostSpace> labels;  // [batch]; -1: not an example
  Index batch_size() const { return Index(tokens.extent(0)); }
};

class ClassTask {
 public:
  virtual ~ClassTask() = default;
  // `batch_size` rows of the split (ConfigError unless batch_size >= 1).
  virtual ClassBatch batch(Split split, std::uint64_t batch_index, Index batch_size) const = 0;
  virtual Index vocab() const = 0;
  virtual Index length() const = 0;
  virtual Index classes() const = 0;
  virtual std::uint64_t examples(Split split) const = 0;
  virtual std::string describe() const = 0;
  // Batches of `batch_size` that cover an evaluation split once.
  std::uint64_t batches_in_split(Split split, Index batch_size) const;
};

// The task of a config (validate() is called here). The text task reads its
// file now: IoError naming the path and the line for a missing or empty file, a
// line without a tab, or a label that is not a non-negative integer.
std::unique_ptr<ClassTask> make_class_task(const ClassDataConfig& config);

}  // namespace reformer::data
