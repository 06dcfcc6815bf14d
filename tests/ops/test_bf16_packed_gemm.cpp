// The products of bf16 activations (ops::mixed_matmul, projections_backward;
// on the host the packed GEMM of src/ops/tpls/host_bf16_gemm.hpp) against a
// double-precision sum of the same bf16 and float32 values, over shapes that
// are not whole register blocks (12 x 32 on AVX-512, 6 x 16 on AVX2), packed
// segments (256 deep), or packing blocks: 1 x 1 x 1, odd sizes, k over several
// segments, n over several column blocks; padded rows and row blocks.
//
// Tolerance: a float32 sum of k products (with beta C and the bias) is within
// (k + 2) 2^-24 sum |terms| of the exact sum; a bf16 C adds its one rounding,
// 2^-8 |result|.
#include "reformer/core/cpu_target.hpp"
#include "reformer/ops/gemm.hpp"
#include "support/bf16_checks.hpp"
#include "support/checks.hpp"
#include "support/device_blas_env.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace reformer {
namespace {

using ops::Trans;

// Values in [-1, 1) from a seed (a 64-bit LCG), rounded to bf16 where the
// operand is stored in bf16, so that the reference sees the stored values.
template <class T>
std::vector<double> values(Index count, std::uint64_t seed) {
  std::vector<double> out(count);
  std::uint64_t s = seed * 6364136223846793005ull + 1442695040888963407ull;
  for (auto& v : out) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    const float f = float(double(s >> 11) / double(1ull << 53) * 2.0 - 1.0);
    v = double(float(T(f)));
  }
  return out;
}

// The values of v through a compact copy in v's memory space: a padded
// device view has no host mirror that deep_copy can fill directly (seen on
// CUDA: "no available copy mechanism: padded_mirror to padded").
template <class T>
std::vector<double> read(const View2<T>& v) {
  View2<T> compact("compact", v.extent(0), v.extent(1));
  Kokkos::deep_copy(compact, v);
  auto host = Kokkos::create_mirror_view_and_copy(HostSpace(), compact);
  std::vector<double> out(v.extent(0) * v.extent(1));
  for (Index i = 0; i < Index(v.extent(0)); ++i)
    for (Index j = 0; j < Index(v.extent(1)); ++j)
      out[i * v.extent(1) + j] = double(float(host(i, j)));
  return out;
}

// A [rows, cols] view holding v; rows padded for alignment (a row stride
// longer than a row) when `padded`.
template <class T>
View2<T> make(const std::vector<double>& v, Index rows, Index cols, bool padded = false) {
  View2<T> compact("compact", rows, cols);
  auto host = Kokkos::create_mirror_view(compact);
  for (Index i = 0; i < rows; ++i)
    for (Index j = 0; j < cols; ++j) host(i, j) = T(float(v[i * cols + j]));
  Kokkos::deep_copy(compact, host);
  if (!padded) return compact;
  View2<T> out(Kokkos::view_alloc("padded", Kokkos::AllowPadding), rows, cols);
  Kokkos::deep_copy(out, compact);  // within one memory space: a copy kernel
  return out;
}

// Checks got against sum (the exact result) with bound the sum of |terms|.
void expect_close(const std::vector<double>& got, const std::vector<double>& exact,
                  const std::vector<double>& magnitude, Index k, bool bf16_result,
                  const std::string& what) {
  const double u = std::ldexp(1.0, -24);
  Index bad = 0;
  for (std::size_t e = 0; e < got.size(); ++e) {
    double slack = double(k + 2) * u * magnitude[e];
    if (bf16_result) slack = std::ldexp(std::abs(exact[e]), -8) + slack * (1.0 + 1.0 / 256);
    if (!(std::abs(got[e] - exact[e]) <= slack) && bad++ < 3)
      ADD_FAILURE() << what << ": element " << e << " is " << got[e] << ", the exact result "
                    << exact[e] << ", allowed error " << slack;
  }
  EXPECT_EQ(bad, 0) << what;
}

