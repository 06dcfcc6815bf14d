// Forward and backward time of every op at transformer sizes: rows (positions)
// from 4K to 64K, d_model from 256 to 1024. Arguments are {rows, d_model}.
#include "reformer/core/parameter_set.hpp"
#include "reformer/core/random.hpp"
#include "reformer/core/shape.hpp"
#include "reformer/ops/activations.hpp"
#include "reformer/ops/cross_entropy.hpp"
#include "reformer/ops/dropout.hpp"
#include "reformer/ops/elementwise.hpp"
#include "reformer/ops/embedding.hpp"
#include "reformer/ops/gemm.hpp"
#include "reformer/ops/layer_norm.hpp"
#include "reformer/ops/linear.hpp"
#include "reformer/ops/softmax.hpp"
#include "reformer/train/grad_clip.hpp"
#include "reformer/train/optimizer.hpp"

#include <benchmark/benchmark.h>

#include <algorithm>
#include <initializer_list>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

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

// Token ids uniform in [0, vocab).
void fill_ids(const View1<int>& ids, Index vocab, std::uint64_t seed) {
  Kokkos::parallel_for(
      "bench_fill_ids", range(ids.extent(0)), KOKKOS_LAMBDA(Index i) {
        ids(i) = int(random_bits({seed, 2}, i) % std::uint64_t(vocab));
      });
  Kokkos::fence();
}

// Number of distinct values in ids (host side, outside the timed loop).
Index distinct_ids(const View1<int>& ids, Index vocab) {
  auto host = Kokkos::create_mirror_view_and_copy(HostSpace(), ids);
  std::vector<bool> seen(vocab, false);
  Index count = 0;
  for (size_t i = 0; i < host.extent(0); ++i) {
    count += seen[host(i)] ? 0 : 1;
    seen[host(i)] = true;
  }
  return count;
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

// The dense products of a layer at the model's shapes, float32 against bf16
// activations (float32 weights, ops::mixed_matmul): {rows, k, n, kind} with
// kind 0 the forward Y = X W (X [rows, k], W [k, n]), 1 the input gradient
// dX = dY W^T, 2 the weight gradient dW += X^T dY. The bf16 products take the
// packed GEMM, or with REFORMER_BF16_GEMM=blas the widened panels and the BLAS.
void dense_product_sizes(benchmark::internal::Benchmark* b) {
  for (int kind : {0, 1, 2})
    for (const std::pair<int, int> kn :
         std::initializer_list<std::pair<int, int>>{{256, 256}, {256, 1024}, {1024, 256}})
      b->Args({16384, kn.first, kn.second, kind});
  b->Unit(benchmark::kMillisecond)->UseRealTime();
}

template <class T>
void fill_any(const View2<T>& v, std::uint64_t seed) {
  auto flat = as_vector(v);
  Kokkos::parallel_for(
      "bench_fill", range(flat.extent(0)), KOKKOS_LAMBDA(Index i) {
        flat(i) = T(float(random_uniform({seed, 1}, i) - 0.5));
      });
  Kokkos::fence();
}

template <class T>
void BM_DenseProduct(benchmark::State& state) {
  const Index rows = state.range(0), k = state.range(1), n = state.range(2);
  const int kind = int(state.range(3));
  View2<T> x("x", rows, k), dy("dy", rows, n), y("y", rows, n), dx("dx", rows, k);
  View2<float> w("w", k, n), dw("dw", k, n);
  fill_any(x, 1);
  fill_any(dy, 2);
  fill_any(w, 3);
  for (auto _ : state) {
    if constexpr (std::is_same<T, float>::value) {
      if (kind == 0) ops::matmul<float>(x, ops::Trans::No, w, ops::Trans::No, y);
      if (kind == 1) ops::matmul<float>(dy, ops::Trans::No, w, ops::Trans::Yes, dx);
      if (kind == 2) ops::matmul<float>(x, ops::Trans::Yes, dy, ops::Trans::No, dw, 1.0f, 1.0f);
    } else {
      if (kind == 0) ops::mixed_matmul<T, float, T>(x, ops::Trans::No, w, ops::Trans::No, y);
      if (kind == 1) ops::mixed_matmul<T, float, T>(dy, ops::Trans::No, w, ops::Trans::Yes, dx);
      if (kind == 2)
        ops::mixed_matmul<T, T, float>(x, ops::Trans::Yes, dy, ops::Trans::No, dw, 1.0f, 1.0f);
    }
    Kokkos::fence();
  }
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * rows * k * n * state.iterations() / 1e9,
                                                 benchmark::Counter::kIsRate);
}
BENCHMARK_TEMPLATE(BM_DenseProduct, float)->Apply(dense_product_sizes);
BENCHMARK_TEMPLATE(BM_DenseProduct, bf16)->Apply(dense_product_sizes);

