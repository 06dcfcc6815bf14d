// Loading tiles into team scratch: the one set of loaders of the tiled
// attention kernels (exact, relative, and the chunked kernels of LSH and local
// attention; internal header).
//
// A tile holds rows of a [batch, length, heads, d_head] tensor for one
// (batch entry, head) in the compute type C, as rows (dst [rows, d_pad]) or
// transposed (dst [d_pad, rows]). Columns d_head..d_pad (padding to whole
// register blocks of team_multiply) and rows outside the sequence are always
// written as zeros, so no tile needs clearing before it is loaded and padding
// adds nothing to any product.
#pragma once

#include "reformer/core/precision.hpp"
#include "reformer/core/team_scratch.hpp"

#include <type_traits>
#include <utility>

namespace reformer::attention::detail {

template <class T>
using Scratch2 = ScratchMatrix<T>;
using ScratchInts = ScratchVector<int>;

// Zeroes a scratch matrix: by rows on the host, a thread per element on GPUs.
template <class T>
KOKKOS_INLINE_FUNCTION void zero(const TeamMember& team, ScratchMatrix<T> m) {
  const Index cols = m.extent(1);
  if constexpr (!kHostMemory) {
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, Index(m.extent(0)) * cols),
                         [&](Index e) { m(e / cols, e % cols) = T(0); });
    return;
  }
  Kokkos::parallel_for(Kokkos::TeamThreadRange(team, Index(m.extent(0))), [&](Index r) {
    for (Index c = 0; c < cols; ++c) m(r, c) = T(0);
  });
}

// Value c of a loaded row: factor * x, or factor * (x + bias[c]) with a bias
// (Transformer-XL's u and v added to the queries).
template <class T, class X, class B>
KOKKOS_INLINE_FUNCTION T loaded(const X& x, const B* bias, Index c, T factor) {
  return bias ? T((load(x) + T(bias[c])) * factor) : T(load(x) * factor);
}

// gather_rows (below) with one thread per element, neighbouring threads on
// neighbouring columns: coalesced loads on a GPU, where gather_rows uses it;
// the streamed kernels use it on every backend.
template <class T, class Source, class B = T>
KOKKOS_INLINE_FUNCTION void gather_elements(const TeamMember& team, Index n, Index d, Index d_pad,
                                            Source&& source, Scratch2<T> rows, Scratch2<T> cols,
                                            const B* bias = nullptr) {
  Kokkos::parallel_for(Kokkos::TeamThreadRange(team, n * d_pad), [&](Index e) {
    const Index r = e / d_pad, c = e % d_pad;
    T factor = T(1);
    const auto* from = source(r, factor);
    const T x = from != nullptr && c < d ? loaded<T>(from[c], bias, c, factor) : T(0);
    if (rows.extent(0)) rows(r, c) = x;
    if (cols.extent(0)) cols(c, r) = x;
  });
}

// Gathers rows [0, n) of a tile of C (the compute type): row r is factor * the
// d values at source(r, factor) (nullptr: a zero row; any storage type, loaded
// into C), plus bias where one is given, then zeros up to d_pad columns;
// written as rows [n][d_pad] and/or transposed, cols [d_pad][n] (empty views
// are skipped). On the host the transposed copy takes 8 rows at a time, so
// that each column of the group is one contiguous run of 8 stores instead of
// 8 stores n apart.
template <class T, class Source, class B = T>
KOKKOS_INLINE_FUNCTION void gather_rows(const TeamMember& team, Index n, Index d, Index d_pad,
                                        Source&& source, Scratch2<T> rows, Scratch2<T> cols,
                                        const B* bias = nullptr) {
  if constexpr (!kHostMemory) {
    gather_elements<T>(team, n, d, d_pad, source, rows, cols, bias);
    return;
  }
  constexpr Index G = 8;
  using From = std::remove_reference_t<decltype(*source(Index(0), std::declval<T&>()))>;
  Kokkos::parallel_for(Kokkos::TeamThreadRange(team, (n + G - 1) / G), [&](Index group) {
    const Index first = group * G, count = first + G <= n ? G : n - first;
    From* from[G];
    T factor[G];
    for (Index u = 0; u < G; ++u) {
      factor[u] = T(1);
      from[u] = u < count ? source(first + u, factor[u]) : nullptr;
    }
    if (rows.extent(0))
      for (Index u = 0; u < count; ++u) {
        T* to = &rows(first + u, 0);
        if (!from[u])
          for (Index c = 0; c < d; ++c) to[c] = T(0);
        else if (bias)
          for (Index c = 0; c < d; ++c) to[c] = (load(from[u][c]) + T(bias[c])) * factor[u];
        else
          for (Index c = 0; c < d; ++c) to[c] = load(from[u][c]) * factor[u];
        for (Index c = d; c < d_pad; ++c) to[c] = T(0);
      }
    if (cols.extent(0)) {
      // Absent rows read a zero row with factor 0 (no branch in the loop).
      From zeros[1] = {store<std::remove_const_t<From>>(0)};
      Index step[G];
      for (Index u = 0; u < G; ++u) {
        step[u] = from[u] ? 1 : 0;
        if (!from[u]) {
          from[u] = zeros;
          factor[u] = T(0);
        }
      }
      for (Index c = 0; c < d; ++c) {
        T* to = &cols(c, first);
        if (bias) {
          const T add = T(bias[c]);
          for (Index u = 0; u < count; ++u) to[u] = (load(from[u][c * step[u]]) + add) * factor[u];
        } else {
          for (Index u = 0; u < count; ++u) to[u] = load(from[u][c * step[u]]) * factor[u];
        }
      }
      for (Index c = d; c < d_pad; ++c)
        for (Index u = 0; u < count; ++u) cols(c, first + u) = T(0);
    }
  });
}

