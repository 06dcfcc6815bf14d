// Forward and backward time of every op at transformer sizes: rows (positions)
// from 4K to 64K, d_model from 256 to 1024. Arguments are {rows, d_model}.
#include "reformer/core/random.hpp"
#include "reformer/core/shape.hpp"
#include "reformer/ops/activations.hpp"
#include "reformer/ops/dropout.hpp"
#include "reformer/ops/gemm.hpp"
#include "reformer/ops/layer_norm.hpp"
#include "reformer/ops/linear.hpp"
#include "reformer/ops/softmax.hpp"

#include <benchmark/benchmark.h>

namespace reformer {
namespace {

template <class V>
void fill(const V& v, std::uint64_t seed) {
  auto flat = as_vector(v);
  Kokkos::parallel_for(
      "bench_fill", range(flat.extent(0)), KOKKOS_LAMBDA(Index i) {
        flat(i) = float(random_uniform({seed, 1}, i) - 0.5);
      });
  Kokkos::fence();
}

void transformer_sizes(benchmark::internal::Benchmark* b) {
  for (int rows : {4096, 16384, 65536})
    for (int d : {256, 512, 1024}) b->Args({rows, d});
  b->Unit(benchmark::kMillisecond)->UseRealTime();
}

void set_bytes(benchmark::State& state, double bytes_per_iteration) {
  state.SetBytesProcessed(static_cast<std::int64_t>(bytes_per_iteration) * state.iterations());
}

// The projection of a layer: [rows, d] x [d, d].
void BM_Matmul(benchmark::State& state) {
  const Index rows = state.range(0), d = state.range(1);
  View2<float> x("x", rows, d), w("w", d, d), y("y", rows, d);
  fill(x, 1);
  fill(w, 2);
  for (auto _ : state) {
    ops::matmul<float>(x, ops::Trans::No, w, ops::Trans::No, y);
    Kokkos::fence();
  }
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * rows * d * d * state.iterations() / 1e9,
                                                 benchmark::Counter::kIsRate);
}
BENCHMARK(BM_Matmul)->Apply(transformer_sizes);

// Per-head attention products: batch * heads = 4, [L, 64] x [64, L] and back.
void BM_BatchedMatmulScores(benchmark::State& state) {
  const Index bh = 4, l = state.range(0), dh = 64;
  View3<float> q("q", bh, l, dh), k("k", bh, l, dh), s("s", bh, l, l);
  fill(q, 1);
  fill(k, 2);
  for (auto _ : state) {
    ops::batched_matmul<float>(q, ops::Trans::No, k, ops::Trans::Yes, s);
    Kokkos::fence();
  }
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * bh * l * l * dh * state.iterations() / 1e9,
                                                 benchmark::Counter::kIsRate);
}
BENCHMARK(BM_BatchedMatmulScores)
    ->Arg(1024)
    ->Arg(2048)
    ->Arg(4096)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

void BM_BatchedMatmulValues(benchmark::State& state) {
  const Index bh = 4, l = state.range(0), dh = 64;
  View3<float> p("p", bh, l, l), v("v", bh, l, dh), o("o", bh, l, dh);
  fill(p, 1);
  fill(v, 2);
  for (auto _ : state) {
    ops::batched_matmul<float>(p, ops::Trans::No, v, ops::Trans::No, o);
    Kokkos::fence();
  }
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * bh * l * l * dh * state.iterations() / 1e9,
                                                 benchmark::Counter::kIsRate);
}
BENCHMARK(BM_BatchedMatmulValues)
    ->Arg(1024)
    ->Arg(2048)
    ->Arg(4096)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

