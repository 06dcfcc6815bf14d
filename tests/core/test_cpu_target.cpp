#include "reformer/core/cpu_target.hpp"
#include "reformer/core/runtime.hpp"
#include "reformer/core/tile_multiply.hpp"

#include <gtest/gtest.h>

#include <cstdio>
#include <string>

namespace reformer {
namespace {

// What the table in core/cpu_target.hpp says for the target this file is
// compiled for (no name: no expectation, e.g. a REFORMER_TILE_OVERRIDE build).
struct Expected {
  const char* name = nullptr;
  int rows = 0, float_cols = 0, double_cols = 0;
};

Expected expected_for_this_target() {
#if defined(REFORMER_TILE_VECTOR_BYTES)
  return {};
#elif defined(__AVX512F__)
  return {"AVX-512", 8, 32, 16};
#elif defined(__AVX2__)
  return {"AVX2", 6, 16, 8};
#elif defined(__AVX__)
  return {"AVX", 6, 16, 8};
#elif defined(__SSE2__)
  return {"SSE2", 6, 8, 4};
#elif defined(__aarch64__) && !defined(__ARM_FEATURE_SVE_BITS)
  return {"NEON", 8, 8, 4};
#else
  return {};
#endif
}

// The tile products' register block comes from the vector unit the build
// targets. The aarch64 cross build of tests/run_all.sh relies on this test to
// show that the NEON shape (8 x 8 floats, 8 x 4 doubles) is the one tested
// under qemu.
TEST(CpuTarget, BlockShapeFollowsTheTarget) {
  const std::string description = cpu_target_description();
  std::printf("cpu target: %s\n", description.c_str());
  if (!kHostMemory) GTEST_SKIP() << "device builds use the device's tile shape";
  const Expected e = expected_for_this_target();
  if (!e.name) GTEST_SKIP() << "no expectation for this target: " << description;
  EXPECT_STREQ(CpuTarget::name, e.name);
  EXPECT_EQ(TileTraits<float>::block_rows, e.rows);
  EXPECT_EQ(TileTraits<float>::block_cols, e.float_cols);
  EXPECT_EQ(TileTraits<double>::block_rows, e.rows);
  EXPECT_EQ(TileTraits<double>::block_cols, e.double_cols);
  // The accumulators, one row of B and the broadcast element of A fit the
  // register file.
  EXPECT_LE(e.rows * CpuTarget::block_vectors + CpuTarget::block_vectors + 1,
            CpuTarget::vector_registers);
}

}  // namespace
}  // namespace reformer
