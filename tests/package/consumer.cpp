// Uses the installed headers and library: a layer norm through the public API,
// the memory tracker and the TOML config loader (a private dependency) must work.
#include <reformer/config/run_config.hpp>
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
  const auto config = reformer::config::parse_run_config("[train]\nsteps = 7\n", "consumer.toml",
                                                         {"train.batch=2"});
  std::printf(
      "consumer: max |row mean| after layer norm %.2e, tracked peak %lld bytes, config steps %lld "
      "batch %lld\n",
      max_abs_mean, static_cast<long long>(peak), static_cast<long long>(config.train.steps),
      static_cast<long long>(config.train.batch));
  const bool config_ok = config.train.steps == 7 && config.train.batch == 2;
  return max_abs_mean < 1e-5 && peak > 0 && config_ok ? 0 : 1;
}
