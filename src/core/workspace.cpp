#include "reformer/core/workspace.hpp"

#include "reformer/core/error.hpp"

#include <algorithm>
#include <cstdint>

namespace reformer {
namespace {

// Every buffer starts on a 256-byte boundary (vector loads on CPUs, coalesced
// access on GPUs).
constexpr std::size_t kAlignment = 256;

std::size_t aligned(std::size_t bytes) {
  return (bytes + kAlignment - 1) / kAlignment * kAlignment;
}

// The first 256-byte boundary in an allocation (allocated that much larger).
unsigned char* aligned_start(unsigned char* data) {
  const auto address = reinterpret_cast<std::uintptr_t>(data);
  return data + (aligned(address) - address);
}

}  // namespace

std::size_t Workspace::capacity() const {
  return arena_.extent(0) == 0 ? 0 : std::size_t(arena_.extent(0)) - kAlignment;
}

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
  if (top_ <= capacity()) return aligned_start(arena_.data()) + start;
  overflow_.emplace_back(Kokkos::view_alloc(Kokkos::WithoutInitializing, label_ + "_overflow"),
                         bytes + kAlignment);
  return aligned_start(overflow_.back().data());
}

void Workspace::end_frame(std::size_t mark) {
  // The live buffers lie in [0, top_); the overflow allocations are those that
  // end past the arena, so they are the last ones, back to back up to top_.
  // Those at or past `mark` belong to the frame that ended and go with it:
  // sibling frames that each overflow (a layer after a layer, a chunk after a
  // chunk) do not pile up their allocations until the outermost frame ends
  // (on a first step they did, far past the high-water mark).
  std::size_t end = top_;
  while (!overflow_.empty()) {
    const std::size_t bytes = std::size_t(overflow_.back().extent(0)) - kAlignment;
    if (end - bytes < mark) break;  // taken by a frame that is still open
    end -= bytes;
    overflow_.pop_back();
  }
  top_ = mark;
  if (--depth_ > 0) return;
  if (!overflow_.empty() || high_water_ > capacity()) {
    overflow_.clear();
    rebuild(high_water_);
  }
}

void Workspace::rebuild(std::size_t bytes) {
  arena_ = Bytes();  // the old arena goes first: the two never coexist
  if (bytes > 0)
    arena_ = Bytes(Kokkos::view_alloc(Kokkos::WithoutInitializing, label_), bytes + kAlignment);
}

void Workspace::reserve(std::int64_t bytes) {
  require<ConfigError>(depth_ == 0, "Workspace::reserve: called while ", depth_,
                       " frame(s) are open; reserve before the outermost frame begins");
  require<ConfigError>(bytes >= 0, "Workspace::reserve: ", bytes,
                       " bytes asked, but a size must not be negative");
  const std::size_t wanted = aligned(std::size_t(bytes));
  if (wanted > capacity()) rebuild(wanted);
}

void Workspace::shrink_to_high_water() {
  require<ConfigError>(depth_ == 0, "Workspace::shrink_to_high_water: called while ", depth_,
                       " frame(s) are open; shrink after the outermost frame ends");
  if (capacity() > high_water_) rebuild(high_water_);
}

void Workspace::release() {
  require<ConfigError>(depth_ == 0, "Workspace::release: called while ", depth_,
                       " frame(s) are open; release after the outermost frame ends");
  arena_ = Bytes();
  overflow_.clear();
  top_ = high_water_ = 0;
}

}  // namespace reformer
