// The vendor BLAS of GPU builds (issue 34; reformer/ops/device_blas.hpp): the
// loader, and the mixed products through it against a double reference.
//
// Tolerance of one element c_ij = alpha sum_p a_ip b_pj + beta c_ij + bias_j
// (computed in double from the operands' stored values), the same on every
// path except where the vendor path rounds (see below):
//   - the products of two bf16 values are exact in float32 (8 + 8 significant
//     bits), and the sum of the k products, beta c and the bias in float32
//     is off by at most gamma S, S = A + |beta c_ij| + |bias_j|,
//     A = |alpha| sum_p |a_ip b_pj|,
//     gamma = (k + 2) 2^-23: float32's unit round-off doubled, since tensor
//     cores may truncate instead of rounding while they accumulate;
//   - a bf16 C is rounded once more: u (|c_ij| + e) with e the two terms above;
//   - the vendor path (REFORMER_BF16_WEIGHTS=round, its default) rounds the
//     float32 factor of a mixed product with a bf16 C to bf16 (u A more) and,
//     for one bf16 x bf16 product into a bf16 C with beta 0, the bias
//     (u |bias_j| more).
#include "reformer/core/error.hpp"
#include "reformer/core/precision.hpp"
#include "reformer/ops/device_blas.hpp"
#include "reformer/ops/gemm.hpp"
#include "support/checks.hpp"
#include "support/device_blas_env.hpp"
#include "support/gradcheck.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <string>
#include <type_traits>
#include <vector>

