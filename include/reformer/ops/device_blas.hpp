// The vendor BLAS of a GPU build (issue 34): cuBLAS on CUDA, rocBLAS on HIP,
// loaded at run time (dlopen), so that a binary built with one CUDA release
// runs its dense products through the cuBLAS that the GPU machine has (the lent
// machines carry cuBLAS 13 in PyTorch's wheels; the build has CUDA 11.8).
//
// Where the library is found: the file named by REFORMER_CUBLAS (CUDA) or
// REFORMER_ROCBLAS (HIP) when that variable is set, which must then load (a
// ConfigError names the variable and the path otherwise); else the first of
// libcublas.so, .so.13, .so.12, .so.11 (librocblas.so, .so.4, .so.3) that the
// dynamic loader finds. Without one, or on host builds, the products take the
// portable path (ops/gemm.hpp). REFORMER_DEVICE_BLAS=off turns the vendor path
// off (to compare against the portable one). REFORMER_BF16_WEIGHTS picks what
// a product of a bf16 activation and a float32 weight does there: round (the
// default) rounds the weight to bf16 and runs the vendor's bf16 GEMM on tensor
// cores with float32 sums, as torch.autocast does; keep widens the activation
// to float32 and runs sgemm, so that the weight is used as stored (the host
// path's products, at float32's speed).
#pragma once

#include <string>
#include <vector>

namespace reformer::ops {

// What the loader found.
struct DeviceBlasInfo {
  bool device_build = false;   // a CUDA or HIP backend
  bool loaded = false;         // the products on the device use the vendor BLAS
  std::string vendor;          // "cuBLAS", "rocBLAS" or "" (host build)
  std::string library;         // the name or path that loaded
  std::string description;     // one line for `reformer info`
  bool rounds_weights = true;  // REFORMER_BF16_WEIGHTS is not keep
};

// Loads the library on the first call (later calls return the same answer).
// Throws ConfigError when the environment variable names a file that does not
// load or lacks a function the products need.
DeviceBlasInfo device_blas_info();

// Forgets the library (and its handle) and looks again, reading the
// environment again; for tests. Call it outside of products.
DeviceBlasInfo reload_device_blas();

// A shared library found as described above (the loader's building block,
// testable on every build): the file named by the environment variable
// `variable` when it is set and not empty, else the first of `names` that
// loads, else handle == nullptr and `tried` lists what was tried and why not.
struct SharedLibrary {
  void* handle = nullptr;
  std::string name;   // what loaded
  std::string tried;  // "libcublas.so (reason); libcublas.so.13 (reason); ..."
};
SharedLibrary open_shared_library(const char* variable, const std::vector<std::string>& names);

// The address of `symbol` in `library`; ConfigError naming both when absent.
void* shared_library_symbol(const SharedLibrary& library, const char* symbol);

}  // namespace reformer::ops
