// Setup steps of higher layers (core/runtime.hpp, register_runtime_setup): a
// step registered once a Runtime has run its steps (tests/test_main.cpp builds
// one before the tests) runs at once, so no layer misses its setup.
#include "reformer/core/runtime.hpp"

#include <gtest/gtest.h>

namespace reformer {
namespace {

int setup_calls = 0;
void count_setup() { ++setup_calls; }

TEST(RuntimeSetup, StepRegisteredAfterTheRuntimeStartedRunsAtOnce) {
  ASSERT_EQ(setup_calls, 0);
  EXPECT_TRUE(register_runtime_setup(&count_setup));
  EXPECT_EQ(setup_calls, 1);
}

}  // namespace
}  // namespace reformer
