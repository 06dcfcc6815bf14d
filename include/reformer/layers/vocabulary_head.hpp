// The vocabulary head: the output projection of hidden rows onto a vocabulary
// (or a set of classes) and the loss against target ids,
//   logits = h W + b       W [d_in, vocab], b [vocab]; tied: h E^T + b with a
//                          token-embedding table E [vocab, d_in] as the weight
//   loss   = the label-smoothed cross-entropy of the logits (ops/cross_entropy.hpp),
//            in chunks of loss_chunk rows, so that the [rows, vocab] logits
//            never exist at once; targets equal to the ignore id do not count.
// Every model with a vocabulary head computes its loss here; what comes
// before the head (a final LayerNorm, a fold of two streams, dropout) stays
// the model's.
//
// Ownership: the head owns W (registered as <prefix>.w unless tied) and b
// (<prefix>.b); a tied head reads the embedding's table and accumulates into
// its gradient. It keeps no activations: the loss and its gradient are one
// chunked pass (forward_backward) over the caller's rows, which recomputes
// nothing and stores no logits.
//
// Precision (core/precision.hpp): h and dh are T, the parameters and their
// gradients param_t<T>; the loss's sums are compute_t<T>.
#pragma once

#include "reformer/core/parameter_set.hpp"
#include "reformer/core/precision.hpp"
#include "reformer/core/random.hpp"
#include "reformer/ops/cross_entropy.hpp"
#include "reformer/ops/rows_linear.hpp"

#include <string>

namespace reformer::layers {

struct VocabularyHeadConfig {
  Index d_in = 0;                // width of the rows the head reads
  Index vocab = 0;               // classes of the logits
  double label_smoothing = 0.0;  // eps of the smoothed targets, in [0, 1)
  Index loss_chunk = 1024;       // rows of logits materialised at a time; 0: all rows
};

template <class T>
class VocabularyHead {
 public:
  // Registers <prefix>.w [d_in, vocab] (unless `tied` is given: that table,
  // [vocab, d_in], is the projection) and <prefix>.b [vocab].
  VocabularyHead(const std::string& prefix, const VocabularyHeadConfig& config,
                 ParameterSet<param_t<T>>& params, Parameter<param_t<T>>* tied = nullptr);
  // W Xavier-uniform (not a tied table), b 0.
  void init(RandomKey key);
  // logits [rows, vocab] = hidden [rows, d_in] W + b.
  void logits(In2<T> hidden, View2<T> logits) const;
  // A decoding step's logits = LN(hidden) W + b in one launch
  // (ops/rows_linear.hpp), for a head of its own weight and a few rows: true
  // when it ran, false (nothing done) when the caller must take the layer norm
  // and logits() (a tied head, the vendor step products or too many rows).
  bool step_logits(In2<T> hidden, const ops::RowNorm<T>& norm, View2<T> logits) const;
  // Loss (mean over the rows whose target is not ignore_id; -1: every row
  // counts unless its target is -1), token count and correct predictions.
  // The chunk's logits come from `workspace` when given (the caller's, idle
  // while the loss runs).
  ops::CrossEntropyResult forward(In2<T> hidden, In1<int> targets, int ignore_id,
                                  Workspace* workspace = nullptr) const;
  // The same, and the gradients of loss_scale x the loss: dhidden
  // overwritten, the weight's and the bias's gradients accumulated.
  ops::CrossEntropyResult forward_backward(In2<T> hidden, In1<int> targets, int ignore_id,
                                           double loss_scale, View2<T> dhidden,
                                           Workspace* workspace = nullptr) const;
  bool tied() const { return tied_; }
  const VocabularyHeadConfig& config() const { return config_; }

 private:
  ops::CrossEntropyOptions options(Index rows, int ignore_id, double loss_scale,
                                   Workspace* workspace) const;

  VocabularyHeadConfig config_;
  bool tied_ = false;
  Parameter<param_t<T>>* weight_ = nullptr;  // [d_in, vocab], or the tied table [vocab, d_in]
  Parameter<param_t<T>>* bias_ = nullptr;
};

}  // namespace reformer::layers
