// Forward + backward time and measured peak memory of the attention variants on
// the same inputs: d_model 256 as 4 heads of 64, batch 1, causal, float.
//   BM_AttentionLayer/kind/L: the whole layer (projections included; kind 0
//   full, 1 LSH with 2 hashes, 2 local, 3 exact), state and workspace reused after a
//   warm-up step; peak_MiB counts everything above x, dy and the parameters
//   (y, dx, the saved state and the workspace included).
//   BM_LshSort/L: the counting sort alone (buckets from one hashing, 2 hashes).
//   BM_FullAttention/L, BM_LshAttention/L/n_hashes (chunk 64, 2 * L / 64 buckets
//   per round, factorised into two factors so that hashing stays O(L)),
//   BM_LocalAttention/L (chunk 128, one chunk back),
//   BM_ExactAttention/L (exact attention in O(L) memory, tiles from TileTraits).
//   BM_RelativeAttention/L (Transformer-XL's relative attention: a segment of L
//   queries over a memory of L and the segment, 2L keys, as in training with
//   mem_len = tgt_len; r for the 2L distances, no clamping).
// Time is the best of 3 runs up to L = 16384 and of 2 beyond (the first run at a
// new size also pays for first touching its memory).
// Counters: us_per_token (time / L in microseconds), peak_MiB (memory tracker: the peak of
// the attention's own buffers above the inputs and gradients, which are
// allocated beforehand and total 8 * L * 256 floats).
#include "reformer/attention/attention_layer.hpp"
#include "reformer/attention/exact.hpp"
#include "reformer/attention/full.hpp"
#include "reformer/attention/local.hpp"
#include "reformer/attention/lsh.hpp"
#include "reformer/attention/relative.hpp"
#include "reformer/core/error.hpp"
#include "reformer/core/memory_tracker.hpp"
#include "reformer/core/parameter_set.hpp"
#include "reformer/core/shape.hpp"
#include "reformer/core/workspace.hpp"

#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>

