// GoogleTest entry point: one Kokkos runtime (with the memory tracker) for all tests.
// A run whose every case was skipped exits 77, the SKIP_RETURN_CODE ctest
// registers the cases with (tests/CMakeLists.txt): skips are told by the exit
// code alone, so a LeakSanitizer report after GTEST_SKIP (exit 23) fails.
// Like the CLI and the benchmarks, the tests run OpenBLAS's kernels for this CPU
// where OpenBLAS fell back to a generic core (its products at a tenth of the
// machine's rate on a Xeon it did not know, docs/testing.md).
#include "reformer/core/runtime.hpp"
#include "reformer/ops/gemm.hpp"

#include <gtest/gtest.h>

int main(int argc, char** argv) {
  reformer::ops::run_with_host_blas_core(argv);  // OpenBLAS's kernels for this CPU (ops/gemm.hpp)
  ::testing::InitGoogleTest(&argc, argv);
  reformer::Runtime runtime;
  const int failed = RUN_ALL_TESTS();
  const auto& unit = *::testing::UnitTest::GetInstance();
  if (failed == 0 && unit.test_to_run_count() > 0 &&
      unit.skipped_test_count() == unit.test_to_run_count())
    return 77;
  return failed;
}
