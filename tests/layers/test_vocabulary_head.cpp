// The vocabulary head (layers/vocabulary_head.hpp) against a plain host
// reference of logits = h W + b (or h E^T + b, tied) and the smoothed
// cross-entropy of ops/cross_entropy.hpp, in double; its gradients against
// finite differences; the loss independent of loss_chunk.
#include "reformer/layers/vocabulary_head.hpp"
#include "support/checks.hpp"
#include "support/gradcheck.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace reformer {
namespace {

using namespace reformer::testing;
using layers::VocabularyHead;
using layers::VocabularyHeadConfig;

constexpr Index kRows = 7, kWidth = 5, kVocab = 6;

struct HeadCase {
  ParameterSet<double> params;
  Parameter<double>* table = nullptr;  // the tied embedding table [vocab, width]
  VocabularyHead<double> head;
  View2<double> hidden{"hidden", kRows, kWidth}, dhidden{"dhidden", kRows, kWidth};
  View1<int> targets{"targets", kRows};
  std::vector<int> host_targets{2, 0, 5, 1, 3, 0, 4};
  int ignore_id;

  static Parameter<double>* make_table(ParameterSet<double>& params, bool tied) {
    return tied ? &params.add("embedding", {kVocab, kWidth}) : nullptr;
  }
  HeadCase(const VocabularyHeadConfig& config, bool tied, int ignore)
      : table(make_table(params, tied)), head("out", config, params, table), ignore_id(ignore) {
    head.init({3, 4});
    if (table) fill_uniform(table->value, 21, -0.5, 0.5);
    fill_uniform(params.get("out.b").value, 22, -0.3, 0.3);
    fill_uniform(hidden, 23);
    auto h = Kokkos::create_mirror_view(targets);
    for (Index i = 0; i < kRows; ++i) h(i) = host_targets[i];
    Kokkos::deep_copy(targets, h);
  }
  double loss() { return head.forward(hidden, targets, ignore_id).loss; }

  // The same loss on the host from the parameters' values.
  double reference(double eps) const {
    const std::vector<double> h = to_host(hidden), b = to_host(params.get("out.b").value);
    const std::vector<double> w = to_host(table ? table->value : params.get("out.w").value);
    double total = 0;
    int counted = 0;
    for (Index i = 0; i < kRows; ++i) {
      const int t = host_targets[i];
      if (t == ignore_id || t == -1) continue;
      std::vector<double> z(kVocab);
      double top = -INFINITY;
      for (Index c = 0; c < kVocab; ++c) {
        z[c] = b[c];
        for (Index k = 0; k < kWidth; ++k)
          z[c] += h[i * kWidth + k] * (table ? w[c * kWidth + k] : w[k * kVocab + c]);
        top = std::max(top, z[c]);
      }
      double sum = 0;
      for (double v : z) sum += std::exp(v - top);
      const double lse = top + std::log(sum);
      const double others = ignore_id >= 0 ? kVocab - 2 : kVocab - 1;
      for (Index c = 0; c < kVocab; ++c) {
        const double q = c == t ? 1 - eps : c == ignore_id ? 0 : eps / others;
        total -= q * (z[c] - lse);
      }
      ++counted;
    }
    return total / counted;
  }
};

VocabularyHeadConfig head_config(double eps, Index chunk) {
  VocabularyHeadConfig c;
  c.d_in = kWidth;
  c.vocab = kVocab;
  c.label_smoothing = eps;
  c.loss_chunk = chunk;
  return c;
}

TEST(VocabularyHead, MatchesPlainReferenceForEveryChunkAndSmoothing) {
  for (bool tied : {false, true})
    for (int ignore : {-1, 0})
      for (double eps : {0.0, 0.1}) {
        const double expected = HeadCase(head_config(eps, 0), tied, ignore).reference(eps);
        for (Index chunk : {Index(0), Index(1), Index(3), Index(1024)}) {
          HeadCase c(head_config(eps, chunk), tied, ignore);
          const auto r = c.head.forward(c.hidden, c.targets, ignore);
          EXPECT_NEAR(r.loss, expected, 1e-13) << tied << ignore << eps << chunk;
          // ignore 0 drops the two rows whose target is 0.
          EXPECT_EQ(r.tokens, ignore == 0 ? kRows - 2 : kRows);
          EXPECT_EQ(c.head.forward_backward(c.hidden, c.targets, ignore, 1.0, c.dhidden).loss,
                    r.loss);
        }
      }
}

TEST(VocabularyHead, GradientsMatchFiniteDifferences) {
  for (bool tied : {false, true})
    for (int ignore : {-1, 0}) {
      HeadCase c(head_config(0.1, 3), tied, ignore);
      c.params.zero_grad();
      c.head.forward_backward(c.hidden, c.targets, ignore, 1.0, c.dhidden);
      auto loss = [&] { return c.loss(); };
      EXPECT_LT(gradient_error(c.hidden, c.dhidden, loss), 1e-7) << tied << ignore;
      const auto& weight = tied ? *c.table : c.params.get("out.w");
      EXPECT_LT(gradient_error(weight.value, weight.grad, loss), 1e-7) << tied << ignore;
      const auto& bias = c.params.get("out.b");
      EXPECT_LT(gradient_error(bias.value, bias.grad, loss), 1e-7) << tied << ignore;
    }
}

TEST(VocabularyHead, LossScaleScalesTheGradientsOnly) {
  HeadCase one(head_config(0.0, 2), false, -1), half(head_config(0.0, 2), false, -1);
  one.params.zero_grad();
  half.params.zero_grad();
  const double a = one.head.forward_backward(one.hidden, one.targets, -1, 1.0, one.dhidden).loss;
  const double b =
      half.head.forward_backward(half.hidden, half.targets, -1, 0.5, half.dhidden).loss;
  EXPECT_EQ(a, b);
  const auto g1 = to_host(one.params.get("out.w").grad),
             g2 = to_host(half.params.get("out.w").grad);
  const auto d1 = to_host(one.dhidden), d2 = to_host(half.dhidden);
  for (size_t i = 0; i < g1.size(); ++i) EXPECT_NEAR(g2[i], 0.5 * g1[i], 1e-15);
  for (size_t i = 0; i < d1.size(); ++i) EXPECT_NEAR(d2[i], 0.5 * d1[i], 1e-15);
}

}  // namespace
}  // namespace reformer
