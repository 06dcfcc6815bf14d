// Writes checkpoints in a loop until it is killed (tests/io/test_checkpoint_crash.cpp):
// step k goes to <run_dir>/checkpoints/step_<k>.h5 and over
// <run_dir>/checkpoints/latest.h5, then all but the two newest numbered files
// are pruned. Contents alternate between steps (crash_model.hpp).
//
//   checkpoint_crash_writer <run_dir> [max_steps]
#include "crash/crash_model.hpp"
#include "reformer/core/runtime.hpp"

#include <cstdio>
#include <cstdlib>
#include <exception>

namespace {

using namespace reformer;
using namespace reformer::testing::crash;

void fill(const View1<float>& view, std::int64_t step, int which) {
  auto host = Kokkos::create_mirror_view(view);
  for (std::size_t i = 0; i < host.extent(0); ++i) host(i) = expected(step, which, Index(i));
  Kokkos::deep_copy(view, host);
}

void write_checkpoints(const std::string& run_dir, std::int64_t max_steps) {
  ParameterSet<float> params;
  add_parameters(params);
  train::Adam<float> adam(params);
  for (std::int64_t step = 1; step <= max_steps; ++step) {
    for (const auto& p : params) {
      fill(p.value, step, 0);
      fill(adam.first_moment(p.name), step, 1);
      fill(adam.second_moment(p.name), step, 2);
    }
    adam.set_steps(step);
    io::CheckpointMeta meta;
    meta.step = step;
    meta.data_position = std::uint64_t(step) * 10;
    meta.seed = 77;
    meta.config = expected_config(step);
    io::save_checkpoint(io::checkpoint_file(run_dir, step), params, &adam, meta);
    io::save_checkpoint(rewritten_file(run_dir), params, &adam, meta);
    io::prune_checkpoints(run_dir, 2);
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s <run_dir> [max_steps]\n", argv[0]);
    return 2;
  }
  const std::int64_t max_steps = argc > 2 ? std::atoll(argv[2]) : 50000;
  try {
    RuntimeOptions options;
    options.num_threads = 1;  // the host kernels here are tiny; spare the test's cores
    options.track_memory = false;
    Runtime runtime(options);
    write_checkpoints(argv[1], max_steps);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "checkpoint_crash_writer: %s\n", e.what());
    return 1;
  }
  return 0;
}
