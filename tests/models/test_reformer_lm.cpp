#include "reformer/core/error.hpp"
#include "reformer/core/memory_tracker.hpp"
#include "reformer/models/reformer_lm.hpp"
#include "support/batch_share.hpp"
#include "support/checks.hpp"
#include "support/chunk_settings.hpp"
#include "support/gradcheck.hpp"
#include "support/kernel_settings.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace reformer {
namespace {

using namespace reformer::testing;
using attention::AttentionKind;
using models::ModelCall;
using models::ReformerConfig;
using models::ReformerLM;
using models::ReformerState;
using IdView = Kokkos::View<int**, Layout, MemSpace>;

ReformerConfig tiny_config() {
  ReformerConfig c;
  c.vocab = 11;
  c.d_model = 6;
  c.d_ff = 10;
  c.heads = 2;
  c.d_head = 3;
  c.layers = 2;
  c.attention = {AttentionKind::Local, AttentionKind::Lsh};
  c.positions = models::PositionKind::Axial;
  c.max_length = 8;
  c.axial_shape = {2, 4};
  c.axial_dims = {2, 4};
  c.ff_chunk = 5;
  c.dropout = 0.1;
  c.attention_dropout = 0.1;
  c.label_smoothing = 0.1;
  c.loss_chunk = 6;
  c.lsh.chunk = 4;
  c.lsh.n_hashes = 2;
  c.lsh.n_buckets = {4};
  c.local.chunk = 4;
  return c;
}

struct ModelCase {
  ParameterSet<double> params;
  ReformerLM<double> model;
  ReformerState<double> state;
  IdView ids, targets;
  ModelCall call{{9, 4}, true};
  int ignore = 3;

