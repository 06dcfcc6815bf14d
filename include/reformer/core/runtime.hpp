// Process-wide setup: Kokkos initialisation, the memory tracker, the setup
// steps of higher layers, and a description of the backend the binary was
// built for.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace reformer {

struct RuntimeOptions {
  int num_threads = -1;  // host threads; -1: Kokkos' choice (OMP_NUM_THREADS)
  int device_id = -1;    // GPU ordinal; -1: the node-local rank modulo the GPUs under
                         // mpirun (one GPU per process), else Kokkos' choice
  bool track_memory = true;
};

// Initialises Kokkos (unless it already is), installs the memory tracker and
// runs every registered setup step; finalises Kokkos on destruction if it
// initialised it. All Views must be gone by then. With REFORMER_KERNEL_PROFILE
// set, it also times every kernel and writes the table to that file when it
// ends (core/kernel_profile.hpp).
class Runtime {
 public:
  explicit Runtime(const RuntimeOptions& options = {});
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

 private:
  bool owns_kokkos_ = false;
  std::string kernel_profile_path_;  // REFORMER_KERNEL_PROFILE, or empty
};

// A setup step of a higher layer that must run once Kokkos is initialised and
// before that layer's first kernel (ops makes a host BLAS sequential: core
// cannot call ops). Every Runtime runs the registered steps after it has
// initialised Kokkos; a step registered after a Runtime was built runs at once.
// Steps must be idempotent. Layers register from a static initialiser of the
// source file that holds the code needing the step, so the step is linked
// whenever that code is (ops/gemm.cpp for the host BLAS).
bool register_runtime_setup(void (*setup)());

struct BackendInfo {
  std::string kokkos_version;           // "3.4.1"
  std::vector<std::string> backends;    // enabled at build time: "Serial", "OpenMP", ...
  std::string default_execution_space;  // Kokkos' name of the space kernels run in
  std::string default_memory_space;
  int concurrency = 0;     // threads, or GPU threads in flight
  std::string device;      // GPU name and memory, or "none (host only)"
  std::string cpu_target;  // cpu_target_description()
};

// The host vector unit this binary was compiled for and the register block of
// its tile kernels (core/cpu_target.hpp), e.g. "AVX2, 32-byte vectors, 16
// registers; float tile blocks 4 x 16". On GPU builds the blocks are the GPU's.
std::string cpu_target_description();

// Requires an initialised Kokkos.
BackendInfo backend_info();

// Bytes that can still be allocated in the default memory space: free device
// memory on GPUs, MemAvailable from /proc/meminfo on the host.
std::int64_t available_memory_bytes();

}  // namespace reformer
