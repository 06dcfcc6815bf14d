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

// Dropout on the attention probabilities, replayed from the counter RNG.
struct AttentionDropout {
  double rate = 0.0;
  RandomKey key{};
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
