#include "reformer/core/error.hpp"
#include "reformer/core/memory_tracker.hpp"
#include "reformer/ops/activations.hpp"
#include "reformer/ops/elementwise.hpp"
#include "reformer/ops/gemm.hpp"
#include "reformer/ops/linear.hpp"
#include "support/gradcheck.hpp"
#include "support/kernel_settings.hpp"

#include <gtest/gtest.h>

#include <cstdlib>

#include <algorithm>
#include <cmath>
#include <string>
#include <type_traits>
#include <vector>

#include <dlfcn.h>

namespace reformer {
namespace {

using namespace reformer::testing;
using ops::Trans;

// Plain triple loop: C = alpha op(A) op(B) + beta C on host vectors.
std::vector<double> reference_product(const std::vector<double>& a, Index a1, bool ta,
                                      const std::vector<double>& b, Index b1, bool tb,
                                      std::vector<double> c, Index m, Index n, Index k,
                                      double alpha, double beta) {
  for (Index i = 0; i < m; ++i)
    for (Index j = 0; j < n; ++j) {
      double sum = 0;
      for (Index p = 0; p < k; ++p)
        sum += (ta ? a[p * a1 + i] : a[i * a1 + p]) * (tb ? b[j * b1 + p] : b[p * b1 + j]);
      c[i * n + j] = alpha * sum + beta * c[i * n + j];
    }
  return c;
}

TEST(Matmul, AllTransposeCombinationsMatchReference) {
  const Index m = 5, n = 7, k = 4;
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      View2<double> a("a", ta ? k : m, ta ? m : k), b("b", tb ? n : k, tb ? k : n), c("c", m, n);
      fill_uniform(a, 1);
      fill_uniform(b, 2);
      fill_uniform(c, 3);
      const auto expected = reference_product(to_host(a), a.extent(1), ta, to_host(b), b.extent(1),
                                              tb, to_host(c), m, n, k, 0.5, 2.0);
      ops::matmul<double>(a, ta ? Trans::Yes : Trans::No, b, tb ? Trans::Yes : Trans::No, c, 0.5,
                          2.0);
      EXPECT_LT(relative_error(to_host(c), expected), 1e-14) << "ta=" << ta << " tb=" << tb;
    }
}

// The Runtime makes a pthreads OpenBLAS sequential before the first product
// (ops registers prepare_host_blas with core/runtime.hpp's setup steps). This
// case computes no product, and ctest runs each case in its own process, so only
// the Runtime of tests/test_main.cpp can have done it.
TEST(Matmul, RuntimeMadeAPthreadsBlasSequential) {
  using GetInt = int (*)();
  const auto get_parallel = reinterpret_cast<GetInt>(dlsym(RTLD_DEFAULT, "openblas_get_parallel"));
  const auto get_threads =
      reinterpret_cast<GetInt>(dlsym(RTLD_DEFAULT, "openblas_get_num_threads"));
  // openblas_get_parallel: 0 sequential, 1 pthreads, 2 OpenMP.
  if (get_parallel == nullptr || get_threads == nullptr || get_parallel() != 1)
    GTEST_SKIP() << "no pthreads OpenBLAS in this process";
  EXPECT_EQ(get_threads(), 1);
}

// Which OpenBLAS kernels run (ops/gemm.hpp): the description names OpenBLAS's
// core; a core set by the user (OPENBLAS_CORETYPE) is never overridden; an
// override, when there is one, is a core this CPU runs (SkylakeX or Haswell).
TEST(Matmul, HostBlasCoreOverrideOnlyReplacesAGenericCore) {
  using Name = const char* (*)();
  const auto corename = reinterpret_cast<Name>(dlsym(RTLD_DEFAULT, "openblas_get_corename"));
  const std::string description = ops::host_blas_description();
  if (corename == nullptr) {
    EXPECT_EQ(ops::host_blas_core_override(), "");
    GTEST_SKIP() << "no OpenBLAS in this process: " << description;
  }
  EXPECT_NE(description.find(std::string("core ") + corename()), std::string::npos) << description;
  const std::string override_core = ops::host_blas_core_override();
  EXPECT_TRUE(override_core.empty() || override_core == "SkylakeX" || override_core == "Haswell")
      << override_core;
  const char* set = std::getenv("OPENBLAS_CORETYPE");
  const std::string saved = set ? set : "";
  setenv("OPENBLAS_CORETYPE", "Haswell", 1);
  EXPECT_EQ(ops::host_blas_core_override(), "");  // the user's choice stands
  if (set)
    setenv("OPENBLAS_CORETYPE", saved.c_str(), 1);
  else
    unsetenv("OPENBLAS_CORETYPE");
}

// The core of a given vector width (the x86-64-v3 tile guard's reference,
// ops/gemm.hpp): only SkylakeX for 64 bytes (none on an AVX2-only CPU) or
// Haswell for 32, never the core already loaded, nothing for other widths,
// and never over the user's choice.
TEST(Matmul, HostBlasCoreForVectorsNamesACoreOfThatWidth) {
  using Name = const char* (*)();
  const auto corename = reinterpret_cast<Name>(dlsym(RTLD_DEFAULT, "openblas_get_corename"));
  for (int bytes : {0, 16, 128}) EXPECT_EQ(ops::host_blas_core_for_vectors(bytes), "") << bytes;
  if (corename == nullptr) {
    EXPECT_EQ(ops::host_blas_core_for_vectors(32), "");
    GTEST_SKIP() << "no OpenBLAS in this process";
  }
  const std::string wide = ops::host_blas_core_for_vectors(64);
  const std::string narrow = ops::host_blas_core_for_vectors(32);
  EXPECT_TRUE(wide.empty() || wide == "SkylakeX") << wide;
  EXPECT_TRUE(narrow.empty() || narrow == "Haswell") << narrow;
  EXPECT_NE(wide, corename());
  EXPECT_NE(narrow, corename());
  const char* set = std::getenv("OPENBLAS_CORETYPE");
  const std::string saved = set ? set : "";
  setenv("OPENBLAS_CORETYPE", "Prescott", 1);
  EXPECT_EQ(ops::host_blas_core_for_vectors(32), "");  // the user's choice stands
  EXPECT_EQ(ops::host_blas_core_for_vectors(64), "");
  if (set)
    setenv("OPENBLAS_CORETYPE", saved.c_str(), 1);
  else
    unsetenv("OPENBLAS_CORETYPE");
}

// Products large enough to be split over the host threads (one block of rows,
// or of columns when C is wide, per thread; ops/tpls/host_blas.hpp) give the
// plain product for every transpose combination.
TEST(Matmul, ProductsSplitOverThreadsMatchReference) {
  struct Shape {
    Index m, n, k;
  };
  for (const Shape s : {Shape{257, 70, 61}, Shape{40, 301, 99}})
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        View2<double> a("a", ta ? s.k : s.m, ta ? s.m : s.k);
        View2<double> b("b", tb ? s.n : s.k, tb ? s.k : s.n), c("c", s.m, s.n);
        fill_uniform(a, 1);
        fill_uniform(b, 2);
        fill_uniform(c, 3);
        const auto expected =
            reference_product(to_host(a), a.extent(1), ta, to_host(b), b.extent(1), tb, to_host(c),
                              s.m, s.n, s.k, 0.5, 2.0);
        ops::matmul<double>(a, ta ? Trans::Yes : Trans::No, b, tb ? Trans::Yes : Trans::No, c, 0.5,
                            2.0);
        EXPECT_LT(relative_error(to_host(c), expected), 1e-14)
            << s.m << "x" << s.n << "x" << s.k << " ta=" << ta << " tb=" << tb;
        View2<float> af("af", a.extent(0), a.extent(1)), bf("bf", b.extent(0), b.extent(1));
        View2<float> cf("cf", s.m, s.n);
        fill_uniform(af, 4);
        fill_uniform(bf, 5);
        ops::matmul<float>(af, ta ? Trans::Yes : Trans::No, bf, tb ? Trans::Yes : Trans::No, cf);
        const auto expected_f =
            reference_product(to_host(af), af.extent(1), ta, to_host(bf), bf.extent(1), tb,
                              std::vector<double>(s.m * s.n), s.m, s.n, s.k, 1.0, 0.0);
        EXPECT_LT(relative_error(to_host(cf), expected_f), 1e-6)
            << "float " << s.m << "x" << s.n << "x" << s.k << " ta=" << ta << " tb=" << tb;
      }
}

