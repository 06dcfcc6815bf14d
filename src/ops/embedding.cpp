#include "reformer/ops/embedding.hpp"

#include "reformer/core/instantiate.hpp"
#include "reformer/core/matrix_policy.hpp"
#include "reformer/core/shape.hpp"

#include <cmath>
#include <limits>
#include <string>
#include <utility>

namespace reformer::ops {
namespace {

// Radix sort parameters: 8-bit digits, and positions per serially scanned block.
constexpr int kDigitBits = 8;
constexpr Index kRadix = Index(1) << kDigitBits;
constexpr Index kSortBlock = 256;

// The positions 0..n-1 ordered by (ids[i], i): a stable LSD radix sort. Each pass
// counts the digits of every block of kSortBlock positions, turns the counts into
// start offsets with one exclusive scan in (digit, block) order, and scatters
// every block in order. Blocks are scanned serially, so the order is unique.
View1<Index> positions_sorted_by_id(In1<int> ids, Index vocab) {
  const Index n = ids.extent(0), block = kSortBlock, radix_mask = kRadix - 1;
  const Index blocks = (n + block - 1) / block;
  View1<Index> order("embedding_sort_order", n), next("embedding_sort_next", n);
  View2<Index> start("embedding_sort_start", kRadix, blocks);
  auto start_flat = as_vector(start);
  Kokkos::parallel_for(
      "embedding_sort_init", range(n), KOKKOS_LAMBDA(Index i) { order(i) = i; });
  for (int shift = 0; ((vocab - 1) >> shift) > 0; shift += kDigitBits) {
    Kokkos::deep_copy(start, Index(0));
    Kokkos::parallel_for(
        "embedding_sort_count", range(blocks), KOKKOS_LAMBDA(Index b) {
          const Index end = (b + 1) * block < n ? (b + 1) * block : n;
          for (Index k = b * block; k < end; ++k) ++start((ids(order(k)) >> shift) & radix_mask, b);
        });
    Kokkos::parallel_scan(
        "embedding_sort_scan", range(kRadix * blocks),
        KOKKOS_LAMBDA(Index t, Index & sum, bool final) {
          const Index count = start_flat(t);
          if (final) start_flat(t) = sum;
          sum += count;
        });
    Kokkos::parallel_for(
        "embedding_sort_scatter", range(blocks), KOKKOS_LAMBDA(Index b) {
          const Index end = (b + 1) * block < n ? (b + 1) * block : n;
          for (Index k = b * block; k < end; ++k)
            next(start((ids(order(k)) >> shift) & radix_mask, b)++) = order(k);
        });
    std::swap(order, next);
  }
  return order;
}

// Checks that m [rows, d] holds whole sequences of `length` positions from `offset`.
template <class V>
void check_positions(const char* op, const char* name, const V& m, Index length, Index offset) {
  require_nonempty(op, name, m);
  require<ConfigError>(length > 0, op, ": length is ", length, " but must be positive");
  require<ConfigError>(offset >= 0, op, ": offset is ", offset, " but must be non-negative");
  require<ShapeError>(static_cast<Index>(m.extent(0)) % length == 0, op, ": ", name, " has ",
                      m.extent(0), " rows, which is not a multiple of length ", length);
}

// Checks that positions [offset, offset + length) fit in a table of `capacity` positions.
void check_capacity(const char* op, Index length, Index offset, Index capacity,
                    const std::string& capacity_name) {
  require<ConfigError>(offset + length <= capacity, op,
                       ": positions up to offset + length = ", offset, " + ", length, " = ",
                       offset + length, " exceed ", capacity_name, " = ", capacity);
}

// Checks the axial tables e1 [n1, d1] and e2 [n2, d2] against the width d = d1 + d2
// and the positions [offset, offset + length).
template <class A, class B>
void check_axial(const char* op, const char* name1, const A& e1, const char* name2, const B& e2,
                 Index d, Index length, Index offset) {
  require_nonempty(op, name1, e1);
  require_nonempty(op, name2, e2);
  const Index n1 = e1.extent(0), d1 = e1.extent(1), n2 = e2.extent(0), d2 = e2.extent(1);
  require<ShapeError>(d1 + d2 == d, op, ": ", name1, " has shape ", shape_string(e1), " and ",
                      name2, " has shape ", shape_string(e2), "; their widths d1 + d2 = ", d1,
                      " + ", d2, " = ", d1 + d2, " must equal the model width ", d);
  check_capacity(op, length, offset, n1 * n2, detail::concat("n1 * n2 = ", n1, " * ", n2));
}

}  // namespace

void require_ids_in_range(const char* op, const char* name, In1<int> ids, Index vocab, int also) {
  const Index n = ids.extent(0);
  Index first_bad = n;
  Kokkos::parallel_reduce(
      "require_ids_in_range", range(n),
      KOKKOS_LAMBDA(Index i, Index & first) {
        if ((ids(i) < 0 || ids(i) >= vocab) && ids(i) != also && i < first) first = i;
      },
      Kokkos::Min<Index>(first_bad));
  if (first_bad >= n) return;
  int value = 0;
  Kokkos::deep_copy(value, Kokkos::subview(ids, first_bad));
  throw ConfigError(detail::concat(op, ": ", name, "[", first_bad, "] is ", value,
                                   " but must be in [0, ", vocab, ")"));
}

template <class T>
void token_embedding_forward(In2<param_t<T>> table, In1<int> ids, bool scale_by_sqrt_d, View2<T> y,
                             IdCheck check) {
  using C = compute_t<T>;
  const char* op = "token_embedding_forward";
  require_nonempty(op, "table", table);
  const Index vocab = table.extent(0), d = table.extent(1), n = ids.extent(0);
  require_extent(op, "y", y, 0, n);
  require_extent(op, "y", y, 1, d);
  if (check == IdCheck::Check) require_ids_in_range(op, "ids", ids, vocab);
  const C scale = scale_by_sqrt_d ? static_cast<C>(std::sqrt(double(d))) : C(1);
  // y[i, j] = s * table[ids[i], j]
  Kokkos::parallel_for(
      "token_embedding_forward", matrix_policy(n, d),
      KOKKOS_LAMBDA(Index i, Index j) { y(i, j) = store<T>(scale * table(ids(i), j)); });
}

template <class T>
void token_embedding_backward(In1<int> ids, In2<T> dy, bool scale_by_sqrt_d,
                              View2<param_t<T>> dtable) {
  using C = compute_t<T>;
  const char* op = "token_embedding_backward";
  require_nonempty(op, "dtable", dtable);
  const Index vocab = dtable.extent(0), d = dtable.extent(1), n = ids.extent(0);
  require_extent(op, "dy", dy, 0, n);
  require_extent(op, "dy", dy, 1, d);
  require_ids_in_range(op, "ids", ids, vocab);
  const C scale = scale_by_sqrt_d ? static_cast<C>(std::sqrt(double(d))) : C(1);
  const auto order = positions_sorted_by_id(ids, vocab);
  // The first sorted entry of each id sums its run: dtable[v, j] += s * sum dy[i, j].
  Kokkos::parallel_for(
      "token_embedding_backward", matrix_policy(n, d), KOKKOS_LAMBDA(Index s, Index j) {
        const int v = ids(order(s));
        if (s > 0 && ids(order(s - 1)) == v) return;
        C sum = 0;
        for (Index t = s; t < n && ids(order(t)) == v; ++t) sum += load(dy(order(t), j));
        dtable(v, j) += scale * sum;
      });
}

template <class T>
void sinusoidal_positions_forward(In2<T> x, Index length, Index offset, View2<T> y) {
  using C = compute_t<T>;
  const char* op = "sinusoidal_positions_forward";
  check_positions(op, "x", x, length, offset);
  require_same_shape(op, "x", x, "y", y);
  const Index rows = x.extent(0), d = x.extent(1);
  // y[r, j] = x[r, j] + sin or cos(p / 10000^((j - j mod 2) / d)), p = offset + r mod length;
  // sin for even j, cos for odd j. The angle is computed in double for long sequences.
  // One thread per (position, feature) evaluates the sine once for every row
  // at that position (rows p, p + length, ...).
  const Index sequences = rows / length;
  Kokkos::parallel_for(
      op, matrix_policy(length, d), KOKKOS_LAMBDA(Index p, Index j) {
        const double angle = static_cast<double>(offset + p) /
                             compat::pow(10000.0, static_cast<double>(j - j % 2) / d);
        const C value = static_cast<C>(j % 2 == 0 ? compat::sin(angle) : compat::cos(angle));
        for (Index s = 0; s < sequences; ++s)
          y(s * length + p, j) = store<T>(load(x(s * length + p, j)) + value);
      });
}

template <class T>
void learned_positions_forward(In2<T> x, In2<param_t<T>> table, Index length, Index offset,
                               View2<T> y) {
  const char* op = "learned_positions_forward";
  check_positions(op, "x", x, length, offset);
  require_same_shape(op, "x", x, "y", y);
  const Index rows = x.extent(0), d = x.extent(1);
  require_extent(op, "table", table, 1, d);
  check_capacity(op, length, offset, table.extent(0), "the table's max_len");
  // y[r, j] = x[r, j] + table[offset + r mod length, j]
  Kokkos::parallel_for(
      op, matrix_policy(rows, d), KOKKOS_LAMBDA(Index r, Index j) {
        y(r, j) = store<T>(load(x(r, j)) + table(offset + r % length, j));
      });
}

// Checks of the per-row forms: y like x, one position per row, end > 0.
template <class T>
void check_rows_at(const char* op, In2<T> x, In1<Index> positions, Index end, View2<T> y) {
  require_nonempty(op, "x", x);
  require_same_shape(op, "x", x, "y", y);
  require_extent(op, "positions", positions, 0, Index(x.extent(0)));
  require<ConfigError>(end > 0, op, ": end is ", end, " but must be positive");
}

template <class T>
void sinusoidal_positions_forward_at(In2<T> x, In1<Index> positions, Index end, View2<T> y) {
  using C = compute_t<T>;
  const char* op = "sinusoidal_positions_forward_at";
  check_rows_at<T>(op, x, positions, end, y);
  const Index rows = x.extent(0), d = x.extent(1);
  const C nan = std::numeric_limits<C>::quiet_NaN();
  // As sinusoidal_positions_forward with p = positions[r].
  Kokkos::parallel_for(
      op, matrix_policy(rows, d), KOKKOS_LAMBDA(Index r, Index j) {
        const Index p = positions(r);
        if (p < 0 || p >= end) {
          y(r, j) = store<T>(nan);
          return;
        }
        const double angle =
            static_cast<double>(p) / compat::pow(10000.0, static_cast<double>(j - j % 2) / d);
        y(r, j) = store<T>(load(x(r, j)) +
                           static_cast<C>(j % 2 == 0 ? compat::sin(angle) : compat::cos(angle)));
      });
}

template <class T>
void learned_positions_forward_at(In2<T> x, In2<param_t<T>> table, In1<Index> positions, Index end,
                                  View2<T> y) {
  using C = compute_t<T>;
  const char* op = "learned_positions_forward_at";
  check_rows_at<T>(op, x, positions, end, y);
  const Index rows = x.extent(0), d = x.extent(1);
  require_extent(op, "table", table, 1, d);
  check_capacity(op, end, 0, table.extent(0), "the table's max_len");
  const C nan = std::numeric_limits<C>::quiet_NaN();
  // y[r, j] = x[r, j] + table[positions[r], j]
  Kokkos::parallel_for(
      op, matrix_policy(rows, d), KOKKOS_LAMBDA(Index r, Index j) {
        const Index p = positions(r);
        y(r, j) = store<T>(p < 0 || p >= end ? nan : load(x(r, j)) + table(p, j));
      });
}

template <class T>
void axial_positions_forward_at(In2<T> x, In2<param_t<T>> e1, In2<param_t<T>> e2,
                                In1<Index> positions, Index end, View2<T> y) {
  using C = compute_t<T>;
  const char* op = "axial_positions_forward_at";
  check_rows_at<T>(op, x, positions, end, y);
  const Index rows = x.extent(0), d = x.extent(1);
  check_axial(op, "e1", e1, "e2", e2, d, end, 0);
  const Index n2 = e2.extent(0), d1 = e1.extent(1);
  const C nan = std::numeric_limits<C>::quiet_NaN();
  // y[r, j] = x[r, j] + (j < d1 ? e1[p / n2, j] : e2[p mod n2, j - d1]), p = positions[r]
  Kokkos::parallel_for(
      op, matrix_policy(rows, d), KOKKOS_LAMBDA(Index r, Index j) {
        const Index p = positions(r);
        y(r, j) = store<T>(p < 0 || p >= end
                               ? nan
                               : load(x(r, j)) + (j < d1 ? e1(p / n2, j) : e2(p % n2, j - d1)));
      });
}

template <class T>
void learned_positions_backward(In2<T> dy, Index length, Index offset, View2<param_t<T>> dtable) {
  using C = compute_t<T>;
  const char* op = "learned_positions_backward";
  check_positions(op, "dy", dy, length, offset);
  const Index rows = dy.extent(0), d = dy.extent(1);
  require_extent(op, "dtable", dtable, 1, d);
  check_capacity(op, length, offset, dtable.extent(0), "the table's max_len");
  // dtable[offset + p, j] += sum_b dy[b * length + p, j]: one thread per (p, j).
  Kokkos::parallel_for(
      op, matrix_policy(length, d), KOKKOS_LAMBDA(Index p, Index j) {
        C sum = 0;
        for (Index r = p; r < rows; r += length) sum += load(dy(r, j));
        dtable(offset + p, j) += sum;
      });
}

template <class T>
void axial_positions_forward(In2<T> x, In2<param_t<T>> e1, In2<param_t<T>> e2, Index length,
                             Index offset, View2<T> y) {
  const char* op = "axial_positions_forward";
  check_positions(op, "x", x, length, offset);
  require_same_shape(op, "x", x, "y", y);
  const Index rows = x.extent(0), d = x.extent(1);
  check_axial(op, "e1", e1, "e2", e2, d, length, offset);
  const Index n2 = e2.extent(0), d1 = e1.extent(1);
  // y[r, j] = x[r, j] + (j < d1 ? e1[p / n2, j] : e2[p mod n2, j - d1]), p = offset + r mod length
  Kokkos::parallel_for(
      op, matrix_policy(rows, d), KOKKOS_LAMBDA(Index r, Index j) {
        const Index p = offset + r % length;
        y(r, j) = store<T>(load(x(r, j)) + (j < d1 ? e1(p / n2, j) : e2(p % n2, j - d1)));
      });
}

template <class T>
void axial_positions_backward(In2<T> dy, Index length, Index offset, View2<param_t<T>> de1,
                              View2<param_t<T>> de2) {
  using C = compute_t<T>;
  const char* op = "axial_positions_backward";
  check_positions(op, "dy", dy, length, offset);
  const Index rows = dy.extent(0);
  check_axial(op, "de1", de1, "de2", de2, dy.extent(1), length, offset);
  const Index n1 = de1.extent(0), d1 = de1.extent(1), n2 = de2.extent(0), d2 = de2.extent(1);
  const Index end = offset + length;
  // de1[a, j] += sum of dy[r, j] over rows r at positions p in [a n2, (a + 1) n2).
  Kokkos::parallel_for(
      "axial_positions_backward_e1", matrix_policy(n1, d1), KOKKOS_LAMBDA(Index a, Index j) {
        const Index lo = a * n2 > offset ? a * n2 : offset;
        const Index hi = (a + 1) * n2 < end ? (a + 1) * n2 : end;
        C sum = 0;
        for (Index p = lo; p < hi; ++p)
          for (Index r = p - offset; r < rows; r += length) sum += load(dy(r, j));
        de1(a, j) += sum;
      });
  // de2[c, j] += sum of dy[r, d1 + j] over rows r at positions p = a n2 + c.
  Kokkos::parallel_for(
      "axial_positions_backward_e2", matrix_policy(n2, d2), KOKKOS_LAMBDA(Index c, Index j) {
        C sum = 0;
        for (Index p = c; p < end; p += n2)
          if (p >= offset)
            for (Index r = p - offset; r < rows; r += length) sum += load(dy(r, d1 + j));
        de2(c, j) += sum;
      });
}

#define REFORMER_INSTANTIATE(T)                                                                    \
  template void token_embedding_forward<T>(In2<param_t<T>>, In1<int>, bool, View2<T>, IdCheck);    \
  template void token_embedding_backward<T>(In1<int>, In2<T>, bool, View2<param_t<T>>);            \
  template void sinusoidal_positions_forward<T>(In2<T>, Index, Index, View2<T>);                   \
  template void learned_positions_forward<T>(In2<T>, In2<param_t<T>>, Index, Index, View2<T>);     \
  template void learned_positions_backward<T>(In2<T>, Index, Index, View2<param_t<T>>);            \
  template void axial_positions_forward<T>(In2<T>, In2<param_t<T>>, In2<param_t<T>>, Index, Index, \
                                           View2<T>);                                              \
  template void axial_positions_backward<T>(In2<T>, Index, Index, View2<param_t<T>>,               \
                                            View2<param_t<T>>);                                    \
  template void sinusoidal_positions_forward_at<T>(In2<T>, In1<Index>, Index, View2<T>);           \
  template void learned_positions_forward_at<T>(In2<T>, In2<param_t<T>>, In1<Index>, Index,        \
                                                View2<T>);                                         \
  template void axial_positions_forward_at<T>(In2<T>, In2<param_t<T>>, In2<param_t<T>>,            \
                                              In1<Index>, Index, View2<T>);
REFORMER_INSTANTIATE_STORAGE_TYPES(REFORMER_INSTANTIATE)

}  // namespace reformer::ops
