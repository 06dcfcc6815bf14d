// Counter-based, stateless random numbers.
//
// A number is a pure function of (seed, stream, index): the same on Serial,
// OpenMP, CUDA and HIP, for any thread count, and replayable in a backward pass
// without storing masks or rotations. `stream` separates uses (a layer's dropout
// at a step, an initialiser, an LSH rotation); `index` is the element position.
#pragma once

#include "reformer/core/kokkos_compat.hpp"

#include <cstdint>

namespace reformer {

// Identifies one independent stream of random numbers.
struct RandomKey {
  std::uint64_t seed = 0;
  std::uint64_t stream = 0;
};

// Combines counters into a stream id, e.g. stream_id(layer, step, purpose).
KOKKOS_INLINE_FUNCTION std::uint64_t mix64(std::uint64_t x) {
  // SplitMix64 finaliser: a bijection with full avalanche.
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

KOKKOS_INLINE_FUNCTION std::uint64_t stream_id(std::uint64_t a, std::uint64_t b = 0,
                                               std::uint64_t c = 0) {
  return mix64(mix64(mix64(a + 0x9e3779b97f4a7c15ULL) ^ b) + 0x632be59bd9b4e019ULL * c);
}

// 64 random bits for element `index` of the stream.
KOKKOS_INLINE_FUNCTION std::uint64_t random_bits(RandomKey key, std::uint64_t index) {
  const std::uint64_t s =
      mix64(key.seed ^ 0xd1b54a32d192ed03ULL) ^ mix64(key.stream + 0x8cb92ba72f3d8dd7ULL);
  return mix64(s + 0x9e3779b97f4a7c15ULL * (index + 1));
}

// Uniform in [0, 1) with 53 random bits.
KOKKOS_INLINE_FUNCTION double random_uniform(RandomKey key, std::uint64_t index) {
  return static_cast<double>(random_bits(key, index) >> 11) * (1.0 / 9007199254740992.0);
}

// Standard normal by Box-Muller from two uniforms drawn at 2*index and 2*index+1.
// Its log and cosine are the backend's: a GPU's math library may differ from the
// host's in the last bit (the uniforms and bits are identical everywhere).
KOKKOS_INLINE_FUNCTION double random_normal(RandomKey key, std::uint64_t index) {
  const double u1 = 1.0 - random_uniform(key, 2 * index);  // in (0, 1]
  const double u2 = random_uniform(key, 2 * index + 1);
  return compat::sqrt(-2.0 * compat::log(u1)) * compat::cos(6.283185307179586 * u2);
}

}  // namespace reformer
