// Source/target pair tasks of the encoder-decoder: copy, reverse, parallel text.
#include "reformer/core/error.hpp"
#include "reformer/data/pairs.hpp"
#include "support/checks.hpp"
#include "support/temp_dir.hpp"

#include <gtest/gtest.h>

#include <set>

namespace reformer::data {
namespace {

using reformer::testing::expect_error;
using reformer::testing::TempDir;
using reformer::testing::write_file;

// The symbols of row b of a [batch, length] tensor up to (not including) `stop`.
std::vector<int> symbols(const HostTokens& t, Index b, Index from, int stop) {
  std::vector<int> out;
  for (Index j = from; j < Index(t.extent(1)) && t(b, j) != stop; ++j) out.push_back(t(b, j));
  return out;
}

// Every row has the layout of pairs.hpp: source w end pad, target_in start v
// pad, target_out v end pad, masks 1 on the tokens (end included).
void expect_layout(const PairBatch& batch) {
  const Index length = batch.source.extent(1);
  for (Index b = 0; b < batch.batch_size(); ++b) {
    const auto w = symbols(batch.source, b, 0, PairTask::kEnd);
    const auto v = symbols(batch.target_out, b, 0, PairTask::kEnd);
    ASSERT_LT(Index(w.size()), length);
    ASSERT_LT(Index(v.size()), length);
    EXPECT_EQ(batch.target_in(b, 0), PairTask::kStart);
    EXPECT_EQ(symbols(batch.target_in, b, 1, PairTask::kPad), v);
    for (Index t = 0; t < length; ++t) {
      EXPECT_EQ(batch.source_valid(b, t), t <= Index(w.size()) ? 1 : 0);
      EXPECT_EQ(batch.target_valid(b, t), t <= Index(v.size()) ? 1 : 0);
      if (t > Index(w.size())) EXPECT_EQ(batch.source(b, t), PairTask::kPad);
      if (t > Index(v.size())) EXPECT_EQ(batch.target_out(b, t), PairTask::kPad);
    }
    for (int id : w) EXPECT_GE(id, PairTask::kFirstSymbol);
  }
}

TEST(PairTasks, CopyAndReverse) {
  for (const auto kind : {PairTaskKind::Copy, PairTaskKind::Reverse}) {
    PairDataConfig config;
    config.task = kind;
    config.length = 12;
    config.vocab = 10;
    config.min_symbols = 2;
    config.max_symbols = 9;
    const auto task = make_pair_task(config);
    EXPECT_EQ(task->vocab(), 10);
    const auto batch = task->batch(Split::Train, 3, 64);
    expect_layout(batch);
    std::set<std::size_t> lengths;
    for (Index b = 0; b < 64; ++b) {
      auto w = symbols(batch.source, b, 0, PairTask::kEnd);
      lengths.insert(w.size());
      EXPECT_TRUE(w.size() >= 2 && w.size() <= 9) << w.size();
      for (int id : w) EXPECT_LT(id, 10);
      if (kind == PairTaskKind::Reverse) std::reverse(w.begin(), w.end());
      EXPECT_EQ(symbols(batch.target_out, b, 0, PairTask::kEnd), w);
    }
    EXPECT_GT(lengths.size(), 4u);  // the lengths vary
    // A pure function of (seed, split, index); rows do not depend on the batch size.
    const auto again = task->batch(Split::Train, 3, 8);
    for (Index b = 0; b < 8; ++b)
      for (Index t = 0; t < 12; ++t) EXPECT_EQ(again.source(b, t), batch.source(b, t));
    const auto other = task->batch(Split::Valid, 3, 8);
    int same = 0;
    for (Index b = 0; b < 8; ++b) same += other.source(b, 0) == batch.source(b, 0);
    EXPECT_LT(same, 8);
    EXPECT_EQ(task->encode("3 9 4"), (std::vector<int>{3, 9, 4}));
    EXPECT_EQ(task->decode({3, 9, 4}), "3 9 4");
    expect_error<ConfigError>([&] { task->encode("3 10"); }, {"token 10", "[3, 10)"});
    expect_error<ConfigError>([&] { task->encode("3 x"); }, {"'x' is not a token id"});
  }
}

TEST(PairTasks, ParallelBytesAndCharacters) {
  TempDir dir;
  std::string text;
  for (int i = 0; i < 40; ++i)
    text += "src " + std::to_string(i) + "\tcible \u00e9t\u00e9 " + std::to_string(i) + "\n";
  const std::string path = dir.file("pairs.tsv");
  write_file(path, text);
  const std::vector<std::string> all_units = {"bytes", "chars"};
  for (const std::string& units : all_units) {
    SCOPED_TRACE(units);
    PairDataConfig config;
    config.task = PairTaskKind::Parallel;
    config.path = path;
    config.units = units;
    config.length = 20;
    const auto task = make_pair_task(config);
    EXPECT_NE(task->describe().find("40 pairs (36 train, 2 valid, 2 test)"), std::string::npos)
        << task->describe();
    if (units == "bytes") EXPECT_EQ(task->vocab(), 259);
    if (units == "chars") EXPECT_LT(task->vocab(), 40);
    const std::string sentence = "cible \u00e9t\u00e9 7";
    EXPECT_EQ(task->decode(task->encode(sentence)), sentence);
    // Every row is one of the file's pairs; the splits do not share pairs.
    std::set<std::string> seen[3];
    for (int split = 0; split < 3; ++split) {
      const auto batch = task->batch(Split(split), 0, 32);
      expect_layout(batch);
      for (Index b = 0; b < 32; ++b) {
        const auto s = task->decode(symbols(batch.source, b, 0, PairTask::kEnd));
        const auto t = task->decode(symbols(batch.target_out, b, 0, PairTask::kEnd));
        EXPECT_NE(text.find(s + "\t" + t + "\n"), std::string::npos) << s << " / " << t;
        seen[split].insert(s);
      }
    }
    EXPECT_LE(seen[1].size(), 2u);
    for (const auto& s : seen[1]) EXPECT_EQ(seen[0].count(s), 0u) << s;
    for (const auto& s : seen[2]) EXPECT_EQ(seen[0].count(s) + seen[1].count(s), 0u) << s;
  }
}

TEST(PairTasks, ClearErrors) {
  TempDir dir;
  PairDataConfig config;
  config.task = PairTaskKind::Parallel;
  config.length = 8;
  config.path = dir.file("missing.tsv");
  expect_error<IoError>([&] { make_pair_task(config); }, {"missing.tsv", "No such file"});
  write_file(dir.file("empty.tsv"), "");
  config.path = dir.file("empty.tsv");
  expect_error<IoError>([&] { make_pair_task(config); }, {"empty.tsv", "is empty"});
  write_file(dir.file("notab.tsv"), "a\tb\nc d\ne\tf\n");
  config.path = dir.file("notab.tsv");
  expect_error<IoError>([&] { make_pair_task(config); }, {"notab.tsv", "line 2", "has no tab"});
  write_file(dir.file("tabs.tsv"), "a\tb\nc\td\tx\ne\tf\n");  // a tab would be a symbol
  config.path = dir.file("tabs.tsv");
  expect_error<IoError>([&] { make_pair_task(config); },
                        {"tabs.tsv", "line 2", "more than one tab"});
  write_file(dir.file("long.tsv"), "a\tb\nc\tdefghijkl\ne\tf\n");
  config.path = dir.file("long.tsv");
  expect_error<IoError>([&] { make_pair_task(config); },
                        {"line 2", "the target has 9 bytes", "data.length - 1 = 7"});
  write_file(dir.file("two.tsv"), "a\tb\nc\td\n");
  config.path = dir.file("two.tsv");
  expect_error<IoError>([&] { make_pair_task(config); }, {"holds 2 pairs", "at least 3"});
  write_file(dir.file("latin1.tsv"), "a\tb\nc\t\xe9t\xe9\ne\tf\n");
  config.path = dir.file("latin1.tsv");
  config.units = "chars";
  expect_error<IoError>([&] { make_pair_task(config); }, {"line 2", "not valid UTF-8"});
  config.units = "words";
  expect_error<ConfigError>([&] { make_pair_task(config); }, {"data.units is 'words'"});
  PairDataConfig copy;
  copy.vocab = 3;
  expect_error<ConfigError>([&] { make_pair_task(copy); }, {"data.vocab is 3", "at least 4"});
  copy.vocab = 8;
  copy.length = 6;
  copy.max_symbols = 6;
  expect_error<ConfigError>([&] { make_pair_task(copy); }, {"data.max_symbols 6", "= 5"});
  expect_error<ConfigError>([] { parse_pair_task_kind("swap"); }, {"'swap'"});
}

}  // namespace
}  // namespace reformer::data
