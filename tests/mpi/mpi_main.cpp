// GoogleTest entry point of the MPI tests: MPI first, then one Kokkos runtime;
// only process 0 prints gtest's report.
#include "reformer/core/distributed.hpp"
#include "reformer/core/runtime.hpp"

#include <gtest/gtest.h>

int main(int argc, char** argv) {
  reformer::DistributedRuntime mpi(argc, argv);
  ::testing::InitGoogleTest(&argc, argv);
  if (reformer::Communicator::world().rank() != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  int failed = 0;
  {
    reformer::Runtime runtime;
    failed = RUN_ALL_TESTS();
  }
  // A failure on any process fails the test.
  std::vector<double> failures = {double(failed)};
  reformer::Communicator::world().sum(failures, "the test result", 120);
  return failures[0] > 0 ? 1 : 0;
}
