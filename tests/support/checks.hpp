// Small helpers shared by the test suites: error-message checks and host data
// copied to the device.
#pragma once

#include "reformer/core/random.hpp"
#include "reformer/core/shape.hpp"
#include "reformer/core/types.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace reformer::testing {

// Runs f and checks that it throws E with every one of `parts` in its message.
template <class E, class F>
void expect_error(F&& f, const std::vector<std::string>& parts) {
  try {
    f();
    ADD_FAILURE() << "no error thrown; expected one mentioning '" << parts.front() << "'";
  } catch (const E& e) {
    for (const auto& part : parts)
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos)
          << "'" << part << "' not in: " << e.what();
  }
}

// A device vector holding `values` (ids, targets).
inline View1<int> device_ints(const std::vector<int>& values) {
  View1<int> v("ints", values.size());
  auto host = Kokkos::create_mirror_view(v);
  for (size_t i = 0; i < values.size(); ++i) host(i) = values[i];
  Kokkos::deep_copy(v, host);
  return v;
}

// Random token ids [batch, length] below vocab: entry (b, i) is
// random_bits({seed, 1}, b * length + i) % vocab.
inline View2<int> random_ids(Index batch, Index length, Index vocab, std::uint64_t seed) {
  View2<int> ids("ids", batch, length);
  auto flat = as_vector(ids);
  Kokkos::parallel_for(
      "random_ids", range(flat.extent(0)), KOKKOS_LAMBDA(Index i) {
        flat(i) = int(random_bits({seed, 1}, std::uint64_t(i)) % vocab);
      });
  return ids;
}

// op(A) op(B) of row-major host matrices in double (A [m, k], or [k, m] when
// transposed; B [k, n], or [n, k]), with sum_p |a_ip b_pj| beside each element:
// what a float32 sum's rounding error is proportional to.
struct HostProduct {
  std::vector<double> value, magnitude;  // [m, n] each
};
inline HostProduct host_product(const std::vector<double>& a, bool ta, const std::vector<double>& b,
                                bool tb, Index m, Index n, Index k) {
  HostProduct out{std::vector<double>(m * n), std::vector<double>(m * n)};
  for (Index i = 0; i < m; ++i)
    for (Index j = 0; j < n; ++j) {
      double sum = 0, magnitude = 0;
      for (Index p = 0; p < k; ++p) {
        const double x = ta ? a[p * m + i] : a[i * k + p];
        const double y = tb ? b[j * k + p] : b[p * n + j];
        sum += x * y;
        magnitude += x * y < 0 ? -x * y : x * y;
      }
      out.value[i * n + j] = sum;
      out.magnitude[i * n + j] = magnitude;
    }
  return out;
}

}  // namespace reformer::testing
