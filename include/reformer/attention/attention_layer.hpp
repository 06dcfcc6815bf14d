// Multi-head self-attention layer with one interface for the three variants, so
// that a model chooses full, LSH or local attention per layer:
//   q = x W_q, k = x W_k, v = x W_v      (LSH: one shared W_qk, keys normalised)
//   a = Attention(q, k, v)                (per head, d_head wide)
//   y = dropout(a W_o)
// Projections have no bias. Parameters are registered under a dotted prefix
// ("layers.3.attn") as w_q, w_k (or w_qk), w_v and w_o, each [d_model, heads * d_head]
// (w_o: [heads * d_head, d_model]). Full attention also serves cross-attention:
// queries from x, keys and values from a second sequence.
#pragma once

#include "reformer/attention/full.hpp"
#include "reformer/attention/local.hpp"
#include "reformer/attention/lsh.hpp"
#include "reformer/train/parameter_set.hpp"

#include <string>

namespace reformer::attention {

enum class AttentionKind { Full, Lsh, Local };

// "full", "lsh", "local"; ConfigError naming the value otherwise.
AttentionKind parse_attention_kind(const std::string& name);
const char* to_string(AttentionKind kind);

struct AttentionLayerConfig {
  AttentionKind kind = AttentionKind::Lsh;
  Index d_model = 256;
  Index heads = 4;
  Index d_head = 64;
  bool causal = true;
  // Full attention only: one projection for q and k (k = q, own position
  // masked as in LSH). LSH always shares and normalises keys; local never shares.
  bool shared_qk = false;
  double attention_dropout = 0.0;  // on the attention probabilities
  double output_dropout = 0.0;     // after W_o
  // Variant settings; their masks and dropout are set by the layer.
  LshAttentionConfig lsh{};
  LocalAttentionConfig local{};
};

template <class T>
class AttentionLayer {
 public:
  // Registers the projections in `params` under `prefix`; checks the config.
  AttentionLayer(const std::string& prefix, const AttentionLayerConfig& config,
                 train::ParameterSet<T>& params);

  // Xavier-uniform projections from the counter RNG.
  void init(RandomKey key);

  // x [batch, length, d_model] -> y (same shape). `key` draws this call's LSH
  // rotations and dropout masks; backward replays them. key_valid: optional
  // [batch, length] padding mask (1 = token).
  void forward(In3<T> x, View3<T> y, RandomKey key,
               Kokkos::View<const int**, Layout, MemSpace> key_valid = {});

  // Backward of the last forward on the same x: dx overwritten, the
  // projections' gradients accumulated.
  void backward(In3<T> x, In3<T> dy, View3<T> dx);

  // Cross-attention (full attention only): queries from x [batch, Lq, d_model],
  // keys and values from memory [batch, Lk, d_model]; no causal mask.
  void forward_cross(In3<T> x, In3<T> memory, View3<T> y, RandomKey key,
                     Kokkos::View<const int**, Layout, MemSpace> memory_valid = {});
  void backward_cross(In3<T> x, In3<T> memory, In3<T> dy, View3<T> dx, View3<T> dmemory);

  const AttentionLayerConfig& config() const { return config_; }

 private:
  void project(In3<T> x, In3<T> memory);
  void attend();
  // [rows, heads * d_head] matrices of the current call viewed per head.
  View4<T> query_heads(const View2<T>& m) const;
  View4<T> key_heads(const View2<T>& m) const;
  // The masks and the dropout stream of the current call.
  MaskOptions call_masks() const;
  AttentionDropout call_dropout() const;
  void output(View3<T> y);
  void backward_common(In3<T> dy, View2<T> dq, View2<T> dk, View2<T> dv);

  AttentionLayerConfig config_;
  train::Parameter<T>* w_q_ = nullptr;  // or w_qk
  train::Parameter<T>* w_k_ = nullptr;  // null when q and k are shared
  train::Parameter<T>* w_v_ = nullptr;
  train::Parameter<T>* w_o_ = nullptr;
  // Saved by forward for backward.
  RandomKey key_{};
  Kokkos::View<const int**, Layout, MemSpace> key_valid_;
  View2<T> q_, k_, v_, attended_;  // [batch * length, heads * d_head]
  View4<T> rotations_;
  View3<T> local_lse_;
  LshSaved<T> lsh_saved_;
  FullAttentionSaved<T> full_saved_;
  Index batch_ = 0, length_q_ = 0, length_k_ = 0;
};

}  // namespace reformer::attention
