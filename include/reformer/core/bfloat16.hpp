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
    const std::uint32_t u = float_to_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return std::uint16_t((u >> 16) | 0x0040u);  // NaN
    return std::uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
  }

 private:
  std::uint16_t bits_;
};

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
