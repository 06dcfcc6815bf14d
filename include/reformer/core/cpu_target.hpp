// The vector unit the host code is compiled for, read from the compiler's
// target macros. This is the one file that names an instruction set: the
// register-blocked tile products (core/tile_multiply.hpp) size their blocks
// from it, the benchmarks print it beside every figure, and `reformer info`
// says whether it has bf16 dot-product instructions.
//
//   target                      vector bytes   vector registers
//   AVX-512 (x86-64-v4)         64             32
//   AVX2 / AVX (x86-64-v3)      32             16
//   SSE2 (plain x86-64)         16             16
//   SVE, fixed length           bits / 8       32   (-msve-vector-bits=N)
//   NEON / ASIMD (AArch64)      16             32
//   anything else               0 (plain loops)
//
// REFORMER_TILE_VECTOR_BYTES and REFORMER_TILE_REGISTERS, when defined (CMake:
// REFORMER_TILE_OVERRIDE="bytes;registers"), replace what the macros say. They
// exist to show what a wrong block shape costs (an AVX-512 block in an AVX2
// build spills its accumulators); a build for a real target leaves them unset.
#pragma once

namespace reformer {

struct CpuTarget {
#if defined(REFORMER_TILE_VECTOR_BYTES) && defined(REFORMER_TILE_REGISTERS)
  static constexpr int vector_bytes = REFORMER_TILE_VECTOR_BYTES;
  static constexpr int vector_registers = REFORMER_TILE_REGISTERS;
  static constexpr const char* name = "override";
#elif defined(__AVX512F__)
  static constexpr int vector_bytes = 64;
  static constexpr int vector_registers = 32;
  static constexpr const char* name = "AVX-512";
#elif defined(__AVX2__)
  static constexpr int vector_bytes = 32;
  static constexpr int vector_registers = 16;
  static constexpr const char* name = "AVX2";
#elif defined(__AVX__)
  static constexpr int vector_bytes = 32;
  static constexpr int vector_registers = 16;
  static constexpr const char* name = "AVX";
#elif defined(__SSE2__)
  static constexpr int vector_bytes = 16;
  static constexpr int vector_registers = 16;
  static constexpr const char* name = "SSE2";
#elif defined(__ARM_FEATURE_SVE) && defined(__ARM_FEATURE_SVE_BITS) && \
    __ARM_FEATURE_SVE_BITS >= 128 && __ARM_FEATURE_SVE_BITS <= 512
  static constexpr int vector_bytes = __ARM_FEATURE_SVE_BITS / 8;
  static constexpr int vector_registers = 32;
  static constexpr const char* name = "SVE";
#elif defined(__ARM_NEON) || defined(__aarch64__)
  static constexpr int vector_bytes = 16;
  static constexpr int vector_registers = 32;
  static constexpr const char* name = "NEON";
#else
  static constexpr int vector_bytes = 0;
  static constexpr int vector_registers = 0;
  static constexpr const char* name = "generic";
#endif

  // bf16 dot products in the vector unit: AVX-512 BF16 (Zen 4, Xeon from Cooper
  // Lake) has vdpbf16ps, which multiplies pairs of bf16 and adds them into float32
  // lanes. Reported by `reformer info`. Both factors must be bf16, which only the
  // weight gradients are (the products keep float32 weights, the attention
  // tiles are float32 in scratch): the packed GEMM runs them in it on request
  // (ops::HostBf16Gemm::PackedDot), not by default, because it ran 1.35-1.6x
  // slower there than widening into float FMAs on a Xeon with AVX-512 BF16
  // (docs/memory.md). Elsewhere bf16 is converted to float in registers.
  // Independent of the tile override.
#if defined(__AVX512BF16__)
  static constexpr bool bf16_dot_product = true;
  static constexpr const char* bf16_dot_name = "AVX-512 BF16";
#else
  static constexpr bool bf16_dot_product = false;
  static constexpr const char* bf16_dot_name = "none";
#endif

  // Shape of a register block of C in team_multiply: rows x vectors, so that
  // the accumulators, one row of B (`vectors` registers) and the broadcast
  // element of A fit the register file: 8 x 2 = 16 + 3 of 32 registers, 6 x 2
  // = 12 + 3 of 16 (12 independent sums cover the multiply-add latency; 4 x 2
  // ran 0.75x as fast on Zen 3). Without a vector unit: 4 rows of plain loops.
  static constexpr int block_rows = vector_bytes == 0 ? 4 : vector_registers >= 32 ? 8 : 6;
  static constexpr int block_vectors = 2;
  // Keeps a loaded vector in a register: without it, GCC's tuning for AMD Zen
  // (-march=native on Zen 3) folds the load of B's row into every multiply-add
  // that uses it, block_rows loads instead of one, and the block becomes bound
  // by loads (0.6x the rate of the same code tuned for a generic x86-64).
  template <class V>
  static inline void hold_in_register(V& v) {
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__)) && defined(__SSE2__)
#if defined(__AVX512F__)
    constexpr unsigned register_bytes = 64;
#elif defined(__AVX__)
    constexpr unsigned register_bytes = 32;
#else
    constexpr unsigned register_bytes = 16;
#endif
    // (A vector wider than the registers, as with REFORMER_TILE_OVERRIDE, is left alone.)
    if constexpr (sizeof(V) <= register_bytes) asm("" : "+x"(v));
#elif defined(__GNUC__) && defined(__aarch64__)
    if constexpr (sizeof(V) <= 16) asm("" : "+w"(v));
#else
    (void)v;
#endif
  }

  static_assert(vector_bytes == 0 || (vector_bytes & (vector_bytes - 1)) == 0,
                "the vector width must be a power of two");
  static_assert(vector_bytes == 0 || vector_registers >= 16,
                "a register block needs at least 16 vector registers");
};