namespace reformer {
namespace {

using namespace reformer::testing;
using ops::Trans;

constexpr double kBf16Unit = 1.0 / 256.0;

TEST(DeviceBlas, ReportsWhatItLoaded) {
  const auto info = ops::device_blas_info();
  EXPECT_FALSE(info.description.empty());
  if (kHostMemory) {
    EXPECT_FALSE(info.device_build);
    EXPECT_FALSE(info.loaded);
    EXPECT_NE(info.description.find("host build"), std::string::npos) << info.description;
    return;
  }
  EXPECT_TRUE(info.device_build);
  EXPECT_TRUE(info.vendor == "cuBLAS" || info.vendor == "rocBLAS") << info.vendor;
  if (info.loaded) {
    EXPECT_FALSE(info.library.empty());
    EXPECT_NE(info.description.find(info.vendor), std::string::npos) << info.description;
  } else {
    EXPECT_TRUE(info.description.rfind("none", 0) == 0 || info.description.rfind("off", 0) == 0)
        << info.description;
  }
}

TEST(DeviceBlas, OpensTheFirstLibraryThatLoads) {
  const char* variable = "REFORMER_TEST_UNSET_LIBRARY_VARIABLE";
  unsetenv(variable);
  const auto found = ops::open_shared_library(variable, {"libreformer-missing.so", "libm.so.6"});
  ASSERT_NE(found.handle, nullptr) << found.tried;
  EXPECT_EQ(found.name, "libm.so.6");
  EXPECT_NE(found.tried.find("libreformer-missing.so"), std::string::npos) << found.tried;
  EXPECT_NE(ops::shared_library_symbol(found, "cos"), nullptr);
  expect_error<ConfigError>([&] { ops::shared_library_symbol(found, "cublasGemmEx"); },
                            {"libm.so.6", "cublasGemmEx"});
  const auto none = ops::open_shared_library(variable, {"libreformer-missing.so", "libno.so.9"});
  EXPECT_EQ(none.handle, nullptr);
  EXPECT_NE(none.tried.find("libreformer-missing.so"), std::string::npos) << none.tried;
  EXPECT_NE(none.tried.find("libno.so.9"), std::string::npos) << none.tried;
}

// A set variable names the one file to load: a missing file is an error that
// names the variable and the path, not a silent fall back to the search.
TEST(DeviceBlas, AVariableNamingAMissingFileIsAnError) {
  const char* variable = "REFORMER_TEST_LIBRARY";
  const std::string path = "/nonexistent/libcublas.so.13";
  ScopedEnv env(variable, path.c_str());
  expect_error<ConfigError>([&] { ops::open_shared_library(variable, {"libm.so.6"}); },
                            {variable, path, "unset it"});
  // Set but empty: the search.
  ScopedEnv empty(variable, "");
  EXPECT_EQ(ops::open_shared_library(variable, {"libm.so.6"}).name, "libm.so.6");
}

// The same for the loader itself: REFORMER_CUBLAS on CUDA, REFORMER_ROCBLAS on
// HIP (host builds read neither), and REFORMER_DEVICE_BLAS takes on or off.
TEST(DeviceBlas, TheLoaderReportsABadVariable) {
  const std::string path = "/nonexistent/libvendorblas.so";
  ScopedEnv cublas("REFORMER_CUBLAS", path.c_str());
  ScopedEnv rocblas("REFORMER_ROCBLAS", path.c_str());
  if (kHostMemory) {
    const auto info = ops::reload_device_blas();
    EXPECT_FALSE(info.loaded);
    EXPECT_FALSE(info.device_build);
  } else {
    expect_error<ConfigError>([] { ops::reload_device_blas(); }, {"REFORMER_", path});
    // Until the variable is fixed, every product that asks reports it again.
    expect_error<ConfigError>([] { ops::device_blas_info(); }, {"REFORMER_", path});
  }
  // A switch with another value: a named error on device builds, unread on
  // host builds.
  const auto expect_refused = [](const char* name, const char* value,
                                 const std::vector<std::string>& words) {
    ScopedEnv bad(name, value);
    if (kHostMemory)
      EXPECT_NO_THROW(ops::reload_device_blas());
    else
      expect_error<ConfigError>([] { ops::reload_device_blas(); }, words);
  };
  expect_refused("REFORMER_BF16_WEIGHTS", "sometimes",
                 {"REFORMER_BF16_WEIGHTS=sometimes", "round or keep"});
  expect_refused("REFORMER_DEVICE_BLAS", "maybe", {"REFORMER_DEVICE_BLAS=maybe", "on or off"});
}

struct Case {
  Index m, n, k;
  float alpha, beta;
  bool bias;
};

template <class T>
View2<T> matrix(const char* label, Index rows, Index cols, std::uint64_t seed) {
  View2<T> v(std::string(label), rows, cols);
  fill_uniform(v, seed);
  return v;
}

// mixed_matmul<TA, TB, TC> against the double reference of its stored
// operands, for both transposes of each operand.
template <class TA, class TB, class TC>
void check_mixed(const Case& p, const std::string& label) {
  constexpr bool kBf16C = std::is_same<TC, bf16>::value;
  constexpr bool kMixed = std::is_same<TA, float>::value != std::is_same<TB, float>::value;
  const double output_unit = kBf16C ? kBf16Unit : 0.0;
  const double gamma = double(p.k + 2) / 8388608.0;
  const auto info = ops::device_blas_info();
  const bool vendor_rounds = info.loaded && info.rounds_weights;
  const double weight_unit = vendor_rounds && kMixed && kBf16C ? kBf16Unit : 0.0;
  const double bias_unit = info.loaded && kBf16C && p.beta == 0.0f &&
                                   (kMixed ? vendor_rounds : !std::is_same<TA, float>::value)
                               ? kBf16Unit
                               : 0.0;
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      const Index m = p.m, n = p.n, k = p.k;
      const auto a = matrix<TA>("a", ta ? k : m, ta ? m : k, 11 + m);
      const auto b = matrix<TB>("b", tb ? n : k, tb ? k : n, 12 + n);
      const auto c = matrix<TC>("c", m, n, 13 + k);
      View1<float> bias("bias", p.bias ? n : 0);
      fill_uniform(bias, 14);
      const auto ha = to_host(a), hb = to_host(b), hc = to_host(c), hbias = to_host(bias);
      ops::mixed_matmul<TA, TB, TC>(a, ta ? Trans::Yes : Trans::No, b, tb ? Trans::Yes : Trans::No,
                                    c, p.alpha, p.beta, bias);
      const auto got = to_host(c);
      const std::string what = label + " m=" + std::to_string(m) + " n=" + std::to_string(n) +
                               " k=" + std::to_string(k) + (ta ? " A^T" : " A") +
                               (tb ? " B^T" : " B") + " beta=" + std::to_string(p.beta) +
                               (p.bias ? " bias" : "");
      const auto product = host_product(ha, ta, hb, tb, m, n, k);
      Index bad = 0;
      double worst = 0;
      for (Index i = 0; i < m; ++i)
        for (Index j = 0; j < n; ++j) {
          const double sum = product.value[i * n + j], magnitude = product.magnitude[i * n + j];
          const double bias_j = p.bias ? hbias[j] : 0.0;
          const double want = p.alpha * sum + p.beta * hc[i * n + j] + bias_j;
          const double products = std::fabs(p.alpha) * magnitude;
          const double before =
              gamma * (products + std::fabs(p.beta * hc[i * n + j]) + std::fabs(bias_j)) +
              weight_unit * products + bias_unit * std::fabs(bias_j);
          const double bound = before + output_unit * (std::fabs(want) + before);
          const double error = std::fabs(got[i * n + j] - want);
          if (!(error <= bound)) ++bad;
          worst = std::max(worst, bound > 0 ? error / bound : error);
        }
      EXPECT_EQ(bad, 0) << what << ": the worst element is off by " << worst << " times its bound";
    }
}

void check_every_type(const std::string& label) {
  const std::vector<Case> cases = {
      {1, 1, 1, 1.0f, 0.0f, false},      {3, 5, 7, 1.0f, 1.0f, true},
      {17, 33, 65, 0.5f, 0.0f, true},    {129, 70, 300, 1.0f, 1.0f, false},
      {257, 31, 130, 1.0f, 0.0f, false}, {600, 96, 33, 2.0f, 0.5f, true}};
  for (const auto& p : cases) {
    check_mixed<bf16, float, bf16>(p, label + " bf16 x float -> bf16");
    check_mixed<bf16, float, float>(p, label + " bf16 x float -> float");
    check_mixed<bf16, bf16, float>(p, label + " bf16 x bf16 -> float");
    check_mixed<bf16, bf16, bf16>(p, label + " bf16 x bf16 -> bf16");
    check_mixed<float, bf16, bf16>(p, label + " float x bf16 -> bf16");
    check_mixed<float, float, bf16>(p, label + " float x float -> bf16");
    check_mixed<float, float, float>(p, label + " float x float -> float");
  }
}

// On a GPU with its vendor BLAS: every type combination through the vendor,
// and through the portable path with REFORMER_DEVICE_BLAS=off; elsewhere the
// path this build has (host BLAS or the portable loop).
TEST(DeviceBlas, MixedProductsMatchADoubleReference) {
  const auto info = ops::device_blas_info();
  check_every_type(info.loaded ? info.vendor : std::string("portable"));
  if (!info.loaded) return;
  ScopedEnv off("REFORMER_DEVICE_BLAS", "off");
  ASSERT_FALSE(ops::reload_device_blas().loaded);
  check_every_type("portable (REFORMER_DEVICE_BLAS=off)");
}

// By default the vendor path rounds a float32 weight to bf16 for a bf16 result
// (tensor cores, as torch.autocast): [1, -1] times [1 + 2^-12, 1] is 0, where
// the stored weight gives 2^-12 (a bf16 value); a float32 result keeps it.
TEST(DeviceBlas, TheVendorPathRoundsAFloatWeightByDefault) {
  ScopedEnv unset("REFORMER_BF16_WEIGHTS", nullptr);
  const auto info = ops::reload_device_blas();
  if (!info.device_build) GTEST_SKIP() << "host build: no vendor BLAS to load";
  if (!info.loaded) GTEST_SKIP() << "no vendor BLAS on this machine: " << info.description;
  EXPECT_TRUE(info.rounds_weights);
  EXPECT_NE(info.description.find("rounded to bf16"), std::string::npos) << info.description;
  View2<bf16> a("a", 1, 2), c16("c16", 1, 1);
  View2<float> b("b", 2, 1), c("c", 1, 1);
  auto ha = Kokkos::create_mirror_view(a);
  auto hb = Kokkos::create_mirror_view(b);
  ha(0, 0) = bf16(1.0f);
  ha(0, 1) = bf16(-1.0f);
  hb(0, 0) = 1.0f + 1.0f / 4096.0f;
  hb(1, 0) = 1.0f;
  Kokkos::deep_copy(a, ha);
  Kokkos::deep_copy(b, hb);
  ops::mixed_matmul<bf16, float, bf16>(a, Trans::No, b, Trans::No, c16);
  EXPECT_EQ(to_host(c16)[0], 0.0) << "the weight 1 + 2^-12 was not rounded to bf16";
  ops::mixed_matmul<bf16, float, float>(a, Trans::No, b, Trans::No, c);
  EXPECT_EQ(to_host(c)[0], 1.0 / 4096.0) << "a float32 result must keep the weight as stored";
}

// With REFORMER_BF16_WEIGHTS=keep the vendor path keeps a float32 weight: bf16
// 1 times 1 + 2^-12 is 1 + 2^-12, and sgemm rounds neither.
TEST(DeviceBlas, TheVendorPathKeepsAFloatWeightWhenAsked) {
  ScopedEnv keep("REFORMER_BF16_WEIGHTS", "keep");
  const auto info = ops::reload_device_blas();
  if (!info.device_build) GTEST_SKIP() << "host build: no vendor BLAS to load";
  if (!info.loaded) GTEST_SKIP() << "no vendor BLAS on this machine: " << info.description;
  EXPECT_FALSE(info.rounds_weights);
  check_every_type(info.vendor + " (REFORMER_BF16_WEIGHTS=keep)");
  View2<bf16> a("a", 1, 1);
  View2<float> b("b", 1, 1), c("c", 1, 1), plain("plain", 1, 1);
  Kokkos::deep_copy(a, bf16(1.0f));
  Kokkos::deep_copy(b, 1.0f + 1.0f / 4096.0f);
  ops::mixed_matmul<bf16, float, float>(a, Trans::No, b, Trans::No, c);
  EXPECT_EQ(to_host(c)[0], 1.0 + 1.0 / 4096.0) << "the weight 1 + 2^-12 was rounded";
  ops::mixed_matmul<bf16, float, float>(a, Trans::Yes, b, Trans::No, c);
  EXPECT_EQ(to_host(c)[0], 1.0 + 1.0 / 4096.0) << "transposed: the weight was rounded";
  ops::matmul<float>(b, Trans::No, b, Trans::No, plain);
  const double exact = (1.0 + 1.0 / 4096.0) * (1.0 + 1.0 / 4096.0);
  EXPECT_NEAR(to_host(plain)[0], exact, 1e-7) << "sgemm must not round to bf16 or TF32";
}

// matmul<float> (the vendor's sgemm on a device) against the double
// reference, with float32's bound (no TF32).
TEST(DeviceBlas, FloatMatmulMatchesADoubleReference) {
  const Index m = 130, n = 67, k = 515;
  const auto a = matrix<float>("a", k, m, 1), b = matrix<float>("b", n, k, 2);
  const auto c = matrix<float>("c", m, n, 3);
  const auto ha = to_host(a), hb = to_host(b), hc = to_host(c);
  ops::matmul<float>(a, Trans::Yes, b, Trans::Yes, c, 1.0f, 1.0f);
  const auto got = to_host(c);
  Index bad = 0;
  for (Index i = 0; i < m; ++i)
    for (Index j = 0; j < n; ++j) {
      double sum = hc[i * n + j], magnitude = std::fabs(hc[i * n + j]);
      for (Index q = 0; q < k; ++q) {
        sum += ha[q * m + i] * hb[j * k + q];
        magnitude += std::fabs(ha[q * m + i] * hb[j * k + q]);
      }
      if (!(std::fabs(got[i * n + j] - sum) <= double(k + 2) / 8388608.0 * magnitude)) ++bad;
    }
  EXPECT_EQ(bad, 0) << "elements beyond float32's bound (TF32 would miss it)";
}

}  // namespace
}  // namespace reformer
