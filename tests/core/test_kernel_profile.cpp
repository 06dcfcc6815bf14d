#include "reformer/core/kernel_profile.hpp"
#include "reformer/core/memory_tracker.hpp"
#include "reformer/core/types.hpp"
#include "support/temp_dir.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

namespace reformer {
namespace {

// Kernels in free functions (nvcc accepts no device lambda in a TEST body).
void add_one(View1<double> a, const char* label) {
  Kokkos::parallel_for(
      label, range(a.extent(0)), KOKKOS_LAMBDA(Index k) { a(k) += 1.0; });
}
// About `rounds` dependent multiply-adds per element.
void busy(View1<double> a, int rounds) {
  Kokkos::parallel_for(
      "profile_test_busy", range(a.extent(0)), KOKKOS_LAMBDA(Index k) {
        double x = a(k);
        for (int r = 0; r < rounds; ++r) x = x * 0.999999 + 1e-6;
        a(k) = x;
      });
}
double sum_of(View1<double> a) {
  double sum = 0;
  Kokkos::parallel_reduce(
      "profile_test_reduce", range(a.extent(0)), KOKKOS_LAMBDA(Index k, double& s) { s += a(k); },
      sum);
  return sum;
}

std::map<std::string, KernelTime> by_label() {
  std::map<std::string, KernelTime> out;
  for (const KernelTime& t : KernelProfile::instance().times()) out[t.label] = t;
  return out;
}

// Installed on top of the memory tracker: both see every launch, each kernel
// is timed under its label with its number of calls, regions are apart, and
// uninstall() gives the tracker back its place.
TEST(KernelProfile, TimesEachKernelByLabelAndChainsTheTracker) {
  auto& profile = KernelProfile::instance();
  auto& tracker = MemoryTracker::instance();
  if (profile.installed()) GTEST_SKIP() << "REFORMER_KERNEL_PROFILE is set: the profile is in use";
  View1<double> a("profile_a", 1 << 16);
  profile.install();
  tracker.reset_launches();
  for (int i = 0; i < 5; ++i) add_one(a, "profile_test_add");
  {
    // The region holds a kernel and 20 ms of host work (a vendor call, say).
    const ProfileRegion region("profile_test_region");
    busy(a, 2000);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const double sum = sum_of(a);
  EXPECT_GT(sum, 0.0);
  auto times = by_label();
  profile.uninstall();

  ASSERT_EQ(times.count("profile_test_add"), 1u);
  EXPECT_EQ(times["profile_test_add"].calls, 5);
  EXPECT_EQ(times["profile_test_busy"].calls, 1);
  EXPECT_EQ(times["profile_test_reduce"].calls, 1);
  ASSERT_EQ(times.count("[region] profile_test_region"), 1u);
  EXPECT_EQ(times["[region] profile_test_region"].calls, 1);
  // The region's time counts the host work and the kernel inside it.
  EXPECT_GE(times["[region] profile_test_region"].seconds, 0.020);
  EXPECT_GE(times["[region] profile_test_region"].seconds,
            0.020 + times["profile_test_busy"].seconds - 1e-4);
  for (const auto& [label, t] : times) EXPECT_GE(t.seconds, 0.0) << label;
  // The tracker counted the same launches (the profile chained to it).
  EXPECT_EQ(tracker.launches().parallel_for, 6);
  EXPECT_EQ(tracker.launches().parallel_reduce, 1);

  // Uninstalled: nothing more is timed, the tracker still counts.
  tracker.reset_launches();
  add_one(a, "profile_test_add");
  EXPECT_EQ(by_label()["profile_test_add"].calls, 5);
  EXPECT_EQ(tracker.launches().parallel_for, 1);
}

TEST(KernelProfile, ReportListsTheKernelsAndTheirSum) {
  auto& profile = KernelProfile::instance();
  View1<double> a("profile_b", 1000);
  profile.install();
  for (int i = 0; i < 3; ++i) add_one(a, "profile_report_add");
  const std::string report = profile.report();
  profile.uninstall();
  EXPECT_NE(report.find("profile_report_add"), std::string::npos) << report;
  EXPECT_NE(report.find("kernels: 3 launches"), std::string::npos) << report;
  // The file the Runtime writes holds the same table. A folder of this
  // process's own: ctest may run the 1-, 2- and 4-thread copies of this test at once.
  const reformer::testing::TempDir dir;
  const std::string path = dir.file("kernel_profile_test.txt");
  ASSERT_TRUE(write_kernel_profile(path));
  std::ifstream file(path);
  std::stringstream text;
  text << file.rdbuf();
  EXPECT_NE(text.str().find("profile_report_add"), std::string::npos);
  std::remove(path.c_str());
  // An unwritable path says so instead of throwing.
  EXPECT_FALSE(write_kernel_profile("/nonexistent-folder/profile.txt"));
}

// reset() forgets what was timed.
TEST(KernelProfile, ResetForgetsTheTimes) {
  auto& profile = KernelProfile::instance();
  View1<double> a("profile_c", 100);
  profile.install();
  add_one(a, "profile_reset_add");
  EXPECT_EQ(by_label()["profile_reset_add"].calls, 1);
  profile.reset();
  EXPECT_TRUE(profile.times().empty());
  add_one(a, "profile_reset_add");
  EXPECT_EQ(by_label()["profile_reset_add"].calls, 1);
  profile.uninstall();
}

}  // namespace
}  // namespace reformer
