#include "reformer/train/memory_sweep.hpp"

#include "reformer/attention/exact.hpp"
#include "reformer/ops/device_blas.hpp"
#include "train/sweep_detail.hpp"

#include <algorithm>

namespace reformer::train {
namespace sweep {

// Uniform random ids and targets below vocab, keyed by position (a free
// function: nvcc limits which member functions may hold a device lambda).
void fill_random_tokens(Kokkos::View<int**, Layout, MemSpace> ids,
                        Kokkos::View<int**, Layout, MemSpace> targets, Index vocab) {
  const Index length = ids.extent(1);
  const auto v = std::uint64_t(vocab);
  Kokkos::parallel_for(
      "synthetic_ids", range(ids.extent(0) * length), KOKKOS_LAMBDA(Index i) {
        ids(i / length, i % length) = int(random_bits({1, 1}, i) % v);
        targets(i / length, i % length) = int(random_bits({1, 2}, i) % v);
      });
}

std::int64_t phase_peak(const std::vector<PhaseMemory>& phases, const std::string& name,
                        const std::string& space, std::int64_t base) {
  std::int64_t peak = base;
  for (const auto& p : phases)
    if (p.phase == name && p.space == space) peak = std::max(peak, p.peak_bytes);
  return peak - base;
}

// Bytes of the backend's own allocations in a composition: Kokkos names them
// "[unlabeled]" (host thread scratch) or "Kokkos::..." (a GPU's team scratch
// pool, "Kokkos::CudaSpace::TeamScratchMemory", and internal buffers); no View
// of ours has such a label.
std::int64_t backend_bytes(const std::vector<LabelBytes>& composition) {
  std::int64_t bytes = 0;
  for (const auto& entry : composition)
    if (entry.label.empty() || entry.label == "[unlabeled]" ||
        entry.label.rfind("Kokkos::", 0) == 0)
      bytes += entry.bytes;
  return bytes;
}

double chunk_slice_bytes(attention::AttentionKind kind, const attention::LshAttentionConfig& lsh,
                         const attention::LocalAttentionConfig& local, Index batch, Index heads,
                         Index d_head, Index length, double s, double a) {
  if (kind == attention::AttentionKind::Exact) {
    const auto slices = attention::exact_batched_bytes(heads, length, length, std::size_t(s), a < s,
                                                       attention::chunk_slice_budget());
    return double(std::max(slices.forward, slices.backward));
  }
  const bool is_lsh = kind == attention::AttentionKind::Lsh;
  if (attention::chunk_products() != attention::ChunkProducts::batched ||
      !(is_lsh || kind == attention::AttentionKind::Local))
    return 0.0;
  const auto g = is_lsh ? attention::lsh_chunk_geometry(lsh, length)
                        : attention::local_chunk_geometry(local, length);
  const auto slices =
      attention::chunk_batched_bytes(g.chunk, g.n_before, d_head, batch * heads * g.n_chunks,
                                     std::size_t(s), attention::chunk_slice_budget());
  return double(std::max(slices.forward, slices.backward));
}

double mixed_panel_bytes(std::initializer_list<MixedProduct> products) {
  // On a GPU with its vendor BLAS (ops/tpls/device_blas.hpp), a product widens
  // a panel of its bf16 rows ([panel, k]; all of them when they are read
  // transposed) and, for a bf16 result, sums into a float32 panel of C
  // ([panel, n]), panel = rows capped at 2^18 / max(n, k) (at least 64); the
  // largest product's.
  // With the weights rounded to bf16 for the tensor cores
  // (REFORMER_BF16_WEIGHTS=round, the default), a product with a bf16 result
  // widens nothing, and only a sum of several products into a bf16 result
  // (the projections' input gradient) takes the float32 panel of C, of 2^20
  // values (rows capped at 2^20 / max(n, k)); counted for every bf16 result
  // here.
  const auto info = kHostMemory ? ops::DeviceBlasInfo() : ops::device_blas_info();
  if (!kHostMemory && info.loaded) {
    double bytes = 0;
    for (const MixedProduct& p : products) {
      const double panel = std::min(p.rows, std::max(64.0, double(1 << 18) / std::max(p.n, p.k)));
      if (info.rounds_weights && !p.float_result) {
        const double sum_panel =
            std::min(p.rows, std::max(64.0, double(1 << 20) / std::max(p.n, p.k)));
        bytes = std::max(bytes, sum_panel * p.n * 4);
        continue;
      }
      const double widened = p.transposed ? p.rows * p.k : panel * p.k;
      bytes = std::max(bytes, (widened + (p.float_result ? 0.0 : panel * p.n)) * 4);
    }
    return bytes;
  }
  // Elsewhere they pack (or widen) their operands into 2^18 float32 values
  // (ops/gemm.hpp mixed_matmul): one set per host thread, or up to three on a
  // device.
  const double panel_sets =
      kHostMemory ? double(Kokkos::DefaultHostExecutionSpace().concurrency()) : 3.0;
  return panel_sets * (1 << 18) * 4;
}

double exact_bf16_dq_bytes(Index batch, Index heads, double rows, double inner, double a,
                           double s) {
  const bool one_pass =
      attention::exact_backward_one_pass(batch * heads, ExecSpace().concurrency());
  return a < s && one_pass ? rows * inner * s : 0.0;
}

void check_point(const SweepOptions& options, Index batch, Index length) {
  require<ConfigError>(options.dtype == "float" || options.dtype == "double",
                       "memory sweep: dtype is '", options.dtype,
                       "' but must be \"float\" or \"double\"");
  check_sweep_precision(options.precision);
  require<ConfigError>(options.precision == "float32" || options.dtype == "float",
                       "memory sweep: precision bf16 keeps float32 parameters and needs dtype "
                       "float, not '",
                       options.dtype, "'");
  require<ConfigError>(batch > 0 && length > 0, "memory sweep: batch ", batch, " and length ",
                       length, " must be positive");
}

// The Reformer LM's stack of blocks (also the encoder of other families):
// its terms of a training step, from the shapes (docs/memory.md). Every value
// in bytes.
EncoderStackMemory encoder_stack_memory(const models::ReformerConfig& c, Index batch, Index length,
                                        double s, double a) {
  using attention::AttentionKind;
  // Bytes of a compute value (s: row statistics, logsumexps, key scales, the
  // loss's logits) and of a stored activation (a: bf16 or the same as s).
  const double x = double(batch) * length, d = c.d_model;
  const double heads = c.heads, inner = heads * c.d_head, f = c.d_ff;
  const double scores = double(batch) * heads * double(length) * length;  // one L x L per head
  const double ff_rows = c.ff_chunk > 0 ? std::min(double(c.ff_chunk), x) : x;
  // Per kind (the largest layer of the stack decides the workspace); bytes.
  double stored = 0, plans = 0, scratch = 0, ws_forward = 0, ws_backward = 0;
  // The batched chunk shape's own workspace (attention/chunked_scratch.hpp):
  // its largest slice over the LSH and local layers.
  double chunk_slices = 0;
  for (Index i = 0; i < c.layers; ++i) {
    const AttentionKind kind = c.layer_kind(i);
    const auto layer = c.attention_config(i);
    const double k_sep = layer.shares_qk() ? 0 : 1;
    const double rounds = kind == AttentionKind::Lsh ? double(c.lsh.n_hashes) : 0;
    const bool full = kind == AttentionKind::Full;
    const bool dropout = c.attention_dropout > 0;
    // What AttentionState keeps (q, k, v, attended; lse; full: P) and the plan.
    const double attention_state =
        x * inner * (3 + k_sep) * a + (full ? scores * a : x * heads * s);
    const double plan_bytes = 3 * rounds * x * heads * 4;  // buckets, perm, undo (int)
    plans += plan_bytes;
    if (!c.reversible) stored += 2 * x * d * a + attention_state;  // + block inputs
    scratch = std::max(scratch, c.reversible ? attention_state : 0.0);
    chunk_slices = std::max(chunk_slices, chunk_slice_bytes(kind, c.lsh, c.local, batch, c.heads,
                                                            c.d_head, length, s, a));
    // Temporaries of the attention kernels.
    const double shared_keys =
        (full || kind == AttentionKind::Exact) && !k_sep ? (2 * x * inner + x * heads) * a : 0;
    double fwd = 0, bwd = 0;
    if (kind == AttentionKind::Lsh) {
      // key scale, per-round out and lse; key scale, D, dk
      fwd = x * heads * s + rounds * x * (inner * a + heads * s);
      bwd = 2 * x * heads * s + x * inner * a;
    } else if (kind == AttentionKind::Local || kind == AttentionKind::Exact) {
      bwd = x * heads * s;  // D
      if (kind == AttentionKind::Exact) bwd += exact_bf16_dq_bytes(batch, c.heads, x, inner, a, s);
      fwd = shared_keys;
    } else if (a == s) {
      fwd = (4 * x * inner + (dropout ? scores : 0)) * a + shared_keys;  // per-head copies
      bwd = (7 * x * inner + scores + (dropout ? scores : 0) + x * inner) * a + shared_keys;
    } else {
      // bf16: the per-head copies and the scores are float32 (full.cpp), the
      // dropout mask's probabilities bf16.
      fwd = (4 * x * inner + scores) * s + (dropout ? scores * a : 0) + shared_keys;
      bwd = (7 * x * inner + scores + x * inner) * s + (dropout ? scores * a : 0) + shared_keys;
    }
    // F's forward: LayerNorm output, F's output, mean and rstd, then the layer
    // (without Save::All its q, k, v, attended, lse and P are temporaries too).
    const double f_frame = 2 * x * d * a + 2 * x * s;
    const double unsaved = c.reversible ? attention_state : 0;
    ws_forward = std::max(ws_forward, f_frame + unsaved + fwd);
    // Backward of F: dLN input, then the layer: dq, dv, (dk), d(attended).
    const double attention_bwd = x * d * a + x * inner * (3 + k_sep) * a + bwd;
    // FF (chunk rows): forward LN out, hidden, out; backward LN out, pre-activation,
    // hidden, d hidden, d out, d LN out; statistics in s.
    const double ff_forward = ff_rows * ((2 * d + f) * a + 2 * s);
    const double ff_backward = ff_rows * ((3 * d + 3 * f) * a + 2 * s);
    ws_forward = std::max(ws_forward, ff_forward);
    const double stats = 2 * x * s;
    if (c.reversible)  // G(y1), then F's recompute and backward
      ws_backward = std::max(
          ws_backward,
          x * d * a + std::max(ff_backward, x * d * a + stats + std::max(fwd, attention_bwd)));
    else  // the upstream gradient, then G's and F's backward
      ws_backward = std::max(ws_backward,
                             x * d * a + std::max(ff_backward, x * d * a + stats + attention_bwd));
  }
  // The products of bf16 activations: the projections and the feed-forward.
  EncoderStackMemory m;
  m.panels =
      a < s ? mixed_panel_bytes({{x, d, inner}, {x, inner, d}, {ff_rows, d, f}, {ff_rows, f, d}})
            : 0.0;
  // The two streams and their gradients, the stored layers or plans, the
  // recompute state and the batched chunk workspace.
  m.alive = 4 * x * d * a + stored + plans + scratch + chunk_slices;
  m.ws_forward = ws_forward;
  m.ws_backward = ws_backward;
  return m;
}

}  // namespace sweep

void check_sweep_precision(const std::string& precision) {
  require<ConfigError>(precision == "float32" || precision == "bf16",
                       "memory sweep: precision is '", precision,
                       "' but must be \"float32\" or \"bf16\"");
}

std::int64_t workspace_reserve(std::int64_t predicted_workspace) {
  return predicted_workspace + (std::int64_t(1) << 16);
}

std::int64_t StepMemory::peak() const { return std::max({forward, loss, backward, optimizer}); }

std::int64_t RunMemory::total() const {
  return sweep::saturated_bytes(double(state) + double(peak));
}

}  // namespace reformer::train
