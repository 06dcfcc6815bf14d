// Cached generation of the Transformer-XL language model
// (TransformerXL::start_generation / generation_step, issue 33):
//  - every step's logits equal a rerun of forward on the current segment's
//    ids so far over the segment's memory (the memory forward left after the
//    earlier segments), across segment boundaries, for memories longer and
//    shorter than a segment and none, clamp_len, same_length, pre- and
//    post-LN, tied output, a prompt fed in one call and then one token at a
//    time, batch 2, in double (1e-10) and float (1e-4);
//  - after a full segment the generation's memory is forward's;
//  - the first segment's logits are forward's at every position, and their
//    cross-entropy is evaluate's loss;
//  - bad input is a clear error.
#include "reformer/core/error.hpp"
#include "reformer/models/transformer_xl.hpp"
#include "support/checks.hpp"
#include "support/gradcheck.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

namespace reformer {
namespace {

using namespace reformer::testing;
using models::ModelCall;
using models::TransformerXL;
using models::TransformerXLConfig;
using models::TransformerXLGeneration;
using models::TransformerXLMemory;
using models::TransformerXLState;
using IdView = Kokkos::View<int**, Layout, MemSpace>;
using HostIds = Kokkos::View<int**, Layout, HostSpace>;

struct Variant {
  std::string name;
  Index mem_len, clamp_len;
  bool same_length, pre_norm, tied;
};

const std::vector<Variant> kVariants = {
    {"memory longer than a segment, post-LN", 6, 0, false, false, false},
    {"memory shorter than a segment, clamp_len", 3, 2, false, false, false},
    {"same_length, pre-LN, tied", 5, 0, true, true, true},
    {"same_length and clamp_len, pre-LN", 6, 3, true, true, false},
    {"no memory", 0, 0, false, false, false},
};

TransformerXLConfig config_of(const Variant& v) {
  TransformerXLConfig c;
  c.vocab = 11;
  c.d_model = 8;
  c.d_ff = 12;
  c.heads = 2;
  c.d_head = 4;
  c.layers = 2;
  c.ff_activation = ops::Activation::GELU;
  c.clamp_len = v.clamp_len;
  c.same_length = v.same_length;
  c.pre_norm = v.pre_norm;
  c.tie_embeddings = v.tied;
  return c;
}

HostIds host_ids(Index batch, Index length, Index vocab, std::uint64_t seed) {
  HostIds ids("ids", batch, length);
  for (Index b = 0; b < batch; ++b)
    for (Index t = 0; t < length; ++t)
      ids(b, t) = int(random_bits({seed, 3}, std::uint64_t(b * length + t)) % vocab);
  return ids;
}

// Columns [begin, begin + count) of host ids, on the device.
IdView columns(const HostIds& host, Index begin, Index count) {
  IdView ids("ids", host.extent(0), count);
  auto mirror = Kokkos::create_mirror_view(ids);
  for (Index b = 0; b < Index(host.extent(0)); ++b)
    for (Index t = 0; t < count; ++t) mirror(b, t) = host(b, begin + t);
  Kokkos::deep_copy(ids, mirror);
  return ids;
}

template <class T>
std::vector<double> host_values(const View2<T>& v) {
  auto h = Kokkos::create_mirror_view_and_copy(HostSpace(), v);
  return std::vector<double>(h.data(), h.data() + h.size());
}

template <class T>
double max_difference(const View3<T>& a, const View3<T>& b) {
  auto ha = Kokkos::create_mirror_view_and_copy(HostSpace(), a);
  auto hb = Kokkos::create_mirror_view_and_copy(HostSpace(), b);
  double worst = 0;
  for (std::size_t i = 0; i < ha.size(); ++i)
    worst = std::max(worst, std::abs(double(ha.data()[i]) - double(hb.data()[i])));
  return worst;
}

template <class T>
struct Xl {
  ParameterSet<T> params;
  TransformerXL<T> model;
  TransformerXLState<T> state;
  explicit Xl(const TransformerXLConfig& config) : model(config, params) {
    model.init({5, 6});
    for (auto& p : params)  // biases and gains away from 0 and 1
      if (p.name.find(".b") != std::string::npos || p.name.find("gamma") != std::string::npos)
        fill_uniform(p.value, 70 + p.offset, -0.5, 1.5);
  }
};

// Feeds `total` ids of batch B in segments of S: the first `prompt` in one
// call, then one at a time, and checks every call's logits against a rerun
// of forward on the current segment so far over the segment's memory. (One
// row reads its keys and values in the cache itself, several rows a copy.)
template <class T>
void check_cached_equals_rerun(const Variant& v, Index S, Index prompt, Index total, double tol,
                               Index B = 2) {
  SCOPED_TRACE(v.name + ", batch " + std::to_string(B));
  const auto config = config_of(v);
  Xl<T> xl(config);
  const auto ids = host_ids(B, total, config.vocab, 17);
  TransformerXLMemory<T> memory;  // the memory of the current segment, as forward leaves it
  memory.mem_len = v.mem_len;
  TransformerXLGeneration<T> generation;
  xl.model.start_generation(B, S, memory, generation);
  View2<T> cached("cached", B, config.vocab), rerun("rerun", B, config.vocab);
  ModelCall call;
  call.training = false;
  Index fed = 0, checks = 0, rolled = 0;  // `memory` follows the first `rolled` ids
  // The memory forward leaves after the complete segments of the first `ids_fed`.
  auto roll = [&](Index ids_fed) {
    for (; rolled + S <= ids_fed; rolled += S)
      xl.model.forward(columns(ids, rolled, S), call, memory, xl.state, false);
  };
  while (fed < total) {
    const Index n = fed == 0 ? prompt : 1;
    xl.model.generation_step(columns(ids, fed, n), generation, cached);
    fed += n;
    // The rerun: forward on the current segment's ids over a copy of its memory.
    const Index start = (fed - 1) / S * S;
    roll(start);
    auto scratch = memory.copy();
    xl.model.forward(columns(ids, start, fed - start), call, scratch, xl.state, false);
    xl.model.logits_at(xl.state, fed - start - 1, rerun);
    const auto a = host_values(cached), b = host_values(rerun);
    for (std::size_t i = 0; i < a.size(); ++i)
      ASSERT_NEAR(a[i], b[i], tol) << "after " << fed << " ids, logit " << i;
    ++checks;
    if (fed % S == 0) {  // the segment is complete: its memory rolls
      roll(fed);
      ASSERT_EQ(generation.memory.length(), memory.length()) << "after " << fed << " ids";
      for (std::size_t l = 0; l < memory.hidden.size(); ++l)
        EXPECT_LE(max_difference(generation.memory.hidden[l], memory.hidden[l]), tol)
            << "layer " << l << " after " << fed << " ids";
      EXPECT_EQ(generation.filled, 0);
    } else {
      EXPECT_EQ(generation.filled, fed % S);
    }
  }
  EXPECT_EQ(checks, total - prompt + 1);
  EXPECT_GT(total, 2 * S);  // at least two segment boundaries crossed
}

TEST(TransformerXLGeneration, CachedEqualsRerunAcrossSegmentsDouble) {
  // Segments of 4: a prompt of 6 crosses the first boundary inside one call.
  for (const auto& v : kVariants) check_cached_equals_rerun<double>(v, 4, 6, 15, 1e-10);
}

TEST(TransformerXLGeneration, CachedEqualsRerunAcrossSegmentsFloat) {
  for (const auto& v : kVariants) check_cached_equals_rerun<float>(v, 4, 3, 13, 1e-4);
}

TEST(TransformerXLGeneration, OneSequenceCachedEqualsRerun) {
  for (const auto& v : kVariants) check_cached_equals_rerun<double>(v, 4, 6, 15, 1e-10, 1);
}

TEST(TransformerXLGeneration, PromptLongerThanSeveralSegmentsInOneCall) {
  // 11 ids of segments of 3 in one call: three full segments and two ids.
  check_cached_equals_rerun<double>(kVariants[1], 3, 11, 14, 1e-10);
}

// The first segment fed one id at a time gives forward's logits at every
// position, and their cross-entropy against the next ids is evaluate's loss.
TEST(TransformerXLGeneration, FirstSegmentEqualsForwardAndEvaluate) {
  for (const auto& v : kVariants) {
    SCOPED_TRACE(v.name);
    const auto config = config_of(v);
    Xl<double> xl(config);
    const Index B = 2, S = 6;
    const auto ids = host_ids(B, S + 1, config.vocab, 23);
    TransformerXLMemory<double> memory;
    memory.mem_len = v.mem_len;
    TransformerXLGeneration<double> generation;
    xl.model.start_generation(B, S, memory, generation);
    View2<double> logits("logits", B, config.vocab), expected("expected", B, config.vocab);
    ModelCall call;
    call.training = false;
    auto scratch = memory.copy();
    xl.model.forward(columns(ids, 0, S), call, scratch, xl.state, false);
    double loss = 0;
    for (Index t = 0; t < S; ++t) {
      xl.model.generation_step(columns(ids, t, 1), generation, logits);
      xl.model.logits_at(xl.state, t, expected);
      const auto a = host_values(logits), e = host_values(expected);
      for (std::size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], e[i], 1e-10) << "position " << t;
      for (Index b = 0; b < B; ++b) {
        const double* row = a.data() + b * config.vocab;
        const double top = *std::max_element(row, row + config.vocab);
        double z = 0;
        for (Index k = 0; k < config.vocab; ++k) z += std::exp(row[k] - top);
        loss += (top + std::log(z) - row[ids(b, t + 1)]) / double(B * S);
      }
    }
    auto fresh = memory.copy();
    const auto result =
        xl.model.evaluate(columns(ids, 0, S), columns(ids, 1, S), -1, call, fresh, xl.state);
    EXPECT_NEAR(loss, result.loss, 1e-10 * std::max(1.0, std::abs(result.loss)));
    EXPECT_EQ(fresh.length(), std::min(v.mem_len, S));
    EXPECT_EQ(generation.memory.length(), fresh.length());  // the segment rolled
  }
}

// A generation may start from a memory that evaluation left (a stream read
// so far): its logits are forward's over that memory.
TEST(TransformerXLGeneration, StartsFromAGivenMemory) {
  const auto& v = kVariants[0];
  const auto config = config_of(v);
  Xl<double> xl(config);
  const Index B = 2, S = 4;
  const auto ids = host_ids(B, 2 * S, config.vocab, 29);
  TransformerXLMemory<double> memory;
  memory.mem_len = v.mem_len;
  ModelCall call;
  call.training = false;
  xl.model.forward(columns(ids, 0, S), call, memory, xl.state, false);
  ASSERT_EQ(memory.length(), S);
  TransformerXLGeneration<double> generation;
  xl.model.start_generation(B, S, memory, generation);
  View2<double> logits("logits", B, config.vocab), expected("expected", B, config.vocab);
  xl.model.generation_step(columns(ids, S, 3), generation, logits);
  xl.model.forward(columns(ids, S, 3), call, memory, xl.state, false);
  xl.model.logits_at(xl.state, 2, expected);
  const auto a = host_values(logits), e = host_values(expected);
  for (std::size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], e[i], 1e-10);
}

