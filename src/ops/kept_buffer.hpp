// A device buffer kept between calls (internal header): grown when a call
// needs more, freed when Kokkos finalises, so that a training step allocates
// nothing after its first. One buffer per element type and Tag (each user
// names its own), shared by every call of that user: launches on the default
// execution space run in order, so one call's use of it ends before the next
// call's begins.
#pragma once

#include "reformer/core/types.hpp"

#include <string>

namespace reformer::ops::detail {

template <class T, class Tag>
View1<T> kept_buffer(const char* label, Index elements) {
  static View1<T>* buffer = nullptr;
  if (buffer == nullptr) {
    buffer = new View1<T>();
    Kokkos::push_finalize_hook([] { *buffer = View1<T>(); });
  }
  if (Index(buffer->extent(0)) < elements)
    *buffer =
        View1<T>(Kokkos::view_alloc(std::string(label), Kokkos::WithoutInitializing), elements);
  return *buffer;
}

}  // namespace reformer::ops::detail