// The memory-bound element-wise ops in each storage type (issue 34: bf16 moves
// half the bytes, so it should be no slower): kind 0 axpby (y = a x + b y),
// 1 ReLU forward and backward, 2 axpby with x and y evicted from the caches
// first (a 256 MiB fill between iterations, not timed), as in a training step,
// where the tensors come from memory (core/types.hpp's parallel_blocks: the
// cache hints for bf16 streams). bytes/s counts the tensors' own bytes.
template <class T>
void BM_ElementwiseStorage(benchmark::State& state) {
  const Index rows = state.range(0), d = state.range(1), n = rows * d;
  const int kind = int(state.range(2));
  View2<T> x("x", rows, d), y("y", rows, d), dy("dy", rows, d), dx("dx", rows, d);
  fill_any(x, 1);
  fill_any(y, 2);
  fill_any(dy, 3);
  const auto fx = as_vector(x), fy = as_vector(y), fdy = as_vector(dy), fdx = as_vector(dx);
  View1<float> big("big", kind == 2 ? Index(1) << 26 : 0);
  for (auto _ : state) {
    if (kind == 2) {
      state.PauseTiming();
      Kokkos::deep_copy(big, 1.0f);
      Kokkos::fence();
      state.ResumeTiming();
      ops::axpby<T>(0.5f, fx, 0.25f, fy);
    }
    if (kind == 0) ops::axpby<T>(0.5f, fx, 0.25f, fy);
    if (kind == 1) {
      ops::activation_forward<T>(ops::Activation::ReLU, fx, fy);
      ops::activation_backward<T>(ops::Activation::ReLU, fx, fdy, fdx);
    }
    Kokkos::fence();
  }
  set_bytes(state, (kind == 1 ? 5.0 : 3.0) * n * sizeof(T));
}
void storage_sizes(benchmark::internal::Benchmark* b) {
  for (int kind : {0, 1, 2}) b->Args({16384, 256, kind});
  // GPUs: [65536, 1024] tensors (256 MiB in float), far past a GPU's L2, as the
  // 64K step's feed-forward chunks are (core/element_map.hpp's maps).
  if (!kHostMemory)
    for (int kind : {0, 1}) b->Args({65536, 1024, kind});
  b->Unit(benchmark::kMillisecond)->UseRealTime();
}
BENCHMARK_TEMPLATE(BM_ElementwiseStorage, float)->Apply(storage_sizes);
BENCHMARK_TEMPLATE(BM_ElementwiseStorage, bf16)->Apply(storage_sizes);

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

// The feed-forward's two products with their element-wise work ([rows, d] x
// [d, 4d], bias and ReLU; then [rows, 4d] x [4d, d], bias and a residual sum),
// fused:1 as linear_activation_forward and linear_residual_forward (one kernel
// after each product), fused:0 as linear_forward followed by activation_forward
// and axpby (two), in the same process.
void BM_FeedForwardProducts(benchmark::State& state) {
  const Index rows = state.range(0), d = state.range(1), f = 4 * d;
  const bool fused = state.range(2) != 0;
  View2<float> x("x", rows, d), w1("w1", d, f), w2("w2", f, d), hidden("hidden", rows, f),
      out("out", rows, d), y("y", rows, d);
  View1<float> b1("b1", f), b2("b2", d);
  fill(x, 1);
  fill(w1, 2);
  fill(w2, 3);
  fill(b1, 4);
  fill(b2, 5);
  for (auto _ : state) {
    if (fused) {
      ops::linear_activation_forward<float>(x, w1, b1, ops::Activation::ReLU, hidden, hidden);
      ops::linear_residual_forward<float>(hidden, w2, b2, 1.0f, out, y);
    } else {
      ops::linear_forward<float>(x, w1, b1, hidden);
      ops::activation_forward<float>(ops::Activation::ReLU, as_vector(hidden), as_vector(hidden));
      ops::linear_forward<float>(hidden, w2, b2, out);
      ops::axpby<float>(1.0f, as_vector(out), 1.0f, as_vector(y));
    }
    Kokkos::fence();
  }
  state.counters["GFLOP/s"] = benchmark::Counter(4.0 * rows * d * f * state.iterations() / 1e9,
                                                 benchmark::Counter::kIsRate);
}
BENCHMARK(BM_FeedForwardProducts)
    ->ArgNames({"rows", "d", "fused"})
    ->ArgsProduct({{1024, 16384}, {256}, {0, 1}})
    ->Unit(benchmark::kMillisecond);

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