void BM_LinearBackward(benchmark::State& state) {
  const Index rows = state.range(0), d = state.range(1);
  View2<float> x("x", rows, d), w("w", d, d), dy("dy", rows, d), dx("dx", rows, d), dw("dw", d, d);
  View1<float> db("db", d);
  fill(x, 1);
  fill(w, 2);
  fill(dy, 3);
  for (auto _ : state) {
    ops::linear_backward<float>(x, w, dy, dx, dw, db);
    Kokkos::fence();
  }
  state.counters["GFLOP/s"] = benchmark::Counter(4.0 * rows * d * d * state.iterations() / 1e9,
                                                 benchmark::Counter::kIsRate);
}
BENCHMARK(BM_LinearBackward)->Apply(transformer_sizes);

void BM_LayerNormForward(benchmark::State& state) {
  const Index rows = state.range(0), d = state.range(1);
  View2<float> x("x", rows, d), y("y", rows, d);
  View1<float> g("g", d), b("b", d), mean("mean", rows), rstd("rstd", rows);
  fill(x, 1);
  Kokkos::deep_copy(g, 1.0f);
  for (auto _ : state) {
    ops::layer_norm_forward<float>(x, g, b, 1e-5f, y, mean, rstd);
    Kokkos::fence();
  }
  set_bytes(state, 2.0 * rows * d * sizeof(float));
}
BENCHMARK(BM_LayerNormForward)->Apply(transformer_sizes);

void BM_LayerNormBackward(benchmark::State& state) {
  const Index rows = state.range(0), d = state.range(1);
  View2<float> x("x", rows, d), y("y", rows, d), dy("dy", rows, d), dx("dx", rows, d);
  View1<float> g("g", d), b("b", d), mean("mean", rows), rstd("rstd", rows), dg("dg", d),
      dbeta("dbeta", d);
  fill(x, 1);
  fill(dy, 2);
  Kokkos::deep_copy(g, 1.0f);
  ops::layer_norm_forward<float>(x, g, b, 1e-5f, y, mean, rstd);
  for (auto _ : state) {
    ops::layer_norm_backward<float>(x, g, mean, rstd, dy, dx, dg, dbeta);
    Kokkos::fence();
  }
  set_bytes(state, 3.0 * rows * d * sizeof(float));
}
BENCHMARK(BM_LayerNormBackward)->Apply(transformer_sizes);

void BM_SoftmaxForwardBackward(benchmark::State& state) {
  const Index rows = state.range(0), d = state.range(1);
  View2<float> x("x", rows, d), y("y", rows, d), dy("dy", rows, d), dx("dx", rows, d);
  fill(x, 1);
  fill(dy, 2);
  for (auto _ : state) {
    ops::softmax_forward<float>(x, y);
    ops::softmax_backward<float>(y, dy, dx);
    Kokkos::fence();
  }
  set_bytes(state, 5.0 * rows * d * sizeof(float));
}
BENCHMARK(BM_SoftmaxForwardBackward)->Apply(transformer_sizes);

void BM_GeluForwardBackward(benchmark::State& state) {
  const Index n = state.range(0) * state.range(1);
  View1<float> x("x", n), y("y", n), dy("dy", n), dx("dx", n);
  fill(x, 1);
  fill(dy, 2);
  for (auto _ : state) {
    ops::activation_forward<float>(ops::Activation::GELU, x, y);
    ops::activation_backward<float>(ops::Activation::GELU, x, dy, dx);
    Kokkos::fence();
  }
  set_bytes(state, 5.0 * n * sizeof(float));
}
BENCHMARK(BM_GeluForwardBackward)->Apply(transformer_sizes);

void BM_DropoutForwardBackward(benchmark::State& state) {
  const Index n = state.range(0) * state.range(1);
  View1<float> x("x", n), y("y", n), dx("dx", n);
  fill(x, 1);
  for (auto _ : state) {
    ops::dropout_forward<float>(x, 0.1, {1, 2}, 0, y);
    ops::dropout_backward<float>(y, 0.1, {1, 2}, 0, dx);
    Kokkos::fence();
  }
  set_bytes(state, 4.0 * n * sizeof(float));
}
BENCHMARK(BM_DropoutForwardBackward)->Apply(transformer_sizes);

}  // namespace
}  // namespace reformer
