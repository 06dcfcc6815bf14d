#include "reformer/core/bfloat16.hpp"
#include "reformer/core/cpu_target.hpp"
#include "reformer/core/error.hpp"
#include "reformer/core/memory_tracker.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#if defined(__AVX512BF16__)
#include <immintrin.h>
#endif

namespace reformer {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

bool bf16_is_nan(std::uint16_t b) { return (b & 0x7f80u) == 0x7f80u && (b & 0x007fu) != 0; }

// Independent reference: the nearest multiple of bf16's spacing at x, computed
// in double (x / spacing is exact there) and rounded by nearbyint, which rounds
// ties to even in the default rounding mode. The spacing is 2^(e - 8) for
// |x| = m 2^e, m in [0.5, 1) (8 significant bits), and never below the smallest
// denormal 2^-133; results of 2^128 and above overflow to infinity.
float reference_round(float x) {
  if (std::isnan(x) || std::isinf(x) || x == 0.0f) return x;
  int e = 0;
  std::frexp(double(x), &e);
  const double spacing = std::ldexp(1.0, std::max(e - 8, -133));
  const double r = std::nearbyint(double(x) / spacing) * spacing;
  if (std::fabs(r) >= std::ldexp(1.0, 128)) return std::copysign(kInf, x);
  return float(r);
}

std::uint16_t round_bits(float x) { return bf16(x).bits(); }
std::uint32_t bits_of(float x) { return float_to_bits(x); }

// Random floats over every exponent (uniform bit patterns), NaNs left out.
std::vector<float> random_floats(std::size_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::vector<float> xs;
  while (xs.size() < n) {
    const float x = bits_to_float(std::uint32_t(gen()));
    if (!std::isnan(x)) xs.push_back(x);
  }
  return xs;
}

TEST(BFloat16, IsSixteenBitsOfStorage) {
  static_assert(sizeof(bf16) == 2 && alignof(bf16) == 2, "16-bit storage");
  static_assert(std::is_trivially_copyable<bf16>::value, "copyable as bytes");
  static_assert(!std::is_convertible<float, bf16>::value, "no silent narrowing from float");
  static_assert(!std::is_convertible<bf16, float>::value, "no silent arithmetic in bf16");
  // A view of n bf16 takes 2n bytes of the device's memory and starts as +0.
  auto& tracker = MemoryTracker::instance();
  const std::string space = MemSpace::name();
  constexpr Index n = 1 << 16;
  const auto before = tracker.space(space).current_bytes;
  View1<bf16> v("bf16_storage", n);
  EXPECT_EQ(tracker.space(space).current_bytes - before, 2 * n);
  auto host = Kokkos::create_mirror_view_and_copy(HostSpace(), v);
  int nonzero = 0;
  for (Index i = 0; i < n; ++i) nonzero += host(i).bits() != 0;
  EXPECT_EQ(nonzero, 0);
}

// Every one of the 65536 patterns: to float is the bits shifted up by 16, and
// back gives the same bits; NaNs come back as NaNs with their sign.
TEST(BFloat16, EveryBitPatternRoundTrips) {
  int wrong = 0;
  for (std::uint32_t b = 0; b < 65536; ++b) {
    const float f = to_float(bf16::from_bits(std::uint16_t(b)));
    if (bits_of(f) != b << 16) ++wrong;
    const std::uint16_t back = from_float(f).bits();
    if (bf16_is_nan(std::uint16_t(b))) {
      if (!bf16_is_nan(back) || (back & 0x8000u) != (b & 0x8000u)) ++wrong;
    } else if (back != b) {
      ADD_FAILURE() << "bf16 0x" << std::hex << b << " came back as 0x" << back;
      ++wrong;
    }
  }
  EXPECT_EQ(wrong, 0);
}

TEST(BFloat16, RoundsToNearestEvenLikeAReference) {
  std::vector<float> xs = random_floats(1 << 20, 34);
  // Exact ties (the dropped half is 0x8000) and their neighbours one float ulp
  // away, for random bf16 values of both signs and every exponent.
  std::mt19937 gen(7);
  int ties = 0;
  for (int i = 0; i < (1 << 16); ++i) {
    const std::uint32_t upper = gen() & 0xffffu;
    if (bf16_is_nan(std::uint16_t(upper)) || (upper & 0x7fffu) == 0x7f80u) continue;
    const std::uint32_t tie = upper << 16 | 0x8000u;
    xs.push_back(bits_to_float(tie));
    xs.push_back(bits_to_float(tie - 1));
    xs.push_back(bits_to_float(tie + 1));
    ++ties;
  }
  int wrong = 0;
  for (float x : xs) {
    const float expected = reference_round(x);
    const float got = to_float(from_float(x));
    if (bits_of(got) != bits_of(expected)) {
      if (++wrong <= 5)
        ADD_FAILURE() << "float 0x" << std::hex << bits_of(x) << " rounded to 0x" << bits_of(got)
                      << ", the reference says 0x" << bits_of(expected);
    }
  }
  EXPECT_EQ(wrong, 0) << "of " << xs.size() << " floats";
  // A tie goes to the even neighbour: 1 + 2^-8 lies halfway between 1 (even)
  // and 1 + 2^-7 (odd), 1 + 3 * 2^-8 between 1 + 2^-7 (odd) and 1 + 2^-6 (even).
  EXPECT_EQ(round_bits(1.0f + 0x1p-8f), 0x3f80u);
  EXPECT_EQ(round_bits(1.0f + 3 * 0x1p-8f), 0x3f82u);
  EXPECT_EQ(round_bits(-1.0f - 0x1p-8f), 0xbf80u);
  EXPECT_GT(ties, 60000);
}

// bf16_bits_positive (the bf16 ReLU's test) agrees with float(x) > 0 on every
// one of the 65,536 bit patterns: zeros of both signs, denormals, infinities
// and NaNs of both signs included.
TEST(BFloat16, BitLevelPositivityAgreesWithTheFloatComparisonOnEveryPattern) {
  int wrong = 0;
  for (std::uint32_t b = 0; b < (1u << 16); ++b) {
    const bool expected = to_float(bf16::from_bits(std::uint16_t(b))) > 0.0f;
    if (bf16_bits_positive(std::uint16_t(b)) != expected && ++wrong <= 5)
      ADD_FAILURE() << "bits 0x" << std::hex << b << ": float > 0 is " << expected;
  }
  EXPECT_EQ(wrong, 0);
}

#if defined(__GNUC__) && !defined(__CUDACC__) && !defined(__HIPCC__)
// bf16_round_bits on a vector of float bit patterns (the packed GEMM's
// stores) gives every lane the bits of the scalar conversion: random floats,
// exact ties and their neighbours, and NaNs whose payload lies only in the
// dropped bits (which a plain round-up would turn into infinity, or a NaN
// with all payload bits into -0).
TEST(BFloat16, VectorRoundingEqualsTheScalarConversionInEveryLane) {
  std::vector<std::uint32_t> patterns;
  for (float x : random_floats(1 << 16, 91)) patterns.push_back(bits_of(x));
  for (std::uint32_t upper : {0x0000u, 0x3f80u, 0x3f81u, 0x7f7fu, 0xff7fu, 0x0001u})
    for (std::uint32_t low : {0x7fffu, 0x8000u, 0x8001u}) patterns.push_back(upper << 16 | low);
  for (std::uint32_t nan : {0x7f800001u, 0x7fbfffffu, 0x7fc00000u, 0x7fffffffu, 0xffffffffu,
                            0xff800001u, 0x7f800000u, 0xff800000u})
    patterns.push_back(nan);
  while (patterns.size() % 8 != 0) patterns.push_back(0);
  typedef std::uint32_t Lanes __attribute__((vector_size(32)));
  typedef std::int32_t SignedLanes __attribute__((vector_size(32)));
  int wrong = 0;
  for (std::size_t i = 0; i < patterns.size(); i += 8) {
    Lanes u;
    std::memcpy(&u, patterns.data() + i, sizeof u);
    const Lanes nan = Lanes(SignedLanes(u & 0x7fffffffu) > 0x7f800000);
    const Lanes got = bf16_round_bits(u, nan);
    for (int lane = 0; lane < 8; ++lane) {
      const std::uint16_t expected = round_bits(bits_to_float(patterns[i + lane]));
      if (got[lane] != expected && ++wrong <= 5)
        ADD_FAILURE() << "float bits 0x" << std::hex << patterns[i + lane] << ": lane gives 0x"
                      << got[lane] << ", the scalar conversion 0x" << expected;
    }
  }
  EXPECT_EQ(wrong, 0) << "of " << patterns.size() << " patterns";
}
#endif  // GNU vector extensions on the host

TEST(BFloat16, Boundaries) {
  // Largest finite bf16, (2 - 2^-7) 2^127, is exact; half a bf16 ulp above it is
  // a tie with an odd mantissa, so it rounds up to infinity; just below stays.
  EXPECT_EQ(round_bits(bits_to_float(0x7f7f0000u)), 0x7f7fu);
  EXPECT_EQ(round_bits(bits_to_float(0x7f7f7fffu)), 0x7f7fu);
  EXPECT_EQ(round_bits(bits_to_float(0x7f7f8000u)), 0x7f80u);
  EXPECT_EQ(round_bits(std::numeric_limits<float>::max()), 0x7f80u);
  EXPECT_EQ(round_bits(-std::numeric_limits<float>::max()), 0xff80u);
  EXPECT_EQ(round_bits(kInf), 0x7f80u);
  EXPECT_EQ(round_bits(-kInf), 0xff80u);
  // Zeros keep their sign.
  EXPECT_EQ(round_bits(0.0f), 0x0000u);
  EXPECT_EQ(round_bits(-0.0f), 0x8000u);
  // Smallest bf16 denormal 2^-133 is exact; half of it is a tie that goes to
  // (even) zero, a float ulp more rounds up to it, and the smallest float
  // denormal 2^-149 rounds to zero with its sign.
  EXPECT_EQ(round_bits(0x1p-133f), 0x0001u);
  EXPECT_EQ(round_bits(0x1p-134f), 0x0000u);
  EXPECT_EQ(round_bits(bits_to_float(0x00008001u)), 0x0001u);
  EXPECT_EQ(round_bits(0x1p-149f), 0x0000u);
  EXPECT_EQ(round_bits(-0x1p-149f), 0x8000u);
  // Largest denormal rounds up into the smallest normal, 2^-126.
  EXPECT_EQ(round_bits(bits_to_float(0x007fffffu)), 0x0080u);
  EXPECT_EQ(to_float(bf16::from_bits(0x0080u)), 0x1p-126f);
  // NaNs: quiet, sign kept, also for a signalling NaN whose payload lies only in
  // the dropped bits (truncating it would give infinity).
  EXPECT_EQ(round_bits(bits_to_float(0x7fc00000u)), 0x7fc0u);
  EXPECT_EQ(round_bits(bits_to_float(0xffc00000u)), 0xffc0u);
  EXPECT_EQ(round_bits(bits_to_float(0x7f800001u)), 0x7fc0u);
  EXPECT_EQ(round_bits(bits_to_float(0xff800001u)), 0xffc0u);
  EXPECT_EQ(round_bits(bits_to_float(0x7fffffffu)), 0x7fffu);
}

// |bf16(x) - x| <= 2^-8 |x| over the normal range, and the bound is reached
// (so it is the unit roundoff, not a loose bound).
TEST(BFloat16, RelativeErrorIsAtMostTheUnitRoundoff) {
  std::vector<float> xs = random_floats(1 << 20, 8);
  xs.push_back(1.0f + 0x1p-8f);  // a tie: error exactly 2^-8 / (1 + 2^-8)
  double worst = 0;
  int checked = 0;
  for (float x : xs) {
    const float ax = std::fabs(x);
    if (!(ax >= 0x1p-126f) || ax >= bits_to_float(0x7f7f8000u)) continue;
    const double err = std::fabs(double(to_float(from_float(x))) - double(x)) / double(ax);
    worst = std::max(worst, err);
    ++checked;
  }
  EXPECT_GT(checked, 1 << 19);
  EXPECT_LE(worst, 0x1p-8);
  EXPECT_GT(worst, 0.99 * 0x1p-8 / (1 + 0x1p-8));
}

std::vector<std::uint16_t> convert_on_device(const std::vector<float>& xs) {
  View1<float> from("from", xs.size());
  View1<bf16> to("to", xs.size());
  auto host = Kokkos::create_mirror_view(from);
  for (std::size_t i = 0; i < xs.size(); ++i) host(i) = xs[i];
  Kokkos::deep_copy(from, host);
  convert(from, to);
  auto out = Kokkos::create_mirror_view_and_copy(HostSpace(), to);
  std::vector<std::uint16_t> bits(xs.size());
  for (std::size_t i = 0; i < xs.size(); ++i) bits[i] = out(i).bits();
  return bits;
}

std::vector<std::uint32_t> convert_back_on_device(const std::vector<std::uint16_t>& bs) {
  View1<bf16> from("from", bs.size());
  View1<float> to("to", bs.size());
  auto host = Kokkos::create_mirror_view(from);
  for (std::size_t i = 0; i < bs.size(); ++i) host(i) = bf16::from_bits(bs[i]);
  Kokkos::deep_copy(from, host);
  convert(from, to);
  auto out = Kokkos::create_mirror_view_and_copy(HostSpace(), to);
  std::vector<std::uint32_t> bits(bs.size());
  for (std::size_t i = 0; i < bs.size(); ++i) bits[i] = bits_of(out(i));
  return bits;
}

// The device kernels give the host's scalar conversion, bit for bit (NaNs
// included: the same code runs on both sides).
TEST(BFloat16, DeviceConversionOfAViewEqualsTheHostConversion) {
  std::vector<float> xs = random_floats(1 << 18, 3);
  for (std::uint32_t special : {0x7fc00000u, 0xff800001u, 0x7f800000u, 0x80000000u, 0x00008000u,
                                0x7f7f8000u, 0x3f808000u, 0x3f818000u})
    xs.push_back(bits_to_float(special));
  const auto got = convert_on_device(xs);
  int wrong = 0;
  for (std::size_t i = 0; i < xs.size(); ++i) wrong += got[i] != round_bits(xs[i]);
  EXPECT_EQ(wrong, 0) << "of " << xs.size();

  std::vector<std::uint16_t> all(65536);
  for (std::uint32_t b = 0; b < 65536; ++b) all[b] = std::uint16_t(b);
  const auto back = convert_back_on_device(all);
  wrong = 0;
  for (std::uint32_t b = 0; b < 65536; ++b) wrong += back[b] != b << 16;
  EXPECT_EQ(wrong, 0);
}

TEST(BFloat16, ConvertNamesBothLengthsWhenTheyDiffer) {
  View1<float> from("from", 5);
  View1<bf16> to("to", 4);
  try {
    convert(from, to);
    FAIL() << "expected a ShapeError";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("5 elements but the output has 4"), std::string::npos)
        << e.what();
  }
  View1<float> back("back", 6);
  EXPECT_THROW(convert(to, back), ShapeError);
}

