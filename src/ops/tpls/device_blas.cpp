// The vendor BLAS of GPU builds, loaded at run time (ops/tpls/device_blas.hpp,
// reformer/ops/device_blas.hpp). The few functions of the vendors' C APIs that
// the products use are declared here as function-pointer types, with the
// values of the enums they take, so that no vendor header or library is needed
// to build: the binary links only libdl.
#include "ops/tpls/device_blas.hpp"

#include "core/device.hpp"
#include "ops/kept_buffer.hpp"
#include "ops/panel_rows.hpp"

#include "reformer/core/error.hpp"
#include "reformer/core/instantiate.hpp"
#include "reformer/core/kernel_profile.hpp"
#include "reformer/core/precision.hpp"
#include "reformer/ops/device_blas.hpp"

#include <dlfcn.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <type_traits>
#include <vector>

namespace reformer::ops {

SharedLibrary open_shared_library(const char* variable, const std::vector<std::string>& names) {
  SharedLibrary library;
  const char* path = variable != nullptr ? std::getenv(variable) : nullptr;
  if (path != nullptr && *path != '\0') {
    dlerror();
    library.handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    const char* why = library.handle == nullptr ? dlerror() : nullptr;
    require<ConfigError>(library.handle != nullptr, variable, "=", path,
                         ": the library does not load (", why != nullptr ? why : "no reason given",
                         "); set ", variable,
                         " to the path of the vendor library (for cuBLAS from PyTorch's wheels: "
                         "site-packages/nvidia/cublas/lib/libcublas.so.13), or unset it to search "
                         "the dynamic loader's path");
    library.name = path;
    return library;
  }
  for (const auto& name : names) {
    dlerror();
    library.handle = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (library.handle != nullptr) {
      library.name = name;
      return library;
    }
    const char* why = dlerror();
    library.tried += (library.tried.empty() ? "" : "; ") + name + " (" +
                     (why != nullptr ? why : "no reason given") + ")";
  }
  return library;
}

void* shared_library_symbol(const SharedLibrary& library, const char* symbol) {
  require<ConfigError>(library.handle != nullptr, "shared_library_symbol: no library is loaded (",
                       symbol, " was asked for)");
  dlerror();
  void* address = dlsym(library.handle, symbol);
  const char* why = address == nullptr ? dlerror() : nullptr;
  require<ConfigError>(address != nullptr, library.name, " has no function ", symbol, " (",
                       why != nullptr ? why : "null address",
                       "); it is not the vendor BLAS the products need: point the variable at "
                       "cuBLAS 11 or newer, or rocBLAS 3 or newer");
  return address;
}

}  // namespace reformer::ops

