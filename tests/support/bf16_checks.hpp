// Checks of bf16 kernels against their float32 versions (issue 34).
//
// A bf16 op reads bf16 inputs, computes in float32 and rounds each result once.
// Given the same input values (float inputs rounded to bf16 first, so both
// sides read identical numbers), the bf16 result must then be the float32
// result rounded to bf16's 8 significant bits: |bf16 - float| <= u |float|
// with u = 2^-8 (core/bfloat16.hpp), plus the float32 round-off of summing in
// another order, which is far below it. The tolerances below are that bound;
// a kernel that rounds an intermediate to bf16 (or accumulates in it) misses it.
#pragma once

#include "reformer/core/precision.hpp"
#include "reformer/core/shape.hpp"
#include "support/gradcheck.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

namespace reformer::testing {

// bf16's unit round-off.
constexpr double kBf16Unit = 1.0 / 256.0;

// Rounds every element of a float view to the nearest bf16 value, in place.
template <class V>
void round_to_bf16(const V& v) {
  auto flat = as_vector(v);
  Kokkos::parallel_for(
      "round_to_bf16", range(flat.extent(0)),
      KOKKOS_LAMBDA(Index i) { flat(i) = static_cast<float>(bf16(flat(i))); });
}

// out = the bf16 values of a float view with as many elements (exact when the
// view was rounded first).
template <class V, class W>
void copy_to_bf16(const V& from, const W& out) {
  auto f = as_vector(from);
  auto o = as_vector(out);
  ASSERT_EQ(f.extent(0), o.extent(0));
  Kokkos::parallel_for(
      "copy_to_bf16", range(f.extent(0)), KOKKOS_LAMBDA(Index i) { o(i) = bf16(float(f(i))); });
}

// A rounded float view and its bf16 copy: the same values on both sides.
inline View1<bf16> bf16_of(const View1<float>& v) {
  round_to_bf16(v);
  View1<bf16> out("bf16_of", v.extent(0));
  copy_to_bf16(v, out);
  return out;
}
inline View2<bf16> bf16_of(const View2<float>& v) {
  round_to_bf16(v);
  View2<bf16> out("bf16_of", v.extent(0), v.extent(1));
  copy_to_bf16(v, out);
  return out;
}
inline View3<bf16> bf16_of(const View3<float>& v) {
  round_to_bf16(v);
  View3<bf16> out("bf16_of", v.extent(0), v.extent(1), v.extent(2));
  copy_to_bf16(v, out);
  return out;
}

// A float copy of a bf16 view (exact), of the float view type V.
template <class V, class V16>
V widened(const V16& x) {
  V out("widened", x.layout());
  auto from = as_vector(x);
  auto to = as_vector(out);
  Kokkos::parallel_for(
      "widen", range(to.extent(0)), KOKKOS_LAMBDA(Index i) { to(i) = load(from(i)); });
  return out;
}

// Every element of `got` (a bf16 result) within u |want| + floor of the float
// result `want`, floor = slack * max |want| (float32 reordering). Reports the
// worst element.
inline void expect_rounded(const std::vector<double>& got, const std::vector<double>& want,
                           const std::string& what, double slack = 1e-5) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double scale = 0;
  for (double w : want) scale = std::max(scale, std::fabs(w));
  Index worst = -1;
  double worst_excess = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double bound = kBf16Unit * std::fabs(want[i]) + slack * scale;
    const double excess = std::fabs(got[i] - want[i]) - bound;
    if (!(excess <= worst_excess)) {
      worst_excess = excess;
      worst = Index(i);
    }
  }
  EXPECT_LT(worst, 0) << what << ": element " << worst << " is " << got[std::size_t(worst)]
                      << " but the float32 result is " << want[std::size_t(worst)]
                      << " (more than 2^-8 relative plus " << slack << " of " << scale << ")";
}

// The cosine of the angle between two gradients (1: the same direction).
inline double cosine(const std::vector<double>& a, const std::vector<double>& b) {
  double ab = 0, aa = 0, bb = 0;
  for (std::size_t i = 0; i < a.size() && i < b.size(); ++i) {
    ab += a[i] * b[i];
    aa += a[i] * a[i];
    bb += b[i] * b[i];
  }
  return ab / std::sqrt(aa * bb);
}

}  // namespace reformer::testing
