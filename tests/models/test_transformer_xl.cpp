// The Transformer-XL language model (models/transformer_xl.hpp): segment
// recurrence against a plain host reference that runs the whole model on the
// concatenated context with the masks the memories imply (each position sees
// the keys of its own segment and of the memory its segment got, at every
// layer), for memories shorter than, equal to and longer than a segment,
// clamp_len, same_length, pre- and post-LN, tied and untied output;
// mem_len = 0 is the model without memory; finite-difference gradients of
// every parameter in double on a segment with a memory (dropout on); the
// memory's shape over a stream; clear errors.
#include "reformer/core/error.hpp"
#include "reformer/models/transformer_xl.hpp"
#include "support/batch_share.hpp"
#include "support/checks.hpp"
#include "support/gradcheck.hpp"
#include "support/layer_reference.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
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

TransformerXLConfig tiny_config() {
  TransformerXLConfig c;
  c.vocab = 7;
  c.d_model = 8;
  c.d_ff = 12;
  c.heads = 2;
  c.d_head = 4;
  c.layers = 2;
  c.ff_activation = ops::Activation::GELU;
  c.loss_chunk = 5;  // several chunks
  return c;
}

// Columns [begin, begin + count) of ids, as a new contiguous matrix.
View2<int> columns(const View2<int>& ids, Index begin, Index count) {
  View2<int> out("segment", ids.extent(0), count);
  Kokkos::deep_copy(out, Kokkos::subview(ids, Kokkos::ALL, std::make_pair(begin, begin + count)));
  return out;
}

// ---- host reference: the whole model on one context with a mask ----------

using Allowed = std::function<bool(Index, Index)>;  // (query position, key position)

std::vector<double> host_encoding(Index positions, Index d) {
  std::vector<double> r(positions * d);
  for (Index p = 0; p < positions; ++p)
    for (Index j = 0; j < d; ++j) {
      const double angle = double(p) / std::pow(10000.0, double(j - j % 2) / double(d));
      r[p * d + j] = j % 2 == 0 ? std::sin(angle) : std::cos(angle);
    }
  return r;
}

double gelu(double s) { return 0.5 * s * (1 + std::erf(s / std::sqrt(2.0))); }

// One layer over h [B * N, d]: every position is a query, keys where allowed.
std::vector<double> host_layer(const ParameterSet<double>& params, const std::string& prefix,
                               const TransformerXLConfig& cfg, const std::vector<double>& h,
                               Index B, Index N, const Allowed& allowed) {
  const Index d = cfg.d_model, H = cfg.heads, D = cfg.d_head, inner = H * D, rows = B * N;
  auto p = [&](const std::string& name) { return param(params, prefix + "." + name); };
  const auto a =
      cfg.pre_norm ? host_layer_norm(h, rows, d, p("attn_norm.gamma"), p("attn_norm.beta")) : h;
  const auto q = host_matmul(a, p("attn.w_q"), rows, d, inner);
  const auto k = host_matmul(a, p("attn.w_k"), rows, d, inner);
  const auto v = host_matmul(a, p("attn.w_v"), rows, d, inner);
  const auto r = host_matmul(host_encoding(N, d), p("attn.w_r"), N, d, inner);
  const auto u = p("attn.bias_u"), bv = p("attn.bias_v");
  const double scale = 1.0 / std::sqrt(double(D));
  std::vector<double> att(rows * inner, 0.0);
  for (Index b = 0; b < B; ++b)
    for (Index hh = 0; hh < H; ++hh)
      for (Index i = 0; i < N; ++i) {
        std::vector<double> s(N, -INFINITY);
        double top = -INFINITY;
        for (Index j = 0; j <= i; ++j) {
          if (!allowed(i, j)) continue;
          const Index dist = i - j;
          const Index row = cfg.clamp_len > 0 ? std::min(dist, cfg.clamp_len) : dist;
          double sum = 0;
          for (Index e = 0; e < D; ++e) {
            const double qe = q[(b * N + i) * inner + hh * D + e];
            sum += (qe + u[hh * D + e]) * k[(b * N + j) * inner + hh * D + e] +
                   (qe + bv[hh * D + e]) * r[row * inner + hh * D + e];
          }
          s[j] = scale * sum;
          top = std::max(top, s[j]);
        }
        double z = 0;
        for (Index j = 0; j < N; ++j) z += std::exp(s[j] - top);
        for (Index j = 0; j < N; ++j) {
          const double w = std::exp(s[j] - top) / z;
          for (Index e = 0; e < D; ++e)
            att[(b * N + i) * inner + hh * D + e] += w * v[(b * N + j) * inner + hh * D + e];
        }
      }
  const auto o = host_matmul(att, p("attn.w_o"), rows, inner, d);
  std::vector<double> y(rows * d);
  for (Index n = 0; n < rows * d; ++n) y[n] = h[n] + o[n];
  auto ff = [&](const std::vector<double>& x) {
    const Index f = cfg.d_ff;
    const auto in =
        cfg.pre_norm ? host_layer_norm(x, rows, d, p("ff.norm.gamma"), p("ff.norm.beta")) : x;
    auto hidden = host_matmul(in, p("ff.w1"), rows, d, f);
    const auto b1 = p("ff.b1"), b2 = p("ff.b2");
    for (Index n = 0; n < rows; ++n)
      for (Index c = 0; c < f; ++c) hidden[n * f + c] = gelu(hidden[n * f + c] + b1[c]);
    auto out = host_matmul(hidden, p("ff.w2"), rows, f, d);
    for (Index n = 0; n < rows; ++n)
      for (Index c = 0; c < d; ++c) out[n * d + c] += b2[c];
    return out;
  };
  if (cfg.pre_norm) {
    const auto g = ff(y);
    for (Index n = 0; n < rows * d; ++n) y[n] += g[n];
    return y;
  }
  y = host_layer_norm(y, rows, d, p("attn_norm.gamma"), p("attn_norm.beta"));
  const auto g = ff(y);
  for (Index n = 0; n < rows * d; ++n) y[n] += g[n];
  return host_layer_norm(y, rows, d, p("ff_norm.gamma"), p("ff_norm.beta"));
}

