// Classification data (data/classification.hpp): ListOps, byte-level text from a
// label<TAB>text file, matching_ends, CIFAR-10 and Pathfinder images, in batches: labels, padding
// and masks, training rows that do not depend on the batch size, evaluation batches that cover a
// split once, and named errors for bad files and configs.
#include "reformer/core/error.hpp"
#include "reformer/data/classification.hpp"
#include "support/checks.hpp"
#include "support/fake_cifar.hpp"
#include "support/fake_pathfinder.hpp"
#include "support/fake_retrieval.hpp"
#include "support/temp_dir.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace reformer {
namespace {

using namespace reformer::data;
using reformer::testing::FakeRetrievalPair;
using reformer::testing::TempDir;
using reformer::testing::write_fake_cifar;
using reformer::testing::write_fake_pathfinder;
using reformer::testing::write_fake_retrieval;

ClassDataConfig short_listops() {
  ClassDataConfig c;
  c.task = ClassTaskKind::ListOps;
  c.length = 64;
  c.seed = 5;
  c.listops.max_depth = 4;
  c.listops.max_args = 5;
  c.listops.min_length = 3;
  c.listops.max_length = 60;
  c.examples[1] = 10;
  return c;
}

std::vector<int> row(const ClassBatch& batch, Index b) {
  std::vector<int> out;
  for (Index t = 0; t < Index(batch.tokens.extent(1)); ++t) out.push_back(batch.tokens(b, t));
  return out;
}

TEST(ClassificationData, ListOpsRowsHoldATreeItsLabelAndPadding) {
  const auto task = make_class_task(short_listops());
  EXPECT_EQ(task->vocab(), 16);
  EXPECT_EQ(task->classes(), 10);
  EXPECT_EQ(task->examples(Split::Train), 96000u);
  const auto batch = task->batch(Split::Train, 3, 8);
  for (Index b = 0; b < 8; ++b) {
    Index used = 0;
    while (used < 64 && batch.tokens(b, used) != 0) ++used;
    ASSERT_GT(used, 3);
    for (Index t = 0; t < 64; ++t) {
      EXPECT_EQ(batch.valid(b, t), t < used ? 1 : 0) << b << " " << t;
      if (t >= used) EXPECT_EQ(batch.tokens(b, t), 0);
    }
    EXPECT_EQ(batch.labels(b), listops_value(row(batch, b))) << listops_text(row(batch, b));
  }
  // Training rows do not depend on the batch size.
  const auto smaller = task->batch(Split::Train, 3, 4);
  for (Index b = 0; b < 4; ++b) EXPECT_EQ(row(smaller, b), row(batch, b));
  EXPECT_NE(row(task->batch(Split::Train, 4, 1), 0), row(batch, 0));
}

TEST(ClassificationData, EvaluationBatchesCoverTheSplitOnce) {
  const auto task = make_class_task(short_listops());
  ASSERT_EQ(task->examples(Split::Valid), 10u);
  ASSERT_EQ(task->batches_in_split(Split::Valid, 4), 3u);
  std::vector<std::vector<int>> seen;
  for (std::uint64_t i = 0; i < 3; ++i) {
    const auto batch = task->batch(Split::Valid, i, 4);
    for (Index b = 0; b < 4; ++b) {
      const std::uint64_t index = i * 4 + std::uint64_t(b);
      if (index >= 10) {
        EXPECT_EQ(batch.labels(b), -1) << "row past the split";
        EXPECT_EQ(batch.valid(b, 0), 0);
        continue;
      }
      ClassDataConfig c = short_listops();
      c.listops.seed = c.seed;
      const auto expected = listops_example(c.listops, Split::Valid, index);
      std::vector<int> tokens = row(batch, b);
      tokens.resize(expected.tokens.size());
      EXPECT_EQ(tokens, expected.tokens) << index;
      EXPECT_EQ(batch.labels(b), expected.label);
      seen.push_back(tokens);
    }
  }
  EXPECT_EQ(seen.size(), 10u);
  EXPECT_EQ(std::set<std::vector<int>>(seen.begin(), seen.end()).size(), 10u);
}

TEST(ClassificationData, MatchingEndsLabelsTellWhetherTheEndsAgree) {
  ClassDataConfig c;
  c.task = ClassTaskKind::MatchingEnds;
  c.length = 32;
  c.vocab = 8;
  const auto task = make_class_task(c);
  EXPECT_EQ(task->classes(), 2);
  int ones = 0;
  const auto batch = task->batch(Split::Train, 0, 2000);
  for (Index b = 0; b < 2000; ++b) {
    const int label = batch.labels(b);
    ASSERT_TRUE(label == 0 || label == 1);
    EXPECT_EQ(label == 1, batch.tokens(b, 0) == batch.tokens(b, 31)) << b;
    for (Index t = 0; t < 32; ++t) {
      ASSERT_GE(batch.tokens(b, t), 1);
      ASSERT_LT(batch.tokens(b, t), 8);
      ASSERT_EQ(batch.valid(b, t), 1);
    }
    ones += label;
  }
  EXPECT_NEAR(ones / 2000.0, 0.5, 0.05);
  // The same seed, the same rows; another seed, others.
  EXPECT_EQ(row(make_class_task(c)->batch(Split::Train, 0, 1), 0), row(batch, 0));
  c.seed = 2;
  EXPECT_NE(row(make_class_task(c)->batch(Split::Train, 0, 1), 0), row(batch, 0));
}

TEST(ClassificationData, TextLinesBecomeBytesCutToTheLength) {
  TempDir dir;
  const std::string path = dir.path() + "/reviews.tsv";
  std::map<std::string, int> labels;
  {
    std::ofstream out(path);
    for (int i = 0; i < 40; ++i) {
      const std::string text = "review " + std::to_string(i) + (i % 3 ? " good" : " a long one");
      out << i % 3 << '\t' << text << "\r\n";
      labels[text] = i % 3;
    }
  }
  ClassDataConfig c;
  c.task = ClassTaskKind::Text;
  c.length = 12;
  c.path = path;
  const auto task = make_class_task(c);
  EXPECT_EQ(task->vocab(), 257);
  EXPECT_EQ(task->classes(), 3);
  EXPECT_EQ(task->examples(Split::Train), 36u);
  EXPECT_EQ(task->examples(Split::Valid), 2u);
  EXPECT_EQ(task->examples(Split::Test), 2u);
  std::set<std::string> held_out;
  for (Split split : {Split::Train, Split::Valid, Split::Test}) {
    const auto batch = task->batch(split, 0, split == Split::Train ? 16 : 2);
    for (Index b = 0; b < batch.batch_size(); ++b) {
      std::string prefix;
      for (Index t = 0; t < 12 && batch.valid(b, t); ++t) prefix += char(batch.tokens(b, t) - 1);
      // The line whose text starts with these 12 bytes (or is all of them).
      int matches = 0;
      for (const auto& [text, label] : labels)
        if (text.substr(0, 12) == prefix) {
          ++matches;
          EXPECT_EQ(batch.labels(b), label) << text;
          EXPECT_EQ(Index(prefix.size()), std::min<Index>(12, Index(text.size())));
        }
      EXPECT_GE(matches, 1) << "'" << prefix << "' is no line's start";
      if (split != Split::Train) held_out.insert(prefix);
    }
  }
  EXPECT_EQ(held_out.size(), 4u) << "valid and test hold 2 different lines each";
}

TEST(ClassificationData, ImagesAreGrayPixelsInRowOrderWithLrasSplits) {
  // The gray level against tf.image.rgb_to_grayscale's formula in double, away
  // from whole levels (where TensorFlow's float32 may round either way).
  EXPECT_EQ(image::gray_level(0, 0, 0), 0);
  EXPECT_EQ(image::gray_level(255, 255, 255), 255);
  EXPECT_EQ(image::gray_level(255, 0, 0), 76);  // 0.2989 * 255.5 = 76.37
  EXPECT_EQ(image::gray_level(0, 0, 255), 29);  // 0.1140 * 255.5 = 29.13
  int compared = 0;
  for (int r = 0; r < 256; r += 5)
    for (int g = 0; g < 256; g += 3)
      for (int b = 0; b < 256; b += 7) {
        const double y = (r / 255.0 * 0.2989 + g / 255.0 * 0.5870 + b / 255.0 * 0.1140) * 255.5;
        if (y - std::floor(y) < 1e-4 || std::ceil(y) - y < 1e-4) continue;
        ASSERT_EQ(image::gray_level((unsigned char)r, (unsigned char)g, (unsigned char)b),
                  int(std::floor(y)))
            << r << " " << g << " " << b;
        ++compared;
      }
  EXPECT_GT(compared, 20000);

  TempDir dir;
  const auto files = write_fake_cifar(dir.path(), {4, 4, 4, 4, 4, 3});  // 20 training records
  ClassDataConfig c;
  c.task = ClassTaskKind::Image;
  c.length = 1030;  // 6 positions of padding
  c.path = dir.path();
  const auto task = make_class_task(c);
  EXPECT_EQ(task->vocab(), 257);
  EXPECT_EQ(task->classes(), 10);
  EXPECT_EQ(task->examples(Split::Train), 18u);  // train[:90%]
  EXPECT_EQ(task->examples(Split::Valid), 2u);   // train[90%:]: file 5's last two
  EXPECT_EQ(task->examples(Split::Test), 3u);
  // Evaluation batches hold the records in order: valid is file 5's records 2
  // and 3, test the test file's 0..2.
  auto expect_record = [&](const ClassBatch& batch, Index b, int f, int r) {
    const auto& bytes = files[std::size_t(f)];
    const std::size_t at = std::size_t(r) * 3073;
    EXPECT_EQ(batch.labels(b), int(bytes[at])) << f << " " << r;
    for (Index p = 0; p < 1030; ++p) {
      if (p >= 1024) {
        EXPECT_EQ(batch.valid(b, p), 0);
        EXPECT_EQ(batch.tokens(b, p), 0);
        continue;
      }
      const std::size_t q = at + 1 + std::size_t(p);
      ASSERT_EQ(batch.tokens(b, p),
                1 + image::gray_level(bytes[q], bytes[q + 1024], bytes[q + 2048]))
          << "file " << f << " record " << r << " pixel " << p;
      ASSERT_EQ(batch.valid(b, p), 1);
    }
  };
  const auto valid = task->batch(Split::Valid, 0, 3);
  expect_record(valid, 0, 4, 2);
  expect_record(valid, 1, 4, 3);
  EXPECT_EQ(valid.labels(2), -1);  // past the split's end
  const auto test = task->batch(Split::Test, 0, 3);
  for (int r = 0; r < 3; ++r) expect_record(test, r, 5, r);
  // Training rows come from the first 18 records only (never file 5's last two),
  // each equal to its record.
  std::vector<std::vector<int>> training;  // the 20 records' tokens, in file order
  for (int f = 0; f < 5; ++f)
    for (int r = 0; r < 4; ++r) {
      const auto& bytes = files[std::size_t(f)];
      std::vector<int> tokens;
      for (std::size_t p = 0; p < 1024; ++p) {
        const std::size_t q = std::size_t(r) * 3073 + 1 + p;
        tokens.push_back(1 + image::gray_level(bytes[q], bytes[q + 1024], bytes[q + 2048]));
      }
      training.push_back(tokens);
    }
  const auto train = task->batch(Split::Train, 7, 64);
  std::set<std::size_t> drawn;
  for (Index b = 0; b < 64; ++b) {
    std::vector<int> tokens;
    for (Index p = 0; p < 1024; ++p) tokens.push_back(train.tokens(b, p));
    const auto at = std::find(training.begin(), training.end(), tokens);
    ASSERT_NE(at, training.end()) << "training row " << b << " is no record";
    const std::size_t index = std::size_t(at - training.begin());
    EXPECT_LT(index, 18u) << "training row " << b << " is a validation record";
    EXPECT_EQ(train.labels(b), int(files[index / 4][(index % 4) * 3073]));
    drawn.insert(index);
  }
  EXPECT_GE(drawn.size(), 12u) << "64 draws from 18 records";
}

TEST(ClassificationData, PathfinderImagesInMetadataOrderWithLrasSplits) {
  TempDir dir;
  // 24 lines of 8 x 8 images in two metadata files (2.npy before 10.npy: by
  // number). LRA splits the lines 80% / 10% / 10% (19 / 2 / 3), then leaves
  // out the empty images of each part: lines 3 (train) and 20 (valid) are
  // empty, so 18 / 1 / 3.
  const auto lines = write_fake_pathfinder(dir.path() + "/hard", 24, 8, {3, 20});
  ClassDataConfig c;
  c.task = ClassTaskKind::Pathfinder;
  c.length = 70;  // 64 pixels and 6 of padding
  c.path = dir.path() + "/hard";
  const auto task = make_class_task(c);
  EXPECT_EQ(task->vocab(), 257);
  EXPECT_EQ(task->classes(), 2);
  EXPECT_EQ(task->examples(Split::Train), 18u);
  EXPECT_EQ(task->examples(Split::Valid), 1u);
  EXPECT_EQ(task->examples(Split::Test), 3u);
  EXPECT_NE(task->describe().find("2 empty images left out"), std::string::npos)
      << task->describe();
  auto expect_line = [&](const ClassBatch& batch, Index b, std::size_t line) {
    ASSERT_FALSE(lines[line].empty);
    EXPECT_EQ(batch.labels(b), lines[line].label) << "line " << line;
    for (Index p = 0; p < 70; ++p) {
      const int want = p < 64 ? 1 + lines[line].levels[std::size_t(p)] : 0;
      ASSERT_EQ(batch.tokens(b, p), want) << "line " << line << " pixel " << p;
      ASSERT_EQ(batch.valid(b, p), p < 64 ? 1 : 0);
    }
  };
  const auto valid = task->batch(Split::Valid, 0, 2);
  expect_line(valid, 0, 19);
  EXPECT_EQ(valid.labels(1), -1);
  const auto test = task->batch(Split::Test, 0, 4);
  for (Index b = 0; b < 3; ++b) expect_line(test, b, std::size_t(21 + b));
  EXPECT_EQ(test.labels(3), -1);
  // A process's rows of a batch are those rows of the whole batch.
  const auto part = task->batch(Split::Test, 0, 4, 1, 2);
  ASSERT_EQ(part.batch_size(), 2);
  expect_line(part, 0, 22);
  expect_line(part, 1, 23);
  // Training rows are the non-empty lines 0..18, and a share is the same rows.
  const auto train = task->batch(Split::Train, 3, 40);
  const auto share = task->batch(Split::Train, 3, 40, 20, 20);
  for (Index b = 0; b < 40; ++b) {
    std::vector<std::uint8_t> levels;
    for (Index p = 0; p < 64; ++p) levels.push_back(std::uint8_t(train.tokens(b, p) - 1));
    std::size_t found = lines.size();
    for (std::size_t i = 0; i < lines.size(); ++i)
      if (!lines[i].empty && lines[i].levels == levels) found = i;
    ASSERT_LT(found, 19u) << "training row " << b << " is no training image";
    EXPECT_EQ(train.labels(b), lines[found].label);
    if (b >= 20) {
      EXPECT_EQ(share.labels(b - 20), train.labels(b));
      EXPECT_EQ(share.tokens(b - 20, 5), train.tokens(b, 5));
    }
  }
  // Errors: the length, the folder, no metadata, a bad line, a missing image,
  // a wrong size, example counts, a split left without an image.
  c.length = 60;
  testing::expect_error<ConfigError>(
      [&] { make_class_task(c); },
      {"data.length is 60", "8 x 8 = 64 pixels", "set data.length to 64"});
  c.length = 64;
  c.examples[1] = 5;
  testing::expect_error<ConfigError>([&] { make_class_task(c); },
                                     {"pathfinder task's splits come from its metadata"});
  c.examples[1] = 0;
  c.path = dir.path() + "/nowhere";
  testing::expect_error<IoError>([&] { make_class_task(c); },
                                 {"nowhere/metadata\" is not a folder", "curv_contour_length_14"});
  std::filesystem::create_directories(dir.path() + "/bare/metadata");
  std::ofstream(dir.path() + "/bare/metadata/notes.txt") << "not metadata\n";
  c.path = dir.path() + "/bare";
  testing::expect_error<IoError>([&] { make_class_task(c); }, {"holds no .npy metadata files"});
  // 10 lines, of which the last (test: lines 10..10) is empty.
  write_fake_pathfinder(dir.path() + "/thin", 10, 8, {9});
  c.path = dir.path() + "/thin";
  testing::expect_error<IoError>([&] { make_class_task(c); },
                                 {"lists 10 images (1 of them empty)", "test split (lines 10 to 10",
                                  "without a non-empty image"});
  c.path = dir.path() + "/hard";
  // A name that is not a number sorts after the numbered ones.
  std::ofstream(c.path + "/metadata/extra.npy") << "imgs/0 sample_0.png 0 2\n";
  testing::expect_error<IoError>([&] { make_class_task(c); },
                                 {"extra.npy\" line 1", "the label 0 or 1"});
  std::ofstream(c.path + "/metadata/extra.npy") << "imgs/0 sample_99.png 0 1\n";
  testing::expect_error<IoError>([&] { make_class_task(c); },
                                 {"extra.npy\" line 1 names", "sample_99.png", "cannot be read"});
  io::GrayImage small{4, 4, std::vector<std::uint8_t>(16, 7)};
  io::write_gray_png(c.path + "/imgs/1/small.png", small);
  std::ofstream(c.path + "/metadata/extra.npy") << "imgs/1 small.png 0 1\n";
  const auto mixed = make_class_task(c);  // the last line (test) is a 4 x 4 image
  EXPECT_EQ(mixed->examples(Split::Test), 3u);
  testing::expect_error<IoError>(
      [&] { mixed->batch(Split::Test, 0, 4); },
      {"small.png\" is 4 x 4 pixels but the task's first image is 8 x 8"});
  // ... and one larger than the first image is refused before it is decoded.
  io::GrayImage large{40, 40, std::vector<std::uint8_t>(1600, 7)};
  io::write_gray_png(c.path + "/imgs/1/small.png", large);
  testing::expect_error<IoError>([&] { mixed->batch(Split::Test, 0, 4); },
                                 {"small.png\" is 40 x 40 pixels; at most 64 pixels"});
}

// LRA's Retrieval: a row is a pair, sequences 2r and 2r + 1 of the batch hold
// its two texts (bytes + 1, cut to the length), one label per pair, from the
// three files in order for valid and test.
TEST(ClassificationData, RetrievalPairsAreTwoDocumentsARowFromLrasThreeFiles) {
  TempDir dir;
  const std::string prefix = dir.path() + "/new_aan_pairs";
  const auto pairs = write_fake_retrieval(prefix, {9, 3, 4});
  ClassDataConfig c;
  c.task = ClassTaskKind::Retrieval;
  c.length = 12;  // some texts are longer (cut), some shorter (padded)
  c.path = prefix;
  const auto task = make_class_task(c);
  EXPECT_EQ(task->vocab(), 257);
  EXPECT_EQ(task->classes(), 2);
  EXPECT_EQ(task->documents(), 2);
  EXPECT_EQ(task->examples(Split::Train), 9u);
  EXPECT_EQ(task->examples(Split::Valid), 3u);
  EXPECT_EQ(task->examples(Split::Test), 4u);
  EXPECT_NE(task->describe().find("9 train, 3 valid, 4 test pairs"), std::string::npos)
      << task->describe();
  auto expect_pair = [&](const ClassBatch& batch, Index r, const FakeRetrievalPair& pair) {
    EXPECT_EQ(batch.labels(r), pair.label);
    const std::string* texts[2] = {&pair.text1, &pair.text2};
    for (Index k = 0; k < 2; ++k)
      for (Index t = 0; t < 12; ++t) {
        const auto& text = *texts[k];
        const bool real = t < Index(text.size());
        ASSERT_EQ(batch.tokens(2 * r + k, t), real ? 1 + int((unsigned char)text[t]) : 0)
            << "row " << r << " document " << k << " position " << t;
        ASSERT_EQ(batch.valid(2 * r + k, t), real ? 1 : 0);
      }
  };
  const auto valid = task->batch(Split::Valid, 0, 4);
  ASSERT_EQ(valid.batch_size(), 4);
  ASSERT_EQ(valid.tokens.extent(0), 8u);
  for (Index r = 0; r < 3; ++r) expect_pair(valid, r, pairs[1][std::size_t(r)]);
  EXPECT_EQ(valid.labels(3), -1);  // past the end of the split
  for (Index t = 0; t < 12; ++t) EXPECT_EQ(valid.valid(6, t) + valid.valid(7, t), 0);
  const auto test = task->batch(Split::Test, 1, 2);  // pairs 2 and 3
  expect_pair(test, 0, pairs[2][2]);
  expect_pair(test, 1, pairs[2][3]);
  // A process's rows of a batch: the same pairs as in the whole batch.
  const auto part = task->batch(Split::Test, 0, 4, 1, 2);
  ASSERT_EQ(part.batch_size(), 2);
  ASSERT_EQ(part.tokens.extent(0), 4u);
  expect_pair(part, 0, pairs[2][1]);
  expect_pair(part, 1, pairs[2][2]);
  // Training rows are pairs of the training file.
  const auto train = task->batch(Split::Train, 5, 20);
  std::set<int> drawn;
  for (Index r = 0; r < 20; ++r) {
    int found = -1;
    for (std::size_t i = 0; i < pairs[0].size(); ++i)
      if (train.tokens(2 * r, 0) == 1 + pairs[0][i].text1[0] &&
          train.tokens(2 * r, 2) == 1 + pairs[0][i].text1[2] &&
          train.tokens(2 * r + 1, 1) == 1 + pairs[0][i].text2[1] &&
          train.valid(2 * r + 1, std::min<Index>(11, Index(pairs[0][i].text2.size()) - 1)) == 1)
        found = int(i);
    ASSERT_GE(found, 0) << "training row " << r << " is no training pair";
    expect_pair(train, r, pairs[0][std::size_t(found)]);
    drawn.insert(found);
  }
  EXPECT_GE(drawn.size(), 5u) << "20 draws from 9 pairs";
  // Lines ending in CRLF, a last line without a newline, a label "1.": the
  // texts' places are kept right (no carriage return in a text).
  {
    const std::string crlf = dir.path() + "/crlf";
    std::ofstream(crlf + ".train.tsv") << "1.\ta\tb\tab\tcd\r\n0\ta\tb\tx\tyz";
    std::ofstream(crlf + ".eval.tsv") << "0.00\ta\tb\tpq\tr\r\n\r\n1\ta\tb\tstu\tvw";
    std::ofstream(crlf + ".test.tsv") << "1\ta\tb\tw\tvv\n";
    ClassDataConfig d = c;
    d.path = crlf;
    const auto small = make_class_task(d);
    EXPECT_EQ(small->examples(Split::Train), 2u);
    EXPECT_EQ(small->examples(Split::Valid), 2u);
    const auto v = small->batch(Split::Valid, 0, 2);
    expect_pair(v, 0, {0, "pq", "r"});
    expect_pair(v, 1, {1, "stu", "vw"});
    const auto t = small->batch(Split::Train, 0, 16);
    for (Index r = 0; r < 16; ++r)
      expect_pair(
          t, r,
          t.labels(r) == 1 ? FakeRetrievalPair{1, "ab", "cd"} : FakeRetrievalPair{0, "x", "yz"});
    // The index is kept for the same files and made again once one changes.
    std::ofstream(crlf + ".eval.tsv") << "1\ta\tb\tnew\tpair\n";
    const auto changed = make_class_task(d);
    ASSERT_EQ(changed->examples(Split::Valid), 1u);
    expect_pair(changed->batch(Split::Valid, 0, 1), 0, {1, "new", "pair"});
    EXPECT_EQ(small->examples(Split::Valid), 2u);  // a task keeps the index it was made with
  }
  // Errors: a missing file, a line without five fields, a label that is no
  // whole number, an empty text, an empty file, example counts, no path.
  auto write_test = [&](const std::string& text) { std::ofstream(prefix + ".test.tsv") << text; };
  write_test("1\ta\tb\tone\n");
  testing::expect_error<IoError>(
      [&] { make_class_task(c); },
      {"new_aan_pairs.test.tsv\" line 1 has 4 tab-separated fields", "<label> TAB <id1>"});
  write_test("0\ta\tb\tone\ttwo\n1.5\ta\tb\tone\ttwo\n");
  testing::expect_error<IoError>(
      [&] { make_class_task(c); },
      {"test.tsv\" line 2: the label '1.5' is not a whole number below 10^7"});
  write_test("0\ta\tb\tone\ttwo\n\n1\ta\tb\tthree\t\n");
  testing::expect_error<IoError>([&] { make_class_task(c); },
                                 {"test.tsv\" line 3: text2 is empty"});
  write_test("\n");
  testing::expect_error<IoError>([&] { make_class_task(c); },
                                 {"test.tsv\" holds no pairs", "test split"});
  std::filesystem::remove(prefix + ".eval.tsv");
  testing::expect_error<IoError>([&] { make_class_task(c); },
                                 {"cannot open", "new_aan_pairs.eval.tsv", "prefix of LRA's"});
  c.examples[2] = 10;
  testing::expect_error<ConfigError>([&] { make_class_task(c); },
                                     {"retrieval task's splits come from its three files"});
  c.examples[2] = 0;
  c.path = "";
  testing::expect_error<ConfigError>([&] { make_class_task(c); },
                                     {"data.path is empty", "retrieval", ".eval.tsv"});
  // Every label 0: one class.
  write_fake_retrieval(prefix, {1, 1, 1});
  c.path = prefix;
  testing::expect_error<IoError>([&] { make_class_task(c); }, {"label 0", "at least 2 classes"});
}

TEST(ClassificationData, BadFilesAndConfigsAreNamedErrors) {
  TempDir dir;
  auto error = [](const ClassDataConfig& c) {
    try {
      make_class_task(c);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  ClassDataConfig c;
  c.task = ClassTaskKind::Text;
  c.length = 16;
  c.path = dir.path() + "/missing.tsv";
  EXPECT_NE(error(c).find("missing.tsv"), std::string::npos) << error(c);
  auto write = [&](const std::string& text) {
    c.path = dir.path() + "/bad.tsv";
    std::ofstream(c.path) << text;
  };
  write("0\tone\n1 two\n0\tthree\n");
  EXPECT_NE(error(c).find("line 2 has no tab"), std::string::npos) << error(c);
  write("0\tone\nyes\ttwo\n0\tthree\n");
  EXPECT_NE(error(c).find("line 2: the label 'yes' is not a whole number below 10^9"),
            std::string::npos)
      << error(c);
  write("0\tone\n1\t\n0\tthree\n");  // a label with no text
  EXPECT_NE(error(c).find("line 2: the text after the tab is empty"), std::string::npos)
      << error(c);
  write("0\tone\n0\ttwo\n0\tthree\n");
  EXPECT_NE(error(c).find("has one class"), std::string::npos) << error(c);
  write("0\tone\n1\ttwo\n");
  EXPECT_NE(error(c).find("holds 2 labelled lines but needs at least 3"), std::string::npos)
      << error(c);
  ClassDataConfig l;
  l.length = 1000;  // LRA's trees reach 1999 tokens
  EXPECT_NE(error(l).find("data.length is 1000 but ListOps trees reach 1999 tokens"),
            std::string::npos)
      << error(l);
  EXPECT_THROW(parse_class_task_kind("imdb"), ConfigError);
  EXPECT_EQ(parse_class_task_kind(to_string(ClassTaskKind::MatchingEnds)),
            ClassTaskKind::MatchingEnds);
  ClassDataConfig i;
  i.task = ClassTaskKind::Image;
  i.length = 1024;
  EXPECT_NE(error(i).find("data.path is empty; the image task reads CIFAR-10"), std::string::npos)
      << error(i);
  i.path = dir.path() + "/cifar";
  std::filesystem::create_directories(i.path);
  EXPECT_NE(error(i).find("data_batch_1.bin"), std::string::npos) << error(i);
  write_fake_cifar(i.path, {1, 1, 1, 1, 1, 1});
  EXPECT_NO_THROW(make_class_task(i));
  i.length = 1000;
  EXPECT_NE(error(i).find("data.length is 1000 but the image task's rows are 1024 pixels"),
            std::string::npos)
      << error(i);
  i.length = 1024;
  i.examples[0] = 100;
  EXPECT_NE(error(i).find("the image task's splits come from its files"), std::string::npos)
      << error(i);
  i.examples[0] = 0;
  std::ofstream(i.path + "/data_batch_3.bin", std::ios::binary) << std::string(3000, 'x');
  EXPECT_NE(error(i).find("data_batch_3.bin\" holds 3000 bytes, not a whole number of 3073-byte"),
            std::string::npos)
      << error(i);
  std::string record(3073, '\0');
  record[3073 - 3073] = char(1);
  std::ofstream(i.path + "/data_batch_3.bin", std::ios::binary)
      << record << std::string(1, char(12)) << std::string(3072, '\0');
  EXPECT_NE(error(i).find("data_batch_3.bin\" record 1 has label 12 but CIFAR-10's are 0..9"),
            std::string::npos)
      << error(i);
  ClassDataConfig m;
  m.task = ClassTaskKind::MatchingEnds;
  m.vocab = 2;
  EXPECT_NE(error(m).find("data.vocab is 2"), std::string::npos) << error(m);
  EXPECT_THROW(make_class_task(short_listops())->batch(Split::Train, 0, 0), ConfigError);
}

}  // namespace
}  // namespace reformer
