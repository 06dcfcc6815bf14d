#include "reformer/core/error.hpp"
#include "reformer/core/memory_tracker.hpp"
#include "reformer/ops/embedding.hpp"
#include "support/checks.hpp"
#include "support/gradcheck.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

namespace reformer {
namespace {

using namespace reformer::testing;

// ---------------------------------------------------------------- token embedding

struct TokenCase {
  Index vocab = 11, d = 6, n = 10;
  std::vector<int> id_values{3, 7, 3, 0, 10, 7, 7, 1, 3, 5};
  View1<int> ids = device_ints(id_values);
  View2<double> table, y, dy, dtable;
  bool scale = true;

  TokenCase() : table("table", vocab, d), y("y", n, d), dy("dy", n, d), dtable("dtable", vocab, d) {
    fill_uniform(table, 1);
    fill_uniform(dy, 2);
  }
  double loss() {
    ops::token_embedding_forward<double>(table, ids, scale, y);
    return dot(y, dy);
  }
  void backward() {
    Kokkos::deep_copy(dtable, 0.0);
    ops::token_embedding_backward<double>(ids, dy, scale, dtable);
  }
};

TEST(TokenEmbedding, ForwardMatchesHostReference) {
  for (bool scale : {false, true}) {
    TokenCase c;
    c.scale = scale;
    c.loss();
    const auto table = to_host(c.table), y = to_host(c.y);
    const double s = scale ? std::sqrt(double(c.d)) : 1.0;
    std::vector<double> expected(c.n * c.d);
    for (Index i = 0; i < c.n; ++i)
      for (Index j = 0; j < c.d; ++j) expected[i * c.d + j] = s * table[c.id_values[i] * c.d + j];
    EXPECT_LT(relative_error(y, expected), 1e-15) << "scale " << scale;
  }
}

TEST(TokenEmbedding, GradientMatchesFiniteDifferences) {
  TokenCase c;
  c.backward();
  EXPECT_LT(gradient_error(c.table, c.dtable, [&] { return c.loss(); }), 1e-6);
}

// Sizes that need one, two and three radix passes and several sort blocks; the
// rows of each id are summed in position order, so a host loop gives the same bits.
TEST(TokenEmbedding, BackwardIsExactScatterAddInPositionOrder) {
  struct Size {
    Index vocab, n, d;
  };
  for (const Size size : {Size{200, 700, 3}, Size{300, 1000, 4}, Size{70000, 600, 2}}) {
    std::vector<int> id_values(size.n);
    for (Index i = 0; i < size.n; ++i)  // skewed: small ids repeat often
      id_values[i] = static_cast<int>(size.vocab * std::pow(random_uniform({5, 6}, i), 3.0));
    const auto ids = device_ints(id_values);
    View2<double> dy("dy", size.n, size.d), dtable("dtable", size.vocab, size.d);
    fill_uniform(dy, 7);
    ops::token_embedding_backward<double>(ids, dy, false, dtable);
    const auto dy_host = to_host(dy);
    std::vector<double> expected(size.vocab * size.d, 0.0);
    for (Index i = 0; i < size.n; ++i)
      for (Index j = 0; j < size.d; ++j)
        expected[id_values[i] * size.d + j] += dy_host[i * size.d + j];
    const auto once = to_host(dtable);
    ASSERT_EQ(once.size(), expected.size());
    for (size_t k = 0; k < expected.size(); ++k)
      ASSERT_EQ(once[k], expected[k]) << "vocab " << size.vocab << " element " << k;
    ops::token_embedding_backward<double>(ids, dy, false, dtable);  // accumulates
    const auto twice = to_host(dtable);
    for (size_t k = 0; k < expected.size(); ++k) ASSERT_EQ(twice[k], 2 * expected[k]);
  }
}

TEST(TokenEmbedding, RejectsOutOfRangeIdsAndBadShapes) {
  TokenCase c;
  auto too_large = c.id_values, negative = c.id_values;
  too_large[4] = 11;
  negative[6] = -2;
  expect_error<ConfigError>(
      [&] { ops::token_embedding_forward<double>(c.table, device_ints(too_large), true, c.y); },
      {"token_embedding_forward", "ids[4] is 11", "[0, 11)"});
  expect_error<ConfigError>(
      [&] { ops::token_embedding_backward<double>(device_ints(negative), c.dy, true, c.dtable); },
      {"token_embedding_backward", "ids[6] is -2", "[0, 11)"});
  View2<double> wide("y", c.n, c.d + 1);
  expect_error<ShapeError>(
      [&] { ops::token_embedding_forward<double>(c.table, c.ids, true, wide); },
      {"y has shape [10, 7]", "must be 6"});
}

// A caller that has checked its ids (a decoding step, on the host) skips the
// device check, a reduction the host waits for, and gets the same rows.
TEST(TokenEmbedding, AnAlreadyCheckedCallLaunchesNoReductionAndGivesTheSameRows) {
  TokenCase c;
  View2<double> checked("checked", c.n, c.d);
  auto& tracker = MemoryTracker::instance();
  tracker.reset_launches();
  ops::token_embedding_forward<double>(c.table, c.ids, true, checked);
  EXPECT_EQ(tracker.launches().parallel_reduce, 1) << "the default call checks on the device";
  tracker.reset_launches();
  ops::token_embedding_forward<double>(c.table, c.ids, true, c.y, ops::IdCheck::AlreadyChecked);
  EXPECT_EQ(tracker.launches().parallel_reduce, 0);
  EXPECT_EQ(tracker.launches().parallel_for, 1);
  EXPECT_EQ(to_host(c.y), to_host(checked));
}

// ---------------------------------------------------------------- sinusoidal positions

TEST(SinusoidalPositionalEncoding, ForwardMatchesHostReference) {
  const Index batch = 2, length = 5, d = 7, offset = 3, rows = batch * length;
  View2<double> x("x", rows, d), y("y", rows, d);
  fill_uniform(x, 1);
  const auto x_host = to_host(x);
  ops::sinusoidal_positions_forward<double>(x, length, offset, y);
  std::vector<double> expected(rows * d);
  for (Index r = 0; r < rows; ++r)
    for (Index j = 0; j < d; ++j) {
      const double p = offset + r % length, i2 = j - j % 2;
      const double angle = p / std::pow(10000.0, i2 / d);
      expected[r * d + j] = x_host[r * d + j] + (j % 2 == 0 ? std::sin(angle) : std::cos(angle));
    }
  EXPECT_LT(relative_error(to_host(y), expected), 1e-14);
  ops::sinusoidal_positions_forward<double>(x, length, offset, x);  // in place
  EXPECT_LT(relative_error(to_host(x), expected), 1e-14);
}

TEST(SinusoidalPositionalEncoding, RejectsBadLengthAndOffset) {
  View2<double> x("x", 10, 4);
  expect_error<ShapeError>(
      [&] { ops::sinusoidal_positions_forward<double>(x, 4, 0, x); },
      {"sinusoidal_positions_forward", "x has 10 rows", "not a multiple of length 4"});
  expect_error<ConfigError>([&] { ops::sinusoidal_positions_forward<double>(x, 0, 0, x); },
                            {"length is 0"});
  expect_error<ConfigError>([&] { ops::sinusoidal_positions_forward<double>(x, 5, -1, x); },
                            {"offset is -1"});
}

// ---------------------------------------------------------------- learned positions

struct LearnedCase {
  Index batch = 2, length = 5, d = 6, max_len = 9, offset = 3, rows = batch * length;
  View2<double> x, y, dy, table, dtable;

