// What every model's forward, backward and evaluation take per call, whatever
// the family (the Reformer LM, the encoder-decoder, Transformer-XL): the key of
// the step's randomness, whether dropout is on, the loss scale, the mask of
// real tokens and where its rows lie in the step's batch.
#pragma once

#include "reformer/core/random.hpp"
#include "reformer/core/types.hpp"

namespace reformer::models {

using IdMatrix = Kokkos::View<const int**, Layout, MemSpace>;  // [batch, length]

// Per call: the stream of this step's randomness, whether dropout is on and
// which tokens are real.
struct ModelCall {
  RandomKey key{};
  bool training = true;
  // forward_backward's gradients are those of loss_scale x the mean loss (the
  // trainer weights accumulated micro-batches by their share of the tokens).
  double loss_scale = 1.0;
  // Per-token mask [batch, length] of the ids (nonzero: a token, 0: padding),
  // or empty: every token is real. Padding is masked as a key in every layer
  // (LSH sorts it behind the real items, so that it takes no slot from them),
  // and its targets do not count in the loss.
  Kokkos::View<const int**, Layout, MemSpace> valid{};
  // The global index of this call's batch row 0: data parallelism gives each
  // process rows [first_row, first_row + batch) of the step's batch. Masks
  // drawn per row (dropout) add it, so a process draws for its rows exactly
  // what one process with the whole batch draws.
  Index first_row = 0;
};

}  // namespace reformer::models
