// Decoding speed of the encoder-decoder Transformer: greedy decoding with
// key/value caches (models::EncoderDecoder::decode_step: one position per
// layer and step) against decoding by rerunning the decoder on the whole prefix
// at every step (the encoder runs once in both), float, 8 sources of 64 tokens,
// d_model 256, 4 heads of 64, d_ff 1024, 3 + 3 layers, vocabulary 512.
//   BM_Decode/cached:C/L:L  C = 1 cached, 0 rerun; L target tokens generated
// Counter: tokens_per_s (generated tokens of all 8 sequences per second).
//
// Generation speed of the Reformer language model (issue 20) at model length
// L: one prompt of L - 16 tokens, then 16 new tokens, float, d_model 256, 4
// heads of 64, d_ff 512, 4 layers alternating local (chunk 64) and LSH (chunk
// 64, 2 rounds, 2L/64 buckets), axial positions, reversible.
//   BM_LmGenerate/cached:1/L: the 16 steps with caches (the prompt's forward
//     pass, which fills them, is not timed);
//   BM_LmGenerate/cached:0/L: rerunning the model on the prefix (L - 16 + t
//     tokens) for each of the 16 tokens.
// Both run their work once untimed first (a generation of 2 tokens; one
// rerun), so that the timed tokens are a long generation's: on a GPU the
// first call of each kernel and each vendor product shape pays for loading
// it, and the one-row products of the cached steps have shapes that the
// prompt's forward pass does not warm.
// Counter: tokens_per_s.
//
// Cached generation of Transformer-XL (TransformerXL::generation_step) with a
// memory of M positions: segments of M, a prompt of one whole segment (its
// rows become the memory), then 64 tokens one at a time, each attending to
// the M memory rows and the new segment so far; float, d_model 256, 4 heads
// of 64, d_ff 1024, 4 layers, vocabulary 256, B sequences at once.
//   BM_XlGenerate/M:M/B:B  the 64 steps (the prompt is not timed)
// Counter: tokens_per_s (64 B tokens over the 64 steps' time).
//
// One cached LSH step alone (attention::lsh_attention_step, issue 31): the
// query at position L - 1 over a cache of L positions, float, 4 heads of 64,
// chunk 64, 2 rounds, 2L/64 buckets, random buckets, keys and values.
//   BM_LshStep/L:L
#include "reformer/attention/lsh.hpp"
#include "reformer/core/memory_tracker.hpp"
#include "reformer/core/random.hpp"
#include "reformer/core/workspace.hpp"
#include "reformer/models/reformer_lm.hpp"
#include "reformer/models/transformer.hpp"
#include "reformer/models/transformer_xl.hpp"

#include <benchmark/benchmark.h>

