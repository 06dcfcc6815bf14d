#include "reformer/core/random.hpp"
#include "reformer/core/types.hpp"

#include <gtest/gtest.h>

#include <cmath>

namespace reformer {
namespace {

void draw_on_device(RandomKey key, View1<std::uint64_t> bits, View1<double> normals) {
  Kokkos::parallel_for(
      "draw", range(bits.extent(0)), KOKKOS_LAMBDA(Index i) {
        bits(i) = random_bits(key, i);
        normals(i) = random_normal(key, i);
      });
}

// Device results must equal the same pure function evaluated on the host.
TEST(Random, DeviceAndHostAgreeBitwise) {
  const RandomKey key{42, stream_id(3, 7)};
  constexpr Index n = 4096;
  View1<std::uint64_t> bits("bits", n);
  View1<double> normals("normals", n);
  draw_on_device(key, bits, normals);
  auto hb = Kokkos::create_mirror_view(bits);
  auto hn = Kokkos::create_mirror_view(normals);
  Kokkos::deep_copy(hb, bits);
  Kokkos::deep_copy(hn, normals);
  // The bits agree exactly; the normals within a few ulp (their log and cosine
  // come from the device's math library on GPUs, from the host's here).
  for (Index i = 0; i < n; ++i) {
    ASSERT_EQ(hb(i), random_bits(key, i));
    ASSERT_NEAR(hn(i), random_normal(key, i), 1e-15 * (1 + std::abs(hn(i))));
  }
}

TEST(Random, StreamsAndSeedsDiffer) {
  int same_stream = 0, same_seed = 0;
  for (std::uint64_t i = 0; i < 1000; ++i) {
    same_stream += random_bits({1, 2}, i) == random_bits({1, 3}, i);
    same_seed += random_bits({1, 2}, i) == random_bits({2, 2}, i);
  }
  EXPECT_EQ(same_stream, 0);
  EXPECT_EQ(same_seed, 0);
  EXPECT_NE(stream_id(1, 2), stream_id(2, 1));
}

TEST(Random, MomentsOfUniformAndNormal) {
  constexpr int n = 200000;
  double su = 0, sn = 0, sn2 = 0;
  for (int i = 0; i < n; ++i) {
    const double u = random_uniform({9, 1}, i);
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    su += u;
    const double z = random_normal({9, 2}, i);
    sn += z;
    sn2 += z * z;
  }
  EXPECT_NEAR(su / n, 0.5, 0.005);
  EXPECT_NEAR(sn / n, 0.0, 0.01);
  EXPECT_NEAR(sn2 / n, 1.0, 0.02);
}

}  // namespace
}  // namespace reformer
