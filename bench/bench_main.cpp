// Google Benchmark entry point with one Kokkos runtime for all suites.
#include "reformer/core/runtime.hpp"

#include <benchmark/benchmark.h>

int main(int argc, char** argv) {
  reformer::Runtime runtime;
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
