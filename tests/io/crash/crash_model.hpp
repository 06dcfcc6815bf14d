// The model and the contents of checkpoint `step` in the crash-safety test,
// shared by the writer (checkpoint_crash_writer.cpp, killed mid-write) and the
// test that checks what the writer left (test_checkpoint_crash.cpp).
#pragma once

#include "reformer/core/parameter_set.hpp"
#include "reformer/io/checkpoint.hpp"
#include "reformer/train/optimizer.hpp"

#include <cstdint>
#include <string>

namespace reformer::testing::crash {

// About 1.2 MB of parameters (3.6 MB per file with the moments), so that a
// write takes long enough to be killed in its middle.
inline void add_parameters(ParameterSet<float>& params) {
  params.add("embedding.table", {512, 192});
  params.add("layers.0.ff.w_in", {192, 768});
  params.add("layers.0.ff.b_in", {768});
}

// Element i of the values (which = 0), first (1) or second (2) moments of
// checkpoint `step`. Consecutive steps alternate the sign of the pattern; every
// value is an exact float for steps below 10^5.
inline float expected(std::int64_t step, int which, std::int64_t i) {
  const float sign = step % 2 ? 1.0f : -1.0f;
  return float(step) + sign * 0.25f * float(i % 1000) + 2000.0f * float(which);
}

inline std::string expected_config(std::int64_t step) {
  return "[crash]\nstep = " + std::to_string(step) + "\n";
}

// The file that every step rewrites in place (next to the numbered ones).
inline std::string rewritten_file(const std::string& run_dir) {
  return run_dir + "/checkpoints/latest.h5";
}

}  // namespace reformer::testing::crash