struct Shape {
  Index m, n, k;
};

// C = alpha op(A) op(B) + beta C + bias for bf16 A, float or bf16 B, float or
// bf16 C, both transposes of B (and of A for a float C), beta 0 and 1, with and
// without a bias.
template <class TB, class TC>
void check_products(const Shape& s, bool ta, bool tb, float beta, bool with_bias) {
  const Index m = s.m, n = s.n, k = s.k;
  const std::string what = "m=" + std::to_string(m) + " n=" + std::to_string(n) +
                           " k=" + std::to_string(k) + (ta ? " A^T" : " A") + (tb ? " B^T" : " B") +
                           " beta=" + std::to_string(beta) + (with_bias ? " bias" : "") +
                           (sizeof(TB) == 2 ? " bf16 B" : " float B") +
                           (sizeof(TC) == 2 ? " bf16 C" : " float C");
  const auto av = values<bf16>(m * k, 1 + m), bv = values<TB>(k * n, 2 + n);
  const auto cv = values<TC>(m * n, 3 + k), biasv = values<float>(n, 4);
  const auto a = make<bf16>(av, ta ? k : m, ta ? m : k);
  const auto b = make<TB>(bv, tb ? n : k, tb ? k : n);
  auto c = make<TC>(cv, m, n);
  View1<float> bias("bias", with_bias ? n : 0);
  {
    auto host = Kokkos::create_mirror_view(bias);
    for (Index j = 0; j < Index(bias.extent(0)); ++j) host(j) = float(biasv[j]);
    Kokkos::deep_copy(bias, host);
  }
  const float alpha = 1.0f;
  ops::mixed_matmul<bf16, TB, TC>(a, ta ? Trans::Yes : Trans::No, b, tb ? Trans::Yes : Trans::No, c,
                                  alpha, beta, bias);
  const auto product = testing::host_product(av, ta, bv, tb, m, n, k);
  std::vector<double> exact(m * n), magnitude(m * n);
  for (Index i = 0; i < m; ++i)
    for (Index j = 0; j < n; ++j) {
      const double rest = beta * cv[i * n + j] + (with_bias ? biasv[j] : 0.0);
      exact[i * n + j] = alpha * product.value[i * n + j] + rest;
      magnitude[i * n + j] =
          product.magnitude[i * n + j] + std::abs(beta * cv[i * n + j]) + (with_bias ? 1.0 : 0.0);
    }
  expect_close(read(c), exact, magnitude, k, sizeof(TC) == 2, what);
}

const std::vector<Shape>& shapes() {
  // 1 x 1 x 1; less than one block; odd sizes over several blocks and three
  // 256-deep segments; more rows than one packed A block (252 on AVX-512) and
  // more columns than one packed B block (768 at depth 256).
  static const std::vector<Shape> all = {{1, 1, 1},     {5, 7, 3},      {13, 33, 31},
                                         {37, 65, 513}, {300, 47, 260}, {25, 1100, 20}};
  return all;
}

// Every case runs on each host path of the bf16 products (ops::HostBf16Gemm):
// the BLAS on widened panels, the packed GEMM with the widest block this CPU
// runs, the packed GEMM with the build's own block, and the packed GEMM with
// vdpbf16ps for the products of two bf16 factors (where the build's target
// has it). So each machine tests the block it would not take by default: the
// AVX2 block of an x86-64-v3 build on an AVX-512 CPU, the NEON block under
// qemu (whose default is the BLAS), the vdpbf16ps path. On a device the products take the vendor
// BLAS whatever the path.
class PackedBf16Gemm : public ::testing::TestWithParam<ops::HostBf16Gemm> {
 protected:
  void SetUp() override {
    saved_ = ops::host_bf16_gemm();
    ops::set_host_bf16_gemm(GetParam());
  }
  void TearDown() override { ops::set_host_bf16_gemm(saved_); }

 private:
  ops::HostBf16Gemm saved_ = ops::HostBf16Gemm::Automatic;
  // The exact-weight bounds on a device too (support/bf16_checks.hpp).
  testing::KeepFloatWeights keep_;
};