TEST(Matmul, FloatMatchesDoubleReference) {
  View2<float> a("a", 33, 17), b("b", 17, 9), c("c", 33, 9);
  fill_uniform(a, 4);
  fill_uniform(b, 5);
  ops::matmul<float>(a, Trans::No, b, Trans::No, c);
  const auto expected = reference_product(to_host(a), 17, false, to_host(b), 9, false,
                                          std::vector<double>(33 * 9), 33, 9, 17, 1, 0);
  EXPECT_LT(relative_error(to_host(c), expected), 1e-6);
}

TEST(Matmul, RejectsMismatchedShapes) {
  View2<double> a("a", 3, 4), b("b", 5, 6), c("c", 3, 6);
  try {
    ops::matmul<double>(a, Trans::No, b, Trans::No, c);
    FAIL() << "no error";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("op(A) is [3, 4] and op(B) is [5, 6]"), std::string::npos)
        << e.what();
  }
  View2<double> b2("b2", 4, 6), wrong_c("c", 3, 5);
  EXPECT_THROW(ops::matmul<double>(a, Trans::No, b2, Trans::No, wrong_c), ShapeError);
}

TEST(BatchedMatmul, EachBatchEntryMatchesReference) {
  const Index batch = 3, m = 4, n = 6, k = 5;
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      View3<double> a("a", batch, ta ? k : m, ta ? m : k), b("b", batch, tb ? n : k, tb ? k : n),
          c("c", batch, m, n);
      fill_uniform(a, 6);
      fill_uniform(b, 7);
      fill_uniform(c, 8);
      const auto ha = to_host(a), hb = to_host(b), hc = to_host(c);
      ops::batched_matmul<double>(a, ta ? Trans::Yes : Trans::No, b, tb ? Trans::Yes : Trans::No, c,
                                  1.5, 0.5);
      const auto got = to_host(c);
      for (Index bi = 0; bi < batch; ++bi) {
        const Index sa = a.extent(1) * a.extent(2), sb = b.extent(1) * b.extent(2);
        const auto expected = reference_product(
            {ha.begin() + bi * sa, ha.begin() + (bi + 1) * sa}, a.extent(2), ta,
            {hb.begin() + bi * sb, hb.begin() + (bi + 1) * sb}, b.extent(2), tb,
            {hc.begin() + bi * m * n, hc.begin() + (bi + 1) * m * n}, m, n, k, 1.5, 0.5);
        EXPECT_LT(
            relative_error({got.begin() + bi * m * n, got.begin() + (bi + 1) * m * n}, expected),
            1e-14);
      }
    }
}