// Per-position losses -log p(target) of the model on ids [B, N] (host).
std::vector<double> host_model_losses(const ParameterSet<double>& params,
                                      const TransformerXLConfig& cfg, const std::vector<int>& ids,
                                      const std::vector<int>& targets, Index B, Index N,
                                      const Allowed& allowed) {
  const Index d = cfg.d_model, V = cfg.vocab, rows = B * N;
  const auto table = param(params, "embedding");
  const double s = cfg.scale_embedding ? std::sqrt(double(d)) : 1.0;
  std::vector<double> h(rows * d);
  for (Index n = 0; n < rows; ++n)
    for (Index c = 0; c < d; ++c) h[n * d + c] = s * table[ids[n] * d + c];
  for (Index l = 0; l < cfg.layers; ++l)
    h = host_layer(params, "layers." + std::to_string(l), cfg, h, B, N, allowed);
  if (cfg.pre_norm)
    h = host_layer_norm(h, rows, d, param(params, "out.norm.gamma"),
                        param(params, "out.norm.beta"));
  std::vector<double> weight(d * V);
  if (cfg.tie_embeddings) {
    for (Index c = 0; c < d; ++c)
      for (Index w = 0; w < V; ++w) weight[c * V + w] = table[w * d + c];
  } else {
    weight = param(params, "out.w");
  }
  const auto logits = host_matmul(h, weight, rows, d, V);
  const auto bias = param(params, "out.b");
  std::vector<double> losses(rows);
  for (Index n = 0; n < rows; ++n) {
    double top = -INFINITY;
    for (Index w = 0; w < V; ++w) top = std::max(top, logits[n * V + w] + bias[w]);
    double z = 0;
    for (Index w = 0; w < V; ++w) z += std::exp(logits[n * V + w] + bias[w] - top);
    losses[n] = -(logits[n * V + targets[n]] + bias[targets[n]] - top - std::log(z));
  }
  return losses;
}

std::vector<int> host_ints(const View2<int>& v) {
  auto host = Kokkos::create_mirror_view_and_copy(HostSpace(), v);
  return std::vector<int>(host.data(), host.data() + host.size());
}

struct Variant {
  const char* name;
  Index mem_len, clamp_len;
  bool same_length, pre_norm, tied;
};