void BM_SoftmaxForwardBackward(benchmark::State& state, bool log) {
  const Index rows = state.range(0), d = state.range(1);
  View2<float> x("x", rows, d), y("y", rows, d), dy("dy", rows, d), dx("dx", rows, d);
  fill(x, 1);
  fill(dy, 2);
  for (auto _ : state) {
    if (log) {
      ops::log_softmax_forward<float>(x, y);
      ops::log_softmax_backward<float>(y, dy, dx);
    } else {
      ops::softmax_forward<float>(x, y);
      ops::softmax_backward<float>(y, dy, dx);
    }
    Kokkos::fence();
  }
  set_bytes(state, 5.0 * rows * d * sizeof(float));
}
BENCHMARK_CAPTURE(BM_SoftmaxForwardBackward, softmax, false)->Apply(transformer_sizes);
BENCHMARK_CAPTURE(BM_SoftmaxForwardBackward, log_softmax, true)->Apply(transformer_sizes);

void BM_ActivationForwardBackward(benchmark::State& state, ops::Activation kind) {
  const Index n = state.range(0) * state.range(1);
  View1<float> x("x", n), y("y", n), dy("dy", n), dx("dx", n);
  fill(x, 1);
  fill(dy, 2);
  for (auto _ : state) {
    ops::activation_forward<float>(kind, x, y);
    ops::activation_backward<float>(kind, x, dy, dx);
    Kokkos::fence();
  }
  set_bytes(state, 5.0 * n * sizeof(float));
}
BENCHMARK_CAPTURE(BM_ActivationForwardBackward, relu, ops::Activation::ReLU)
    ->Apply(transformer_sizes);
BENCHMARK_CAPTURE(BM_ActivationForwardBackward, gelu, ops::Activation::GELU)
    ->Apply(transformer_sizes);

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

// Token embedding lookup y = sqrt(d) * table[ids], for a small (byte-level) and a
// word-piece vocabulary.
void BM_TokenEmbeddingForward(benchmark::State& state, Index vocab) {
  const Index rows = state.range(0), d = state.range(1);
  View2<float> table("table", vocab, d), y("y", rows, d);
  View1<int> ids("ids", rows);
  fill(table, 1);
  fill_ids(ids, vocab, 2);
  for (auto _ : state) {
    ops::token_embedding_forward<float>(table, ids, true, y);
    Kokkos::fence();
  }
  set_bytes(state, 2.0 * rows * d * sizeof(float) + rows * sizeof(int));
}
BENCHMARK_CAPTURE(BM_TokenEmbeddingForward, vocab256, Index(256))->Apply(transformer_sizes);
BENCHMARK_CAPTURE(BM_TokenEmbeddingForward, vocab32000, Index(32000))->Apply(transformer_sizes);

// Deterministic scatter-add into the table (radix sort by id, then ordered sums).
// Bytes: dy read once, and every table row that occurs read and written.
void BM_TokenEmbeddingBackward(benchmark::State& state, Index vocab) {
  const Index rows = state.range(0), d = state.range(1);
  View2<float> dy("dy", rows, d), dtable("dtable", vocab, d);
  View1<int> ids("ids", rows);
  fill(dy, 1);
  fill_ids(ids, vocab, 2);
  const Index touched = distinct_ids(ids, vocab);
  for (auto _ : state) {
    ops::token_embedding_backward<float>(ids, dy, true, dtable);
    Kokkos::fence();
  }
  set_bytes(state, (rows + 2.0 * touched) * d * sizeof(float) + rows * sizeof(int));
}
BENCHMARK_CAPTURE(BM_TokenEmbeddingBackward, vocab256, Index(256))->Apply(transformer_sizes);
BENCHMARK_CAPTURE(BM_TokenEmbeddingBackward, vocab32000, Index(32000))->Apply(transformer_sizes);

