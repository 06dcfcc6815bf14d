// A whole training step of the Reformer language model: forward, backward and
// the Adam update, float, batch 1, d_model 256 (4 heads of 64), d_ff 512 in
// chunks of 1024 positions, vocabulary 256, LSH with 2 hashes (chunk 64),
// loss in chunks of 1024 rows.
//   BM_TrainStep/L/layers/reversible/kind: kind 0 = LSH, 1 = full, 2 = local;
//   reversible 1 = reversible blocks, 0 = the same network with stored activations.
// Counters: tokens_per_s; peak_MiB = the memory tracker's peak during the step
// above what was allocated before it (parameters, gradients, Adam moments and
// the ids are allocated beforehand and excluded); params_MiB = those.
// State and workspace are reused after a warm-up step, as in training.
#include "reformer/core/memory_tracker.hpp"
#include "reformer/models/reformer_lm.hpp"
#include "reformer/train/optimizer.hpp"

#include <benchmark/benchmark.h>

namespace reformer {
namespace {

using attention::AttentionKind;

models::ReformerConfig step_config(Index length, Index layers, bool reversible, int kind) {
  models::ReformerConfig c;
  c.vocab = 256;
  c.d_model = 256;
  c.d_ff = 512;
  c.heads = 4;
  c.d_head = 64;
  c.layers = layers;
  c.attention = {kind == 0   ? AttentionKind::Lsh
                 : kind == 1 ? AttentionKind::Full
                             : AttentionKind::Local};
  c.reversible = reversible;
  c.positions = models::PositionKind::Axial;
  c.max_length = length;
  c.ff_chunk = 1024;
  c.loss_chunk = 1024;
  c.lsh.chunk = 64;
  c.lsh.n_hashes = 2;
  c.local.chunk = 128;
  return c;
}

void BM_TrainStep(benchmark::State& bench) {
  const Index length = bench.range(0), layers = bench.range(1);
  const bool reversible = bench.range(2) != 0;
  const int kind = int(bench.range(3));
  auto& tracker = MemoryTracker::instance();
  tracker.install();
  const auto base = tracker.space("Host").current_bytes;
  ParameterSet<float> params;
  models::ReformerLM<float> model(step_config(length, layers, reversible, kind), params);
  model.init({1, 1});
  train::Adam<float> adam(params);
  Kokkos::View<int**, Layout, MemSpace> ids("ids", 1, length), targets("targets", 1, length);
  Kokkos::parallel_for(
      "bench_ids", range(length), KOKKOS_LAMBDA(Index i) {
        ids(0, i) = int(random_bits({1, 1}, i) % 256);
        targets(0, i) = int(random_bits({1, 2}, i) % 256);
      });
  models::ReformerState<float> state;
  auto step = [&](std::uint64_t n) {
    params.zero_grad();
    model.forward_backward(ids, targets, -1, {{7, n}, true}, state);
    adam.step(1e-4);
    Kokkos::fence();
  };
  const auto before = tracker.space("Host").current_bytes;
  tracker.reset_peaks();
  step(0);
  const double peak = double(tracker.space("Host").peak_bytes - before);
  std::uint64_t n = 1;
  for (auto _ : bench) step(n++);
  bench.counters["tokens_per_s"] =
      benchmark::Counter(double(length), benchmark::Counter::kIsIterationInvariantRate);
  bench.counters["peak_MiB"] = peak / (1 << 20);
  bench.counters["params_MiB"] = double(before - base) / (1 << 20);
}

BENCHMARK(BM_TrainStep)
    ->ArgNames({"L", "layers", "rev", "kind"})
    ->Args({4096, 2, 1, 0})
    ->Args({4096, 6, 1, 0})
    ->Args({4096, 12, 1, 0})
    ->Args({4096, 2, 0, 0})
    ->Args({4096, 6, 0, 0})
    ->Args({4096, 12, 0, 0})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->Iterations(2);

}  // namespace
}  // namespace reformer
