// Multi-head self-attention layer with one interface for the four variants, so
// that a model chooses full, exact, LSH or local attention per layer:
//   q = x W_q, k = x W_k, v = x W_v      (shared W_qk: keys normalised, shared_qk.hpp)
//   a = Attention(q, k, v)                (per head, d_head wide)
//   y = dropout(a W_o)
// Projections have no bias. Parameters are registered under a dotted prefix
// ("layers.3.attn") as w_q, w_k (or w_qk), w_v and w_o, each [d_model, heads * d_head]
// (w_o: [heads * d_head, d_model]). Full and exact attention also serve
// cross-attention: queries from x, keys and values from a second sequence.
//
// Ownership (docs/design.md): the layer owns its parameters and nothing else.
// What backward needs from forward goes into an AttentionState that the caller
// owns, reuses across steps and can drop; temporaries come from a Workspace the
// caller passes (one can serve a whole model). After one warm-up step, forward +
// backward of every variant allocate nothing.
//
// T is the activations' type (core/precision.hpp); the projections are
// param_t<T>. AttentionLayer<bf16> (bf16 training, issue 34) has the training
// calls of every kind (forward, recompute, backward, and cross-attention's);
// the decoding calls are float and double only (a bf16 run decodes with its
// float32 weights).
#pragma once

#include "reformer/attention/exact.hpp"
#include "reformer/attention/full.hpp"
#include "reformer/attention/local.hpp"
#include "reformer/attention/lsh.hpp"
#include "reformer/core/parameter_set.hpp"
#include "reformer/core/workspace.hpp"
#include "reformer/ops/rows_linear.hpp"

#include <optional>
#include <string>

namespace reformer::attention {

// Exact: the same attention as Full, computed in O(L) memory (exact.hpp).
enum class AttentionKind { Full, Lsh, Local, Exact };

// "full", "lsh", "local", "exact"; ConfigError naming the value otherwise.
AttentionKind parse_attention_kind(const std::string& name);
const char* to_string(AttentionKind kind);

// Hyper-parameters only, each field once (the variant configs carry no masks or
// dropout: the layer builds them per call from `causal` and the rates).
struct AttentionLayerConfig {
  AttentionKind kind = AttentionKind::Lsh;
  Index d_model = 256;
  Index heads = 4;
  Index d_head = 64;
  bool causal = true;
  // One projection for q and k. Unset: the variant's own rule (LSH shares, full,
  // exact and local do not). LSH cannot unshare and local cannot share: ConfigError.
  std::optional<bool> shared_qk{};
  double attention_dropout = 0.0;  // on the attention probabilities
  double output_dropout = 0.0;     // after W_o
  LshAttentionConfig lsh{};        // used when kind is Lsh
  LocalAttentionConfig local{};    // used when kind is Local

  bool shares_qk() const;
  // ConfigError naming the first bad or contradictory field.
  void validate() const;
};

// Per call: the counters of this call's randomness (LSH rotations, dropout
// masks) and an optional [batch, length_k] padding mask (1 = token).
struct AttentionLayerCall {
  RandomKey key{};
  Kokkos::View<const int**, Layout, MemSpace> key_valid{};
  // false: evaluation, every dropout of the layer is off.
  bool training = true;
  // The global index of x's batch row 0 (models::ModelCall::first_row): the
  // dropout masks are drawn by global row.
  Index first_row = 0;
};

// What forward saves for backward, owned by the caller. Reused across steps
// (views are reallocated only when the shape changes); release() drops it.
template <class T>
struct AttentionState {
  AttentionLayerCall call{};  // the call that filled it (backward replays it)
  Index batch = 0, length_q = 0, length_k = 0;
  bool cross = false;
  bool saved = false;            // activations below hold a forward pass
  View2<T> q, k, v, attended;    // [rows, heads * d_head]; k empty when q and k are shared
  View3<compute_t<T>> lse;       // LSH, local and exact: [batch, length_q, heads]
  FullAttentionSaved<T> full{};  // full: probabilities
  LshPlan plan{};                // LSH: buckets and sort of the last forward

  // Frees the activations; keep_plan keeps the call and the LSH plan.
  void release(bool keep_plan = false);
  // Takes another state's call and LSH plan (shared handles, nothing copied),
  // so that one state can hold the activations of whichever layer of a
  // reversible stack is being recomputed.
  void use_plan_of(const AttentionState& other);
};

// The key/value cache of one layer for decoding one position at a time, owned
// by the caller: keys [batch, capacity, heads * d_head] (with shared q and k
// the normalised keys), values, and for LSH the buckets of every cached
// position [batch * heads, n_hashes, capacity] and the call's rotations.
template <class T>
struct AttentionCache {
  View3<T> k, v;
  Kokkos::View<int***, Layout, MemSpace> buckets;
  View4<T> rotations;
  Index capacity() const { return Index(k.extent(1)); }
  void release() { *this = AttentionCache(); }
};

// What a forward pass keeps in the state: everything backward needs
// (training), or only the call and the LSH plan (the forward pass of a
// reversible stack, which recomputes, and inference).
enum class Save { All, PlanOnly };

template <class T>
class AttentionLayer {
 public:
  // Registers the projections in `params` under `prefix`; validates the config.
  AttentionLayer(const std::string& prefix, const AttentionLayerConfig& config,
                 ParameterSet<param_t<T>>& params);

  // Xavier-uniform projections from the counter RNG.
  void init(RandomKey key);

  // x [batch, length, d_model] -> y (same shape).
  void forward(In3<T> x, View3<T> y, const AttentionLayerCall& call, AttentionState<T>& state,
               Workspace& workspace, Save save = Save::All) const;

