// Scratch memory for the temporaries of forward and backward passes.
//
// A Workspace is one arena in the default memory space that grows to the
// largest need it has seen and is then reused, so that after one warm-up step a
// training step makes no new Kokkos allocation (on GPUs: no malloc/free per
// call). Buffers are taken inside a Frame and given back together when the
// frame ends; frames nest like the calls that open them (a stack).
//
// A request that does not fit while other buffers are out is served by a
// separate allocation, so the buffers already handed out stay valid; when the
// outermost frame ends, the arena is rebuilt at the high-water mark.
//
// On a first step that growth costs memory: a request that does not fit is
// served beside the arena the earlier calls grew (for reversible full
// attention, whose backward needs far more than its forward, the first step
// peaked 40% above every later one). A caller that knows the step's need
// (`reformer memory`'s prediction, train::StepMemory::workspace) reserves it
// before the first step and shrinks the arena to the high-water mark after it.
//
// One workspace can serve every layer of a model: a layer's temporaries are
// dead when its call returns. What a backward pass needs from its forward pass
// is not a temporary: it lives in state objects that the caller owns.
#pragma once

#include "reformer/core/types.hpp"

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace reformer {

class Workspace {
 public:
  explicit Workspace(std::string label = "reformer_workspace") : label_(std::move(label)) {}
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;

  // Buffers taken through a frame live until the frame ends.
  class Frame {
   public:
    explicit Frame(Workspace& workspace);
    ~Frame();
    Frame(const Frame&) = delete;
    Frame& operator=(const Frame&) = delete;

    // An uninitialised View (View1..View4 of any scalar, or of int) over
    // workspace memory, e.g. frame.take<View4<float>>(b, n, h, d).
    template <class V, class... Extents>
    V take(Extents... extents) {
      std::size_t count = 1;
      for (const Index e : {Index(extents)...}) count *= std::size_t(e);
      auto* data = static_cast<typename V::value_type*>(
          workspace_.take(count * sizeof(typename V::value_type)));
      return V(data, std::size_t(extents)...);
    }

   private:
    Workspace& workspace_;
    std::size_t mark_;
  };

  // Frees the arena and forgets the high-water mark (ConfigError inside a frame).
  void release();
  // Grows the arena to at least `bytes` (outside every frame; ConfigError
  // inside one or for a negative size). Never shrinks it.
  void reserve(std::int64_t bytes);
  // Rebuilds the arena at the high-water mark when it is larger (a reserve
  // above what the steps took); outside every frame, as reserve.
  void shrink_to_high_water();
  // Bytes of the arena now, and the most that was ever out at once.
  std::int64_t capacity_bytes() const { return std::int64_t(capacity()); }
  std::int64_t high_water_bytes() const { return std::int64_t(high_water_); }

 private:
  void* take(std::size_t bytes);
  std::size_t capacity() const;  // usable bytes of the arena (past its alignment slack)
  void end_frame(std::size_t mark);
  void rebuild(std::size_t bytes);  // the arena anew at `bytes` usable bytes (0: none)

  using Bytes = Kokkos::View<unsigned char*, MemSpace>;
  std::string label_;
  Bytes arena_;
  std::vector<Bytes> overflow_;  // requests that did not fit, until the outermost frame ends
  std::size_t top_ = 0, high_water_ = 0;
  int depth_ = 0;
};

}  // namespace reformer
