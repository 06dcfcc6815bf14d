#include "reformer/core/error.hpp"
#include "reformer/core/memory_tracker.hpp"
#include "reformer/core/workspace.hpp"

#include "support/checks.hpp"

#include <gtest/gtest.h>

namespace reformer {
namespace {

using testing::expect_error;

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

// A pattern that grows the arena by overflowing (a small forward, then a
// backward that needs far more) peaks above its steady state on its first
// pass; with the need reserved before it, the first pass peaks at the steady
// state and allocates nothing. A reserve above the need is given back by
// shrink_to_high_water; one below it still grows as before.
TEST(Workspace, ReserveBeforeTheFirstPassKeepsItsPeakAtTheSteadyOne) {
  auto& tracker = MemoryTracker::instance();
  ASSERT_TRUE(tracker.installed());
  const std::string space = MemSpace::name();
  auto pattern = [](Workspace& ws) {
    {
      Workspace::Frame forward(ws);
      fill(forward.take<View1<double>>(20000), 1.0);
    }
    Workspace::Frame backward(ws);
    auto a = backward.take<View1<double>>(30000);
    fill(a, 2.0);
    Workspace::Frame inner(ws);
    auto b = inner.take<View1<double>>(30000);  // past the arena of the forward
    fill(b, 3.0);
    EXPECT_EQ(first(a), 2.0);
    EXPECT_EQ(first(b), 3.0);
  };
  // The first pass's peak (with the reserve, if any) above what was live
  // before it.
  auto first_pass_peak = [&](Workspace& ws, std::int64_t reserve) {
    tracker.reset_peaks();
    const auto before = tracker.space(space).current_bytes;
    if (reserve > 0) ws.reserve(reserve);
    pattern(ws);
    return tracker.space(space).peak_bytes - before;
  };
  const auto start = tracker.space(space).current_bytes;
  Workspace grown;
  const auto unreserved = first_pass_peak(grown, 0);
  const auto need = grown.high_water_bytes();
  EXPECT_GE(need, 60000 * 8);
  // What every later pass holds: the arena at the need, with its alignment slack.
  const auto steady = tracker.space(space).current_bytes - start;
  EXPECT_LT(steady, need + 1024);
  EXPECT_EQ(first_pass_peak(grown, 0), 0);  // a later pass allocates nothing
  // The forward's arena (20,000 values) beside the backward's overflow.
  EXPECT_GE(unreserved, steady + 20000 * 8);

  Workspace reserved;
  const auto allocations = tracker.space(space).allocations;
  EXPECT_EQ(first_pass_peak(reserved, need), steady);
  EXPECT_EQ(tracker.space(space).allocations, allocations + 1);  // the reserve alone
  EXPECT_EQ(reserved.capacity_bytes(), need);
  reserved.shrink_to_high_water();  // nothing to give back
  EXPECT_EQ(reserved.capacity_bytes(), need);
  EXPECT_EQ(tracker.space(space).allocations, allocations + 1);

  Workspace over;
  over.reserve(4 * need);
  pattern(over);
  EXPECT_GE(over.capacity_bytes(), 4 * need);
  over.shrink_to_high_water();
  EXPECT_EQ(over.capacity_bytes(), need);
  EXPECT_EQ(over.high_water_bytes(), need);
  over.reserve(need / 2);  // never shrinks
  EXPECT_EQ(over.capacity_bytes(), need);

  Workspace under;
  under.reserve(need / 2);
  pattern(under);
  EXPECT_EQ(under.capacity_bytes(), need);  // grown to the need at the end, as without
}

// Reserving or shrinking inside a frame would move buffers that are out:
// refused by name, as a negative size is.
TEST(Workspace, ReserveAndShrinkOutsideFramesOnly) {
  Workspace ws;
  {
    Workspace::Frame frame(ws);
    auto a = frame.take<View1<double>>(10);
    fill(a, 1.0);
    expect_error<ConfigError>([&] { ws.reserve(1 << 20); },
                              {"Workspace::reserve", "1 frame(s) are open"});
    expect_error<ConfigError>([&] { ws.shrink_to_high_water(); },
                              {"Workspace::shrink_to_high_water", "1 frame(s) are open"});
    EXPECT_EQ(first(a), 1.0);
  }
  expect_error<ConfigError>([&] { ws.reserve(-5); }, {"-5 bytes", "must not be negative"});
  ws.reserve(0);
  EXPECT_GE(ws.capacity_bytes(), ws.high_water_bytes());
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