  // Forward again with the call and the LSH plan saved in `state` (same buckets,
  // same dropout masks), saving everything for backward: the reversible
  // backward pass calls it on its rebuilt input.
  void recompute(In3<T> x, View3<T> y, AttentionState<T>& state, Workspace& workspace) const;

  // dx = beta * dx + dL/dx (beta = 1 adds into a residual or reversible
  // stream); the projections' gradients are accumulated.
  void backward(In3<T> x, In3<T> dy, View3<T> dx, const AttentionState<T>& state,
                Workspace& workspace, compute_t<T> beta = 0) const;

  // Cross-attention (full or exact attention with separate q and k): queries from x
  // [batch, Lq, d_model], keys and values from memory [batch, Lk, d_model]; no
  // causal mask; call.key_valid masks memory positions. backward_cross: dx =
  // beta * dx + dL/dx as backward does; dmemory += dL/dmemory always (a memory
  // is read by every decoder layer, whose gradients gather in one buffer).
  void forward_cross(In3<T> x, In3<T> memory, View3<T> y, const AttentionLayerCall& call,
                     AttentionState<T>& state, Workspace& workspace, Save save = Save::All) const;
  void backward_cross(In3<T> x, In3<T> memory, In3<T> dy, View3<T> dx, View3<T> dmemory,
                      const AttentionState<T>& state, Workspace& workspace,
                      compute_t<T> beta = 0) const;

  // Decoding with caches, one position per sequence, no dropout.
  // start_cache: sizes `cache` for `capacity` positions and fills positions
  // [0, min(length, capacity)) from a whole input x [batch, length, d_model] with the call's
  // key (LSH: its rotations and buckets; key_valid as in forward), as forward
  // on x would see them. step: the key and value of x [batch, d_model] are
  // written at position positions(b) of row b (max_position: the largest),
  // then its query attends to the cached positions its mask allows, exactly
  // as forward on positions 0..positions(b) attends from the last one
  // (causal; local: its chunk and the n_before chunks before it; LSH: its
  // buckets' windows, lsh_attention_step); y [batch, d_model]. An empty
  // `positions` puts every row at max_position (not for LSH). The second
  // form: one position for every row, with separate q and k caches.
  // step_cross: over keys and values from project_memory, leaving out
  // positions where key_valid is 0. With beta, y = beta y + the output (a
  // residual added by the output projection's product: no launch of its own).
  // With `norm` (a pre-norm block's layer norm), the steps attend from
  // LayerNorm(x) instead of x; a few rows take the layer norm and the q, k and
  // v projections in one launch and the output projection in another
  // (ops/rows_linear.hpp, REFORMER_STEP_PRODUCTS).
  void start_cache(In3<T> x, const AttentionLayerCall& call, Index capacity,
                   AttentionCache<T>& cache, Workspace& workspace) const;
  void step(In2<T> x, AttentionCache<T>& cache,
            Kokkos::View<const Index*, Layout, MemSpace> positions, Index max_position, View2<T> y,
            Workspace& workspace, T beta = T(0), const ops::RowNorm<T>& norm = {}) const;
  void step(In2<T> x, View3<T> k_cache, View3<T> v_cache, Index position, View2<T> y,
            Workspace& workspace, T beta = T(0), const ops::RowNorm<T>& norm = {}) const;
  void step_cross(In2<T> x, In3<T> k, In3<T> v,
                  Kokkos::View<const int**, Layout, MemSpace> key_valid, View2<T> y,
                  Workspace& workspace, T beta = T(0), const ops::RowNorm<T>& norm = {}) const;
  // k = memory W_k, v = memory W_v, each [batch, Lk, heads * d_head].
  void project_memory(In3<T> memory, View3<T> k, View3<T> v) const;

  const AttentionLayerConfig& config() const { return config_; }

 private:
  void require_cacheable(const char* op) const;
  // Keys (normalised when shared) and values of rows x [n, d_model] into
  // k and v [n, heads * d_head]; q gets the queries when it is not empty.
  // Shared q/k with k empty: only q (the decoding step's cache write forms
  // the keys from it).
  void project_keys(In2<T> x, View2<T> q, View2<T> k, View2<T> v, Workspace& workspace) const;
  // A decoding step's q (and k, v when not empty) from LayerNorm(x) (x when
  // norm is empty), and y = a W_o + beta y: rows_linear for a few rows when
  // REFORMER_STEP_PRODUCTS is fused, else the layer norm and vendor products.
  void step_projections(In2<T> x, const ops::RowNorm<T>& norm, View2<T> q, View2<T> k, View2<T> v,
                        Workspace& workspace) const;
  void step_output(In2<T> a, View2<T> y, T beta) const;
  void run(In3<T> x, In3<T> memory, View3<T> y, AttentionState<T>& state, Workspace& workspace,
           Save save, bool reuse_plan) const;
  double attention_rate(const AttentionLayerCall& call) const;  // 0 unless training
  double output_rate(const AttentionLayerCall& call) const;
  AttentionDropout attention_dropout(const AttentionLayerCall& call) const;  // on the probabilities
  void attention_backward(const AttentionState<T>& state, In3<T> dy, View2<T> dq, View2<T> dk,
                          View2<T> dv, Workspace& workspace) const;

  AttentionLayerConfig config_;
  Parameter<param_t<T>>* w_q_ = nullptr;  // or w_qk
  Parameter<param_t<T>>* w_k_ = nullptr;  // null when q and k are shared
  Parameter<param_t<T>>* w_v_ = nullptr;
  Parameter<param_t<T>>* w_o_ = nullptr;
};

}  // namespace reformer::attention
