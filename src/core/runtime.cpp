#include "reformer/core/runtime.hpp"

#include "reformer/core/huge_pages.hpp"
#include "reformer/core/memory_tracker.hpp"
#include "reformer/core/types.hpp"

#include <cstdlib>
#include <fstream>
#include <sstream>

#if defined(KOKKOS_ENABLE_CUDA)
#include <cuda_runtime.h>
#elif defined(KOKKOS_ENABLE_HIP)
#include <hip/hip_runtime.h>
#endif

namespace reformer {

Runtime::Runtime(const RuntimeOptions& options) {
  if (!Kokkos::is_initialized()) {
    // Without this Kokkos' OpenMP backend warns on every start. No pinning is the
    // safe default on shared machines; set OMP_PROC_BIND=spread OMP_PLACES=threads
    // on a dedicated node for speed.
    setenv("OMP_PROC_BIND", "false", /*overwrite=*/0);
    compat::initialize({options.num_threads, options.device_id});
    owns_kokkos_ = true;
  }
  // After initialize: Kokkos resets the tool callbacks while it starts. The
  // tracker chains to the huge-page hook registered before it.
  advise_huge_pages_for_host_allocations();
  if (options.track_memory) MemoryTracker::instance().install();
}

Runtime::~Runtime() {
  MemoryTracker::instance().uninstall();
  if (owns_kokkos_) Kokkos::finalize();
}

namespace {

std::string device_description() {
  std::ostringstream out;
#if defined(KOKKOS_ENABLE_CUDA)
  int device = 0;
  cudaDeviceProp prop{};
  if (cudaGetDevice(&device) == cudaSuccess &&
      cudaGetDeviceProperties(&prop, device) == cudaSuccess) {
    out << "CUDA device " << device << ": " << prop.name << ", compute capability " << prop.major
        << "." << prop.minor << ", "
        << format_bytes(static_cast<std::int64_t>(prop.totalGlobalMem));
  } else {
    out << "CUDA device not available";
  }
#elif defined(KOKKOS_ENABLE_HIP)
  int device = 0;
  hipDeviceProp_t prop{};
  if (hipGetDevice(&device) == hipSuccess && hipGetDeviceProperties(&prop, device) == hipSuccess) {
    out << "HIP device " << device << ": " << prop.name << " (" << prop.gcnArchName << "), "
        << format_bytes(static_cast<std::int64_t>(prop.totalGlobalMem));
  } else {
    out << "HIP device not available";
  }
#else
  out << "none (host only)";
#endif
  return out.str();
}

}  // namespace

std::int64_t available_memory_bytes() {
#if defined(KOKKOS_ENABLE_CUDA)
  size_t free_bytes = 0, total = 0;
  if (cudaMemGetInfo(&free_bytes, &total) == cudaSuccess) return std::int64_t(free_bytes);
#elif defined(KOKKOS_ENABLE_HIP)
  size_t free_bytes = 0, total = 0;
  if (hipMemGetInfo(&free_bytes, &total) == hipSuccess) return std::int64_t(free_bytes);
#else
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  std::int64_t kib = 0;
  std::string unit;
  while (meminfo >> key >> kib >> unit)
    if (key == "MemAvailable:") return kib * 1024;
#endif
  return -1;  // unknown
}

BackendInfo backend_info() {
  BackendInfo info;
  info.kokkos_version = compat::kokkos_version_string();
#if defined(KOKKOS_ENABLE_SERIAL)
  info.backends.push_back("Serial");
#endif
#if defined(KOKKOS_ENABLE_OPENMP)
  info.backends.push_back("OpenMP");
#endif
#if defined(KOKKOS_ENABLE_CUDA)
  info.backends.push_back("CUDA");
#endif
#if defined(KOKKOS_ENABLE_HIP)
  info.backends.push_back("HIP");
#endif
  info.default_execution_space = ExecSpace::name();
  info.default_memory_space = MemSpace::name();
  info.concurrency = ExecSpace::concurrency();
  info.device = device_description();
  return info;
}

}  // namespace reformer
