// `reformer info`: the whole chain (Kokkos, backend, device, memory tracker,
// HDF5) exercised end to end.
#include "cli/commands.hpp"

#include "reformer/attention/chunked_scratch.hpp"
#include "reformer/attention/exact.hpp"
#include "reformer/config/run_config.hpp"
#include "reformer/core/cpu_target.hpp"
#include "reformer/core/distributed.hpp"
#include "reformer/core/error.hpp"
#include "reformer/core/memory_tracker.hpp"
#include "reformer/core/runtime.hpp"
#include "reformer/core/types.hpp"
#include "reformer/ops/device_blas.hpp"
#include "reformer/ops/gemm.hpp"
#include "reformer/ops/rows_linear.hpp"

#include <hdf5.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>

namespace reformer::cli {
namespace {

int run_info(const GlobalOptions& global) {
  Runtime runtime({global.threads, -1, true});
  const BackendInfo info = backend_info();
  std::string backends;
  for (const auto& b : info.backends) backends += (backends.empty() ? "" : ", ") + b;
  unsigned h5_major = 0, h5_minor = 0, h5_release = 0;
  H5get_libversion(&h5_major, &h5_minor, &h5_release);

  std::printf("Reformer %s\n", REFORMER_VERSION);
  std::printf("  Kokkos             %s\n", info.kokkos_version.c_str());
  std::printf("  backends           %s\n", backends.c_str());
  std::printf("  execution space    %s (concurrency %d)\n", info.default_execution_space.c_str(),
              info.concurrency);
  std::printf("  memory space       %s\n", info.default_memory_space.c_str());
  std::printf("  device             %s\n", info.device.c_str());
  std::printf("  host vector unit   %s\n", info.cpu_target.c_str());
  std::printf("  host bf16 dot      %s\n", CpuTarget::bf16_dot_product
                                               ? CpuTarget::bf16_dot_name
                                               : "none (bf16 converted to float in registers)");
  // The host's bf16 x float32 products (ops::HostBf16Gemm; REFORMER_BF16_GEMM).
  std::printf("  host bf16 GEMM     %s\n", ops::host_bf16_gemm_block());
  const char* set = std::getenv("REFORMER_BLAS_CORE_SET");
  std::printf(
      "  host BLAS          %s%s\n", ops::host_blas_description().c_str(),
      set ? " (OPENBLAS_CORETYPE set by reformer: OpenBLAS fell back to a generic core)" : "");
  // LSH and local attention's kernels (core/team_scratch.hpp; REFORMER_CHUNKED_KERNEL), and
  // one team's scratch at the default chunk 64, n_before 1, d_head 64.
  const auto shape = chunked_kernel_shape();
  const auto scratch = attention::chunked_scratch_bytes(shape, 64, 1, 64, !kHostMemory);
  std::printf(
      "  chunked attention  %s; team scratch at chunk 64, d_head 64: %s forward, "
      "%s backward%s\n",
      chunked_kernel_shape_name(shape), format_bytes(scratch.forward).c_str(),
      format_bytes(scratch.backward).c_str(),
      kHostMemory ? ""
      : scratch.gpu_forward_level + scratch.gpu_backward_level == 0
          ? " (level 0)"
          : " (level 1: a pool in device memory)");
  // Where the chunked kernels' products run (REFORMER_CHUNK_PRODUCTS) and, in the
  // batched shape, the slice budget (REFORMER_CHUNK_SLICE_MIB).
  if (attention::chunk_products() == attention::ChunkProducts::batched)
    std::printf("  chunk products     batched (strided-batched products, slices of at most %s)\n",
                format_bytes(std::int64_t(attention::chunk_slice_budget())).c_str());
  else
    std::printf("  chunk products     fused (in the chunked kernels' teams)\n");
  // A run's default feed-forward and loss chunks on this backend
  // (config::run_model_defaults; "auto": train/chunk_choice.hpp).
  {
    const auto m = config::run_model_defaults();
    auto rows = [](Index chunk, const char* all) {
      return chunk == kAutoChunk ? std::string("\"auto\"")
             : chunk == 0        ? std::string(all)
                                 : std::to_string(chunk) + " rows";
    };
    std::printf(
        "  run chunks         feed-forward %s, loss %s by default (\"auto\": the largest chunks "
        "that do not raise the predicted peak)\n",
        rows(m.ff_chunk, "all rows at once").c_str(), rows(m.loss_chunk, "all rows").c_str());
  }
  // The elementwise passes inside the fused kernels' tiles (REFORMER_TILE_LOOPS).
  std::printf("  tile loops         %s\n", tile_loops() == TileLoops::elements
                                               ? "elements (a thread per element)"
                                               : "rows (a thread per row, vectorised)");
  // Row-wise kernels (REFORMER_ROW_KERNELS).
  if (row_kernels() == RowKernels::lanes)
    std::printf("  row kernels        lanes (a row per %d vector lanes, %d rows per team)\n",
                GpuTarget::row_lanes, GpuTarget::rows_per_team);
  else
    std::printf("  row kernels        threads (a thread per row, vectorised)\n");
  // Exact attention's tiling (REFORMER_EXACT_TILES) and its kernels' team
  // scratch at d_head 64.
  {
    const auto tiles = exact_tiles();
    const auto info = attention::exact_tiling_info(tiles, 64);
    auto kernel = [](const attention::ExactKernelTiles& k) {
      return std::to_string(k.queries) + " x " + std::to_string(k.keys) + " (" +
             std::to_string(k.block_rows) + " x " + std::to_string(k.block_cols) + " blocks, " +
             format_bytes(std::int64_t(k.scratch_bytes)) + ")";
    };
    std::printf(
        "  exact tiles        %s: forward %s, backward keys %s, queries %s at d_head 64; "
        "GPU teams of %s threads\n",
        exact_tiles_name(tiles), kernel(info.forward).c_str(), kernel(info.keys).c_str(),
        kernel(info.queries).c_str(),
        info.team_size > 0 ? std::to_string(info.team_size).c_str() : "AUTO");
  }
  // Where exact attention's products run (REFORMER_EXACT_PRODUCTS).
  if (attention::exact_products() == attention::ExactProducts::batched)
    std::printf(
        "  exact products     batched (strided-batched products on slices of query rows, at "
        "most %s of scores; bf16 tensors keep the fused kernels)\n",
        format_bytes(std::int64_t(attention::chunk_slice_budget())).c_str());
  else
    std::printf("  exact products     fused (in the tiled kernels' teams)\n");
  // Where a decoding step's products run (REFORMER_STEP_PRODUCTS).
  if (ops::step_products() == ops::StepProducts::fused)
    std::printf(
        "  step products      fused (a decoding step of up to %d rows: each sublayer's layer norm, "
        "products, bias and activation in one launch)\n",
        int(ops::kRowsLinearMaxRows));
  else
    std::printf("  step products      vendor (layer norms, the BLAS's products, epilogues)\n");
  std::string device_blas;
  try {
    device_blas = ops::device_blas_info().description;
  } catch (const ConfigError& e) {
    device_blas = std::string("error: ") + e.what();
  }
  std::printf("  device BLAS        %s\n", device_blas.c_str());
  std::printf("  HDF5               %u.%u.%u\n", h5_major, h5_minor, h5_release);
  std::printf("  MPI                %s\n", mpi_description().c_str());

  // A known allocation must show up in the tracker and go away again. Kernels
  // may allocate Kokkos-internal buffers (reduction scratch) that stay alive,
  // so the allocation and the release are each measured on their own.
  auto& tracker = MemoryTracker::instance();
  const std::string space = MemSpace::name();
  constexpr Index n = 1 << 18;  // 1 MiB of float
  const auto before = tracker.space(space).current_bytes;
  std::int64_t allocated = 0, released = 0;
  {
    ScopedMemoryPhase phase("info test allocation");
    View1<float> probe("info_probe", n);
    allocated = tracker.space(space).current_bytes - before;
    Kokkos::deep_copy(probe, 1.0f);
    float sum = 0;
    Kokkos::parallel_reduce(
        "info_probe_sum", range(n), KOKKOS_LAMBDA(Index i, float& acc) { acc += probe(i); }, sum);
    if (sum != static_cast<float>(n)) {
      std::fprintf(stderr, "error: test kernel summed %g, expected %lld\n", sum,
                   static_cast<long long>(n));
      return 1;
    }
    released = tracker.space(space).current_bytes;
  }
  released -= tracker.space(space).current_bytes;
  std::printf("  memory tracker     test allocation of %s in %s: counted %s, released %s\n",
              format_bytes(n * 4).c_str(), space.c_str(), format_bytes(allocated).c_str(),
              format_bytes(released).c_str());
  std::printf("\n%s", tracker.report().c_str());
  if (allocated != n * 4 || released != n * 4) {
    std::fprintf(stderr,
                 "error: memory tracker counted %lld and released %lld bytes, expected %lld\n",
                 static_cast<long long>(allocated), static_cast<long long>(released),
                 static_cast<long long>(n * 4));
    return 1;
  }
  return 0;
}

}  // namespace

void add_info_command(CLI::App& app, const GlobalOptions& global, std::function<int()>& run) {
  CLI::App* info = app.add_subcommand(
      "info", "Print the Kokkos version, backends, device and a memory-tracker check");
  info->callback([&run, &global] { run = [&global] { return run_info(global); }; });
}

}  // namespace reformer::cli