const Variant kVariants[] = {
    {"memory_of_a_segment", 4, 0, false, false, false},
    {"memory_longer_than_a_segment_clamped", 6, 3, false, true, true},
    {"memory_shorter_than_a_segment_same_length", 2, 0, true, false, true},
    {"longer_memory_same_length_clamped", 7, 2, true, true, false},
    {"no_memory", 0, 0, false, true, false},
    {"no_memory_same_length", 0, 0, true, false, false},
};

TransformerXLConfig variant_config(const Variant& v) {
  auto c = tiny_config();
  c.clamp_len = v.clamp_len;
  c.same_length = v.same_length;
  c.pre_norm = v.pre_norm;
  c.tie_embeddings = v.tied;
  return c;
}

// Segments s = 0, 1, 2 of length L evaluated in turn, each with the memory the
// previous ones left, equal the reference on the whole 3L context where a
// query of segment s sees keys from position sL - M_s on (M_s the memory's
// length then: M_0 = 0, M_s = min(mem_len, M_{s-1} + L)), causally, and with
// same_length only those at distances below mem_len.
TEST(TransformerXL, SegmentRecurrenceEqualsReferenceOnTheConcatenatedContext) {
  const Index B = 2, L = 4, S = 3;
  for (const auto& v : kVariants) {
    SCOPED_TRACE(v.name);
    const auto config = variant_config(v);
    ParameterSet<double> params;
    TransformerXL<double> model(config, params);
    model.init({3, 4});
    for (auto& p : params)  // biases and gains away from 0 and 1
      if (p.name.find(".b") != std::string::npos || p.name.find("gamma") != std::string::npos)
        fill_uniform(p.value, 50 + p.offset, -0.5, 1.5);
    const auto ids = random_ids(B, S * L, config.vocab, 8);
    const auto targets = random_ids(B, S * L, config.vocab, 9);
    std::vector<Index> start(S * L);
    Index m = 0;
    for (Index s = 0; s < S; ++s) {
      for (Index i = 0; i < L; ++i) start[s * L + i] = s * L - m;
      m = std::min(v.mem_len, m + L);
    }
    const bool same_length = v.same_length && v.mem_len > 0;
    const Allowed allowed = [&](Index i, Index j) {
      return j >= start[i] && (!same_length || i - j < v.mem_len);
    };
    const auto reference =
        host_model_losses(params, config, host_ints(ids), host_ints(targets), B, S * L, allowed);
    TransformerXLMemory<double> memory;
    memory.mem_len = v.mem_len;
    TransformerXLState<double> state;
    ModelCall call;
    call.training = false;
    for (Index s = 0; s < S; ++s) {
      const auto result = model.evaluate(columns(ids, s * L, L), columns(targets, s * L, L), -1,
                                         call, memory, state);
      double expected = 0;
      for (Index b = 0; b < B; ++b)
        for (Index i = 0; i < L; ++i) expected += reference[b * S * L + s * L + i] / double(B * L);
      EXPECT_NEAR(result.loss, expected, 1e-12 * std::abs(expected)) << "segment " << s;
      EXPECT_EQ(result.tokens, B * L);
      EXPECT_EQ(memory.length(), std::min(v.mem_len, (s + 1) * L));
    }
  }
}

// mem_len = 0: no memory is kept, and every segment's loss is that of the
// segment alone, bitwise (the ablation without recurrence).
TEST(TransformerXL, NoMemoryIsTheModelWithoutRecurrence) {
  auto config = tiny_config();
  config.same_length = true;
  ParameterSet<double> params;
  TransformerXL<double> model(config, params);
  model.init({3, 5});
  const auto ids = random_ids(2, 8, config.vocab, 10);
  const auto targets = random_ids(2, 8, config.vocab, 11);
  ModelCall call;
  call.training = false;
  TransformerXLMemory<double> memory;  // mem_len 0
  TransformerXLState<double> state;
  model.evaluate(columns(ids, 0, 4), columns(targets, 0, 4), -1, call, memory, state);
  EXPECT_EQ(memory.length(), 0);
  const double second =
      model.evaluate(columns(ids, 4, 4), columns(targets, 4, 4), -1, call, memory, state).loss;
  TransformerXLMemory<double> fresh;
  TransformerXLState<double> other;
  const double alone =
      model.evaluate(columns(ids, 4, 4), columns(targets, 4, 4), -1, call, fresh, other).loss;
  EXPECT_EQ(second, alone);
  // With a memory the second segment's loss differs.
  TransformerXLMemory<double> kept;
  kept.mem_len = 4;
  model.evaluate(columns(ids, 0, 4), columns(targets, 0, 4), -1, call, kept, other);
  const double with_memory =
      model.evaluate(columns(ids, 4, 4), columns(targets, 4, 4), -1, call, kept, other).loss;
  EXPECT_GT(std::abs(with_memory - alone), 1e-6);
}