  LearnedCase()
      : x("x", rows, d),
        y("y", rows, d),
        dy("dy", rows, d),
        table("table", max_len, d),
        dtable("dtable", max_len, d) {
    fill_uniform(x, 1);
    fill_uniform(table, 2);
    fill_uniform(dy, 3);
  }
  double loss() {
    ops::learned_positions_forward<double>(x, table, length, offset, y);
    return dot(y, dy);
  }
};

TEST(LearnedPositionalEmbedding, ForwardMatchesHostReference) {
  LearnedCase c;
  c.loss();
  const auto x = to_host(c.x), table = to_host(c.table);
  std::vector<double> expected(c.rows * c.d);
  for (Index r = 0; r < c.rows; ++r)
    for (Index j = 0; j < c.d; ++j)
      expected[r * c.d + j] = x[r * c.d + j] + table[(c.offset + r % c.length) * c.d + j];
  EXPECT_LT(relative_error(to_host(c.y), expected), 1e-15);
}

TEST(LearnedPositionalEmbedding, GradientMatchesFiniteDifferences) {
  LearnedCase c;
  ops::learned_positions_backward<double>(c.dy, c.length, c.offset, c.dtable);
  EXPECT_LT(gradient_error(c.table, c.dtable, [&] { return c.loss(); }), 1e-6);
}

TEST(LearnedPositionalEmbedding, RejectsPositionsPastMaxLen) {
  LearnedCase c;
  expect_error<ConfigError>(
      [&] { ops::learned_positions_forward<double>(c.x, c.table, c.length, 5, c.y); },
      {"learned_positions_forward", "offset + length = 5 + 5 = 10", "max_len = 9"});
  expect_error<ConfigError>(
      [&] { ops::learned_positions_backward<double>(c.dy, 10, 0, c.dtable); },
      {"learned_positions_backward", "offset + length = 0 + 10 = 10", "max_len = 9"});
  View2<double> narrow("table", c.max_len, c.d - 1);
  expect_error<ShapeError>(
      [&] { ops::learned_positions_forward<double>(c.x, narrow, c.length, 0, c.y); },
      {"table has shape [9, 5]", "must be 6"});
}

// ---------------------------------------------------------------- axial positions

struct AxialCase {
  Index n1 = 3, n2 = 4, d1 = 2, d2 = 4, d = d1 + d2;
  Index batch = 2, length = 10, offset = 1, rows = batch * length;
  View2<double> x, y, dy, e1, e2, de1, de2;