// Axial positions for one sequence of `rows` positions: e1 [rows / 128, d / 4] and
// e2 [128, 3 d / 4], so n1 * n2 = rows.
constexpr Index kAxialN2 = 128;

void BM_AxialPositionsForward(benchmark::State& state) {
  const Index rows = state.range(0), d = state.range(1), d1 = d / 4;
  View2<float> x("x", rows, d), y("y", rows, d);
  View2<float> e1("e1", rows / kAxialN2, d1), e2("e2", kAxialN2, d - d1);
  fill(x, 1);
  fill(e1, 2);
  fill(e2, 3);
  for (auto _ : state) {
    ops::axial_positions_forward<float>(x, e1, e2, rows, 0, y);
    Kokkos::fence();
  }
  set_bytes(state, 2.0 * rows * d * sizeof(float));
}
BENCHMARK(BM_AxialPositionsForward)->Apply(transformer_sizes);

void BM_AxialPositionsBackward(benchmark::State& state) {
  const Index rows = state.range(0), d = state.range(1), d1 = d / 4;
  View2<float> dy("dy", rows, d);
  View2<float> de1("de1", rows / kAxialN2, d1), de2("de2", kAxialN2, d - d1);
  fill(dy, 1);
  for (auto _ : state) {
    ops::axial_positions_backward<float>(dy, rows, 0, de1, de2);
    Kokkos::fence();
  }
  set_bytes(state, 1.0 * rows * d * sizeof(float));
}
BENCHMARK(BM_AxialPositionsBackward)->Apply(transformer_sizes);

// Sinusoidal positions added to one sequence of `rows` positions (no backward:
// its gradient is the identity).
void BM_SinusoidalPositionsForward(benchmark::State& state) {
  const Index rows = state.range(0), d = state.range(1);
  View2<float> x("x", rows, d), y("y", rows, d);
  fill(x, 1);
  for (auto _ : state) {
    ops::sinusoidal_positions_forward<float>(x, rows, 0, y);
    Kokkos::fence();
  }
  set_bytes(state, 2.0 * rows * d * sizeof(float));
}
BENCHMARK(BM_SinusoidalPositionsForward)->Apply(transformer_sizes);

// Learned absolute positions for one sequence of `rows` positions: table [rows, d].
void BM_LearnedPositionsForward(benchmark::State& state) {
  const Index rows = state.range(0), d = state.range(1);
  View2<float> x("x", rows, d), table("table", rows, d), y("y", rows, d);
  fill(x, 1);
  fill(table, 2);
  for (auto _ : state) {
    ops::learned_positions_forward<float>(x, table, rows, 0, y);
    Kokkos::fence();
  }
  set_bytes(state, 3.0 * rows * d * sizeof(float));
}
BENCHMARK(BM_LearnedPositionsForward)->Apply(transformer_sizes);

void BM_LearnedPositionsBackward(benchmark::State& state) {
  const Index rows = state.range(0), d = state.range(1);
  View2<float> dy("dy", rows, d), dtable("dtable", rows, d);
  fill(dy, 1);
  for (auto _ : state) {
    ops::learned_positions_backward<float>(dy, rows, 0, dtable);
    Kokkos::fence();
  }
  set_bytes(state, 3.0 * rows * d * sizeof(float));
}
BENCHMARK(BM_LearnedPositionsBackward)->Apply(transformer_sizes);

