#include "reformer/core/kernel_profile.hpp"

#include "reformer/core/kokkos_compat.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>

namespace reformer {
namespace {

using Kokkos::Tools::Experimental::EventSet;

EventSet chained;

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Begin hooks: the earlier callbacks first (they may count the launch), then
// ours, which owns the kernel id.
void begin_for(const char* label, std::uint32_t device, std::uint64_t* id) {
  if (chained.begin_parallel_for != nullptr) chained.begin_parallel_for(label, device, id);
  *id = KernelProfile::instance().begin(label, false);
}
void begin_reduce(const char* label, std::uint32_t device, std::uint64_t* id) {
  if (chained.begin_parallel_reduce != nullptr) chained.begin_parallel_reduce(label, device, id);
  *id = KernelProfile::instance().begin(label, false);
}
void begin_scan(const char* label, std::uint32_t device, std::uint64_t* id) {
  if (chained.begin_parallel_scan != nullptr) chained.begin_parallel_scan(label, device, id);
  *id = KernelProfile::instance().begin(label, false);
}
void end_for(std::uint64_t id) {
  KernelProfile::instance().end(id);
  if (chained.end_parallel_for != nullptr) chained.end_parallel_for(id);
}
void end_reduce(std::uint64_t id) {
  KernelProfile::instance().end(id);
  if (chained.end_parallel_reduce != nullptr) chained.end_parallel_reduce(id);
}
void end_scan(std::uint64_t id) {
  KernelProfile::instance().end(id);
  if (chained.end_parallel_scan != nullptr) chained.end_parallel_scan(id);
}
void hook_push_region(const char* name) {
  if (chained.push_region != nullptr) chained.push_region(name);
  KernelProfile::instance().begin(name, true);
}
void hook_pop_region() {
  KernelProfile::instance().pop_region();
  if (chained.pop_region != nullptr) chained.pop_region();
}

}  // namespace

KernelProfile& KernelProfile::instance() {
  static KernelProfile profile;
  return profile;
}

void KernelProfile::install() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (installed_) return;
    installed_ = true;
  }
  namespace tools = Kokkos::Tools::Experimental;
  chained = tools::get_callbacks();
  tools::set_begin_parallel_for_callback(&begin_for);
  tools::set_begin_parallel_reduce_callback(&begin_reduce);
  tools::set_begin_parallel_scan_callback(&begin_scan);
  tools::set_end_parallel_for_callback(&end_for);
  tools::set_end_parallel_reduce_callback(&end_reduce);
  tools::set_end_parallel_scan_callback(&end_scan);
  tools::set_push_region_callback(&hook_push_region);
  tools::set_pop_region_callback(&hook_pop_region);
  reset();
}

void KernelProfile::uninstall() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!installed_) return;
    installed_ = false;
  }
  namespace tools = Kokkos::Tools::Experimental;
  tools::set_begin_parallel_for_callback(chained.begin_parallel_for);
  tools::set_begin_parallel_reduce_callback(chained.begin_parallel_reduce);
  tools::set_begin_parallel_scan_callback(chained.begin_parallel_scan);
  tools::set_end_parallel_for_callback(chained.end_parallel_for);
  tools::set_end_parallel_reduce_callback(chained.end_parallel_reduce);
  tools::set_end_parallel_scan_callback(chained.end_parallel_scan);
  tools::set_push_region_callback(chained.push_region);
  tools::set_pop_region_callback(chained.pop_region);
}

bool KernelProfile::installed() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return installed_;
}

// The fence before a kernel ends whatever ran before it (host work, a vendor
// BLAS call) so that the kernel's time is its own; the one after waits for it.
std::uint64_t KernelProfile::begin(const char* label, bool region) {
  compat::fence("reformer::KernelProfile");
  const double start = now_seconds();
  std::lock_guard<std::mutex> lock(mutex_);
  const std::uint64_t id = next_id_++;
  std::string name = label != nullptr ? label : "(unlabelled)";
  if (region) name = "[region] " + name;
  open_[id] = {std::move(name), start};
  if (region) regions_.push_back(id);
  return id;
}

void KernelProfile::end(std::uint64_t id) {
  compat::fence("reformer::KernelProfile");
  const double stop = now_seconds();
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = open_.find(id);
  if (it == open_.end()) return;  // begun before install() or reset()
  KernelTime& total = totals_[it->second.label];
  total.label = it->second.label;
  total.calls += 1;
  total.seconds += stop - it->second.start;
  open_.erase(it);
}

void KernelProfile::pop_region() {
  std::uint64_t id = 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (regions_.empty()) return;
    id = regions_.back();
    regions_.pop_back();
  }
  end(id);
}

std::vector<KernelTime> KernelProfile::times() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<KernelTime> out;
  for (const auto& [label, time] : totals_) out.push_back(time);
  std::stable_sort(out.begin(), out.end(),
                   [](const KernelTime& a, const KernelTime& b) { return a.seconds > b.seconds; });
  return out;
}

double KernelProfile::wall_seconds() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return now_seconds() - started_;
}

void KernelProfile::reset() {
  std::lock_guard<std::mutex> lock(mutex_);
  totals_.clear();
  // Kernels and regions open now are not counted (their begin is before the
  // reset); later pops of such regions find nothing.
  open_.clear();
  regions_.clear();
  started_ = now_seconds();
}

std::string KernelProfile::report() const {
  const std::vector<KernelTime> all = times();
  const double wall = wall_seconds();
  double kernels = 0;
  std::int64_t launches = 0;
  for (const KernelTime& t : all) {
    if (t.label.rfind("[region] ", 0) == 0) continue;
    kernels += t.seconds;
    launches += t.calls;
  }
  std::ostringstream out;
  char line[512];
  std::snprintf(line, sizeof line, "%-64s %9s %12s %12s %7s\n", "kernel or [region]", "calls",
                "total ms", "mean us", "share");
  out << line;
  for (const KernelTime& t : all) {
    const bool region = t.label.rfind("[region] ", 0) == 0;
    char share[16] = "";
    if (!region && kernels > 0)
      std::snprintf(share, sizeof share, "%.1f%%", 100 * t.seconds / kernels);
    std::snprintf(line, sizeof line, "%-64s %9lld %12.3f %12.2f %7s\n", t.label.c_str(),
                  static_cast<long long>(t.calls), 1e3 * t.seconds,
                  1e6 * t.seconds / static_cast<double>(t.calls), share);
    out << line;
  }
  std::snprintf(line, sizeof line,
                "kernels: %lld launches, %.3f ms; wall since the profile started: %.3f ms\n",
                static_cast<long long>(launches), 1e3 * kernels, 1e3 * wall);
  out << line;
  return out.str();
}

std::string install_kernel_profile_from_environment() {
  const char* path = std::getenv("REFORMER_KERNEL_PROFILE");
  if (path == nullptr || path[0] == '\0') return "";
  KernelProfile::instance().install();
  return path;
}

bool write_kernel_profile(const std::string& path) {
  const std::string text = KernelProfile::instance().report();
  if (path == "-") {
    std::cerr << text;
    return true;
  }
  std::ofstream file(path);
  file << text;
  return static_cast<bool>(file);
}

}  // namespace reformer
