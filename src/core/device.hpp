// (Private to the library: it includes the CUDA or HIP runtime headers.)
// What differs between backends outside the kernels: the list of enabled
// backends, the GPU vendor and default stream, the device's name, and the
// memory that is still free. This is the
// one place with backend #ifs besides the Kokkos version checks in
// kokkos_compat.hpp.
#pragma once

#include "reformer/core/kokkos_compat.hpp"
#include "reformer/core/memory_tracker.hpp"
#include "reformer/core/types.hpp"

#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#if defined(KOKKOS_ENABLE_CUDA)
#include <cuda_runtime.h>
#elif defined(KOKKOS_ENABLE_HIP)
#include <hip/hip_runtime.h>
#endif

namespace reformer::device {

// Page-locked host memory for staging device buffers (MPI without GPU
// support); plain host memory on host backends.
#if defined(KOKKOS_ENABLE_CUDA)
using PinnedHostSpace = Kokkos::CudaHostPinnedSpace;
#elif defined(KOKKOS_ENABLE_HIP)
using PinnedHostSpace = Kokkos::Experimental::HIPHostPinnedSpace;
#else
using PinnedHostSpace = Kokkos::HostSpace;
#endif

// The GPU vendor of this build (whose BLAS ops/tpls/device_blas.cpp loads).
enum class GpuVendor { None, Nvidia, Amd };
#if defined(KOKKOS_ENABLE_CUDA)
constexpr GpuVendor kGpuVendor = GpuVendor::Nvidia;
#elif defined(KOKKOS_ENABLE_HIP)
constexpr GpuVendor kGpuVendor = GpuVendor::Amd;
#else
constexpr GpuVendor kGpuVendor = GpuVendor::None;
#endif

// The stream of the default execution space instance (cudaStream_t or
// hipStream_t), which every kernel of the project runs on; null on host
// backends.
inline void* default_stream() {
#if defined(KOKKOS_ENABLE_CUDA)
  return ExecSpace().cuda_stream();
#elif defined(KOKKOS_ENABLE_HIP)
  return ExecSpace().hip_stream();
#else
  return nullptr;
#endif
}

// GPUs this process can see; 0 on host backends.
inline int device_count() {
  int count = 0;
#if defined(KOKKOS_ENABLE_CUDA)
  if (cudaGetDeviceCount(&count) != cudaSuccess) count = 0;
#elif defined(KOKKOS_ENABLE_HIP)
  if (hipGetDeviceCount(&count) != hipSuccess) count = 0;
#endif
  return count;
}

// Backends this binary was built with: "Serial", "OpenMP", "CUDA", "HIP".
inline std::vector<std::string> enabled_backends() {
  std::vector<std::string> backends;
#if defined(KOKKOS_ENABLE_SERIAL)
  backends.push_back("Serial");
#endif
#if defined(KOKKOS_ENABLE_OPENMP)
  backends.push_back("OpenMP");
#endif
#if defined(KOKKOS_ENABLE_CUDA)
  backends.push_back("CUDA");
#endif
#if defined(KOKKOS_ENABLE_HIP)
  backends.push_back("HIP");
#endif
  return backends;
}

// GPU name and memory, or "none (host only)".
inline std::string description() {
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

// Bytes the host can still allocate: MemAvailable from /proc/meminfo; -1 if
// unknown.
inline std::int64_t host_free_memory_bytes() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key, unit;
  std::int64_t kib = 0;
  while (meminfo >> key >> kib >> unit)
    if (key == "MemAvailable:") return kib * 1024;
  return -1;
}

// Bytes that can still be allocated in the default memory space: free device
// memory on GPUs, the host's otherwise; -1 if unknown.
inline std::int64_t free_memory_bytes() {
#if defined(KOKKOS_ENABLE_CUDA)
  size_t free_bytes = 0, total = 0;
  if (cudaMemGetInfo(&free_bytes, &total) == cudaSuccess) return std::int64_t(free_bytes);
#elif defined(KOKKOS_ENABLE_HIP)
  size_t free_bytes = 0, total = 0;
  if (hipMemGetInfo(&free_bytes, &total) == hipSuccess) return std::int64_t(free_bytes);
#else
  return host_free_memory_bytes();
#endif
  return -1;
}

}  // namespace reformer::device