// Strided batches (ops::StridedBatch): the heads of [length, heads, d]
// tensors read and written in place, every transpose, alpha and beta, against
// the reference product of each head's matrix; values outside the written
// matrices (the other columns of C's rows) stay as they were; bad strides and
// counts are named errors.
TEST(StridedBatchedMatmul, HeadsOfInterleavedTensorsMatchReference) {
  const Index heads = 3, m = 4, n = 6, k = 5, width = 7;  // C's rows hold width > n values a head
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      const Index a_rows = ta ? k : m, a_cols = ta ? m : k;
      const Index b_rows = tb ? n : k, b_cols = tb ? k : n;
      View3<double> a("a", a_rows, heads, a_cols), b("b", b_rows, heads, b_cols),
          c("c", m, heads, width);
      fill_uniform(a, 12);
      fill_uniform(b, 13);
      fill_uniform(c, 14);
      const auto ha = to_host(a), hb = to_host(b), hc = to_host(c);
      const ops::StridedBatch<const double> sa{a.data(), heads,          a_rows,
                                               a_cols,   heads * a_cols, a_cols};
      const ops::StridedBatch<const double> sb{b.data(), heads,          b_rows,
                                               b_cols,   heads * b_cols, b_cols};
      const ops::StridedBatch<double> sc{c.data(), heads, m, n, heads * width, width};
      ops::strided_batched_matmul<double>(sa, ta ? Trans::Yes : Trans::No, sb,
                                          tb ? Trans::Yes : Trans::No, sc, 1.5, 0.5);
      const auto got = to_host(c);
      for (Index h = 0; h < heads; ++h) {
        std::vector<double> ma, mb, mc, gc;
        for (Index i = 0; i < a_rows; ++i)
          for (Index j = 0; j < a_cols; ++j) ma.push_back(ha[(i * heads + h) * a_cols + j]);
        for (Index i = 0; i < b_rows; ++i)
          for (Index j = 0; j < b_cols; ++j) mb.push_back(hb[(i * heads + h) * b_cols + j]);
        for (Index i = 0; i < m; ++i)
          for (Index j = 0; j < n; ++j) {
            mc.push_back(hc[(i * heads + h) * width + j]);
            gc.push_back(got[(i * heads + h) * width + j]);
          }
        const auto expected =
            reference_product(ma, a_cols, ta, mb, b_cols, tb, mc, m, n, k, 1.5, 0.5);
        EXPECT_LT(relative_error(gc, expected), 1e-14) << ta << tb << " head " << h;
        for (Index i = 0; i < m; ++i)
          for (Index j = n; j < width; ++j)
            EXPECT_EQ(got[(i * heads + h) * width + j], hc[(i * heads + h) * width + j]);
      }
    }
  View3<double> x("x", 4, 2, 3);
  const ops::StridedBatch<const double> in{x.data(), 2, 4, 3, 6, 3};
  ops::StridedBatch<double> out{x.data(), 2, 4, 4, 3, 3};  // rows of 4 columns 3 apart
  EXPECT_THROW(ops::strided_batched_matmul<double>(in, Trans::No, in, Trans::Yes, out), ShapeError);
  out = {x.data(), 3, 4, 4, 12, 3};
  EXPECT_THROW(ops::strided_batched_matmul<double>(in, Trans::No, in, Trans::Yes, out), ShapeError);
  out = {x.data(), 2, 4, 5, 12, 3};  // op(A) op(B) is [4, 4]
  EXPECT_THROW(ops::strided_batched_matmul<double>(in, Trans::No, in, Trans::Yes, out), ShapeError);
}

