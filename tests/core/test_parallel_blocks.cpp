// parallel_blocks (core/types.hpp): body(begin, end) over [0, n) in contiguous
// blocks, with or without streams whose next block is prefetched (bf16
// streams on the host). Every index is visited exactly once, and blocks have
// the length the helper promises. parallel_map and parallel_row_map
// (core/element_map.hpp) in both forms (the host's blocks; the GPUs' groups of
// elements, run here on the host too): every element stored once with its own
// value, in place too.
#include "reformer/core/bfloat16.hpp"
#include "reformer/core/element_map.hpp"
#include "reformer/core/types.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace reformer {
namespace {

// The streams passed: none, float arrays only, or a bf16 and a float array.
enum class Streams { None, FloatOnly, WithBf16 };

// Adds 1 to visits[i] for every index a block covers and records the largest
// block length.
void visit(Index n, Streams streams, View1<int> visits, View1<int> longest) {
  View1<bf16> narrow("narrow", n);
  View1<float> wide("wide", n);
  const auto body = KOKKOS_LAMBDA(Index begin, Index end) {
    for (Index i = begin; i < end; ++i) visits(i) += 1;
    Kokkos::atomic_fetch_max(&longest(0), int(end - begin));
  };
  if (streams == Streams::WithBf16)
    parallel_blocks("test_parallel_blocks_bf16", n, body, narrow.data(), wide.data());
  else if (streams == Streams::FloatOnly)
    parallel_blocks("test_parallel_blocks_float", n, body, wide.data(), wide.data());
  else
    parallel_blocks("test_parallel_blocks", n, body);
  Kokkos::fence();
}

TEST(ParallelBlocks, EveryIndexOnceWithAndWithoutBf16Streams) {
  for (const Streams streams : {Streams::None, Streams::FloatOnly, Streams::WithBf16})
    for (const Index n :
         {Index(0), Index(1), Index(1023), Index(1024), Index(1025), Index(4097), Index(10000)}) {
      SCOPED_TRACE("n " + std::to_string(n) + ", streams " + std::to_string(int(streams)));
      View1<int> visits("visits", n), longest("longest", 1);
      visit(n, streams, visits, longest);
      auto host = Kokkos::create_mirror_view_and_copy(HostSpace(), visits);
      Index wrong = 0;
      for (Index i = 0; i < n; ++i) wrong += host(i) != 1;
      EXPECT_EQ(wrong, 0) << "indices not visited exactly once";
      int block = 0;
      Kokkos::deep_copy(block, Kokkos::subview(longest, 0));
      // Host: blocks of 1024 with a bf16 stream (the hints cover one block
      // ahead), 4096 without one (float32 streams get no hints); GPUs: one
      // index per thread.
      const Index limit = !kHostMemory ? 1 : streams == Streams::WithBf16 ? 1024 : 4096;
      EXPECT_LE(block, limit);
      if (n >= limit) EXPECT_EQ(block, limit);
    }
}

// Both forms of parallel_map: y[i] = 2 y[i] + x[i] + i in place (value reads
// the element that store writes), every element once.
template <MapForm kForm>
std::vector<double> map_in_place(Index n) {
  View1<double> x("x", n), y("y", n);
  View1<int> stores("stores", n);
  Kokkos::parallel_for(
      "test_map_fill", range(n), KOKKOS_LAMBDA(Index i) {
        x(i) = 0.5 * double(i % 7);
        y(i) = double(i % 5) - 2.0;
      });
  const double* px = x.data();
  double* py = y.data();
  int* count = stores.data();
  parallel_map<kForm>(
      "test_map", n, KOKKOS_LAMBDA(Index i) { return 2.0 * py[i] + px[i] + double(i); },
      KOKKOS_LAMBDA(Index i, double v) {
        py[i] = v;
        Kokkos::atomic_add(&count[i], 1);
      });
  auto host_y = Kokkos::create_mirror_view_and_copy(HostSpace(), y);
  auto host_stores = Kokkos::create_mirror_view_and_copy(HostSpace(), stores);
  std::vector<double> out(n);
  for (Index i = 0; i < n; ++i) {
    EXPECT_EQ(host_stores(i), 1) << "element " << i << " stored " << host_stores(i) << " times";
    out[i] = host_y(i);
  }
  return out;
}

TEST(ParallelMap, BothFormsStoreEveryElementOnceWithItsValue) {
  for (const Index n :
       {Index(0), Index(1), Index(3), Index(4), Index(5), Index(4097), Index(10001)}) {
    SCOPED_TRACE("n " + std::to_string(n));
    const auto blocks = map_in_place<MapForm::Blocks>(n), groups = map_in_place<MapForm::Groups>(n);
    for (Index i = 0; i < n; ++i) {
      const double expected = 2.0 * (double(i % 5) - 2.0) + 0.5 * double(i % 7) + double(i);
      ASSERT_EQ(blocks[i], expected) << "blocks, element " << i;
      ASSERT_EQ(groups[i], expected) << "groups, element " << i;
    }
  }
}

// Both forms of parallel_row_map over a [rows, cols] matrix with padded rows
// (leading dimension cols + 3): every element of the matrix once, in place,
// the padding untouched.
template <MapForm kForm>
std::vector<double> row_map_in_place(Index rows, Index cols) {
  const Index ld = cols + 3;
  View1<double> y("y", rows * ld);
  View1<int> stores("stores", rows * ld);
  Kokkos::parallel_for(
      "test_row_map_fill", range(rows * ld), KOKKOS_LAMBDA(Index k) { y(k) = double(k % 11); });
  double* py = y.data();
  int* count = stores.data();
  parallel_row_map<kForm>(
      "test_row_map", rows, cols,
      KOKKOS_LAMBDA(Index i, Index j) { return py[i * ld + j] * 3.0 + double(i) - double(j); },
      KOKKOS_LAMBDA(Index i, Index j, double v) {
        py[i * ld + j] = v;
        Kokkos::atomic_add(&count[i * ld + j], 1);
      });
  auto host_y = Kokkos::create_mirror_view_and_copy(HostSpace(), y);
  auto host_stores = Kokkos::create_mirror_view_and_copy(HostSpace(), stores);
  std::vector<double> out(rows * ld);
  for (Index k = 0; k < rows * ld; ++k) {
    const bool inside = k % ld < cols;
    EXPECT_EQ(host_stores(k), inside ? 1 : 0) << "element " << k;
    out[k] = host_y(k);
  }
  return out;
}

TEST(ParallelRowMap, BothFormsStoreEveryElementOnceWithItsValue) {
  const Index shapes[][2] = {{0, 5}, {3, 0}, {1, 1}, {2, 3}, {5, 4}, {7, 9}, {33, 257}, {40, 300}};
  for (const auto& shape : shapes) {
    const Index rows = shape[0], cols = shape[1], ld = cols + 3;
    SCOPED_TRACE("rows " + std::to_string(rows) + ", cols " + std::to_string(cols));
    const auto blocks = row_map_in_place<MapForm::Blocks>(rows, cols),
               groups = row_map_in_place<MapForm::Groups>(rows, cols);
    for (Index k = 0; k < rows * ld; ++k) {
      const Index i = k / ld, j = k % ld;
      const double start = double(k % 11);
      const double expected = j < cols ? start * 3.0 + double(i) - double(j) : start;
      ASSERT_EQ(blocks[k], expected) << "blocks, element " << k;
      ASSERT_EQ(groups[k], expected) << "groups, element " << k;
    }
  }
}

}  // namespace
}  // namespace reformer
