// ReformerConfig and TrainConfig on their own (without TOML).
#include "reformer/config/train_config.hpp"
#include "reformer/core/error.hpp"
#include "reformer/models/reformer_config.hpp"
#include "reformer/models/transformer.hpp"
#include "reformer/models/transformer_xl.hpp"
#include "support/checks.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

namespace reformer {
namespace {

using attention::AttentionKind;
using config::TrainConfig;
using models::PositionKind;
using models::ReformerConfig;
using testing::expect_error;

TEST(ReformerConfig, PositionKindNames) {
  for (const auto kind :
       {PositionKind::None, PositionKind::Sinusoidal, PositionKind::Learned, PositionKind::Axial})
    EXPECT_EQ(models::parse_position_kind(models::to_string(kind)), kind);
  EXPECT_STREQ(models::to_string(PositionKind::Axial), "axial");
  expect_error<ConfigError>([] { models::parse_position_kind("Axial"); },
                            {"\"Axial\" is unknown", "none, sinusoidal, learned or axial"});
}

// Every family's config holds the one ModelSizes with its own defaults, and
// one assignment carries them from a family to another.
TEST(ModelSizes, EachFamilyKeepsItsDefaults) {
  const auto expect_sizes = [](const models::ModelSizes& s, Index d_model, Index d_ff, Index d_head,
                               double dropout, double label_smoothing) {
    EXPECT_EQ(s.d_model, d_model);
    EXPECT_EQ(s.d_ff, d_ff);
    EXPECT_EQ(s.heads, 4);
    EXPECT_EQ(s.d_head, d_head);
    EXPECT_EQ(s.dropout, dropout);
    EXPECT_EQ(s.attention_dropout, 0.0);
    EXPECT_EQ(s.layer_norm_eps, 1e-5);
    EXPECT_EQ(s.label_smoothing, label_smoothing);
    EXPECT_EQ(s.ff_chunk, 0);
    EXPECT_EQ(s.loss_chunk, 1024);
  };
  expect_sizes(ReformerConfig{}.sizes(), 256, 512, 64, 0.0, 0.0);
  expect_sizes(models::TransformerConfig{}.sizes(), 64, 128, 16, 0.1, 0.1);
  expect_sizes(models::TransformerXLConfig{}.sizes(), 128, 512, 32, 0.0, 0.0);

  ReformerConfig lm;
  lm.d_model = 96;
  lm.layer_norm_eps = 1e-12;
  lm.loss_chunk = 7;
  models::TransformerXLConfig xl;
  xl.sizes() = lm.sizes();
  EXPECT_EQ(xl.d_model, 96);
  EXPECT_EQ(xl.d_head, 64);  // the LM's default, not the XL's 32
  EXPECT_EQ(xl.layer_norm_eps, 1e-12);
  EXPECT_EQ(xl.loss_chunk, 7);
  EXPECT_EQ(xl.vocab, 256);  // the rest of the family's config stays
}

TEST(ReformerConfig, DefaultsAreValid) {
  EXPECT_NO_THROW(ReformerConfig{}.validate());
  EXPECT_NO_THROW(ReformerConfig{}.validate_length(256));
}

TEST(ReformerConfig, ValidateNamesTheField) {
  auto with = [](auto change) {
    ReformerConfig c;
    change(c);
    return c;
  };
  const std::vector<std::pair<ReformerConfig, std::vector<std::string>>> cases = {
      {with([](ReformerConfig& c) { c.vocab = 0; }), {"model.vocab is 0", "positive"}},
      {with([](ReformerConfig& c) { c.d_ff = -1; }), {"model.d_ff is -1"}},
      {with([](ReformerConfig& c) { c.heads = 0; }), {"model.heads is 0"}},
      {with([](ReformerConfig& c) { c.layers = 0; }), {"model.layers is 0"}},
      {with([](ReformerConfig& c) { c.attention.clear(); }), {"model.attention is empty"}},
      {with([](ReformerConfig& c) { c.max_length = 0; }), {"model.max_length is 0"}},
      {with([](ReformerConfig& c) { c.ff_chunk = -2; }), {"model.ff_chunk is -2", ">= 0"}},
      {with([](ReformerConfig& c) { c.loss_chunk = 0; }), {"model.loss_chunk is 0"}},
      {with([](ReformerConfig& c) { c.attention_dropout = -0.1; }),
       {"model.attention_dropout is -0.1", "[0, 1)"}},
      {with([](ReformerConfig& c) { c.dropout = std::nan(""); }), {"model.dropout is nan"}},
      {with([](ReformerConfig& c) { c.label_smoothing = 1; }), {"model.label_smoothing is 1"}},
      {with([](ReformerConfig& c) { c.axial_shape = {4096}; }),
       {"model.axial_shape is [4096]", "two factors"}},
      {with([](ReformerConfig& c) {
         c.axial_shape = {-64, -64};
       }),
       {"model.axial_shape is [-64, -64]", "positive"}},
      {with([](ReformerConfig& c) {
         c.axial_dims = {256, 0};
       }),
       {"model.axial_dims is [256, 0]", "positive"}},
      {with([](ReformerConfig& c) { c.lsh.chunk = 0; }), {"model.lsh.chunk is 0"}},
      {with([](ReformerConfig& c) { c.lsh.n_before = -1; }), {"model.lsh.n_before is -1"}},
      {with([](ReformerConfig& c) { c.local.chunk = -4; }), {"model.local.chunk is -4"}},
      {with([](ReformerConfig& c) {
         c.attention = {AttentionKind::Local};
         c.d_head = 129;
       }),
       {"model.d_head is 129", "local attention supports at most 128"}},
  };
  for (const auto& test : cases)  // (no structured binding: nvcc cannot capture one)
    expect_error<ConfigError>([&] { test.first.validate(); }, test.second);
  // Full attention has no d_head limit; axial sizes do not matter without axial positions.
  EXPECT_NO_THROW(with([](ReformerConfig& c) {
                    c.attention = {AttentionKind::Full};
                    c.d_head = 256;
                    c.positions = PositionKind::Sinusoidal;
                    c.axial_shape = {3, 3};
                  }).validate());
}

TEST(ReformerConfig, LengthFitsChunksAndPositions) {
  ReformerConfig c;  // LSH, chunk 64, axial up to 4096
  EXPECT_NO_THROW(c.validate_length(4096));
  EXPECT_NO_THROW(c.validate_length(40));  // one LSH chunk: any length
  expect_error<ConfigError>([&] { c.validate_length(100); },
                            {"sequence length 100", "model.lsh.chunk = 64", "128"});
  expect_error<ConfigError>([&] { c.validate_length(8192); },
                            {"8192", "longer than model.max_length = 4096", "axial"});
  expect_error<ConfigError>([&] { c.validate_length(0); }, {"sequence length 0", "positive"});
  c.positions = PositionKind::Sinusoidal;
  EXPECT_NO_THROW(c.validate_length(8192));  // no table to outgrow

  c.attention = {AttentionKind::Local, AttentionKind::Lsh};
  c.layers = 4;
  c.local.chunk = 128;
  expect_error<ConfigError>([&] { c.validate_length(64); },
                            {"model.local.chunk = 128", "layers 0 and 2", "128"});
  EXPECT_NO_THROW(c.validate_length(256));
  c.attention = {AttentionKind::Full};
  EXPECT_NO_THROW(c.validate_length(100));
}

TEST(ReformerConfig, LayerKindsCycleThroughThePattern) {
  ReformerConfig c;
  c.layers = 12;
  c.attention = {AttentionKind::Local, AttentionKind::Local, AttentionKind::Lsh,
                 AttentionKind::Local};
  EXPECT_EQ(c.layer_kind(0), AttentionKind::Local);
  EXPECT_EQ(c.layer_kind(2), AttentionKind::Lsh);
  EXPECT_EQ(c.layer_kind(6), AttentionKind::Lsh);
  EXPECT_EQ(c.layer_kind(11), AttentionKind::Local);
  expect_error<ConfigError>([&] { c.layer_kind(12); }, {"layer 12", "12 layers"});

  c.causal = false;
  c.dropout = 0.1;
  c.attention_dropout = 0.2;
  c.lsh.n_hashes = 4;
  c.local.chunk = 32;
  const auto a = c.attention_config(2);
  EXPECT_EQ(a.kind, AttentionKind::Lsh);
  EXPECT_EQ(a.d_model, c.d_model);
  EXPECT_EQ(a.heads, c.heads);
  EXPECT_EQ(a.d_head, c.d_head);
  EXPECT_FALSE(a.causal);
  EXPECT_FALSE(a.shared_qk.has_value());
  EXPECT_TRUE(a.shares_qk());
  EXPECT_EQ(a.attention_dropout, 0.2);
  EXPECT_EQ(a.output_dropout, 0.1);
  EXPECT_EQ(a.lsh.n_hashes, 4);
  EXPECT_EQ(a.local.chunk, 32);
  EXPECT_FALSE(c.attention_config(0).shares_qk());
}

TEST(ReformerConfig, AxialShapesAndWidths) {
  ReformerConfig c;
  auto shape = [&](Index max_length) {
    c.max_length = max_length;
    return c.resolved_axial_shape();
  };
  EXPECT_EQ(shape(4096), (std::vector<Index>{64, 64}));
  EXPECT_EQ(shape(65536), (std::vector<Index>{256, 256}));
  EXPECT_EQ(shape(8192), (std::vector<Index>{64, 128}));
  EXPECT_EQ(shape(12), (std::vector<Index>{3, 4}));
  EXPECT_EQ(shape(13), (std::vector<Index>{1, 13}));
  EXPECT_EQ(shape(1), (std::vector<Index>{1, 1}));
  c.axial_shape = {128, 512};
  EXPECT_EQ(c.resolved_axial_shape(), (std::vector<Index>{128, 512}));

  EXPECT_EQ(c.resolved_axial_dims(), (std::vector<Index>{128, 128}));
  c.d_model = 255;
  EXPECT_EQ(c.resolved_axial_dims(), (std::vector<Index>{127, 128}));
  c.axial_dims = {55, 200};
  EXPECT_EQ(c.resolved_axial_dims(), (std::vector<Index>{55, 200}));
}

TEST(TrainConfig, DefaultsAreValid) { EXPECT_NO_THROW(TrainConfig{}.validate()); }

TEST(TrainConfig, ValidateNamesTheField) {
  auto with = [](auto change) {
    TrainConfig c;
    change(c);
    return c;
  };
  const std::vector<std::pair<TrainConfig, std::vector<std::string>>> cases = {
      {with([](TrainConfig& c) { c.steps = 0; }), {"train.steps is 0", "positive"}},
      {with([](TrainConfig& c) { c.batch = -1; }), {"train.batch is -1"}},
      {with([](TrainConfig& c) { c.accumulate = 0; }), {"train.accumulate is 0"}},
      {with([](TrainConfig& c) { c.optimizer = "sgd"; }), {"train.optimizer is \"sgd\""}},
      {with([](TrainConfig& c) { c.optimizer = "adamw"; }),
       {"train.optimizer is adamw", "decoupled_weight_decay is false"}},
      {with([](TrainConfig& c) { c.adam.eps = 0; }), {"train.adam.eps is 0"}},
      {with([](TrainConfig& c) { c.adam.weight_decay = -1; }), {"train.adam.weight_decay is -1"}},
      {with([](TrainConfig& c) { c.learning_rate = 0; }), {"train.learning_rate is 0"}},
      {with([](TrainConfig& c) { c.learning_rate = INFINITY; }), {"train.learning_rate is inf"}},
      {with([](TrainConfig& c) { c.warmup_steps = -1; }), {"train.warmup_steps is -1"}},
      {with([](TrainConfig& c) { c.schedule = config::ScheduleKind::warmup_rsqrt; }),
       {"train.warmup_steps is 0", "warmup_rsqrt"}},
      {with([](TrainConfig& c) { c.clip_norm = -1; }), {"train.clip_norm is -1"}},
      {with([](TrainConfig& c) { c.eval_every = -1; }), {"train.eval_every is -1"}},
      {with([](TrainConfig& c) { c.eval_batches = 0; }), {"train.eval_batches is 0"}},
      {with([](TrainConfig& c) { c.log_every = -5; }), {"train.log_every is -5"}},
      {with([](TrainConfig& c) { c.checkpoint_every = -1; }), {"train.checkpoint_every is -1"}},
      {with([](TrainConfig& c) { c.keep_checkpoints = 0; }), {"train.keep_checkpoints is 0"}},
      {with([](TrainConfig& c) { c.metrics_format = "xml"; }),
       {"train.metrics_format is \"xml\"", "csv or jsonl"}},
      {with([](TrainConfig& c) { c.target_accuracy = -0.5; }), {"train.target_accuracy is -0.5"}},
      {with([](TrainConfig& c) { c.dtype = "half"; }),
       {"train.dtype is \"half\"", "float or double"}},
  };
  for (const auto& test : cases)  // (no structured binding: nvcc cannot capture one)
    expect_error<ConfigError>([&] { test.first.validate(); }, test.second);
  EXPECT_NO_THROW(with([](TrainConfig& c) {
                    c.optimizer = "adamw";
                    c.adam.decoupled_weight_decay = true;
                    c.schedule = config::ScheduleKind::noam;
                    c.warmup_steps = 4000;
                    c.target_accuracy = 1;
                  }).validate());
}

}  // namespace
}  // namespace reformer
