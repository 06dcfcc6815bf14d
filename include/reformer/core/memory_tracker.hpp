// In-process memory accounting through the Kokkos Tools allocate/deallocate hooks.
//
// Counts every Kokkos allocation (Views, scratch pools, sort buffers) per memory
// space ("Host", "Cuda", "HIP", ...): current bytes, peak bytes and the number of
// live allocations. Named phases record the peak reached while they were open,
// so an experiment can report "forward", "backward" and "optimizer" separately.
// Vendor library workspaces (cuBLAS, rocBLAS) do not go through Kokkos and are
// therefore not counted.
//
// The same install() also counts kernel launches through the Kokkos Tools
// begin_parallel_for / _reduce / _scan hooks (they fire on every backend, the
// host ones included). A launch is ours unless Kokkos made it to move or fill
// memory: deep_copy's copies and fills ("Kokkos::ViewCopy-*",
// "Kokkos::ViewFill-*", "Kokkos::Impl::host_space_deepcopy_*") and View
// initialisation and destruction ("Kokkos::View::initialization [...]") are
// counted apart, as internal. Kokkos' sorts and Kokkos Kernels' kernels are
// ours; vendor BLAS calls (cuBLAS, host BLAS) are not Kokkos launches and are
// not seen.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace reformer {

struct SpaceMemory {
  std::int64_t current_bytes = 0;
  std::int64_t peak_bytes = 0;
  std::int64_t live_allocations = 0;
  std::int64_t allocations = 0;  // allocation events since install(), ever rising
};

// Kernel launches counted since install() or the last reset_launches().
struct LaunchCounts {
  std::int64_t parallel_for = 0;  // ours, by pattern
  std::int64_t parallel_reduce = 0;
  std::int64_t parallel_scan = 0;
  std::int64_t internal = 0;  // Kokkos' copies, fills and View (de)initialisation
  std::int64_t ours() const { return parallel_for + parallel_reduce + parallel_scan; }
};

// What one closed (or still open) phase saw in one memory space.
struct PhaseMemory {
  std::string phase;
  std::string space;
  std::int64_t start_bytes = 0;  // current bytes when the phase began
  std::int64_t peak_bytes = 0;   // highest current bytes while it was open
  std::int64_t end_bytes = 0;    // current bytes when it ended
  std::int64_t launches = 0;     // our kernel launches while it was open (every space's row)
};

// Bytes of the live allocations that share a label (a View's label, e.g.
// "attention_q" or "workspace").
struct LabelBytes {
  std::string label;
  std::int64_t bytes = 0;
  std::int64_t allocations = 0;
};

class MemoryTracker {
 public:
  // The process-wide tracker. Kokkos Tools callbacks are plain function
  // pointers, so there can only be one.
  static MemoryTracker& instance();

  // Registers the callbacks (idempotent). Callbacks that were registered before
  // (an external Kokkos tool) keep being called. Allocations made before
  // install() are not seen; their release is ignored.
  void install();
  // Restores the callbacks that were registered before install().
  void uninstall();
  bool installed() const;

  // Statistics of one space; zeros for a space that never allocated.
  SpaceMemory space(const std::string& name) const;
  std::map<std::string, SpaceMemory> spaces() const;

  // Sets every space's peak to its current bytes.
  void reset_peaks();
  // What was live in `space` when its peak was reached (since install() or the
  // last reset_peaks()), summed by label, largest first: what a peak is made of.
  std::vector<LabelBytes> peak_composition(const std::string& space) const;
  // What is live in `space` now, summed by label, largest first.
  std::vector<LabelBytes> live_composition(const std::string& space) const;

  // Phases nest; each records its own peak. Prefer ScopedMemoryPhase.
  void begin_phase(const std::string& name);
  void end_phase();
  // Closed phases in the order they ended, one row per space they saw.
  std::vector<PhaseMemory> phases() const;
  void clear_phases();

  // Kernel launches since install() or the last reset_launches() (see the top
  // of this file for what is counted).
  LaunchCounts launches() const;
  void reset_launches();

  // Human-readable table of spaces and phases.
  std::string report() const;

  // Entry points for the Kokkos callbacks (public for the C-style trampolines).
  void on_allocate(const char* space, const char* label, const void* ptr, std::uint64_t bytes);
  void on_deallocate(const char* space, const void* ptr, std::uint64_t bytes);
  enum class Pattern { For, Reduce, Scan };
  void on_launch(Pattern pattern, const char* label);

 private:
  MemoryTracker() = default;

  struct OpenPhase {
    std::string name;
    std::map<std::string, PhaseMemory> per_space;
    std::int64_t launches_at_begin = 0;
  };

  mutable std::mutex mutex_;
  bool installed_ = false;
  std::map<std::string, SpaceMemory> spaces_;
  struct Live {
    std::string space, label;
    std::uint64_t bytes = 0;
  };
  std::map<const void*, Live> live_;
  // Per space: the live allocations by label at its peak.
  std::map<std::string, std::vector<LabelBytes>> peak_composition_;
  std::vector<LabelBytes> composition(const std::string& space) const;  // live now, unlocked
  std::vector<OpenPhase> open_;
  std::vector<PhaseMemory> closed_;
  // Launch counters: atomics, so a launch costs no lock.
  std::atomic<std::int64_t> launch_for_{0}, launch_reduce_{0}, launch_scan_{0}, launch_internal_{0};
  std::atomic<std::int64_t> launch_ever_{0};  // ours, never reset: the phases' clock
};

// Opens a phase for the lifetime of the object.
class ScopedMemoryPhase {
 public:
  explicit ScopedMemoryPhase(const std::string& name) {
    MemoryTracker::instance().begin_phase(name);
  }
  ~ScopedMemoryPhase() { MemoryTracker::instance().end_phase(); }
  ScopedMemoryPhase(const ScopedMemoryPhase&) = delete;
  ScopedMemoryPhase& operator=(const ScopedMemoryPhase&) = delete;
};

// "1.50 MiB" style formatting used by reports.
std::string format_bytes(std::int64_t bytes);

}  // namespace reformer