TEST(TransformerXLGeneration, ClearErrors) {
  const auto config = config_of(kVariants[0]);
  Xl<double> xl(config);
  TransformerXLGeneration<double> generation;
  View2<double> logits("logits", 2, config.vocab);
  const auto ids = host_ids(2, 3, config.vocab, 31);
  expect_error<ConfigError>(
      [&] { xl.model.generation_step(columns(ids, 0, 1), generation, logits); },
      {"generation has not started", "start_generation"});
  TransformerXLMemory<double> memory;
  memory.mem_len = 4;
  expect_error<ConfigError>([&] { xl.model.start_generation(2, 0, memory, generation); },
                            {"segment_length 0", "positive"});
  xl.model.start_generation(2, 4, memory, generation);
  expect_error<ShapeError>(
      [&] { xl.model.generation_step(columns(host_ids(3, 1, 5, 1), 0, 1), generation, logits); },
      {"ids has shape [3, 1]", "[2, n >= 1]"});
  View2<double> narrow("narrow", 2, 3);
  expect_error<ShapeError>(
      [&] { xl.model.generation_step(columns(ids, 0, 1), generation, narrow); },
      {"logits has shape [2, 3]", "[2, 11]"});
  HostIds bad("bad", 2, 1);
  bad(0, 0) = 2;
  bad(1, 0) = 11;
  expect_error<ConfigError>(
      [&] { xl.model.generation_step(columns(bad, 0, 1), generation, logits); }, {"11"});
}

}  // namespace
}  // namespace reformer
