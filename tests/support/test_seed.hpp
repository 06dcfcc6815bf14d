// The seed of a randomized test: a fixed default, so that every run (and a
// failure) can be replayed, overridden by the environment variable
// REFORMER_TEST_SEED (a decimal number) to explore other seeds. Tests put the
// seed in a SCOPED_TRACE, so every failure message names it:
//   const unsigned seed = reformer::testing::test_seed(20240611);
//   SCOPED_TRACE(reformer::testing::seed_trace(seed));
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <string>

namespace reformer::testing {

inline std::uint64_t test_seed(std::uint64_t default_seed) {
  const char* text = std::getenv("REFORMER_TEST_SEED");
  if (text == nullptr || *text == '\0') return default_seed;
  char* end = nullptr;
  const unsigned long long value = std::strtoull(text, &end, 10);
  if (*end != '\0' || *text == '-') {
    ADD_FAILURE() << "REFORMER_TEST_SEED='" << text << "' is not a non-negative decimal number";
    return default_seed;
  }
  return value;
}

// "seed 123 (replay: REFORMER_TEST_SEED=123)"
inline std::string seed_trace(std::uint64_t seed) {
  return "seed " + std::to_string(seed) + " (replay: REFORMER_TEST_SEED=" + std::to_string(seed) +
         ")";
}

}  // namespace reformer::testing
