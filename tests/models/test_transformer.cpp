// The encoder-decoder Transformer: gradients of the whole model (double, finite
// differences, dropout and padding on both sides), cached decoding against
// rerunning the decoder on the whole prefix, beam size 1 against greedy, and
// the errors of bad input.
#include "reformer/core/error.hpp"
#include "reformer/core/memory_tracker.hpp"
#include "reformer/models/transformer.hpp"
#include "support/batch_share.hpp"
#include "support/checks.hpp"
#include "support/gradcheck.hpp"
#include "support/kernel_settings.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <tuple>

namespace reformer {
namespace {

using namespace reformer::testing;
using attention::AttentionKind;
using models::EncoderDecoder;
using models::TransformerConfig;

constexpr int kPad = 0, kStart = 1, kEnd = 2;

TransformerConfig tiny(AttentionKind encoder, AttentionKind decoder, AttentionKind cross) {
  TransformerConfig c;
  c.source_vocab = 11;
  c.target_vocab = 9;
  c.d_model = 8;
  c.d_ff = 12;
  c.heads = 2;
  c.d_head = 4;
  c.encoder_layers = 2;
  c.decoder_layers = 2;
  c.max_length = 16;
  c.encoder_attention = encoder;
  c.decoder_attention = decoder;
  c.cross_attention = cross;
  c.dropout = 0.1;
  c.attention_dropout = 0.1;
  c.label_smoothing = 0.1;
  c.ff_chunk = 5;
  c.loss_chunk = 7;
  c.local.chunk = 4;
  c.lsh.chunk = 4;
  c.lsh.n_hashes = 2;
  c.lsh.n_buckets = {4};
  return c;
}

Kokkos::View<int**, Layout, MemSpace> device_matrix(const std::vector<std::vector<int>>& rows) {
  Kokkos::View<int**, Layout, MemSpace> m("ids", rows.size(), rows[0].size());
  auto h = Kokkos::create_mirror_view(m);
  for (std::size_t i = 0; i < rows.size(); ++i)
    for (std::size_t j = 0; j < rows[i].size(); ++j) h(i, j) = rows[i][j];
  Kokkos::deep_copy(m, h);
  return m;
}

// Two pairs: sources of 8 positions (the second padded after 5 tokens),
// targets of 8 (the first padded after 6).
struct Pairs {
  Kokkos::View<int**, Layout, MemSpace> source =
      device_matrix({{3, 4, 5, 6, 7, 8, 9, 10}, {10, 3, 3, 7, 5, kPad, kPad, kPad}});
  Kokkos::View<int**, Layout, MemSpace> source_valid =
      device_matrix({{1, 1, 1, 1, 1, 1, 1, 1}, {1, 1, 1, 1, 1, 0, 0, 0}});
  Kokkos::View<int**, Layout, MemSpace> target_in =
      device_matrix({{kStart, 3, 4, 5, 6, 7, kPad, kPad}, {kStart, 8, 3, 3, 7, 5, 6, 4}});
  Kokkos::View<int**, Layout, MemSpace> target_out =
      device_matrix({{3, 4, 5, 6, 7, kEnd, kPad, kPad}, {8, 3, 3, 7, 5, 6, 4, kEnd}});
  Kokkos::View<int**, Layout, MemSpace> target_valid =
      device_matrix({{1, 1, 1, 1, 1, 1, 0, 0}, {1, 1, 1, 1, 1, 1, 1, 1}});
  models::Seq2SeqBatch batch() const {
    return {source, target_in, target_out, source_valid, target_valid};
  }
};

class TransformerKinds
    : public ::testing::TestWithParam<std::tuple<AttentionKind, AttentionKind, AttentionKind>> {};

// Every parameter of the model, with dropout, label smoothing and padding on
// both sides (the loss replays the same dropout masks and LSH rotations).
TEST_P(TransformerKinds, WholeModelGradients) {
  const auto [encoder, decoder, cross] = GetParam();
  ParameterSet<double> params;
  EncoderDecoder<double> model(tiny(encoder, decoder, cross), params);
  model.init({7, 1});
  models::TransformerState<double> state;
  const Pairs pairs;
  const models::ModelCall call{{3, 5}, true};
  params.zero_grad();
  const auto result = model.forward_backward(pairs.batch(), kPad, call, state);
  EXPECT_EQ(result.tokens, 14);  // the counted targets: 6 + 8
  auto loss = [&] { return model.evaluate(pairs.batch(), kPad, call, state).loss; };
  EXPECT_NEAR(loss(), result.loss, 1e-12);
  for (const auto& name : params.names()) {
    auto& p = params.get(name);
    EXPECT_LT(gradient_error(p.value, p.grad, loss, 6), 1e-6) << name;
  }
}

INSTANTIATE_TEST_SUITE_P(
    EncoderDecoderCross, TransformerKinds,
    ::testing::Values(
        std::make_tuple(AttentionKind::Full, AttentionKind::Full, AttentionKind::Full),
        std::make_tuple(AttentionKind::Lsh, AttentionKind::Local, AttentionKind::Exact),
        std::make_tuple(AttentionKind::Local, AttentionKind::Exact, AttentionKind::Full)));

// The two-stream reversible model: every parameter's gradient, and no layer
// keeps activations after the forward pass (only its call and LSH plan).
TEST_P(TransformerKinds, ReversibleWholeModelGradients) {
  const auto [encoder, decoder, cross] = GetParam();
  auto config = tiny(encoder, decoder, cross);
  config.reversible = true;
  ParameterSet<double> params;
  EncoderDecoder<double> model(config, params);
  model.init({7, 1});
  models::TransformerState<double> state;
  const Pairs pairs;
  const models::ModelCall call{{3, 5}, true};
  auto loss = [&] { return model.evaluate(pairs.batch(), kPad, call, state).loss; };
  const double before = loss();
  for (const auto& layer : state.encoder) {
    EXPECT_FALSE(layer.stored);
    EXPECT_FALSE(layer.attention.saved);
    EXPECT_EQ(layer.f_input.data(), nullptr);
  }
  for (const auto& layer : state.decoder) {
    EXPECT_FALSE(layer.self.saved || layer.cross.saved || layer.stored);
    EXPECT_EQ(layer.self_input.data(), nullptr);
  }
  params.zero_grad();
  const auto result = model.forward_backward(pairs.batch(), kPad, call, state);
  EXPECT_EQ(result.tokens, 14);
  EXPECT_NEAR(result.loss, before, 1e-12);
  EXPECT_NEAR(loss(), result.loss, 1e-12);  // the rebuilt streams left the model as it was
  for (const auto& name : params.names()) {
    auto& p = params.get(name);
    EXPECT_LT(gradient_error(p.value, p.grad, loss, 6), 1e-6) << name;
  }
}

// Gradient accumulation weighted by tokens: the two sequences of a batch (6 and
// 8 counted targets) as two micro-batches, each with loss_scale = its share of
// the 14 tokens and first_row = its row (dropout masks are keyed by the
// global row), give the whole batch's gradients.
TEST(Transformer, MicroBatchesWeightedByTokensEqualTheWholeBatch) {
  auto config = tiny(AttentionKind::Full, AttentionKind::Full, AttentionKind::Full);
  ParameterSet<double> params;
  EncoderDecoder<double> model(config, params);
  model.init({7, 1});
  models::TransformerState<double> state;
  const Pairs pairs;
  params.zero_grad();
  const auto whole = model.forward_backward(pairs.batch(), kPad, {{3, 5}, true}, state);
  const auto want = to_host(params.grads());
  params.zero_grad();
  double loss = 0;
  for (Index row = 0; row < 2; ++row) {
    auto one = [&](const Kokkos::View<int**, Layout, MemSpace>& m) {
      Kokkos::View<int**, Layout, MemSpace> out("row", 1, m.extent(1));
      Kokkos::deep_copy(out, Kokkos::subview(m, std::make_pair(row, row + 1), Kokkos::ALL()));
      return out;
    };
    const models::Seq2SeqBatch part{one(pairs.source), one(pairs.target_in), one(pairs.target_out),
                                    one(pairs.source_valid), one(pairs.target_valid)};
    const double share = row == 0 ? 6.0 / 14.0 : 8.0 / 14.0;
    const auto r = model.forward_backward(part, kPad, {{3, 5}, true, share, {}, row}, state);
    EXPECT_EQ(r.tokens, row == 0 ? 6 : 8);
    loss += share * r.loss;
  }
  EXPECT_NEAR(loss, whole.loss, 1e-12);
  EXPECT_LT(relative_error(to_host(params.grads()), want), 1e-12);
}

// Data parallelism: pairs [2, 4) of a batch, run alone with first_row 2, draw
// the masks the whole batch draws for them (source and target embeddings,
// every attention's probabilities and output, the feed-forwards; one stream
// and two; padding on both sides gives the pairs different token counts), so
// the two shares with the trainer's loss weights give the whole batch's loss
// and gradients.
TEST_P(TransformerKinds, ShareOfTheBatchDrawsTheWholeBatchMasks) {
  const auto [encoder, decoder, cross] = GetParam();
  const std::vector<std::vector<int>> source = {{3, 4, 5, 6, 7, 8, 9, 10},
                                                {10, 3, 3, 7, 5, kPad, kPad, kPad},
                                                {4, 4, 9, 6, 3, 8, kPad, kPad},
                                                {5, 7, 3, 10, 6, 4, 8, 9}};
  const std::vector<std::vector<int>> target = {{3, 4, 5, 6, 7, kEnd, kPad, kPad},
                                                {8, 3, 3, 7, 5, 6, 4, kEnd},
                                                {6, 5, kEnd, kPad, kPad, kPad, kPad, kPad},
                                                {7, 3, 8, 4, 5, kEnd, kPad, kPad}};
  std::vector<std::vector<int>> source_valid, target_in, target_valid;
  for (const auto& row : source) {
    source_valid.emplace_back();
    for (const int id : row) source_valid.back().push_back(id != kPad);
  }
  for (const auto& row : target) {
    target_in.push_back({kStart});
    target_in.back().insert(target_in.back().end(), row.begin(), row.end() - 1);
    target_valid.emplace_back();
    for (const int id : row) target_valid.back().push_back(id != kPad);
  }
  // In Seq2SeqBatch's order: source, target_in, target_out, source_valid, target_valid.
  const Kokkos::View<int**, Layout, MemSpace> parts[5] = {
      device_matrix(source), device_matrix(target_in), device_matrix(target),
      device_matrix(source_valid), device_matrix(target_valid)};
  for (const bool reversible : {false, true}) {
    SCOPED_TRACE(reversible ? "two streams" : "one stream");
    auto config = tiny(encoder, decoder, cross);
    config.reversible = reversible;
    config.dropout = config.attention_dropout = 0.2;
    ParameterSet<double> params;
    EncoderDecoder<double> model(config, params);
    model.init({7, 1});
    auto run = [&](Index first, Index count, Index first_row, double loss_scale) {
      auto rows = [&](int i) { return share_rows(parts[i], first, count); };
      const models::Seq2SeqBatch part{rows(0), rows(1), rows(2), rows(3), rows(4)};
      models::TransformerState<double> state;
      params.zero_grad();
      const auto r =
          model.forward_backward(part, kPad, {{3, 5}, true, loss_scale, {}, first_row}, state);
      return ShareResult{r.loss, r.tokens, to_host(params.grads())};
    };
    expect_shares_make_the_whole_batch(run, 4, 2);
  }
}

TEST(Transformer, SharedAndTiedEmbeddingsGradients) {
  auto config = tiny(AttentionKind::Full, AttentionKind::Full, AttentionKind::Full);
  config.source_vocab = config.target_vocab = 11;
  config.share_embeddings = true;
  config.tie_generator = true;
  config.positions = models::PositionKind::Learned;
  ParameterSet<double> params;
  EncoderDecoder<double> model(config, params);
  model.init({2, 2});
  EXPECT_FALSE(params.contains("tgt_embed.table"));
  EXPECT_FALSE(params.contains("generator.w"));
  models::TransformerState<double> state;
  const Pairs pairs;
  const models::ModelCall call{{4, 4}, true};
  params.zero_grad();
  model.forward_backward(pairs.batch(), kPad, call, state);
  auto loss = [&] { return model.evaluate(pairs.batch(), kPad, call, state).loss; };
  for (const auto& name : params.names()) {
    auto& p = params.get(name);
    EXPECT_LT(gradient_error(p.value, p.grad, loss, 8), 1e-6) << name;
  }
}

// Cached decoding: each step's log-probabilities equal (relative to max(1, |x|))
// those of the decoder rerun on the whole prefix (padded to the capacity; the causal mask keeps the
// padding out), and the chosen tokens are the same.
template <class T>
void expect_cache_equals_rerun(AttentionKind decoder, AttentionKind cross, double tolerance,
                               bool reversible = false) {
  SCOPED_TRACE(std::string(attention::to_string(decoder)) + " / " + attention::to_string(cross) +
               (reversible ? " (reversible)" : ""));
  auto config = tiny(AttentionKind::Full, decoder, cross);
  config.reversible = reversible;
  ParameterSet<T> params;
  EncoderDecoder<T> model(config, params);
  model.init({9, 9});
  const Pairs pairs;
  const Index capacity = 8, batch = 2, vocab = config.target_vocab;
  models::DecodeCache<T> cache;
  model.start_decoding(pairs.source, pairs.source_valid, capacity, cache);
  std::vector<std::vector<int>> prefix(batch, std::vector<int>(capacity, kPad));
  Kokkos::View<int*, Layout, MemSpace> tokens("tokens", batch);
  View2<T> cached("cached", batch, vocab);
  View3<T> rerun("rerun", batch, capacity, vocab);
  models::TransformerState<T> state;
  auto ones = device_matrix(std::vector<std::vector<int>>(batch, std::vector<int>(capacity, 1)));
  for (Index t = 0; t < capacity; ++t) {
    auto tokens_host = Kokkos::create_mirror_view(tokens);
    for (Index b = 0; b < batch; ++b) tokens_host(b) = t == 0 ? kStart : prefix[b][t];
    Kokkos::deep_copy(tokens, tokens_host);
    for (Index b = 0; b < batch; ++b) prefix[b][t] = tokens_host(b);
    model.decode_step(tokens, cache, cached);
    const auto in = device_matrix(prefix);
    model.log_probs({pairs.source, in, in, pairs.source_valid, ones}, rerun, state);
    const auto c = to_host(cached), r = to_host(rerun);
    double worst = 0;
    for (Index b = 0; b < batch; ++b) {
      Index best = 0;
      for (Index v = 0; v < vocab; ++v) {
        const double want = r[std::size_t((b * capacity + t) * vocab + v)];
        worst = std::max(
            worst, std::abs(c[std::size_t(b * vocab + v)] - want) / std::max(1.0, std::abs(want)));
        if (c[std::size_t(b * vocab + v)] > c[std::size_t(b * vocab + best)]) best = v;
      }
      if (t + 1 < capacity) prefix[b][t + 1] = int(best);  // the next input
    }
    EXPECT_LT(worst, tolerance) << "step " << t;
  }
  EXPECT_EQ(cache.length, capacity);
  expect_error<ConfigError>([&] { model.decode_step(tokens, cache, cached); }, {"capacity"});
}

// In both places a step's products run (REFORMER_STEP_PRODUCTS: the vendor's
// products with their own layer norms and epilogues, or rows_linear).
TEST(TransformerDecoding, CacheEqualsRerunningThePrefix) {
  for (const auto products : {ops::StepProducts::vendor, ops::StepProducts::fused}) {
    SCOPED_TRACE(std::string("step products ") + ops::step_products_name(products));
    const ScopedStepProducts scoped(products);
    for (const auto decoder : {AttentionKind::Full, AttentionKind::Exact, AttentionKind::Local}) {
      expect_cache_equals_rerun<double>(decoder, AttentionKind::Full, 1e-12);
      expect_cache_equals_rerun<double>(decoder, AttentionKind::Exact, 1e-12);
      expect_cache_equals_rerun<float>(decoder, AttentionKind::Full, 1e-6);
      expect_cache_equals_rerun<double>(decoder, AttentionKind::Exact, 1e-12, /*reversible=*/true);
      expect_cache_equals_rerun<float>(decoder, AttentionKind::Full, 1e-6, /*reversible=*/true);
    }
  }
}

// A decoding step allocates nothing and launches few kernels (issue 31: on a
// GPU each launch costs microseconds): per decoder layer at most its three
// layer norms, the self-attention's key/value write and cached attention, the
// cross-attention's cached attention and the feed-forward's two epilogues (8),
// and 6 for the token check, embedding, positions, final layer norm, output
// bias and log-softmax. Products on the host BLAS are not Kokkos launches.
// With the fused step products the layer norms and epilogues ride in the
// products' launches, which are Kokkos launches: 9 a layer and no product
// (self-attention: q/k/v, cache write, attention, output; cross: q,
// attention, output; the feed-forward's two).
// And no copy or fill of Kokkos' own: step_cross and the fixed-position step
// filled a positions view per layer before.
TEST(TransformerDecoding, FewLaunchesAndNoAllocationsPerStep) {
  for (const auto products : {ops::StepProducts::vendor, ops::StepProducts::fused})
    for (const auto decoder : {AttentionKind::Full, AttentionKind::Local}) {
      SCOPED_TRACE(attention::to_string(decoder) + std::string(", step products ") +
                   ops::step_products_name(products));
      const ScopedStepProducts scoped(products);
      const double per_layer = products == ops::StepProducts::fused ? 9.0 : 8.0;
      auto config = tiny(AttentionKind::Full, decoder, AttentionKind::Full);
      ParameterSet<float> params;
      EncoderDecoder<float> model(config, params);
      model.init({9, 9});
      const Pairs pairs;
      const Index capacity = 12, batch = 2;
      models::DecodeCache<float> cache;
      model.start_decoding(pairs.source, pairs.source_valid, capacity, cache);
      Kokkos::View<int*, Layout, MemSpace> tokens("tokens", batch);
      Kokkos::deep_copy(tokens, kStart);
      View2<float> log_probs("log_probs", batch, config.target_vocab);
      model.decode_step(tokens, cache, log_probs);
      auto& tracker = MemoryTracker::instance();
      const auto allocations = [&] {
        return tracker.space(MemSpace::name()).allocations +
               tracker.space(HostSpace::name()).allocations;
      };
      const std::int64_t before = allocations();
      tracker.reset_launches();
      const Index steps = capacity - 1;
      for (Index t = 1; t < capacity; ++t) model.decode_step(tokens, cache, log_probs);
      EXPECT_EQ(allocations() - before, 0) << "allocations in " << steps << " decoding steps";
      EXPECT_GT(tracker.launches().parallel_for, 0) << "the launch counter did not count";
      const double per_step = double(tracker.launches().ours()) / double(steps);
      EXPECT_LE(per_step, per_layer * config.decoder_layers + 6)
          << "kernel launches per decoding step";
      EXPECT_EQ(tracker.launches().internal, 0) << "copies and fills in " << steps << " steps";
    }
}

TEST(TransformerDecoding, BeamOfOneIsGreedyAndBeamsEndOnEnd) {
  const auto config = tiny(AttentionKind::Full, AttentionKind::Full, AttentionKind::Full);
  ParameterSet<double> params;
  EncoderDecoder<double> model(config, params);
  model.init({5, 6});
  const Pairs pairs;
  // Greedy decoding of an untrained model, with each token id as the end id in
  // turn, so that some runs end early and some reach the length limit.
  int ended_early = 0;
  for (int end = 0; end < int(config.target_vocab); ++end) {
    SCOPED_TRACE("end id " + std::to_string(end));
    const auto greedy = model.greedy(pairs.source, pairs.source_valid, kStart, end, 10);
    models::BeamOptions one;
    one.beam = 1;
    EXPECT_EQ(model.beam_search(pairs.source, pairs.source_valid, kStart, end, 10, one), greedy);
    for (const auto& row : greedy) {
      ASSERT_FALSE(row.empty());
      ended_early += row.back() == end && row.size() < 10;
      EXPECT_TRUE(row.back() == end || row.size() == 10u);
    }
    models::BeamOptions four;
    four.beam = 4;
    for (const auto& row :
         model.beam_search(pairs.source, pairs.source_valid, kStart, end, 10, four)) {
      ASSERT_FALSE(row.empty());
      EXPECT_TRUE(row.back() == end || row.size() == 10u);
      for (std::size_t i = 0; i + 1 < row.size(); ++i) EXPECT_NE(row[i], end);
    }
  }
  EXPECT_GT(ended_early, 0);
}

TEST(Transformer, ClearErrors) {
  ParameterSet<double> params;
  auto lsh_decoder = tiny(AttentionKind::Full, AttentionKind::Lsh, AttentionKind::Full);
  expect_error<ConfigError>([&] { EncoderDecoder<double>(lsh_decoder, params); },
                            {"decoder_attention is lsh"});
  auto shared = tiny(AttentionKind::Full, AttentionKind::Full, AttentionKind::Full);
  shared.share_embeddings = true;
  expect_error<ConfigError>([&] { EncoderDecoder<double>(shared, params); },
                            {"share_embeddings", "11", "9"});
  auto local_cross = tiny(AttentionKind::Full, AttentionKind::Full, AttentionKind::Local);
  expect_error<ConfigError>([&] { EncoderDecoder<double>(local_cross, params); },
                            {"cross_attention is local"});
  EncoderDecoder<double> model(tiny(AttentionKind::Full, AttentionKind::Full, AttentionKind::Full),
                               params);
  model.init({1, 1});
  models::TransformerState<double> state;
  const Pairs pairs;
  // A source longer than the model allows, ids outside the vocabulary.
  const auto long_source = device_matrix(std::vector<std::vector<int>>(2, std::vector<int>(20, 3)));
  auto batch = pairs.batch();
  batch.source = long_source;
  batch.source_valid = long_source;
  expect_error<ShapeError>(
      [&] {
        model.evaluate(batch, kPad, {{}, false}, state);
      },
      {"source has length 20", "model.max_length = 16"});
  const auto bad_ids = device_matrix({{3, 4, 5, 6, 7, 8, 9, 11}, {3, 3, 3, 3, 3, 3, 3, 3}});
  batch = pairs.batch();
  batch.source = bad_ids;
  expect_error<Error>([&] { model.evaluate(batch, kPad, {{}, false}, state); }, {"11"});
  expect_error<ConfigError>([&] { model.greedy(pairs.source, pairs.source_valid, kStart, 9, 4); },
                            {"start and end ids", "[0, 9)"});
  models::BeamOptions zero;
  zero.beam = 0;
  expect_error<ConfigError>(
      [&] { model.beam_search(pairs.source, pairs.source_valid, kStart, kEnd, 4, zero); },
      {"beam is 0"});
}

}  // namespace
}  // namespace reformer