  AxialCase()
      : x("x", rows, d),
        y("y", rows, d),
        dy("dy", rows, d),
        e1("e1", n1, d1),
        e2("e2", n2, d2),
        de1("de1", n1, d1),
        de2("de2", n2, d2) {
    fill_uniform(x, 1);
    fill_uniform(e1, 2);
    fill_uniform(e2, 3);
    fill_uniform(dy, 4);
  }
  double loss() {
    ops::axial_positions_forward<double>(x, e1, e2, length, offset, y);
    return dot(y, dy);
  }
};

TEST(AxialPositionalEmbedding, ForwardMatchesHostReference) {
  AxialCase c;
  c.loss();
  const auto x = to_host(c.x), e1 = to_host(c.e1), e2 = to_host(c.e2);
  std::vector<double> expected(c.rows * c.d);
  for (Index r = 0; r < c.rows; ++r) {
    const Index p = c.offset + r % c.length;
    for (Index j = 0; j < c.d; ++j)
      expected[r * c.d + j] = x[r * c.d + j] + (j < c.d1 ? e1[(p / c.n2) * c.d1 + j]
                                                         : e2[(p % c.n2) * c.d2 + j - c.d1]);
  }
  EXPECT_LT(relative_error(to_host(c.y), expected), 1e-15);
}

TEST(AxialPositionalEmbedding, GradientsMatchFiniteDifferences) {
  AxialCase c;
  ops::axial_positions_backward<double>(c.dy, c.length, c.offset, c.de1, c.de2);
  auto loss = [&] { return c.loss(); };
  EXPECT_LT(gradient_error(c.e1, c.de1, loss), 1e-6);
  EXPECT_LT(gradient_error(c.e2, c.de2, loss), 1e-6);
}

TEST(AxialPositionalEmbedding, RejectsBadWidthsAndLengths) {
  AxialCase c;
  View2<double> e2_narrow("e2", c.n2, c.d2 - 1);
  expect_error<ShapeError>(
      [&] { ops::axial_positions_forward<double>(c.x, c.e1, e2_narrow, c.length, 0, c.y); },
      {"axial_positions_forward", "e1 has shape [3, 2]", "e2 has shape [4, 3]",
       "d1 + d2 = 2 + 3 = 5", "model width 6"});
  View2<double> long_x("x", 13, c.d), long_y("y", 13, c.d);
  expect_error<ConfigError>(
      [&] { ops::axial_positions_forward<double>(long_x, c.e1, c.e2, 13, 0, long_y); },
      {"offset + length = 0 + 13 = 13", "n1 * n2 = 3 * 4 = 12"});
  expect_error<ConfigError>(
      [&] { ops::axial_positions_backward<double>(c.dy, c.length, 3, c.de1, c.de2); },
      {"axial_positions_backward", "offset + length = 3 + 10 = 13", "n1 * n2 = 3 * 4 = 12"});
}

// ---------------------------------------------------------------- per-row positions

// The per-row forms (cached decoding) against a plain reference: one call of
// the length-1 op per row at its own offset, for every kind, float and double.
template <class T>
struct RowsAtCase {
  Index rows = 5, d = 6, n1 = 3, n2 = 4, d1 = 2;
  std::vector<Index> position_values{3, 0, 11, 3, 7};  // all below end = 12
  Index end = 12;
  View1<Index> positions{"positions", std::size_t(rows)};
  View2<T> x{"x", std::size_t(rows), std::size_t(d)}, table{"table", 12, std::size_t(d)};
  View2<T> e1{"e1", std::size_t(n1), std::size_t(d1)};
  View2<T> e2{"e2", std::size_t(n2), std::size_t(d - d1)};

