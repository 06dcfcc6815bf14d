// A whole training step of the Reformer language model and its variants:
// forward, loss, backward and the Adam update, float, batch 1, on the base model
// of `reformer memory` (train::sweep_base_model(): d_model 256, 4 heads of 64,
// d_ff 1024, vocabulary 256, LSH chunk 64 with 2 hashes, local chunk 128,
// feed-forward and loss in chunks of 1024) turned into a variant by
// train::variant_config, exactly as the sweep does.
//   BM_TrainStep/variant:V/L:L/layers:N, V indexes train::sweep_variant_names()
//   (0 full, 1 full-rev, 2 lsh-1, 3 lsh-2, 4 lsh-4, 5 lsh-8, 6 local, 7 exact,
//   8 exact-rev, 9 reformer); the label names the variant.
// Counters: tokens_per_s; peak_MiB = the memory tracker's peak during a
// steady-state step (the second) above what was allocated before the first (the
// parameters, their gradients, the Adam moments and the ids: state_MiB), as
// `reformer memory` measures it. State and workspace are reused after the
// warm-up step, as in training.
// JSON: bench_model --benchmark_format=json (or --benchmark_out=FILE
// --benchmark_out_format=json); `reformer memory` runs the same step with the
// per-phase peaks and the prediction beside them.
#include "reformer/config/run_config.hpp"
#include "reformer/core/memory_tracker.hpp"
#include "reformer/train/memory_sweep.hpp"
#include "reformer/train/synthetic_step.hpp"

#include <benchmark/benchmark.h>

namespace reformer {
namespace {

void BM_TrainStep(benchmark::State& bench) {
  const auto& variant = train::sweep_variant_names().at(std::size_t(bench.range(0)));
  const Index length = bench.range(1), layers = bench.range(2);
  auto base = config::parse_model_config(train::sweep_base_model(), "bench_model",
                                         {"model.layers=" + std::to_string(layers)});
  const auto config = train::variant_config(variant, base, length);
  auto& tracker = MemoryTracker::instance();
  tracker.install();
  const auto base_bytes = tracker.space(MemSpace::name()).current_bytes;
  train::SyntheticStep<float> synthetic(config, 1, length);
  const auto before = tracker.space(MemSpace::name()).current_bytes;
  synthetic.run(0);  // warm-up: state and workspace grow to their sizes
  tracker.reset_peaks();
  synthetic.run(1);
  const double peak = double(tracker.space(MemSpace::name()).peak_bytes - before);
  std::uint64_t n = 2;
  for (auto _ : bench) synthetic.run(n++);
  bench.SetLabel(variant);
  bench.counters["tokens_per_s"] =
      benchmark::Counter(double(length), benchmark::Counter::kIsIterationInvariantRate);
  bench.counters["peak_MiB"] = peak / (1 << 20);
  bench.counters["state_MiB"] = double(before - base_bytes) / (1 << 20);
}

// Every variant at 4096 positions (2 layers); the Reformer (variant 9)
// at 16K with 6 layers and at 4096 with 2, 6 and 12 layers; LSH-2 stored at 16K.
void step_arguments(benchmark::internal::Benchmark* b) {
  for (int v = 0; v < int(train::sweep_variant_names().size()); ++v) b->Args({v, 4096, 2});
  b->Args({9, 4096, 6})->Args({9, 4096, 12})->Args({9, 16384, 6})->Args({3, 16384, 6});
}

BENCHMARK(BM_TrainStep)
    ->ArgNames({"variant", "L", "layers"})
    ->Apply(step_arguments)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->Iterations(2);

}  // namespace
}  // namespace reformer