TransformerXLMemory<double> copy_of(const TransformerXLMemory<double>& memory) {
  TransformerXLMemory<double> copy;
  copy.mem_len = memory.mem_len;
  for (const auto& h : memory.hidden) {
    View3<double> c("memory_copy", h.extent(0), h.extent(1), h.extent(2));
    Kokkos::deep_copy(c, h);
    copy.hidden.push_back(c);
  }
  return copy;
}

// Every parameter's gradient on a second segment, with the memory that the
// first left held fixed, against central differences; dropout on.
TEST(TransformerXL, GradientsMatchFiniteDifferencesWithMemory) {
  for (const bool pre_norm : {false, true}) {
    SCOPED_TRACE(pre_norm ? "pre-LN, tied" : "post-LN, untied");
    auto config = tiny_config();
    config.pre_norm = pre_norm;
    config.tie_embeddings = pre_norm;
    config.clamp_len = 3;
    config.same_length = true;
    config.dropout = 0.1;
    config.attention_dropout = 0.1;
    ParameterSet<double> params;
    TransformerXL<double> model(config, params);
    model.init({3, 6});
    const auto ids = random_ids(2, 10, config.vocab, 12);
    auto targets = random_ids(2, 10, config.vocab, 13);
    {  // one ignored target
      auto host = Kokkos::create_mirror_view_and_copy(HostSpace(), targets);
      host(1, 7) = -1;
      Kokkos::deep_copy(targets, host);
    }
    TransformerXLMemory<double> memory;
    memory.mem_len = 3;
    TransformerXLState<double> state;
    ModelCall first;
    first.key = {1, 1};
    model.evaluate(columns(ids, 0, 5), columns(targets, 0, 5), -1, first, memory, state);
    ASSERT_EQ(memory.length(), 3);
    const auto saved = copy_of(memory);
    ModelCall call;
    call.key = {1, 2};
    const auto seg_ids = columns(ids, 5, 5), seg_targets = columns(targets, 5, 5);
    params.zero_grad();
    auto working = copy_of(saved);
    const auto result = model.forward_backward(seg_ids, seg_targets, -1, call, working, state);
    EXPECT_EQ(result.tokens, 9);
    auto loss = [&] {
      auto m = copy_of(saved);
      return model.evaluate(seg_ids, seg_targets, -1, call, m, state).loss;
    };
    EXPECT_EQ(loss(), result.loss);
    {  // evaluate (one layer state for all layers) leaves the same memory
      auto m = copy_of(saved);
      model.evaluate(seg_ids, seg_targets, -1, call, m, state);
      ASSERT_EQ(m.hidden.size(), working.hidden.size());
      for (std::size_t l = 0; l < m.hidden.size(); ++l)
        EXPECT_EQ(to_host(m.hidden[l]), to_host(working.hidden[l])) << "layer " << l;
    }
    for (auto& p : params) {
      const double err = gradient_error(p.value, p.grad, loss, 16);
      EXPECT_LT(err, 1e-7) << p.name;
    }
  }
}

