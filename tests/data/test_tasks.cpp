#include "reformer/core/error.hpp"
#include "reformer/data/tasks.hpp"
#include "support/checks.hpp"
#include "support/temp_dir.hpp"

#include <gtest/gtest.h>

#include <fcntl.h>
#include <unistd.h>

#include <set>
#include <vector>

namespace reformer::data {
namespace {

using reformer::testing::expect_error;
using reformer::testing::TempDir;
using reformer::testing::write_file;

DataConfig config_of(TaskKind task, Index length, Index vocab, std::uint64_t seed = 7) {
  DataConfig config;
  config.task = task;
  config.length = length;
  config.vocab = vocab;
  config.seed = seed;
  return config;
}

std::vector<int> row(const HostTokens& tokens, Index b) {
  std::vector<int> out;
  for (Index t = 0; t < Index(tokens.extent(1)); ++t) out.push_back(tokens(b, t));
  return out;
}

bool same(const Batch& a, const Batch& b) {
  if (a.batch_size() != b.batch_size() || a.length() != b.length()) return false;
  for (Index i = 0; i < a.batch_size(); ++i)
    if (row(a.inputs, i) != row(b.inputs, i) || row(a.targets, i) != row(b.targets, i))
      return false;
  return true;
}

// ---------------------------------------------------------------- config

TEST(DataConfig, ParsesAndPrintsTaskKinds) {
  for (const TaskKind kind : task_kinds()) EXPECT_EQ(parse_task_kind(to_string(kind)), kind);
  // Every enumerator, in order (Retrieval is the last).
  ASSERT_EQ(task_kinds().size(), std::size_t(TaskKind::Retrieval) + 1);
  for (std::size_t i = 0; i < task_kinds().size(); ++i) EXPECT_EQ(task_kinds()[i], TaskKind(i));
  EXPECT_TRUE(is_class_task(TaskKind::ListOps));
  EXPECT_TRUE(is_class_task(TaskKind::Image));
  EXPECT_TRUE(is_class_task(TaskKind::Pathfinder));
  EXPECT_EQ(parse_task_kind("pathfinder"), TaskKind::Pathfinder);
  EXPECT_TRUE(is_class_task(TaskKind::Retrieval));
  EXPECT_EQ(parse_task_kind("retrieval"), TaskKind::Retrieval);
  EXPECT_FALSE(is_class_task(TaskKind::Bytes));
  EXPECT_STREQ(to_string(TaskKind::Duplication), "duplication");
  expect_error<ConfigError>(
      [] { parse_task_kind("enwik8"); },
      {"data.task", "\"enwik8\"", "duplication, copy, bytes", "matching_ends"});
}

TEST(DataConfig, NamesTheBadField) {
  EXPECT_NO_THROW(config_of(TaskKind::Duplication, 256, 128).validate());
  EXPECT_NO_THROW(config_of(TaskKind::Copy, 5, 3).validate());
  expect_error<ConfigError>([] { config_of(TaskKind::Duplication, 7, 16).validate(); },
                            {"data.length", "7", "even length >= 4", "use 8"});
  expect_error<ConfigError>([] { config_of(TaskKind::Duplication, 2, 16).validate(); },
                            {"data.length", "2", "use 4"});
  expect_error<ConfigError>([] { config_of(TaskKind::Duplication, 8, 1).validate(); },
                            {"data.vocab", "1", "[2,"});
  expect_error<ConfigError>([] { config_of(TaskKind::Copy, 3, 16).validate(); },
                            {"data.length", "3", "length >= 4"});
  expect_error<ConfigError>([] { config_of(TaskKind::Copy, 8, 2).validate(); },
                            {"data.vocab", "2", "[3,"});
  expect_error<ConfigError>([] { config_of(TaskKind::Copy, 0, 16).validate(); },
                            {"data.length", "0"});
  expect_error<ConfigError>([] { config_of(TaskKind::Bytes, 16, 256).validate(); },
                            {"data.path", "empty"});
  expect_error<ConfigError>(
      [] {
        DataConfig config = config_of(TaskKind::Bytes, 16, 128);
        config.path = "corpus.txt";
        config.validate();
      },
      {"data.vocab", "128", "256"});
  // make_task validates too.
  expect_error<ConfigError>([] { make_task(config_of(TaskKind::Duplication, 9, 16)); },
                            {"data.length", "9"});
}

// Keys that only other tasks read would have no effect: a path given to a task
// that generates its data (most likely meant for data.task = "bytes"), the
// pair tasks' lengths and units.
TEST(DataConfig, KeysOfOtherTasksAreRefused) {
  auto with = [](TaskKind task, auto edit) {
    DataConfig config = config_of(task, 16, 16);
    edit(config);
    return config;
  };
  expect_error<ConfigError>(
      [&] { with(TaskKind::Duplication, [](DataConfig& c) { c.path = "book.txt"; }).validate(); },
      {"data.path is \"book.txt\"", "data.task = \"duplication\" generates its data",
       "(bytes, parallel, text, image, pathfinder, retrieval) or leave data.path out"});
  expect_error<ConfigError>(
      [&] { with(TaskKind::Copy, [](DataConfig& c) { c.min_symbols = 3; }).validate(); },
      {"data.min_symbols / data.max_symbols are 3 / 0", "not \"copy\""});
  expect_error<ConfigError>(
      [&] { with(TaskKind::Duplication, [](DataConfig& c) { c.units = "chars"; }).validate(); },
      {"data.units is \"chars\"", "only the parallel task"});
  // Where they are read, they are taken.
  EXPECT_NO_THROW(with(TaskKind::PairCopy, [](DataConfig& c) {
                    c.min_symbols = 2;
                    c.max_symbols = 5;
                  }).validate());
  EXPECT_NO_THROW(with(TaskKind::Parallel, [](DataConfig& c) {
                    c.path = "pairs.tsv";
                    c.units = "chars";
                  }).validate());
}

TEST(DataTasks, BatchSizeMustBePositive) {
  const auto task = make_task(config_of(TaskKind::Copy, 8, 10));
  expect_error<ConfigError>([&] { task->batch(Split::Train, 0, 0); }, {"batch_size", "0", ">= 1"});
}

// Token ids given as text (generate's --prompt, the pair tasks' sources):
// every int is read, leading zeros or not; a larger number is refused naming
// it, as is a word that is not a number.
TEST(DataTasks, TokenIdsAreReadUpToTheLargestInt) {
  EXPECT_EQ(parse_token_ids("0 5,17  1000000000 0000000000012 2147483647", "ids"),
            (std::vector<int>{0, 5, 17, 1000000000, 12, 2147483647}));
  EXPECT_EQ(parse_token_ids("", "ids"), std::vector<int>{});
  for (const std::string big : {"2147483648", "99999999999", "123456789012345678901234"})
    expect_error<ConfigError>(
        [&] { parse_token_ids("1 " + big, "ids"); },
        {"ids token " + big + " is too large to be a token id", "at most 2147483647"});
  expect_error<ConfigError>([&] { parse_token_ids("1 -2", "ids"); },
                            {"ids word '-2' is not a token id"});
}

// ---------------------------------------------------------------- duplication

TEST(DataTasks, DuplicationLayoutAtLength8) {
  const auto task = make_task(config_of(TaskKind::Duplication, 8, 5));
  EXPECT_EQ(task->ignore_id(), 0);
  EXPECT_EQ(task->vocab(), 5);
  EXPECT_EQ(task->length(), 8);
  const Batch batch = task->batch(Split::Train, 3, 16);
  ASSERT_EQ(batch.batch_size(), 16);
  ASSERT_EQ(batch.length(), 8);
  for (Index b = 0; b < 16; ++b) {
    const std::vector<int> in = row(batch.inputs, b);
    const int a = in[1], c = in[2], d = in[3];
    // inputs  0 a c d 0 a c d
    // targets 0 0 0 0 a c d 0
    EXPECT_EQ(in, (std::vector<int>{0, a, c, d, 0, a, c, d})) << "row " << b;
    EXPECT_EQ(row(batch.targets, b), (std::vector<int>{0, 0, 0, 0, a, c, d, 0})) << "row " << b;
    for (const int symbol : {a, c, d}) {
      EXPECT_GE(symbol, 1);
      EXPECT_LT(symbol, 5);
    }
  }
}

TEST(DataTasks, DuplicationScoresExactlyTheSecondCopy) {
  const Index length = 64, half = length / 2;
  const auto task = make_task(config_of(TaskKind::Duplication, length, 128));
  const Batch batch = task->batch(Split::Valid, 11, 8);
  std::set<int> symbols;
  for (Index b = 0; b < batch.batch_size(); ++b) {
    EXPECT_EQ(batch.inputs(b, 0), 0);
    EXPECT_EQ(batch.inputs(b, half), 0);
    Index scored = 0;
    for (Index t = 0; t < length; ++t) {
      if (t != 0 && t != half) {
        EXPECT_GE(batch.inputs(b, t), 1);
        EXPECT_LT(batch.inputs(b, t), 128);
        symbols.insert(batch.inputs(b, t));
      }
      if (t > 0 && t < half) {
        EXPECT_EQ(batch.inputs(b, t), batch.inputs(b, half + t));
      }
      const bool scored_position = t >= half && t <= length - 2;
      EXPECT_EQ(batch.targets(b, t), scored_position ? batch.inputs(b, t + 1) : 0)
          << "row " << b << " position " << t;
      scored += batch.targets(b, t) != task->ignore_id();
    }
    EXPECT_EQ(scored, half - 1);  // |w|
  }
  EXPECT_GT(symbols.size(), 100u);  // the symbols really are drawn from the whole range
}

// ---------------------------------------------------------------- copy

TEST(DataTasks, CopyLayout) {
  const Index length = 11, vocab = 6;
  const auto task = make_task(config_of(TaskKind::Copy, length, vocab));
  EXPECT_EQ(task->ignore_id(), 0);
  std::set<Index> word_lengths;
  for (std::uint64_t index = 0; index < 8; ++index) {
    const Batch batch = task->batch(Split::Train, index, 16);
    for (Index b = 0; b < batch.batch_size(); ++b) {
      const std::vector<int> in = row(batch.inputs, b);
      Index n = 0;
      while (n < length && in[n] != 1) ++n;  // the separator; symbols are >= 2
      ASSERT_GE(n, 1);
      ASSERT_LE(n, (length - 1) / 2);
      word_lengths.insert(n);
      std::vector<int> expected_in(length, 0), expected_targets(length, 0);
      for (Index j = 0; j < n; ++j) {
        EXPECT_GE(in[j], 2);
        EXPECT_LT(in[j], vocab);
        expected_in[j] = expected_in[n + 1 + j] = in[j];
        expected_targets[n + j] = in[j];  // the separator predicts w_1, ...
      }
      expected_in[n] = 1;
      EXPECT_EQ(in, expected_in);
      EXPECT_EQ(row(batch.targets, b), expected_targets);
    }
  }
  // Every length from 1 to (length - 1) / 2 = 5 occurs.
  EXPECT_EQ(word_lengths, (std::set<Index>{1, 2, 3, 4, 5}));
}

TEST(DataTasks, CopyExampleFromTheHeader) {
  // length 8, w = a b: inputs a b 1 a b 0 0 0, targets 0 0 a b 0 0 0 0.
  const auto task = make_task(config_of(TaskKind::Copy, 8, 40));
  for (std::uint64_t index = 0; index < 64; ++index) {
    const Batch batch = task->batch(Split::Test, index, 1);
    if (batch.inputs(0, 2) != 1) continue;
    const int a = batch.inputs(0, 0), b = batch.inputs(0, 1);
    EXPECT_EQ(row(batch.inputs, 0), (std::vector<int>{a, b, 1, a, b, 0, 0, 0}));
    EXPECT_EQ(row(batch.targets, 0), (std::vector<int>{0, 0, a, b, 0, 0, 0, 0}));
    EXPECT_EQ(row(batch.valid, 0), (std::vector<int>{1, 1, 1, 1, 1, 0, 0, 0}));
    return;
  }
  FAIL() << "no sequence with |w| = 2 in 64 batches";
}

// ---------------------------------------------------------------- determinism

TEST(DataTasks, BatchesArePureFunctionsOfSeedSplitAndIndex) {
  TempDir dir;
  std::string text;
  for (int i = 0; i < 20000; ++i) text.push_back(char((i * 7919) % 251));
  write_file(dir.file("corpus"), text);
  DataConfig bytes = config_of(TaskKind::Bytes, 32, 256);
  bytes.path = dir.file("corpus");

  for (const DataConfig& config :
       {config_of(TaskKind::Duplication, 32, 64), config_of(TaskKind::Copy, 32, 64), bytes}) {
    SCOPED_TRACE(to_string(config.task));
    const auto task = make_task(config);
    const auto again = make_task(config);
    const Batch reference = task->batch(Split::Train, 5, 4);
    EXPECT_TRUE(same(reference, task->batch(Split::Train, 5, 4)));
    EXPECT_TRUE(same(reference, again->batch(Split::Train, 5, 4)));
    EXPECT_FALSE(same(reference, task->batch(Split::Train, 6, 4)));
    EXPECT_FALSE(same(reference, task->batch(Split::Valid, 5, 4)));
    DataConfig other_seed = config;
    other_seed.seed += 1;
    EXPECT_FALSE(same(reference, make_task(other_seed)->batch(Split::Train, 5, 4)));
    // Rows differ from each other, and a larger batch starts with the same rows.
    EXPECT_NE(row(reference.inputs, 0), row(reference.inputs, 1));
    const Batch larger = task->batch(Split::Train, 5, 9);
    for (Index b = 0; b < 4; ++b) {
      EXPECT_EQ(row(larger.inputs, b), row(reference.inputs, b));
      EXPECT_EQ(row(larger.targets, b), row(reference.targets, b));
    }
  }
}

TEST(DataTasks, BatchesCopyToTheDevice) {
  const auto task = make_task(config_of(TaskKind::Duplication, 16, 30));
  const Batch batch = task->batch(Split::Train, 0, 3);
  const DeviceBatch device = to_device(batch);
  auto inputs = Kokkos::create_mirror_view_and_copy(HostSpace(), device.inputs);
  auto targets = Kokkos::create_mirror_view_and_copy(HostSpace(), device.targets);
  for (Index b = 0; b < 3; ++b)
    for (Index t = 0; t < 16; ++t) {
      EXPECT_EQ(inputs(b, t), batch.inputs(b, t));
      EXPECT_EQ(targets(b, t), batch.targets(b, t));
    }
  // Reuse the device views for the next batch; a wrong shape is refused.
  copy_to_device(task->batch(Split::Train, 1, 3), device);
  const DeviceBatch small{View2<int>("inputs", 2, 16), View2<int>("targets", 2, 16)};
  expect_error<ShapeError>([&] { copy_to_device(batch, small); },
                           {"device.inputs", "[2, 16]", "[3, 16]"});
}

// ---------------------------------------------------------------- bytes

TEST(BytesCorpus, SplitsAreNinetyFiveFivePercent) {
  // enwik8: the standard 90M / 5M / 5M split.
  const SplitBounds enwik8 = split_bytes(100000000);
  EXPECT_EQ(enwik8.begin[0], 0u);
  EXPECT_EQ(enwik8.end[0], 90000000u);
  EXPECT_EQ(enwik8.begin[1], 90000000u);
  EXPECT_EQ(enwik8.end[1], 95000000u);
  EXPECT_EQ(enwik8.begin[2], 95000000u);
  EXPECT_EQ(enwik8.end[2], 100000000u);
  // Boundaries round down; the test split takes the remainder.
  const SplitBounds odd = split_bytes(1019);
  EXPECT_EQ(odd.bytes(Split::Train), 917u);  // floor(917.1)
  EXPECT_EQ(odd.bytes(Split::Valid), 51u);   // floor(968.05) - 917
  EXPECT_EQ(odd.bytes(Split::Test), 51u);
  // No overflow for huge sizes.
  const std::uint64_t huge = ~std::uint64_t(0);
  EXPECT_EQ(split_bytes(huge).end[2], huge);
  EXPECT_GT(split_bytes(huge).end[0], huge / 10 * 8);
}

TEST(BytesCorpus, Enwik8SizedFileGetsTheStandardSplit) {
  TempDir dir;
  const std::string path = dir.file("enwik8");
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::ftruncate(fd, 100000000), 0);  // sparse: no real data needed
  ::close(fd);
  DataConfig config = config_of(TaskKind::Bytes, 512, 256);
  config.path = path;
  const auto task = make_task(config);
  EXPECT_EQ(task->vocab(), 256);
  EXPECT_EQ(task->ignore_id(), -1);
  EXPECT_NE(task->describe().find("100000000 bytes"), std::string::npos) << task->describe();
  EXPECT_NE(task->describe().find("90000000 / 5000000 / 5000000"), std::string::npos)
      << task->describe();
  const Batch batch = task->batch(Split::Test, 0, 2);
  EXPECT_EQ(batch.inputs(1, 511), 0);
}

// data.id_offset shifts every byte id (Hugging Face's enwik8 Reformer: 2), and
// the vocabulary with it; other tasks refuse it.
TEST(BytesCorpus, IdOffsetShiftsEveryId) {
  TempDir dir;
  std::string text;
  for (int i = 0; i < 4000; ++i) text.push_back(char(i % 256));
  write_file(dir.file("corpus"), text);
  DataConfig plain = config_of(TaskKind::Bytes, 32, 256);
  plain.path = dir.file("corpus");
  DataConfig shifted = plain;
  shifted.id_offset = 2;
  shifted.vocab = 258;
  const auto a = make_task(plain), b = make_task(shifted);
  EXPECT_EQ(b->vocab(), 258);
  const Batch x = a->batch(Split::Train, 3, 4), y = b->batch(Split::Train, 3, 4);
  EXPECT_EQ(y.valid.extent(0), 0u);  // windows never end early: no mask
  for (Index r = 0; r < 4; ++r)
    for (Index t = 0; t < 32; ++t) {
      EXPECT_EQ(y.inputs(r, t), x.inputs(r, t) + 2);
      EXPECT_EQ(y.targets(r, t), x.targets(r, t) + 2);
    }
  shifted.vocab = 256;
  expect_error<ConfigError>([&] { shifted.validate(); },
                            {"data.vocab is 256", "data.id_offset = 2", "data.vocab = 258"});
  DataConfig copy = config_of(TaskKind::Copy, 8, 40);
  copy.id_offset = 1;
  expect_error<ConfigError>([&] { copy.validate(); }, {"data.id_offset is 1", "bytes task"});
}

TEST(BytesCorpus, WindowsStayInsideTheirSplit) {
  // Byte p holds its split (top two bits) and p mod 64 (low six bits), so a
  // window shows which split it came from and whether it is contiguous.
  const std::uint64_t size = 4000;
  const SplitBounds bounds = split_bytes(size);  // 3600 / 200 / 200
  ASSERT_EQ(bounds.bytes(Split::Valid), 200u);
  std::string text(size, '\0');
  for (std::uint64_t p = 0; p < size; ++p) {
    const int split = p < bounds.end[0] ? 0 : p < bounds.end[1] ? 1 : 2;
    text[p] = char(split << 6 | int(p % 64));
  }
  TempDir dir;
  write_file(dir.file("corpus"), text);
  // Valid and test have 200 - 190 = 10 window starts each, so a start is known
  // from its first byte's p mod 64.
  const Index length = 190;
  DataConfig config = config_of(TaskKind::Bytes, length, 256);
  config.path = dir.file("corpus");
  const auto task = make_task(config);

  for (const Split split : {Split::Train, Split::Valid, Split::Test}) {
    SCOPED_TRACE(to_string(split));
    const std::uint64_t begin = bounds.begin[int(split)], end = bounds.end[int(split)];
    std::set<std::uint64_t> starts;
    for (std::uint64_t index = 0; index < 50; ++index) {
      const Batch batch = task->batch(split, index, 8);
      for (Index b = 0; b < batch.batch_size(); ++b) {
        for (Index t = 0; t < length; ++t) {
          ASSERT_EQ(batch.inputs(b, t) >> 6, int(split));
          ASSERT_EQ(batch.targets(b, t) >> 6, int(split));
          ASSERT_EQ(batch.targets(b, t) & 63, (batch.inputs(b, t) + 1) & 63);
          if (t + 1 < length) {
            ASSERT_EQ(batch.targets(b, t), batch.inputs(b, t + 1));
          }
        }
        const std::uint64_t low = std::uint64_t(batch.inputs(b, 0) & 63);
        for (std::uint64_t p = begin; p + length < end; ++p)
          if (p % 64 == low) starts.insert(p);
      }
    }
    if (split != Split::Train) {
      // Every start occurs, from the split's first byte to end - (length + 1).
      std::set<std::uint64_t> all;
      for (std::uint64_t p = begin; p + length + 1 <= end; ++p) all.insert(p);
      EXPECT_EQ(starts, all);
    }
  }
}

// Transformer-XL's streams (issue 22): stream r of a split is its r-th equal
// part read from the start; consecutive segments of a row are consecutive
// text; a slice of the rows equals those rows of the whole batch; segments
// wrap at segments_per_stream; a synthetic task has no streams.
TEST(BytesCorpus, SegmentStreamsAreConsecutiveText) {
  const std::uint64_t size = 40000;
  std::string text(size, '\0');
  // Byte p encodes p mod 251 (a prime, so positions are told apart locally).
  for (std::uint64_t p = 0; p < size; ++p) text[p] = char(p % 251);
  TempDir dir;
  write_file(dir.file("corpus"), text);
  DataConfig config = config_of(TaskKind::Bytes, 16, 256);
  config.path = dir.file("corpus");
  const auto task = make_task(config);
  const SplitBounds bounds = split_bytes(size);
  const Index streams = 6, length = 10;
  const std::uint64_t part = bounds.bytes(Split::Valid) / streams;  // 2000 / 6 = 333
  const std::uint64_t count = task->segments_per_stream(Split::Valid, streams, length);
  EXPECT_EQ(count, (part - 1) / length);  // 33
  auto byte_at = [&](std::uint64_t p) { return int(p % 251); };
  for (std::uint64_t s = 0; s < count + 2; ++s) {
    const Batch all = task->segments(Split::Valid, s, 0, streams, streams, length);
    const Batch slice = task->segments(Split::Valid, s, 2, 3, streams, length);
    ASSERT_EQ(all.batch_size(), streams);
    ASSERT_EQ(all.length(), length);
    for (Index r = 0; r < streams; ++r)
      for (Index t = 0; t < length; ++t) {
        const std::uint64_t p =
            bounds.begin[int(Split::Valid)] + r * part + (s % count) * length + t;
        ASSERT_EQ(all.inputs(r, t), byte_at(p)) << "segment " << s << " row " << r;
        ASSERT_EQ(all.targets(r, t), byte_at(p + 1));
        ASSERT_LT(p + 1, bounds.end[int(Split::Valid)]);  // inside the split
        if (r >= 2 && r < 5) {
          ASSERT_EQ(slice.inputs(r - 2, t), all.inputs(r, t));
        }
      }
  }
  // The next segment of a row starts where the last one's targets end.
  const Batch a = task->segments(Split::Train, 7, 0, 2, 2, length);
  const Batch b = task->segments(Split::Train, 8, 0, 2, 2, length);
  EXPECT_EQ(b.inputs(1, 0), a.targets(1, length - 1));
  expect_error<IoError>([&] { task->segments_per_stream(Split::Valid, 400, length); },
                        {"valid split", "400 streams", "fewer streams"});
  expect_error<ConfigError>([&] { task->segments(Split::Valid, 0, 5, 2, streams, length); },
                            {"rows [5, 7) of 6 streams"});
  const auto synthetic = make_task(config_of(TaskKind::Copy, 8, 10));
  expect_error<ConfigError>([&] { synthetic->segments(Split::Train, 0, 0, 1, 1, 8); },
                            {"not a text read as streams", "data.task = \"bytes\""});
  expect_error<ConfigError>([&] { synthetic->segments_per_stream(Split::Train, 1, 8); },
                            {"not a text read as streams"});
}

TEST(BytesCorpus, FileErrorsNameThePath) {
  TempDir dir;
  DataConfig config = config_of(TaskKind::Bytes, 16, 256);
  config.path = dir.file("missing.txt");
  expect_error<IoError>([&] { make_task(config); },
                        {"missing.txt", "No such file or directory", "data.path"});
  write_file(dir.file("empty.txt"), "");
  config.path = dir.file("empty.txt");
  expect_error<IoError>([&] { make_task(config); }, {"empty.txt", "is empty"});
  config.path = dir.path();
  expect_error<IoError>([&] { make_task(config); }, {dir.path(), "not a regular file"});
  write_file(dir.file("short.txt"), "0123456789");
  config.path = dir.file("short.txt");
  expect_error<IoError>([&] { make_task(config); },
                        {"short.txt", "10 bytes", "data.length + 1 = 17"});
  // 100 bytes: train 90, valid 5, test 5; the valid split is too short.
  write_file(dir.file("small.txt"), std::string(100, 'x'));
  config.path = dir.file("small.txt");
  expect_error<IoError>([&] { make_task(config); },
                        {"valid split", "small.txt", "5 bytes", "90 to 95", "= 17"});
  if (::geteuid() != 0) {  // root reads anything
    write_file(dir.file("locked.txt"), std::string(1000, 'x'));
    ::chmod(dir.file("locked.txt").c_str(), 0);
    config.path = dir.file("locked.txt");
    expect_error<IoError>([&] { make_task(config); }, {"locked.txt", "Permission denied"});
  }
}

}  // namespace
}  // namespace reformer::data