// Where the build targets AVX-512 BF16, the instructions read and write the
// same bits as bf16: the conversion agrees on normal numbers, infinities and
// NaNs (the instruction flushes denormals to zero, which these kernels will
// not rely on), and vdpbf16ps on bf16 from here gives the float dot product.
TEST(BFloat16, AgreesWithTheTargetsBf16Instructions) {
  if (!CpuTarget::bf16_dot_product)
    GTEST_SKIP() << "this build's target has no bf16 dot-product instructions (" << CpuTarget::name
                 << ")";
#if defined(__AVX512BF16__)
  std::vector<float> xs = {kInf, -kInf, std::numeric_limits<float>::quiet_NaN(),
                           std::numeric_limits<float>::max()};
  const std::vector<float> random = random_floats(1 << 16, 11);
  xs.insert(xs.end(), random.begin(), random.end());
  int wrong = 0, compared = 0;
  for (std::size_t i = 0; i + 32 <= xs.size(); i += 32) {
    const __m512 lo = _mm512_loadu_ps(&xs[i]);
    const __m512 hi = _mm512_loadu_ps(&xs[i + 16]);
    const __m512bh packed = _mm512_cvtne2ps_pbh(hi, lo);  // lanes 0..15 from lo
    std::uint16_t hw[32];
    _mm512_storeu_si512(hw, (__m512i)packed);
    for (int k = 0; k < 32; ++k) {
      const float x = xs[i + k];
      if (std::fpclassify(x) == FP_SUBNORMAL) continue;
      ++compared;
      const std::uint16_t ours = round_bits(x);
      if (bf16_is_nan(ours) ? !bf16_is_nan(hw[k]) : hw[k] != ours) ++wrong;
    }
  }
  EXPECT_EQ(wrong, 0) << "of " << compared;
  EXPECT_GT(compared, 60000);

  // Small integers: every product and partial sum is exact in float.
  std::uint16_t a[32], b[32];
  float expected = 0;
  for (int k = 0; k < 32; ++k) {
    const float x = float(k % 7 - 3), y = float(k % 5 + 1);
    a[k] = from_float(x).bits();
    b[k] = from_float(y).bits();
    expected += x * y;
  }
  const __m512 dot = _mm512_dpbf16_ps(_mm512_setzero_ps(), (__m512bh)_mm512_loadu_si512(a),
                                      (__m512bh)_mm512_loadu_si512(b));
  EXPECT_EQ(_mm512_reduce_add_ps(dot), expected);
#endif
}

}  // namespace
}  // namespace reformer