// Data parallelism: streams [2, 4), run alone with first_row 2 over two
// segments (the second reads the memory the first left), draw the masks the
// whole batch draws for them (embedding, relative attention, output
// projection, feed-forward, the output's dropout), so their memories carry
// the whole batch's rows and the two shares with the trainer's loss weights
// give the whole batch's loss and gradients of both segments. pre- and post-LN.
TEST(TransformerXL, ShareOfTheBatchDrawsTheWholeBatchMasks) {
  for (const bool pre_norm : {false, true}) {
    SCOPED_TRACE(pre_norm ? "pre-LN" : "post-LN");
    auto config = tiny_config();
    config.pre_norm = pre_norm;
    config.dropout = config.attention_dropout = 0.2;
    config.same_length = pre_norm;
    ParameterSet<double> params;
    TransformerXL<double> model(config, params);
    model.init({3, 6});
    const auto ids = random_ids(4, 10, config.vocab, 12);
    const auto targets = random_ids(4, 10, config.vocab, 13);
    auto run = [&](Index first, Index count, Index first_row, double loss_scale) {
      const auto share_ids = share_rows(ids, first, count);
      const auto share_targets = share_rows(targets, first, count);
      TransformerXLMemory<double> memory;
      memory.mem_len = 4;
      TransformerXLState<double> state;
      params.zero_grad();
      ShareResult r;
      for (const Index segment : {0, 1}) {
        ModelCall call;
        call.key = {1, std::uint64_t(segment + 1)};
        call.loss_scale = loss_scale;
        call.first_row = first_row;
        const auto result =
            model.forward_backward(columns(share_ids, 5 * segment, 5),
                                   columns(share_targets, 5 * segment, 5), -1, call, memory, state);
        r.loss += result.loss / 2;  // both segments count every target
        r.tokens += result.tokens;
      }
      r.grads = to_host(params.grads());
      return r;
    };
    expect_shares_make_the_whole_batch(run, 4, 2);
  }
}

// Float runs the same code as double: two segments with memory, dropout on,
// the losses within float rounding.
TEST(TransformerXL, FloatMatchesDouble) {
  auto config = tiny_config();
  config.pre_norm = true;
  config.same_length = true;
  config.clamp_len = 3;
  config.dropout = 0.1;
  ParameterSet<double> params;
  TransformerXL<double> model(config, params);
  model.init({3, 7});
  ParameterSet<float> fparams;
  TransformerXL<float> fmodel(config, fparams);
  auto it = params.begin();
  for (auto& p : fparams) {
    const auto values = to_host((it++)->value);
    auto host = Kokkos::create_mirror_view(p.value);
    for (std::size_t i = 0; i < values.size(); ++i) host(i) = float(values[i]);
    Kokkos::deep_copy(p.value, host);
  }
  const auto ids = random_ids(2, 10, config.vocab, 14);
  const auto targets = random_ids(2, 10, config.vocab, 15);
  TransformerXLMemory<double> memory;
  TransformerXLMemory<float> fmemory;
  memory.mem_len = fmemory.mem_len = 4;
  TransformerXLState<double> state;
  TransformerXLState<float> fstate;
  for (Index s = 0; s < 2; ++s) {
    ModelCall call;
    call.key = {2, std::uint64_t(s)};
    const auto seg = columns(ids, 5 * s, 5), tgt = columns(targets, 5 * s, 5);
    const double loss = model.forward_backward(seg, tgt, -1, call, memory, state).loss;
    const double floss = fmodel.forward_backward(seg, tgt, -1, call, fmemory, fstate).loss;
    EXPECT_NEAR(floss, loss, 1e-5 * std::abs(loss)) << "segment " << s;
  }
  it = params.begin();
  for (auto& p : fparams) {
    const auto& want = *(it++);
    EXPECT_LT(relative_error(to_host(p.grad), to_host(want.grad)), 1e-4) << p.name;
  }
}

TEST(TransformerXL, ClearErrors) {
  auto config = tiny_config();
  config.layers = 0;
  expect_error<ConfigError>([&] { config.validate(); }, {"layers", "positive"});
  config = tiny_config();
  ParameterSet<double> params;
  TransformerXL<double> model(config, params);
  model.init({1, 1});
  TransformerXLMemory<double> memory;
  memory.mem_len = 3;
  TransformerXLState<double> state;
  ModelCall call;
  const auto ids = random_ids(2, 4, config.vocab, 1);
  model.evaluate(ids, ids, -1, call, memory, state);
  const auto other = random_ids(3, 4, config.vocab, 1);
  expect_error<ShapeError>([&] { model.evaluate(other, other, -1, call, memory, state); },
                           {"batch", "reset()"});
  memory.reset();
  EXPECT_NO_THROW(model.evaluate(other, other, -1, call, memory, state));
  const auto bad = random_ids(3, 4, 99, 1);
  expect_error<ConfigError>([&] { model.evaluate(bad, other, -1, call, memory, state); }, {"ids"});
}

}  // namespace
}  // namespace reformer
