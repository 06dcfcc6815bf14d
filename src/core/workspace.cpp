#include "reformer/core/workspace.hpp"

#include "reformer/core/error.hpp"

#include <algorithm>

namespace reformer {
namespace {

// Every buffer starts on a 256-byte boundary (vector loads on CPUs, coalesced
// access on GPUs).
constexpr std::size_t kAlignment = 256;

std::size_t aligned(std::size_t bytes) {
  return (bytes + kAlignment - 1) / kAlignment * kAlignment;
}

}  // namespace

Workspace::Frame::Frame(Workspace& workspace) : workspace_(workspace), mark_(workspace.top_) {
  ++workspace_.depth_;
}

Workspace::Frame::~Frame() { workspace_.end_frame(mark_); }

void* Workspace::take(std::size_t bytes) {
  require<ConfigError>(depth_ > 0, "Workspace::take: buffers are taken through a Workspace::Frame");
  bytes = aligned(std::max<std::size_t>(bytes, 1));
  const std::size_t start = top_;
  top_ += bytes;
  high_water_ = std::max(high_water_, top_);
  if (top_ <= arena_.extent(0)) return arena_.data() + start;
  overflow_.emplace_back(Kokkos::view_alloc(Kokkos::WithoutInitializing, label_ + "_overflow"),
                         bytes);
  return overflow_.back().data();
}

void Workspace::end_frame(std::size_t mark) {
  top_ = mark;
  if (--depth_ > 0) return;
  if (!overflow_.empty() || high_water_ > arena_.extent(0)) {
    overflow_.clear();
    arena_ = Bytes();
    arena_ = Bytes(Kokkos::view_alloc(Kokkos::WithoutInitializing, label_), high_water_);
  }
}

void Workspace::reserve(std::int64_t bytes) {
  require<ConfigError>(depth_ == 0, "Workspace::reserve: called while ", depth_,
                       " frame(s) are open; reserve between steps");
  if (std::size_t(bytes) <= arena_.extent(0)) return;
  high_water_ = std::max(high_water_, std::size_t(bytes));
  arena_ = Bytes();
  arena_ = Bytes(Kokkos::view_alloc(Kokkos::WithoutInitializing, label_), high_water_);
}

}  // namespace reformer
