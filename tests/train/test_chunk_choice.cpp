// "auto" feed-forward and loss chunks (train/chunk_choice.hpp, issue 46 item
// 3): the largest chunk whose predicted peak is no higher than with chunks of
// kAutoChunkFloor rows, for every family; a run builds its model with them
// (`reformer memory` measures them: test_memory_sweep.cpp), and a model given
// an unresolved "auto" refuses it by name.
#include "reformer/config/run_config.hpp"
#include "reformer/core/error.hpp"
#include "reformer/models/reformer_lm.hpp"
#include "reformer/models/transformer_xl.hpp"
#include "reformer/train/chunk_choice.hpp"
#include "reformer/train/memory_sweep.hpp"
#include "reformer/train/model_family.hpp"
#include "reformer/train/trainer.hpp"
#include "support/checks.hpp"
#include "support/run_configs.hpp"
#include "support/temp_dir.hpp"

#include <gtest/gtest.h>

#include <fstream>
#include <regex>
#include <sstream>

namespace reformer {
namespace {

using namespace reformer::testing;
using Chunks = std::pair<Index, Index>;

// A peak of max(base, 10 per feed-forward row, 3 per loss row) over `rows`.
auto peak_of(Index rows, std::int64_t base) {
  return [=](Index ff, Index loss) -> std::int64_t {
    const Index f = ff > 0 ? std::min(ff, rows) : rows, l = std::min(loss, rows);
    return std::max({base, std::int64_t(f) * 10, std::int64_t(l) * 3});
  };
}

TEST(ChunkChoice, PicksTheLargestChunkThatDoesNotRaiseThePeak) {
  const Index rows = 20000;
  // The feed-forward's term stays at or below the rest up to 4096 rows.
  EXPECT_EQ(train::choose_chunks(kAutoChunk, 64, rows, peak_of(rows, 4096 * 10)), Chunks(4096, 64));
  EXPECT_EQ(train::choose_chunks(kAutoChunk, 64, rows, peak_of(rows, 4096 * 10 + 9)),
            Chunks(4096, 64));
  // Nothing raises the peak: all rows for both (the feed-forward's 0).
  EXPECT_EQ(train::choose_chunks(kAutoChunk, kAutoChunk, rows, peak_of(rows, rows * 10)),
            Chunks(0, rows));
  // The feed-forward's term is the peak even at the floor: the floor.
  EXPECT_EQ(train::choose_chunks(kAutoChunk, 64, rows, peak_of(rows, 1)),
            Chunks(train::kAutoChunkFloor, 64));
  // The loss: 16384 rows cost what the rest costs, all 20000 more.
  EXPECT_EQ(train::choose_chunks(100, kAutoChunk, rows, peak_of(rows, 16384 * 3)),
            Chunks(100, 16384));
  // Given rows are kept.
  EXPECT_EQ(train::choose_chunks(777, 55, rows, peak_of(rows, 1)), Chunks(777, 55));
  // At most the floor's rows: all rows at once.
  EXPECT_EQ(train::choose_chunks(kAutoChunk, kAutoChunk, 1000, peak_of(1000, 1)), Chunks(0, 1000));
}

// A run's config of each family with automatic chunks.
config::RunConfig family_run(const std::string& type, Index length) {
  std::ostringstream toml;
  toml << "[model]\ntype = \"" << type << "\"\nd_model = 64\nd_ff = 256\nheads = 2\n"
       << "d_head = 32\nff_chunk = \"auto\"\nloss_chunk = \"auto\"\nmax_length = " << length
       << "\n";
  if (type == "reformer" || type == "classifier")
    toml << "attention = [\"lsh\"]\nreversible = true\ncausal = "
         << (type == "reformer" ? "true" : "false") << "\n[model.lsh]\nchunk = 64\n";
  if (type == "transformer")
    toml << "positions = \"sinusoidal\"\n[model.seq2seq]\nencoder_layers = 2\ndecoder_layers = "
            "2\nencoder_attention = "
            "\"lsh\"\n[model.lsh]\nchunk = 64\n";
  toml << "[data]\nlength = " << length << "\n";
  if (type == "transformer") toml << "task = \"seq2seq_copy\"\nvocab = 7\n";
  if (type == "transformer_xl") toml << "task = \"bytes\"\npath = \"unread.txt\"\nvocab = 256\n";
  if (type == "classifier") toml << "task = \"matching_ends\"\nvocab = 8\n";
  return config::parse_run_config(toml.str(), "auto.toml", {});
}

// Every family: the resolved chunks leave the predicted peak where the floor's
// chunks put it, and the next larger candidate raises it.
TEST(ChunkChoice, EveryFamilyKeepsThePeakOfTheFloorChunks) {
  const Index batch = 2, length = 4096, rows = batch * length;
  for (const std::string type : {"reformer", "transformer", "transformer_xl", "classifier"}) {
    SCOPED_TRACE(type);
    const auto asked = family_run(type, length);
    const auto& family = train::model_family(asked);
    const auto resolved = train::resolve_auto_chunks(asked, batch, true);
    const Index ff = resolved.model.ff_chunk, loss = resolved.model.loss_chunk;
    EXPECT_TRUE(ff == 0 || (ff >= train::kAutoChunkFloor && ff < rows)) << ff;
    EXPECT_TRUE(loss >= train::kAutoChunkFloor && loss <= rows) << loss;
    auto peak = [&](Index f, Index l) {
      auto c = asked;
      c.model.ff_chunk = f;
      c.model.loss_chunk = l;
      return family.predict_run_memory(c, batch, true).peak;
    };
    const auto floor = train::kAutoChunkFloor;
    EXPECT_LE(peak(ff, loss), peak(floor, floor));
    if (ff > 0) EXPECT_GT(peak(2 * ff < rows ? 2 * ff : 0, loss), peak(floor, floor));
    if (loss < rows) EXPECT_GT(peak(ff, std::min(2 * loss, rows)), peak(floor, floor));
    // Explicit chunks are left alone.
    auto given = asked;
    given.model.ff_chunk = 96;
    given.model.loss_chunk = 80;
    const auto kept = train::resolve_auto_chunks(given, batch, true);
    EXPECT_EQ(kept.model.ff_chunk, 96);
    EXPECT_EQ(kept.model.loss_chunk, 80);
  }
}

// The Reformer of the GPU goal (6 layers, d_model 256, d_ff 1024, LSH-2,
// reversible) at 16K and 64K: the feed-forward in L/4 (reformer-pytorch's
// ff_chunks 4; L/2 would raise the peak), the loss in one chunk (its logits
// fit in the workspace, idle while the loss runs; docs/memory.md).
TEST(ChunkChoice, TheReformerOfTheGpuGoalTakesQuarterChunksAndOneLossChunk) {
  for (const Index length : {Index(16384), Index(65536)}) {
    auto c = family_run("reformer", length);
    c.model.d_model = 256;
    c.model.d_ff = 1024;
    c.model.heads = 4;
    c.model.d_head = 64;
    c.model.layers = 6;
    c.model.vocab = 256;
    c.model.lsh.n_hashes = 2;
    const auto resolved = train::resolve_auto_chunks(c, 1, true);
    EXPECT_EQ(resolved.model.ff_chunk, length / 4) << length;
    EXPECT_EQ(resolved.model.loss_chunk, length) << length;
    EXPECT_EQ(train::describe_auto_chunks(c, resolved),
              ", feed-forward in chunks of " + std::to_string(length / 4) +
                  " rows (auto), loss in chunks of " + std::to_string(length) + " rows (auto)");
  }
}

// A run builds its model with the chunks it resolved: the first line names
// them, config.toml keeps "auto", and the losses are those of the same rows
// given by hand.
TEST(ChunkChoice, TrainingUsesTheResolvedChunks) {
  TempDir dir;
  const std::vector<std::string> shape = {
      "data.length=4096",   "model.max_length=4096", "train.batch=1",
      "train.accumulate=1", "model.lsh.chunk=64",    "model.local.chunk=64",
      "train.eval_every=0", "model.dropout=0",       "model.attention_dropout=0"};
  auto with = [&](std::vector<std::string> more) {
    more.insert(more.begin(), shape.begin(), shape.end());
    return more;
  };
  std::ostringstream out;
  const auto asked = tiny_run(dir.path() + "/auto", 2, true,
                              with({"model.ff_chunk=auto", "model.loss_chunk=auto"}));
  const auto automatic = train::run_training(asked, quiet_options(&out));
  const auto resolved = train::resolve_auto_chunks(asked, 1, true);
  const std::string line = out.str();
  EXPECT_NE(line.find(train::describe_auto_chunks(asked, resolved)), std::string::npos) << line;
  EXPECT_NE(line.find("(auto)"), std::string::npos) << line;
  std::ifstream saved(dir.path() + "/auto/config.toml");
  const std::string text((std::istreambuf_iterator<char>(saved)), {});
  EXPECT_NE(text.find("ff_chunk = \"auto\""), std::string::npos);
  const auto by_hand = train::run_training(
      tiny_run(dir.path() + "/hand", 2, true,
               with({"model.ff_chunk=" + std::to_string(resolved.model.ff_chunk),
                     "model.loss_chunk=" + std::to_string(resolved.model.loss_chunk)})),
      quiet_options());
  ASSERT_EQ(automatic.losses.size(), 2u);
  ASSERT_EQ(by_hand.losses.size(), 2u);
  for (std::size_t i = 0; i < 2; ++i) EXPECT_EQ(automatic.losses[i], by_hand.losses[i]);
}

// A model built straight from a config that still says "auto" refuses it,
// naming the key's value and who resolves it.
TEST(ChunkChoice, ModelsRefuseUnresolvedAuto) {
  models::ReformerConfig c;
  c.vocab = 8;
  c.d_model = 16;
  c.d_ff = 16;
  c.heads = 2;
  c.d_head = 8;
  c.layers = 1;
  c.attention = {attention::AttentionKind::Local};
  c.local.chunk = 8;
  c.max_length = 16;
  c.validate();
  c.ff_chunk = kAutoChunk;
  c.validate();  // a run's config may say "auto"
  ParameterSet<double> params;
  expect_error<ConfigError>([&] { models::ReformerLM<double> model(c, params); },
                            {"chunk is -1", "\"auto\"", "resolves"});
  c.ff_chunk = 0;
  c.loss_chunk = kAutoChunk;
  ParameterSet<double> more;
  expect_error<ConfigError>([&] { models::ReformerLM<double> model(c, more); },
                            {"loss_chunk is -1", "\"auto\""});
  models::TransformerXLConfig x;
  x.ff_chunk = kAutoChunk;
  x.validate();
  ParameterSet<double> xl;
  expect_error<ConfigError>([&] { models::TransformerXL<double> model(x, xl); },
                            {"chunk is -1", "\"auto\""});
}

}  // namespace
}  // namespace reformer
