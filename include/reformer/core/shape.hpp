// Shape checks with messages that name the operation, the tensor and the
// extents, plus zero-copy reshapes between ranks of contiguous Views.
#pragma once

#include "reformer/core/error.hpp"
#include "reformer/core/types.hpp"

#include <sstream>
#include <string>

namespace reformer {

// "[2, 1024, 256]"
template <class V>
std::string shape_string(const V& v) {
  std::ostringstream out;
  out << "[";
  for (unsigned r = 0; r < V::rank; ++r) out << (r ? ", " : "") << v.extent(r);
  out << "]";
  return out.str();
}

// Throws ShapeError unless v.extent(dim) == expected.
template <class V>
void require_extent(const char* op, const char* name, const V& v, unsigned dim, Index expected) {
  if (static_cast<Index>(v.extent(dim)) != expected)
    throw ShapeError(detail::concat(op, ": ", name, " has shape ", shape_string(v),
                                    " but its dimension ", dim, " must be ", expected));
}

// Throws ShapeError unless both views have identical extents.
template <class A, class B>
void require_same_shape(const char* op, const char* name_a, const A& a, const char* name_b,
                        const B& b) {
  static_assert(unsigned(A::rank) == unsigned(B::rank), "require_same_shape: ranks differ");
  for (unsigned r = 0; r < A::rank; ++r)
    if (a.extent(r) != b.extent(r))
      throw ShapeError(detail::concat(op, ": ", name_a, " has shape ", shape_string(a), " but ",
                                      name_b, " has shape ", shape_string(b),
                                      "; they must be equal"));
}

// Throws ShapeError if any dimension is zero (an empty tensor is never meant).
template <class V>
void require_nonempty(const char* op, const char* name, const V& v) {
  for (unsigned r = 0; r < V::rank; ++r)
    if (v.extent(r) == 0)
      throw ShapeError(detail::concat(op, ": ", name, " has shape ", shape_string(v),
                                      "; every dimension must be positive"));
}

// Views a contiguous rank-3 tensor [a, b, c] as a matrix [a * b, c] (no copy).
template <class T>
Kokkos::View<T**, Layout, MemSpace> as_matrix(const Kokkos::View<T***, Layout, MemSpace>& v) {
  return Kokkos::View<T**, Layout, MemSpace>(v.data(), v.extent(0) * v.extent(1), v.extent(2));
}

// Views any contiguous tensor as a flat vector (no copy).
template <class V>
Kokkos::View<typename V::value_type*, Layout, MemSpace> as_vector(const V& v) {
  return Kokkos::View<typename V::value_type*, Layout, MemSpace>(v.data(), v.size());
}

// Elements of one row (one index of extent 0) of a contiguous tensor.
template <class V>
Index row_elements(const V& v) {
  return v.extent(0) ? Index(v.size() / v.extent(0)) : 0;
}

// The view in `slot`, reallocated (uninitialised) only when its shape differs:
// state that callers keep across steps is allocated once.
template <class V, class... Extents>
V& ensure_view(V& slot, const std::string& label, Extents... extents) {
  const Index want[] = {Index(extents)...};
  bool same = slot.data() != nullptr;
  for (std::size_t r = 0; r < sizeof...(extents); ++r)
    same = same && Index(slot.extent(r)) == want[r];
  if (!same) {
    slot = V();  // free the old buffer before allocating the new one
    slot = V(Kokkos::view_alloc(Kokkos::WithoutInitializing, label), extents...);
  }
  return slot;
}

}  // namespace reformer