// Output projection + label-smoothed cross-entropy, forward and backward, in chunks
// of 1024 rows: three [rows, d] x [d, vocab] products (logits, dh, dW).
void BM_CrossEntropyForwardBackward(benchmark::State& state, Index vocab) {
  const Index rows = state.range(0), d = state.range(1);
  View2<float> h("h", rows, d), w("w", d, vocab), dh("dh", rows, d), dw("dw", d, vocab);
  View1<float> b("b", vocab), db("db", vocab);
  View1<int> targets("targets", rows);
  fill(h, 1);
  fill(w, 2);
  fill_ids(targets, vocab, 3);
  ops::CrossEntropyOptions options;
  options.pad_id = 0;
  options.smoothing = 0.1;
  options.chunk_rows = 1024;
  for (auto _ : state) {
    auto result = ops::cross_entropy_forward_backward<float>(h, w, b, targets, options, dh, dw, db);
    benchmark::DoNotOptimize(result);
    Kokkos::fence();
  }
  state.counters["GFLOP/s"] = benchmark::Counter(6.0 * rows * d * vocab * state.iterations() / 1e9,
                                                 benchmark::Counter::kIsRate);
}
// At vocab 32000 one iteration costs 6 * rows * d * 32000 flops (about 1.6 s at 4096 x 256
// on 2 cores), so only the smallest transformer size is run.
BENCHMARK_CAPTURE(BM_CrossEntropyForwardBackward, vocab256, Index(256))->Apply(transformer_sizes);
BENCHMARK_CAPTURE(BM_CrossEntropyForwardBackward, vocab32000, Index(32000))
    ->Args({4096, 256})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// The parameters of `layers` Reformer layers of width d: shared query/key, value and
// output projections [d, d], a feed-forward block [d, 4d] -> [4d, d] with biases, and
// two layer norms. 11 d^2 + 9 d elements per layer.
ParameterSet<float> transformer_parameters(Index d, int layers) {
  ParameterSet<float> params;
  for (int l = 0; l < layers; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    for (const char* name : {"attn.w_qk", "attn.w_v", "attn.w_o"}) params.add(p + name, {d, d});
    params.add(p + "ff.w1", {d, 4 * d});
    params.add(p + "ff.b1", {4 * d});
    params.add(p + "ff.w2", {4 * d, d});
    params.add(p + "ff.b2", {d});
    for (const char* name : {"ln1.gamma", "ln1.beta", "ln2.gamma", "ln2.beta"})
      params.add(p + name, {d});
  }
  std::uint64_t seed = 1;
  for (auto& param : params) {
    fill(param.value, seed++);
    fill(param.grad, seed++);
  }
  return params;
}

constexpr int kBenchLayers = 6;

void parameter_sizes(benchmark::internal::Benchmark* b) {
  for (int d : {256, 512, 1024}) b->Arg(d);
  b->Unit(benchmark::kMillisecond)->UseRealTime();
}

// One AdamW step over 6 layers: per element p, g, m, v read and p, m, v written.
void BM_AdamStep(benchmark::State& state) {
  auto params = transformer_parameters(state.range(0), kBenchLayers);
  train::AdamConfig config;
  config.weight_decay = 0.01;
  config.decoupled_weight_decay = true;
  train::Adam<float> adam(params, config);
  for (auto _ : state) {
    adam.step(1e-4);
    Kokkos::fence();
  }
  state.counters["params"] = double(params.total_elements());
  set_bytes(state, 7.0 * params.total_elements() * sizeof(float));
}
BENCHMARK(BM_AdamStep)->Apply(parameter_sizes);

// Global-norm clipping over 6 layers with a max_norm below the norm, so that every
// iteration reads every gradient (norm) and rescales it; the gradients are restored
// outside the timed region.
void BM_ClipGradNorm(benchmark::State& state) {
  auto params = transformer_parameters(state.range(0), kBenchLayers);
  std::vector<View1<float>> saved;
  for (const auto& param : params) {
    saved.emplace_back("saved_grad", param.grad.extent(0));
    Kokkos::deep_copy(saved.back(), param.grad);
  }
  const double max_norm = 0.5 * train::global_grad_norm(params);
  for (auto _ : state) {
    benchmark::DoNotOptimize(train::clip_grad_norm(params, max_norm));
    Kokkos::fence();
    state.PauseTiming();
    size_t i = 0;
    for (auto& param : params) Kokkos::deep_copy(param.grad, saved[i++]);
    Kokkos::fence();
    state.ResumeTiming();
  }
  state.counters["params"] = double(params.total_elements());
  set_bytes(state, 3.0 * params.total_elements() * sizeof(float));
}
BENCHMARK(BM_ClipGradNorm)->Apply(parameter_sizes);

}  // namespace
}  // namespace reformer
