// Pieces both halves of the encoder-decoder share (transformer.cpp: training
// and evaluation; transformer_decode.cpp: cached decoding). Private to the library.
#pragma once

#include "reformer/models/model_call.hpp"

namespace reformer::models::internal {

// The ids of a [batch, length] matrix as one vector.
inline Kokkos::View<const int*, Layout, MemSpace> flat(IdMatrix ids) {
  return Kokkos::View<const int*, Layout, MemSpace>(ids.data(), ids.size());
}

}  // namespace reformer::models::internal
