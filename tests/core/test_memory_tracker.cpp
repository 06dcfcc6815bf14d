#include "reformer/core/error.hpp"
#include "reformer/core/memory_tracker.hpp"
#include "reformer/core/types.hpp"

#include <gtest/gtest.h>

#include <map>

namespace reformer {
namespace {

const std::string kSpace = MemSpace::name();

TEST(MemoryTracker, IsInstalledByTheRuntime) { EXPECT_TRUE(MemoryTracker::instance().installed()); }

TEST(MemoryTracker, KnownAllocationIsCountedAndReleased) {
  auto& tracker = MemoryTracker::instance();
  const SpaceMemory before = tracker.space(kSpace);
  {
    View2<double> a("a", 123, 45);
    const SpaceMemory during = tracker.space(kSpace);
    EXPECT_EQ(during.current_bytes - before.current_bytes, 123 * 45 * 8);
    EXPECT_EQ(during.live_allocations - before.live_allocations, 1);
    EXPECT_GE(during.peak_bytes, during.current_bytes);
  }
  const SpaceMemory after = tracker.space(kSpace);
  EXPECT_EQ(after.current_bytes, before.current_bytes);
  EXPECT_EQ(after.live_allocations, before.live_allocations);
}

TEST(MemoryTracker, CopiesOfAViewShareOneAllocation) {
  auto& tracker = MemoryTracker::instance();
  const auto before = tracker.space(kSpace).current_bytes;
  View1<float> a("a", 1000);
  View1<float> b = a;  // reference counted, no new memory
  EXPECT_EQ(tracker.space(kSpace).current_bytes - before, 4000);
}

TEST(MemoryTracker, PeakSurvivesReleaseAndResets) {
  auto& tracker = MemoryTracker::instance();
  tracker.reset_peaks();
  const auto base = tracker.space(kSpace).current_bytes;
  { View1<char> big("big", 1 << 20); }
  EXPECT_EQ(tracker.space(kSpace).peak_bytes, base + (1 << 20));
  tracker.reset_peaks();
  EXPECT_EQ(tracker.space(kSpace).peak_bytes, base);
}

// The peak's composition lists what was live at the peak by label (summed over
// allocations with the same label), largest first, and not what came later.
TEST(MemoryTracker, PeakCompositionNamesWhatWasLiveAtThePeak) {
  auto& tracker = MemoryTracker::instance();
  auto bytes_of = [&](const std::string& label) {
    for (const LabelBytes& entry : tracker.peak_composition(kSpace))
      if (entry.label == label) return entry.bytes;
    return std::int64_t(-1);
  };
  tracker.reset_peaks();
  {
    View1<char> big_a("composition_big", 3 << 20), big_b("composition_big", 1 << 20);
    View1<char> small("composition_small", 1 << 20);
    const auto top = tracker.peak_composition(kSpace);
    ASSERT_FALSE(top.empty());
    EXPECT_EQ(top.front().label, "composition_big");
    EXPECT_EQ(top.front().bytes, 4 << 20);
    EXPECT_EQ(top.front().allocations, 2);
    EXPECT_EQ(bytes_of("composition_small"), 1 << 20);
  }
  // Smaller than the peak: not part of it.
  { View1<char> later("composition_later", 1 << 10); }
  EXPECT_EQ(bytes_of("composition_later"), -1);
  EXPECT_EQ(bytes_of("composition_big"), 4 << 20);
  tracker.reset_peaks();
  EXPECT_EQ(bytes_of("composition_big"), -1);
}

TEST(MemoryTracker, PhasesRecordTheirOwnPeaks) {
  auto& tracker = MemoryTracker::instance();
  tracker.clear_phases();
  const auto base = tracker.space(kSpace).current_bytes;
  View1<char> kept;
  {
    ScopedMemoryPhase outer("outer");
    {
      ScopedMemoryPhase inner("inner");
      View1<char> temp("temp", 3000);
      kept = View1<char>("kept", 1000);
    }
  }
  // The rows of the default memory space (GPU builds also list host memory).
  std::vector<PhaseMemory> rows;
  for (const auto& row : tracker.phases())
    if (row.space == kSpace) rows.push_back(row);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].phase, "inner");
  EXPECT_EQ(rows[0].space, kSpace);
  EXPECT_EQ(rows[0].start_bytes, base);
  EXPECT_EQ(rows[0].peak_bytes, base + 4000);
  EXPECT_EQ(rows[0].end_bytes, base + 1000);
  EXPECT_EQ(rows[1].phase, "outer");
  EXPECT_EQ(rows[1].peak_bytes, base + 4000);
  EXPECT_NE(tracker.report().find("inner"), std::string::npos);
  EXPECT_THROW(tracker.end_phase(), Error);
}

TEST(MemoryTracker, UninstallStopsCountingAndReinstallResumes) {
  auto& tracker = MemoryTracker::instance();
  tracker.uninstall();
  const auto before = tracker.space(kSpace).current_bytes;
  {
    View1<char> unseen("unseen", 5000);
    EXPECT_EQ(tracker.space(kSpace).current_bytes, before);
    tracker.install();
  }
  // Releasing memory allocated while uninstalled changes nothing.
  EXPECT_EQ(tracker.space(kSpace).current_bytes, before);
  EXPECT_TRUE(tracker.installed());
}

