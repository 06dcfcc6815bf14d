// Uses the installed headers and library: a layer norm through the public API
// and the memory tracker must both work.
#include <reformer/core/memory_tracker.hpp>
#include <reformer/core/runtime.hpp>
#include <reformer/ops/layer_norm.hpp>

#include <cmath>
#include <cstdio>

int main() {
  reformer::Runtime runtime;
  using reformer::View1;
  using reformer::View2;
  double max_abs_mean = 0;
  {
    View2<float> x("x", 4, 8), y("y", 4, 8);
    View1<float> gamma("gamma", 8), beta("beta", 8), mean("mean", 4), rstd("rstd", 4);
    Kokkos::deep_copy(gamma, 1.0f);
    auto hx = Kokkos::create_mirror_view(x);
    for (int i = 0; i < 4; ++i)
      for (int j = 0; j < 8; ++j) hx(i, j) = float(i * j + j);
    Kokkos::deep_copy(x, hx);
    reformer::ops::layer_norm_forward<float>(x, gamma, beta, 1e-5f, y, mean, rstd);
    auto hy = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), y);
    for (int i = 0; i < 4; ++i) {
      double row = 0;
      for (int j = 0; j < 8; ++j) row += hy(i, j);
      max_abs_mean = std::fmax(max_abs_mean, std::fabs(row / 8));
    }
  }
  const auto peak =
      reformer::MemoryTracker::instance().space(reformer::MemSpace::name()).peak_bytes;
  std::printf("consumer: max |row mean| after layer norm %.2e, tracked peak %lld bytes\n",
              max_abs_mean, static_cast<long long>(peak));
  return max_abs_mean < 1e-5 && peak > 0 ? 0 : 1;
}
