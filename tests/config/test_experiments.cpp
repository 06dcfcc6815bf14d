// Every experiments/*.toml of the source tree loads, validates and survives a
// round trip through to_toml.
#include "reformer/config/run_config.hpp"
#include "reformer/core/error.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

namespace reformer {
namespace {

namespace fs = std::filesystem;
using attention::AttentionKind;
using config::RunConfig;

fs::path experiments_dir() { return fs::path(REFORMER_SOURCE_DIR) / "experiments"; }

std::vector<fs::path> experiment_configs() {
  std::vector<fs::path> paths;
  for (const auto& entry : fs::directory_iterator(experiments_dir()))
    if (entry.path().extension() == ".toml") paths.push_back(entry.path());
  std::sort(paths.begin(), paths.end());
  return paths;
}

RunConfig load(const std::string& name, const std::vector<std::string>& overrides = {}) {
  return config::load_run_config((experiments_dir() / name).string(), overrides);
}

TEST(Experiments, EveryConfigLoadsAndRoundTrips) {
  const auto paths = experiment_configs();
  std::vector<std::string> names;
  for (const auto& path : paths) {
    names.push_back(path.filename().string());
    SCOPED_TRACE(path.string());
    RunConfig c;
    try {
      c = config::load_run_config(path.string(), {});
    } catch (const Error& e) {
      ADD_FAILURE() << e.what();
      continue;
    }
    EXPECT_EQ(c.run_dir, "runs/" + path.stem().string());
    const RunConfig back = config::parse_run_config(config::to_toml(c), "resolved.toml", {});
    EXPECT_EQ(config::first_difference(c, back), "");
  }
  for (const char* expected :
       {"duplication_lsh.toml", "duplication_full.toml", "char_lm.toml", "enwik8_paper.toml"})
    EXPECT_NE(std::find(names.begin(), names.end(), expected), names.end()) << expected;
}

TEST(Experiments, DuplicationRunsDifferOnlyInAttention) {
  const RunConfig lsh = load("duplication_lsh.toml");
  const RunConfig full = load("duplication_full.toml");
  EXPECT_EQ(lsh.model.attention, std::vector<AttentionKind>{AttentionKind::Lsh});
  EXPECT_EQ(full.model.attention, std::vector<AttentionKind>{AttentionKind::Full});
  EXPECT_EQ(config::first_difference(lsh, full, {"run", "model.attention"}), "");
  EXPECT_EQ(lsh.data.task, data::TaskKind::Duplication);
  EXPECT_EQ(lsh.data.length, 256);
  EXPECT_EQ(lsh.model.layers, 1);
  EXPECT_EQ(lsh.model.lsh.n_hashes, 2);
  EXPECT_EQ(lsh.train.batch, 32);
  // The paper's evaluation of a full-attention model with LSH is one override away.
  EXPECT_EQ(load("duplication_full.toml", {"model.attention=[\"lsh\"]"}).model.attention,
            std::vector<AttentionKind>{AttentionKind::Lsh});
}

TEST(Experiments, Enwik8MatchesTheReference) {
  const RunConfig c = load("enwik8_paper.toml");
  EXPECT_EQ(c.model.layers, 12);
  EXPECT_EQ(c.model.d_model, 1024);
  EXPECT_EQ(c.model.d_ff, 4096);
  EXPECT_EQ(c.model.heads * c.model.d_head, 8 * 128);
  EXPECT_EQ(c.model.layer_kind(2), AttentionKind::Lsh);
  EXPECT_EQ(c.model.layer_kind(10), AttentionKind::Lsh);
  EXPECT_EQ(c.model.layer_kind(11), AttentionKind::Local);
  EXPECT_EQ(c.model.resolved_axial_shape(), (std::vector<Index>{128, 512}));
  EXPECT_EQ(c.model.lsh.n_hashes, 4);
  EXPECT_EQ(c.data.length, 65536);
  EXPECT_EQ(c.train.adam.eps, 1e-9);
  // Another length must still fit the chunks and the axial table.
  EXPECT_THROW(load("enwik8_paper.toml", {"data.length=100000"}), ConfigError);
}

}  // namespace
}  // namespace reformer
