// Decoding speed of the encoder-decoder Transformer: greedy decoding with
// key/value caches (models::EncoderDecoder::decode_step: one position per
// layer and step) against decoding by rerunning the decoder on the whole prefix
// at every step (the encoder runs once in both), float, 8 sources of 64 tokens,
// d_model 256, 4 heads of 64, d_ff 1024, 3 + 3 layers, vocabulary 512.
//   BM_Decode/cached:C/L:L  C = 1 cached, 0 rerun; L target tokens generated
// Counter: tokens_per_s (generated tokens of all 8 sequences per second).
#include "reformer/models/transformer.hpp"

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

}  // namespace
}  // namespace reformer
