// The AVX-512 copy below passes its vectors through inlined helpers of the
// AVX2 build (bf16_round_bits): GCC's note that a 64-byte vector return outside
// AVX-512 code changes the ABI concerns calls that are never made. (Before the
// includes: the note points into a header.)
#if defined(__GNUC__) && !defined(__clang__) && !defined(__CUDACC__)
#pragma GCC diagnostic ignored "-Wpsabi"
#endif
#include "ops/tpls/host_bf16_gemm.hpp"

#include "reformer/core/cpu_target.hpp"
#include "reformer/core/tile_multiply.hpp"
#include "reformer/ops/gemm.hpp"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <type_traits>

// The columns path runs its bf16 x bf16 products in vdpbf16ps on request
// (host_bf16_gemm_kernel.inc) where the build's own target has AVX-512 BF16
// and its 64-byte vectors (no tile override).
#if defined(REFORMER_HOST_VECTOR_EXTENSIONS) && defined(__AVX512BF16__) && \
    !defined(REFORMER_TILE_VECTOR_BYTES)
#define REFORMER_BF16_DOT_PAIRS 1
#include <immintrin.h>
#endif

namespace reformer::ops::tpls {

// The kernel for the build's own target: two vectors of CpuTarget's width per
// row of the register block, 12 rows where there are 32 vector registers (24
// accumulators), 6 where there are 16 (12), 4 x 8 plain loops without vectors.
namespace native {
namespace {
#ifdef REFORMER_HOST_VECTOR_EXTENSIONS
constexpr int kVectorBytes = CpuTarget::vector_bytes > 0 ? CpuTarget::vector_bytes : 16;
constexpr int MR = CpuTarget::vector_registers >= 32 ? 12 : 6;
#else
constexpr int kVectorBytes = 16;
constexpr int MR = 4;
#endif
#include "ops/tpls/host_bf16_gemm_kernel.inc"
}  // namespace
}  // namespace native

#ifdef REFORMER_WIDE_HOST_CLONE
// The same kernel compiled for AVX-512 (12 x 32), taken at run time on a CPU
// that has it.
REFORMER_WIDE_HOST_BEGIN
namespace wide {
namespace {
constexpr int kVectorBytes = 64;
constexpr int MR = 12;
#include "ops/tpls/host_bf16_gemm_kernel.inc"
}  // namespace
}  // namespace wide
REFORMER_WIDE_HOST_END

namespace {
// PackedBuildBlock keeps the build's own kernel (to measure it; with
// OPENBLAS_CORETYPE=Haswell the float32 products do the same).
bool use_wide() {
  return wide_host_supported() && host_bf16_gemm() != HostBf16Gemm::PackedBuildBlock;
}
}  // namespace
#define REFORMER_PACKED_DISPATCH(...) (use_wide() ? wide::__VA_ARGS__ : native::__VA_ARGS__)
#else
#define REFORMER_PACKED_DISPATCH(...) native::__VA_ARGS__
#endif

template <class TA, class TB>
bool packed_rows_fits(const PackedTerm<TA, TB>* terms, int count) {
  return REFORMER_PACKED_DISPATCH(rows_fit<TA, TB>(terms, count));
}

template <class TA, class TB, class TC>
void packed_rows(const PackedTerm<TA, TB>* terms, int count, bool trans_b, Index row_begin,
                 Index row_end, Index n, TC* c, Index ldc, float alpha, float beta,
                 const float* bias, float* work) {
  REFORMER_PACKED_DISPATCH(rows_impl<TA, TB, TC>(terms, count, trans_b, row_begin, row_end, n, c,
                                                 ldc, alpha, beta, bias, work));
}

template <class TA, class TB>
void packed_columns(const TA* a, Index lda, const TB* b, Index ldb, Index k, Index row_begin,
                    Index row_end, Index col_begin, Index col_end, float* c, Index ldc, float alpha,
                    float beta, float* work) {
  const bool dot_pairs = host_bf16_gemm() == HostBf16Gemm::PackedDot;
  REFORMER_PACKED_DISPATCH(columns_impl<TA, TB>(a, lda, b, ldb, k, row_begin, row_end, col_begin,
                                                col_end, c, ldc, alpha, beta, work, dot_pairs));
}

bool packed_gemm_preferred() {
#ifdef REFORMER_WIDE_HOST_CLONE
  if (use_wide()) return true;
#endif
  return CpuTarget::vector_bytes >= 32;
}

const char* packed_gemm_block() {
#ifdef REFORMER_WIDE_HOST_CLONE
  if (use_wide()) return "12 x 32 (AVX-512, chosen at run time)";
#endif
#ifdef REFORMER_HOST_VECTOR_EXTENSIONS
  if (native::kDotPairs && host_bf16_gemm() == HostBf16Gemm::PackedDot)
    return "12 x 32 (AVX-512; bf16 x bf16 in vdpbf16ps)";
  return CpuTarget::vector_registers >= 32
             ? (CpuTarget::vector_bytes >= 64 ? "12 x 32 (AVX-512)" : "12 x 8 (16-byte vectors)")
             : (CpuTarget::vector_bytes >= 32 ? "6 x 16 (AVX2)" : "6 x 8 (16-byte vectors)");
#else
  return "4 x 8 (plain loops)";
#endif
}

}  // namespace reformer::ops::tpls