TEST(BatchedMatmul, GradientsThroughTransposedProducts) {
  // L = sum(r * A B); dA = r B^T, dB = A^T r, both computed with batched_matmul.
  const Index batch = 2, m = 3, n = 4, k = 5;
  View3<double> a("a", batch, m, k), b("b", batch, k, n), c("c", batch, m, n), r("r", batch, m, n);
  View3<double> da("da", batch, m, k), db("db", batch, k, n);
  fill_uniform(a, 9);
  fill_uniform(b, 10);
  fill_uniform(r, 11);
  auto loss = [&] {
    ops::batched_matmul<double>(a, Trans::No, b, Trans::No, c);
    return dot(c, r);
  };
  ops::batched_matmul<double>(r, Trans::No, b, Trans::Yes, da);
  ops::batched_matmul<double>(a, Trans::Yes, r, Trans::No, db);
  EXPECT_LT(gradient_error(a, da, loss), 1e-6);
  EXPECT_LT(gradient_error(b, db, loss), 1e-6);
}

// Zeroes the entries of every batch matrix m where zero(i, j) holds.
template <class Zero>
void zero_where(View3<double> m, Zero zero) {
  auto host = Kokkos::create_mirror_view_and_copy(HostSpace(), m);
  for (Index b = 0; b < Index(m.extent(0)); ++b)
    for (Index i = 0; i < Index(m.extent(1)); ++i)
      for (Index j = 0; j < Index(m.extent(2)); ++j)
        if (zero(i, j)) host(b, i, j) = 0;
  Kokkos::deep_copy(m, host);
}

