// The thread count a test runs at is the one ctest registered it for: every
// OpenMP case runs at 1, 2 and 4 threads (ctest names ending in .threads1,
// .threads2, .threads4) through OMP_NUM_THREADS in the test's environment
// (tests/CMakeLists.txt, reformer_discover_tests). A harness bug that loses
// the variable (CMake issues 17812 and 23120 once did: every case ran at the
// machine's default) would silently run all three at the same count; this test
// fails instead.
#include "reformer/core/runtime.hpp"
#include "reformer/core/types.hpp"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

namespace reformer {
namespace {

// The first entry of OMP_NUM_THREADS ("4" or "4,2" for nested levels), or -1
// when the variable is not set; 0 when it is not a positive number.
int omp_num_threads() {
  const char* text = std::getenv("OMP_NUM_THREADS");
  if (text == nullptr) return -1;
  char* end = nullptr;
  const long value = std::strtol(text, &end, 10);
  if (end == text || (*end != '\0' && *end != ',') || value <= 0 || value > 1 << 20) return 0;
  return int(value);
}

// ctest sets CTEST_INTERACTIVE_DEBUG_MODE=1 in a test's environment (plain
// `ctest`), DASHBOARD_TEST_FROM_CTEST in dashboard mode (ctest -D/-S/-T).
bool under_ctest() {
  return std::getenv("CTEST_INTERACTIVE_DEBUG_MODE") != nullptr ||
         std::getenv("DASHBOARD_TEST_FROM_CTEST") != nullptr;
}

TEST(RuntimeThreads, ConcurrencyIsOmpNumThreads) {
  const std::string space = ExecSpace::name();
  const int concurrency = ExecSpace().concurrency();
  const int requested = omp_num_threads();
  SCOPED_TRACE(
      "execution space " + space + ", concurrency " + std::to_string(concurrency) +
      ", OMP_NUM_THREADS=" +
      (std::getenv("OMP_NUM_THREADS") ? std::getenv("OMP_NUM_THREADS") : std::string("(unset)")));
  // What `reformer info` reports is the same number.
  EXPECT_EQ(backend_info().concurrency, concurrency);
  if (space == "Serial") {
    EXPECT_EQ(concurrency, 1);
    return;
  }
  if (space != "OpenMP") GTEST_SKIP() << "the " << space << " backend does not use OMP_NUM_THREADS";
  if (std::getenv("KOKKOS_NUM_THREADS") != nullptr)
    GTEST_SKIP() << "KOKKOS_NUM_THREADS=" << std::getenv("KOKKOS_NUM_THREADS")
                 << " overrides OMP_NUM_THREADS";
  if (requested < 0) {
    // ctest registers every OpenMP case with OMP_NUM_THREADS; without it the
    // .threadsN variants all ran at the same, default count.
    ASSERT_FALSE(under_ctest()) << "run by ctest without OMP_NUM_THREADS: the harness lost the "
                                   "thread count it registered this test for";
    GTEST_SKIP() << "OMP_NUM_THREADS is not set (outside ctest)";
  }
  ASSERT_GT(requested, 0) << "OMP_NUM_THREADS is not a positive number";
  EXPECT_EQ(concurrency, requested)
      << "Kokkos runs " << concurrency << " threads, OMP_NUM_THREADS asks for " << requested;
}

}  // namespace
}  // namespace reformer
