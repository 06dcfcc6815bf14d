// What the data-parallel tests share (run by `mpirun -np 2`; every process
// runs every test): the world, a barrier, a folder every process sees and the
// trainer's options for a communicator.
#pragma once

#include "reformer/core/distributed.hpp"
#include "reformer/train/trainer.hpp"
#include "support/temp_dir.hpp"

#include <sstream>
#include <string>
#include <vector>

namespace reformer::testing {

inline const Communicator& world() { return Communicator::world(); }

// Waits for every process (a sum of nothing much).
inline void barrier() {
  std::vector<double> one = {1.0};
  world().sum(one, "the test's barrier", 120);
}

// A folder every process sees: process 0's temporary folder.
struct SharedDir {
  TempDir mine;
  std::string path = world().broadcast(mine.path());
};

// Quiet training on `comm` (progress lines dropped, no signal handlers).
inline train::TrainOptions options_for(const Communicator& comm, bool resume = false) {
  static std::ostringstream quiet;
  train::TrainOptions options;
  options.out = &quiet;
  options.handle_signals = false;
  options.comm = &comm;
  options.resume = resume;
  return options;
}

}  // namespace reformer::testing
