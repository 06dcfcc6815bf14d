// bf16 ("brain float"): the upper half of an IEEE float32, as a storage type
// for tensors that tolerate 8 significant bits (issue 34: activations and the
// tensors a forward pass saves for its backward pass).
//
//   bit   15    14 .. 7     6 .. 0
//         sign  exponent    mantissa      (1 + 8 + 7 bits; float32 adds 16
//                                          more mantissa bits below)
//
// Same exponent range as float32 (largest finite (2 - 2^-7) 2^127, smallest
// normal 2^-126, smallest denormal 2^-133), 8 significant bits: the unit
// roundoff of round to nearest is u = 2^-8, so |bf16(x) - x| <= 2^-8 |x| for
// every x in the normal range.
//
// Conversion to float is exact (the bits shifted up by 16). Conversion from
// float rounds to nearest, ties to even, on the bit pattern: add 0x7fff plus the
// lowest kept bit and drop the low 16 bits. That is the IEEE rounding for
// normals, denormals (their spacing is uniform) and overflow (a carry into the
// exponent field gives infinity exactly when RNE says so); infinities stay
// exact. A NaN stays a NaN: its sign and upper payload bits are kept and the
// quiet bit is set, so a signalling NaN whose payload lies in the dropped bits
// cannot turn into an infinity.
//
// There is no bf16 arithmetic: a kernel converts to float, computes and
// accumulates in float32 registers, and rounds once when it stores.
// Everything here is callable from kernels on every backend: no std:: function
// calls, and bit casts through a union (GCC, Clang, nvcc and hipcc define
// reading the other member of a union; memcpy would also work on the device but
// needs the compiler to see through it).
#pragma once

#include "reformer/core/types.hpp"

#include <cstdint>
#include <type_traits>

namespace reformer {

KOKKOS_INLINE_FUNCTION std::uint32_t float_to_bits(float f) {
  union {
    float f;
    std::uint32_t u;
  } c;
  c.f = f;
  return c.u;
}

KOKKOS_INLINE_FUNCTION float bits_to_float(std::uint32_t u) {
  union {
    std::uint32_t u;
    float f;
  } c;
  c.u = u;
  return c.f;
}

// The rounding rule above on float32 bit patterns u, for one value (U =
// std::uint32_t) or for every lane of a host vector (U a GNU vector of
// std::uint32_t); nan is all ones where u is a NaN and 0 elsewhere. The bf16
// bits come back in the low 16 bits. Only bit operations and integer
// arithmetic, no branch and no select: the compilers vectorise the loops that
// round, and a vector version inlined into code for a wider target (the packed
// GEMM's AVX-512 copy in an AVX2 build) stays in vectors. The one place that
// states the rule: bf16(float) and the packed GEMM's vector stores
// (src/ops/tpls/host_bf16_gemm_kernel.inc) both call it.
template <class U>
KOKKOS_FORCEINLINE_FUNCTION U bf16_round_bits(U u, U nan) {
  const U high = u >> 16;
  const U rounded = (u + 0x7fffu + (high & 1u)) >> 16;
  return (nan & (high | 0x0040u)) | (~nan & rounded);
}

class bf16 {
 public:
  // Trivial, like float: a View<bf16*> is zero-filled (+0) by Kokkos, and a
  // default-initialised local is left uninitialised.
  bf16() = default;
  // Rounds to nearest, ties to even. Explicit: a narrowing to 8 bits is visible
  // in the code that does it.
  KOKKOS_INLINE_FUNCTION explicit bf16(float f) : bits_(round_bits(f)) {}
  // double -> float -> bf16 would round twice; convert the double deliberately.
  bf16(double) = delete;
  KOKKOS_INLINE_FUNCTION explicit operator float() const {
    return bits_to_float(std::uint32_t(bits_) << 16);
  }

  KOKKOS_INLINE_FUNCTION static bf16 from_bits(std::uint16_t bits) {
    bf16 b;
    b.bits_ = bits;
    return b;
  }
  KOKKOS_INLINE_FUNCTION std::uint16_t bits() const { return bits_; }

  // The bf16 bits of f, rounded to nearest even (see the top of this file).
  KOKKOS_INLINE_FUNCTION static std::uint16_t round_bits(float f) {
    // NaN: magnitude bits above infinity's. Compared as signed (no sign bit is
    // left): one instruction per vector where the loop is vectorised (AVX2 has
    // no unsigned comparison).
    const std::uint32_t u = float_to_bits(f);
    const bool nan = std::int32_t(u & 0x7fffffffu) > std::int32_t(0x7f800000);
    return std::uint16_t(bf16_round_bits(u, nan ? ~std::uint32_t(0) : std::uint32_t(0)));
  }

 private:
  std::uint16_t bits_;
};

// Whether the bf16 with these bits is > 0 (the same answer as float(x) > 0:
// NaN and both zeros are not): the sign bit clear and the bits in (+0,
// +infinity]. Integer compares on 16-bit lanes, without a branch: loops that
// only select bf16 values (a ReLU) need no widening or rounding.
KOKKOS_INLINE_FUNCTION bool bf16_bits_positive(std::uint16_t bits) {
  const std::int16_t b = std::int16_t(bits);
  return (b > 0) & (b <= std::int16_t(0x7f80));
}

KOKKOS_INLINE_FUNCTION bf16 from_float(float f) { return bf16(f); }
KOKKOS_INLINE_FUNCTION float to_float(bf16 b) { return static_cast<float>(b); }

static_assert(sizeof(bf16) == 2 && alignof(bf16) == 2, "bf16 is 16 bits of storage");
static_assert(std::is_trivially_copyable<bf16>::value && std::is_standard_layout<bf16>::value,
              "bf16 must be copyable as raw bytes (deep_copy, MPI, files)");

// Whole views on the device, one parallel_for each: `to` takes from.extent(0)
// elements (a ShapeError names both lengths otherwise). float -> bf16 rounds to
// nearest even; bf16 -> float is exact.
void convert(In1<float> from, View1<bf16> to);
void convert(In1<bf16> from, View1<float> to);

}  // namespace reformer