INSTANTIATE_TEST_SUITE_P(HostPaths, PackedBf16Gemm,
                         ::testing::Values(ops::HostBf16Gemm::Blas, ops::HostBf16Gemm::Packed,
                                           ops::HostBf16Gemm::PackedBuildBlock,
                                           ops::HostBf16Gemm::PackedDot),
                         [](const ::testing::TestParamInfo<ops::HostBf16Gemm>& info) {
                           switch (info.param) {
                             case ops::HostBf16Gemm::Blas:
                               return std::string("Blas");
                             case ops::HostBf16Gemm::Packed:
                               return std::string("Packed");
                             case ops::HostBf16Gemm::PackedBuildBlock:
                               return std::string("PackedBuildBlock");
                             case ops::HostBf16Gemm::PackedDot:
                               return std::string("PackedDot");
                             default:
                               return std::string("Automatic");
                           }
                         });

// The path in force is the one the case asked for (a path that silently
// stayed on the default would test nothing new).
TEST_P(PackedBf16Gemm, ThePathIsTheOneAskedFor) {
  EXPECT_EQ(ops::host_bf16_gemm(), GetParam());
  const std::string block = ops::host_bf16_gemm_block();
  if (GetParam() == ops::HostBf16Gemm::Blas)
    EXPECT_EQ(block, "none (BLAS)");
  else
    EXPECT_NE(block, "none (BLAS)");
    // vdpbf16ps is named exactly where it was asked for and the build's target
    // has it (with its own vector width: no tile override).
#ifdef REFORMER_TILE_VECTOR_BYTES
  constexpr bool tile_override = true;
#else
  constexpr bool tile_override = false;
#endif
  const bool dot = block.find("vdpbf16ps") != std::string::npos;
  EXPECT_EQ(dot, GetParam() == ops::HostBf16Gemm::PackedDot && CpuTarget::bf16_dot_product &&
                     !tile_override)
      << block;
}

TEST_P(PackedBf16Gemm, RowsMatchTheExactSumOverAwkwardShapes) {
  for (const Shape& s : shapes())
    for (bool tb : {false, true})
      for (float beta : {0.0f, 1.0f})
        for (bool with_bias : {false, true}) {
          check_products<float, bf16>(s, false, tb, beta, with_bias);
          check_products<float, float>(s, false, tb, beta, with_bias);
        }
}

TEST_P(PackedBf16Gemm, WeightGradientsMatchTheExactSumOverAwkwardShapes) {
  // op(A) = A^T: C [m, n] sums over k rows, in 256-row chunks (k = 513: three).
  for (const Shape& s : shapes())
    for (float beta : {0.0f, 1.0f}) {
      check_products<bf16, float>(s, true, false, beta, false);
      check_products<float, float>(s, true, false, beta, false);
    }
}

// Operands whose rows lie further apart than their length (padded views) and
// row blocks of taller views give the same bits as compact copies.
TEST_P(PackedBf16Gemm, RowStridesAndRowBlocksGiveTheSameBits) {
  const Index m = 29, n = 45, k = 70;
  const auto av = values<bf16>(m * k, 11), bv = values<float>(k * n, 12);
  const auto dyv = values<bf16>(m * n, 13);
  const auto a = make<bf16>(av, m, k), a_padded = make<bf16>(av, m, k, true);
  const auto b = make<float>(bv, k, n), b_padded = make<float>(bv, k, n, true);
  const auto dy = make<bf16>(dyv, m, n), dy_padded = make<bf16>(dyv, m, n, true);
  // C compact, C padded, C as rows [m, 2m) of a taller view.
  View2<bf16> c("c", m, n), c_tall("c_tall", 3 * m, n);
  View2<bf16> c_padded(Kokkos::view_alloc("c_padded", Kokkos::AllowPadding), m, n);
  const auto c_rows = Kokkos::subview(c_tall, std::make_pair(m, 2 * m), Kokkos::ALL);
  ops::mixed_matmul<bf16, float, bf16>(a, Trans::No, b, Trans::No, c);
  ops::mixed_matmul<bf16, float, bf16>(a_padded, Trans::No, b_padded, Trans::No, c_padded);
  ops::mixed_matmul<bf16, float, bf16>(a, Trans::No, b, Trans::No, c_rows);
  EXPECT_EQ(read(c_padded), read(c));
  View2<bf16> c_copy("c_copy", m, n);
  Kokkos::deep_copy(c_copy, c_rows);
  EXPECT_EQ(read(c_copy), read(c));
  // A weight gradient x^T dy from padded operands into a padded C.
  View2<float> g("g", k, n), g_padded(Kokkos::view_alloc("g_padded", Kokkos::AllowPadding), k, n);
  ops::mixed_matmul<bf16, bf16, float>(a, Trans::Yes, dy, Trans::No, g);
  ops::mixed_matmul<bf16, bf16, float>(a_padded, Trans::Yes, dy_padded, Trans::No, g_padded);
  EXPECT_EQ(read(g_padded), read(g));
}

