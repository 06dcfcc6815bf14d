// The encoder-decoder with bf16 activations (train.precision = "bf16") against
// the float32 model on the same float32 parameters, stored and reversible. As
// for the language model (test_reformer_lm_bf16.cpp), each layer adds a few
// bf16 roundings (u = 2^-8) to its stream: with L = encoder + decoder layers,
// the loss is within 4 L u and the gradients within 8 L u (norm-wise) of
// float32's, and every parameter's gradient points the same way.
#include "reformer/models/transformer.hpp"
#include "support/bf16_checks.hpp"
#include "support/checks.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <string>

namespace reformer {
namespace {

using namespace reformer::testing;
using attention::AttentionKind;
using models::EncoderDecoder;
using models::TransformerConfig;

TransformerConfig config_of(AttentionKind encoder, AttentionKind decoder, AttentionKind cross,
                            bool reversible) {
  TransformerConfig c;
  c.source_vocab = 40;
  c.target_vocab = 30;
  c.d_model = 64;
  c.d_ff = 128;
  c.heads = 2;
  c.d_head = 32;
  c.encoder_layers = 2;
  c.decoder_layers = 2;
  c.max_length = 64;
  c.encoder_attention = encoder;
  c.decoder_attention = decoder;
  c.cross_attention = cross;
  c.dropout = 0.1;
  c.attention_dropout = 0.1;
  c.label_smoothing = 0.1;
  c.ff_chunk = 24;
  c.loss_chunk = 50;
  c.local.chunk = 16;
  c.reversible = reversible;
  return c;
}

// Token ids in [3, vocab) (0, 1, 2 are padding, start and end). A free
// function: nvcc refuses device lambdas in a test's body.
View2<int> symbol_ids(Index batch, Index length, Index vocab, std::uint64_t seed) {
  auto m = random_ids(batch, length, vocab - 3, seed);
  auto flat = as_vector(m);
  Kokkos::parallel_for(
      "shift_ids", range(flat.extent(0)), KOKKOS_LAMBDA(Index i) { flat(i) += 3; });
  return m;
}

TEST(EncoderDecoderBf16, LossAndGradientsFollowFloat32) {
  const Index batch = 2, length = 64;
  auto ids = [&](Index vocab, std::uint64_t seed) {
    return symbol_ids(batch, length, vocab, seed);
  };
  struct Kinds {
    AttentionKind encoder, decoder, cross;
  };
  for (const Kinds k : {Kinds{AttentionKind::Full, AttentionKind::Exact, AttentionKind::Full},
                        Kinds{AttentionKind::Local, AttentionKind::Full, AttentionKind::Exact}})
    for (bool reversible : {false, true}) {
      const auto config = config_of(k.encoder, k.decoder, k.cross, reversible);
      const std::string what = std::string(attention::to_string(k.encoder)) + "/" +
                               attention::to_string(k.decoder) + "/" +
                               attention::to_string(k.cross) + (reversible ? " reversible" : "");
      ParameterSet<float> p32, p16;
      EncoderDecoder<float> m32(config, p32);
      EncoderDecoder<bf16> m16(config, p16);
      m32.init({7, 1});
      Kokkos::deep_copy(p16.values(), p32.values());
      const auto source = ids(config.source_vocab, 1), target = ids(config.target_vocab, 2);
      // The second source padded after 50 tokens.
      View2<int> source_valid("source_valid", batch, length),
          target_valid("target_valid", batch, length);
      Kokkos::deep_copy(target_valid, 1);
      auto valid = Kokkos::create_mirror_view(source_valid);
      for (Index b = 0; b < batch; ++b)
        for (Index i = 0; i < length; ++i) valid(b, i) = b == 1 && i >= 50 ? 0 : 1;
      Kokkos::deep_copy(source_valid, valid);
      const models::Seq2SeqBatch pairs{source, target, ids(config.target_vocab, 3), source_valid,
                                       target_valid};
      models::TransformerState<float> s32;
      models::TransformerState<bf16> s16;
      const models::ModelCall call{{3, 5}, true};
      p32.zero_grad();
      p16.zero_grad();
      const auto r32 = m32.forward_backward(pairs, 0, call, s32);
      const auto r16 = m16.forward_backward(pairs, 0, call, s16);
      const double L = 4, u = kBf16Unit;
      EXPECT_EQ(r16.tokens, r32.tokens) << what;
      EXPECT_LT(std::fabs(r16.loss - r32.loss), 4 * L * u * std::fabs(r32.loss)) << what;
      const auto g32 = to_host(p32.grads()), g16 = to_host(p16.grads());
      EXPECT_LT(relative_error(g16, g32), 8 * L * u) << what;
      for (const auto& p : p16)
        EXPECT_GT(cosine(to_host(p.grad), to_host(p32.get(p.name).grad)), 0.95)
            << what << " " << p.name;
      const models::ModelCall eval{{3, 5}, false};
      const double e32 = m32.evaluate(pairs, 0, eval, s32).loss;
      const double e16 = m16.evaluate(pairs, 0, eval, s16).loss;
      EXPECT_LT(std::fabs(e16 - e32), 4 * L * u * std::fabs(e32)) << what;
    }
}

}  // namespace
}  // namespace reformer