// One (batch entry, head) of a [batch, length, heads, d] tensor as tile rows:
// rows [first, first + n) (positions outside [0, length) are zero rows), d
// columns padded with zeros to d_pad, times factor, plus bias (may be null).
// `elements` (TileLoops::elements): a thread per element instead of per row.
template <class X, class B>
struct TileSource {
  const X& x;
  Index b, h, first, length;
  const B* bias;
};
template <class X, class B = param_t<typename X::non_const_value_type>>
KOKKOS_INLINE_FUNCTION TileSource<X, B> tile_source(const X& x, Index b, Index h, Index first,
                                                    Index length, const B* bias = nullptr) {
  return {x, b, h, first, length, bias};
}

template <class C, class X, class B>
KOKKOS_INLINE_FUNCTION void load_tile_rows(const TeamMember& team, const TileSource<X, B>& src,
                                           Index n, Index d, C factor, Scratch2<C> dst,
                                           bool elements) {
  const Index dp = dst.extent(1);
  if (elements) {
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, n * dp), [&](Index e) {
      const Index r = e / dp, c = e % dp, p = src.first + r;
      dst(r, c) = c < d && p >= 0 && p < src.length
                      ? loaded<C>(src.x(src.b, p, src.h, c), src.bias, c, factor)
                      : C(0);
    });
    return;
  }
  Kokkos::parallel_for(Kokkos::TeamThreadRange(team, n), [&](Index r) {
    C* to = &dst(r, 0);
    const Index p = src.first + r;
    if (p < 0 || p >= src.length) {
      for (Index c = 0; c < dp; ++c) to[c] = C(0);
      return;
    }
    const auto* from = &src.x(src.b, p, src.h, 0);
    if (src.bias)
      for (Index c = 0; c < d; ++c) to[c] = (load(from[c]) + C(src.bias[c])) * factor;
    else
      for (Index c = 0; c < d; ++c) to[c] = C(load(from[c])) * factor;
    for (Index c = d; c < dp; ++c) to[c] = C(0);
  });
}

// The same rows transposed, dst [d_pad, n], through gather_rows.
template <class C, class X, class B>
KOKKOS_INLINE_FUNCTION void load_tile_cols(const TeamMember& team, const TileSource<X, B>& src,
                                           Index n, Index d, C factor, Scratch2<C> dst) {
  gather_rows<C>(
      team, n, d, Index(dst.extent(0)),
      [&](Index r, C& f) {
        const Index p = src.first + r;
        f = factor;
        return p >= 0 && p < src.length ? &src.x(src.b, p, src.h, 0) : nullptr;
      },
      Scratch2<C>(), dst, src.bias);
}

// Writes rows [0, n) of tiles a and b into rows [first, first + n) of
// ya and yb (rows at or past length are padding), rounded once to their type.
template <class C, class Y>
KOKKOS_INLINE_FUNCTION void store_tile_rows(const TeamMember& team, Scratch2<C> a, Scratch2<C> b,
                                            const Y& ya, const Y& yb, Index batch, Index h,
                                            Index first, Index n, Index length, Index d,
                                            bool elements) {
  using T = typename Y::non_const_value_type;
  if (elements) {
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, n * d), [&](Index e) {
      const Index t = e / d, c = e % d, j = first + t;
      if (j >= length) return;
      ya(batch, j, h, c) = store<T>(a(t, c));
      yb(batch, j, h, c) = store<T>(b(t, c));
    });
    return;
  }
  Kokkos::parallel_for(Kokkos::TeamThreadRange(team, n), [&](Index t) {
    const Index j = first + t;
    if (j >= length) return;
    T* ra = &ya(batch, j, h, 0);
    T* rb = &yb(batch, j, h, 0);
    for (Index c = 0; c < d; ++c) {
      ra[c] = store<T>(a(t, c));
      rb[c] = store<T>(b(t, c));
    }
  });
}

}  // namespace reformer::attention::detail
