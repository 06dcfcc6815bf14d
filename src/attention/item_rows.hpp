// Kernels over the items (batch b, position i, head h) of [batch, length,
// heads, d_head] tensors, each item a row of d_head values (internal header).
#pragma once

#include "reformer/core/lane_rows.hpp"
#include "reformer/core/team_scratch.hpp"

namespace reformer::attention::detail {

// Item `idx` of [batch, length, heads], heads fastest.
struct ItemIndex {
  Index b, i, h;
  KOKKOS_INLINE_FUNCTION ItemIndex(Index idx, Index length, Index heads)
      : b(idx / (heads * length)), i(idx / heads % length), h(idx % heads) {}
};

// One pass over the batch * length * heads items in the shape row_kernels()
// picks (core/team_scratch.hpp): `threads`, row(at) on a thread of its own,
// whose loops along d_head vectorise (the host's default); `lanes`,
// lanes(team, at) on a group of lanes (core/lane_rows.hpp), whose loops along
// d_head are ThreadVectorRanges, so that a warp reads and writes whole rows
// (the GPUs' default: a thread per row made a warp touch 32 rows of 256 bytes
// per access, 1.4-1.6 ms a call for 256K rows on an H200).
template <class Row, class Lanes>
void for_items(const char* label, Index batch, Index length, Index heads, const Row& row,
               const Lanes& lanes) {
  const Index n = batch * length * heads;
  if (row_kernels() == RowKernels::threads) {
    Kokkos::parallel_for(
        label, range(n), KOKKOS_LAMBDA(Index idx) { row(ItemIndex(idx, length, heads)); });
    return;
  }
  for_lane_rows(
      label, n, KOKKOS_LAMBDA(const TeamMember& team, Index idx) {
        lanes(team, ItemIndex(idx, length, heads));
      });
}

}  // namespace reformer::attention::detail