// The GPU side of the same choices (CUDA and HIP builds; host builds ignore
// it). Threads per team of the chunked attention kernels (LSH and local, one
// team per chunk of 64 queries): Kokkos' AUTO gave them 32, whose level-1
// scratch pool is reserved for every resident team. On an H200 (2026-11-26,
// docs/benchmarks.md) the LSH-2 and local layers at 16K ran in 22.8 and 25.4 ms
// with AUTO, 16.9 / 16.3 with 64 threads, 15.2 / 11.9 with 128 and 18.0 / 10.7
// with 256, and the pool shrank from 2.9 / 6.0 GiB to 0.8 / 1.6 GiB at 128.
// The tiled kernels (exact and relative attention) keep AUTO: 64 threads was
// no faster there (214 against 221 ms) and 256 took twice as long.
//
// The streamed shape of the same kernels (the GPU default since 2026-11-26,
// attention/chunked_kernels.hpp; not yet timed on a GPU): a team holds
// chunked_query_tile queries and streams its window's keys through level-0
// scratch, chunked_forward_key_tile at a time in the forward and
// chunked_backward_key_tile in the backward, whose team also sums the dq of
// chunked_backward_query_rows queries at a time (a chunk of 128, local
// attention's default, takes two passes over its window). At chunk 64 or 128
// and d_head 64 in float32 that is 17.3 KiB (forward) and 35.3 KiB (backward)
// per team, within the 40 KiB of level 0 that Kokkos 3.4 gives a team on CUDA
// and HIP, so no level-1 pool is reserved; the whole-window tiles need 113
// and 225 KiB at chunk 64. Every size is a multiple of the GPU's register
// block width (TileTraits::block_cols, 4).
//
// Exact attention (attention/exact.cpp) has two GPU tilings, picked at run
// time (REFORMER_EXACT_TILES, core/team_scratch.hpp's ExactTiles), so that one
// GPU run can time both:
//  - `gpu` (the default): 16 x 16 tiles in every kernel, one thread per 1 x 4
//    register block. On the H200 (2026-11-26) the forward ran at 2-3 TFLOP/s:
//    a 16 x 16 x 64 tile product is 16K multiply-adds between team barriers,
//    and a 1 x 4 block loads 5 scratch values per 4 multiply-adds;
//  - `gpu-wide` (not yet timed on a GPU): a forward of 32 x 32 tiles with
//    4 x 4 blocks (4x the work per barrier, 8 loads per 16 multiply-adds;
//    36.4 KiB of level 0 at d_head 64), and backward passes of 2 x 4 blocks on
//    16 x 16 (keys pass: 32 x 32 would need 60 KiB) and 32 x 16 tiles
//    (queries pass, 36.4 KiB). Teams of wide_team_size threads.
// Block columns are 4 everywhere (a head is padded to whole blocks).
struct GpuTarget {
  static constexpr int chunked_team_size = 128;
  static constexpr int chunked_query_tile = 16;
  static constexpr int chunked_forward_key_tile = 16;
  static constexpr int chunked_backward_key_tile = 8;
  static constexpr int chunked_backward_query_rows = 64;

  static constexpr int block_cols = 4;
  static constexpr int exact_tile = 16;
  static constexpr int exact_block_rows = 1;
  static constexpr int wide_forward_tile = 32;
  static constexpr int wide_forward_block_rows = 4;
  static constexpr int wide_keys_query_tile = 16, wide_keys_key_tile = 16;
  static constexpr int wide_queries_query_tile = 32, wide_queries_key_tile = 16;
  static constexpr int wide_backward_block_rows = 2;
  static constexpr int wide_team_size = 128;

  // Row-wise kernels (RowKernels::lanes, core/team_scratch.hpp): a row per 32
  // vector lanes (a warp; HIP's wavefronts of 64 take two rows), 4 rows per
  // team. Not yet timed on a GPU: the layer norms took 16.3 ms of a 198 ms
  // profiled 16K step on the H200 with a team (Kokkos' AUTO size) per row.
  static constexpr int row_lanes = 32;
  static constexpr int rows_per_team = 4;
};

// A build for a target without AVX-512 (x86-64-v3) may carry a second copy of a
// hot kernel compiled for AVX-512, taken at run time on a CPU that has it (the
// host BLAS does the same). GCC on x86-64 only (#pragma GCC target); the copy
// lies between REFORMER_WIDE_HOST_BEGIN and REFORMER_WIDE_HOST_END.
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && !defined(__AVX512F__) && \
    !defined(__CUDACC__) && !defined(__HIPCC__) && !defined(REFORMER_TILE_VECTOR_BYTES)
#define REFORMER_WIDE_HOST_CLONE 1
#define REFORMER_WIDE_HOST_BEGIN \
  _Pragma("GCC push_options")    \
      _Pragma("GCC target(\"avx512f,avx512vl,avx512bw,avx512dq,prefer-vector-width=512\")")
#define REFORMER_WIDE_HOST_END _Pragma("GCC pop_options")
// Whether this CPU runs the AVX-512 copies.
inline bool wide_host_supported() {
  static const bool supported =
      __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq");
  return supported;
}
#endif

}  // namespace reformer
