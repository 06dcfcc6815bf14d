// Guard against a collapse of the tile kernels on the CPU this runs on.
//
// Every fused attention kernel (exact, LSH, local) does its products through
// team_multiply on tiles in team scratch, with a register block sized for the
// vector unit the build targets (core/cpu_target.hpp). A block that does not
// fit the register file spills on every step and runs at a few percent of the
// machine's rate, silently: the results stay right. This program measures
// team_multiply at the kernels' tile shapes against the host BLAS's sgemm of
// the same size, on the same tiles (team scratch, hot in cache) and the same
// threads, prints both rates and fails when team_multiply falls below a floor
// (a fraction of the BLAS rate, default 0.35; a shape below it is measured
// once more before the guard fails). It also prints the machine's
// sgemm rate on a large product, the reference every benchmark table quotes.
//
//   tile_guard [--floor 0.35] [--seconds 0.3]
//
// Exit status: 0 when every shape is above the floor, 1 when one is not, 2 on
// bad arguments. The test command runs it for the build's own target and for
// an x86-64-v3 build (bench/CMakeLists.txt).
#include "reformer/core/runtime.hpp"
#include "reformer/core/target_description.hpp"
#include "reformer/core/tile_multiply.hpp"
#include "reformer/ops/gemm.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

extern "C" void sgemm_(const char* transa, const char* transb, const int* m, const int* n,
                       const int* k, const float* alpha, const float* a, const int* lda,
                       const float* b, const int* ldb, const float* beta, float* c, const int* ldc);