// Triangular structures skip blocks of known zeros; sizes span several tiles.
TEST(BatchedMatmul, TriangularStructuresMatchDenseProducts) {
  const Index batch = 2, n = 150, d = 70;
  View3<double> tri("tri", batch, n, n), b("b", batch, n, d), dense("dense", batch, n, d),
      fast("fast", batch, n, d);
  fill_uniform(tri, 12);
  fill_uniform(b, 13);
  // LowerA: A(r, p) = 0 for p > r.
  zero_where(tri, [](Index r, Index p) { return p > r; });
  ops::batched_matmul<double>(tri, Trans::No, b, Trans::No, dense);
  ops::batched_matmul<double>(tri, Trans::No, b, Trans::No, fast, 1.0, 0.0, ops::Structure::LowerA);
  EXPECT_LT(relative_error(to_host(fast), to_host(dense)), 1e-15);
  // UpperA through a transpose: op(A) = tri^T is upper-triangular.
  ops::batched_matmul<double>(tri, Trans::Yes, b, Trans::No, dense);
  ops::batched_matmul<double>(tri, Trans::Yes, b, Trans::No, fast, 1.0, 0.0,
                              ops::Structure::UpperA);
  EXPECT_LT(relative_error(to_host(fast), to_host(dense)), 1e-15);
  // LowerC: the lower triangle is computed, everything above it is zero.
  View3<double> q("q", batch, n, d), full("full", batch, n, n), lower("lower", batch, n, n);
  fill_uniform(q, 14);
  ops::batched_matmul<double>(q, Trans::No, q, Trans::Yes, full);
  ops::batched_matmul<double>(q, Trans::No, q, Trans::Yes, lower, 1.0, 0.0, ops::Structure::LowerC);
  zero_where(full, [](Index i, Index j) { return j > i; });
  zero_where(lower, [](Index i, Index j) { return j > i; });
  EXPECT_LT(relative_error(to_host(lower), to_host(full)), 1e-15);
}

// Products of the wide kernel (chosen when n >= 256 and B is not transposed:
// 256-column blocks on the host) with shapes that are not multiples of the tile
// sizes on the host (96 x 256 blocks, depth 256) or a GPU (24 x 64, depth 32):
// 300 rows, 260 columns, and a depth of 70 (one partial depth block) or 270
// (256 + 14). With B transposed the same shapes run through the narrow kernel.
struct WideProduct {
  static constexpr Index batch = 2, m = 300, n = 260;
  static constexpr double alpha = 1.5, beta = 0.5;
  Index k;
  bool ta, tb;
  View3<double> a, b, c;
  WideProduct(Index k_, bool ta_, bool tb_)
      : k(k_),
        ta(ta_),
        tb(tb_),
        a("a", batch, ta ? k : m, ta ? m : k),
        b("b", batch, tb ? n : k, tb ? k : n),
        c("c", batch, m, n) {
    fill_uniform(a, 41);
    fill_uniform(b, 42);
    fill_uniform(c, 43);
  }
  // Zeroes op(A)(r, p) wherever zero(r, p) holds.
  template <class Zero>
  void zero_op_a(Zero zero) {
    if (ta)
      zero_where(a, [&](Index p, Index r) { return zero(r, p); });
    else
      zero_where(a, zero);
  }
  // alpha op(A) op(B) + beta C for every batch entry, by the host triple loop.
  std::vector<double> expected() const {
    const auto ha = to_host(a), hb = to_host(b), hc = to_host(c);
    const Index sa = m * k, sb = k * n;
    std::vector<double> all;
    for (Index bi = 0; bi < batch; ++bi) {
      const auto e = reference_product(
          {ha.begin() + bi * sa, ha.begin() + (bi + 1) * sa}, a.extent(2), ta,
          {hb.begin() + bi * sb, hb.begin() + (bi + 1) * sb}, b.extent(2), tb,
          {hc.begin() + bi * m * n, hc.begin() + (bi + 1) * m * n}, m, n, k, alpha, beta);
      all.insert(all.end(), e.begin(), e.end());
    }
    return all;
  }
  void run(ops::Structure structure = ops::Structure::Dense) {
    ops::batched_matmul<double>(a, ta ? Trans::Yes : Trans::No, b, tb ? Trans::Yes : Trans::No, c,
                                alpha, beta, structure);
  }
};

