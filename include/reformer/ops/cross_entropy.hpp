// Cross-entropy of the output projection with label smoothing, computed in chunks
// of rows so that the full [n, vocab] logits never exist at once.
//
// For hidden states h [n, d], output weight W [d, V], bias b [V] (or empty) and
// targets t [n], row i has logits z = h_i W + b (z = h_i E^T + b when the weight
// is a tied embedding table E [V, d]: see weight_is_embedding), p = softmax(z)
// and the smoothed target distribution
//   q_c = 1 - eps          for c = t_i,
//   q_c = 0                for c = pad_id,
//   q_c = eps / (V - 2)    for every other class (pad_id >= 0), or
//   q_c = eps / (V - 1)    for every other class (pad_id = -1: no pad class),
// so the smoothing mass goes to the non-target, non-pad classes (the trax / tensor2tensor
// convention). Rows with t_i = pad_id are ignored. With N the number of other rows,
//   loss = (1 / N) sum_{i : t_i != pad_id} -sum_c q_c log p_c.
// This is the cross-entropy, not the KL divergence: with eps > 0 it stays above
// the entropy of q instead of reaching 0.
//
// Precision (core/precision.hpp): h and dh are activations (T); weight, bias
// and their gradients are param_t<T>; the logits chunk, the softmax, the
// log-sum-exp and every sum are compute_t<T> (float32 for bf16 h), so the
// loss of bf16 h is the float32 loss of the same values.
#pragma once

#include "reformer/core/precision.hpp"
#include "reformer/core/types.hpp"
#include "reformer/core/workspace.hpp"

namespace reformer::ops {

struct CrossEntropyOptions {
  // Target class whose rows are ignored; -1: no pad class (rows whose target
  // is -1 are then the ignored ones).
  int pad_id = -1;
  double smoothing = 0.0;   // label smoothing eps, in [0, 1)
  Index chunk_rows = 1024;  // rows whose logits are materialised at a time
  // The weight is a token-embedding table E [V, d] shared as the output
  // projection (tied weights), used without a transposed copy: z = h_i E^T + b.
  // dweight is then [V, d] and accumulates, so the embedding's own backward
  // can add into the same gradient.
  bool weight_is_embedding = false;
  // The gradients are those of gradient_scale x the loss (a micro-batch's share
  // of a step's tokens under gradient accumulation); the loss is not scaled.
  double gradient_scale = 1.0;
  // Where the [chunk_rows, V] logits live: a frame of this workspace (a
  // model's, idle while its loss runs), or an allocation of their own.
  Workspace* workspace = nullptr;
};

struct CrossEntropyResult {
  double loss = 0.0;  // mean over the non-pad rows; 0 if there are none
  // The targets' mean negative log-likelihood -(1 / N) sum_i log p_{t_i}: what
  // an evaluation reports as bits per token. Equal to loss without smoothing.
  double nll = 0.0;
  Index tokens = 0;   // number of non-pad rows N
  Index correct = 0;  // non-pad rows whose argmax logit (lowest index on ties) is the target
};

// H(q) = -sum_c q_c log q_c of the smoothed target distribution above, for a
// vocabulary of V classes: the amount by which the loss exceeds the KL divergence
// KL(q || p) (0 without smoothing). Models that report the KL subtract it; the
// gradients are the same.
double smoothed_target_entropy(double smoothing, Index vocab, int pad_id);

// Loss, token count and correct predictions. Temporaries: one [chunk_rows, V]
// logits buffer (from options.workspace when given) and per-row statistics.
template <class T>
CrossEntropyResult cross_entropy_forward(In2<T> h, In2<param_t<T>> weight, In1<param_t<T>> bias,
                                         In1<int> targets, const CrossEntropyOptions& options);

// The same result plus the gradients of the loss, chunk by chunk:
//   dz = gradient_scale (p - q) / N for non-pad rows and 0 for pad rows,
//   dh = dz W^T (overwritten), dW += h^T dz, db += sum_rows dz (accumulated);
//   with weight_is_embedding: dh = dz E, dE += dz^T h ([V, d], accumulated).
// dweight has the shape of weight; dbias the extent of bias (empty when there
// is no bias). For bf16 h, dh is the float32 dz W^T rounded once and the
// parameter gradients accumulate in float32.
template <class T>
CrossEntropyResult cross_entropy_forward_backward(In2<T> h, In2<param_t<T>> weight,
                                                  In1<param_t<T>> bias, In1<int> targets,
                                                  const CrossEntropyOptions& options, View2<T> dh,
                                                  View2<param_t<T>> dweight,
                                                  View1<param_t<T>> dbias);

}  // namespace reformer::ops