  RowsAtCase() {
    auto host = Kokkos::create_mirror_view(positions);
    for (Index r = 0; r < rows; ++r) host(r) = position_values[std::size_t(r)];
    Kokkos::deep_copy(positions, host);
    fill_uniform(x, 1);
    fill_uniform(table, 2);
    fill_uniform(e1, 3);
    fill_uniform(e2, 4);
  }
  // kind 0 learned, 1 axial, 2 sinusoidal; in place on a copy of x.
  std::vector<double> per_row(int kind) const {
    View2<T> y("per_row", rows, d);
    Kokkos::deep_copy(y, x);
    for (Index r = 0; r < rows; ++r) {
      const auto row = Kokkos::subview(y, Kokkos::make_pair(r, r + 1), Kokkos::ALL);
      const Index p = position_values[std::size_t(r)];
      if (kind == 0) ops::learned_positions_forward<T>(row, table, 1, p, row);
      if (kind == 1) ops::axial_positions_forward<T>(row, e1, e2, 1, p, row);
      if (kind == 2) ops::sinusoidal_positions_forward<T>(row, 1, p, row);
    }
    return to_host(y);
  }
  std::vector<double> at(int kind, bool in_place) const {
    View2<T> y("at", rows, d);
    View2<T> in = x;
    if (in_place) {
      Kokkos::deep_copy(y, x);
      in = y;
    }
    if (kind == 0) ops::learned_positions_forward_at<T>(in, table, positions, end, y);
    if (kind == 1) ops::axial_positions_forward_at<T>(in, e1, e2, positions, end, y);
    if (kind == 2) ops::sinusoidal_positions_forward_at<T>(in, positions, end, y);
    return to_host(y);
  }
};

template <class T>
class PositionsAt : public ::testing::Test {};
using PositionScalars = ::testing::Types<float, double>;
TYPED_TEST_SUITE(PositionsAt, PositionScalars);

TYPED_TEST(PositionsAt, MatchPerRowCallsForEveryKind) {
  RowsAtCase<TypeParam> c;
  for (int kind = 0; kind < 3; ++kind) {
    const auto expected = c.per_row(kind);
    EXPECT_EQ(c.at(kind, false), expected) << "kind " << kind;
    EXPECT_EQ(c.at(kind, true), expected) << "kind " << kind << " in place";
    EXPECT_NE(c.at(kind, false), to_host(c.x)) << "kind " << kind << " added nothing";
  }
}

TYPED_TEST(PositionsAt, RowsOutsideEndGetNaN) {
  RowsAtCase<TypeParam> c;
  c.end = 8;  // position 11 (row 2) lies past it
  for (int kind = 0; kind < 3; ++kind) {
    const auto y = c.at(kind, false), expected = c.per_row(kind);
    for (Index r = 0; r < c.rows; ++r)
      for (Index j = 0; j < c.d; ++j) {
        const double v = y[std::size_t(r * c.d + j)];
        if (r == 2)
          EXPECT_TRUE(std::isnan(v)) << "kind " << kind;
        else
          EXPECT_EQ(v, expected[std::size_t(r * c.d + j)]) << "kind " << kind;
      }
  }
}

TYPED_TEST(PositionsAt, RejectBadShapesAndTablesTooShort) {
  using T = TypeParam;
  RowsAtCase<T> c;
  View2<T> y("y", c.rows, c.d);
  View1<Index> short_positions("positions", 3);
  expect_error<ShapeError>(
      [&] { ops::learned_positions_forward_at<T>(c.x, c.table, short_positions, c.end, y); },
      {"learned_positions_forward_at", "positions", "5"});
  expect_error<ConfigError>(
      [&] { ops::learned_positions_forward_at<T>(c.x, c.table, c.positions, 13, y); },
      {"learned_positions_forward_at", "13", "max_len = 12"});
  expect_error<ConfigError>(
      [&] { ops::axial_positions_forward_at<T>(c.x, c.e1, c.e2, c.positions, 13, y); },
      {"axial_positions_forward_at", "n1 * n2 = 3 * 4 = 12"});
  expect_error<ConfigError>(
      [&] { ops::sinusoidal_positions_forward_at<T>(c.x, c.positions, 0, y); },
      {"sinusoidal_positions_forward_at", "end is 0"});
}

}  // namespace
}  // namespace reformer