TEST(BatchedMatmul, WideBlocksAllTransposeCombinationsMatchReference) {
  for (Index k : {70, 270})
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        WideProduct p(k, ta, tb);
        const auto expected = p.expected();
        p.run();
        EXPECT_LT(relative_error(to_host(p.c), expected), 1e-12)
            << "k=" << k << " ta=" << ta << " tb=" << tb;
      }
}

TEST(BatchedMatmul, WideBlocksTriangularStructuresMatchReference) {
  using ops::Structure;
  for (Structure structure : {Structure::LowerA, Structure::UpperA, Structure::LowerC})
    for (Index k : {70, 270})
      for (bool ta : {false, true})
        for (bool tb : {false, true}) {
          WideProduct p(k, ta, tb);
          // The known zeros that LowerA and UpperA promise.
          if (structure == Structure::LowerA) p.zero_op_a([](Index r, Index q) { return q > r; });
          if (structure == Structure::UpperA) p.zero_op_a([](Index r, Index q) { return q < r; });
          auto expected = p.expected();
          const auto before = to_host(p.c);
          p.run(structure);
          const auto got = to_host(p.c);
          if (structure == Structure::LowerC) {
            // Above the diagonal an entry is either computed or, in a block wholly
            // above it, beta * C: compare with the nearer of the two.
            for (Index e = 0; e < Index(got.size()); ++e) {
              const Index i = e / p.n % p.m, j = e % p.n;
              const double skipped = p.beta * before[e];
              if (j > i && std::abs(got[e] - skipped) < std::abs(got[e] - expected[e]))
                expected[e] = skipped;
            }
          }
          EXPECT_LT(relative_error(got, expected), 1e-12)
              << "structure=" << int(structure) << " k=" << k << " ta=" << ta << " tb=" << tb;
        }
}

struct LinearCase {
  static constexpr Index n = 6, in = 5, out = 4;
  View2<double> x{"x", n, in}, w{"w", in, out}, y{"y", n, out}, dy{"dy", n, out}, dx{"dx", n, in};
  View2<double> dw{"dw", in, out};
  View1<double> b{"b", out}, db{"db", out};
  LinearCase() {
    fill_uniform(x, 1);
    fill_uniform(w, 2);
    fill_uniform(b, 3);
    fill_uniform(dy, 4);
  }
  double loss() {
    ops::linear_forward<double>(x, w, b, y);
    return dot(y, dy);
  }
};

TEST(Linear, ForwardMatchesReference) {
  LinearCase c;
  c.loss();
  const auto x = to_host(c.x), w = to_host(c.w), b = to_host(c.b);
  std::vector<double> expected(c.n * c.out);
  for (Index i = 0; i < c.n; ++i)
    for (Index j = 0; j < c.out; ++j) {
      double s = b[j];
      for (Index p = 0; p < c.in; ++p) s += x[i * c.in + p] * w[p * c.out + j];
      expected[i * c.out + j] = s;
    }
  EXPECT_LT(relative_error(to_host(c.y), expected), 1e-14);
}

TEST(Linear, GradientsMatchFiniteDifferences) {
  LinearCase c;
  ops::linear_backward<double>(c.x, c.w, c.dy, c.dx, c.dw, c.db);
  auto loss = [&] { return c.loss(); };
  EXPECT_LT(gradient_error(c.x, c.dx, loss), 1e-6);
  EXPECT_LT(gradient_error(c.w, c.dw, loss), 1e-6);
  EXPECT_LT(gradient_error(c.b, c.db, loss), 1e-6);
}

