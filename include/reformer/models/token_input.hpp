// The token input of the Reformer LM and of the encoder models built like it:
//   e = dropout(Embedding(ids) + Positions)          [batch * length, d_model]
// with the position encodings of ReformerConfig::positions (none, sinusoidal,
// learned or axial). The parameters are registered as "embed.table",
// "pos.table" and "pos.axial_1" / "pos.axial_2", in that order.
#pragma once

#include "reformer/core/error.hpp"
#include "reformer/core/initializers.hpp"
#include "reformer/core/matrix_policy.hpp"
#include "reformer/core/parameter_set.hpp"
#include "reformer/core/shape.hpp"
#include "reformer/layers/blocks.hpp"
#include "reformer/models/model_call.hpp"
#include "reformer/models/reformer_config.hpp"
#include "reformer/ops/dropout.hpp"
#include "reformer/ops/embedding.hpp"

#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace reformer::models {

// ids_out = ids padded with 0 to its length; valid_out = 1 where a position
// is inside ids and (without a mask, or where) the mask is nonzero.
inline void pad_ids(IdMatrix ids, Kokkos::View<const int**, Layout, MemSpace> mask,
                    View2<int> ids_out, View2<int> valid_out) {
  const Index given = ids.extent(1);
  const bool masked = mask.extent(0) > 0;
  Kokkos::parallel_for(
      "reformer_pad_ids", matrix_policy(Index(ids_out.extent(0)), Index(ids_out.extent(1))),
      KOKKOS_LAMBDA(Index b, Index t) {
        const bool inside = t < given;
        ids_out(b, t) = inside ? ids(b, t) : 0;
        valid_out(b, t) = inside && (!masked || mask(b, t) != 0) ? 1 : 0;
      });
}

// ShapeError or ConfigError naming the value for ids [batch, length] the
// stack cannot run (empty, longer than the positions allow, ids outside the
// vocabulary) or a mask `valid` of another shape.
inline void check_ids(const char* op, const ReformerConfig& config, IdMatrix ids,
                      const ModelCall& call) {
  require<ShapeError>(ids.extent(0) > 0 && ids.extent(1) > 0, op, ": ids has shape ",
                      shape_string(ids), " but needs at least one sequence of one token");
  config.padded_length(Index(ids.extent(1)));
  ops::require_ids_in_range(
      op, "ids", Kokkos::View<const int*, Layout, MemSpace>(ids.data(), ids.size()), config.vocab);
  if (call.valid.extent(0) > 0)
    require<ShapeError>(
        call.valid.extent(0) == ids.extent(0) && call.valid.extent(1) == ids.extent(1), op,
        ": the mask `valid` has shape ", shape_string(call.valid),
        " but must have the shape of ids, ", shape_string(ids));
}

// The LM's stack of blocks, layer i registered as "layers.<i>" with attention
// config.attention_config(i) and the feed-forward of the config; appends the
// index of each layer's first parameter to `first_params`.
template <class T>
std::vector<std::unique_ptr<layers::ReversibleBlock<T>>> block_stack(
    const ReformerConfig& config, ParameterSet<param_t<T>>& params,
    std::vector<std::size_t>& first_params) {
  std::vector<std::unique_ptr<layers::ReversibleBlock<T>>> blocks;
  for (Index i = 0; i < config.layers; ++i) {
    first_params.push_back(params.size());
    layers::BlockConfig block;
    block.attention = config.attention_config(i);
    block.feed_forward = {config.d_model, config.d_ff,     config.ff_activation,
                          config.dropout, config.ff_chunk, config.layer_norm_eps};
    block.layer_norm_eps = config.layer_norm_eps;
    blocks.push_back(
        std::make_unique<layers::ReversibleBlock<T>>("layers." + std::to_string(i), block, params));
  }
  return blocks;
}

// {first, end} of each layer's parameters in the set's flat buffers, from the
// indices block_stack appended and the index of the parameter registered
// right after the last layer.
template <class P>
std::vector<std::pair<Index, Index>> stack_parameter_ranges(const ParameterSet<P>& params,
                                                            std::vector<std::size_t> first_params,
                                                            std::size_t after_last) {
  first_params.push_back(after_last);
  std::vector<std::pair<Index, Index>> ranges;
  for (std::size_t i = 0; i + 1 < first_params.size(); ++i)
    ranges.push_back({(params.begin() + first_params[i])->offset,
                      (params.begin() + first_params[i + 1])->offset});
  return ranges;
}

