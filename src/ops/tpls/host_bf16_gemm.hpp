// A host GEMM for bf16 activations times float32 weights (internal header),
// BLIS style: op(A) packed into panels of MR rows and op(B) into panels of NR
// columns, both widened to float32 while they are packed, and a register block
// of MR x NR floats of C accumulated with float32 multiply-adds. It replaces
// "widen the bf16 rows into a float buffer, then call the BLAS" (which packs
// the widened rows a second time).
//
// Each function runs on the calling thread (the callers in host_blas.cpp split a
// product over the host threads, one call per thread) and uses `work`, at least
// kPackedGemmWorkspace floats, for its packed panels. Every element of C is
// computed by the same instructions wherever its block lies, so a result does
// not depend on how the callers split C.
#pragma once

#include "reformer/core/bfloat16.hpp"
#include "reformer/core/types.hpp"

namespace reformer::ops::tpls {

// Floats of packing workspace one call needs (1 MiB: packed B and A blocks).
constexpr Index kPackedGemmWorkspace = Index(1) << 18;

// One term of a sum of products: op(A) is [rows, k] with A row-major (rows
// apart by lda), op(B) is [k, n]: B[p * ldb + j], or B[j * ldb + p] when
// trans_b.
template <class TA, class TB>
struct PackedTerm {
  const TA* a;
  Index lda;
  const TB* b;
  Index ldb;
  Index k;
};

// Whether packed_rows can take these terms: their packed panels fit the
// workspace (sum of k up to a few thousand).
template <class TA, class TB>
bool packed_rows_fits(const PackedTerm<TA, TB>* terms, int count);

// Rows [row_begin, row_end) of C = alpha sum_t op(A_t) op(B_t) + beta C + bias,
// C [*, n] row-major (rows apart by ldc). The sum over every term and every k
// is kept in float32 registers and rounded once into a bf16 C. bias: n floats
// or null. beta == 0 does not read C.
template <class TA, class TB, class TC>
void packed_rows(const PackedTerm<TA, TB>* terms, int count, bool trans_b, Index row_begin,
                 Index row_end, Index n, TC* c, Index ldc, float alpha, float beta,
                 const float* bias, float* work);

// Rows [row_begin, row_end) x columns [col_begin, col_end) of C = alpha A^T B
// + beta C (a weight gradient), A [k, m] and B [k, n] row-major, C [m, n]
// float32. The sum over the k rows runs in chunks of kPackedChunk rows, each
// added into C: the same order whatever the split of C.
constexpr Index kPackedChunk = 256;
template <class TA, class TB>
void packed_columns(const TA* a, Index lda, const TB* b, Index ldb, Index k, Index row_begin,
                    Index row_end, Index col_begin, Index col_end, float* c, Index ldc, float alpha,
                    float beta, float* work);

// Whether the products should take this GEMM by default (HostBf16Gemm::
// Automatic): where a vector unit of 32 bytes or more runs it (AVX2, AVX-512,
// or an x86-64-v3 build's AVX-512 copy). With its vectorised bf16 stores the
// AVX2 block came out ahead of widening for the BLAS (docs/memory.md). 16-byte
// vectors (NEON) keep the BLAS: their block has never been timed on hardware.
bool packed_gemm_preferred();

// The register block the build uses: "MR x NR (vector unit)", for benchmarks.
const char* packed_gemm_block();

}  // namespace reformer::ops::tpls
