// Cross-backend agreement. `op_fingerprint write FILE` runs every op in float on
// inputs from the counter RNG and writes the outputs; `op_fingerprint compare A B`
// checks two such files (e.g. from the Serial and the OpenMP build):
//   - random draws (dropout masks, initial weights) must be bitwise identical;
//   - every other output must agree within 1e-6 norm-wise relative error.
#include "reformer/attention/attention_layer.hpp"
#include "reformer/attention/relative.hpp"
#include "reformer/core/initializers.hpp"
#include "reformer/core/parameter_set.hpp"
#include "reformer/core/random.hpp"
#include "reformer/core/runtime.hpp"
#include "reformer/core/shape.hpp"
#include "reformer/ops/activations.hpp"
#include "reformer/ops/cross_entropy.hpp"
#include "reformer/ops/dropout.hpp"
#include "reformer/ops/embedding.hpp"
#include "reformer/ops/gemm.hpp"
#include "reformer/ops/layer_norm.hpp"
#include "reformer/ops/linear.hpp"
#include "reformer/ops/softmax.hpp"
#include "reformer/train/grad_clip.hpp"
#include "reformer/train/optimizer.hpp"
#include "support/fingerprint.hpp"

#include <cstdio>
#include <string>

namespace reformer::testing {
namespace {

template <class V>
void fill(const V& v, std::uint64_t seed) {
  auto flat = as_vector(v);
  Kokkos::parallel_for(
      "fingerprint_fill", range(flat.extent(0)), KOKKOS_LAMBDA(Index i) {
        flat(i) = float(2 * random_uniform({seed, 5}, i) - 1);
      });
}

// ids[i] in [0, vocab), with every `pad_every`-th id (if > 0) set to `pad`.
void fill_ids(const View1<int>& ids, Index vocab, std::uint64_t seed, Index pad_every = 0,
              int pad = -1) {
  Kokkos::parallel_for(
      "fingerprint_fill_ids", range(ids.extent(0)), KOKKOS_LAMBDA(Index i) {
        const int id = int(random_bits({seed, 7}, i) % std::uint64_t(vocab));
        ids(i) = pad_every > 0 && i % pad_every == 0 ? pad : id;
      });
}

// Embeddings and positional encodings: [batch * length, d] rows.
void run_embeddings(Fingerprint& out) {
  const Index vocab = 300, d = 32, length = 24, batch = 3, rows = batch * length;
  View2<float> table("table", vocab, d), y("y", rows, d), dy("dy", rows, d);
  View2<float> dtable("dtable", vocab, d), x("x", rows, d);
  View1<int> ids("ids", rows);
  fill(table, 20);
  fill(dy, 21);
  fill(x, 22);
  fill(dtable, 23);  // the backward accumulates
  // Repeated ids (vocab 300 over 72 rows, plus a few forced repeats) exercise the sorted sums.
  fill_ids(ids, vocab, 24, 5, 7);
  ops::token_embedding_forward<float>(table, ids, true, y);
  out.add("token_embedding_forward", y, Rule::Close);
  ops::token_embedding_backward<float>(ids, dy, true, dtable);
  out.add("token_embedding_backward", dtable, Rule::Close);

  const Index offset = 5;
  ops::sinusoidal_positions_forward<float>(x, length, offset, y);
  out.add("sinusoidal_positions_forward", y, Rule::Close);

  const Index max_len = 40;
  View2<float> learned("learned", max_len, d), dlearned("dlearned", max_len, d);
  fill(learned, 25);
  fill(dlearned, 26);
  ops::learned_positions_forward<float>(x, learned, length, offset, y);
  out.add("learned_positions_forward", y, Rule::Close);
  ops::learned_positions_backward<float>(dy, length, offset, dlearned);
  out.add("learned_positions_backward", dlearned, Rule::Close);

  const Index n1 = 4, n2 = 8, d1 = 12, d2 = d - d1;  // 32 positions >= offset + length
  View2<float> e1("e1", n1, d1), e2("e2", n2, d2), de1("de1", n1, d1), de2("de2", n2, d2);
  fill(e1, 27);
  fill(e2, 28);
  fill(de1, 29);
  fill(de2, 30);
  ops::axial_positions_forward<float>(x, e1, e2, length, offset, y);
  out.add("axial_positions_forward", y, Rule::Close);
  ops::axial_positions_backward<float>(dy, length, offset, de1, de2);
  out.add("axial_positions_backward.de1", de1, Rule::Close);
  out.add("axial_positions_backward.de2", de2, Rule::Close);

  // Per-row positions (cached decoding): row r at (7 r) mod 32, below end = 32.
  const Index end = 32;
  Kokkos::View<Index*, Layout, MemSpace> positions("positions", rows);
  Kokkos::parallel_for(
      "fingerprint_positions", range(rows),
      KOKKOS_LAMBDA(Index r) { positions(r) = (7 * r) % 32; });
  ops::sinusoidal_positions_forward_at<float>(x, positions, end, y);
  out.add("sinusoidal_positions_forward_at", y, Rule::Close);
  ops::learned_positions_forward_at<float>(x, learned, positions, end, y);
  out.add("learned_positions_forward_at", y, Rule::Close);
  ops::axial_positions_forward_at<float>(x, e1, e2, positions, end, y);
  out.add("axial_positions_forward_at", y, Rule::Close);
}

// Chunked, label-smoothed cross-entropy with a pad id; 3 full chunks and a partial one.
void run_cross_entropy(Fingerprint& out) {
  const Index n = 70, d = 24, vocab = 50;
  View2<float> h("h", n, d), w("w", d, vocab), dh("dh", n, d), dw("dw", d, vocab);
  View1<float> b("b", vocab), db("db", vocab), loss("loss", 1);
  View1<int> targets("targets", n);
  fill(h, 40);
  fill(w, 41);
  fill(b, 42);
  fill(dw, 43);  // dW and db accumulate
  fill(db, 44);
  ops::CrossEntropyOptions options;
  options.pad_id = 0;
  options.smoothing = 0.1;
  options.chunk_rows = 16;
  fill_ids(targets, vocab, 45, 6, options.pad_id);
  const auto result =
      ops::cross_entropy_forward_backward<float>(h, w, b, targets, options, dh, dw, db);
  Kokkos::deep_copy(loss, float(result.loss));
  out.add("cross_entropy.loss", loss, Rule::Close);
  out.add("cross_entropy.dh", dh, Rule::Close);
  out.add("cross_entropy.dw", dw, Rule::Close);
  out.add("cross_entropy.db", db, Rule::Close);
}

// Fixed gradients g_i = 0.1 * (2 u - 1) + 0.01 (a mean so Adam has a direction).
void fill_grads(ParameterSet<float>& params, std::uint64_t seed) {
  for (auto& p : params) {
    fill(p.grad, seed++);
    auto g = p.grad;
    Kokkos::parallel_for(
        "fingerprint_scale_grad", range(g.extent(0)),
        KOKKOS_LAMBDA(Index i) { g(i) = 0.1f * g(i) + 0.01f; });
  }
}

void build_parameters(ParameterSet<float>& params) {
  params.add("emb.table", {64, 32});
  params.add("layers.0.attn.w_qk", {4, 32, 8});
  params.add("layers.0.ff.w1", {32, 48});
  params.add("layers.0.ff.b1", {48});
  init_normal(params.get("emb.table"), 0.02, {1234, stream_id(0, 1)});
  init_xavier_uniform(params.get("layers.0.attn.w_qk"), {1234, stream_id(1, 2)});
  init_xavier_uniform(params.get("layers.0.ff.w1"), {1234, stream_id(1, 3)});
  init_normal(params.get("layers.0.ff.b1"), 1.0, {1234, stream_id(1, 4)});
}

// Initial weights (bitwise), then Adam / AdamW steps and gradient clipping.
void run_training(Fingerprint& out) {
  {
    ParameterSet<float> params;
    build_parameters(params);
    for (const auto& p : params) out.add("init." + p.name, p.value, Rule::Bitwise);
  }
  for (const bool decoupled : {false, true}) {
    const std::string name = decoupled ? "adamw." : "adam.";
    ParameterSet<float> params;
    build_parameters(params);
    train::AdamConfig config;
    config.weight_decay = 0.01;
    config.decoupled_weight_decay = decoupled;
    train::Adam<float> adam(params, config);
    for (int step = 0; step < 3; ++step) {
      fill_grads(params, 60 + 10 * step);
      adam.step(1e-2 / (step + 1));
    }
    for (const auto& p : params) {
      out.add(name + p.name, p.value, Rule::Close);
      out.add(name + p.name + ".m", adam.first_moment(p.name), Rule::Close);
      out.add(name + p.name + ".v", adam.second_moment(p.name), Rule::Close);
    }
  }
  {
    ParameterSet<float> params;
    build_parameters(params);
    fill_grads(params, 90);
    View1<float> norm("norm", 1);
    // The norm is about 4 (4656 gradients of rms 0.06) > 0.5: the gradients are scaled.
    Kokkos::deep_copy(norm, float(train::clip_grad_norm(params, 0.5)));
    out.add("clip.norm", norm, Rule::Close);
    for (const auto& p : params) out.add("clip." + p.name, p.grad, Rule::Close);
  }
}

// Every attention variant through the layer (projections, masks, dropout,
// LSH hashing and sorting): outputs, input gradients and projection gradients.
void run_attention(Fingerprint& out) {
  const Index batch = 2, length = 256, d_model = 64;
  View3<float> x("x", batch, length, d_model), dy("dy", batch, length, d_model);
  fill(x, 30);
  fill(dy, 31);
  Kokkos::View<int**, Layout, MemSpace> valid("valid", batch, length);
  Kokkos::parallel_for(
      "fingerprint_valid", range(batch * length),
      KOKKOS_LAMBDA(Index i) { valid(i / length, i % length) = i % length < length - 9 ? 1 : 0; });
  for (const auto kind : {attention::AttentionKind::Full, attention::AttentionKind::Lsh,
                          attention::AttentionKind::Local}) {
    attention::AttentionLayerConfig config;
    config.kind = kind;
    config.d_model = d_model;
    config.heads = 4;
    config.d_head = 16;
    config.attention_dropout = 0.1;
    config.lsh.chunk = 32;
    config.lsh.n_hashes = 2;
    config.local.chunk = 32;
    ParameterSet<float> params;
    attention::AttentionLayer<float> layer("attn", config, params);
    layer.init({77, 1});
    attention::AttentionState<float> state;
    Workspace workspace;
    View3<float> y("y", batch, length, d_model), dx("dx", batch, length, d_model);
    layer.forward(x, y, {{78, 2}, valid}, state, workspace);
    layer.backward(x, dy, dx, state, workspace);
    const std::string name = std::string("attention.") + attention::to_string(kind);
    out.add(name + ".y", y, Rule::Close);
    out.add(name + ".dx", dx, Rule::Close);
    for (const auto& p : params) out.add(name + ".grad." + p.name, p.grad, Rule::Close);
    if (kind == attention::AttentionKind::Lsh) {
      View2<float> perm("perm", state.plan.perm.extent(0), state.plan.perm.extent(1));
      auto source = state.plan.perm;
      Kokkos::parallel_for(
          "fingerprint_perm", range(perm.size()),
          KOKKOS_LAMBDA(Index i) { perm.data()[i] = float(source.data()[i]); });
      out.add(name + ".perm", perm, Rule::Bitwise);
    }
  }
}

// Relative positional attention (Transformer-XL) over [memory; segment] with
// clamp_len, same_length and dropout: the tiles differ between host and GPU
// builds (and the memory crosses tile boundaries on both).
void run_relative_attention(Fingerprint& out) {
  const Index batch = 2, length = 96, memory = 70, heads = 2, d = 16;
  attention::RelativeAttentionConfig config;
  config.clamp_len = 60;
  config.same_length = true;
  config.mem_len = 100;
  const Index positions = attention::relative_attention_positions(memory, length, config);
  View4<float> q("q", batch, length, heads, d), out_("out", batch, length, heads, d),
      dout("dout", batch, length, heads, d), dq("dq", batch, length, heads, d);
  View4<float> k("k", batch, memory + length, heads, d), v("v", batch, memory + length, heads, d),
      dk("dk", batch, memory + length, heads, d), dv("dv", batch, memory + length, heads, d);
  View3<float> r("r", positions, heads, d), dr("dr", positions, heads, d);
  View3<float> lse("lse", batch, length, heads);
  View2<float> u("u", heads, d), bv("bv", heads, d), du("du", heads, d), dbv("dbv", heads, d);
  fill(q, 40);
  fill(k, 41);
  fill(v, 42);
  fill(r, 43);
  fill(u, 44);
  fill(bv, 45);
  fill(dout, 46);
  const attention::AttentionDropout dropout{0.1, {79, 3}};
  Workspace workspace;
  attention::relative_attention_forward<float>(q, k, v, r, u, bv, config, dropout, out_, lse,
                                               workspace);
  attention::relative_attention_backward<float>(q, k, v, r, u, bv, out_, lse, dout, config, dropout,
                                                dq, dk, dv, dr, du, dbv, workspace);
  out.add("relative_attention.out", out_, Rule::Close);
  out.add("relative_attention.lse", lse, Rule::Close);
  out.add("relative_attention.dq", dq, Rule::Close);
  out.add("relative_attention.dk", dk, Rule::Close);
  out.add("relative_attention.dv", dv, Rule::Close);
  out.add("relative_attention.dr", dr, Rule::Close);
  out.add("relative_attention.du", du, Rule::Close);
  out.add("relative_attention.dv_bias", dbv, Rule::Close);
}

void run_ops(Fingerprint& out) {
  const Index n = 96, d = 64, h = 48;
  View2<float> x("x", n, d), w("w", d, h), y("y", n, h), dy("dy", n, h), dx("dx", n, d);
  View2<float> dw("dw", d, h);
  View1<float> b("b", h), db("db", h);
  fill(x, 1);
  fill(w, 2);
  fill(b, 3);
  fill(dy, 4);
  ops::linear_forward<float>(x, w, b, y);
  out.add("linear_forward", y, Rule::Close);
  ops::linear_backward<float>(x, w, dy, dx, dw, db);
  out.add("linear_backward.dx", dx, Rule::Close);
  out.add("linear_backward.dw", dw, Rule::Close);
  out.add("linear_backward.db", db, Rule::Close);

  View3<float> qa("qa", 4, 16, 8), kb("kb", 4, 16, 8), scores("scores", 4, 16, 16);
  fill(qa, 5);
  fill(kb, 6);
  ops::batched_matmul<float>(qa, ops::Trans::No, kb, ops::Trans::Yes, scores);
  out.add("batched_matmul", scores, Rule::Close);

  View1<float> gamma("gamma", d), beta("beta", d), mean("mean", n), rstd("rstd", n);
  View1<float> dgamma("dgamma", d), dbeta("dbeta", d);
  View2<float> ln("ln", n, d), dln("dln", n, d), dxl("dxl", n, d);
  fill(gamma, 7);
  fill(beta, 8);
  fill(dln, 9);
  ops::layer_norm_forward<float>(x, gamma, beta, 1e-5f, ln, mean, rstd);
  out.add("layer_norm_forward", ln, Rule::Close);
  ops::layer_norm_backward<float>(x, gamma, mean, rstd, dln, dxl, dgamma, dbeta);
  out.add("layer_norm_backward.dx", dxl, Rule::Close);
  out.add("layer_norm_backward.dgamma", dgamma, Rule::Close);

  View2<float> sm("sm", n, d), dsm("dsm", n, d);
  ops::softmax_forward<float>(x, sm);
  out.add("softmax_forward", sm, Rule::Close);
  ops::softmax_backward<float>(sm, dln, dsm);
  out.add("softmax_backward", dsm, Rule::Close);
  ops::log_softmax_forward<float>(x, sm);
  out.add("log_softmax_forward", sm, Rule::Close);
  ops::log_softmax_backward<float>(sm, dln, dsm);
  out.add("log_softmax_backward", dsm, Rule::Close);

  auto fx = as_vector(x);
  auto fdy = as_vector(dln);
  View1<float> act("act", fx.extent(0)), dact("dact", fx.extent(0));
  for (auto kind : {ops::Activation::ReLU, ops::Activation::GELU}) {
    const std::string name = kind == ops::Activation::ReLU ? "relu" : "gelu";
    ops::activation_forward<float>(kind, fx, act);
    out.add(name + "_forward", act, Rule::Close);
    ops::activation_backward<float>(kind, fx, fdy, dact);
    out.add(name + "_backward", dact, Rule::Close);
  }

  View1<float> ones("ones", 5000), dropped("dropped", 5000);
  Kokkos::deep_copy(ones, 1.0f);
  ops::dropout_forward<float>(ones, 0.25, {11, stream_id(2, 3)}, 1000, dropped);
  out.add("dropout_mask", dropped, Rule::Bitwise);

  run_embeddings(out);
  run_cross_entropy(out);
  run_training(out);
  run_attention(out);
  run_relative_attention(out);
}

}  // namespace
}  // namespace reformer::testing

int main(int argc, char** argv) {
  using namespace reformer::testing;
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "write" && argc == 3) {
    reformer::Runtime runtime;
    Fingerprint fp;
    run_ops(fp);
    fp.write(argv[2]);
    std::printf("wrote %zu outputs to %s\n", fp.size(), argv[2]);
    return 0;
  }
  if (mode == "compare" && argc == 4) return compare_fingerprints(argv[2], argv[3]) ? 0 : 1;
  std::fprintf(stderr, "usage: op_fingerprint write FILE | compare FILE_A FILE_B\n");
  return 2;
}
