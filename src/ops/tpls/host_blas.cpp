#include "ops/tpls/host_blas.hpp"

#include "ops/tpls/host_bf16_gemm.hpp"

#include "reformer/core/instantiate.hpp"
#include "reformer/core/precision.hpp"
#include "reformer/core/team_scratch.hpp"

#include <KokkosKernels_config.h>

#include <dlfcn.h>
#include <strings.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <type_traits>
#include <vector>

#if defined(KOKKOSKERNELS_ENABLE_TPL_BLAS)
#include <KokkosBlas_Host_tpl.hpp>
#endif

namespace reformer::ops::tpls {

#if defined(KOKKOSKERNELS_ENABLE_TPL_BLAS)
namespace {

// Products with fewer multiply-adds stay in one BLAS call.
constexpr double kMinSplitWork = 1 << 20;
// Blocks of C are at least this many rows (or columns) wide.
constexpr Index kMinBlock = 32;

}  // namespace

template <class T>
bool host_blas_matmul(In2<T> a, Trans trans_a, In2<T> b, Trans trans_b, View2<T> c, T alpha,
                      T beta) {
  if constexpr (!kHostMemory) {
    return false;
  } else {
    using Host = Kokkos::DefaultHostExecutionSpace;
    const Index threads = Host().concurrency();
    const Index m = c.extent(0), n = c.extent(1);
    const Index k = trans_a == Trans::No ? a.extent(1) : a.extent(0);
    if (threads < 2 || double(m) * n * k < kMinSplitWork) return false;
    // Split the longer side of C if it gives every thread a block.
    const bool by_rows = m >= n ? m >= threads * kMinBlock : n < threads * kMinBlock;
    const Index side = by_rows ? m : n;
    if (side < threads * kMinBlock) return false;
    prepare_host_blas();
    const Index block = (side + threads - 1) / threads;
    // Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: BLAS gets
    // B first, and the leading dimensions are the row strides.
    const char tb = trans_b == Trans::No ? 'N' : 'T', ta = trans_a == Trans::No ? 'N' : 'T';
    const int lda = a.stride(0), ldb = b.stride(0), ldc = c.stride(0);
    const T* pa = a.data();
    const T* pb = b.data();
    T* pc = c.data();
    Kokkos::parallel_for("host_blas_matmul", Kokkos::RangePolicy<Host>(0, threads), [=](Index t) {
      const Index begin = std::min(side, t * block), end = std::min(side, begin + block);
      if (begin == end) return;
      if (by_rows) {  // rows [begin, end) of C and of op(A)
        const T* a_rows = trans_a == Trans::No ? pa + begin * lda : pa + begin;
        KokkosBlas::Impl::HostBlas<T>::gemm(tb, ta, int(n), int(end - begin), int(k), alpha, pb,
                                            ldb, a_rows, lda, beta, pc + begin * ldc, ldc);
      } else {  // columns [begin, end) of C and of op(B)
        const T* b_cols = trans_b == Trans::No ? pb + begin : pb + begin * ldb;
        KokkosBlas::Impl::HostBlas<T>::gemm(tb, ta, int(end - begin), int(m), int(k), alpha, b_cols,
                                            ldb, pa, lda, beta, pc + begin, ldc);
      }
    });
    Host().fence();
    return true;
  }
}
#else
template <class T>
bool host_blas_matmul(In2<T>, Trans, In2<T>, Trans, View2<T>, T, T) {
  return false;
}
#endif

#if defined(KOKKOSKERNELS_ENABLE_TPL_BLAS)
namespace {

// Elements of a thread's sub-panel (its widened rows and results): 1 MiB of
// float32, within a core's L2 cache, and rows enough (512 at width 512) that
// the BLAS's packing of the other operand is paid over many rows.
constexpr Index kSubPanelElements = Index(1) << 18;

// The threads' widened sub-panels for one product (labelled like the
// portable path's panels, so that `reformer memory` counts them).
Kokkos::View<float*, HostSpace> panel_buffers(Index elements) {
  return Kokkos::View<float*, HostSpace>(
      Kokkos::view_alloc("mixed_matmul_panel", Kokkos::WithoutInitializing), elements);
}

// bf16 activations go through the packed GEMM (host_bf16_gemm.hpp) or through
// widened sub-panels and the BLAS: ops::host_bf16_gemm() chooses.
bool packed_bf16_gemm() {
  switch (host_bf16_gemm()) {
    case HostBf16Gemm::Blas:
      return false;
    case HostBf16Gemm::Packed:
    case HostBf16Gemm::PackedBuildBlock:
    case HostBf16Gemm::PackedDot:
      return true;
    case HostBf16Gemm::Automatic:
      break;
  }
  return packed_gemm_preferred();
}

// A thread's slice of the buffers.
struct ThreadBuffer {
  float* pointer;
  float* data() const { return pointer; }
};

// dst[r * cols + j] = src[r * ld + j] (rows x cols), widened to float.
template <class T>
void widen_rows(const T* src, Index ld, Index rows, Index cols, float* dst) {
  for (Index r = 0; r < rows; ++r) {
    const T* in = src + r * ld;
    float* out = dst + r * cols;
    for (Index j = 0; j < cols; ++j) out[j] = load(in[j]);
  }
}

}  // namespace

template <class TA, class TC>
bool host_mixed_sum(const std::vector<In2<TA>>& as, const std::vector<In2<float>>& bs,
                    Trans trans_b, View2<TC> c, float alpha, float beta, In1<float> bias) {
  if constexpr (!kHostMemory) {
    return false;
  } else {
    using Host = Kokkos::DefaultHostExecutionSpace;
    using Blas = KokkosBlas::Impl::HostBlas<float>;
    constexpr bool a_float = std::is_same<TA, float>::value;
    constexpr bool c_float = std::is_same<TC, float>::value;
    const Index threads = Host().concurrency();
    const Index m = c.extent(0), n = c.extent(1), terms = Index(as.size());
    if constexpr (!a_float) {
      std::vector<PackedTerm<TA, float>> packed(terms);
      for (Index i = 0; i < terms; ++i)
        packed[i] = {as[i].data(), Index(as[i].stride(0)), bs[i].data(), Index(bs[i].stride(0)),
                     Index(as[i].extent(1))};
      if (packed_bf16_gemm() && packed_rows_fits(packed.data(), int(terms))) {
        // Blocks of C's rows per thread, each thread packing into its own slice.
        const Index block = (m + threads - 1) / threads;
        const auto buffers = panel_buffers(threads * kPackedGemmWorkspace);
        TC* const pc = c.data();
        const Index ldc = c.stride(0);
        const float* pbias = bias.extent(0) > 0 ? bias.data() : nullptr;
        Kokkos::parallel_for(
            "host_mixed_matmul_packed_rows", Kokkos::RangePolicy<Host>(0, threads), [&](Index t) {
              const Index first = std::min(m, t * block), end = std::min(m, first + block);
              packed_rows<TA, float, TC>(packed.data(), int(terms), trans_b == Trans::Yes, first,
                                         end, n, pc, ldc, alpha, beta, pbias,
                                         buffers.data() + t * kPackedGemmWorkspace);
            });
        Host().fence();
        return true;
      }
    }
    Index widest = 0;
    for (const auto& a : as) widest = std::max<Index>(widest, a.extent(1));
    const bool has_bias = bias.extent(0) > 0;
    const bool direct = c_float && !has_bias;  // products straight into C
    prepare_host_blas();
    const Index block = (m + threads - 1) / threads;
    const Index panel = std::max<Index>(8, kSubPanelElements / (widest + n));
    const char tb = trans_b == Trans::No ? 'N' : 'T';
    // Raw pointers and strides: the lambda copies no std::vector of views.
    std::vector<const TA*> a_ptr(terms);
    std::vector<int> a_ld(terms), a_cols(terms), b_ld(terms);
    std::vector<const float*> b_ptr(terms);
    for (Index i = 0; i < terms; ++i) {
      a_ptr[i] = as[i].data();
      a_ld[i] = int(as[i].stride(0));
      a_cols[i] = int(as[i].extent(1));
      b_ptr[i] = bs[i].data();
      b_ld[i] = int(bs[i].stride(0));
    }
    TC* const pc = c.data();
    const Index ldc = c.stride(0);
    const float* pbias = has_bias ? bias.data() : nullptr;
    // Every thread's sub-panel buffers, one allocation the memory tracker sees.
    const Index a_size = a_float ? 0 : panel * widest, c_size = direct ? 0 : panel * n;
    const auto buffers = panel_buffers(threads * (a_size + c_size));
    Kokkos::parallel_for(
        "host_mixed_matmul_rows", Kokkos::RangePolicy<Host>(0, threads), [&](Index t) {
          const Index first = std::min(m, t * block);
          const Index end = std::min(m, first + block);
          ThreadBuffer a_buf{buffers.data() + t * (a_size + c_size)};
          ThreadBuffer c_buf{a_buf.data() + a_size};
          for (Index r0 = first; r0 < end; r0 += panel) {
            const Index rows = std::min(panel, end - r0);
            float* out = direct ? reinterpret_cast<float*>(pc) + r0 * ldc : c_buf.data();
            const int ldo = direct ? int(ldc) : int(n);
            if (!direct && beta != 0.0f) widen_rows(pc + r0 * ldc, ldc, rows, n, c_buf.data());
            for (Index i = 0; i < terms; ++i) {
              const float* pa;
              int lda;
              if constexpr (a_float) {
                pa = a_ptr[i] + r0 * a_ld[i];
                lda = a_ld[i];
              } else {
                widen_rows(a_ptr[i] + r0 * a_ld[i], a_ld[i], rows, a_cols[i], a_buf.data());
                pa = a_buf.data();
                lda = a_cols[i];
              }
              Blas::gemm(tb, 'N', int(n), int(rows), a_cols[i], alpha, b_ptr[i], b_ld[i], pa, lda,
                         i == 0 ? beta : 1.0f, out, ldo);
            }
            if (direct) continue;
            for (Index r = 0; r < rows; ++r) {
              TC* row = pc + (r0 + r) * ldc;
              const float* from = c_buf.data() + r * n;
              for (Index j = 0; j < n; ++j) row[j] = store<TC>(from[j] + (pbias ? pbias[j] : 0.0f));
            }
          }
        });
    Host().fence();
    return true;
  }
}

template <class TA, class TB, class TC>
bool host_mixed_matmul(In2<TA> a, Trans trans_a, In2<TB> b, Trans trans_b, View2<TC> c, float alpha,
                       float beta, In1<float> bias) {
  if constexpr (!kHostMemory) {
    return false;
  } else {
    if (trans_a == Trans::No) {
      // A bf16 B (not a weight) goes through the portable path.
      if constexpr (!std::is_same<TB, float>::value) {
        return false;
      } else {
        return host_mixed_sum<TA, TC>({a}, {b}, trans_b, c, alpha, beta, bias);
      }
    }
    // A^T B with B not transposed, summed into a float32 C (weight gradients):
    // columns of C per thread, rows of A and B in sub-panels of a fixed size.
    if constexpr (!std::is_same<TC, float>::value) {
      return false;
    } else {
      if (trans_b != Trans::No || bias.extent(0) > 0) return false;
      using Host = Kokkos::DefaultHostExecutionSpace;
      using Blas = KokkosBlas::Impl::HostBlas<float>;
      const Index threads = Host().concurrency();
      const Index m = c.extent(0), n = c.extent(1), k = a.extent(0);
      if constexpr (!std::is_same<TA, float>::value) {
        if (packed_bf16_gemm()) {
          // Blocks of C's longer side per thread (each thread packs all of the
          // other operand); the sum over k in fixed chunks (packed_columns).
          const bool by_rows = m > n;
          const Index side = by_rows ? m : n, block = (side + threads - 1) / threads;
          const auto buffers = panel_buffers(threads * kPackedGemmWorkspace);
          const TA* pa = a.data();
          const TB* pb = b.data();
          const Index lda = a.stride(0), ldb = b.stride(0), ldc = c.stride(0);
          float* const pc = c.data();
          Kokkos::parallel_for(
              "host_mixed_matmul_packed_columns", Kokkos::RangePolicy<Host>(0, threads),
              [&](Index t) {
                const Index first = std::min(side, t * block), end = std::min(side, first + block);
                packed_columns<TA, TB>(pa, lda, pb, ldb, k, by_rows ? first : 0, by_rows ? end : m,
                                       by_rows ? 0 : first, by_rows ? n : end, pc, ldc, alpha, beta,
                                       buffers.data() + t * kPackedGemmWorkspace);
              });
          Host().fence();
          return true;
        }
      }
      prepare_host_blas();
      const Index cols_block = (n + threads - 1) / threads;
      // The sum runs over the sub-panel's rows: the inner dimension of each call.
      const Index panel = std::max<Index>(64, kSubPanelElements / (m + n));
      const TA* pa = a.data();
      const TB* pb = b.data();
      const Index lda = a.stride(0), ldb = b.stride(0), ldc = c.stride(0);
      float* const pc = c.data();
      const Index per_thread = panel * (m + cols_block);
      const auto buffers = panel_buffers(threads * per_thread);
      Kokkos::parallel_for(
          "host_mixed_matmul_columns", Kokkos::RangePolicy<Host>(0, threads), [&](Index t) {
            const Index c0 = std::min(n, t * cols_block), c1 = std::min(n, c0 + cols_block);
            if (c0 == c1) return;
            const Index cols = c1 - c0;
            ThreadBuffer a_buf{buffers.data() + t * per_thread};
            ThreadBuffer b_buf{a_buf.data() + panel * m};
            for (Index p0 = 0; p0 < k; p0 += panel) {
              const Index rows = std::min(panel, k - p0);
              widen_rows(pa + p0 * lda, lda, rows, m, a_buf.data());
              widen_rows(pb + p0 * ldb + c0, ldb, rows, cols, b_buf.data());
              Blas::gemm('N', 'T', int(cols), int(m), int(rows), alpha, b_buf.data(), int(cols),
                         a_buf.data(), int(m), p0 == 0 ? beta : 1.0f, pc + c0, int(ldc));
            }
          });
      Host().fence();
      return true;
    }
  }
}
#else
template <class TA, class TC>
bool host_mixed_sum(const std::vector<In2<TA>>&, const std::vector<In2<float>>&, Trans, View2<TC>,
                    float, float, In1<float>) {
  return false;
}
template <class TA, class TB, class TC>
bool host_mixed_matmul(In2<TA>, Trans, In2<TB>, Trans, View2<TC>, float, float, In1<float>) {
  return false;
}
#endif

template bool host_blas_matmul<float>(In2<float>, Trans, In2<float>, Trans, View2<float>, float,
                                      float);
template bool host_blas_matmul<double>(In2<double>, Trans, In2<double>, Trans, View2<double>,
                                       double, double);

#define REFORMER_INSTANTIATE_HOST_MIXED(TA, TB, TC)                                             \
  template bool host_mixed_matmul<TA, TB, TC>(In2<TA>, Trans, In2<TB>, Trans, View2<TC>, float, \
                                              float, In1<float>);
REFORMER_INSTANTIATE_MIXED_TYPES(REFORMER_INSTANTIATE_HOST_MIXED)
template bool host_mixed_sum<bf16, bf16>(const std::vector<In2<bf16>>&,
                                         const std::vector<In2<float>>&, Trans, View2<bf16>, float,
                                         float, In1<float>);

}  // namespace reformer::ops::tpls

