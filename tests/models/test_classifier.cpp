// The encoder classifier (models/classifier.hpp): gradients against finite
// differences in double for every attention kind, pooling and block kind; its
// head against a plain host reference on the streams of the Reformer LM with
// the same parameters; padding changes no prediction; errors name the value.
#include "reformer/core/error.hpp"
#include "reformer/models/classifier.hpp"
#include "reformer/models/reformer_lm.hpp"
#include "support/checks.hpp"
#include "support/gradcheck.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace reformer {
namespace {

using namespace reformer::testing;
using attention::AttentionKind;
using models::Classifier;
using models::ClassifierConfig;
using models::ClassifierState;
using models::ModelCall;
using IdView = Kokkos::View<int**, Layout, MemSpace>;

double max_difference(const std::vector<double>& a, const std::vector<double>& b) {
  double m = 0;
  for (std::size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(a[i] - b[i]));
  return m;
}

// -log softmax(logits)[label], on the host.
double host_cross_entropy(const std::vector<double>& logits, int label) {
  double m = logits[0], sum = 0;
  for (double v : logits) m = std::max(m, v);
  for (double v : logits) sum += std::exp(v - m);
  return m + std::log(sum) - logits[std::size_t(label)];
}

ClassifierConfig tiny_config() {
  ClassifierConfig c;
  auto& e = c.encoder;
  e.vocab = 11;
  e.d_model = 6;
  e.d_ff = 10;
  e.heads = 2;
  e.d_head = 3;
  e.layers = 2;
  e.causal = false;
  e.attention = {AttentionKind::Local, AttentionKind::Lsh};
  e.positions = models::PositionKind::Sinusoidal;
  e.max_length = 16;
  e.ff_chunk = 5;
  e.dropout = 0.1;
  e.attention_dropout = 0.1;
  e.label_smoothing = 0.1;
  e.lsh.chunk = 4;
  e.lsh.n_hashes = 2;
  e.lsh.n_buckets = {4};
  e.local.chunk = 4;
  c.classes = 3;
  return c;
}

// A mask whose row b keeps its first real[b] positions.
IdView valid_prefixes(Index length, const std::vector<Index>& real) {
  IdView valid("valid", Index(real.size()), length);
  auto host = Kokkos::create_mirror_view(valid);
  for (Index b = 0; b < Index(real.size()); ++b)
    for (Index j = 0; j < length; ++j) host(b, j) = j < real[std::size_t(b)];
  Kokkos::deep_copy(valid, host);
  return valid;
}

struct ModelCase {
  ParameterSet<double> params;
  Classifier<double> model;
  ClassifierState<double> state;
  IdView ids;
  View1<int> labels;
  ModelCall call{{9, 4}, true};

