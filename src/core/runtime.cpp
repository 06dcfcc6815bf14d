#include "reformer/core/runtime.hpp"
#include "reformer/core/target_description.hpp"

#include "core/device.hpp"
#include "reformer/core/distributed.hpp"
#include "reformer/core/huge_pages.hpp"
#include "reformer/core/kernel_profile.hpp"
#include "reformer/core/memory_tracker.hpp"
#include "reformer/core/tile_multiply.hpp"
#include "reformer/core/types.hpp"

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <vector>

namespace reformer {
namespace {

// The registered setup steps, and whether a Runtime has run them (a step
// registered later runs at once). Function-local statics: registration runs
// from other files' static initialisers, in an order C++ does not fix.
struct RuntimeSetups {
  std::mutex mutex;
  std::vector<void (*)()> steps;
  bool ran = false;
};

RuntimeSetups& runtime_setups() {
  static RuntimeSetups setups;
  return setups;
}

void run_runtime_setups() {
  RuntimeSetups& setups = runtime_setups();
  const std::lock_guard<std::mutex> lock(setups.mutex);
  for (const auto step : setups.steps) step();
  setups.ran = true;
}

}  // namespace

bool register_runtime_setup(void (*setup)()) {
  RuntimeSetups& setups = runtime_setups();
  const std::lock_guard<std::mutex> lock(setups.mutex);
  setups.steps.push_back(setup);
  if (setups.ran) setup();
  return true;
}

Runtime::Runtime(const RuntimeOptions& options) {
  if (!Kokkos::is_initialized()) {
    // Without this Kokkos' OpenMP backend warns on every start. No pinning is the
    // safe default on shared machines; set OMP_PROC_BIND=spread OMP_PLACES=threads
    // on a dedicated node for speed.
    setenv("OMP_PROC_BIND", "false", /*overwrite=*/0);
    // Several processes on a node (mpirun): one GPU each, by node-local rank.
    int device = options.device_id;
    const int gpus = device::device_count();
    if (device < 0 && gpus > 0 && Communicator::world().size() > 1)
      device = Communicator::world().local_rank() % gpus;
    compat::initialize({options.num_threads, device});
    owns_kokkos_ = true;
  }
  // After initialize: Kokkos resets the tool callbacks while it starts. The
  // tracker chains to the huge-page hook registered before it.
  advise_huge_pages_for_host_allocations();
  if (options.track_memory) MemoryTracker::instance().install();
  // After the tracker, so that the profile chains to it (and goes first).
  kernel_profile_path_ = install_kernel_profile_from_environment();
  run_runtime_setups();
}

Runtime::~Runtime() {
  if (!kernel_profile_path_.empty()) {
    if (!write_kernel_profile(kernel_profile_path_))
      std::fprintf(stderr,
                   "reformer: could not write the kernel profile to '%s' "
                   "(REFORMER_KERNEL_PROFILE)\n",
                   kernel_profile_path_.c_str());
    KernelProfile::instance().uninstall();
  }
  MemoryTracker::instance().uninstall();
  if (owns_kokkos_) Kokkos::finalize();
}

std::string describe_cpu_target(const char* name, int vector_bytes, int vector_registers,
                                int block_rows, int block_cols) {
  return std::string(name) + ", " + std::to_string(vector_bytes) + "-byte vectors, " +
         std::to_string(vector_registers) + " registers; float tile blocks " +
         std::to_string(block_rows) + " x " + std::to_string(block_cols);
}

std::string cpu_target_description() {
  using F = TileTraits<float>;
  return describe_cpu_target(CpuTarget::name, CpuTarget::vector_bytes, CpuTarget::vector_registers,
                             F::block_rows, F::block_cols);
}

std::int64_t available_memory_bytes() { return device::free_memory_bytes(); }

BackendInfo backend_info() {
  BackendInfo info;
  info.kokkos_version = compat::kokkos_version_string();
  info.backends = device::enabled_backends();
  info.default_execution_space = ExecSpace::name();
  info.default_memory_space = MemSpace::name();
  info.concurrency = ExecSpace().concurrency();  // the instance form (Kokkos 5 drops the static)
  info.device = device::description();
  info.cpu_target = cpu_target_description();
  return info;
}

}  // namespace reformer