namespace reformer {
namespace {

constexpr Index kHeads = 4, kHeadDim = 64;

// The LSH configuration of every case: chunk 64 and n_buckets = 2 * L / 64 (the
// trax rule), factorised as b1 * b2 with b1 <= b2 powers of two, so that the
// rotations are b1 / 2 + b2 / 2 wide instead of n_buckets / 2.
attention::LshAttentionConfig lsh_config(Index length, Index n_hashes) {
  attention::LshAttentionConfig config;
  config.chunk = 64;
  config.n_hashes = n_hashes;
  const Index buckets = 2 * std::max<Index>(1, length / config.chunk);
  Index b1 = 2;
  while (b1 * b1 * 2 <= buckets) b1 *= 2;
  config.n_buckets = {b1, buckets / b1};
  return config;
}

void fill(View4<float> t, std::uint64_t seed) {
  auto flat = as_vector(t);
  Kokkos::parallel_for(
      "bench_fill", range(flat.extent(0)), KOKKOS_LAMBDA(Index i) {
        flat(i) = float(random_uniform({seed, 3}, i) - 0.5);
      });
  Kokkos::fence();
}

struct Tensors {
  View4<float> q, k, v, out, dout, dq, dk, dv;
  explicit Tensors(Index length)
      : q("q", 1, length, kHeads, kHeadDim),
        k("k", 1, length, kHeads, kHeadDim),
        v("v", 1, length, kHeads, kHeadDim),
        out("out", 1, length, kHeads, kHeadDim),
        dout("dout", 1, length, kHeads, kHeadDim),
        dq("dq", 1, length, kHeads, kHeadDim),
        dk("dk", 1, length, kHeads, kHeadDim),
        dv("dv", 1, length, kHeads, kHeadDim) {
    fill(q, 11);
    fill(k, 12);
    fill(v, 13);
    fill(dout, 14);
  }
};

// Times `step` (forward + backward): the best of 3 runs up to 16K, of 2
// beyond. Records the tracker's peak above the memory in use before the step.
template <class Step>
void measure(benchmark::State& state, Index length, Step&& step, bool reset_peaks = true) {
  auto& tracker = MemoryTracker::instance();
  const std::string space = MemSpace::name();
  std::int64_t peak = 0;
  double seconds = 0;
  const int runs = length <= 16384 ? 3 : 2;
  try {
    for (auto _ : state) {
      double best = 1e300;
      for (int run = 0; run < runs; ++run) {
        if (reset_peaks) tracker.reset_peaks();
        const auto before = tracker.space(space).current_bytes;
        const auto start = std::chrono::steady_clock::now();
        step();
        Kokkos::fence();
        best = std::min(
            best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
        peak = std::max(peak, tracker.space(space).peak_bytes - before);
      }
      state.SetIterationTime(best);
      seconds = best;
    }
  } catch (const MemoryError& e) {
    state.SkipWithError(e.what());
    return;
  }
  state.counters["peak_MiB"] = double(peak) / (1 << 20);
  state.counters["us_per_token"] = seconds * 1e6 / double(length);
}

// The default causal call of the kernel benchmarks.
attention::AttentionCall causal_call() {
  attention::AttentionCall call;
  call.masks.causal = true;
  return call;
}

View4<float> lsh_rotations(const attention::LshAttentionConfig& config, Index length) {
  View4<float> rotations("rotations", kHeads, kHeadDim, config.n_hashes,
                         attention::lsh_rotation_width(config, length));
  attention::lsh_random_rotations<float>({1, 2}, rotations);
  return rotations;
}

void BM_FullAttention(benchmark::State& state) {
  const Index length = state.range(0);
  Tensors t(length);
  const attention::FullAttentionConfig config;
  const auto call = causal_call();
  Workspace workspace;
  measure(state, length, [&] {
    attention::FullAttentionSaved<float> saved;
    attention::full_attention_forward<float>(t.q, t.k, t.v, config, call, t.out, saved, workspace);
    attention::full_attention_backward<float>(t.q, t.k, t.v, saved, t.dout, config, call, t.dq,
                                              t.dk, t.dv, workspace);
  });
}

void BM_ExactAttention(benchmark::State& state) {
  const Index length = state.range(0);
  Tensors t(length);
  const attention::ExactAttentionConfig config;
  const auto call = causal_call();
  View3<float> lse("lse", 1, length, kHeads);
  Workspace workspace;
  measure(state, length, [&] {
    attention::exact_attention_forward<float>(t.q, t.k, t.v, config, call, t.out, lse, workspace);
    attention::exact_attention_backward<float>(t.q, t.k, t.v, t.out, lse, t.dout, config, call,
                                               t.dq, t.dk, t.dv, workspace);
  });
}

void BM_RelativeAttention(benchmark::State& state) {
  const Index length = state.range(0), memory = length, keys = memory + length;
  Tensors t(length);
  View4<float> k("k", 1, keys, kHeads, kHeadDim), v("v", 1, keys, kHeads, kHeadDim),
      dk("dk", 1, keys, kHeads, kHeadDim), dv("dv", 1, keys, kHeads, kHeadDim);
  fill(k, 12);
  fill(v, 13);
  const attention::RelativeAttentionConfig config;
  const Index positions = attention::relative_attention_positions(memory, length, config);
  View3<float> r("r", positions, kHeads, kHeadDim), dr("dr", positions, kHeads, kHeadDim);
  View2<float> u("u", kHeads, kHeadDim), bv("bv", kHeads, kHeadDim), du("du", kHeads, kHeadDim),
      dbv("dbv", kHeads, kHeadDim);
  View3<float> lse("lse", 1, length, kHeads);
  Workspace workspace;
  measure(state, length, [&] {
    attention::relative_attention_forward<float>(t.q, k, v, r, u, bv, config, {}, t.out, lse,
                                                 workspace);
    attention::relative_attention_backward<float>(t.q, k, v, r, u, bv, t.out, lse, t.dout, config,
                                                  {}, t.dq, dk, dv, dr, du, dbv, workspace);
  });
}

void BM_LshAttention(benchmark::State& state) {
  const Index length = state.range(0);
  Tensors t(length);
  const auto config = lsh_config(length, state.range(1));
  const auto call = causal_call();
  const auto rotations = lsh_rotations(config, length);
  Workspace workspace;
  measure(state, length, [&] {
    attention::LshPlan plan;
    View3<float> lse("lse", 1, length, kHeads);
    attention::lsh_build_plan<float>(t.q, rotations, config, call.masks, plan, workspace);
    attention::lsh_attention_forward<float>(t.q, t.v, plan, config, call, t.out, lse, workspace);
    attention::lsh_attention_backward<float>(t.q, t.v, plan, t.out, lse, t.dout, config, call, t.dq,
                                             t.dv, workspace);
  });
}

// The parts of LSH attention on their own: hashing + sorting, the sort, and the
// forward. BM_LshHashAndSort and BM_LshForward keep the rotations at zero, as
// they did before the layer-API change (every item lands in bucket 0, so the
// sort moves nothing), so that their timings stay comparable across revisions;
// BM_LshSort sorts the buckets of real random rotations.
void BM_LshHashAndSort(benchmark::State& state) {
  const Index length = state.range(0);
  Tensors t(length);
  const auto config = lsh_config(length, state.range(1));
  View4<float> rotations("rotations", kHeads, kHeadDim, config.n_hashes,
                         attention::lsh_rotation_width(config, length));
  attention::LshPlan plan;
  Workspace workspace;
  measure(state, length,
          [&] { attention::lsh_build_plan<float>(t.q, rotations, config, {}, plan, workspace); });
}

void BM_LshSort(benchmark::State& state) {
  const Index length = state.range(0);
  Tensors t(length);
  const auto config = lsh_config(length, 2);
  const auto rotations = lsh_rotations(config, length);
  attention::LshPlan plan;
  Workspace workspace;
  attention::lsh_build_plan<float>(t.q, rotations, config, {}, plan, workspace);
  measure(state, length, [&] { attention::lsh_sort_buckets(plan, workspace); });
}

void BM_LshForward(benchmark::State& state) {
  const Index length = state.range(0);
  Tensors t(length);
  const auto config = lsh_config(length, state.range(1));
  const auto call = causal_call();
  View4<float> rotations("rotations", kHeads, kHeadDim, config.n_hashes,
                         attention::lsh_rotation_width(config, length));
  attention::LshPlan plan;
  View3<float> lse("lse", 1, length, kHeads);
  Workspace workspace;
  measure(state, length, [&] {
    attention::lsh_build_plan<float>(t.q, rotations, config, call.masks, plan, workspace);
    attention::lsh_attention_forward<float>(t.q, t.v, plan, config, call, t.out, lse, workspace);
  });
}

void BM_LocalAttention(benchmark::State& state) {
  const Index length = state.range(0);
  Tensors t(length);
  attention::LocalAttentionConfig config;
  config.chunk = 128;
  const auto call = causal_call();
  Workspace workspace;
  measure(state, length, [&] {
    View3<float> lse("lse", 1, length, kHeads);
    attention::local_attention_forward<float>(t.q, t.k, t.v, config, call, t.out, lse);
    attention::local_attention_backward<float>(t.q, t.k, t.v, t.out, lse, t.dout, config, call,
                                               t.dq, t.dk, t.dv, workspace);
  });
}

// The whole layer as a model uses it: x [1, L, 256] -> y, then dx and the
// projection gradients; the state and the workspace are made by a warm-up step.
void BM_AttentionLayer(benchmark::State& state) {
  const auto kind = attention::AttentionKind(state.range(0));
  const Index length = state.range(1), d_model = kHeads * kHeadDim;
  attention::AttentionLayerConfig config;
  config.kind = kind;
  config.d_model = d_model;
  config.heads = kHeads;
  config.d_head = kHeadDim;
  config.lsh = lsh_config(length, 2);
  config.local.chunk = 128;
  ParameterSet<float> params;
  attention::AttentionLayer<float> layer("attn", config, params);
  layer.init({1, 1});
  View3<float> x("x", 1, length, d_model), dy("dy", 1, length, d_model);
  fill(View4<float>(x.data(), 1, length, kHeads, kHeadDim), 21);
  fill(View4<float>(dy.data(), 1, length, kHeads, kHeadDim), 22);
  auto& tracker = MemoryTracker::instance();
  const std::string space = MemSpace::name();
  Kokkos::fence();
  tracker.reset_peaks();
  const auto baseline = tracker.space(space).current_bytes;
  try {
    View3<float> y("y", 1, length, d_model), dx("dx", 1, length, d_model);
    attention::AttentionState<float> saved;
    Workspace workspace;
    std::uint64_t step = 0;
    auto run = [&] {
      layer.forward(x, y, {{7, ++step}, {}}, saved, workspace);
      layer.backward(x, dy, dx, saved, workspace);
    };
    run();  // warm-up: allocates the state and the workspace
    Kokkos::fence();
    measure(state, length, run, /*reset_peaks=*/false);
    state.counters["peak_MiB"] = double(tracker.space(space).peak_bytes - baseline) / (1 << 20);
  } catch (const MemoryError& e) {
    state.SkipWithError(e.what());
  }
}

constexpr int kLengths[] = {1024, 2048, 4096, 8192, 16384, 32768, 65536};

void full_cases(benchmark::internal::Benchmark* b) {
  for (int l : kLengths) b->Args({l});
}
void lsh_cases(benchmark::internal::Benchmark* b) {
  for (int hashes : {1, 2, 4, 8})
    for (int l : kLengths) b->Args({l, hashes});
}

BENCHMARK(BM_FullAttention)
    ->Apply(full_cases)
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond)
    ->UseManualTime();
BENCHMARK(BM_ExactAttention)
    ->Apply(full_cases)
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond)
    ->UseManualTime();
BENCHMARK(BM_RelativeAttention)
    ->Arg(1024)
    ->Arg(2048)
    ->Arg(4096)
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond)
    ->UseManualTime();
BENCHMARK(BM_LshAttention)
    ->Apply(lsh_cases)
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond)
    ->UseManualTime();
BENCHMARK(BM_LshHashAndSort)
    ->Apply(lsh_cases)
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond)
    ->UseManualTime();
BENCHMARK(BM_LshForward)
    ->Apply(lsh_cases)
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond)
    ->UseManualTime();
void layer_cases(benchmark::internal::Benchmark* b) {
  for (int kind : {0, 1, 2})
    for (int l : {1024, 4096, 16384}) b->Args({kind, l});
  // Exact attention also at the lengths of the PyTorch SDPA comparison.
  for (int l : {1024, 2048, 4096, 8192, 16384}) b->Args({3, l});
}
void sort_cases(benchmark::internal::Benchmark* b) {
  for (int l : {4096, 16384, 65536}) b->Args({l});
}

BENCHMARK(BM_AttentionLayer)
    ->Apply(layer_cases)
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond)
    ->UseManualTime();
BENCHMARK(BM_LshSort)
    ->Apply(sort_cases)
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond)
    ->UseManualTime();
BENCHMARK(BM_LocalAttention)
    ->Apply(full_cases)
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond)
    ->UseManualTime();

}  // namespace
}  // namespace reformer