// dbias over many rows (split across the threads of a team) against a plain host
// sum in double, added to a non-zero dbias; `out` features leave a partial last
// tile of features.
template <class T>
double bias_gradient_error(Index n, Index out) {
  const Index in = 3;
  View2<T> x("x", n, in), w("w", in, out), dy("dy", n, out), dx("dx", n, in), dw("dw", in, out);
  View1<T> db("db", out);
  fill_uniform(x, 21);
  fill_uniform(w, 22);
  fill_uniform(dy, 23);
  fill_uniform(db, 24);
  const auto host_dy = to_host(dy);
  auto expected = to_host(db);
  for (Index i = 0; i < n; ++i)
    for (Index j = 0; j < out; ++j) expected[j] += host_dy[i * out + j];
  ops::linear_backward<T>(x, w, dy, dx, dw, db);
  return relative_error(to_host(db), expected);
}

TEST(Linear, BiasGradientOverManyRowsMatchesHostSum) {
  EXPECT_LT(bias_gradient_error<double>(3000, 37), 1e-14);
  EXPECT_LT(bias_gradient_error<float>(3000, 37), 1e-5);
  EXPECT_LT(bias_gradient_error<double>(1, 5), 1e-15);
}

// The GPUs' blocks of rows (core/team_scratch.hpp: column_sum_block_rows), run
// here: each block's sums, then each tile's last block adding them, in one
// launch. Several blocks per tile, a partial last block and a partial last tile,
// three calls in a row (each launch leaves its counters at 0), and one launch.
TEST(Linear, BiasGradientInBlocksOfRowsMatchesHostSumInOneLaunch) {
  for (const Index rows : {7, 64, 1024}) {
    const ScopedColumnSumBlockRows blocks(rows);
    for (int call = 0; call < 3; ++call) {
      EXPECT_LT(bias_gradient_error<double>(3000, 37), 1e-14) << rows;
      EXPECT_LT(bias_gradient_error<float>(3000, 37), 1e-5) << rows;
      EXPECT_LT(bias_gradient_error<double>(5, 40), 1e-15) << rows;
    }
    // The bias gradient's launches: those of a call with a bias less those of
    // one without.
    const Index n = 1000, out = 37;
    View2<double> x("x", n, 2), w("w", 2, out), dy("dy", n, out), dx("dx", n, 2), dw("dw", 2, out);
    View1<double> db("db", out), no_bias;
    fill_uniform(dy, 25);
    auto& tracker = MemoryTracker::instance();
    tracker.reset_launches();
    ops::linear_backward<double>(x, w, dy, dx, dw, db);
    const auto with_bias = tracker.launches().ours();
    tracker.reset_launches();
    ops::linear_backward<double>(x, w, dy, dx, dw, no_bias);
    EXPECT_EQ(with_bias - tracker.launches().ours(), 1) << rows;
  }
  EXPECT_THROW(set_column_sum_block_rows(-1), ConfigError);
}

TEST(Linear, WorksWithoutBiasAndRejectsWrongBias) {
  LinearCase c;
  View1<double> none;
  ops::linear_forward<double>(c.x, c.w, none, c.y);
  View2<double> expected("expected", c.n, c.out);
  ops::matmul<double>(c.x, Trans::No, c.w, Trans::No, expected);
  EXPECT_EQ(to_host(c.y), to_host(expected));
  View1<double> wrong("wrong", c.out + 1);
  EXPECT_THROW(ops::linear_forward<double>(c.x, c.w, wrong, c.y), ShapeError);
}