namespace reformer::ops {

// A pthreads OpenBLAS would start its own threads inside each of ours: make it
// sequential once (an OpenMP OpenBLAS, MKL or a reference BLAS runs one thread
// inside a parallel region already).
void prepare_host_blas() {
#if defined(KOKKOSKERNELS_ENABLE_TPL_BLAS)
  static std::once_flag once;
  std::call_once(once, [] {
    using GetParallel = int (*)();
    using SetThreads = void (*)(int);
    auto get_parallel = reinterpret_cast<GetParallel>(dlsym(RTLD_DEFAULT, "openblas_get_parallel"));
    auto set_threads =
        reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"));
    // openblas_get_parallel: 0 sequential, 1 pthreads, 2 OpenMP.
    if (get_parallel && set_threads && get_parallel() == 1) set_threads(1);
  });
#endif
}

namespace {

using CoreName = const char* (*)();

CoreName openblas_function(const char* name) {
  return reinterpret_cast<CoreName>(dlsym(RTLD_DEFAULT, name));
}

// The flags of /proc/cpuinfo's first processor (empty where there is none).
std::string cpu_flags() {
  std::FILE* f = std::fopen("/proc/cpuinfo", "r");
  if (!f) return "";
  char line[8192];
  std::string flags;
  while (std::fgets(line, sizeof line, f))
    if (std::strncmp(line, "flags", 5) == 0) {
      flags = std::string(" ") + line + " ";
      break;
    }
  std::fclose(f);
  for (char& c : flags)
    if (c == '\t' || c == '\n' || c == ':') c = ' ';
  return flags;
}

bool has_flag(const std::string& flags, const char* flag) {
  return flags.find(std::string(" ") + flag + " ") != std::string::npos;
}

}  // namespace

std::string host_blas_description() {
  const CoreName config = openblas_function("openblas_get_config");
  const CoreName core = openblas_function("openblas_get_corename");
  if (!config || !core) return "not OpenBLAS (or no host BLAS)";
  return std::string(config()) + ", core " + core();
}

namespace {

// OpenBLAS's x86 core for vectors of exactly `vector_bytes` when this CPU has
// them: "SkylakeX" (64: AVX-512 F, BW, VL and DQ), "Haswell" (32: AVX2 and
// FMA); "" otherwise.
std::string x86_core_of_width(int vector_bytes) {
  const std::string flags = cpu_flags();
  if (vector_bytes == 64 && has_flag(flags, "avx512f") && has_flag(flags, "avx512bw") &&
      has_flag(flags, "avx512vl") && has_flag(flags, "avx512dq"))
    return "SkylakeX";
  if (vector_bytes == 32 && has_flag(flags, "avx2") && has_flag(flags, "fma")) return "Haswell";
  return "";
}

}  // namespace

std::string host_blas_core_override() {
  const CoreName core = openblas_function("openblas_get_corename");
  if (!core || std::getenv("OPENBLAS_CORETYPE")) return "";
  // OpenBLAS's generic x86-64 cores: its fallbacks on a CPU it does not know.
  const std::string name = core();
  static const char* generic[] = {"Prescott", "Core2",  "Penryn",     "Dunnington", "Nehalem",
                                  "Atom",     "Katmai", "Coppermine", "Northwood",  "Banias"};
  bool fallback = false;
  for (const char* g : generic) fallback = fallback || strcasecmp(name.c_str(), g) == 0;
  if (!fallback) return "";
  const std::string wide = x86_core_of_width(64);
  return wide.empty() ? x86_core_of_width(32) : wide;
}

std::string host_blas_core_for_vectors(int vector_bytes) {
  const CoreName core = openblas_function("openblas_get_corename");
  if (!core || std::getenv("OPENBLAS_CORETYPE")) return "";
  const std::string wanted = x86_core_of_width(vector_bytes);  // none on a CPU without them
  if (wanted.empty()) return "";
  // OpenBLAS's Zen cores run the Haswell kernels already.
  const std::string loaded = core();
  const bool same = strcasecmp(wanted.c_str(), loaded.c_str()) == 0 ||
                    (wanted == "Haswell" && strcasecmp(loaded.c_str(), "Zen") == 0);
  return same ? "" : wanted;
}

void run_with_host_blas_core(char** argv) {
  run_with_host_blas_core(argv, host_blas_core_override());
}

void run_with_host_blas_core(char** argv, const std::string& core) {
  if (core.empty() || std::getenv("REFORMER_BLAS_CORE_SET")) return;
  setenv("OPENBLAS_CORETYPE", core.c_str(), 1);
  setenv("REFORMER_BLAS_CORE_SET", core.c_str(), 1);
  execv("/proc/self/exe", argv);
}

}  // namespace reformer::ops