  explicit ModelCase(const ReformerConfig& config, Index batch = 2, Index length = 8)
      : model(config, params),
        ids(random_ids(batch, length, config.vocab, 1)),
        targets(random_ids(batch, length, config.vocab, 2)) {
    model.init({1, 2});
    // Non-trivial LayerNorm and bias parameters.
    std::uint64_t seed = 50;
    for (const auto& name : params.names())
      if (name.find("gamma") != std::string::npos)
        fill_uniform(params.get(name).value, ++seed, 0.5, 1.5);
      else if (name.find("beta") != std::string::npos || name.find(".b") != std::string::npos)
        fill_uniform(params.get(name).value, ++seed, -0.2, 0.2);
  }
  double loss() { return model.evaluate(ids, targets, ignore, call, state).loss; }
  ops::CrossEntropyResult gradients() {
    params.zero_grad();
    return model.forward_backward(ids, targets, ignore, call, state);
  }
};

// Three layers, LSH, local and LSH, for sequences up to max_length (axial
// positions of that shape).
ReformerConfig mixed_layers_config(Index max_length, std::vector<Index> axial_shape) {
  auto config = tiny_config();
  config.layers = 3;
  config.attention = {AttentionKind::Lsh, AttentionKind::Local, AttentionKind::Lsh};
  config.max_length = max_length;
  config.axial_shape = axial_shape;
  return config;
}

// A mask whose row b keeps its first real[b] positions.
IdView valid_prefixes(Index length, const std::vector<Index>& real) {
  IdView valid("valid", Index(real.size()), length);
  auto host_valid = Kokkos::create_mirror_view(valid);
  for (Index b = 0; b < Index(real.size()); ++b)
    for (Index j = 0; j < length; ++j) host_valid(b, j) = j < real[std::size_t(b)];
  Kokkos::deep_copy(valid, host_valid);
  return valid;
}

void expect_parameter_gradients(ModelCase& c, double tolerance) {
  c.gradients();
  auto loss = [&] { return c.loss(); };
  for (const auto& name : c.params.names()) {
    auto& p = c.params.get(name);
    EXPECT_LT(gradient_error(p.value, p.grad, loss, 12), tolerance) << name;
  }
}

// The whole model, reversible, one local and one LSH layer, dropout on.
TEST(ReformerLM, GradientCheckOfWholeModel) {
  ModelCase c(tiny_config());
  const auto result = c.gradients();
  EXPECT_GT(result.tokens, 0);
  EXPECT_NEAR(result.loss, c.loss(), 1e-12);  // forward_backward's loss is evaluate's
  expect_parameter_gradients(c, 1e-6);
}

TEST(ReformerLM, GradientCheckTiedLearnedNonReversible) {
  auto config = tiny_config();
  config.tie_embeddings = true;
  config.positions = models::PositionKind::Learned;
  config.reversible = false;
  config.attention = {AttentionKind::Full};
  ModelCase c(config);
  EXPECT_FALSE(c.params.contains("out.w"));
  expect_parameter_gradients(c, 1e-6);
}

// With a padding mask and a length that does not fit the chunks (14, run as
// 16): LSH windows that skip padding-only chunks and cross rounds, in the
// reversible backward's recompute and the chunked backward's colours.
TEST(ReformerLM, GradientCheckWithPaddingMask) {
  auto config = mixed_layers_config(16, {4, 4});
  config.lsh.n_before = 2;
  ModelCase c(config, 2, 14);
  c.call.valid = valid_prefixes(14, {11, 6});
  // Only real positions whose target is not the ignore id count.
  auto targets = Kokkos::create_mirror_view_and_copy(HostSpace(), c.targets);
  Index counted = 0;
  for (Index b = 0; b < 2; ++b)
    for (Index j = 0; j < (b == 0 ? 11 : 6); ++j) counted += targets(b, j) != c.ignore;
  EXPECT_EQ(c.gradients().tokens, counted);
  expect_parameter_gradients(c, 1e-6);
}

// The GPUs' streamed LSH and local kernels (core/team_scratch.hpp), run on the
// host: the same loss and gradients as the whole-window kernels through the
// reversible recompute, padding, dropout and several query groups per chunk,
// and a gradient check of their own.
TEST(ReformerLM, StreamedChunkedKernelsGiveTheSameModel) {
  auto config = mixed_layers_config(64, {8, 8});
  config.lsh.chunk = 16;
  config.local.chunk = 32;
  ModelCase c(config, 2, 60);
  c.call.valid = valid_prefixes(60, {60, 41});
  ScopedChunkProducts fused(attention::ChunkProducts::fused);
  ScopedChunkedShape whole(ChunkedKernelShape::whole_window);
  const auto expected = c.gradients();
  const auto grads = to_host(c.params.grads());
  ScopedChunkedShape streamed(ChunkedKernelShape::streamed);
  const auto result = c.gradients();
  EXPECT_NEAR(result.loss, expected.loss, 1e-12);
  EXPECT_LT(relative_error(to_host(c.params.grads()), grads), 1e-12);
  expect_parameter_gradients(c, 1e-6);
}

// The batched shape of the LSH and local layers (ChunkProducts::batched:
// gathered chunks, strided-batched products) in the whole model: the fused
// kernels' loss and gradients through the reversible recompute (which reuses
// the forward's LSH plan), padding, dropout and n_before 2, in slices of one
// chunk and of everything, and a gradient check of its own.
TEST(ReformerLM, BatchedChunkProductsGiveTheSameModel) {
  auto config = mixed_layers_config(64, {8, 8});
  config.lsh.chunk = 16;
  config.lsh.n_before = 2;
  config.local.chunk = 32;
  ModelCase c(config, 2, 60);
  c.call.valid = valid_prefixes(60, {60, 41});
  ScopedChunkProducts fused(attention::ChunkProducts::fused);
  const auto expected = c.gradients();
  const auto grads = to_host(c.params.grads());
  ScopedChunkProducts batched(attention::ChunkProducts::batched);
  for (const std::size_t budget : {std::size_t(1), std::size_t(64) << 20}) {
    ScopedChunkSlice slice(budget);
    const auto result = c.gradients();
    EXPECT_NEAR(result.loss, expected.loss, 1e-12) << budget;
    EXPECT_LT(relative_error(to_host(c.params.grads()), grads), 1e-12) << budget;
  }
  expect_parameter_gradients(c, 1e-6);
}

// Same weights, same dropout and LSH streams: the reversible backward (inputs
// rebuilt from outputs) and the stored one give the same gradients.
TEST(ReformerLM, ReversibleGradientsEqualNonReversible) {
  auto config = tiny_config();
  config.layers = 5;
  config.max_length = 16;
  config.axial_shape = {4, 4};
  ModelCase rev(config, 2, 16);
  config.reversible = false;
  ModelCase stored(config, 2, 16);
  Kokkos::deep_copy(stored.params.values(), rev.params.values());
  const auto a = rev.gradients();
  const auto b = stored.gradients();
  EXPECT_NEAR(a.loss, b.loss, 1e-12);
  const double error = relative_error(to_host(rev.params.grads()), to_host(stored.params.grads()));
  EXPECT_LT(error, 1e-5);
  EXPECT_LT(error, 1e-10);  // in double the rebuilt inputs are exact to rounding
  for (const auto& name : rev.params.names())
    EXPECT_LT(
        relative_error(to_host(rev.params.get(name).grad), to_host(stored.params.get(name).grad)),
        1e-5)
        << name;
}

// Exact attention is full attention computed in O(L) memory: a model with
// exact layers gives the loss and gradients of the same model with full layers
// (separate q and k, reversible, dropout on: same weights, same dropout masks).
TEST(ReformerLM, ExactAttentionModelEqualsFullAttentionModel) {
  auto config = tiny_config();
  config.layers = 3;
  config.max_length = 16;
  config.axial_shape = {4, 4};
  config.attention = {AttentionKind::Exact};
  ModelCase exact(config, 2, 16);
  config.attention = {AttentionKind::Full};
  ModelCase full(config, 2, 16);
  ASSERT_EQ(exact.params.names(), full.params.names());
  EXPECT_FALSE(exact.params.contains("layers.0.attn.w_qk"));
  Kokkos::deep_copy(full.params.values(), exact.params.values());
  const auto a = exact.gradients();
  const auto b = full.gradients();
  EXPECT_NEAR(a.loss, b.loss, 1e-12 * std::abs(b.loss));
  EXPECT_LT(relative_error(to_host(exact.params.grads()), to_host(full.params.grads())), 1e-12);
  for (const auto& name : exact.params.names())
    EXPECT_LT(
        relative_error(to_host(exact.params.get(name).grad), to_host(full.params.get(name).grad)),
        1e-11)
        << name;
}

// The same call replays the same dropout masks and LSH rotations; another
// key draws others; evaluation (training = false) has no dropout at all.
// The per-layer gradient ranges data parallelism sums while the backward goes
// on: layer i's range holds exactly the parameters named "layers.<i>.", the
// ranges are disjoint and in layer order.
TEST(ReformerLM, LayerRangesHoldExactlyEachLayersParameters) {
  for (const bool tied : {false, true}) {
    auto config = tiny_config();
    config.layers = 3;
    config.tie_embeddings = tied;
    ParameterSet<double> params;
    models::ReformerLM<double> model(config, params);
    const auto& ranges = model.layer_ranges();
    ASSERT_EQ(Index(ranges.size()), config.layers);
    for (std::size_t i = 0; i + 1 < ranges.size(); ++i)
      EXPECT_LE(ranges[i].second, ranges[i + 1].first);
    for (const auto& p : params) {
      const std::string prefix = "layers.";
      const Index layer =
          p.name.rfind(prefix, 0) == 0 ? std::stoll(p.name.substr(prefix.size())) : -1;
      for (Index i = 0; i < config.layers; ++i) {
        const auto [first, end] = ranges[std::size_t(i)];
        const bool inside = p.offset >= first && p.offset + p.size() <= end;
        EXPECT_EQ(inside, layer == i)
            << p.name << " and layer " << i << " [" << first << ", " << end << ")";
      }
    }
  }
}

// Data parallelism: rows [2, 4) of a batch, run alone with first_row 2, draw
// the masks the whole batch draws for them (embedding, attention
// probabilities and output, feed-forward; local and LSH layers; reversible and
// stored; padding gives the rows different token counts), so the two shares
// with the trainer's loss weights give the whole batch's loss and gradients.
TEST(ReformerLM, ShareOfTheBatchDrawsTheWholeBatchMasks) {
  for (const bool reversible : {true, false}) {
    SCOPED_TRACE(reversible ? "reversible" : "stored");
    auto config = tiny_config();
    config.reversible = reversible;
    config.dropout = config.attention_dropout = 0.2;
    ModelCase c(config, 4, 8);
    const auto valid = valid_prefixes(8, {8, 5, 7, 6});
    auto run = [&](Index first, Index count, Index first_row, double loss_scale) {
      ModelCall call = c.call;
      call.valid = share_rows(valid, first, count);
      call.first_row = first_row;
      call.loss_scale = loss_scale;
      ReformerState<double> state;
      c.params.zero_grad();
      const auto r =
          c.model.forward_backward(share_rows(c.ids, first, count),
                                   share_rows(c.targets, first, count), c.ignore, call, state);
      return ShareResult{r.loss, r.tokens, to_host(c.params.grads())};
    };
    expect_shares_make_the_whole_batch(run, 4, 2);
  }
}

TEST(ReformerLM, RandomnessComesFromTheCallKey) {
  ModelCase c(tiny_config());
  const double first = c.loss();
  EXPECT_EQ(c.loss(), first);
  c.call.key.stream = 5;
  EXPECT_NE(c.loss(), first);
  auto config = tiny_config();
  config.dropout = config.attention_dropout = 0.0;
  ModelCase plain(config);
  Kokkos::deep_copy(plain.params.values(), c.params.values());
  c.call.training = false;
  plain.call = c.call;
  EXPECT_NEAR(c.loss(), plain.loss(), 1e-14);
}

// logits_at agrees with the loss: -log softmax(logits)[target] averaged over
// the counted positions is evaluate()'s loss (no smoothing).
TEST(ReformerLM, LogitsAgreeWithLoss) {
  for (bool tied : {false, true}) {
    auto config = tiny_config();
    config.label_smoothing = 0.0;
    config.tie_embeddings = tied;
    ModelCase c(config);
    c.call.training = false;
    const double want = c.loss();
    const auto targets = to_host(c.targets);
    View2<double> logits("logits", 2, config.vocab);
    double sum = 0;
    Index count = 0;
    for (Index t = 0; t < 8; ++t) {
      c.model.logits_at(c.ids, t, logits, c.state);
      const auto z = to_host(logits);
      for (Index b = 0; b < 2; ++b) {
        const int target = int(targets[b * 8 + t]);
        if (target == c.ignore) continue;
        double m = -INFINITY, s = 0;
        for (Index v = 0; v < config.vocab; ++v) m = std::max(m, z[b * config.vocab + v]);
        for (Index v = 0; v < config.vocab; ++v) s += std::exp(z[b * config.vocab + v] - m);
        sum += m + std::log(s) - z[b * config.vocab + target];
        ++count;
      }
    }
    EXPECT_NEAR(sum / count, want, 1e-12) << (tied ? "tied" : "untied");
  }
}

// Peak memory of a training step (parameters excluded): flat in the depth
// when reversible, growing by the same amount per layer when not.
TEST(ReformerLM, ReversibleMemoryDoesNotGrowWithDepth) {
  auto& tracker = MemoryTracker::instance();
  tracker.install();
  auto step_peak = [&](Index layers, bool reversible) {
    ReformerConfig c;
    c.vocab = 32;
    c.d_model = 32;
    c.d_ff = 64;
    c.heads = 2;
    c.d_head = 16;
    c.layers = layers;
    c.attention = {AttentionKind::Local, AttentionKind::Lsh};
    c.reversible = reversible;
    c.positions = models::PositionKind::Sinusoidal;
    c.max_length = 512;
    c.ff_chunk = 128;
    c.lsh.chunk = 32;
    c.local.chunk = 32;
    ParameterSet<float> params;
    ReformerLM<float> model(c, params);
    model.init({1, 1});
    IdView ids = random_ids(1, 512, 32, 3), targets = random_ids(1, 512, 32, 4);
    ReformerState<float> state;
    const std::string space = MemSpace::name();
    tracker.reset_peaks();
    const auto before = tracker.space(space).current_bytes;
    model.forward_backward(ids, targets, -1, {{1, 1}, true}, state);
    return double(tracker.space(space).peak_bytes - before);
  };
  const double rev2 = step_peak(2, true), rev8 = step_peak(8, true);
  const double nr2 = step_peak(2, false), nr5 = step_peak(5, false), nr8 = step_peak(8, false);
  EXPECT_LT(rev8, 1.10 * rev2) << rev2 << " -> " << rev8;
  // Linear: the same increment for every added layer (within 10%).
  EXPECT_GT(nr8, 2.0 * nr2);
  EXPECT_NEAR((nr8 - nr5) / (nr5 - nr2), 1.0, 0.1);
}

TEST(ReformerLM, ClearErrors) {
  ModelCase c(tiny_config());
  auto bad = random_ids(2, 8, 11, 5);
  Kokkos::deep_copy(Kokkos::subview(bad, 1, 3), 42);
  expect_error<ConfigError>([&] { c.model.evaluate(bad, c.targets, -1, c.call, c.state); },
                            {"ids", "42"});
  auto short_targets = random_ids(2, 4, 11, 5);
  expect_error<ShapeError>(
      [&] { c.model.forward_backward(c.ids, short_targets, -1, c.call, c.state); }, {"targets"});
  auto too_long = random_ids(2, 16, 11, 6);
  expect_error<ConfigError>([&] { c.model.evaluate(too_long, too_long, -1, c.call, c.state); },
                            {"16"});
  View2<double> logits("logits", 2, 11);
  expect_error<ShapeError>([&] { c.model.logits_at(c.ids, 8, logits, c.state); }, {"position 8"});
}

}  // namespace
}  // namespace reformer
