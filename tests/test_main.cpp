// GoogleTest entry point: one Kokkos runtime (with the memory tracker) for all tests.
#include "reformer/core/runtime.hpp"

#include <gtest/gtest.h>

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  reformer::Runtime runtime;
  return RUN_ALL_TESTS();
}
