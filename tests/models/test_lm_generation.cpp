// The language model with padding masks and cached generation (issue 20):
//  - appending padding behind a prefix changes none of its logits (LSH sorts
//    padding behind the real items and its windows skip padding-only chunks);
//  - a length that does not fit the chunks is padded internally;
//  - cached generation gives the logits of a full forward pass on each row's
//    tokens so far, for local, full (separate and shared q/k), exact and LSH
//    layers, and an LSH layer's step equals its forward pass at the last
//    position (several rounds, look-back across rounds);
//  - bad inputs are clear errors.
#include "reformer/attention/attention_layer.hpp"
#include "reformer/core/error.hpp"
#include "reformer/core/kernel_profile.hpp"
#include "reformer/core/memory_tracker.hpp"
#include "reformer/core/shape.hpp"
#include "reformer/models/reformer_lm.hpp"
#include "support/checks.hpp"
#include "support/kernel_settings.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>

namespace reformer {
namespace {

using namespace reformer::testing;
using attention::AttentionKind;
using models::ModelCall;
using models::ReformerConfig;
using models::ReformerGeneration;
using models::ReformerLM;
using models::ReformerState;
using IdView = Kokkos::View<int**, Layout, MemSpace>;
using HostIds = Kokkos::View<int**, Layout, HostSpace>;

ReformerConfig base_config(std::vector<AttentionKind> kinds) {
  ReformerConfig c;
  c.vocab = 13;
  c.d_model = 8;
  c.d_ff = 12;
  c.heads = 2;
  c.d_head = 4;
  c.layers = Index(kinds.size());
  c.attention = kinds;
  c.positions = models::PositionKind::Axial;
  c.max_length = 48;
  c.axial_shape = {6, 8};
  c.ff_chunk = 5;
  c.lsh.chunk = 4;
  c.lsh.n_hashes = 2;
  c.lsh.n_buckets = {4};
  c.local.chunk = 4;
  c.layer_norm_eps = 1e-12;
  return c;
}

// Ids drawn from the counter RNG, host side.
HostIds host_ids(Index batch, Index length, Index vocab, std::uint64_t seed) {
  HostIds ids("ids", batch, length);
  for (Index b = 0; b < batch; ++b)
    for (Index t = 0; t < length; ++t)
      ids(b, t) = int(random_bits({seed, 7}, std::uint64_t(b * length + t)) % vocab);
  return ids;
}

template <class V>
IdView to_device(const V& host) {
  IdView ids("ids", host.extent(0), host.extent(1));
  auto mirror = Kokkos::create_mirror_view(ids);
  for (Index b = 0; b < Index(host.extent(0)); ++b)
    for (Index t = 0; t < Index(host.extent(1)); ++t) mirror(b, t) = host(b, t);
  Kokkos::deep_copy(ids, mirror);
  return ids;
}

template <class T>
struct Lm {
  ParameterSet<T> params;
  ReformerLM<T> model;
  ReformerState<T> state;
  explicit Lm(const ReformerConfig& config) : model(config, params) { model.init({3, 4}); }
  // Logits at `position` of a forward pass on one row's first `length` ids.
  std::vector<double> logits_at(const HostIds& ids, Index row, Index length, Index position,
                                RandomKey key) {
    HostIds one("one", 1, length);
    for (Index t = 0; t < length; ++t) one(0, t) = ids(row, t);
    View2<T> logits("logits", 1, model.config().vocab);
    state.call.key = key;
    model.logits_at(to_device(one), position, logits, state);
    auto host = Kokkos::create_mirror_view_and_copy(HostSpace(), logits);
    return std::vector<double>(host.data(), host.data() + host.size());
  }
};

double max_difference(const std::vector<double>& a, const std::vector<double>& b) {
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(a[i] - b[i]));
  return worst;
}

struct KindCase {
  std::string name;
  std::vector<AttentionKind> kinds;
  models::QkProjection qk = models::QkProjection::Auto;
};

std::vector<KindCase> kind_cases() {
  return {
      {"local", {AttentionKind::Local, AttentionKind::Local}},
      {"full", {AttentionKind::Full, AttentionKind::Local}},
      {"full_shared_qk", {AttentionKind::Full, AttentionKind::Full}, models::QkProjection::Shared},
      {"exact", {AttentionKind::Exact, AttentionKind::Local}},
      {"lsh_on_top", {AttentionKind::Local, AttentionKind::Full, AttentionKind::Lsh}}};
}

class Generation : public ::testing::TestWithParam<KindCase> {};

TEST_P(Generation, PaddingBehindAPrefixChangesNoLogit) {
  auto config = base_config(GetParam().kinds);
  config.qk = GetParam().qk;
  // With LSH: two rounds, two chunks back, so windows cross rounds.
  config.lsh.n_before = 2;
  Lm<double> lm(config);
  const Index n = 13;  // not a multiple of the chunks: padded to 16 internally
  const auto ids = host_ids(2, 24, config.vocab, 5);
  // Row 0: n real tokens; row 1: 9. Padding ids are arbitrary (masked).
  HostIds mask("mask", 2, 24);
  for (Index t = 0; t < 24; ++t) mask(0, t) = t < n, mask(1, t) = t < 9;
  for (const Index length : {Index(13), Index(16), Index(24)}) {
    SCOPED_TRACE("length " + std::to_string(length));
    HostIds cut("cut", 2, length), cut_mask("cut_mask", 2, length);
    for (Index b = 0; b < 2; ++b)
      for (Index t = 0; t < length; ++t) cut(b, t) = ids(b, t), cut_mask(b, t) = mask(b, t);
    const auto device_mask = to_device(cut_mask);
    View2<double> logits("logits", 2, config.vocab);
    for (const Index position : {Index(0), Index(5), Index(8), Index(12)}) {
      lm.model.logits_at(to_device(cut), position, logits, lm.state, device_mask);
      auto host = Kokkos::create_mirror_view_and_copy(HostSpace(), logits);
      // Against the shortest form: each row alone, with no padding beyond the chunks.
      for (Index b = 0; b < 2; ++b) {
        const Index real = b == 0 ? n : 9;
        if (position >= real) continue;
        const auto alone = lm.logits_at(ids, b, real, position, {});
        std::vector<double> got(host.data() + b * config.vocab,
                                host.data() + (b + 1) * config.vocab);
        EXPECT_LT(max_difference(got, alone), 1e-12) << "row " << b << " position " << position;
      }
    }
  }
}

void cached_steps_equal_a_full_forward(const KindCase& kind);

// Both places a step's products run (REFORMER_STEP_PRODUCTS): the vendor's
// products with their own layer norms and epilogues, and rows_linear.
TEST_P(Generation, CachedStepsEqualAFullForwardOnTheRow) {
  for (const auto products : {ops::StepProducts::vendor, ops::StepProducts::fused}) {
    SCOPED_TRACE(std::string("step products ") + ops::step_products_name(products));
    const ScopedStepProducts scoped(products);
    cached_steps_equal_a_full_forward(GetParam());
  }
}

void cached_steps_equal_a_full_forward(const KindCase& kind) {
  auto config = base_config(kind.kinds);
  config.qk = kind.qk;
  config.reversible = kind.name != "exact";  // both stack forms decode alike
  Lm<double> lm(config);
  const RandomKey key{11, 12};
  const std::vector<Index> lengths{5, 9};
  const auto ids = host_ids(2, 30, config.vocab, 9);
  HostIds prompts("prompts", 2, 9);
  for (Index b = 0; b < 2; ++b)
    for (Index t = 0; t < 9; ++t) prompts(b, t) = t < lengths[b] ? ids(b, t) : 0;
  ReformerGeneration<double> generation;
  View2<double> logits("logits", 2, config.vocab);
  const Index capacity = 26;
  lm.model.start_generation(to_device(prompts), lengths, capacity, key, generation, logits,
                            lm.state);
  HostIds sequence("sequence", 2, capacity);
  for (Index b = 0; b < 2; ++b)
    for (Index t = 0; t < lengths[b]; ++t) sequence(b, t) = ids(b, t);
  std::vector<Index> next = lengths;
  double worst = 0;
  for (int step = 0; step <= 16; ++step) {
    auto host = Kokkos::create_mirror_view_and_copy(HostSpace(), logits);
    std::vector<int> tokens;
    for (Index b = 0; b < 2; ++b) {
      std::vector<double> got(host.data() + b * config.vocab, host.data() + (b + 1) * config.vocab);
      const auto full = lm.logits_at(sequence, b, next[b], next[b] - 1, key);
      worst = std::max(worst, max_difference(got, full));
      // Greedy: the same token from either.
      const int token = int(std::max_element(got.begin(), got.end()) - got.begin());
      EXPECT_EQ(token, int(std::max_element(full.begin(), full.end()) - full.begin()));
      sequence(b, next[b]) = token;
      tokens.push_back(token);
      ++next[b];
    }
    if (step < 16) lm.model.generation_step(tokens, generation, logits);
  }
  EXPECT_LT(worst, 1e-10);
}

TEST_P(Generation, FloatStepsAgreeToFloatPrecision) {
  auto config = base_config(GetParam().kinds);
  config.qk = GetParam().qk;
  config.layer_norm_eps = 1e-5;
  Lm<float> lm(config);
  const std::vector<Index> lengths{7};
  const auto ids = host_ids(1, 20, config.vocab, 3);
  ReformerGeneration<float> generation;
  View2<float> logits("logits", 1, config.vocab);
  lm.model.start_generation(to_device(ids), lengths, 20, {1, 1}, generation, logits, lm.state);
  for (Index t = 7; t < 20; ++t) {
    lm.model.generation_step({ids(0, t)}, generation, logits);
    auto host = Kokkos::create_mirror_view_and_copy(HostSpace(), logits);
    const auto full = lm.logits_at(ids, 0, t + 1, t, {1, 1});
    EXPECT_LT(max_difference(std::vector<double>(host.data(), host.data() + host.size()), full),
              1e-5)
        << "position " << t;
  }
}

// After its first step a generation allocates nothing: the LSH step's sort
// buffers are sized by the cache (not by the position, which grows), the
// query is only hashed (into the workspace) and the token staging lives in
// the generation (issue 31: on a GPU each allocation is a cudaMalloc and a
// synchronising cudaFree; there were 8.5 per token).
struct StepLaunches {
  double per_token = 0;           // our Kokkos launches a token
  std::int64_t rows_linear = -1;  // rows_linear launches in the 33 steps (-1: not profiled)
};
StepLaunches steps_after_the_first_allocate_nothing();

// With the fused step products (rows_linear) the layer norms and epilogues
// ride in the products' launches, which are Kokkos launches: the counted
// launches stay at most the vendor route's, which also runs about 4 vendor
// products a layer that the counter does not see. The fused route takes
// every product of a token in rows_linear (4 a layer: q/k/v, the output, the
// feed-forward's two; and the head), the vendor route none.
TEST(LmGeneration, StepsAfterTheFirstAllocateNothingAndWaitForNoReduction) {
  std::map<ops::StepProducts, StepLaunches> launches;
  for (const auto products : {ops::StepProducts::vendor, ops::StepProducts::fused}) {
    SCOPED_TRACE(std::string("step products ") + ops::step_products_name(products));
    const ScopedStepProducts scoped(products);
    launches[products] = steps_after_the_first_allocate_nothing();
  }
  const auto& fused = launches[ops::StepProducts::fused];
  const auto& vendor = launches[ops::StepProducts::vendor];
  EXPECT_LE(fused.per_token, vendor.per_token);
  if (fused.rows_linear >= 0) {
    EXPECT_EQ(fused.rows_linear, 33 * (3 * 4 + 1)) << "rows_linear launches, fused";
    EXPECT_EQ(vendor.rows_linear, 0) << "rows_linear launches, vendor";
  }
}

StepLaunches steps_after_the_first_allocate_nothing() {
  // LSH on top: below it, a longer sequence would re-sort earlier positions.
  auto config = base_config({AttentionKind::Local, AttentionKind::Full, AttentionKind::Lsh});
  config.layer_norm_eps = 1e-5;
  Lm<float> lm(config);
  const auto ids = host_ids(2, 40, config.vocab, 5);
  HostIds prompts("prompts", 2, 6);
  for (Index b = 0; b < 2; ++b)
    for (Index t = 0; t < 6; ++t) prompts(b, t) = ids(b, t);
  ReformerGeneration<float> generation;
  View2<float> logits("logits", 2, config.vocab);
  lm.model.start_generation(to_device(prompts), {6, 6}, 40, {3, 4}, generation, logits, lm.state);
  auto& tracker = MemoryTracker::instance();
  const auto count = [&] {
    return tracker.space(MemSpace::name()).allocations +
           tracker.space(HostSpace::name()).allocations;
  };
  lm.model.generation_step({ids(0, 6), ids(1, 6)}, generation, logits);
  const std::int64_t before = count();
  tracker.reset_launches();
  // The kernel profile (unless a run already uses it) names the launches.
  auto& profile = KernelProfile::instance();
  const bool profiled = !profile.installed();
  if (profiled) profile.install();
  for (Index t = 7; t < 40; ++t)
    lm.model.generation_step({ids(0, t), ids(1, t)}, generation, logits);
  StepLaunches launches;
  if (profiled) {
    launches.rows_linear = 0;
    for (const KernelTime& k : profile.times())
      if (k.label == "rows_linear") launches.rows_linear = k.calls;
    profile.uninstall();
  }
  EXPECT_EQ(count() - before, 0) << "allocations in 33 generation steps after the first";
  // Nor a reduction, whose result the host would wait for (on a GPU, a
  // synchronisation per token): the tokens are checked on the host.
  EXPECT_EQ(tracker.launches().parallel_reduce, 0) << "reductions in 33 generation steps";
  EXPECT_GT(tracker.launches().parallel_for, 0) << "the launch counter did not count";
  // Few launches per token (issue 31: on a GPU each costs microseconds): at
  // most 9 per layer (an LSH layer: its layer norms, cache write, hashing, the
  // sort's three passes, step kernel and the feed-forward's two epilogues; a
  // local or full layer needs 5, its cache write inside its attention kernel)
  // and 5 for the embedding, positions and head. Per-row loops of launches, or
  // unfused epilogues (13 per local layer before), fail it.
  const double per_token = double(tracker.launches().ours()) / 33.0;
  EXPECT_LE(per_token, 9.0 * 3 + 5) << "kernel launches per generated token";
  launches.per_token = per_token;
  // And the logits are still those of a full forward pass.
  auto host = Kokkos::create_mirror_view_and_copy(HostSpace(), logits);
  const auto full = lm.logits_at(ids, 1, 40, 39, {3, 4});
  EXPECT_LT(
      max_difference(
          std::vector<double>(host.data() + config.vocab, host.data() + 2 * config.vocab), full),
      1e-5);
  return launches;
}

INSTANTIATE_TEST_SUITE_P(Kinds, Generation, ::testing::ValuesIn(kind_cases()),
                         [](const auto& info) { return info.param.name; });

// An LSH layer's cached step equals its forward pass at the last position, for
// every position, with several rounds and windows that reach back across rounds.
TEST(LshGeneration, LayerStepEqualsForwardAtEveryPosition) {
  for (const Index n_before : {Index(1), Index(2)}) {
    SCOPED_TRACE("n_before " + std::to_string(n_before));
    attention::AttentionLayerConfig config;
    config.kind = AttentionKind::Lsh;
    config.d_model = 6;
    config.heads = 2;
    config.d_head = 4;
    config.lsh.chunk = 4;
    config.lsh.n_hashes = 3;
    config.lsh.n_buckets = {4};
    config.lsh.n_before = n_before;
    ParameterSet<double> params;
    attention::AttentionLayer<double> layer("attn", config, params);
    layer.init({5, 6});
    const Index batch = 2, length = 20, prompt = 3;
    View3<double> x("x", batch, length, config.d_model);
    auto host_x = Kokkos::create_mirror_view(x);
    for (std::size_t i = 0; i < host_x.size(); ++i) host_x.data()[i] = random_normal({21, 1}, i);
    Kokkos::deep_copy(x, host_x);
    const attention::AttentionLayerCall call{{8, 9}, {}, false};
    Workspace workspace;
    attention::AttentionCache<double> cache;
    View3<double> first("first", batch, prompt, config.d_model);
    Kokkos::deep_copy(
        first, Kokkos::subview(x, Kokkos::ALL, Kokkos::make_pair(Index(0), prompt), Kokkos::ALL));
    layer.start_cache(first, call, length, cache, workspace);
    View2<double> y("y", batch, config.d_model);
    Kokkos::View<Index*, Layout, MemSpace> positions("positions", batch);
    double worst = 0;
    for (Index t = prompt; t < length; ++t) {
      // Forward on the whole input with everything after t masked as padding.
      HostIds host_valid("valid", batch, length);
      for (Index b = 0; b < batch; ++b)
        for (Index j = 0; j < length; ++j) host_valid(b, j) = j <= t;
      const IdView valid = to_device(host_valid);
      attention::AttentionLayerCall masked = call;
      masked.key_valid = valid;
      View3<double> full("full", batch, length, config.d_model);
      attention::AttentionState<double> state;
      layer.forward(x, full, masked, state, workspace, attention::Save::PlanOnly);
      Kokkos::deep_copy(positions, t);
      const auto row = Kokkos::subview(x, Kokkos::ALL, t, Kokkos::ALL);
      View2<double> xt("xt", batch, config.d_model);
      Kokkos::deep_copy(xt, row);
      layer.step(xt, cache, positions, t, y, workspace);
      auto got = Kokkos::create_mirror_view_and_copy(HostSpace(), y);
      auto want = Kokkos::create_mirror_view_and_copy(HostSpace(), full);
      for (Index b = 0; b < batch; ++b)
        for (Index j = 0; j < config.d_model; ++j)
          worst = std::max(worst, std::abs(got(b, j) - want(b, t, j)));
    }
    EXPECT_LT(worst, 1e-12);
    // An LSH step needs each row's position: no positions view (every row at
    // one position, as dense layers allow) is an error, and so is a view for
    // another batch.
    View2<double> x0("x0", batch, config.d_model);
    expect_error<ShapeError>([&] { layer.step(x0, cache, {}, length - 1, y, workspace); },
                             {"needs the position of each row"});
    Kokkos::View<Index*, Layout, MemSpace> three("three", 3);
    expect_error<ShapeError>([&] { layer.step(x0, cache, three, length - 1, y, workspace); },
                             {"3 row positions (expected 2"});
  }
}

TEST(LmGenerationErrors, BadInputsNameTheValue) {
  auto config = base_config({AttentionKind::Local, AttentionKind::Lsh});
  Lm<double> lm(config);
  const auto ids = to_device(host_ids(1, 8, config.vocab, 1));
  ReformerGeneration<double> generation;
  View2<double> logits("logits", 1, config.vocab);
  expect_error<ShapeError>(
      [&] { lm.model.start_generation(ids, {9}, 16, {}, generation, logits, lm.state); },
      {"prompt 0 has 9 tokens"});
  expect_error<ConfigError>(
      [&] { lm.model.start_generation(ids, {8}, 6, {}, generation, logits, lm.state); },
      {"capacity 6", "8 tokens"});
  expect_error<ConfigError>(
      [&] { lm.model.start_generation(ids, {8}, 49, {}, generation, logits, lm.state); },
      {"capacity 49", "model.max_length = 48"});
  expect_error<ConfigError>([&] { lm.model.generation_step({1}, generation, logits); },
                            {"call start_generation first"});
  lm.model.start_generation(ids, {8}, 9, {}, generation, logits, lm.state);
  expect_error<ConfigError>([&] { lm.model.generation_step({13}, generation, logits); },
                            {"token 13", "[0, 13)"});
  lm.model.generation_step({1}, generation, logits);
  expect_error<ConfigError>([&] { lm.model.generation_step({1}, generation, logits); },
                            {"position 9", "holds 9 positions"});
  // LSH with an automatic bucket count cannot be cached.
  auto automatic = config;
  automatic.lsh.n_buckets = {};
  Lm<double> unfixed(automatic);
  expect_error<ConfigError>(
      [&] { unfixed.model.start_generation(ids, {8}, 16, {}, generation, logits, unfixed.state); },
      {"model.lsh.n_buckets"});
  // A mask of another shape.
  ModelCall call{{1, 2}, false};
  call.valid = IdView("valid", 1, 7);
  expect_error<ShapeError>([&] { lm.model.forward(ids, call, lm.state); },
                           {"mask `valid` has shape [1, 7]", "[1, 8]"});
}

// A masked batch's loss counts only the real targets: equal to the loss of
// the rows cut to their real tokens, weighted by their counts.
TEST(LmPadding, LossCountsOnlyRealTargets) {
  auto config = base_config({AttentionKind::Local, AttentionKind::Lsh});
  Lm<double> lm(config);
  const auto ids = host_ids(2, 16, config.vocab, 4), targets = host_ids(2, 16, config.vocab, 6);
  HostIds mask("mask", 2, 16);
  const Index real[2] = {11, 6};
  for (Index b = 0; b < 2; ++b)
    for (Index t = 0; t < 16; ++t) mask(b, t) = t < real[b];
  ModelCall call{{2, 3}, false};
  call.valid = to_device(mask);
  const auto both = lm.model.evaluate(to_device(ids), to_device(targets), -1, call, lm.state);
  EXPECT_EQ(both.tokens, 17);
  double sum = 0;
  for (Index b = 0; b < 2; ++b) {
    HostIds one("one", 1, real[b]), one_targets("one_targets", 1, real[b]);
    for (Index t = 0; t < real[b]; ++t) one(0, t) = ids(b, t), one_targets(0, t) = targets(b, t);
    const auto r =
        lm.model.evaluate(to_device(one), to_device(one_targets), -1, {{2, 3}, false}, lm.state);
    EXPECT_EQ(r.tokens, real[b]);
    sum += r.loss * double(r.tokens);
  }
  EXPECT_NEAR(both.loss, sum / 17.0, 1e-12);
}

}  // namespace
}  // namespace reformer
