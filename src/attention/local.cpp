#include "reformer/attention/local.hpp"

#include "attention/attention_checks.hpp"
#include "attention/chunked_kernels.hpp"
#include "reformer/core/instantiate.hpp"

#include <cmath>

namespace reformer::attention {
namespace {

template <class T>
detail::ChunkedInputs<T> local_inputs(const char* op, In4<T> q, In4<T> k, In4<T> v,
                                      const LocalAttentionConfig& config,
                                      const AttentionCall& call) {
  detail::check_qkv(op, q, k, v);
  const Index batch = q.extent(0), length = q.extent(1);
  config.validate();
  detail::check_chunking(op, length, config.chunk);
  detail::check_masks(op, call.masks, batch, length);
  detail::check_dropout(op, call.dropout);
  detail::ChunkedInputs<T> in;
  in.q = q;
  in.k = k;
  in.v = v;
  in.key_scale_constant = compute_t<T>(1.0 / std::sqrt(double(q.extent(3))));
  in.key_valid = call.masks.key_valid;
  in.causal = call.masks.causal;
  in.length = length;
  in.heads = q.extent(2);
  in.d_head = q.extent(3);
  in.dropout = call.dropout;
  const auto g = local_chunk_geometry(config, length);
  in.window = {length, g.chunk, g.n_chunks, g.n_before, false};
  return in;
}

}  // namespace

void LocalAttentionConfig::validate() const {
  const char* op = "LocalAttentionConfig";
  require<ConfigError>(chunk > 0, op, ": chunk is ", chunk, " but must be positive");
  require<ConfigError>(n_before >= 0, op, ": n_before is ", n_before, " but must be >= 0");
}

template <class T>
void local_attention_forward(In4<T> q, In4<T> k, In4<T> v, const LocalAttentionConfig& config,
                             const AttentionCall& call, View4<T> out, View3<compute_t<T>> lse) {
  const char* op = "local_attention_forward";
  const auto in = local_inputs<T>(op, q, k, v, config, call);
  require_same_shape(op, "q", q, "out", out);
  detail::check_lse(op, lse, q);
  detail::run_forward_chunks<T>("local_attention_forward", in, out, lse, q.extent(0));
}

template <class T>
void local_attention_backward(In4<T> q, In4<T> k, In4<T> v, In4<T> out, In3<compute_t<T>> lse,
                              In4<T> dout, const LocalAttentionConfig& config,
                              const AttentionCall& call, View4<T> dq, View4<T> dk, View4<T> dv,
                              Workspace& workspace) {
  const char* op = "local_attention_backward";
  const auto in = local_inputs<T>(op, q, k, v, config, call);
  require_same_shape(op, "q", q, "out", out);
  require_same_shape(op, "q", q, "dout", dout);
  require_same_shape(op, "q", q, "dq", dq);
  require_same_shape(op, "k", k, "dk", dk);
  require_same_shape(op, "v", v, "dv", dv);
  detail::check_lse(op, lse, q);
  Workspace::Frame frame(workspace);
  auto delta = frame.take<View3<compute_t<T>>>(lse.extent(0), lse.extent(1), lse.extent(2));
  detail::item_dot<T>(dout, out, delta);
  detail::chunked_backward<T>(in, lse, delta, dout, dq, dk, dv);
  // The kernel returns the gradient of k / sqrt(d_head) (bf16: one more rounding).
  const compute_t<T> scale = in.key_scale_constant;
  auto flat = Kokkos::View<T*, Layout, MemSpace>(dk.data(), dk.size());
  Kokkos::parallel_for(
      "local_attention_key_scale", range(flat.extent(0)),
      KOKKOS_LAMBDA(Index i) { flat(i) = store<T>(load(flat(i)) * scale); });
}

#define REFORMER_INSTANTIATE(T)                                                                  \
  template void local_attention_forward<T>(In4<T>, In4<T>, In4<T>, const LocalAttentionConfig&,  \
                                           const AttentionCall&, View4<T>, View3<compute_t<T>>); \
  template void local_attention_backward<T>(                                                     \
      In4<T>, In4<T>, In4<T>, In4<T>, In3<compute_t<T>>, In4<T>, const LocalAttentionConfig&,    \
      const AttentionCall&, View4<T>, View4<T>, View4<T>, Workspace&);
REFORMER_INSTANTIATE_STORAGE_TYPES(REFORMER_INSTANTIATE)

}  // namespace reformer::attention
