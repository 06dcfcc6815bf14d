// Mask values and options shared by the attention variants.
//
// Masked scores are replaced by a large negative constant rather than -inf, as
// in the Reformer paper's code: a query whose every target is masked then
// attends uniformly instead of producing NaN. Attention to the query's own
// position in shared-QK attention is replaced by a smaller constant, so that a
// token attends to itself only when nothing else is allowed.
#pragma once

#include "reformer/core/fast_math.hpp"
#include "reformer/core/random.hpp"
#include "reformer/core/types.hpp"
#include "reformer/ops/dropout.hpp"

namespace reformer::attention {

// Per-dtype constants; half precision cannot hold -1e9.
template <class T>
struct MaskValues {
  static constexpr double masked = -1e9;  // causal or padding
  static constexpr double self = -1e5;    // own position in shared-QK attention
};

// exp(x) for softmax weights (x <= 0 after subtracting the row maximum or the
// logsumexp), without a library call so that the loops over a row vectorise.
template <class T>
KOKKOS_INLINE_FUNCTION T softmax_weight(T x) {
  return fast_exp(x);
}

// Options every variant understands.
struct MaskOptions {
  bool causal = false;  // query i may not attend to key j > i (original positions)
  // Key validity [batch, length_k]: 1 = token, 0 = padding (masked as a key).
  // Empty: no padding.
  Kokkos::View<const int**, Layout, MemSpace> key_valid;
};

// Dropout on the attention probabilities, replayed from the counter RNG. In a
// grid of [rows, cols] scores per head, score (i, j) of head h of batch row b
// is drawn at ((first_row + b) * heads + h) * rows + i) * cols + j: by the
// global batch row (ops::dropout_offset), so that a share of the batch keeps
// the scores the whole batch keeps.
struct AttentionDropout {
  double rate = 0.0;
  RandomKey key{};
  Index first_row = 0;  // the global index of the call's batch row 0

  // Whether score (bh = b * heads + h, i, j) is kept.
  KOKKOS_INLINE_FUNCTION bool keeps(Index bh, Index heads, Index i, Index j, Index rows,
                                    Index cols) const {
    const auto first = std::uint64_t(ops::dropout_offset(first_row, heads * rows * cols));
    return ops::dropout_keeps(key, first + (std::uint64_t(bh) * rows + i) * cols + j, rate);
  }
  // 1 / (1 - rate) where the score is kept, 0 where it is dropped, 1 without dropout.
  template <class C>
  KOKKOS_INLINE_FUNCTION C factor(Index bh, Index heads, Index i, Index j, Index rows,
                                  Index cols) const {
    if (rate == 0.0) return C(1);
    return keeps(bh, heads, i, j, rows, cols) ? C(1.0 / (1.0 - rate)) : C(0);
  }
};

// What one call of an attention kernel takes besides its tensors and its
// config: the masks and the dropout stream. Configs hold hyper-parameters only
// (they can be written to a file); everything per call lives here.
struct AttentionCall {
  MaskOptions masks{};
  AttentionDropout dropout{};
};

// The largest head size the fused kernels support.
constexpr Index kMaxHeadDim = 128;

}  // namespace reformer::attention
