// The batched shape of the chunked attention kernels for a scope
// (reformer/attention/chunked_scratch.hpp): which products the chunked kernels
// use, and the slice budget of the batched shape; and where exact attention
// computes its products.
#pragma once

#include "reformer/attention/chunked_scratch.hpp"
#include "reformer/attention/exact.hpp"
#include "support/kernel_settings.hpp"

#include <cstddef>

namespace reformer::testing {

using ScopedChunkProducts = ScopedSetting<attention::ChunkProducts, attention::chunk_products,
                                          attention::set_chunk_products>;
using ScopedChunkSlice =
    ScopedSetting<std::size_t, attention::chunk_slice_budget, attention::set_chunk_slice_budget>;
// Where exact attention computes its products (reformer/attention/exact.hpp).
using ScopedExactProducts = ScopedSetting<attention::ExactProducts, attention::exact_products,
                                          attention::set_exact_products>;

}  // namespace reformer::testing
