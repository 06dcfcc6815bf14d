#include "reformer/core/error.hpp"
#include "reformer/core/memory_tracker.hpp"
#include "reformer/core/workspace.hpp"

#include <gtest/gtest.h>

namespace reformer {
namespace {

void fill(View1<double> v, double value) { Kokkos::deep_copy(v, value); }
double first(View1<double> v) {
  auto h = Kokkos::create_mirror_view_and_copy(HostSpace(), v);
  return h(0);
}

// Frames nest like calls: a frame's buffers are given back when it ends, and
// the next frame reuses the same memory (from the second pass on, when the
// arena has been sized).
TEST(Workspace, FramesNestAndReuseMemory) {
  Workspace ws;
  for (int pass = 0; pass < 2; ++pass) {
    Workspace::Frame outer(ws);
    auto a = outer.take<View1<double>>(100);
    const double* inner_data = nullptr;
    {
      Workspace::Frame inner(ws);
      auto b = inner.take<View2<double>>(10, 10);
      EXPECT_NE(static_cast<const void*>(a.data()), static_cast<const void*>(b.data()));
      inner_data = b.data();
    }
    Workspace::Frame again(ws);
    auto c = again.take<View1<double>>(100);
    if (pass == 1) EXPECT_EQ(c.data(), inner_data);  // given back and taken again
  }
  EXPECT_EQ(ws.capacity_bytes(), 2 * 1024);  // two buffers of 800 bytes, each padded to 1024
  EXPECT_EQ(ws.capacity_bytes(), ws.high_water_bytes());
}

// A request that does not fit while buffers are out gets memory of its own, so
// the buffers already handed out stay valid; when the outermost frame ends the
// arena is rebuilt at the high-water mark, and the same pattern then allocates
// nothing.
TEST(Workspace, OverflowKeepsBuffersValidThenGrowsOnce) {
  Workspace ws;
  auto& tracker = MemoryTracker::instance();
  ASSERT_TRUE(tracker.installed());
  const std::string space = MemSpace::name();
  auto pattern = [&] {
    Workspace::Frame frame(ws);
    auto a = frame.take<View1<double>>(1000);
    fill(a, 1.5);
    auto b = frame.take<View1<double>>(5000);  // does not fit on the first pass
    fill(b, 2.5);
    EXPECT_EQ(first(a), 1.5);
    EXPECT_EQ(first(b), 2.5);
  };
  pattern();
  const auto capacity = ws.capacity_bytes();
  EXPECT_GE(capacity, 6000 * 8);
  const auto allocations = tracker.space(space).allocations;
  pattern();
  pattern();
  EXPECT_EQ(tracker.space(space).allocations, allocations);
  EXPECT_EQ(ws.capacity_bytes(), capacity);
}

// Sibling frames that overflow (a layer's backward after another's, chunk
// after chunk) give their allocations back when they end, while the outer
// frame's buffers stay valid: the first pass's peak is the arena plus one
// sibling's overflow, not the arena plus all of them.
TEST(Workspace, OverflowOfEndedFramesIsGivenBack) {
  Workspace ws;
  auto& tracker = MemoryTracker::instance();
  ASSERT_TRUE(tracker.installed());
  const std::string space = MemSpace::name();
  const std::int64_t sibling = 100000 * 8;
  {
    Workspace::Frame outer(ws);
    auto a = outer.take<View1<double>>(1000);
    fill(a, 1.5);
    tracker.reset_peaks();
    const auto before = tracker.space(space).current_bytes;
    for (int layer = 0; layer < 4; ++layer) {
      Workspace::Frame inner(ws);
      auto b = inner.take<View1<double>>(100000);
      fill(b, 2.5 + layer);
      EXPECT_EQ(first(b), 2.5 + layer);
    }
    EXPECT_EQ(first(a), 1.5);
    EXPECT_LT(tracker.space(space).peak_bytes - before, 2 * sibling);
    EXPECT_EQ(tracker.space(space).current_bytes, before);
  }
  EXPECT_GE(ws.capacity_bytes(), 1000 * 8 + sibling);
}

// Every buffer starts on a 256-byte boundary.
TEST(Workspace, BuffersAreAligned) {
  Workspace ws;
  for (int pass = 0; pass < 2; ++pass) {
    Workspace::Frame frame(ws);
    auto a = frame.take<View1<int>>(3);
    auto b = frame.take<View1<float>>(5);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(a.data()) % 256, 0u);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(b.data()) % 256, 0u);
  }
  EXPECT_EQ(ws.high_water_bytes(), 2 * 256);
}

}  // namespace
}  // namespace reformer