namespace reformer::ops::tpls {
namespace {

// ---- The vendors' C APIs ----------------------------------------------------
// Handles and streams are opaque pointers; the enums are passed as int, which
// is how C passes them. Every status is 0 on success.

// cuBLAS (cublas_api.h and library_types.h of CUDA 11.8; the same values in 12
// and 13).
constexpr int kCublasOpN = 0;           // CUBLAS_OP_N
constexpr int kCublasOpT = 1;           // CUBLAS_OP_T
constexpr int kCudaR32F = 0;            // CUDA_R_32F (cudaDataType)
constexpr int kCudaR16BF = 14;          // CUDA_R_16BF
constexpr int kCublasCompute32F = 68;   // CUBLAS_COMPUTE_32F (cublasComputeType_t)
constexpr int kCublasGemmDefault = -1;  // CUBLAS_GEMM_DEFAULT (cublasGemmAlgo_t)
constexpr int kCublasDefaultMath = 0;   // CUBLAS_DEFAULT_MATH: no TF32 in sgemm
constexpr int kCublasDisallowReducedPrecisionReduction =
    16;  // CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION: sums stay in float32 for a bf16 C
using CublasCreate = int (*)(void** handle);                       // cublasCreate_v2
using CublasDestroy = int (*)(void* handle);                       // cublasDestroy_v2
using CublasSetStream = int (*)(void* handle, void* stream);       // cublasSetStream_v2
using CublasSetMathMode = int (*)(void* handle, int mode);         // cublasSetMathMode
using CublasSgemm = int (*)(void* handle, int transa, int transb,  // cublasSgemm_v2
                            int m, int n, int k, const float* alpha, const float* a, int lda,
                            const float* b, int ldb, const float* beta, float* c, int ldc);
// cublasSgemmStridedBatched / cublasDgemmStridedBatched: strides are long long.
template <class T>
using CublasGemmStridedBatched = int (*)(void* handle, int transa, int transb, int m, int n, int k,
                                         const T* alpha, const T* a, int lda, long long stride_a,
                                         const T* b, int ldb, long long stride_b, const T* beta,
                                         T* c, int ldc, long long stride_c, int batch_count);
using CublasGemmEx = int (*)(void* handle, int transa, int transb,  // cublasGemmEx
                             int m, int n, int k, const void* alpha, const void* a, int a_type,
                             int lda, const void* b, int b_type, int ldb, const void* beta, void* c,
                             int c_type, int ldc, int compute_type, int algo);

// rocBLAS (library/include/internal/rocblas-types.h, rocblas-functions.h and
// rocblas-auxiliary.h; rocblas_int is int32 unless built for ILP64).
constexpr int kRocblasOperationNone = 111;                            // rocblas_operation_none
constexpr int kRocblasOperationTranspose = 112;                       // rocblas_operation_transpose
constexpr int kRocblasF32 = 151;                                      // rocblas_datatype_f32_r
constexpr int kRocblasBF16 = 168;                                     // rocblas_datatype_bf16_r
constexpr int kRocblasGemmAlgoStandard = 0;                           // rocblas_gemm_algo_standard
using RocblasCreate = int (*)(void** handle);                         // rocblas_create_handle
using RocblasDestroy = int (*)(void* handle);                         // rocblas_destroy_handle
using RocblasSetStream = int (*)(void* handle, void* stream);         // rocblas_set_stream
using RocblasSgemm = int (*)(void* handle, int trans_a, int trans_b,  // rocblas_sgemm
                             int m, int n, int k, const float* alpha, const float* a, int lda,
                             const float* b, int ldb, const float* beta, float* c, int ldc);
// rocblas_sgemm_strided_batched / rocblas_dgemm_strided_batched (rocblas_stride: int64).
template <class T>
using RocblasGemmStridedBatched = int (*)(void* handle, int trans_a, int trans_b, int m, int n,
                                          int k, const T* alpha, const T* a, int lda,
                                          std::int64_t stride_a, const T* b, int ldb,
                                          std::int64_t stride_b, const T* beta, T* c, int ldc,
                                          std::int64_t stride_c, int batch_count);
using RocblasGemmEx = int (*)(void* handle, int trans_a, int trans_b,  // rocblas_gemm_ex
                              int m, int n, int k, const void* alpha, const void* a, int a_type,
                              int lda, const void* b, int b_type, int ldb, const void* beta,
                              const void* c, int c_type, int ldc, void* d, int d_type, int ldd,
                              int compute_type, int algo, std::int32_t solution_index,
                              std::uint32_t flags);

// ---- Which vendor this build uses ---------------------------------------------

enum class Vendor { None, Cublas, Rocblas };

constexpr Vendor kVendor = device::kGpuVendor == device::GpuVendor::Nvidia ? Vendor::Cublas
                           : device::kGpuVendor == device::GpuVendor::Amd  ? Vendor::Rocblas
                                                                           : Vendor::None;

enum class Type { F32, BF16 };

struct Api {
  Vendor vendor = Vendor::None;
  SharedLibrary library;
  void* handle = nullptr;
  int (*create)(void**) = nullptr;
  int (*destroy)(void*) = nullptr;
  int (*set_stream)(void*, void*) = nullptr;
  CublasSetMathMode set_math_mode = nullptr;
  CublasSgemm cublas_sgemm = nullptr;
  CublasGemmEx cublas_gemm_ex = nullptr;
  RocblasSgemm rocblas_sgemm = nullptr;
  RocblasGemmEx rocblas_gemm_ex = nullptr;
  // The strided-batched products (chunk attention's batched shape, issue 46):
  // optional, looked up without failing; absent, batched_matmul stays portable.
  void* sgemm_strided_batched = nullptr;
  void* dgemm_strided_batched = nullptr;
};

struct State {
  bool attempted = false;
  DeviceBlasInfo info;
  Api api;
};

std::mutex& state_mutex() {
  static std::mutex mutex;
  return mutex;
}
State& state() {
  static State s;
  return s;
}

template <class F>
F symbol(const SharedLibrary& library, const char* name) {
  return reinterpret_cast<F>(shared_library_symbol(library, name));
}

void destroy_handle(Api& api) {
  if (api.handle != nullptr && api.destroy != nullptr) api.destroy(api.handle);
  api.handle = nullptr;
}

// Fills s.info and s.api (with the caller holding the mutex, which marks the
// state attempted when this returns: a ConfigError is thrown again next time).
void load(State& s) {
  s.info = DeviceBlasInfo();
  s.api = Api();
  if (kVendor == Vendor::None) {
    s.info.description = "none (host build: products use the host BLAS or Kokkos Kernels)";
    return;
  }
  const bool cublas = kVendor == Vendor::Cublas;
  s.info.device_build = true;
  s.info.vendor = cublas ? "cuBLAS" : "rocBLAS";
  const char* variable = cublas ? "REFORMER_CUBLAS" : "REFORMER_ROCBLAS";
  const char* switch_value = std::getenv("REFORMER_DEVICE_BLAS");
  const std::string choice = switch_value != nullptr ? switch_value : "";
  require<ConfigError>(choice.empty() || choice == "on" || choice == "off",
                       "REFORMER_DEVICE_BLAS=", choice,
                       ": must be on or off (off: the products on the device use Kokkos Kernels "
                       "instead of ",
                       s.info.vendor, ")");
  const char* weights_value = std::getenv("REFORMER_BF16_WEIGHTS");
  const std::string weights = weights_value != nullptr ? weights_value : "";
  require<ConfigError>(weights.empty() || weights == "round" || weights == "keep",
                       "REFORMER_BF16_WEIGHTS=", weights,
                       ": must be round or keep (round, the default: a bf16 product rounds its "
                       "float32 weight to bf16 and runs on the vendor's bf16 GEMM, as "
                       "torch.autocast does; keep: the weight as stored, in float32 sgemm)");
  s.info.rounds_weights = weights != "keep";
  if (choice == "off") {
    s.info.description = "off (REFORMER_DEVICE_BLAS=off: products use Kokkos Kernels)";
    return;
  }
  const std::vector<std::string> names =
      cublas ? std::vector<std::string>{"libcublas.so", "libcublas.so.13", "libcublas.so.12",
                                        "libcublas.so.11"}
             : std::vector<std::string>{"librocblas.so", "librocblas.so.4", "librocblas.so.3"};
  Api api;
  api.vendor = kVendor;
  api.library = open_shared_library(variable, names);
  if (api.library.handle == nullptr) {
    s.info.description = "none (no " + s.info.vendor + " found: tried " + api.library.tried +
                         "; set " + variable +
                         " to its path; products use Kokkos Kernels and a portable bf16 loop)";
    return;
  }
  if (cublas) {
    api.create = symbol<CublasCreate>(api.library, "cublasCreate_v2");
    api.destroy = symbol<CublasDestroy>(api.library, "cublasDestroy_v2");
    api.set_stream = symbol<CublasSetStream>(api.library, "cublasSetStream_v2");
    api.set_math_mode = symbol<CublasSetMathMode>(api.library, "cublasSetMathMode");
    api.cublas_sgemm = symbol<CublasSgemm>(api.library, "cublasSgemm_v2");
    api.cublas_gemm_ex = symbol<CublasGemmEx>(api.library, "cublasGemmEx");
    api.sgemm_strided_batched = dlsym(api.library.handle, "cublasSgemmStridedBatched");
    api.dgemm_strided_batched = dlsym(api.library.handle, "cublasDgemmStridedBatched");
  } else {
    api.create = symbol<RocblasCreate>(api.library, "rocblas_create_handle");
    api.destroy = symbol<RocblasDestroy>(api.library, "rocblas_destroy_handle");
    api.set_stream = symbol<RocblasSetStream>(api.library, "rocblas_set_stream");
    api.rocblas_sgemm = symbol<RocblasSgemm>(api.library, "rocblas_sgemm");
    api.rocblas_gemm_ex = symbol<RocblasGemmEx>(api.library, "rocblas_gemm_ex");
    api.sgemm_strided_batched = dlsym(api.library.handle, "rocblas_sgemm_strided_batched");
    api.dgemm_strided_batched = dlsym(api.library.handle, "rocblas_dgemm_strided_batched");
  }
  s.api = api;
  s.info.loaded = true;
  s.info.library = api.library.name;
  s.info.description =
      s.info.vendor + " (" + api.library.name + "): bf16 products with float32 accumulation" +
      (s.info.rounds_weights
           ? " (float32 weights rounded to bf16; REFORMER_BF16_WEIGHTS=keep "
             "keeps them)"
           : " (float32 weights kept: bf16 factors widened, REFORMER_BF16_WEIGHTS=keep)") +
      ", float32 sgemm";
}

void check_status(const char* function, int status, Index m, Index n, Index k) {
  require(status == 0, function, " returned status ", status, " for the column-major product [", m,
          ", ", k, "] x [", k, ", ", n, "] (", state().info.library,
          "); the device or the library is in a bad state");
}

// The loaded API with a handle on this process's device (created at the first
// product, after Kokkos chose the device; destroyed when Kokkos finalises).
Api& api_for_products() {
  std::lock_guard<std::mutex> lock(state_mutex());
  State& s = state();
  if (!s.attempted) {
    load(s);
    s.attempted = true;
  }
  Api& api = s.api;
  if (api.handle == nullptr) {
    check_status(api.vendor == Vendor::Cublas ? "cublasCreate_v2" : "rocblas_create_handle",
                 api.create(&api.handle), 0, 0, 0);
    if (api.set_math_mode != nullptr)
      check_status("cublasSetMathMode",
                   api.set_math_mode(api.handle,
                                     kCublasDefaultMath | kCublasDisallowReducedPrecisionReduction),
                   0, 0, 0);
    Kokkos::push_finalize_hook([] {
      std::lock_guard<std::mutex> lock(state_mutex());
      destroy_handle(state().api);
    });
  }
  return api;
}

std::size_t type_bytes(Type t) { return t == Type::F32 ? 4 : 2; }

// A row-major operand of a product: its data, element type, leading dimension
// (the stride between rows) and whether the product reads it transposed.
struct Operand {
  const void* data;
  Type type;
  Index ld;
  Trans trans;

