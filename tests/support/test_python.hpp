// The python3 that tests run their independent reference scripts with: the
// build's REFORMER_TEST_PYTHON (the system python3, with numpy and h5py from
// Debian), overridden at run time by the environment variable of the same
// name, for a machine whose numpy lives elsewhere (tests/gpu_run.sh points it
// at the GPU machine's python3).
#pragma once

#include <cstdlib>
#include <string>

namespace reformer::testing {

inline std::string test_python() {
  const char* path = std::getenv("REFORMER_TEST_PYTHON");
  return path != nullptr && *path != '\0' ? path : REFORMER_TEST_PYTHON;
}

}  // namespace reformer::testing
