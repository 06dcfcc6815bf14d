#include "reformer/core/memory_tracker.hpp"

#include "reformer/core/error.hpp"
#include "reformer/core/kokkos_compat.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <sstream>

namespace reformer {
namespace {

using Kokkos::Tools::Experimental::EventSet;

EventSet previous_callbacks;

void allocate_hook(Kokkos::Profiling::SpaceHandle handle, const char* label, const void* ptr,
                   std::uint64_t bytes) {
  MemoryTracker::instance().on_allocate(handle.name, label, ptr, bytes);
  if (previous_callbacks.allocate_data != nullptr)
    previous_callbacks.allocate_data(handle, label, ptr, bytes);
}

void deallocate_hook(Kokkos::Profiling::SpaceHandle handle, const char* label, const void* ptr,
                     std::uint64_t bytes) {
  MemoryTracker::instance().on_deallocate(handle.name, ptr, bytes);
  if (previous_callbacks.deallocate_data != nullptr)
    previous_callbacks.deallocate_data(handle, label, ptr, bytes);
}

// Kokkos' own memory moves and fills (see memory_tracker.hpp): labels of
// deep_copy's kernels and of View initialisation/destruction, in 3.4 and 4.x.
bool internal_launch(const char* label) {
  if (label == nullptr) return false;
  const auto starts = [label](const char* prefix) {
    return std::strncmp(label, prefix, std::strlen(prefix)) == 0;
  };
  return starts("Kokkos::View") || starts("Kokkos::Impl::host_space_deepcopy") ||
         starts("Kokkos::DynRankViewFill") || starts("Kokkos::DynRankViewRemap");
}

void begin_for_hook(const char* label, std::uint32_t device, std::uint64_t* id) {
  MemoryTracker::instance().on_launch(MemoryTracker::Pattern::For, label);
  if (previous_callbacks.begin_parallel_for != nullptr)
    previous_callbacks.begin_parallel_for(label, device, id);
}

void begin_reduce_hook(const char* label, std::uint32_t device, std::uint64_t* id) {
  MemoryTracker::instance().on_launch(MemoryTracker::Pattern::Reduce, label);
  if (previous_callbacks.begin_parallel_reduce != nullptr)
    previous_callbacks.begin_parallel_reduce(label, device, id);
}

void begin_scan_hook(const char* label, std::uint32_t device, std::uint64_t* id) {
  MemoryTracker::instance().on_launch(MemoryTracker::Pattern::Scan, label);
  if (previous_callbacks.begin_parallel_scan != nullptr)
    previous_callbacks.begin_parallel_scan(label, device, id);
}

}  // namespace

MemoryTracker& MemoryTracker::instance() {
  static MemoryTracker tracker;
  return tracker;
}

void MemoryTracker::install() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (installed_) return;
  previous_callbacks = Kokkos::Tools::Experimental::get_callbacks();
  Kokkos::Tools::Experimental::set_allocate_data_callback(&allocate_hook);
  Kokkos::Tools::Experimental::set_deallocate_data_callback(&deallocate_hook);
  Kokkos::Tools::Experimental::set_begin_parallel_for_callback(&begin_for_hook);
  Kokkos::Tools::Experimental::set_begin_parallel_reduce_callback(&begin_reduce_hook);
  Kokkos::Tools::Experimental::set_begin_parallel_scan_callback(&begin_scan_hook);
  installed_ = true;
}

void MemoryTracker::uninstall() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!installed_) return;
  Kokkos::Tools::Experimental::set_allocate_data_callback(previous_callbacks.allocate_data);
  Kokkos::Tools::Experimental::set_deallocate_data_callback(previous_callbacks.deallocate_data);
  Kokkos::Tools::Experimental::set_begin_parallel_for_callback(
      previous_callbacks.begin_parallel_for);
  Kokkos::Tools::Experimental::set_begin_parallel_reduce_callback(
      previous_callbacks.begin_parallel_reduce);
  Kokkos::Tools::Experimental::set_begin_parallel_scan_callback(
      previous_callbacks.begin_parallel_scan);
  installed_ = false;
}

bool MemoryTracker::installed() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return installed_;
}

void MemoryTracker::on_allocate(const char* space, const char* label, const void* ptr,
                                std::uint64_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  const std::string name = space != nullptr ? space : "unknown";
  live_[ptr] = {name, label != nullptr ? label : "", bytes};
  SpaceMemory& s = spaces_[name];
  s.current_bytes += static_cast<std::int64_t>(bytes);
  s.live_allocations += 1;
  s.allocations += 1;
  if (s.current_bytes > s.peak_bytes) {
    s.peak_bytes = s.current_bytes;
    peak_composition_[name] = composition(name);
  }
  for (OpenPhase& phase : open_) {
    auto [it, inserted] = phase.per_space.try_emplace(name);
    if (inserted) {
      it->second = {phase.name, name, s.current_bytes - static_cast<std::int64_t>(bytes), 0, 0, 0};
    }
    it->second.peak_bytes = std::max(it->second.peak_bytes, s.current_bytes);
  }
}

void MemoryTracker::on_deallocate(const char* /*space*/, const void* ptr, std::uint64_t /*bytes*/) {
  std::lock_guard<std::mutex> lock(mutex_);
  // Only memory whose allocation was seen is subtracted, so installing the
  // tracker while Views are alive never drives the counters negative.
  auto it = live_.find(ptr);
  if (it == live_.end()) return;
  SpaceMemory& s = spaces_[it->second.space];
  s.current_bytes -= static_cast<std::int64_t>(it->second.bytes);
  s.live_allocations -= 1;
  live_.erase(it);
}

