// The matmul wrapper against calling the host BLAS directly on the same shapes
// and the same memory. The wrapper must reach at least 90% of the direct call.
#include "reformer/core/random.hpp"
#include "reformer/core/shape.hpp"
#include "reformer/ops/gemm.hpp"

#include <benchmark/benchmark.h>

extern "C" void sgemm_(const char* transa, const char* transb, const int* m, const int* n,
                       const int* k, const float* alpha, const float* a, const int* lda,
                       const float* b, const int* ldb, const float* beta, float* c, const int* ldc);

namespace reformer {
namespace {

void fill(View2<float> m, std::uint64_t stream) {
  auto flat = as_vector(m);
  Kokkos::parallel_for(
      "fill", range(flat.extent(0)), KOKKOS_LAMBDA(Index i) {
        flat(i) = float(random_uniform({1, stream}, i) - 0.5);
      });
  Kokkos::fence();
}

struct Problem {
  View2<float> x, w, y;
  Problem(Index rows, Index d) : x("x", rows, d), w("w", d, d), y("y", rows, d) {
    fill(x, 1);
    fill(w, 2);
  }
};

void sizes(benchmark::internal::Benchmark* b) {
  for (int rows : {4096, 16384, 65536})
    for (int d : {256, 512, 1024}) b->Args({rows, d});
  b->Unit(benchmark::kMillisecond)->UseRealTime();
}

void report_flops(benchmark::State& state) {
  const double flops = 2.0 * state.range(0) * state.range(1) * state.range(1);
  state.counters["GFLOP/s"] =
      benchmark::Counter(flops * state.iterations() / 1e9, benchmark::Counter::kIsRate);
}

void BM_GemmWrapper(benchmark::State& state) {
  Problem p(state.range(0), state.range(1));
  for (auto _ : state) {
    ops::matmul<float>(p.x, ops::Trans::No, p.w, ops::Trans::No, p.y);
    Kokkos::fence();
  }
  report_flops(state);
}
BENCHMARK(BM_GemmWrapper)->Apply(sizes);

// Row-major y = x w is column-major y^T = w^T x^T: sgemm("N", "N", d, rows, d, w, x).
void BM_GemmDirectBlas(benchmark::State& state) {
  if (!Kokkos::SpaceAccessibility<HostSpace, MemSpace>::accessible) {
    state.SkipWithError("the direct BLAS comparison needs host-accessible memory");
    return;
  }
  Problem p(state.range(0), state.range(1));
  const int rows = static_cast<int>(state.range(0)), d = static_cast<int>(state.range(1));
  const float one = 1, zero = 0;
  for (auto _ : state) {
    sgemm_("N", "N", &d, &rows, &d, &one, p.w.data(), &d, p.x.data(), &d, &zero, p.y.data(), &d);
  }
  report_flops(state);
}
BENCHMARK(BM_GemmDirectBlas)->Apply(sizes);

}  // namespace
}  // namespace reformer
