// The rules of config values that several configs share, one helper each, so
// that every config names the same rule in the same words (ConfigError naming
// the config, the key, the value and the rule).
#pragma once
#include "reformer/core/error.hpp"
#include "reformer/core/types.hpp"

namespace reformer {

// A probability such as a dropout rate or label smoothing: in [0, 1).
// `alternative` ends the message with another value the key accepts.
inline void require_rate(const char* op, const char* key, double value,
                         const char* alternative = "") {
  require<ConfigError>(value >= 0.0 && value < 1.0, op, ": ", key, " is ", value,
                       " but must be in [0, 1)", alternative);
}

// A model's feed-forward chunk (model.ff_chunk): rows >= 0 (0: all positions at
// once), or kAutoChunk ("auto"), which a run resolves before it builds the
// model (train/chunk_choice.hpp).
inline void require_ff_chunk(const char* op, Index rows) {
  require<ConfigError>(rows >= 0 || rows == kAutoChunk, op, ": model.ff_chunk is ", rows,
                       " but must be >= 0 (0: all positions at once) or \"auto\"");
}

// A model's loss chunk (model.loss_chunk): positions > 0 per chunk of the
// vocabulary head's loss, or kAutoChunk ("auto"), resolved by a run like
// model.ff_chunk.
inline void require_loss_chunk(const char* op, Index rows) {
  require<ConfigError>(rows > 0 || rows == kAutoChunk, op, ": model.loss_chunk is ", rows,
                       " but must be positive or \"auto\"");
}

}  // namespace reformer
