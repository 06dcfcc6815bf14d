#include "reformer/core/error.hpp"
#include "reformer/ops/cross_entropy.hpp"
#include "support/checks.hpp"
#include "support/gradcheck.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

namespace reformer {
namespace {

using namespace reformer::testing;

template <class T>
View2<T> device_matrix(const std::vector<double>& values, Index rows, Index cols) {
  View2<T> m("m", rows, cols);
  auto host = Kokkos::create_mirror_view(m);
  for (Index i = 0; i < rows; ++i)
    for (Index j = 0; j < cols; ++j) host(i, j) = static_cast<T>(values[i * cols + j]);
  Kokkos::deep_copy(m, host);
  return m;
}

// n = 10 rows, d = 6 features, V = 11 classes; class 0 is the pad class by default
// and is the target of rows 1 and 5.
struct CrossEntropyCase {
  Index n = 10, d = 6, vocab = 11;
  std::vector<int> target_values{3, 0, 7, 10, 1, 0, 5, 7, 2, 9};
  ops::CrossEntropyOptions options;
  View2<double> h, w, dh, dw;
  View1<double> b, db;
  View1<int> targets = device_ints(target_values);

  explicit CrossEntropyCase(int pad_id = 0, double smoothing = 0.1, Index chunk_rows = 4,
                            bool with_bias = true)
      : h("h", n, d),
        w("w", d, vocab),
        dh("dh", n, d),
        dw("dw", d, vocab),
        b("b", with_bias ? vocab : 0),
        db("db", with_bias ? vocab : 0) {
    options.pad_id = pad_id;
    options.smoothing = smoothing;
    options.chunk_rows = chunk_rows;
    fill_uniform(h, 1, -1.5, 1.5);
    fill_uniform(w, 2, -1.5, 1.5);
    fill_uniform(b, 3, -0.5, 0.5);
  }
  void set_targets(const std::vector<int>& values) {
    target_values = values;
    targets = device_ints(values);
  }
  ops::CrossEntropyResult forward() {
    return ops::cross_entropy_forward<double>(h, w, b, targets, options);
  }
  ops::CrossEntropyResult backward() {
    Kokkos::deep_copy(dw, 0.0);
    Kokkos::deep_copy(db, 0.0);
    return ops::cross_entropy_forward_backward<double>(h, w, b, targets, options, dh, dw, db);
  }
};

struct Reference {
  double loss = 0;
  double nll = 0;  // -(1 / N) sum_i log p_{t_i}
  Index tokens = 0, correct = 0;
  std::vector<double> dh, dw, db;
};

// Plain loops over the full logits.
Reference host_reference(const CrossEntropyCase& c) {
  const auto h = to_host(c.h), w = to_host(c.w), b = to_host(c.b);
  const Index n = c.n, d = c.d, V = c.vocab;
  const int pad = c.options.pad_id;
  const double eps = c.options.smoothing;
  const double other_q = eps / (pad >= 0 ? V - 2 : V - 1);
  Reference r;
  r.dh.assign(n * d, 0.0);
  r.dw.assign(d * V, 0.0);
  r.db.assign(b.size(), 0.0);
  for (Index i = 0; i < n; ++i) r.tokens += c.target_values[i] != pad;
  for (Index i = 0; i < n; ++i) {
    const int t = c.target_values[i];
    if (t == pad) continue;
    std::vector<double> z(V);
    for (Index k = 0; k < V; ++k) {
      z[k] = b.empty() ? 0.0 : b[k];
      for (Index j = 0; j < d; ++j) z[k] += h[i * d + j] * w[j * V + k];
    }
    Index argmax = 0;
    for (Index k = 1; k < V; ++k)
      if (z[k] > z[argmax]) argmax = k;
    r.correct += argmax == t;
    double sum = 0;
    for (Index k = 0; k < V; ++k) sum += std::exp(z[k] - z[argmax]);
    const double lse = z[argmax] + std::log(sum);
    r.nll -= z[t] - lse;
    for (Index k = 0; k < V; ++k) {
      const double q = k == t ? 1 - eps : (k == pad ? 0.0 : other_q);
      r.loss -= q * (z[k] - lse);
      const double dz = (std::exp(z[k] - lse) - q) / r.tokens;
      for (Index j = 0; j < d; ++j) {
        r.dh[i * d + j] += dz * w[j * V + k];
        r.dw[j * V + k] += h[i * d + j] * dz;
      }
      if (!b.empty()) r.db[k] += dz;
    }
  }
  r.loss /= r.tokens;
  r.nll /= r.tokens;
  return r;
}

struct Config {
  int pad_id;
  double smoothing;
  Index chunk_rows;
  bool with_bias;
};
const std::vector<Config> kConfigs = {
    {0, 0.1, 4, true}, {-1, 0.1, 3, true}, {0, 0.0, 10, true}, {5, 0.2, 1, false}};

TEST(CrossEntropy, ForwardMatchesHostReference) {
  for (const auto& config : kConfigs) {
    CrossEntropyCase c(config.pad_id, config.smoothing, config.chunk_rows, config.with_bias);
    const auto result = c.forward();
    const auto expected = host_reference(c);
    EXPECT_NEAR(result.loss, expected.loss, 1e-12 * expected.loss) << "pad " << config.pad_id;
    // The likelihood an evaluation reports, without the smoothing's terms.
    EXPECT_NEAR(result.nll, expected.nll, 1e-12 * expected.nll) << "pad " << config.pad_id;
    if (config.smoothing > 0) EXPECT_GT(std::abs(result.nll - result.loss), 1e-3 * result.loss);
    EXPECT_EQ(result.tokens, expected.tokens) << "pad " << config.pad_id;
    EXPECT_EQ(result.correct, expected.correct) << "pad " << config.pad_id;
  }
}

TEST(CrossEntropy, GradientsMatchHostReferenceAndFiniteDifferences) {
  for (const auto& config : kConfigs) {
    CrossEntropyCase c(config.pad_id, config.smoothing, config.chunk_rows, config.with_bias);
    const auto result = c.backward();
    const auto expected = host_reference(c);
    EXPECT_NEAR(result.loss, expected.loss, 1e-12 * expected.loss);
    EXPECT_NEAR(result.nll, expected.nll, 1e-12 * expected.nll);
    EXPECT_LT(relative_error(to_host(c.dh), expected.dh), 1e-12) << "pad " << config.pad_id;
    EXPECT_LT(relative_error(to_host(c.dw), expected.dw), 1e-12) << "pad " << config.pad_id;
    // Finite differences at 24 elements of each tensor (each costs two forward passes).
    auto loss = [&] { return c.forward().loss; };
    EXPECT_LT(gradient_error(c.h, c.dh, loss, 24), 1e-6) << "pad " << config.pad_id;
    EXPECT_LT(gradient_error(c.w, c.dw, loss, 24), 1e-6) << "pad " << config.pad_id;
    if (config.with_bias) {
      EXPECT_LT(relative_error(to_host(c.db), expected.db), 1e-12);
      EXPECT_LT(gradient_error(c.b, c.db, loss, 24), 1e-6) << "pad " << config.pad_id;
    }
  }
}

// The loss of logits log q (the prediction equal to the smoothed targets) is
// the entropy of q: smoothed_target_entropy, what a model subtracts to report
// the KL divergence.
TEST(CrossEntropy, SmoothedTargetEntropyIsTheLossAtTheTargets) {
  const Index n = 3, vocab = 7;
  const double eps = 0.1;
  for (const int pad : {-1, 0}) {
    const Index others = vocab - 1 - (pad >= 0 ? 1 : 0);
    View2<double> h("h", n, vocab), w("w", vocab, vocab);
    View1<double> bias("bias", 0);
    Kokkos::View<int*, Layout, MemSpace> targets("targets", n);
    auto hh = Kokkos::create_mirror_view(h);
    auto wh = Kokkos::create_mirror_view(w);
    auto th = Kokkos::create_mirror_view(targets);
    double want = 0;
    for (Index c = 0; c < vocab; ++c) wh(c, c) = 1.0;  // logits = h
    for (Index i = 0; i < n; ++i) {
      th(i) = int(2 + i);
      for (Index c = 0; c < vocab; ++c) {
        const double q = c == th(i) ? 1 - eps : c == pad ? 0.0 : eps / double(others);
        hh(i, c) = q > 0 ? std::log(q) : -1e3;
        if (i == 0 && q > 0) want -= q * std::log(q);
      }
    }
    Kokkos::deep_copy(h, hh);
    Kokkos::deep_copy(w, wh);
    Kokkos::deep_copy(targets, th);
    ops::CrossEntropyOptions options;
    options.pad_id = pad;
    options.smoothing = eps;
    const auto r = ops::cross_entropy_forward<double>(h, w, bias, targets, options);
    EXPECT_NEAR(ops::smoothed_target_entropy(eps, vocab, pad), want, 1e-15);
    EXPECT_NEAR(r.loss, want, 1e-12) << "pad " << pad;
  }
  EXPECT_EQ(ops::smoothed_target_entropy(0.0, 7, 0), 0.0);
}

TEST(CrossEntropy, ChunkedEqualsUnchunked) {
  CrossEntropyCase whole(0, 0.1, 10);
  const auto expected = whole.backward();
  for (Index chunk_rows : {3, 1, 64}) {
    CrossEntropyCase c(0, 0.1, chunk_rows);
    const auto result = c.backward();
    EXPECT_NEAR(result.loss, expected.loss, 1e-13 * expected.loss) << "chunk " << chunk_rows;
    EXPECT_EQ(result.tokens, expected.tokens);
    EXPECT_EQ(result.correct, expected.correct);
    EXPECT_LT(relative_error(to_host(c.dh), to_host(whole.dh)), 1e-13) << "chunk " << chunk_rows;
    EXPECT_LT(relative_error(to_host(c.dw), to_host(whole.dw)), 1e-13) << "chunk " << chunk_rows;
    EXPECT_LT(relative_error(to_host(c.db), to_host(whole.db)), 1e-13) << "chunk " << chunk_rows;
    EXPECT_NEAR(c.forward().loss, result.loss, 1e-14 * result.loss) << "chunk " << chunk_rows;
  }
}

TEST(CrossEntropy, PaddingRowsContributeNothing) {
  CrossEntropyCase c(0, 0.1, 3);
  const auto full = c.backward();
  EXPECT_EQ(full.tokens, 8);
  const auto dh = to_host(c.dh);
  for (Index i : {1, 5})
    for (Index j = 0; j < c.d; ++j) EXPECT_EQ(dh[i * c.d + j], 0.0) << "row " << i;

  // Changing the hidden states of pad rows changes nothing.
  CrossEntropyCase changed(0, 0.1, 3);
  auto h = to_host(changed.h);
  for (Index j = 0; j < c.d; ++j) h[1 * c.d + j] = h[5 * c.d + j] = 7.0 + j;
  changed.h = device_matrix<double>(h, c.n, c.d);
  EXPECT_EQ(changed.backward().loss, full.loss);
  EXPECT_EQ(to_host(changed.dw), to_host(c.dw));

  // The same problem without the pad rows gives the same mean loss and gradients.
  CrossEntropyCase kept(0, 0.1, 3);
  std::vector<double> h_kept;
  std::vector<int> t_kept;
  const auto h_all = to_host(c.h);
  for (Index i = 0; i < c.n; ++i) {
    if (c.target_values[i] == 0) continue;
    t_kept.push_back(c.target_values[i]);
    h_kept.insert(h_kept.end(), h_all.begin() + i * c.d, h_all.begin() + (i + 1) * c.d);
  }
  kept.n = 8;
  kept.h = device_matrix<double>(h_kept, kept.n, c.d);
  kept.dh = View2<double>("dh", kept.n, c.d);
  kept.set_targets(t_kept);
  const auto without = kept.backward();
  EXPECT_EQ(without.tokens, 8);
  EXPECT_NEAR(without.loss, full.loss, 1e-13 * full.loss);
  EXPECT_LT(relative_error(to_host(kept.dw), to_host(c.dw)), 1e-13);
}

TEST(CrossEntropy, AllPadRowsGiveZeroLossAndGradient) {
  CrossEntropyCase c(0, 0.1, 4);
  c.set_targets(std::vector<int>(c.n, 0));
  Kokkos::deep_copy(c.dh, 1.0);
  const auto result = c.backward();
  EXPECT_EQ(result.loss, 0.0);
  EXPECT_EQ(result.tokens, 0);
  EXPECT_EQ(result.correct, 0);
  for (double v : to_host(c.dh)) EXPECT_EQ(v, 0.0);
  for (double v : to_host(c.dw)) EXPECT_EQ(v, 0.0);
}

TEST(CrossEntropy, CountsCorrectArgmaxPredictions) {
  CrossEntropyCase c(-1, 0.1, 4);
  // Targets: the argmax class on even rows, another class on odd rows.
  const auto h = to_host(c.h), w = to_host(c.w), b = to_host(c.b);
  std::vector<int> targets(c.n);
  for (Index i = 0; i < c.n; ++i) {
    int best = 0;
    double best_z = -INFINITY;
    for (Index k = 0; k < c.vocab; ++k) {
      double z = b[k];
      for (Index j = 0; j < c.d; ++j) z += h[i * c.d + j] * w[j * c.vocab + k];
      if (z > best_z) best_z = z, best = static_cast<int>(k);
    }
    targets[i] = i % 2 == 0 ? best : (best + 1) % static_cast<int>(c.vocab);
  }
  c.set_targets(targets);
  const auto result = c.forward();
  EXPECT_EQ(result.correct, 5);
  EXPECT_EQ(result.tokens, 10);
}

TEST(CrossEntropy, FloatMatchesDouble) {
  CrossEntropyCase c(0, 0.1, 3);
  const auto expected = c.backward();
  const auto h = device_matrix<float>(to_host(c.h), c.n, c.d);
  const auto w = device_matrix<float>(to_host(c.w), c.d, c.vocab);
  View1<float> b("b", c.vocab), db("db", c.vocab);
  {  // converted on the host: deep_copy changes the type only within one space
    auto host = Kokkos::create_mirror_view(b);
    const auto from = to_host(c.b);
    for (Index i = 0; i < c.vocab; ++i) host(i) = float(from[std::size_t(i)]);
    Kokkos::deep_copy(b, host);
  }
  View2<float> dh("dh", c.n, c.d), dw("dw", c.d, c.vocab);
  const auto result =
      ops::cross_entropy_forward_backward<float>(h, w, b, c.targets, c.options, dh, dw, db);
  EXPECT_NEAR(result.loss, expected.loss, 1e-5 * expected.loss);
  EXPECT_EQ(result.correct, expected.correct);
  EXPECT_LT(relative_error(to_host(dh), to_host(c.dh)), 1e-5);
  EXPECT_LT(relative_error(to_host(dw), to_host(c.dw)), 1e-5);
  EXPECT_LT(relative_error(to_host(db), to_host(c.db)), 1e-5);
}

// A host-transposed copy of a device matrix: [rows, cols] -> [cols, rows].
View2<double> transposed(const View2<double>& m) {
  const Index rows = m.extent(0), cols = m.extent(1);
  const auto values = to_host(m);
  std::vector<double> t(values.size());
  for (Index i = 0; i < rows; ++i)
    for (Index j = 0; j < cols; ++j) t[j * rows + i] = values[i * cols + j];
  return device_matrix<double>(t, cols, rows);
}

// The weight as a tied embedding table E [V, d] (weight_is_embedding) gives the
// results of the untied call with W = E^T, without a transposed copy.
TEST(CrossEntropy, TiedEmbeddingWeightEqualsUntiedTransposedCopy) {
  for (const auto& config : kConfigs) {
    CrossEntropyCase c(config.pad_id, config.smoothing, config.chunk_rows, config.with_bias);
    const auto untied = c.backward();
    const auto untied_forward = c.forward();
    ops::CrossEntropyOptions options = c.options;
    options.weight_is_embedding = true;
    const View2<double> table = transposed(c.w), dtable("dtable", c.vocab, c.d);
    View2<double> dh("dh", c.n, c.d);
    View1<double> db("db", c.b.extent(0));
    const auto forward = ops::cross_entropy_forward<double>(c.h, table, c.b, c.targets, options);
    EXPECT_NEAR(forward.loss, untied_forward.loss, 1e-13 * untied_forward.loss);
    EXPECT_EQ(forward.tokens, untied_forward.tokens);
    EXPECT_EQ(forward.correct, untied_forward.correct);
    const auto tied = ops::cross_entropy_forward_backward<double>(c.h, table, c.b, c.targets,
                                                                  options, dh, dtable, db);
    EXPECT_NEAR(tied.loss, untied.loss, 1e-13 * untied.loss) << "pad " << config.pad_id;
    EXPECT_EQ(tied.tokens, untied.tokens);
    EXPECT_EQ(tied.correct, untied.correct);
    EXPECT_LT(relative_error(to_host(dh), to_host(c.dh)), 1e-13) << "pad " << config.pad_id;
    EXPECT_LT(relative_error(to_host(dtable), to_host(transposed(c.dw))), 1e-13)
        << "pad " << config.pad_id;
    EXPECT_LT(relative_error(to_host(db), to_host(c.db)), 1e-13) << "pad " << config.pad_id;
  }
}

TEST(CrossEntropy, TiedEmbeddingGradientsMatchFiniteDifferences) {
  for (const auto& config : kConfigs) {
    CrossEntropyCase c(config.pad_id, config.smoothing, config.chunk_rows, config.with_bias);
    c.options.weight_is_embedding = true;
    c.w = transposed(c.w);  // [V, d]
    c.dw = View2<double>("dw", c.vocab, c.d);
    Kokkos::deep_copy(c.dw, 1.0);  // accumulated into: the gradient is dw - 1
    Kokkos::deep_copy(c.db, 0.0);
    ops::cross_entropy_forward_backward<double>(c.h, c.w, c.b, c.targets, c.options, c.dh, c.dw,
                                                c.db);
    auto dw = to_host(c.dw);
    for (double& v : dw) v -= 1.0;
    const View2<double> grad_w = device_matrix<double>(dw, c.vocab, c.d);
    auto loss = [&] { return c.forward().loss; };
    EXPECT_LT(gradient_error(c.h, c.dh, loss, 24), 1e-6) << "pad " << config.pad_id;
    EXPECT_LT(gradient_error(c.w, grad_w, loss, 24), 1e-6) << "pad " << config.pad_id;
    if (config.with_bias) EXPECT_LT(gradient_error(c.b, c.db, loss, 24), 1e-6);
  }
}

TEST(CrossEntropy, TiedEmbeddingRejectsWeightWithoutModelWidth) {
  CrossEntropyCase c;
  c.options.weight_is_embedding = true;
  // A [d, V] weight passed as a tied table: its dimension 1 (11) is not d (6).
  expect_error<ShapeError>([&] { c.forward(); },
                           {"cross_entropy_forward: weight has shape [6, 11] and h has shape "
                            "[10, 6]; weight must be [V, d] (weight_is_embedding), so its "
                            "dimension 1 must be 6"});
  c.w = transposed(c.w);
  View2<double> wrong_dw("dw", c.d, c.vocab);
  expect_error<ShapeError>(
      [&] {
        ops::cross_entropy_forward_backward<double>(c.h, c.w, c.b, c.targets, c.options, c.dh,
                                                    wrong_dw, c.db);
      },
      {"weight has shape [11, 6] but dweight has shape [6, 11]"});
}

TEST(CrossEntropy, RejectsBadInputs) {
  CrossEntropyCase c;
  const char* op = "cross_entropy_forward";
  auto with = [&](auto change) {
    CrossEntropyCase bad;
    change(bad);
    return [bad]() mutable { bad.forward(); };
  };
  expect_error<ConfigError>(with([](auto& x) { x.options.chunk_rows = 0; }),
                            {op, "chunk_rows is 0"});
  expect_error<ConfigError>(with([](auto& x) { x.options.smoothing = 1.0; }),
                            {op, "smoothing is 1 ", "[0, 1)"});
  expect_error<ConfigError>(with([](auto& x) { x.options.smoothing = -0.25; }),
                            {op, "smoothing is -0.25"});
  expect_error<ConfigError>(with([](auto& x) { x.options.pad_id = 11; }),
                            {op, "pad_id is 11", "[0, 11)"});
  expect_error<ConfigError>(with([](auto& x) {
                              auto t = x.target_values;
                              t[5] = 11;
                              x.set_targets(t);
                            }),
                            {op, "targets[5] is 11", "[0, 11)"});
  expect_error<ShapeError>(with([](auto& x) { x.w = View2<double>("w", 5, 11); }),
                           {op, "weight has shape [5, 11]", "must be 6"});
  expect_error<ShapeError>(with([](auto& x) { x.b = View1<double>("b", 10); }),
                           {op, "bias has shape [10]", "must be 11"});
  expect_error<ShapeError>(with([](auto& x) { x.set_targets(std::vector<int>(9, 1)); }),
                           {op, "targets has shape [9]", "must be 10"});
  View2<double> short_dh("dh", c.n - 1, c.d);
  expect_error<ShapeError>(
      [&] {
        ops::cross_entropy_forward_backward<double>(c.h, c.w, c.b, c.targets, c.options, short_dh,
                                                    c.dw, c.db);
      },
      {"cross_entropy_forward_backward", "dh has shape [9, 6]"});
  CrossEntropyCase tiny;
  tiny.vocab = 2;
  tiny.w = View2<double>("w", tiny.d, 2);
  tiny.b = View1<double>();
  tiny.set_targets(std::vector<int>(tiny.n, 1));
  expect_error<ConfigError>([&] { tiny.forward(); },
                            {"smoothing 0.1 needs a class", "vocabulary has 2 classes"});
}

}  // namespace
}  // namespace reformer