void MemoryTracker::on_launch(Pattern pattern, const char* label) {
  if (internal_launch(label)) {
    launch_internal_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  auto& counter = pattern == Pattern::For      ? launch_for_
                  : pattern == Pattern::Reduce ? launch_reduce_
                                               : launch_scan_;
  counter.fetch_add(1, std::memory_order_relaxed);
  launch_ever_.fetch_add(1, std::memory_order_relaxed);
}

LaunchCounts MemoryTracker::launches() const {
  LaunchCounts counts;
  counts.parallel_for = launch_for_.load(std::memory_order_relaxed);
  counts.parallel_reduce = launch_reduce_.load(std::memory_order_relaxed);
  counts.parallel_scan = launch_scan_.load(std::memory_order_relaxed);
  counts.internal = launch_internal_.load(std::memory_order_relaxed);
  return counts;
}

void MemoryTracker::reset_launches() {
  launch_for_.store(0, std::memory_order_relaxed);
  launch_reduce_.store(0, std::memory_order_relaxed);
  launch_scan_.store(0, std::memory_order_relaxed);
  launch_internal_.store(0, std::memory_order_relaxed);
}

SpaceMemory MemoryTracker::space(const std::string& name) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = spaces_.find(name);
  return it == spaces_.end() ? SpaceMemory{} : it->second;
}

std::map<std::string, SpaceMemory> MemoryTracker::spaces() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return spaces_;
}

void MemoryTracker::reset_peaks() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& [name, s] : spaces_) {
    s.peak_bytes = s.current_bytes;
    peak_composition_[name] = composition(name);
  }
}

std::vector<LabelBytes> MemoryTracker::composition(const std::string& space) const {
  std::map<std::string, LabelBytes> by_label;
  for (const auto& [ptr, live] : live_) {
    if (live.space != space) continue;
    LabelBytes& entry = by_label[live.label];
    entry.label = live.label;
    entry.bytes += static_cast<std::int64_t>(live.bytes);
    entry.allocations += 1;
  }
  std::vector<LabelBytes> out;
  for (auto& [label, entry] : by_label) out.push_back(entry);
  std::stable_sort(out.begin(), out.end(),
                   [](const LabelBytes& a, const LabelBytes& b) { return a.bytes > b.bytes; });
  return out;
}

std::vector<LabelBytes> MemoryTracker::peak_composition(const std::string& space) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = peak_composition_.find(space);
  return it == peak_composition_.end() ? std::vector<LabelBytes>{} : it->second;
}

std::vector<LabelBytes> MemoryTracker::live_composition(const std::string& space) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return composition(space);
}

void MemoryTracker::begin_phase(const std::string& name) {
  std::lock_guard<std::mutex> lock(mutex_);
  OpenPhase phase{name, {}, launch_ever_.load(std::memory_order_relaxed)};
  for (const auto& [space, s] : spaces_)
    phase.per_space[space] = {name, space, s.current_bytes, s.current_bytes, 0, 0};
  open_.push_back(std::move(phase));
}

void MemoryTracker::end_phase() {
  std::lock_guard<std::mutex> lock(mutex_);
  require(!open_.empty(), "MemoryTracker::end_phase: no phase is open");
  const std::int64_t launches =
      launch_ever_.load(std::memory_order_relaxed) - open_.back().launches_at_begin;
  for (auto& [space, row] : open_.back().per_space) {
    row.end_bytes = spaces_[space].current_bytes;
    row.launches = launches;
    closed_.push_back(row);
  }
  open_.pop_back();
}

std::vector<PhaseMemory> MemoryTracker::phases() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return closed_;
}

void MemoryTracker::clear_phases() {
  std::lock_guard<std::mutex> lock(mutex_);
  closed_.clear();
}

std::string format_bytes(std::int64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while ((value >= 1024.0 || value <= -1024.0) && unit < 4) {
    value /= 1024.0;
    ++unit;
  }
  char text[64];
  if (unit == 0)
    std::snprintf(text, sizeof text, "%lld B", static_cast<long long>(bytes));
  else
    std::snprintf(text, sizeof text, "%.2f %s", value, units[unit]);
  return text;
}

std::string MemoryTracker::report() const {
  const auto all_spaces = spaces();
  const auto all_phases = phases();
  std::ostringstream out;
  out << "memory space       current          peak   live allocations\n";
  for (const auto& [name, s] : all_spaces) {
    char line[160];
    std::snprintf(line, sizeof line, "%-12s %13s %13s   %lld\n", name.c_str(),
                  format_bytes(s.current_bytes).c_str(), format_bytes(s.peak_bytes).c_str(),
                  static_cast<long long>(s.live_allocations));
    out << line;
  }
  const LaunchCounts counted = launches();
  out << "kernel launches    " << counted.ours() << " (for " << counted.parallel_for << ", reduce "
      << counted.parallel_reduce << ", scan " << counted.parallel_scan << "), Kokkos copies/fills "
      << counted.internal << "\n";
  if (!all_phases.empty()) {
    out << "phase                space          start          peak           end   launches\n";
    for (const PhaseMemory& p : all_phases) {
      char line[200];
      std::snprintf(line, sizeof line, "%-20s %-8s %13s %13s %13s %10lld\n", p.phase.c_str(),
                    p.space.c_str(), format_bytes(p.start_bytes).c_str(),
                    format_bytes(p.peak_bytes).c_str(), format_bytes(p.end_bytes).c_str(),
                    static_cast<long long>(p.launches));
      out << line;
    }
  }
  return out.str();
}

}  // namespace reformer
