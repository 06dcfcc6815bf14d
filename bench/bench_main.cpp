// Google Benchmark entry point with one Kokkos runtime for all suites.
#include "reformer/core/runtime.hpp"
#include "reformer/ops/gemm.hpp"

#include <benchmark/benchmark.h>

int main(int argc, char** argv) {
  reformer::ops::run_with_host_blas_core(argv);  // OpenBLAS's kernels for this CPU (ops/gemm.hpp)
  reformer::Runtime runtime;
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
