// Sequence classification data for an encoder with a pooled head (issue 48): Long
// Range Arena's tasks and a synthetic one.
//
// A batch holds, per row, `length` token ids (0 is padding), their mask (1: a
// token) and a label in [0, classes), or -1 for a row past the end of an
// evaluation split (counted in no loss and no accuracy). A row of a pair task
// (retrieval: documents() == 2) holds two documents, sequences 2 r and 2 r + 1
// of the tokens. As for the other
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
//   image          LRA's Image task: CIFAR-10 from `path`, the folder of its
//                  binary version (cifar-10-batches-bin: data_batch_1.bin ..
//                  data_batch_5.bin and test_batch.bin, each a run of 3,073-byte
//                  records: a label byte, then the 32 x 32 red, green and blue
//                  planes row by row). Each image in grayscale, one pixel a
//                  token (ids = level + 1, vocabulary 257), rows top to
//                  bottom: 1,024 positions (length >= 1024; more is padding).
//                  10 classes. Splits as LRA takes them: train the first 90%
//                  of the training records, valid the last 10%, test the test
//                  file (LRA's 45,000 / 5,000 / 10,000; tfds orders the training
//                  records by its own key, so LRA's valid is another 10%).
//   pathfinder     LRA's Pathfinder (and Path-X): `path` is one difficulty
//                  of LRA's release (e.g. lra_release/pathfinder32/
//                  curv_contour_length_14, LRA's "hard" one), holding
//                  metadata/<n>.npy (text: one image a line, "<folder>
//                  <file> <n> <label> ..." separated by spaces) and the 8-bit
//                  grayscale PNG images they name. An image of side S is S x S
//                  tokens (ids = level + 1, vocabulary 257), rows top to
//                  bottom (length >= S * S: 1,024 for Pathfinder-32, 16,384
//                  for Path-X at 128). 2 classes (label 1: the two dots are
//                  joined by a path). The metadata files in the order of their
//                  numbers, their lines in order; train the first 80% of the
//                  lines, valid the next 10%, test the last 10% (LRA's split;
//                  tfds orders the images by its own key, so LRA's parts hold
//                  other images), each without its empty (0-byte) images, which
//                  LRA filters out after splitting. The images are decoded as
//                  rows are drawn; each must be S x S.
//   retrieval      LRA's Retrieval (document matching on the ACL Anthology
//                  Network): `path` is the prefix of its three files
//                  (lra_release/tsv_data/new_aan_pairs: <path>.train.tsv,
//                  <path>.eval.tsv and <path>.test.tsv, LRA's train, valid
//                  and test), one pair a line: "<label> TAB <id1> TAB <id2>
//                  TAB <text1> TAB <text2>" (the label a whole number, written
//                  as LRA's float column allows: 1 or 1.0; no quoting). Each
//                  text is its bytes (ids = byte + 1, vocabulary 257), cut to
//                  `length` or padded: a row is two documents of `length`
//                  positions (LRA: 4,000). Classes: the largest label + 1 (2
//                  in LRA's files). The files are indexed once (each text's
//                  offset); rows read their two texts as they are drawn.
#pragma once

#include "reformer/core/types.hpp"
#include "reformer/data/listops.hpp"
#include "reformer/data/tasks.hpp"

#include <cstdint>
#include <memory>
#include <string>

namespace reformer::data {

enum class ClassTaskKind { ListOps, Text, MatchingEnds, Image, Pathfinder, Retrieval };
// "listops", "text", "matching_ends", "image", "pathfinder", "retrieval";
// ConfigError naming the value otherwise.
ClassTaskKind parse_class_task_kind(const std::string& name);
const char* to_string(ClassTaskKind kind);

// The vocabulary of the byte-valued tasks (text, image, pathfinder, retrieval): ids
// 1..256 are a byte or gray level + 1; 0 is padding.
constexpr Index kByteVocab = 257;

namespace image {
constexpr Index kSide = 32;               // CIFAR-10's images are 32 x 32
constexpr Index kPixels = kSide * kSide;  // positions of a row
constexpr Index kClasses = 10;
constexpr Index kRecordBytes = 1 + 3 * kPixels;  // a label byte and three colour planes
// The files of CIFAR-10's binary version: five of training records, then the test file.
inline constexpr const char* kCifarFiles[6] = {"data_batch_1.bin", "data_batch_2.bin",
                                               "data_batch_3.bin", "data_batch_4.bin",
                                               "data_batch_5.bin", "test_batch.bin"};
// The gray level of one pixel as LRA computes it, tf.image.rgb_to_grayscale on
// uint8: y = 0.2989 R + 0.5870 G + 0.1140 B over [0, 1], back to uint8 as
// trunc(y * 255.5). Here in exact integer arithmetic (the same on every
// backend and ISA); TensorFlow's float32 may land one level off, either way,
// where the exact value is within about 1e-5 of a whole level.
int gray_level(unsigned char red, unsigned char green, unsigned char blue);
}  // namespace image

struct ClassDataConfig {
  ClassTaskKind task = ClassTaskKind::ListOps;
  Index length = 2000;       // positions of a row
  std::uint64_t seed = 1;    // the batches' randomness (and ListOps' trees)
  ListOpsOptions listops{};  // listops: the recipe (its seed is `seed`)
  // listops and matching_ends: examples of train, valid and test (0: the
  // task's default).
  std::uint64_t examples[3] = {0, 0, 0};
  Index vocab = 16;  // matching_ends: ids in [0, vocab), symbols 1..vocab-1
  // text: the label<TAB>text file; image: CIFAR-10's binary folder;
  // pathfinder: one difficulty's folder of LRA's release; retrieval: the
  // prefix of the .train.tsv, .eval.tsv and .test.tsv files.
  std::string path{};
  // ConfigError naming the first bad field.
  void validate() const;
};

struct ClassBatch {
  HostTokens tokens, valid;              // [batch x documents, length]
  Kokkos::View<int*, HostSpace> labels;  // [batch]; -1: not an example
  Index batch_size() const { return Index(labels.extent(0)); }
};

class ClassTask {
 public:
  virtual ~ClassTask() = default;
  // `batch_size` rows of the split (ConfigError unless batch_size >= 1), or
  // only rows [first_row, first_row + rows) of them (rows < 0: to the end),
  // which are the same rows as in the whole batch (a process's share).
  virtual ClassBatch batch(Split split, std::uint64_t batch_index, Index batch_size,
                           Index first_row = 0, Index rows = -1) const = 0;
  virtual Index vocab() const = 0;
  virtual Index length() const = 0;
  virtual Index classes() const = 0;
  // Sequences of an example: 1, or 2 for a pair task (retrieval).
  virtual Index documents() const { return 1; }
  virtual std::uint64_t examples(Split split) const = 0;
  virtual std::string describe() const = 0;
  // Batches of `batch_size` that cover an evaluation split once.
  std::uint64_t batches_in_split(Split split, Index batch_size) const;
};

// The task of a config (validate() is called here). The text task reads its
// file now: IoError naming the path and the line for a missing or empty file, a
// line without a tab, or a label that is not a non-negative integer. The image
// task reads its six files now: IoError naming the file for a missing one, a
// size that is not a whole number of records, or a label above 9. The
// pathfinder task reads its metadata now and its first image: IoError naming
// the file and line for a bad line or a missing image, ConfigError when
// `length` is below the images' pixels. The retrieval task indexes its three
// files now: IoError naming the file and line for a missing file, a line
// without five tab-separated fields, a label that is not a whole number, or an
// empty text.
std::unique_ptr<ClassTask> make_class_task(const ClassDataConfig& config);

}  // namespace reformer::data