namespace reformer::ops {

namespace {
// The path of host_bf16_gemm(): -1 until the first call reads REFORMER_BF16_GEMM.
std::atomic<int> bf16_gemm_path{-1};
}  // namespace

HostBf16Gemm host_bf16_gemm() {
  int path = bf16_gemm_path.load(std::memory_order_relaxed);
  if (path < 0) {
    const char* choice = std::getenv("REFORMER_BF16_GEMM");
    HostBf16Gemm from_environment = HostBf16Gemm::Automatic;
    if (choice && std::strcmp(choice, "blas") == 0) from_environment = HostBf16Gemm::Blas;
    if (choice && std::strcmp(choice, "packed") == 0) from_environment = HostBf16Gemm::Packed;
    if (choice && std::strcmp(choice, "narrow") == 0)
      from_environment = HostBf16Gemm::PackedBuildBlock;
    if (choice && std::strcmp(choice, "dot") == 0) from_environment = HostBf16Gemm::PackedDot;
    int expected = -1;
    bf16_gemm_path.compare_exchange_strong(expected, int(from_environment));
    path = bf16_gemm_path.load(std::memory_order_relaxed);
  }
  return HostBf16Gemm(path);
}

void set_host_bf16_gemm(HostBf16Gemm path) {
  bf16_gemm_path.store(int(path), std::memory_order_relaxed);
}

const char* host_bf16_gemm_block() {
  const HostBf16Gemm path = host_bf16_gemm();
  if (path == HostBf16Gemm::Blas ||
      (path == HostBf16Gemm::Automatic && !tpls::packed_gemm_preferred()))
    return "none (BLAS)";
  return tpls::packed_gemm_block();
}

}  // namespace reformer::ops

namespace reformer::ops::tpls {

#define REFORMER_INSTANTIATE_PACKED(TA, TB, TC)                                                    \
  template void packed_rows<TA, TB, TC>(const PackedTerm<TA, TB>*, int, bool, Index, Index, Index, \
                                        TC*, Index, float, float, const float*, float*);
REFORMER_INSTANTIATE_PACKED(bf16, float, bf16)
REFORMER_INSTANTIATE_PACKED(bf16, float, float)
REFORMER_INSTANTIATE_PACKED(bf16, bf16, bf16)
REFORMER_INSTANTIATE_PACKED(bf16, bf16, float)
template bool packed_rows_fits<bf16, float>(const PackedTerm<bf16, float>*, int);
template bool packed_rows_fits<bf16, bf16>(const PackedTerm<bf16, bf16>*, int);
template void packed_columns<bf16, bf16>(const bf16*, Index, const bf16*, Index, Index, Index,
                                         Index, Index, Index, float*, Index, float, float, float*);
template void packed_columns<bf16, float>(const bf16*, Index, const float*, Index, Index, Index,
                                          Index, Index, Index, float*, Index, float, float, float*);

}  // namespace reformer::ops::tpls
