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
                         Index d_head, Index length, double s) {
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
  if (!kHostMemory && ops::device_blas_info().loaded) {
    double bytes = 0;
    for (const MixedProduct& p : products) {
      const double panel = std::min(p.rows, std::max(64.0, double(1 << 18) / std::max(p.n, p.k)));
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

}  // namespace sweep

void check_sweep_precision(const std::string& precision) {
  require<ConfigError>(precision == "float32" || precision == "bf16",
                       "memory sweep: precision is '", precision,
                       "' but must be \"float32\" or \"bf16\"");
}

std::int64_t StepMemory::peak() const { return std::max({forward, loss, backward, optimizer}); }

std::int64_t RunMemory::total() const {
  return sweep::saturated_bytes(double(state) + double(peak));
}

}  // namespace reformer::train