// projections_backward: dx = beta dx + sum_i dy_i W_i^T over terms of different
// widths (one rounding of the float32 sum), and dW_i += x^T dy_i.
TEST_P(PackedBf16Gemm, ProjectionsBackwardSumsEveryTermBeforeRounding) {
  const Index m = 77, k = 300;
  const std::vector<Index> widths = {40, 75, 1};
  for (double beta : {0.0, 1.0}) {
    const auto xv = values<bf16>(m * k, 21), dxv = values<bf16>(m * k, 22);
    const auto x = make<bf16>(xv, m, k);
    auto dx = make<bf16>(dxv, m, k);
    std::vector<std::vector<double>> wv, dyv, gv;
    std::vector<In2<float>> weights;
    std::vector<In2<bf16>> dys;
    std::vector<View2<float>> grads;
    for (std::size_t i = 0; i < widths.size(); ++i) {
      const Index w = widths[i];
      wv.push_back(values<float>(k * w, 30 + i));
      dyv.push_back(values<bf16>(m * w, 40 + i));
      gv.push_back(values<float>(k * w, 50 + i));
      weights.push_back(make<float>(wv[i], k, w));
      dys.push_back(make<bf16>(dyv[i], m, w));
      grads.push_back(make<float>(gv[i], k, w));
    }
    ops::projections_backward<bf16>(x, weights, dys, dx, beta, grads);
    // dx
    Index depth = 0;
    for (Index w : widths) depth += w;
    std::vector<double> exact(m * k), magnitude(m * k);
    for (Index r = 0; r < m; ++r)
      for (Index j = 0; j < k; ++j) {
        double sum = beta * dxv[r * k + j], mag = std::abs(sum);
        for (std::size_t i = 0; i < widths.size(); ++i)
          for (Index p = 0; p < widths[i]; ++p) {
            const double t = dyv[i][r * widths[i] + p] * wv[i][j * widths[i] + p];
            sum += t;
            mag += std::abs(t);
          }
        exact[r * k + j] = sum;
        magnitude[r * k + j] = mag;
      }
    expect_close(read(dx), exact, magnitude, depth, true, "dx, beta " + std::to_string(beta));
    // dW_i
    for (std::size_t i = 0; i < widths.size(); ++i) {
      const Index w = widths[i];
      std::vector<double> g(k * w), gm(k * w);
      for (Index j = 0; j < k; ++j)
        for (Index q = 0; q < w; ++q) {
          double sum = gv[i][j * w + q], mag = std::abs(sum);
          for (Index r = 0; r < m; ++r) {
            const double t = xv[r * k + j] * dyv[i][r * w + q];
            sum += t;
            mag += std::abs(t);
          }
          g[j * w + q] = sum;
          gm[j * w + q] = mag;
        }
      expect_close(read(grads[i]), g, gm, m, false, "dW_" + std::to_string(i));
    }
  }
}

}  // namespace
}  // namespace reformer
