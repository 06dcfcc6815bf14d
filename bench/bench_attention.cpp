// Forward + backward time and measured peak memory of the attention variants on
// the same inputs: d_model 256 as 4 heads of 64, batch 1, causal, float.
//   BM_FullAttention/L, BM_LshAttention/L/n_hashes (chunk 64, 2 * L / 64 buckets
//   per round, factorised into two factors so that hashing stays O(L)),
//   BM_LocalAttention/L (chunk 128, one chunk back).
// Time is the best of 3 runs up to L = 16384 and of 2 beyond (the first run at a
// new size also pays for first touching its memory).
// Counters: us_per_token (time / L in microseconds), peak_MiB (memory tracker: the peak of
// the attention's own buffers above the inputs and gradients, which are
// allocated beforehand and total 8 * L * 256 floats).
#include "reformer/attention/full.hpp"
#include "reformer/attention/local.hpp"
#include "reformer/attention/lsh.hpp"
#include "reformer/core/error.hpp"
#include "reformer/core/memory_tracker.hpp"
#include "reformer/core/shape.hpp"

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
  config.masks.causal = true;
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
void measure(benchmark::State& state, Index length, Step&& step) {
  auto& tracker = MemoryTracker::instance();
  const std::string space = MemSpace::name();
  std::int64_t peak = 0;
  double seconds = 0;
  const int runs = length <= 16384 ? 3 : 2;
  try {
    for (auto _ : state) {
      double best = 1e300;
      for (int run = 0; run < runs; ++run) {
        tracker.reset_peaks();
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

void BM_FullAttention(benchmark::State& state) {
  const Index length = state.range(0);
  Tensors t(length);
  attention::FullAttentionConfig config;
  config.masks.causal = true;
  measure(state, length, [&] {
    attention::FullAttentionSaved<float> saved;
    attention::full_attention_forward<float>(t.q, t.k, t.v, config, t.out, saved);
    attention::full_attention_backward<float>(t.q, t.k, t.v, saved, t.dout, config, t.dq, t.dk,
                                              t.dv);
  });
}

void BM_LshAttention(benchmark::State& state) {
  const Index length = state.range(0);
  Tensors t(length);
  const auto config = lsh_config(length, state.range(1));
  View4<float> rotations("rotations", kHeads, kHeadDim, config.n_hashes,
                         attention::lsh_rotation_width(config, length));
  attention::lsh_random_rotations<float>({1, 2}, rotations);
  measure(state, length, [&] {
    attention::LshSaved<float> saved;
    attention::lsh_attention_forward<float>(t.q, t.v, rotations, config, t.out, saved);
    attention::lsh_attention_backward<float>(t.q, t.v, saved, t.dout, config, t.dq, t.dv);
  });
}

// The parts of LSH attention on their own: hashing + sorting, and the forward.
void BM_LshHashAndSort(benchmark::State& state) {
  const Index length = state.range(0);
  Tensors t(length);
  const auto config = lsh_config(length, state.range(1));
  View4<float> rotations("rotations", kHeads, kHeadDim, config.n_hashes,
                         attention::lsh_rotation_width(config, length));
  attention::LshSaved<float> saved;
  measure(state, length,
          [&] { attention::lsh_hash_and_sort<float>(t.q, rotations, config, saved); });
}

void BM_LshForward(benchmark::State& state) {
  const Index length = state.range(0);
  Tensors t(length);
  const auto config = lsh_config(length, state.range(1));
  View4<float> rotations("rotations", kHeads, kHeadDim, config.n_hashes,
                         attention::lsh_rotation_width(config, length));
  attention::LshSaved<float> saved;
  measure(state, length, [&] {
    attention::lsh_attention_forward<float>(t.q, t.v, rotations, config, t.out, saved);
  });
}

void BM_LocalAttention(benchmark::State& state) {
  const Index length = state.range(0);
  Tensors t(length);
  attention::LocalAttentionConfig config;
  config.chunk = 128;
  config.masks.causal = true;
  measure(state, length, [&] {
    View3<float> lse("lse", 1, length, kHeads);
    attention::local_attention_forward<float>(t.q, t.k, t.v, config, t.out, lse);
    attention::local_attention_backward<float>(t.q, t.k, t.v, t.out, lse, t.dout, config, t.dq,
                                               t.dk, t.dv);
  });
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
BENCHMARK(BM_LocalAttention)
    ->Apply(full_cases)
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond)
    ->UseManualTime();

}  // namespace
}  // namespace reformer