namespace reformer {
namespace {

constexpr Index kBatch = 8, kSource = 64;

models::TransformerConfig decode_config(Index max_length) {
  models::TransformerConfig c;
  c.source_vocab = c.target_vocab = 512;
  c.d_model = 256;
  c.heads = 4;
  c.d_head = 64;
  c.d_ff = 1024;
  c.encoder_layers = c.decoder_layers = 3;
  c.max_length = max_length;
  c.dropout = 0;
  return c;
}

void BM_Decode(benchmark::State& bench) {
  const bool cached = bench.range(0) != 0;
  const Index length = bench.range(1), vocab = 512;
  ParameterSet<float> params;
  models::EncoderDecoder<float> model(decode_config(length), params);
  model.init({1, 1});
  Kokkos::View<int**, Layout, MemSpace> source("source", kBatch, kSource);
  Kokkos::View<int**, Layout, MemSpace> valid("valid", kBatch, kSource);
  Kokkos::deep_copy(valid, 1);
  Kokkos::parallel_for(
      "bench_source", Kokkos::MDRangePolicy<ExecSpace, Kokkos::Rank<2>>({0, 0}, {kBatch, kSource}),
      KOKKOS_LAMBDA(Index b, Index j) {
        source(b, j) = int(3 + (b * 131 + j * 17) % (vocab - 3));
      });
  for (auto _ : bench) {
    if (cached) {
      // end id -1 never comes: every sequence runs to `length` tokens.
      models::DecodeCache<float> cache;
      model.start_decoding(source, valid, length, cache);
      Kokkos::View<int*, Layout, MemSpace> tokens("tokens", kBatch);
      View2<float> lp("lp", kBatch, vocab);
      Kokkos::deep_copy(tokens, 1);
      for (Index t = 0; t < length; ++t) model.decode_step(tokens, cache, lp);
    } else {
      models::TransformerState<float> state;
      for (Index t = 0; t < length; ++t) {
        Kokkos::View<int**, Layout, MemSpace> prefix("prefix", kBatch, t + 1);
        Kokkos::View<int**, Layout, MemSpace> ones("ones", kBatch, t + 1);
        Kokkos::deep_copy(prefix, 1);
        Kokkos::deep_copy(ones, 1);
        View3<float> lp("lp", kBatch, t + 1, vocab);
        model.log_probs({source, prefix, prefix, valid, ones}, lp, state, /*encode_source=*/t == 0);
      }
    }
    Kokkos::fence();
  }
  bench.counters["tokens_per_s"] =
      benchmark::Counter(double(kBatch * length), benchmark::Counter::kIsIterationInvariantRate);
}

BENCHMARK(BM_Decode)
    ->ArgNames({"cached", "L"})
    ->Args({1, 64})
    ->Args({0, 64})
    ->Args({1, 512})
    ->Args({0, 512})
    ->Unit(benchmark::kMillisecond)
    ->Iterations(1)
    ->Repetitions(3)
    ->ReportAggregatesOnly(true);

models::ReformerConfig generation_config(Index length) {
  models::ReformerConfig c;
  c.vocab = 256;
  c.d_model = 256;
  c.d_ff = 512;
  c.heads = 4;
  c.d_head = 64;
  c.layers = 4;
  c.attention = {attention::AttentionKind::Local, attention::AttentionKind::Lsh};
  c.max_length = length;
  c.lsh.chunk = 64;
  c.lsh.n_hashes = 2;
  c.lsh.n_buckets = attention::lsh_bucket_factors(c.lsh, length);
  c.local.chunk = 64;
  return c;
}

void BM_LmGenerate(benchmark::State& bench) {
  const bool cached = bench.range(0) != 0;
  const Index length = bench.range(1), prompt = length - 16, vocab = 256;
  ParameterSet<float> params;
  models::ReformerLM<float> model(generation_config(length), params);
  model.init({1, 1});
  models::ReformerState<float> state;
  Kokkos::View<int**, Layout, MemSpace> ids("ids", 1, length);
  Kokkos::parallel_for(
      "bench_ids", range(length), KOKKOS_LAMBDA(Index t) { ids(0, t) = int((t * 37) % vocab); });
  View2<float> logits("logits", 1, vocab);
  {
    // The untimed warm-up (see the top of the file).
    Kokkos::View<int**, Layout, MemSpace> warm("warm", 1, prompt + 1);
    Kokkos::deep_copy(warm,
                      Kokkos::subview(ids, Kokkos::ALL, Kokkos::make_pair(Index(0), prompt + 1)));
    if (cached) {
      models::ReformerGeneration<float> generation;
      model.start_generation(warm, {prompt}, length, {}, generation, logits, state);
      for (Index t = 0; t < 2; ++t) model.generation_step({int(t)}, generation, logits);
    } else {
      model.logits_at(warm, prompt, logits, state);
    }
    Kokkos::fence();
  }
  for (auto _ : bench) {
    if (cached) {
      bench.PauseTiming();
      models::ReformerGeneration<float> generation;
      const auto head = Kokkos::subview(ids, Kokkos::ALL, Kokkos::make_pair(Index(0), prompt));
      Kokkos::View<int**, Layout, MemSpace> first("first", 1, prompt);
      Kokkos::deep_copy(first, head);
      model.start_generation(first, {prompt}, length, {}, generation, logits, state);
      Kokkos::fence();
      bench.ResumeTiming();
      for (Index t = 0; t < 16; ++t) model.generation_step({int(t % vocab)}, generation, logits);
    } else {
      for (Index t = 0; t < 16; ++t) {
        Kokkos::View<int**, Layout, MemSpace> prefix("prefix", 1, prompt + t + 1);
        Kokkos::deep_copy(
            prefix, Kokkos::subview(ids, Kokkos::ALL, Kokkos::make_pair(Index(0), prompt + t + 1)));
        model.logits_at(prefix, prompt + t, logits, state);
      }
    }
    Kokkos::fence();
  }
  bench.counters["tokens_per_s"] =
      benchmark::Counter(16.0, benchmark::Counter::kIsIterationInvariantRate);
}

BENCHMARK(BM_LmGenerate)
    ->ArgNames({"cached", "L"})
    ->Args({1, 4096})
    ->Args({0, 4096})
    ->Args({1, 65536})
    ->Args({0, 65536})
    ->Unit(benchmark::kMillisecond)
    ->Iterations(1);

void BM_XlGenerate(benchmark::State& bench) {
  const Index memory = bench.range(0), batch = bench.range(1), steps = 64, vocab = 256;
  models::TransformerXLConfig c;
  c.vocab = vocab;
  c.d_model = 256;
  c.heads = 4;
  c.d_head = 64;
  c.d_ff = 1024;
  c.layers = 4;
  ParameterSet<float> params;
  models::TransformerXL<float> model(c, params);
  model.init({1, 1});
  // The prompt, then the steps' tokens as rows [batch, 1] of one
  // [steps * batch, 1] view.
  Kokkos::View<int**, Layout, MemSpace> prompt("prompt", batch, memory),
      tokens("tokens", steps * batch, 1);
  Kokkos::parallel_for(
      "bench_ids", range(memory), KOKKOS_LAMBDA(Index t) {
        for (Index b = 0; b < batch; ++b) {
          prompt(b, t) = int((t * 37 + b * 5) % vocab);
          if (t < steps) tokens(t * batch + b, 0) = int((t * 11 + b * 3) % vocab);
        }
      });
  View2<float> logits("logits", batch, vocab);
  for (auto _ : bench) {
    bench.PauseTiming();
    models::TransformerXLMemory<float> start;
    start.mem_len = memory;
    models::TransformerXLGeneration<float> generation;
    model.start_generation(batch, memory, start, generation);
    model.generation_step(prompt, generation, logits);
    Kokkos::fence();
    bench.ResumeTiming();
    for (Index t = 0; t < steps; ++t)
      model.generation_step(
          Kokkos::subview(tokens, Kokkos::make_pair(t * batch, (t + 1) * batch), Kokkos::ALL),
          generation, logits);
    Kokkos::fence();
  }
  bench.counters["tokens_per_s"] =
      benchmark::Counter(double(steps * batch), benchmark::Counter::kIsIterationInvariantRate);
}

BENCHMARK(BM_XlGenerate)
    ->ArgNames({"M", "B"})
    ->Args({512, 1})
    ->Args({2048, 1})
    ->Args({512, 4})
    ->Args({2048, 4})
    ->Unit(benchmark::kMillisecond)
    ->Iterations(1)
    ->Repetitions(3)
    ->ReportAggregatesOnly(true);

// Standard normal values in every element of a float view (a free function:
// nvcc accepts no device lambda inside a generic lambda).
void fill_normal(const View3<float>& view, std::uint64_t seed) {
  auto flat = Kokkos::View<float*, Layout, MemSpace>(view.data(), view.size());
  Kokkos::parallel_for(
      "bench_fill", range(flat.extent(0)), KOKKOS_LAMBDA(Index i) {
        flat(i) = float(random_normal({seed, 1}, i));
      });
}

void BM_LshStep(benchmark::State& bench) {
  const Index length = bench.range(0), heads = 4, dh = 64;
  attention::LshAttentionConfig config;
  config.chunk = 64;
  config.n_hashes = 2;
  config.n_buckets = attention::lsh_bucket_factors(config, length);
  const int n_buckets = int(attention::lsh_bucket_count(config, length));
  View3<float> q("q", 1, heads, dh), keys("keys", 1, length, heads * dh),
      values("values", 1, length, heads * dh), out("out", 1, heads, dh);
  Kokkos::View<int***, Layout, MemSpace> buckets("buckets", heads, config.n_hashes, length);
  fill_normal(q, 1);
  fill_normal(keys, 2);
  fill_normal(values, 3);
  auto flat = Kokkos::View<int*, Layout, MemSpace>(buckets.data(), buckets.size());
  Kokkos::parallel_for(
      "bench_buckets", range(flat.extent(0)), KOKKOS_LAMBDA(Index i) {
        flat(i) = int(random_uniform({4, 1}, i) * n_buckets) % n_buckets;
      });
  Kokkos::View<Index*, Layout, MemSpace> positions("positions", 1);
  Kokkos::deep_copy(positions, length - 1);
  Workspace workspace;
  for (auto _ : bench) {
    attention::lsh_attention_step<float>(q, keys, values, buckets, positions, length - 1, config,
                                         out, workspace);
    Kokkos::fence();
  }
}

BENCHMARK(BM_LshStep)->ArgName("L")->Arg(4096)->Arg(65536)->Unit(benchmark::kMicrosecond);

// Issue 31, item 3: our kernel launches and device allocations (from the
// second step on) per cached generation step (one token for every row) of a small LM
// (generation_config at max_length 128), prompts of 8 tokens, 64 steps; by rows and position kind
// (0 axial, 1 learned, 2 sinusoidal). Kokkos' copies, fills and View initialisation not counted.
void BM_LmGenerateLaunches(benchmark::State& bench) {
  const Index rows = bench.range(0), prompt = 8, steps = 64, length = 128, vocab = 256;
  const models::PositionKind kinds[] = {models::PositionKind::Axial, models::PositionKind::Learned,
                                        models::PositionKind::Sinusoidal};
  auto config = generation_config(length);
  config.positions = kinds[bench.range(1)];
  ParameterSet<float> params;
  models::ReformerLM<float> model(config, params);
  model.init({1, 1});
  models::ReformerState<float> state;
  Kokkos::View<int**, Layout, MemSpace> ids("ids", rows, prompt);
  Kokkos::parallel_for(
      "bench_ids", range(rows * prompt),
      KOKKOS_LAMBDA(Index i) { ids(i / prompt, i % prompt) = int((i * 37) % vocab); });
  View2<float> logits("logits", rows, vocab);
  auto& tracker = MemoryTracker::instance();
  tracker.install();
  double per_token = 0, allocations_per_token = 0;
  for (auto _ : bench) {
    models::ReformerGeneration<float> generation;
    model.start_generation(ids, std::vector<Index>(std::size_t(rows), prompt), prompt + steps, {},
                           generation, logits, state);
    Kokkos::fence();
    const std::int64_t before = tracker.launches().ours();
    std::int64_t allocations_before = 0;
    for (Index t = 0; t < steps; ++t) {
      // Allocations counted from the second step on: the first one sizes the
      // generation's workspace.
      if (t == 1) allocations_before = tracker.space(MemSpace::name()).allocations;
      model.generation_step(std::vector<int>(std::size_t(rows), int(t % vocab)), generation,
                            logits);
    }
    Kokkos::fence();
    per_token = double(tracker.launches().ours() - before) / double(steps);
    allocations_per_token =
        double(tracker.space(MemSpace::name()).allocations - allocations_before) /
        double(steps - 1);
  }
  bench.counters["launches_per_token"] = per_token;
  bench.counters["allocations_per_token"] = allocations_per_token;
  bench.counters["tokens_per_s"] =
      benchmark::Counter(double(steps * rows), benchmark::Counter::kIsIterationInvariantRate);
}

BENCHMARK(BM_LmGenerateLaunches)
    ->ArgNames({"rows", "positions"})
    ->Args({1, 0})
    ->Args({8, 0})
    ->Args({8, 1})
    ->Args({8, 2})
    ->Unit(benchmark::kMillisecond)
    ->Iterations(1);

}  // namespace
}  // namespace reformer