  explicit ModelCase(const ClassifierConfig& config, Index batch = 3, Index length = 8,
                     std::vector<int> label_values = {2, -1, 0})
      : model(config, params),
        ids(random_ids(batch, length, config.encoder.vocab, 1)),
        labels(device_ints(label_values)) {
    model.init({1, 2});
    std::uint64_t seed = 50;  // non-trivial LayerNorm gains and biases
    for (const auto& name : params.names())
      if (name.find("gamma") != std::string::npos)
        fill_uniform(params.get(name).value, ++seed, 0.5, 1.5);
      else if (name.find("beta") != std::string::npos || name.find(".b") != std::string::npos)
        fill_uniform(params.get(name).value, ++seed, -0.2, 0.2);
  }
  double loss() { return model.evaluate(ids, labels, call, state).loss; }
  ops::CrossEntropyResult gradients() {
    params.zero_grad();
    return model.forward_backward(ids, labels, call, state);
  }
  std::vector<double> logits(const ModelCall& c, models::IdMatrix x) {
    View2<double> out("logits", x.extent(0) / std::size_t(model.config().documents),
                      model.config().classes);
    model.logits(x, c, out, state);
    return to_host(out);
  }
};

void expect_parameter_gradients(ModelCase& c, double tolerance) {
  const auto result = c.gradients();
  EXPECT_EQ(result.tokens, 2);  // the row labelled -1 counts nowhere
  EXPECT_NEAR(result.loss, c.loss(), 1e-12);
  auto loss = [&] { return c.loss(); };
  for (const auto& name : c.params.names()) {
    auto& p = c.params.get(name);
    EXPECT_LT(gradient_error(p.value, p.grad, loss, 12), tolerance) << name;
  }
}

// Reversible, a local and an LSH layer, dropout on, mean pooling over a
// padding mask and a length that does not fit the chunks (7, run as 8).
TEST(Classifier, GradientCheckReversibleLocalLshMasked) {
  ModelCase c(tiny_config(), 3, 7);
  c.call.valid = valid_prefixes(7, {7, 4, 2});
  expect_parameter_gradients(c, 1e-6);
}

// Stored activations, full and exact attention, first-position pooling.
TEST(Classifier, GradientCheckStoredFullExactFirstPooling) {
  auto config = tiny_config();
  config.encoder.reversible = false;
  config.encoder.attention = {AttentionKind::Full, AttentionKind::Exact};
  config.pooling = models::Pooling::First;
  ModelCase c(config);
  expect_parameter_gradients(c, 1e-6);
}

// Reversible and stored blocks are the same network: equal losses and
// gradients on the same parameters.
TEST(Classifier, ReversibleEqualsStored) {
  auto config = tiny_config();
  ModelCase reversible(config);
  config.encoder.reversible = false;
  ModelCase stored(config);
  const auto a = reversible.gradients(), b = stored.gradients();
  EXPECT_NEAR(a.loss, b.loss, 1e-12);
  for (const auto& name : reversible.params.names())
    EXPECT_LT(relative_error(to_host(reversible.params.get(name).grad),
                             to_host(stored.params.get(name).grad)),
              1e-10)
        << name;
}

// The head against a plain reference: the Reformer LM with the same
// embedding and blocks gives the top streams [y1; y2]; on the host, the mean
// over each row's real positions, LayerNorm, h W + b and the cross-entropy.
TEST(Classifier, HeadMatchesHostReference) {
  auto config = tiny_config();
  config.encoder.label_smoothing = 0;
  ModelCase c(config, 3, 8);
  const std::vector<Index> real = {8, 5, 3};
  ModelCall call{{9, 4}, false};
  call.valid = valid_prefixes(8, real);
  // The LM on the same embedding and block parameters.
  ParameterSet<double> lm_params;
  models::ReformerLM<double> lm(config.encoder, lm_params);
  for (const auto& name : lm_params.names())
    if (c.params.contains(name))
      Kokkos::deep_copy(lm_params.get(name).value, c.params.get(name).value);
  models::ReformerState<double> lm_state;
  lm.forward(c.ids, call, lm_state);
  const auto y1 = to_host(lm_state.x1), y2 = to_host(lm_state.x2);
  const Index B = 3, L = 8, d = config.encoder.d_model, C = config.classes;
  const auto gamma = to_host(c.params.get("head.norm.gamma").value);
  const auto beta = to_host(c.params.get("head.norm.beta").value);
  const auto w = to_host(c.params.get("head.w").value);  // [2d, C]
  const auto bias = to_host(c.params.get("head.b").value);
  const std::vector<int> labels = {2, -1, 0};
  std::vector<double> want_logits;
  double loss = 0;
  int counted = 0;
  for (Index b = 0; b < B; ++b) {
    std::vector<double> p(std::size_t(2 * d), 0.0);
    for (Index t = 0; t < real[std::size_t(b)]; ++t)
      for (Index j = 0; j < d; ++j) {
        p[std::size_t(j)] += y1[std::size_t((b * L + t) * d + j)] / double(real[std::size_t(b)]);
        p[std::size_t(d + j)] +=
            y2[std::size_t((b * L + t) * d + j)] / double(real[std::size_t(b)]);
      }
    double mean = 0, var = 0;
    for (double v : p) mean += v / double(2 * d);
    for (double v : p) var += (v - mean) * (v - mean) / double(2 * d);
    const double rstd = 1 / std::sqrt(var + config.encoder.layer_norm_eps);
    std::vector<double> z(static_cast<std::size_t>(C), 0.0);
    for (Index k = 0; k < C; ++k) {
      double s = bias[std::size_t(k)];
      for (Index j = 0; j < 2 * d; ++j)
        s += ((p[std::size_t(j)] - mean) * rstd * gamma[std::size_t(j)] + beta[std::size_t(j)]) *
             w[std::size_t(j * C + k)];
      z[std::size_t(k)] = s;
      want_logits.push_back(s);
    }
    if (labels[std::size_t(b)] < 0) continue;
    loss += host_cross_entropy(z, labels[std::size_t(b)]);
    ++counted;
  }
  const auto got = c.logits(call, c.ids);
  ASSERT_EQ(got.size(), want_logits.size());
  for (std::size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want_logits[i], 1e-12) << i;
  const auto result = c.model.evaluate(c.ids, c.labels, call, c.state);
  EXPECT_EQ(result.tokens, counted);
  EXPECT_NEAR(result.loss, loss / counted, 1e-12);
}

// Pairs of documents (LRA's Retrieval): gradients through the shared towers
// and the pair features [u; v; u * v; u - v], dropout on, over a padding mask
// and a length that does not fit the chunks. Three pairs, one labelled -1.
TEST(Classifier, GradientCheckPairsOfDocuments) {
  auto config = tiny_config();
  config.documents = 2;
  ModelCase c(config, 6, 7);
  c.call.valid = valid_prefixes(7, {7, 4, 2, 6, 3, 5});
  expect_parameter_gradients(c, 1e-6);
}

// The two towers: each document of a pair encoded alone by the
// single-sequence model with the same encoder and LayerNorm, and on the host
// z = [u; v; u * v; u - v], z W + b and the cross-entropy.
TEST(Classifier, PairHeadMatchesTheTowersAndAHostReference) {
  auto config = tiny_config();
  config.encoder.label_smoothing = 0;
  config.documents = 2;
  ModelCase pair(config, 6, 8);
  auto single_config = config;
  single_config.documents = 1;
  ModelCase single(single_config, 6, 8);
  for (const auto& name : single.params.names())
    if (name != "head.w")
      Kokkos::deep_copy(single.params.get(name).value, pair.params.get(name).value);
  ModelCall call{{9, 4}, false};
  call.valid = valid_prefixes(8, {8, 5, 3, 8, 2, 6});
  single.model.forward(pair.ids, call, single.state);
  const auto h = to_host(single.state.hidden);  // [6, 2d]: each document alone
  const auto got = pair.logits(call, pair.ids);
  EXPECT_LT(max_difference(to_host(pair.state.hidden), h), 1e-14);
  const Index w = 2 * config.encoder.d_model, C = config.classes;
  const auto weights = to_host(pair.params.get("head.w").value);  // [8d, C]
  const auto bias = to_host(pair.params.get("head.b").value);
  ASSERT_EQ(weights.size(), std::size_t(4 * w * C));
  const std::vector<int> labels = {2, -1, 0};
  double loss = 0;
  int counted = 0;
  ASSERT_EQ(got.size(), std::size_t(3 * C));
  for (Index b = 0; b < 3; ++b) {
    std::vector<double> z;
    for (int part = 0; part < 4; ++part)
      for (Index j = 0; j < w; ++j) {
        const double u = h[std::size_t(2 * b * w + j)], v = h[std::size_t((2 * b + 1) * w + j)];
        z.push_back(part == 0 ? u : part == 1 ? v : part == 2 ? u * v : u - v);
      }
    std::vector<double> logits;
    for (Index k = 0; k < C; ++k) {
      double sum = bias[std::size_t(k)];
      for (Index j = 0; j < 4 * w; ++j) sum += z[std::size_t(j)] * weights[std::size_t(j * C + k)];
      logits.push_back(sum);
      EXPECT_NEAR(got[std::size_t(b * C + k)], sum, 1e-12) << "pair " << b << " class " << k;
    }
    if (labels[std::size_t(b)] < 0) continue;
    loss += host_cross_entropy(logits, labels[std::size_t(b)]);
    ++counted;
  }
  const auto result = pair.model.evaluate(pair.ids, pair.labels, call, pair.state);
  EXPECT_EQ(result.tokens, counted);
  EXPECT_NEAR(result.loss, loss / counted, 1e-12);
}

// Padding a sequence changes none of its predictions: rows of 8 tokens
// against the same rows padded to 16 under a mask, every attention kind and
// both poolings (evaluation; LSH with a fixed bucket count).
TEST(Classifier, PaddingChangesNoPrediction) {
  for (const auto kind :
       {AttentionKind::Full, AttentionKind::Exact, AttentionKind::Lsh, AttentionKind::Local}) {
    for (const auto pooling : {models::Pooling::Mean, models::Pooling::First}) {
      auto config = tiny_config();
      config.encoder.attention = {kind};
      config.pooling = pooling;
      ModelCase c(config, 3, 8);
      ModelCall call{{9, 4}, false};
      const auto short_logits = c.logits(call, c.ids);
      IdView padded("padded", 3, 16);
      auto host = Kokkos::create_mirror_view(padded);
      const auto ids = Kokkos::create_mirror_view_and_copy(HostSpace(), c.ids);
      for (Index b = 0; b < 3; ++b)
        for (Index t = 0; t < 16; ++t) host(b, t) = t < 8 ? ids(b, t) : int(1 + (b + t) % 10);
      Kokkos::deep_copy(padded, host);
      ModelCall masked = call;
      masked.valid = valid_prefixes(16, {8, 8, 8});
      const auto padded_logits = c.logits(masked, padded);
      // Without the mask the mean reads the padding as tokens: other predictions.
      if (pooling == models::Pooling::Mean)
        EXPECT_GT(max_difference(c.logits(call, padded), short_logits), 1e-6) << to_string(kind);
      ASSERT_EQ(short_logits.size(), padded_logits.size());
      for (std::size_t i = 0; i < short_logits.size(); ++i)
        EXPECT_NEAR(padded_logits[i], short_logits[i], 1e-12)
            << to_string(kind) << ", " << models::to_string(pooling) << ", logit " << i;
    }
  }
}

TEST(Classifier, ParametersAreTheEncoderAndTheHead) {
  ParameterSet<double> params;
  Classifier<double> model(tiny_config(), params);
  EXPECT_TRUE(params.contains("embed.table"));
  EXPECT_EQ(params.get("head.w").matrix().extent(0), 12u);  // [2 d_model, classes]
  EXPECT_EQ(params.get("head.w").matrix().extent(1), 3u);
  EXPECT_FALSE(params.contains("out.w"));
  EXPECT_EQ(model.layers(), 2);
  EXPECT_EQ(model.layer_ranges().size(), 2u);
  auto pairs = tiny_config();
  pairs.documents = 2;
  ParameterSet<double> pair_params;
  Classifier<double> pair_model(pairs, pair_params);
  EXPECT_EQ(pair_params.get("head.w").matrix().extent(0), 48u);  // [8 d_model, classes]
  EXPECT_EQ(pair_params.size(), params.size());
}

TEST(Classifier, BadInputIsNamed) {
  ModelCase c(tiny_config());
  expect_error<ConfigError>(
      [&] {
        c.model.evaluate(c.ids, device_ints({0, 3, 1}), c.call, c.state);
      },
      {"labels", "3"});
  expect_error<ShapeError>(
      [&] {
        c.model.evaluate(c.ids, device_ints({0, 1}), c.call, c.state);
      },
      {"labels has 2 entries", "3 rows"});
  auto config = tiny_config();
  config.classes = 1;
  expect_error<ConfigError>([&] { config.validate(); }, {"classes is 1", "[2,"});
  expect_error<ConfigError>([] { models::parse_pooling("max"); }, {"\"max\"", "mean", "first"});
  config = tiny_config();
  config.documents = 3;
  expect_error<ConfigError>([&] { config.validate(); }, {"documents is 3", "2 (pairs"});
  config.documents = 2;
  ModelCase pairs(config, 6, 8);
  IdView odd("ids", 5, 8);
  expect_error<ShapeError>(
      [&] {
        pairs.model.evaluate(odd, device_ints({0, 1}), pairs.call, pairs.state);
      },
      {"5 rows", "pairs of documents", "even number of rows"});
  expect_error<ShapeError>(
      [&] {
        pairs.model.evaluate(pairs.ids, device_ints({0, 1, 0, 1, 0, 1}), pairs.call, pairs.state);
      },
      {"labels has 6 entries", "one label per pair (3)"});
  IdView empty("ids", 1, 0);
  expect_error<ShapeError>([&] { c.model.evaluate(empty, device_ints({0}), c.call, c.state); },
                           {"[1, 0]", "at least one"});
}

}  // namespace
}  // namespace reformer
