// GoogleTest entry point of the MPI tests: MPI first, then one Kokkos runtime;
// only process 0 prints gtest's report. A failed assertion on any process is
// printed at once to stderr tagged with its rank ("[rank 1] file:line: ...")
// and ends the whole job (MPI_Abort): the processes run every test together,
// so a process that left a test early (an ASSERT) would leave the others
// waiting in a collective until its time-out, and a failure on a process other
// than 0 would print nothing.
#include "reformer/core/distributed.hpp"
#include "reformer/core/runtime.hpp"
#include "reformer/ops/gemm.hpp"

#include <gtest/gtest.h>

#include <cstdio>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

namespace {

class AbortOnFailure : public ::testing::EmptyTestEventListener {
 public:
  explicit AbortOnFailure(int rank) : rank_(rank) {}

  // The test's name, kept here: gtest holds its own lock while it calls
  // OnTestPartResult, so UnitTest::current_test_info() would deadlock there.
  void OnTestStart(const ::testing::TestInfo& test) override {
    test_ = std::string(test.test_suite_name()) + "." + test.name() + ": ";
  }
  void OnTestEnd(const ::testing::TestInfo&) override { test_.clear(); }

  void OnTestPartResult(const ::testing::TestPartResult& result) override {
    if (!result.failed()) return;
    const std::string tag = "[rank " + std::to_string(rank_) + "] ";
    std::ostringstream line;
    line << tag << (result.file_name() ? result.file_name() : "(unknown file)") << ":"
         << result.line_number() << ": " << test_;
    for (const char c : std::string(result.message())) line << c << (c == '\n' ? tag : "");
    line << "\n" << tag << "a failed assertion ends the job (MPI_Abort)\n";
    // One write, so that the two processes' lines do not interleave.
    const std::string text = line.str();
    std::fflush(stdout);
    std::fwrite(text.data(), 1, text.size(), stderr);
    std::fflush(stderr);
    reformer::Communicator::world().abort(1);
  }

 private:
  int rank_;
  std::string test_;
};

}  // namespace

int main(int argc, char** argv) {
  reformer::ops::run_with_host_blas_core(argv);  // before MPI: OpenBLAS's kernels for this CPU
  // Listing needs neither MPI nor Kokkos (tests/harness/ctest_step.py lists the
  // cases of each filter without mpirun).
  for (int i = 1; i < argc; ++i)
    if (std::string(argv[i]) == "--gtest_list_tests") {
      ::testing::InitGoogleTest(&argc, argv);
      return RUN_ALL_TESTS();
    }
  reformer::DistributedRuntime mpi(argc, argv);
  const int rank = reformer::Communicator::world().rank();
  // --gtest_output=xml:PREFIX.xml: each process writes PREFIX.rank<r>.xml, and
  // the harness counts every case from all of them (gtest reads the flag in
  // InitGoogleTest, so the argument is rewritten before it).
  std::vector<std::string> args(argv, argv + argc);
  const std::string xml = "--gtest_output=xml:";
  for (auto& arg : args)
    if (arg.rfind(xml, 0) == 0 && arg.size() > xml.size() + 4 &&
        arg.compare(arg.size() - 4, 4, ".xml") == 0)
      arg = arg.substr(0, arg.size() - 4) + ".rank" + std::to_string(rank) + ".xml";
  std::vector<char*> pointers;
  for (auto& arg : args) pointers.push_back(arg.data());
  pointers.push_back(nullptr);
  int count = argc;
  ::testing::InitGoogleTest(&count, pointers.data());
  auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
  if (rank != 0) delete listeners.Release(listeners.default_result_printer());
  // Appended after the printer: on process 0 gtest's own report of the
  // failure comes first.
  listeners.Append(new AbortOnFailure(rank));
  int failed = 0;
  {
    reformer::Runtime runtime;
    failed = RUN_ALL_TESTS();
  }
  // A failure on any process fails the test (failures end the job above; this
  // also covers one that gtest reports outside a test part).
  std::vector<double> failures = {double(failed)};
  reformer::Communicator::world().sum(failures, "the test result", 120);
  return failures[0] > 0 ? 1 : 0;
}