  // The operand from row r0 of op(X) on: rows of X, or columns of a
  // transposed X.
  Operand from_row(Index r0) const {
    const Index offset = trans == Trans::No ? r0 * ld : r0;
    return {static_cast<const char*>(data) + std::size_t(offset) * type_bytes(type), type, ld,
            trans};
  }
};

// Row-major C [m, n] = alpha op(A) op(B) + beta C with float32 accumulation.
// The vendors are column-major: a row-major matrix is its transpose there, so
// this is the column-major C^T = op(B)^T op(A)^T, with the operands swapped
// and each keeping its own transpose flag.
void row_major_gemm(const Operand& a, const Operand& b, Index m, Index n, Index k, float alpha,
                    float beta, void* c, Type c_type, Index ldc) {
  Api& api = api_for_products();
  // The kernel profile (core/kernel_profile.hpp) times each product under its
  // shape: C [m, n] = op(A) [m, k] op(B) [k, n], N or T per operand.
  char label[112];
  std::snprintf(label, sizeof label, "%s gemm %c%c m %lld n %lld k %lld%s",
                api.vendor == Vendor::Cublas ? "cublas" : "rocblas",
                a.trans == Trans::No ? 'N' : 'T', b.trans == Trans::No ? 'N' : 'T',
                static_cast<long long>(m), static_cast<long long>(n), static_cast<long long>(k),
                a.type == Type::F32 && b.type == Type::F32 ? "" : " bf16");
  const ProfileRegion region(label);
  check_status(api.vendor == Vendor::Cublas ? "cublasSetStream_v2" : "rocblas_set_stream",
               api.set_stream(api.handle, device::default_stream()), n, m, k);
  const bool all_float = a.type == Type::F32 && b.type == Type::F32 && c_type == Type::F32;
  if (api.vendor == Vendor::Cublas) {
    const auto op = [](Trans t) { return t == Trans::No ? kCublasOpN : kCublasOpT; };
    const auto type = [](Type t) { return t == Type::F32 ? kCudaR32F : kCudaR16BF; };
    if (all_float) {
      check_status("cublasSgemm_v2",
                   api.cublas_sgemm(api.handle, op(b.trans), op(a.trans), int(n), int(m), int(k),
                                    &alpha, static_cast<const float*>(b.data), int(b.ld),
                                    static_cast<const float*>(a.data), int(a.ld), &beta,
                                    static_cast<float*>(c), int(ldc)),
                   n, m, k);
    } else {
      check_status("cublasGemmEx",
                   api.cublas_gemm_ex(api.handle, op(b.trans), op(a.trans), int(n), int(m), int(k),
                                      &alpha, b.data, type(b.type), int(b.ld), a.data, type(a.type),
                                      int(a.ld), &beta, c, type(c_type), int(ldc),
                                      kCublasCompute32F, kCublasGemmDefault),
                   n, m, k);
    }
    return;
  }
  const auto op = [](Trans t) {
    return t == Trans::No ? kRocblasOperationNone : kRocblasOperationTranspose;
  };
  const auto type = [](Type t) { return t == Type::F32 ? kRocblasF32 : kRocblasBF16; };
  if (all_float) {
    check_status("rocblas_sgemm",
                 api.rocblas_sgemm(api.handle, op(b.trans), op(a.trans), int(n), int(m), int(k),
                                   &alpha, static_cast<const float*>(b.data), int(b.ld),
                                   static_cast<const float*>(a.data), int(a.ld), &beta,
                                   static_cast<float*>(c), int(ldc)),
                 n, m, k);
  } else {
    // D = C: rocBLAS writes the result over C, in C's type; float32 compute.
    check_status("rocblas_gemm_ex",
                 api.rocblas_gemm_ex(api.handle, op(b.trans), op(a.trans), int(n), int(m), int(k),
                                     &alpha, b.data, type(b.type), int(b.ld), a.data, type(a.type),
                                     int(a.ld), &beta, c, type(c_type), int(ldc), c, type(c_type),
                                     int(ldc), kRocblasF32, kRocblasGemmAlgoStandard, 0, 0),
                 n, m, k);
  }
}

// ---- Kernels around the vendor's products -------------------------------------

template <class T>
constexpr bool is_float = std::is_same<T, float>::value;

// Every extent and leading dimension fits the vendors' int.
template <class V>
bool fits_int(const V& v) {
  return Index(v.extent(0)) <= INT_MAX && Index(v.extent(1)) <= INT_MAX &&
         Index(v.stride(0)) <= INT_MAX;
}

// x widened (exactly) to float32, into a new contiguous view.
View2<float> widened_copy(In2<bf16> x, const char* label) {
  View2<float> out(Kokkos::view_alloc(std::string(label), Kokkos::WithoutInitializing), x.extent(0),
                   x.extent(1));
  detail::widen_rows<bf16>(x, 0, x.extent(0), out.data());
  return out;
}

// Whether a product with a bf16 result takes its float32 factor rounded to
// bf16 for the vendor's bf16 GEMM (issue 46: bf16 products on tensor cores, as
// torch.autocast rounds weights), unless REFORMER_BF16_WEIGHTS=keep: the
// weights, and any factor of at most 2^20 elements or a quarter of the bf16
// factor's. A larger one (an activation's gradient as large as the other
// factor), and every product with a float32 result (the loss's logits: their
// float32 accuracy is the point of a float32 result), keep the exact route:
// the bf16 factor widened, float32 sgemm. The rounding moves a bf16 result by
// up to 2^-8 sum_p |a_ip b_pj|, the order of its own rounding. (Called after
// device_blas_loaded(), so the state is loaded.)
template <class TC>
bool rounds_to_bf16(Index float_elements, Index bf16_elements) {
  return !is_float<TC> && state().info.rounds_weights &&
         (float_elements <= (Index(1) << 20) || 4 * float_elements <= bf16_elements);
}

// The rounded factors of one product or sum (ops/kept_buffer.hpp): the vendor's
// products run on the default stream too, so a rounding cannot overwrite a
// factor before the vendor has read it.
struct RoundedFactors {};  // kept_buffer's tag
View1<bf16> rounding_buffer(Index elements) {
  return detail::kept_buffer<bf16, RoundedFactors>("device_blas_rounded_factors", elements);
}

// x rounded to bf16 into buffer from element `offset` on (unpadded rows).
View2<bf16> rounded_copy(In2<float> x, View1<bf16> buffer, Index offset) {
  View2<bf16> out(buffer.data() + offset, x.extent(0), x.extent(1));
  detail::finish_rows<bf16>(x, In1<float>(), out, 0);
  return out;
}

template <class T>
Operand operand(In2<T> x, Trans trans) {
  return {x.data(), is_float<T> ? Type::F32 : Type::BF16, Index(x.stride(0)), trans};
}

// One product op(A) op(B) of a sum. `widen`, when set, holds A's bf16 rows (A
// not transposed, B float32): they are widened a panel at a time and the
// product runs in sgemm.
struct Term {
  Operand a, b;
  Index k;
  In2<bf16> widen = In2<bf16>();
};

// Elements of a float32 panel (1 MiB, as the host path's): of C, for bf16
// results that take a bias or a sum of several products before their one
// rounding, and of A's widened rows. (16 MiB panels made a bf16 step at 2K
// positions 0.64x of the float32 one on an H200 instead of about half.)
constexpr Index kPanelElements = Index(1) << 18;
// Where no factor is widened (bf16 factors, weights rounded: the projections'
// input gradient dx = sum_i dy_i W_i^T), only C's float32 panel is needed, and
// it takes 4 MiB: at 64K positions of 256 a call is 16 panels of 2-3 products
// and a rounding instead of 64 (the 1 MiB panels were 768 products and 710
// roundings of a 64K bf16 step's 2,965 launches on an H200).
constexpr Index kSumPanelElements = Index(1) << 20;

// C = beta C + alpha sum_t op(A_t) op(B_t) (+ bias(j) on every row).
// Returns whether it allocated scratch (which must outlive the vendor's work).
template <class TC>
bool vendor_sum(const std::vector<Term>& terms, View2<TC> c, float alpha, float beta,
                In1<float> bias) {
  const Index m = c.extent(0), n = c.extent(1), ldc = c.stride(0);
  const bool has_bias = bias.extent(0) > 0;
  bool widen = false;
  Index max_k = 0;
  for (const Term& t : terms) {
    widen = widen || t.widen.data() != nullptr;
    max_k = std::max(max_k, t.k);
  }
  if (!widen) {
    if constexpr (is_float<TC>) {
      for (std::size_t t = 0; t < terms.size(); ++t)
        row_major_gemm(terms[t].a, terms[t].b, m, n, terms[t].k, alpha, t == 0 ? beta : 1.0f,
                       c.data(), Type::F32, ldc);
      if (has_bias) detail::finish_rows<float>(c, bias, c, 0);
      return false;
    }
    // One bf16 x bf16 product: the vendor rounds its float32 result once. A
    // bias goes into C first (rounded to bf16, as under torch.autocast) and
    // the product adds to it, so that no float32 panel is needed.
    if (terms.size() == 1 && terms[0].a.type == Type::BF16 && terms[0].b.type == Type::BF16 &&
        (!has_bias || beta == 0.0f)) {
      if (has_bias) detail::bias_rows<TC>(bias, c);
      row_major_gemm(terms[0].a, terms[0].b, m, n, terms[0].k, alpha, has_bias ? 1.0f : beta,
                     c.data(), Type::BF16, ldc);
      return false;
    }
  }
  // Panels of rows of C: a float32 C takes the products in place (its bias
  // after the last panel); a bf16 C goes through a float32 panel, rounded once.
  const Index panel = std::min(
      m, std::max<Index>(64, (widen ? kPanelElements : kSumPanelElements) / std::max(n, max_k)));
  View2<float> f, rows_a;
  if (!is_float<TC>)
    f = View2<float>(
        Kokkos::view_alloc(std::string("device_blas_panel"), Kokkos::WithoutInitializing), panel,
        n);
  if (widen)
    rows_a = View2<float>(
        Kokkos::view_alloc(std::string("device_blas_widened_rows"), Kokkos::WithoutInitializing),
        panel, max_k);
  for (Index r0 = 0; r0 < m; r0 += panel) {
    const Index rows = std::min(panel, m - r0);
    float* to = f.data();
    Index ld_to = n;
    if constexpr (is_float<TC>) {
      to = c.data() + r0 * ldc;
      ld_to = ldc;
    } else if (beta != 0.0f) {
      detail::widen_rows<TC>(c, r0, rows, f.data());
    }
    for (std::size_t t = 0; t < terms.size(); ++t) {
      Operand a = terms[t].a.from_row(r0);
      if (terms[t].widen.data() != nullptr) {
        detail::widen_rows<bf16>(terms[t].widen, r0, rows, rows_a.data());
        a = {rows_a.data(), Type::F32, terms[t].k, Trans::No};
      }
      row_major_gemm(a, terms[t].b, rows, n, terms[t].k, alpha, t == 0 ? beta : 1.0f, to, Type::F32,
                     ld_to);
    }
    if constexpr (!is_float<TC>)
      detail::finish_rows<TC>(Kokkos::subview(f, std::make_pair(Index(0), rows), Kokkos::ALL), bias,
                              c, r0);
  }
  if constexpr (is_float<TC>)
    if (has_bias) detail::finish_rows<float>(c, bias, c, 0);
  return true;
}

}  // namespace

bool device_blas_loaded() {
  if (kVendor == Vendor::None) return false;
  return device_blas_info().loaded;
}

template <class TA, class TB, class TC>
bool device_mixed_matmul(In2<TA> a, Trans trans_a, In2<TB> b, Trans trans_b, View2<TC> c,
                         float alpha, float beta, In1<float> bias) {
  if (kHostMemory || !device_blas_loaded()) return false;
  if (!fits_int(a) || !fits_int(b) || !fits_int(c)) return false;
  const Index k = trans_a == Trans::No ? a.extent(1) : a.extent(0);
  // Two bf16 factors: the vendor's bf16 GEMM (exact products, float32 sums).
  // A float32 factor: rounded to bf16 when the result is bf16 and the factor
  // weight-sized (rounds_to_bf16), as torch.autocast does, for the same GEMM
  // on tensor cores; else the bf16 factor widened exactly and sgemm (the host
  // path's products).
  Term term{operand<TA>(a, trans_a), operand<TB>(b, trans_b), k};
  View2<float> a32, b32;
  if constexpr (is_float<TA> != is_float<TB>) {
    if constexpr (!is_float<TB>) {
      if (rounds_to_bf16<TC>(Index(a.size()), Index(b.size()))) {
        term.a = operand<bf16>(rounded_copy(a, rounding_buffer(Index(a.size())), 0), trans_a);
      } else {
        b32 = widened_copy(b, "mixed_matmul_widened_operand");
        term.b = operand<float>(b32, trans_b);
      }
    }
    if constexpr (!is_float<TA>) {
      if (rounds_to_bf16<TC>(Index(b.size()), Index(a.size()))) {
        term.b = operand<bf16>(rounded_copy(b, rounding_buffer(Index(b.size())), 0), trans_b);
      } else if (trans_a == Trans::No) {
        term.widen = a;
      } else {
        a32 = widened_copy(a, "mixed_matmul_widened_operand");
        term.a = operand<float>(a32, trans_a);
      }
    }
  }
  const bool scratch = vendor_sum<TC>({term}, c, alpha, beta, bias);
  if (scratch || a32.data() != nullptr || b32.data() != nullptr) ExecSpace().fence();
  return true;
}

template <class TA, class TC>
bool device_mixed_sum(const std::vector<In2<TA>>& as, const std::vector<In2<float>>& bs,
                      Trans trans_b, View2<TC> c, float alpha, float beta, In1<float> bias) {
  if (kHostMemory || !device_blas_loaded()) return false;
  require<ShapeError>(!as.empty() && as.size() == bs.size(), "mixed_sum: ", as.size(), " left and ",
                      bs.size(), " right factors; give one of each per product");
  const Index m = c.extent(0), n = c.extent(1);
  if (!fits_int(c)) return false;
  for (std::size_t i = 0; i < as.size(); ++i) {
    const Index k = as[i].extent(1);
    const Index kb = trans_b == Trans::No ? bs[i].extent(0) : bs[i].extent(1);
    const Index nb = trans_b == Trans::No ? bs[i].extent(1) : bs[i].extent(0);
    require<ShapeError>(Index(as[i].extent(0)) == m && kb == k && nb == n, "mixed_sum: product ", i,
                        " is [", as[i].extent(0), ", ", k, "] x [", kb, ", ", nb, "] but C is [", m,
                        ", ", n, "]");
    if (!fits_int(as[i]) || !fits_int(bs[i])) return false;
  }
  if (bias.extent(0) > 0)
    require<ShapeError>(Index(bias.extent(0)) == n, "mixed_sum: bias has ", bias.extent(0),
                        " entries but C has ", n, " columns");
  // The right factors are float32 weights: with bf16 left factors, rounded to
  // bf16 for the vendor's bf16 GEMM (as in device_mixed_matmul), or, where one
  // is too large for that (rounds_to_bf16), the left factors widened a panel
  // of rows at a time.
  bool round = !is_float<TA>;
  Index rounded = 0;
  for (std::size_t i = 0; i < as.size(); ++i) {
    round = round && rounds_to_bf16<TC>(Index(bs[i].size()), Index(as[i].size()));
    rounded += Index(bs[i].size());
  }
  const View1<bf16> buffer = round ? rounding_buffer(rounded) : View1<bf16>();
  std::vector<Term> terms;
  Index offset = 0;
  for (std::size_t i = 0; i < as.size(); ++i) {
    Term term{operand<TA>(as[i], Trans::No), operand<float>(bs[i], trans_b),
              Index(as[i].extent(1))};
    if (round) {
      term.b = operand<bf16>(rounded_copy(bs[i], buffer, offset), trans_b);
      offset += Index(bs[i].size());
    } else if constexpr (!is_float<TA>) {
      term.widen = as[i];
    }
    terms.push_back(term);
  }
  // Panels allocated for the sum must outlive the vendor's work on them.
  if (vendor_sum<TC>(terms, c, alpha, beta, bias)) ExecSpace().fence();
  return true;
}

bool device_sgemm(In2<float> a, Trans trans_a, In2<float> b, Trans trans_b, View2<float> c,
                  float alpha, float beta) {
  if (kHostMemory || !device_blas_loaded()) return false;
  if (!fits_int(a) || !fits_int(b) || !fits_int(c)) return false;
  const Index k = trans_a == Trans::No ? a.extent(1) : a.extent(0);
  const Operand oa{a.data(), Type::F32, Index(a.stride(0)), trans_a};
  const Operand ob{b.data(), Type::F32, Index(b.stride(0)), trans_b};
  vendor_sum<float>({{oa, ob, k}}, c, alpha, beta, In1<float>());
  return true;
}

template <class T>
bool device_gemm_strided_batched(StridedBatch<const T> a, Trans trans_a, StridedBatch<const T> b,
                                 Trans trans_b, StridedBatch<T> c, T alpha, T beta) {
  if (kHostMemory || !device_blas_loaded()) return false;
  const Index count = c.count, m = c.rows, n = c.cols;
  const Index k = trans_a == Trans::No ? a.cols : a.rows;
  const auto fits = [](const auto& x) {
    return x.rows <= INT_MAX && x.cols <= INT_MAX && x.row_stride <= INT_MAX;
  };
  if (count == 0 || count > INT_MAX || !fits(a) || !fits(b) || !fits(c)) return false;
  Api& api = api_for_products();
  void* function =
      std::is_same<T, float>::value ? api.sgemm_strided_batched : api.dgemm_strided_batched;
  if (function == nullptr) return false;
  const bool cublas = api.vendor == Vendor::Cublas;
  char label[128];
  std::snprintf(label, sizeof label, "%s gemm strided batched %c%c m %lld n %lld k %lld x %lld%s",
                cublas ? "cublas" : "rocblas", trans_a == Trans::No ? 'N' : 'T',
                trans_b == Trans::No ? 'N' : 'T', static_cast<long long>(m),
                static_cast<long long>(n), static_cast<long long>(k), static_cast<long long>(count),
                std::is_same<T, float>::value ? "" : " double");
  const ProfileRegion region(label);
  check_status(cublas ? "cublasSetStream_v2" : "rocblas_set_stream",
               api.set_stream(api.handle, device::default_stream()), n, m, k);
  // Row-major C_i = op(A_i) op(B_i) is the column-major C_i^T = op(B_i)^T op(A_i)^T
  // (row_major_gemm above), for every batch entry i at its stride.
  if (cublas) {
    const auto op = [](Trans t) { return t == Trans::No ? kCublasOpN : kCublasOpT; };
    check_status(
        std::is_same<T, float>::value ? "cublasSgemmStridedBatched" : "cublasDgemmStridedBatched",
        reinterpret_cast<CublasGemmStridedBatched<T>>(function)(
            api.handle, op(trans_b), op(trans_a), int(n), int(m), int(k), &alpha, b.data,
            int(b.row_stride), static_cast<long long>(b.batch_stride), a.data, int(a.row_stride),
            static_cast<long long>(a.batch_stride), &beta, c.data, int(c.row_stride),
            static_cast<long long>(c.batch_stride), int(count)),
        n, m, k);
    return true;
  }
  const auto op = [](Trans t) {
    return t == Trans::No ? kRocblasOperationNone : kRocblasOperationTranspose;
  };
  check_status(std::is_same<T, float>::value ? "rocblas_sgemm_strided_batched"
                                             : "rocblas_dgemm_strided_batched",
               reinterpret_cast<RocblasGemmStridedBatched<T>>(function)(
                   api.handle, op(trans_b), op(trans_a), int(n), int(m), int(k), &alpha, b.data,
                   int(b.row_stride), std::int64_t(b.batch_stride), a.data, int(a.row_stride),
                   std::int64_t(a.batch_stride), &beta, c.data, int(c.row_stride),
                   std::int64_t(c.batch_stride), int(count)),
               n, m, k);
  return true;
}

template <class T>
bool device_gemm_strided_batched(In3<T> a, Trans trans_a, In3<T> b, Trans trans_b, View3<T> c,
                                 T alpha, T beta) {
  if (Index(a.stride(2)) != 1 || Index(b.stride(2)) != 1 || Index(c.stride(2)) != 1) return false;
  return device_gemm_strided_batched<T>(strided_batch(a), trans_a, strided_batch(b), trans_b,
                                        strided_batch(c), alpha, beta);
}
template bool device_gemm_strided_batched<float>(StridedBatch<const float>, Trans,
                                                 StridedBatch<const float>, Trans,
                                                 StridedBatch<float>, float, float);
template bool device_gemm_strided_batched<double>(StridedBatch<const double>, Trans,
                                                  StridedBatch<const double>, Trans,
                                                  StridedBatch<double>, double, double);
template bool device_gemm_strided_batched<float>(In3<float>, Trans, In3<float>, Trans, View3<float>,
                                                 float, float);
template bool device_gemm_strided_batched<double>(In3<double>, Trans, In3<double>, Trans,
                                                  View3<double>, double, double);

#define REFORMER_INSTANTIATE_DEVICE_MIXED(TA, TB, TC)                                             \
  template bool device_mixed_matmul<TA, TB, TC>(In2<TA>, Trans, In2<TB>, Trans, View2<TC>, float, \
                                                float, In1<float>);
REFORMER_INSTANTIATE_MIXED_TYPES(REFORMER_INSTANTIATE_DEVICE_MIXED)
#define REFORMER_INSTANTIATE_DEVICE_SUM(TA, TC)                                                   \
  template bool device_mixed_sum<TA, TC>(const std::vector<In2<TA>>&,                             \
                                         const std::vector<In2<float>>&, Trans, View2<TC>, float, \
                                         float, In1<float>);
REFORMER_INSTANTIATE_DEVICE_SUM(bf16, bf16)
REFORMER_INSTANTIATE_DEVICE_SUM(bf16, float)
REFORMER_INSTANTIATE_DEVICE_SUM(float, float)
REFORMER_INSTANTIATE_DEVICE_SUM(float, bf16)

}  // namespace reformer::ops::tpls

namespace reformer::ops {

DeviceBlasInfo device_blas_info() {
  std::lock_guard<std::mutex> lock(tpls::state_mutex());
  auto& s = tpls::state();
  if (!s.attempted) {
    tpls::load(s);
    s.attempted = true;
  }
  return s.info;
}

DeviceBlasInfo reload_device_blas() {
  std::lock_guard<std::mutex> lock(tpls::state_mutex());
  auto& s = tpls::state();
  tpls::destroy_handle(s.api);
  s.attempted = false;
  tpls::load(s);
  s.attempted = true;
  return s.info;
}

}  // namespace reformer::ops