namespace reformer {
namespace {

using Clock = std::chrono::steady_clock;

// C[m][n] += A B with A[m][k] read as rows (a_row = k, a_col = 1) or read
// transposed out of a stored [k][m] (a_row = 1, a_col = m), as the kernels do.
struct Shape {
  const char* use;
  Index m, n, k;
  bool a_transposed;
};

// The products of the fused kernels, float, d_head 64: exact attention's
// tiles (TileTraits) and LSH/local attention's chunks of 64 with a window of 128.
constexpr Index kQueries = TileTraits<float>::query_tile, kKeys = TileTraits<float>::key_tile;
const Shape kShapes[] = {
    {"exact: S^T = K Qs^T", kKeys, kQueries, 64, false},
    {"exact: O += P V (P^T stored)", kQueries, 64, kKeys, true},
    {"LSH/local: S = Q K^T (window 128)", 64, 128, 64, false},
    {"LSH/local: out = P V (window 128)", 64, 64, 128, false},
};

constexpr int kReps = 16;  // products per team per launch, on the same tiles

Index tile_floats(const Shape& s) { return s.m * s.k + s.k * s.n + s.m * s.n; }
size_t tile_bytes(const Shape& s) { return ScratchVector<float>::shmem_size(tile_floats(s)); }

// Fills a team's scratch tiles with small values (every lane the same
// pattern, so both contenders multiply the same numbers).
KOKKOS_INLINE_FUNCTION void fill_tiles(float* p, Index count) {
  for (Index i = 0; i < count; ++i) p[i] = float((i * 7919) % 1000) * 1e-3f - 0.5f;
}

// Seconds for one launch of `league` teams doing kReps products each.
template <class Body>
double launch(const Shape& s, Index league, Body body) {
  auto policy = team_policy(league, tile_bytes(s));
  const auto start = Clock::now();
  Kokkos::parallel_for("tile_guard", policy, body);
  Kokkos::fence();
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// GFLOP/s of multiply(team, a, b, c) on shape s, where a, b and c are the
// team's scratch tiles, a and b filled: launches of growing size until one
// takes at least `seconds`, then the best of three of that size.
template <class Multiply>
double rate(const Shape& s, double seconds, Multiply multiply) {
  auto body = [=](const TeamMember& team) {
    ScratchVector<float> tiles(team.team_scratch(0), tile_floats(s));
    float* a = tiles.data();
    float* b = a + s.m * s.k;
    float* c = b + s.k * s.n;
    Kokkos::single(Kokkos::PerTeam(team), [&] { fill_tiles(a, s.m * s.k + s.k * s.n); });
    team.team_barrier();
    multiply(team, a, b, c);
  };
  Index league = 64;
  double t = launch(s, league, body);
  while (t < seconds && league < (Index(1) << 24)) {
    league *= 2;
    t = launch(s, league, body);
  }
  for (int i = 0; i < 2; ++i) {
    const double again = launch(s, league, body);
    t = again < t ? again : t;
  }
  return 2.0 * s.m * s.n * s.k * kReps * double(league) / t * 1e-9;
}

double team_multiply_rate(const Shape& s, double seconds) {
  return rate(s, seconds, [=](const TeamMember& team, float* a, float* b, float* c) {
    const Index a_row = s.a_transposed ? 1 : s.k, a_col = s.a_transposed ? s.m : 1;
    team_multiply<false>(team, s.m, s.n, s.k, c, s.n, a, a_row, a_col, b, s.n);
    for (int r = 1; r < kReps; ++r) {
      team.team_barrier();
      team_multiply<true>(team, s.m, s.n, s.k, c, s.n, a, a_row, a_col, b, s.n);
    }
  });
}

// The same products through sgemm on the same scratch tiles, one call per
// team (row-major C = A B is column-major C^T = B^T A^T).
double blas_rate(const Shape& s, double seconds) {
  return rate(s, seconds, [=](const TeamMember& team, float* a, float* b, float* c) {
    Kokkos::single(Kokkos::PerTeam(team), [&] {
      const int m = int(s.m), n = int(s.n), k = int(s.k);
      const int lda = s.a_transposed ? m : k;
      const char ta = s.a_transposed ? 'T' : 'N';
      const float one = 1, zero = 0;
      for (int r = 0; r < kReps; ++r)
        sgemm_("N", &ta, &n, &m, &k, &one, b, &n, a, &lda, r == 0 ? &zero : &one, c, &n);
    });
  });
}

// The machine's sgemm rate: one large product through ops::matmul (the host
// BLAS split over the Kokkos threads, as the model's projections run).
double large_sgemm_rate() {
  constexpr Index n = 2048;
  View2<float> a("a", n, n), b("b", n, n), c("c", n, n);
  Kokkos::deep_copy(a, 0.5f);
  Kokkos::deep_copy(b, 0.25f);
  ops::matmul<float>(a, ops::Trans::No, b, ops::Trans::No, c);
  Kokkos::fence();
  double best = 1e30;
  for (int i = 0; i < 3; ++i) {
    const auto start = Clock::now();
    ops::matmul<float>(a, ops::Trans::No, b, ops::Trans::No, c);
    Kokkos::fence();
    const double t = std::chrono::duration<double>(Clock::now() - start).count();
    best = t < best ? t : best;
  }
  return 2.0 * n * n * n / best * 1e-9;
}

int usage(const char* why) {
  std::fprintf(stderr,
               "tile_guard: %s\nusage: tile_guard [--floor F] [--seconds S]\n"
               "  --floor F    fail when team_multiply runs below F x the BLAS rate of the same "
               "shape (0 < F <= 1, default 0.35)\n"
               "  --seconds S  least time of one timed launch (0 < S <= 10, default 0.3)\n",
               why);
  return 2;
}

int run(int argc, char** argv) {
  double floor = 0.35, seconds = 0.3;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if ((arg == "--floor" || arg == "--seconds") && i + 1 < argc) {
      char* end = nullptr;
      const double v = std::strtod(argv[++i], &end);
      if (end == argv[i] || *end != '\0')
        return usage((arg + " takes a number, not '" + argv[i] + "'").c_str());
      if (arg == "--floor" && !(v > 0 && v <= 1))
        return usage(("--floor " + std::string(argv[i]) + " is not in (0, 1]").c_str());
      if (arg == "--seconds" && !(v > 0 && v <= 10))
        return usage(("--seconds " + std::string(argv[i]) + " is not in (0, 10]").c_str());
      (arg == "--floor" ? floor : seconds) = v;
    } else {
      return usage(("unknown argument '" + arg + "'").c_str());
    }
  }
  Runtime runtime(RuntimeOptions{-1, -1, /*track_memory=*/false});
  const BackendInfo info = backend_info();
  // This file's own target and block, which are what it measures: the
  // x86-64-v3 guard links the library built for the machine (whose
  // backend_info().cpu_target names that build's target).
  using F = TileTraits<float>;
  const std::string target =
      describe_cpu_target(CpuTarget::name, CpuTarget::vector_bytes, CpuTarget::vector_registers,
                          F::block_rows, F::block_cols);
  std::printf("tile_guard: %s, %d threads; %s; floor %.2f x BLAS\n",
              info.default_execution_space.c_str(), info.concurrency, target.c_str(), floor);
  std::printf("host BLAS: %s\n", ops::host_blas_description().c_str());
  std::printf("large sgemm (2048^3, host BLAS over the Kokkos threads): %.1f GFLOP/s\n",
              large_sgemm_rate());
  std::printf("%-36s %8s %14s %12s %8s\n", "shape (float)", "m n k", "team_multiply", "BLAS same",
              "ratio");
  bool ok = true;
  for (const Shape& s : kShapes) {
    double ours = team_multiply_rate(s, seconds), blas = blas_rate(s, seconds);
    if (ours < floor * blas) {  // measure once more: a busy machine is not a collapse
      ours = std::max(ours, team_multiply_rate(s, seconds));
      blas = std::min(blas, blas_rate(s, seconds));
    }
    const double ratio = ours / blas;
    const bool pass = ratio >= floor;
    ok = ok && pass;
    std::printf("%-36s %3d %3d %3d %9.1f GF/s %7.1f GF/s %7.2f  %s\n", s.use, int(s.m), int(s.n),
                int(s.k), ours, blas, ratio, pass ? "ok" : "BELOW FLOOR");
  }
  if (!ok)
    std::printf(
        "tile_guard: FAIL: team_multiply runs below %.2f x the BLAS rate of the same shape: the "
        "register block (%s) does not suit this CPU; check core/cpu_target.hpp and the build's "
        "-march\n",
        floor, target.c_str());
  else
    std::printf("tile_guard: ok\n");
  return ok ? 0 : 1;
}

}  // namespace
}  // namespace reformer

int main(int argc, char** argv) {
  // The BLAS rates it compares with are OpenBLAS's kernels for the vectors
  // this file is built for (ops/gemm.hpp): the x86-64-v3 guard on an AVX-512
  // CPU against the AVX2 kernels ("Haswell"), or it measures AVX-512 against
  // AVX2 (0.34-0.57x on one machine, where the same-width ratio is 0.52-0.84x), never a
  // generic core's fallback.
  std::string core = reformer::ops::host_blas_core_for_vectors(reformer::CpuTarget::vector_bytes);
  if (core.empty()) core = reformer::ops::host_blas_core_override();
  reformer::ops::run_with_host_blas_core(argv, core);
  return reformer::run(argc, argv);
}
