// Helpers of the tests that a share of a batch (rows [first, first + count),
// run with first_row = first as data parallelism runs them) draws the dropout
// masks that the whole batch draws for those rows.
#pragma once

#include "support/gradcheck.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>
#include <vector>

namespace reformer::testing {

// A copy of rows [first, first + count) of x (rows: extent 0).
template <class T>
Kokkos::View<T**, Layout, MemSpace> share_rows(const Kokkos::View<T**, Layout, MemSpace>& x,
                                               Index first, Index count) {
  Kokkos::View<T**, Layout, MemSpace> out("share_rows", count, x.extent(1));
  Kokkos::deep_copy(out, Kokkos::subview(x, std::make_pair(first, first + count), Kokkos::ALL));
  return out;
}
template <class T>
Kokkos::View<T***, Layout, MemSpace> share_rows(const Kokkos::View<T***, Layout, MemSpace>& x,
                                                Index first, Index count) {
  Kokkos::View<T***, Layout, MemSpace> out("share_rows", count, x.extent(1), x.extent(2));
  Kokkos::deep_copy(
      out, Kokkos::subview(x, std::make_pair(first, first + count), Kokkos::ALL, Kokkos::ALL));
  return out;
}

// Host values of rows [first, first + count) of x.
template <class V>
std::vector<double> host_rows(const V& x, Index first, Index count) {
  const auto all = to_host(x);
  const Index n = row_elements(x);
  return {all.begin() + first * n, all.begin() + (first + count) * n};
}

// The largest |a_i - b_i|; infinity when the sizes differ.
inline double max_difference(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) return std::numeric_limits<double>::infinity();
  double m = 0;
  for (std::size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(a[i] - b[i]));
  return m;
}

// a + b elementwise (the gradients of two shares).
inline std::vector<double> sum_of(std::vector<double> a, const std::vector<double>& b) {
  for (std::size_t i = 0; i < a.size() && i < b.size(); ++i) a[i] += b[i];
  return a;
}

// What a model's forward_backward on a share of a batch gives: its mean loss,
// its counted tokens and the parameter gradients.
struct ShareResult {
  double loss = 0;
  Index tokens = 0;
  std::vector<double> grads;
};

// Data parallelism's promise for a model. run(first, count, first_row,
// loss_scale) trains rows [first, first + count) of a batch of `batch` rows as
// one call with that first_row and loss_scale, from zeroed gradients. Rows
// [0, split) and [split, batch) with first_row = their first row and the
// trainer's loss weights (their tokens over the whole batch's) give the whole
// batch's summed loss and gradients; rows [split, batch) with first_row 0
// draw other masks (another loss).
template <class Run>
void expect_shares_make_the_whole_batch(const Run& run, Index batch, Index split) {
  const ShareResult whole = run(0, batch, 0, 1.0);
  const double total = double(whole.tokens);
  const Index low_tokens = run(0, split, 0, 1.0).tokens;
  const ShareResult high_alone = run(split, batch - split, split, 1.0);
  ASSERT_EQ(low_tokens + high_alone.tokens, whole.tokens);
  const ShareResult low = run(0, split, 0, double(low_tokens) / total);
  const ShareResult high = run(split, batch - split, split, double(high_alone.tokens) / total);
  const double summed = low.loss * double(low.tokens) + high.loss * double(high.tokens);
  EXPECT_NEAR(summed / total, whole.loss, 1e-12 * whole.loss);
  double largest = 0;
  for (const double g : whole.grads) largest = std::max(largest, std::abs(g));
  EXPECT_GT(largest, 0.0);
  EXPECT_LT(max_difference(sum_of(low.grads, high.grads), whole.grads), 1e-12 * largest);
  const ShareResult unshifted = run(split, batch - split, 0, 1.0);
  EXPECT_GT(std::abs(unshifted.loss - high_alone.loss), 1e-6 * high_alone.loss)
      << "rows [" << split << ", " << batch << ") drew the same masks with first_row 0";
}

}  // namespace reformer::testing
