// The sizes every model family has: widths, heads, regularisation, the
// LayerNorm epsilon and the chunk lengths. Each family's config derives from
// ModelSizes and sets its own defaults in its constructor; the run config's
// [model] keys of these names fill them for every family with one assignment:
//
//   models::TransformerXLConfig x;
//   x.sizes() = config.model.sizes();
//
// A family validates the fields in its own config's validate() (with its own
// key names in the messages); this struct holds hyper-parameters only.
#pragma once

#include "reformer/core/types.hpp"

namespace reformer::models {

struct ModelSizes {
  Index d_model = 256;             // width of the residual stream
  Index d_ff = 512;                // width of the feed-forward hidden layer
  Index heads = 4;                 // attention heads per layer
  Index d_head = 64;               // width of one head's queries, keys and values
  double dropout = 0.0;            // on activations (each family says which)
  double attention_dropout = 0.0;  // on the attention probabilities
  double layer_norm_eps = 1e-5;    // epsilon of every LayerNorm in the model
  double label_smoothing = 0.0;    // label smoothing eps of the loss, in [0, 1)
  Index ff_chunk = 0;              // rows per feed-forward chunk; 0: all at once
  Index loss_chunk = 1024;         // rows of logits materialised at a time
  // Either may be kAutoChunk ("auto") in a run's config, which resolves it
  // before it builds the model (train/chunk_choice.hpp).

  // Throws ConfigError naming `op`, the key (model.d_model, ...), the value and
  // the rule for the first of these sizes, rates and chunks that is out of
  // range; every family's validate() calls it, so all say it in the same words.
  void validate_sizes(const char* op) const;

  // This struct inside a family's config (which derives from it).
  ModelSizes& sizes() { return *this; }
  const ModelSizes& sizes() const { return *this; }
};

}  // namespace reformer::models
