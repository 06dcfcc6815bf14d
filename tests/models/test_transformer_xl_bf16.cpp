// Transformer-XL with bf16 activations and memories (train.precision = "bf16")
// against the float32 model on the same float32 parameters, over a stream of
// segments (the second and third read the memories the first left), pre- and
// post-LN, with dropout and clamp_len. As for the other bf16 models
// (test_reformer_lm_bf16.cpp), each layer adds a few bf16 roundings (u = 2^-8)
// to its stream, and a memory carries them on to the next segment once: with
// L = 2 layers and S = 3 segments, the loss is within 4 L S u and the
// gradients within 8 L S u (norm-wise) of float32's, every parameter's
// gradient points the same way, and each memory row is within 4 L S u of
// float32's (norm-wise, it holds a layer's input).
#include "reformer/models/transformer_xl.hpp"
#include "support/bf16_checks.hpp"
#include "support/checks.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

namespace reformer {
namespace {

using namespace reformer::testing;
using models::ModelCall;
using models::TransformerXL;
using models::TransformerXLConfig;
using models::TransformerXLMemory;
using models::TransformerXLState;

TransformerXLConfig config_of(bool pre_norm) {
  TransformerXLConfig c;
  c.vocab = 50;
  c.d_model = 64;
  c.d_ff = 128;
  c.heads = 2;
  c.d_head = 32;
  c.layers = 2;
  c.clamp_len = 40;
  c.pre_norm = pre_norm;
  c.dropout = 0.1;
  c.attention_dropout = 0.1;
  c.label_smoothing = 0.1;
  c.ff_chunk = 24;
  c.loss_chunk = 50;
  return c;
}

// Every layer's memory, one after the other (bf16 widens exactly).
template <class T>
std::vector<double> memory_values(const TransformerXLMemory<T>& m) {
  std::vector<double> out;
  for (const auto& h : m.hidden) {
    const auto v = to_host(h);
    out.insert(out.end(), v.begin(), v.end());
  }
  return out;
}

TEST(TransformerXLBf16, LossGradientsAndMemoriesFollowFloat32) {
  const Index batch = 2, length = 48, segments = 3;
  for (bool pre_norm : {false, true}) {
    const auto config = config_of(pre_norm);
    const std::string what = pre_norm ? "pre-LN" : "post-LN";
    ParameterSet<float> p32, p16;
    TransformerXL<float> m32(config, p32);
    TransformerXL<bf16> m16(config, p16);
    m32.init({11, 2});
    Kokkos::deep_copy(p16.values(), p32.values());
    TransformerXLMemory<float> mem32;
    TransformerXLMemory<bf16> mem16;
    mem32.mem_len = mem16.mem_len = 40;
    TransformerXLState<float> s32;
    TransformerXLState<bf16> s16;
    const double L = double(config.layers), u = kBf16Unit, S = double(segments);
    for (Index s = 0; s < segments; ++s) {
      const auto ids = random_ids(batch, length, config.vocab, 100 + std::uint64_t(s));
      const auto targets = random_ids(batch, length, config.vocab, 200 + std::uint64_t(s));
      const ModelCall call{{5, std::uint64_t(s)}, true};
      p32.zero_grad();
      p16.zero_grad();
      const auto r32 = m32.forward_backward(ids, targets, -1, call, mem32, s32);
      const auto r16 = m16.forward_backward(ids, targets, -1, call, mem16, s16);
      const std::string at = what + " segment " + std::to_string(s);
      EXPECT_EQ(r16.tokens, r32.tokens) << at;
      EXPECT_LT(std::fabs(r16.loss - r32.loss), 4 * L * S * u * std::fabs(r32.loss)) << at;
      const auto g32 = to_host(p32.grads()), g16 = to_host(p16.grads());
      EXPECT_LT(relative_error(g16, g32), 8 * L * S * u) << at;
      for (const auto& p : p16)
        EXPECT_GT(cosine(to_host(p.grad), to_host(p32.get(p.name).grad)), 0.95)
            << at << " " << p.name;
      ASSERT_EQ(mem16.length(), mem32.length()) << at;
      EXPECT_LT(relative_error(memory_values(mem16), memory_values(mem32)), 4 * L * S * u) << at;
    }
    // Evaluation over the memories training left, with a longer memory.
    mem32.mem_len = mem16.mem_len = 60;
    const auto ids = random_ids(batch, length, config.vocab, 300);
    const auto targets = random_ids(batch, length, config.vocab, 301);
    const ModelCall eval{{5, 9}, false};
    const double e32 = m32.evaluate(ids, targets, -1, eval, mem32, s32).loss;
    const double e16 = m16.evaluate(ids, targets, -1, eval, mem16, s16).loss;
    EXPECT_LT(std::fabs(e16 - e32), 4 * L * (S + 1) * u * std::fabs(e32)) << what;
    EXPECT_EQ(mem16.length(), mem32.length()) << what;
  }
}

// The bf16 memory is what forward leaves in the layers' bf16 context rows:
// its values are bf16 values that widen exactly, and a copy() equals it.
TEST(TransformerXLBf16, MemoryCopiesAreExact) {
  const auto config = config_of(true);
  ParameterSet<float> params;
  TransformerXL<bf16> model(config, params);
  model.init({3, 4});
  TransformerXLMemory<bf16> memory;
  memory.mem_len = 20;
  TransformerXLState<bf16> state;
  model.forward(random_ids(2, 16, config.vocab, 1), ModelCall{{1, 1}, false}, memory, state);
  ASSERT_EQ(memory.length(), 16);
  const auto copy = memory.copy();
  EXPECT_EQ(memory_values(copy), memory_values(memory));
  EXPECT_NE(copy.hidden[0].data(), memory.hidden[0].data());
}

}  // namespace
}  // namespace reformer