// The fused forms (one kernel after the product instead of two) compute the
// same numbers as the ops they fuse, bit for bit, and against a plain host
// reference: with and without bias, keeping the pre-activation or not, ReLU
// and GELU, residual weights 0, 1 and 0.5, shapes that end inside a block.
template <class T>
void check_fused_linear(Index n, Index in, Index out) {
  View2<T> x("x", n, in), w("w", in, out), pre("pre", n, out), y("y", n, out),
      expected("expected", n, out), expected_pre("expected_pre", n, out), scratch("s", n, out);
  View1<T> b("b", out), none;
  fill_uniform(x, 31);
  fill_uniform(w, 32);
  fill_uniform(b, 33);
  for (const auto kind : {ops::Activation::ReLU, ops::Activation::GELU})
    for (const bool bias : {true, false})
      for (const bool keep : {true, false}) {
        const auto bb = bias ? b : none;
        const std::string what = std::string(kind == ops::Activation::ReLU ? "relu" : "gelu") +
                                 (bias ? ", bias" : "") + (keep ? ", keep" : "") + ", n " +
                                 std::to_string(n) + ", out " + std::to_string(out);
        ops::linear_forward<T>(x, w, bb, expected_pre);
        ops::activation_forward<T>(kind, as_vector(expected_pre), as_vector(expected));
        if (keep) {
          ops::linear_activation_forward<T>(x, w, bb, kind, pre, y);
          EXPECT_EQ(to_host(pre), to_host(expected_pre)) << what;
        } else {
          ops::linear_activation_forward<T>(x, w, bb, kind, y, y);
        }
        EXPECT_EQ(to_host(y), to_host(expected)) << what;
        // A plain host reference of f(x W + b).
        const auto hx = to_host(x), hw = to_host(w), hb = to_host(b), got = to_host(y);
        double error = 0, scale = 0;
        for (Index i = 0; i < n; ++i)
          for (Index j = 0; j < out; ++j) {
            double v = bias ? hb[j] : 0.0;
            for (Index k = 0; k < in; ++k) v += hx[i * in + k] * hw[k * out + j];
            const double f = kind == ops::Activation::ReLU
                                 ? std::max(v, 0.0)
                                 : 0.5 * v * (1 + std::erf(v / std::sqrt(2.0)));
            error = std::max(error, std::abs(got[i * out + j] - f));
            scale = std::max(scale, std::abs(f));
          }
        const double tolerance = std::is_same_v<T, float> ? 1e-5 : 1e-13;
        EXPECT_LT(error / scale, tolerance) << what;
      }
  for (const double beta : {0.0, 1.0, 0.5})
    for (const bool bias : {true, false}) {
      const auto bb = bias ? b : none;
      fill_uniform(y, 34);
      Kokkos::deep_copy(expected, y);
      ops::linear_forward<T>(x, w, bb, scratch);
      ops::axpby<T>(compute_t<T>(1), as_vector(scratch), compute_t<T>(beta), as_vector(expected));
      ops::linear_residual_forward<T>(x, w, bb, compute_t<T>(beta), scratch, y);
      EXPECT_EQ(to_host(y), to_host(expected)) << "beta " << beta << (bias ? ", bias" : "");
    }
}

TEST(Linear, FusedActivationAndResidualFormsEqualTheOpsTheyFuse) {
  check_fused_linear<double>(7, 5, 9);
  check_fused_linear<double>(64, 16, 40);
  check_fused_linear<float>(33, 12, 70);
}

TEST(Linear, FusedFormsRejectMismatchedShapes) {
  View2<float> x("x", 4, 3), w("w", 3, 5), y("y", 4, 5), wrong("wrong", 4, 6);
  View1<float> b("b", 5), wrong_bias("wrong_bias", 6);
  EXPECT_THROW(ops::linear_activation_forward<float>(x, w, b, ops::Activation::ReLU, wrong, y),
               ShapeError);
  EXPECT_THROW(ops::linear_activation_forward<float>(x, w, wrong_bias, ops::Activation::ReLU, y, y),
               ShapeError);
  try {
    ops::linear_residual_forward<float>(x, w, b, 1.0f, y, wrong);
    FAIL() << "no error";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("linear_residual_forward"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace reformer
