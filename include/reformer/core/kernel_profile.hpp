// Where a step's time goes, kernel by kernel (issue 31): a Kokkos Tools hook
// that fences the device before and after every parallel_for, parallel_reduce
// and parallel_scan and adds the time in between to the kernel's label. Regions
// (Kokkos::Profiling::pushRegion / popRegion: the products of ops/gemm.hpp push
// "ops::matmul" and the like around their vendor-BLAS calls, which are not
// Kokkos launches) are fenced and timed the same way and reported apart, as
// "[region] <name>"; a region's time includes the kernels launched inside it.
//
// The fences serialise the device, so a profiled run is slower than a plain
// one (every launch waits for the one before): read the table for where the
// time goes, and the plain run for how much there is.
//
// Every Runtime installs it when REFORMER_KERNEL_PROFILE names a file, and
// writes the table there when it ends ("-" writes it to standard error).
#pragma once

#include <Kokkos_Core.hpp>

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace reformer {

struct KernelTime {
  std::string label;  // the kernel's label, or "[region] <name>"
  std::int64_t calls = 0;
  double seconds = 0;  // fenced wall time, summed over the calls
};

class KernelProfile {
 public:
  static KernelProfile& instance();

  // Chains to the callbacks installed before (the memory tracker's).
  void install();
  void uninstall();
  bool installed() const;

  // Kernels and regions since install() or reset(), the longest first.
  std::vector<KernelTime> times() const;
  // Wall time since install() or reset().
  double wall_seconds() const;
  void reset();

  // A table: one row per label (calls, total ms, mean us, share of the
  // kernels' time), the kernels' sum, the regions and the wall time.
  std::string report() const;

  // Hook entry points (public for the C callbacks).
  std::uint64_t begin(const char* label, bool region);
  void end(std::uint64_t id);
  void pop_region();

 private:
  KernelProfile() = default;
  struct Open {
    std::string label;
    double start = 0;
  };
  mutable std::mutex mutex_;
  bool installed_ = false;
  double started_ = 0;
  std::uint64_t next_id_ = 1;
  std::map<std::uint64_t, Open> open_;
  std::vector<std::uint64_t> regions_;  // ids of the open regions, innermost last
  std::map<std::string, KernelTime> totals_;
};

// A Kokkos Tools region for the scope's lifetime (work that is not a Kokkos
// launch, such as a vendor BLAS call); costs a test of a pointer when no tool
// is installed.
class ProfileRegion {
 public:
  explicit ProfileRegion(const char* name) { Kokkos::Profiling::pushRegion(name); }
  ~ProfileRegion() { Kokkos::Profiling::popRegion(); }
  ProfileRegion(const ProfileRegion&) = delete;
  ProfileRegion& operator=(const ProfileRegion&) = delete;
};

// Installs the profile when REFORMER_KERNEL_PROFILE is set (Runtime calls it);
// returns the path, or "" when unset.
std::string install_kernel_profile_from_environment();
// Writes the report to that path ("-": standard error); false when it cannot.
bool write_kernel_profile(const std::string& path);

}  // namespace reformer
