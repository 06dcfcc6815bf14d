#include "reformer/core/error.hpp"
#include "reformer/core/memory_tracker.hpp"
#include "reformer/core/types.hpp"

#include <gtest/gtest.h>

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
  const auto rows = tracker.phases();
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

TEST(FormatBytes, PicksReadableUnits) {
  EXPECT_EQ(format_bytes(512), "512 B");
  EXPECT_EQ(format_bytes(1536), "1.50 KiB");
  EXPECT_EQ(format_bytes(3LL << 30), "3.00 GiB");
}

}  // namespace
}  // namespace reformer