template <class T>
class TokenInput {
 public:
  TokenInput(const ReformerConfig& config, ParameterSet<param_t<T>>& params) : config_(config) {
    const Index d = config.d_model;
    embedding = &params.add("embed.table", {config.vocab, d});
    switch (config.positions) {
      case PositionKind::Learned:
        positions_ = &params.add("pos.table", {config.max_length, d});
        break;
      case PositionKind::Axial: {
        const auto shape = config.resolved_axial_shape();
        const auto dims = config.resolved_axial_dims();
        axial1_ = &params.add("pos.axial_1", {shape[0], dims[0]});
        axial2_ = &params.add("pos.axial_2", {shape[1], dims[1]});
        break;
      }
      case PositionKind::Sinusoidal:
      case PositionKind::None:
        break;
    }
  }
  // Embedding N(0, 1) from `embedding_key`, the position tables N(0, 1) from
  // position_key(1), (2) and (3).
  template <class PositionKey>
  void init(RandomKey embedding_key, const PositionKey& position_key) {
    init_normal(*embedding, 1.0, embedding_key);
    if (positions_) init_normal(*positions_, 1.0, position_key(1));
    if (axial1_) init_normal(*axial1_, 1.0, position_key(2));
    if (axial2_) init_normal(*axial2_, 1.0, position_key(3));
  }
  // e [batch, length, d_model] from ids [batch, length]; dropout (training)
  // keyed by `dropout_key` and the call's first row.
  void forward(IdMatrix ids, const ModelCall& call, RandomKey dropout_key, View3<T> x) const {
    const Index length = ids.extent(1);
    auto e = as_matrix(x);
    ops::token_embedding_forward<T>(embedding->matrix(), flat(ids), false, e);
    switch (config_.positions) {
      case PositionKind::Learned:
        ops::learned_positions_forward<T>(e, positions_->matrix(), length, 0, e);
        break;
      case PositionKind::Axial:
        ops::axial_positions_forward<T>(e, axial1_->matrix(), axial2_->matrix(), length, 0, e);
        break;
      case PositionKind::Sinusoidal:
        ops::sinusoidal_positions_forward<T>(e, length, 0, e);
        break;
      case PositionKind::None:
        break;
    }
    if (call.training && config_.dropout > 0)
      ops::dropout_forward<T>(as_vector(e), config_.dropout, dropout_key,
                              ops::dropout_offset(call.first_row, row_elements(x)), as_vector(e));
  }
  // The parameters' gradients from de [batch, length, d_model] (clobbered by
  // the dropout's backward).
  void backward(IdMatrix ids, const ModelCall& call, RandomKey dropout_key, View3<T> dx) const {
    const Index length = ids.extent(1);
    auto de = as_matrix(dx);
    if (call.training && config_.dropout > 0)
      ops::dropout_backward<T>(as_vector(de), config_.dropout, dropout_key,
                               ops::dropout_offset(call.first_row, row_elements(dx)),
                               as_vector(de));
    if (positions_) ops::learned_positions_backward<T>(de, length, 0, positions_->grad_matrix());
    if (axial1_)
      ops::axial_positions_backward<T>(de, length, 0, axial1_->grad_matrix(),
                                       axial2_->grad_matrix());
    ops::token_embedding_backward<T>(flat(ids), de, false, embedding->grad_matrix());
  }
  Parameter<param_t<T>>* embedding = nullptr;  // also the tied output projection
  const Parameter<param_t<T>>* learned() const { return positions_; }
  const Parameter<param_t<T>>* axial1() const { return axial1_; }
  const Parameter<param_t<T>>* axial2() const { return axial2_; }

 private:
  static Kokkos::View<const int*, Layout, MemSpace> flat(IdMatrix ids) {
    return Kokkos::View<const int*, Layout, MemSpace>(ids.data(), ids.size());
  }
  ReformerConfig config_;
  Parameter<param_t<T>>* positions_ = nullptr;  // learned
  Parameter<param_t<T>>* axial1_ = nullptr;
  Parameter<param_t<T>>* axial2_ = nullptr;
};

}  // namespace reformer::models
