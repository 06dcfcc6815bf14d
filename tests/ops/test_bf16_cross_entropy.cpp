// Chunked cross-entropy with bf16 hidden rows against the float32 op on the
// same values (support/bf16_checks.hpp). The bf16 op widens h into a float32
// logits chunk and keeps the softmax and every sum in float32, so the loss,
// the token count, the correct count and the float32 parameter gradients are
// the float32 results up to float32 round-off; only dh is rounded, once.
#include "reformer/ops/cross_entropy.hpp"
#include "support/bf16_checks.hpp"
#include "support/checks.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

namespace reformer {
namespace {

using namespace reformer::testing;

struct Bf16CrossEntropyCase {
  bool tied = false;
  bool bias = true;
  int pad_id = -1;
  double smoothing = 0.0;
  Index chunk_rows = 8;

  std::string name() const {
    return std::string(tied ? "tied" : "untied") + (bias ? " bias" : " no bias") +
           " pad=" + std::to_string(pad_id) + " eps=" + std::to_string(smoothing) +
           " chunk=" + std::to_string(chunk_rows);
  }
};

// n = 45 rows (every fifth one a pad row: target pad_id, -1 meaning none),
// d = 48, V = 300.
void check_against_float(const Bf16CrossEntropyCase& c) {
  const Index n = 45, d = 48, vocab = 300;
  const std::string what = c.name();
  View2<float> h("h", n, d), dh("dh", n, d);
  View2<float> w("w", c.tied ? vocab : d, c.tied ? d : vocab);
  View1<float> b("b", c.bias ? vocab : 0);
  fill_uniform(h, 1, -1.5, 1.5);
  fill_uniform(w, 2, -1.0, 1.0);
  fill_uniform(b, 3, -0.5, 0.5);
  const auto h16 = bf16_of(h);  // h now holds the bf16 values on both sides
  // Targets: every fifth row a pad row (target pad_id; -1 means none), every
  // other row the argmax of its logits (so that `correct` counts something),
  // the rest spread over the vocabulary, never the pad class.
  const auto hh = to_host(h), wh = to_host(w), bh = to_host(b);
  std::vector<int> target_values(n);
  for (Index i = 0; i < n; ++i) {
    int t = int((i * 37 + 5) % vocab);
    if (i % 2 == 1) {
      double best = -1e300;
      for (Index v = 0; v < vocab; ++v) {
        double z = c.bias ? bh[v] : 0.0;
        for (Index k = 0; k < d; ++k)
          z += hh[i * d + k] * (c.tied ? wh[v * d + k] : wh[k * vocab + v]);
        if (z > best) best = z, t = int(v);
      }
    }
    if (t == c.pad_id) t = (t + 1) % int(vocab);
    target_values[i] = i % 5 == 2 ? c.pad_id : t;
  }
  const auto targets = device_ints(target_values);

  // Non-zero starting gradients: both ops accumulate into dweight and dbias.
  View2<float> dw("dw", w.extent(0), w.extent(1)), dw16("dw16", w.extent(0), w.extent(1));
  View1<float> db("db", b.extent(0)), db16("db16", b.extent(0));
  fill_uniform(dw, 4, -0.01, 0.01);
  fill_uniform(db, 5, -0.01, 0.01);
  Kokkos::deep_copy(dw16, dw);
  Kokkos::deep_copy(db16, db);

  ops::CrossEntropyOptions options;
  options.pad_id = c.pad_id;
  options.smoothing = c.smoothing;
  options.chunk_rows = c.chunk_rows;
  options.weight_is_embedding = c.tied;
  options.gradient_scale = 0.5;

  const auto want = ops::cross_entropy_forward<float>(h, w, b, targets, options);
  const auto got = ops::cross_entropy_forward<bf16>(h16, w, b, targets, options);
  EXPECT_EQ(got.tokens, want.tokens) << what;
  EXPECT_EQ(want.tokens, n - n / 5) << what;
  EXPECT_EQ(got.correct, want.correct) << what;
  EXPECT_GE(want.correct, 15) << what;  // most of the 18 argmax rows, rarely any other
  EXPECT_GT(want.loss, 1.0) << what;
  EXPECT_NEAR(got.loss, want.loss, 1e-6 * want.loss) << what << " forward loss";

  View2<bf16> dh16("dh16", n, d);
  const auto want_fb =
      ops::cross_entropy_forward_backward<float>(h, w, b, targets, options, dh, dw, db);
  const auto got_fb =
      ops::cross_entropy_forward_backward<bf16>(h16, w, b, targets, options, dh16, dw16, db16);
  EXPECT_EQ(got_fb.tokens, want_fb.tokens) << what;
  EXPECT_EQ(got_fb.correct, want_fb.correct) << what;
  EXPECT_NEAR(got_fb.loss, want_fb.loss, 1e-6 * want_fb.loss) << what << " backward loss";
  EXPECT_EQ(got_fb.loss, got.loss) << what << ": forward and forward-backward differ";
  // dh sums V products of dz with weights in [-1, 1] (float32 reordering),
  // then is rounded once to bf16. Pad rows are exactly 0 on both sides.
  const auto dh_got = to_host(dh16), dh_want = to_host(dh);
  expect_rounded(dh_got, dh_want, what + " dh", 4.0 * double(vocab) / 16777216.0);
  for (Index i = 2; i < n; i += 5)
    for (Index k = 0; k < d; ++k) ASSERT_EQ(dh_got[i * d + k], 0.0) << what << " pad row " << i;
  EXPECT_LT(relative_error(to_host(dw16), to_host(dw)), 1e-6) << what << " dweight";
  if (c.bias) EXPECT_LT(relative_error(to_host(db16), to_host(db)), 1e-6) << what << " dbias";
}

TEST(Bf16CrossEntropy, MatchesFloat32OnTheSameValues) {
  for (bool tied : {false, true})
    for (bool bias : {false, true})
      for (int pad_id : {-1, 7})
        for (double smoothing : {0.0, 0.1}) {
          Bf16CrossEntropyCase c;
          c.tied = tied;
          c.bias = bias;
          c.pad_id = pad_id;
          c.smoothing = smoothing;
          check_against_float(c);
        }
}

TEST(Bf16CrossEntropy, ChunkSizesDoNotChangeTheResult) {
  // One chunk of all rows, a chunk that does not divide n, single rows.
  for (Index chunk : {Index(1), Index(13), Index(1024)})
    for (bool tied : {false, true}) {
      Bf16CrossEntropyCase c;
      c.tied = tied;
      c.pad_id = 0;
      c.smoothing = 0.1;
      c.chunk_rows = chunk;
      check_against_float(c);
    }
}

// Only pad rows: no tokens, loss 0, dh overwritten with zeros, the parameter
// gradients untouched.
TEST(Bf16CrossEntropy, AllPadRowsGiveZeroGradient) {
  const Index n = 6, d = 8, vocab = 10;
  View2<float> h("h", n, d), w("w", d, vocab), dw("dw", d, vocab), dh_fill("dh_fill", n, d);
  View1<float> b("b", vocab), db("db", vocab);
  fill_uniform(h, 1);
  fill_uniform(w, 2);
  fill_uniform(dw, 3);
  fill_uniform(dh_fill, 4);
  const auto h16 = bf16_of(h);
  const auto dh16 = bf16_of(dh_fill);
  const auto dw_before = to_host(dw);
  ops::CrossEntropyOptions options;
  options.pad_id = 3;
  const auto targets = device_ints(std::vector<int>(n, 3));
  const auto r =
      ops::cross_entropy_forward_backward<bf16>(h16, w, b, targets, options, dh16, dw, db);
  EXPECT_EQ(r.tokens, 0);
  EXPECT_EQ(r.loss, 0.0);
  for (double v : to_host(dh16)) ASSERT_EQ(v, 0.0);
  EXPECT_EQ(to_host(dw), dw_before);
  for (double v : to_host(db)) ASSERT_EQ(v, 0.0);
}

}  // namespace
}  // namespace reformer
