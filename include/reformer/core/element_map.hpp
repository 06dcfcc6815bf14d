// Maps over the elements of arrays: store(i, value(i)) for every element.
#pragma once

#include "reformer/core/error.hpp"
#include "reformer/core/matrix_policy.hpp"
#include "reformer/core/types.hpp"

#include <type_traits>

namespace reformer {

// How a map walks its elements:
//  - Blocks (the host): parallel_blocks' contiguous blocks, each the plain
//    loop `store(i, value(i))`, which vectorises.
//  - Groups (GPUs): a thread takes kElementGroup elements, `groups` apart (so
//    a warp's k-th loads are adjacent), and computes the values of all of them
//    before it stores any. A loop `y[i] = f(x[i])` may not move a load above
//    the store before it (x may be y), so one element a thread left each
//    thread one load in flight: the elementwise kernels of the 64K step ran
//    at about 1.1 TB/s of an H200's 4.8.
// Both give the same bits: each element's value is computed alone.
enum class MapForm { Blocks, Groups };
inline constexpr MapForm kMapForm = kHostMemory ? MapForm::Blocks : MapForm::Groups;
inline constexpr int kElementGroup = 4;

// store(i, value(i)) for i in [0, n). value(i) may read element i of what
// store writes, and nothing else of it. `streams` as in parallel_blocks (the
// host's hints for bf16 arrays).
template <MapForm kForm = kMapForm, class Value, class Store, class... Streams>
void parallel_map(const char* label, Index n, const Value& value, const Store& store,
                  const Streams*... streams) {
  if constexpr (kForm == MapForm::Blocks) {
    parallel_blocks(
        label, n,
        KOKKOS_LAMBDA(Index begin, Index end) {
          for (Index i = begin; i < end; ++i) store(i, value(i));
        },
        streams...);
  } else {
    const Index groups = (n + kElementGroup - 1) / kElementGroup;
    Kokkos::parallel_for(
        label, range(groups), KOKKOS_LAMBDA(Index g) {
          std::decay_t<decltype(value(g))> v[kElementGroup];
          for (int k = 0; k < kElementGroup; ++k)
            if (g + k * groups < n) v[k] = value(g + k * groups);
          for (int k = 0; k < kElementGroup; ++k)
            if (g + k * groups < n) store(g + k * groups, v[k]);
        });
  }
}

// store(i, j, value(i, j)) over the elements of a [rows, cols] matrix, with
// the same rule for value. Blocks: runs along rows of flat blocks of
// rows * cols; Groups: a thread takes kElementGroup columns of one row,
// `groups` apart, a warp along the row (matrix_policy: no index split by a
// division, which costs a GPU about 100 instructions at 64 bits).
template <MapForm kForm = kMapForm, class Value, class Store>
void parallel_row_map(const char* label, Index rows, Index cols, const Value& value,
                      const Store& store) {
  if (rows == 0 || cols == 0) return;
  if constexpr (kForm == MapForm::Blocks) {
    parallel_blocks(
        label, rows * cols, KOKKOS_LAMBDA(Index begin, Index end) {
          for (Index k = begin; k < end;) {
            const Index i = k / cols, j0 = k % cols,
                        j1 = j0 + (end - k) < cols ? j0 + (end - k) : cols;
            for (Index j = j0; j < j1; ++j) store(i, j, value(i, j));
            k += j1 - j0;
          }
        });
  } else {
    const Index groups = (cols + kElementGroup - 1) / kElementGroup;
    Kokkos::parallel_for(
        label, matrix_policy(rows, groups), KOKKOS_LAMBDA(Index i, Index g) {
          std::decay_t<decltype(value(i, g))> v[kElementGroup];
          for (int k = 0; k < kElementGroup; ++k)
            if (g + k * groups < cols) v[k] = value(i, g + k * groups);
          for (int k = 0; k < kElementGroup; ++k)
            if (g + k * groups < cols) store(i, g + k * groups, v[k]);
        });
  }
}

// Every element of a contiguous view set to `value`, and dst = src for two
// contiguous views of the same length and value type (device to device): one
// launch each on the default execution space, ordered with the launches
// around it. Kokkos::deep_copy(view, value) and deep_copy(dst, src) fence
// before and after (Kokkos 3.4): on a GPU each is a wait for every launch
// queued before it.
template <class V>
void fill_elements(const char* label, const V& view, typename V::const_value_type value) {
  require<ShapeError>(view.span_is_contiguous(), label, ": fill_elements needs a contiguous view (",
                      view.label(), " is strided)");
  using Value = typename V::non_const_value_type;
  Value* to = view.data();
  parallel_map(
      label, Index(view.span()), KOKKOS_LAMBDA(Index) { return value; },
      KOKKOS_LAMBDA(Index i, Value v) { to[i] = v; });
}

template <class D, class S>
void copy_elements(const char* label, const D& dst, const S& src) {
  using Value = typename D::non_const_value_type;
  static_assert(std::is_same<Value, typename S::non_const_value_type>::value,
                "copy_elements copies between views of one value type");
  static_assert(std::is_same<typename D::memory_space, typename S::memory_space>::value,
                "copy_elements copies within one memory space");
  require<ShapeError>(dst.span_is_contiguous() && src.span_is_contiguous() &&
                          dst.span() == src.span() && dst.size() == src.size(),
                      label, ": copy_elements needs contiguous views of one size (", dst.label(),
                      ": ", dst.size(), " elements, ", src.label(), ": ", src.size(), ")");
  Value* to = dst.data();
  const Value* from = src.data();
  if (static_cast<const void*>(to) == static_cast<const void*>(from)) return;
  parallel_map(
      label, Index(dst.span()), KOKKOS_LAMBDA(Index i) { return from[i]; },
      KOKKOS_LAMBDA(Index i, Value v) { to[i] = v; });
}

}  // namespace reformer
