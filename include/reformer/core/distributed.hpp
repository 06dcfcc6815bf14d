// Data-parallel processes: a thin wrapper over MPI (docs/distributed.md).
//
// Built with REFORMER_ENABLE_MPI (on when CMake finds an MPI), a program
// started by `mpirun -np N` sees N processes through Communicator::world();
// everything else (a build without MPI, or a program not started by mpirun)
// sees one. Only this file and src/core/distributed.cpp know MPI; the trainer
// asks for sums and for nonblocking sums of gradient slices.
//
//   reformer::DistributedRuntime mpi(argc, argv);   // before Kokkos (main)
//   const auto& world = reformer::Communicator::world();
//   if (world.rank() == 0) write_checkpoint();
#pragma once

#include "reformer/core/types.hpp"

#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace reformer {

// Initialises MPI (threads: funneled) when the build has it and the process
// was started by an MPI launcher, or always with `force`; finalises it on
// destruction. Without MPI it does nothing. One per program, in main, before
// Kokkos is initialised.
class DistributedRuntime {
 public:
  DistributedRuntime(int& argc, char**& argv);
  ~DistributedRuntime();
  DistributedRuntime(const DistributedRuntime&) = delete;
  DistributedRuntime& operator=(const DistributedRuntime&) = delete;

 private:
  bool owns_ = false;
};

// True when the library was built with MPI.
bool mpi_built();
// "Open MPI v4.1.4 (CUDA-aware: no)", or "none (built without MPI)".
std::string mpi_description();

class Communicator {
 public:
  // The processes of the run: MPI_COMM_WORLD once MPI is initialised, else one.
  static const Communicator& world();
  // This process alone (MPI_COMM_SELF, or one process without MPI).
  static const Communicator& self();

  int rank() const { return rank_; }
  int size() const { return size_; }
  // Rank among the processes of this node (GPU selection); 0 without MPI.
  int local_rank() const { return local_rank_; }

  // Sums `values` over the processes, in place; waits at most
  // `timeout_seconds` for the others (0: forever), then throws an Error
  // naming `what` and the processes' count (a process died or hung).
  void sum(std::vector<double>& values, const char* what, double timeout_seconds = 0) const;
  // Process `root`'s `text` on every process.
  std::string broadcast(const std::string& text, int root = 0) const;
  // Every process's `mine` (as many values on each), one after the other in
  // rank order, on process `root`; empty on the others. Waits as sum() does;
  // a ShapeError naming `what` on every process when the counts differ.
  // Instantiated for float and double.
  template <class T>
  std::vector<T> gather(const std::vector<T>& mine, const char* what, double timeout_seconds = 0,
                        int root = 0) const;
  // Ends the whole run with `code` from any process (MPI_Abort); exit()
  // without MPI.
  [[noreturn]] void abort(int code) const;

  struct Impl;

 private:
  Communicator() = default;
  std::shared_ptr<Impl> impl_;
  int rank_ = 0, size_ = 1, local_rank_ = 0;
  template <class T>
  friend class GradientAllreduce;
};

// Nonblocking sums of slices ("buckets") of one buffer in the default memory
// space (a flat gradient), over the processes. Host memory, or device memory
// when the MPI is CUDA- or ROCm-aware (asked at run time), is handed to MPI
// as it is; otherwise each bucket is copied to a pinned host buffer, summed
// there and copied back. start(b) may be called in any order, each bucket
// at most once per round; finish() starts the buckets not started, waits for
// all, and ends the round. With one process every call returns at once.
template <class T>
class GradientAllreduce {
 public:
  // `stage`: copy through the host buffer even where MPI could read the
  // buffer directly (tests the staging path on a host backend).
  GradientAllreduce(const Communicator& comm, View1<T> buffer,
                    std::vector<std::pair<Index, Index>> buckets, bool stage = false);
  ~GradientAllreduce();
  GradientAllreduce(const GradientAllreduce&) = delete;
  GradientAllreduce& operator=(const GradientAllreduce&) = delete;

  void start(std::size_t bucket);
  // Lets started sums move on (MPI progresses only inside its calls).
  void progress();
  // Seconds spent waiting in finish() (the part the backward did not hide).
  double finish(double timeout_seconds = 0);
  std::size_t buckets() const { return buckets_.size(); }
  // Whether the sums pass device memory to MPI directly (GPU-aware MPI or a
  // host backend) instead of staging it.
  bool direct() const { return direct_; }

 private:
  const Communicator& comm_;
  View1<T> buffer_;
  std::vector<std::pair<Index, Index>> buckets_;
  std::vector<char> started_;
  bool direct_ = true;
  struct Requests;
  std::unique_ptr<Requests> requests_;
};

}  // namespace reformer
