// Token embeddings and positional information.
//
// Every positional op works on a matrix x [rows, d] that holds `rows / length`
// sequences of `length` positions one after another, i.e. a [batch, length, d]
// tensor viewed with as_matrix. Row r sits at position offset + r % length;
// `offset` shifts all positions (0 for training, the number of tokens already
// decoded for incremental decoding). rows must be a multiple of length.
//
// The positional ops add their encoding: y = x + pe. y may be x (in place). Their
// gradient with respect to x is the identity (dx = dy), so only the learned
// tables have a backward.
#pragma once

#include "reformer/core/precision.hpp"
#include "reformer/core/types.hpp"

namespace reformer::ops {

// Throws ConfigError naming the first i with ids[i] outside [0, vocab) and its
// value; ids equal to `also` (an ignored target, -1 say) are allowed too.
void require_ids_in_range(const char* op, const char* name, In1<int> ids, Index vocab,
                          int also = 0);

// Whether token_embedding_forward checks its ids (require_ids_in_range: a
// reduction whose result the host waits for) or its caller already has: a
// decoding step, which checks its tokens on the host before they go to the
// device, or once for a whole call. On a GPU the wait is a synchronisation per
// generated token.
enum class IdCheck { Check, AlreadyChecked };

// y[i, :] = s * table[ids[i], :] for table [vocab, d], ids [n], y [n, d], with
// s = sqrt(d) if scale_by_sqrt_d (Vaswani et al. 2017) and s = 1 otherwise.
template <class T>
void token_embedding_forward(In2<param_t<T>> table, In1<int> ids, bool scale_by_sqrt_d, View2<T> y,
                             IdCheck check = IdCheck::Check);

// dtable[v, :] += s * sum_{i : ids[i] = v} dy[i, :].
// Deterministic without atomics: positions are stably sorted by id (a radix sort
// on 8-bit digits) and every (v, feature) sums its rows in increasing position
// order, so the result is bitwise the same on every backend and thread count.
template <class T>
void token_embedding_backward(In1<int> ids, In2<T> dy, bool scale_by_sqrt_d,
                              View2<param_t<T>> dtable);

// Sinusoidal encoding (Vaswani et al. 2017), no parameters; for position p and
// feature pair (2i, 2i + 1):
//   pe(p, 2i) = sin(p / 10000^(2i/d)),  pe(p, 2i + 1) = cos(p / 10000^(2i/d)).
// The backward is the identity on dx and there is nothing else to differentiate.
template <class T>
void sinusoidal_positions_forward(In2<T> x, Index length, Index offset, View2<T> y);

// Learned absolute positions: pe(p) = table[p] for table [max_len, d];
// requires offset + length <= max_len.
template <class T>
void learned_positions_forward(In2<T> x, In2<param_t<T>> table, Index length, Index offset,
                               View2<T> y);

// Per-row forms for cached decoding (one new token for every sequence): row r of
// x [rows, d] is at position positions[r] (positions [rows], on the device), in
// one launch for all rows. `end` is one past the largest position (the caller
// knows it) and is checked against the table; a row whose position lies
// outside [0, end) gets NaN instead of a read outside the table. y may be x.
template <class T>
void sinusoidal_positions_forward_at(In2<T> x, In1<Index> positions, Index end, View2<T> y);
template <class T>
void learned_positions_forward_at(In2<T> x, In2<param_t<T>> table, In1<Index> positions, Index end,
                                  View2<T> y);
template <class T>
void axial_positions_forward_at(In2<T> x, In2<param_t<T>> e1, In2<param_t<T>> e2,
                                In1<Index> positions, Index end, View2<T> y);

// dtable[offset + p, :] += sum over the sequences b of dy[b * length + p, :].
template <class T>
void learned_positions_backward(In2<T> dy, Index length, Index offset, View2<param_t<T>> dtable);

// Axial positions (Reformer): tables e1 [n1, d1] and e2 [n2, d2] with d1 + d2 = d
// encode up to n1 * n2 positions with (n1 d1 + n2 d2) parameters:
//   pe(p) = [e1[p / n2] ; e2[p mod n2]]   (concatenated along the features).
// Requires offset + length <= n1 * n2.
template <class T>
void axial_positions_forward(In2<T> x, In2<param_t<T>> e1, In2<param_t<T>> e2, Index length,
                             Index offset, View2<T> y);

// de1[a, :] += sum of dy[r, :d1] over the rows r whose position p has p / n2 = a;
// de2[c, :] += sum of dy[r, d1:] over the rows r whose position p has p mod n2 = c.
template <class T>
void axial_positions_backward(In2<T> dy, Index length, Index offset, View2<param_t<T>> de1,
                              View2<param_t<T>> de2);

}  // namespace reformer::ops