// Kernels in free functions (nvcc accepts no device lambda in a TEST body).
void add_one(View1<double> a, const char* label) {
  Kokkos::parallel_for(
      label, range(a.extent(0)), KOKKOS_LAMBDA(Index k) { a(k) += 1.0; });
}
double sum_of(View1<double> a, const char* label) {
  double sum = 0;
  Kokkos::parallel_reduce(
      label, range(a.extent(0)), KOKKOS_LAMBDA(Index k, double& s) { s += a(k); }, sum);
  return sum;
}
void exclusive_scan(View1<double> a) {
  Kokkos::parallel_scan(
      "launch_test_scan", range(a.extent(0)), KOKKOS_LAMBDA(Index k, double& s, bool final) {
        const double v = a(k);
        if (final) a(k) = s;
        s += v;
      });
}

// Launch counting: a kernel run N times is N launches; a reduce and a scan are
// counted by pattern; Kokkos' copies, fills and View initialisation are not ours.
TEST(LaunchCounter, CountsEachLaunchByPattern) {
  auto& tracker = MemoryTracker::instance();
  View1<double> a("launch_a", 100);  // initialisation: internal, not ours
  tracker.reset_launches();
  EXPECT_EQ(tracker.launches().ours(), 0);
  const int n = 7;
  for (int i = 0; i < n; ++i) add_one(a, "launch_test_for");
  const double sum = sum_of(a, "launch_test_reduce");
  exclusive_scan(a);
  EXPECT_DOUBLE_EQ(sum, 100.0 * n);
  LaunchCounts counts = tracker.launches();
  EXPECT_EQ(counts.parallel_for, n);
  EXPECT_EQ(counts.parallel_reduce, 1);
  EXPECT_EQ(counts.parallel_scan, 1);
  EXPECT_EQ(counts.ours(), n + 2);
  // Copies, fills and new Views are Kokkos' own.
  View1<double> b("launch_b", 100);
  Kokkos::deep_copy(b, a);
  Kokkos::deep_copy(b, 2.0);
  counts = tracker.launches();
  EXPECT_EQ(counts.ours(), n + 2);
  EXPECT_GE(counts.internal, 1);
  tracker.reset_launches();
  counts = tracker.launches();
  EXPECT_EQ(counts.ours(), 0);
  EXPECT_EQ(counts.internal, 0);
}

TEST(LaunchCounter, PhasesCountTheirLaunches) {
  auto& tracker = MemoryTracker::instance();
  tracker.clear_phases();
  View1<double> a("launch_phase", 10);
  {
    ScopedMemoryPhase outer("launch_outer");
    add_one(a, "launch_phase_for");
    tracker.reset_launches();  // does not disturb the phases' counts
    {
      ScopedMemoryPhase inner("launch_inner");
      for (int i = 0; i < 3; ++i) add_one(a, "launch_phase_for");
    }
  }
  std::map<std::string, std::int64_t> launches;
  for (const auto& row : tracker.phases())
    if (row.space == kSpace) launches[row.phase] = row.launches;
  EXPECT_EQ(launches["launch_inner"], 3);
  EXPECT_EQ(launches["launch_outer"], 4);
  EXPECT_EQ(tracker.launches().ours(), 3);
}

// A callback registered before install() (an external Kokkos tool) keeps being
// called, and uninstall() gives it back its place.
std::int64_t previous_for_calls = 0;
std::int64_t previous_reduce_calls = 0;
void previous_for(const char*, std::uint32_t, std::uint64_t*) { ++previous_for_calls; }
void previous_reduce(const char*, std::uint32_t, std::uint64_t*) { ++previous_reduce_calls; }

TEST(LaunchCounter, ChainsThePreviousCallbacks) {
  auto& tracker = MemoryTracker::instance();
  tracker.uninstall();
  Kokkos::Tools::Experimental::set_begin_parallel_for_callback(&previous_for);
  Kokkos::Tools::Experimental::set_begin_parallel_reduce_callback(&previous_reduce);
  tracker.install();
  tracker.reset_launches();
  View1<double> a("launch_chain", 10);
  previous_for_calls = previous_reduce_calls = 0;
  for (int i = 0; i < 2; ++i) add_one(a, "launch_chain_for");
  EXPECT_DOUBLE_EQ(sum_of(a, "launch_chain_reduce"), 20.0);
  EXPECT_EQ(tracker.launches().parallel_for, 2);
  EXPECT_EQ(tracker.launches().parallel_reduce, 1);
  EXPECT_EQ(previous_for_calls, 2);
  EXPECT_EQ(previous_reduce_calls, 1);
  tracker.uninstall();
  previous_for_calls = 0;
  add_one(a, "launch_chain_for");
  EXPECT_EQ(previous_for_calls, 1);
  EXPECT_EQ(tracker.launches().parallel_for, 2);  // no longer counting
  Kokkos::Tools::Experimental::set_begin_parallel_for_callback(nullptr);
  Kokkos::Tools::Experimental::set_begin_parallel_reduce_callback(nullptr);
  tracker.install();
  EXPECT_TRUE(tracker.installed());
}

TEST(FormatBytes, PicksReadableUnits) {
  EXPECT_EQ(format_bytes(512), "512 B");
  EXPECT_EQ(format_bytes(1536), "1.50 KiB");
  EXPECT_EQ(format_bytes(3LL << 30), "3.00 GiB");
}

}  // namespace
}  // namespace reformer
