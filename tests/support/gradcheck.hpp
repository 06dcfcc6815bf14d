// Test helpers: random inputs, host copies, and finite-difference gradient checks.
//
// Gradient checks use the scalar loss L = sum(r * f(inputs)) for a fixed random
// r: the analytic gradient comes from the op's backward with dy = r, the
// numerical one from central differences (L(x + h) - L(x - h)) / 2h in double.
#pragma once

#include "reformer/core/precision.hpp"
#include "reformer/core/random.hpp"
#include "reformer/core/shape.hpp"
#include "reformer/core/types.hpp"

#include <cmath>
#include <functional>
#include <vector>

namespace reformer::testing {

// Fills any contiguous View with uniform values in [lo, hi) from the counter RNG.
template <class V>
void fill_uniform(const V& v, std::uint64_t seed, double lo = -1.0, double hi = 1.0) {
  auto flat = as_vector(v);
  using T = typename V::non_const_value_type;
  Kokkos::parallel_for(
      "fill_uniform", range(flat.extent(0)), KOKKOS_LAMBDA(Index i) {
        flat(i) = store<T>(compute_t<T>(lo + (hi - lo) * random_uniform({seed, 777}, i)));
      });
}

// Copies any View into a host std::vector in row-major order.
template <class V>
std::vector<double> to_host(const V& v) {
  using T = typename V::non_const_value_type;
  Kokkos::View<T*, Layout, MemSpace> flat("to_host", v.size());
  Kokkos::deep_copy(flat, as_vector(v));
  auto host = Kokkos::create_mirror_view_and_copy(HostSpace(), flat);
  std::vector<double> out(host.size());
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = double(load(host(i)));
  return out;
}

// sum_i a_i * b_i over two same-sized Views (any rank).
template <class A, class B>
double dot(const A& a, const B& b) {
  auto fa = as_vector(a);
  auto fb = as_vector(b);
  double sum = 0;
  Kokkos::parallel_reduce(
      "dot", range(fa.extent(0)),
      KOKKOS_LAMBDA(Index i, double& acc) { acc += double(load(fa(i))) * double(load(fb(i))); },
      sum);
  return sum;
}

// Norm-wise relative error |a - b| / |b| (0 when both are 0).
inline double relative_error(const std::vector<double>& a, const std::vector<double>& b) {
  double diff = 0, ref = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    diff += (a[i] - b[i]) * (a[i] - b[i]);
    ref += b[i] * b[i];
  }
  if (a.size() != b.size()) return INFINITY;
  if (ref == 0) return diff == 0 ? 0 : INFINITY;
  return std::sqrt(diff / ref);
}

// Points for a finite-difference check whose every element is also compared
// with a second kernel's gradient (the fused or whole-window kernels against
// the streamed or batched shape): the differences only need to catch a
// gradient that both share, which is wrong at most elements.
constexpr int kSampledPoints = 16;

// Compares the analytic gradient of `loss` with respect to `x` against central
// differences, at up to `max_points` evenly spread elements of x. Returns the
// norm-wise relative error over those elements.
template <class V, class G>
double gradient_error(const V& x, const G& analytic, const std::function<double()>& loss,
                      int max_points = 48, double h = 1e-5) {
  auto flat = as_vector(x);
  const std::vector<double> grad = to_host(analytic);
  const Index n = flat.extent(0);
  // An odd step: evenly spread points whose step is a multiple of the last
  // dimensions' sizes would all fall on one head and one channel.
  const Index step = n <= max_points ? 1 : (n / max_points) | 1;
  std::vector<double> numeric, exact;
  for (Index i = 0; i < n; i += step) {
    auto element = Kokkos::subview(flat, i);
    double original = 0;
    {
      typename V::non_const_value_type value;
      Kokkos::deep_copy(value, element);
      original = value;
    }
    Kokkos::deep_copy(element, original + h);
    const double up = loss();
    Kokkos::deep_copy(element, original - h);
    const double down = loss();
    Kokkos::deep_copy(element, original);
    numeric.push_back((up - down) / (2 * h));
    exact.push_back(grad[i]);
  }
  return relative_error(exact, numeric);
}

}  // namespace reformer::testing
