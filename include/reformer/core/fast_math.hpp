// Exponential without library calls, so that loops over softmax weights
// vectorise (a call to exp() stops the compiler from vectorising a loop).
//   exp(x) = 2^k e^r,  k = round(x / ln 2),  r = x - k ln 2 in [-ln2 / 2, ln2 / 2],
// with e^r from its Taylor polynomial (degree 7 for float, 12 for double: the
// truncation error is below 1e-8 and 1e-16 relative) and 2^k built from its
// exponent bits. Arguments below the smallest normal result return 0.
#pragma once

#include "reformer/core/kokkos_compat.hpp"

#include <cstdint>
#include <cstring>

namespace reformer {

KOKKOS_INLINE_FUNCTION float fast_exp(float x) {
  const bool underflow = x < -87.0f;
  x = x < -87.0f ? -87.0f : (x > 88.0f ? 88.0f : x);
  // Round to nearest with the 1.5 * 2^23 trick (no call to rint).
  const float k = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  const float r = (x - k * 0.693145751953125f) - k * 1.428606820309417232e-6f;
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  // A NaN input stays NaN (through p); the exponent bits must not convert it.
  const std::int32_t bits = (static_cast<std::int32_t>(k == k ? k : 0.0f) + 127) << 23;
  float scale;
  memcpy(&scale, &bits, sizeof scale);
  return underflow ? 0.0f : p * scale;
}

KOKKOS_INLINE_FUNCTION double fast_exp(double x) {
  const bool underflow = x < -708.0;
  x = x < -708.0 ? -708.0 : (x > 709.0 ? 709.0 : x);
  const double k = (x * 1.4426950408889634 + 6755399441055744.0) - 6755399441055744.0;
  const double r = (x - k * 0.693145751953125) - k * 1.428606820309417232e-6;
  double p = 1.0 / 479001600.0;  // 1 / 12!
  p = p * r + 1.0 / 39916800.0;
  p = p * r + 1.0 / 3628800.0;
  p = p * r + 1.0 / 362880.0;
  p = p * r + 1.0 / 40320.0;
  p = p * r + 1.0 / 5040.0;
  p = p * r + 1.0 / 720.0;
  p = p * r + 1.0 / 120.0;
  p = p * r + 1.0 / 24.0;
  p = p * r + 1.0 / 6.0;
  p = p * r + 0.5;
  p = p * r + 1.0;
  p = p * r + 1.0;
  const std::int64_t bits = (static_cast<std::int64_t>(k == k ? k : 0.0) + 1023) << 52;
  double scale;
  memcpy(&scale, &bits, sizeof scale);
  return underflow ? 0.0 : p * scale;
}

}  // namespace reformer
