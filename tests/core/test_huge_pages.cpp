#include "reformer/core/memory_tracker.hpp"
#include "reformer/core/types.hpp"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

namespace reformer {
namespace {

std::string read_file(const char* path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// kB of anonymous huge pages mapped by this process.
long anon_huge_kb() {
  std::istringstream in(read_file("/proc/self/smaps_rollup"));
  std::string key;
  std::getline(in, key);  // the address-range line
  long value = 0;
  std::string unit;
  while (in >> key >> value >> unit)
    if (key == "AnonHugePages:") return value;
  return 0;
}

void touch(View1<float> v) {
  Kokkos::parallel_for(
      "touch", range(v.extent(0)), KOKKOS_LAMBDA(Index i) { v(i) = 1.0f; });
  Kokkos::fence();
}

// The runtime asks for transparent huge pages on large host allocations, and
// the memory tracker (which chains to that hook) still counts them.
TEST(HugePages, LargeHostAllocationsGetHugePages) {
  if (!Kokkos::SpaceAccessibility<HostSpace, MemSpace>::accessible) GTEST_SKIP() << "device memory";
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "AddressSanitizer's allocator maps its own memory";
#endif
#if defined(REFORMER_TEST_EMULATOR)
  // qemu-user (7.2) answers the program's madvise(MADV_HUGEPAGE) with success
  // but does not pass it on to the kernel (qemu -strace shows the call, strace
  // of qemu does not), so no huge pages can appear (cross builds).
  GTEST_SKIP() << "under " REFORMER_TEST_EMULATOR ", which does not pass madvise on to the kernel";
#endif
  const std::string mode = read_file("/sys/kernel/mm/transparent_hugepage/enabled");
  if (mode.find("[madvise]") == std::string::npos && mode.find("[always]") == std::string::npos)
    GTEST_SKIP() << "transparent huge pages are off: " << mode;
  const long before = anon_huge_kb();
  const auto counted = MemoryTracker::instance().space(MemSpace::name()).current_bytes;
  View1<float> big("big", 16 << 20);  // 64 MiB
  touch(big);
  EXPECT_EQ(MemoryTracker::instance().space(MemSpace::name()).current_bytes - counted,
            std::int64_t(64) << 20);
  EXPECT_GE(anon_huge_kb() - before, 16 * 1024) << "expected at least 16 MiB of huge pages";
}

}  // namespace
}  // namespace reformer
