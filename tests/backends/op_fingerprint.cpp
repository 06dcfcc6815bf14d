// Cross-backend agreement. `op_fingerprint write FILE` runs every op in float on
// inputs from the counter RNG and writes the outputs; `op_fingerprint compare A B`
// checks two such files (e.g. from the Serial and the OpenMP build):
//   - random draws (dropout masks, initial weights) must be bitwise identical;
//   - every other output must agree within 1e-6 norm-wise relative error.
#include "reformer/core/random.hpp"
#include "reformer/core/runtime.hpp"
#include "reformer/core/shape.hpp"
#include "reformer/ops/activations.hpp"
#include "reformer/ops/dropout.hpp"
#include "reformer/ops/gemm.hpp"
#include "reformer/ops/layer_norm.hpp"
#include "reformer/ops/linear.hpp"
#include "reformer/ops/softmax.hpp"
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
