// The [model] keys every family reads the same way (private to the library):
// a family's model config takes its widths, regularisation and chunks from
// the run's [model] section with this one helper.
#pragma once

#include "reformer/models/reformer_config.hpp"

namespace reformer::config {

template <class ModelConfig>
void copy_shared_model_keys(const models::ReformerConfig& m, ModelConfig& out) {
  out.d_model = m.d_model;
  out.d_ff = m.d_ff;
  out.heads = m.heads;
  out.d_head = m.d_head;
  out.dropout = m.dropout;
  out.attention_dropout = m.attention_dropout;
  out.layer_norm_eps = m.layer_norm_eps;
  out.label_smoothing = m.label_smoothing;
  out.ff_chunk = m.ff_chunk;
  out.loss_chunk = m.loss_chunk;
}

}  // namespace reformer::config
