// Position-wise feed-forward sub-layer, computed in chunks of positions:
//   G(x) = dropout(dropout(act(LayerNorm(x) W1 + b1)) W2 + b2)
// (or, with layer_norm = false, the same without the LayerNorm: a post-LN
// model such as Transformer-XL's default puts its LayerNorm after the residual)
// with W1 [d_model, d_ff], W2 [d_ff, d_model] (Reformer section 4, "chunking":
// the d_ff-wide hidden activation exists for `chunk` rows at a time).
//
// Ownership: the layer owns its parameters (registered under a dotted prefix
// as norm.gamma, norm.beta (with the LayerNorm), w1, b1, w2, b2). It keeps no activations: backward
// recomputes each chunk's hidden activation from the input, so what a caller
// holds between forward and backward is the input x and the call's RNG key.
// Dropout masks are drawn per element index of the whole [rows, width] tensor
// (offset by call.first_row), so chunking does not change them and backward
// replays them exactly.
//
// Precision (core/precision.hpp): x, y, the chunk buffers and the gradients
// of activations are T; the parameters and their gradients are param_t<T>
// (float32 for bf16), the LayerNorm statistics and beta compute_t<T>.
#pragma once

#include "reformer/core/parameter_set.hpp"
#include "reformer/core/precision.hpp"
#include "reformer/core/random.hpp"
#include "reformer/core/workspace.hpp"
#include "reformer/ops/activations.hpp"

#include <string>

namespace reformer::layers {

struct FeedForwardConfig {
  Index d_model = 256;
  Index d_ff = 512;
  ops::Activation activation = ops::Activation::ReLU;
  double dropout = 0.0;  // on the hidden activation and on the output
  Index chunk = 0;       // rows (positions) per chunk; 0: all rows at once
  double layer_norm_eps = 1e-5;
  // false: no LayerNorm on the input (and no norm.gamma / norm.beta parameters).
  bool layer_norm = true;
  // ConfigError naming the first bad field.
  void validate() const;
};

// Per call: the dropout stream and whether dropout is on.
struct FeedForwardCall {
  RandomKey key{};
  bool training = true;
  // The global index of x's row 0: masks are drawn by global row (a caller
  // whose rows are [batch, length] passes its first batch row times length).
  Index first_row = 0;
};

template <class T>
class FeedForward {
 public:
  FeedForward(const std::string& prefix, const FeedForwardConfig& config,
              ParameterSet<param_t<T>>& params);
  // Xavier-uniform weights, zero biases, unit LayerNorm gain.
  void init(RandomKey key);
  // x [rows, d_model] -> y [rows, d_model]; y = beta * y + G(x).
  void forward(In2<T> x, View2<T> y, const FeedForwardCall& call, Workspace& workspace,
               compute_t<T> beta = compute_t<T>(0)) const;
  // A decoding step's rows (no dropout): y = beta * y + G(x). A few rows take
  // the layer norm, W1, its bias and activation in one launch and W2 with its
  // bias and the residual in another (ops/rows_linear.hpp,
  // REFORMER_STEP_PRODUCTS); else forward. y may not alias x.
  void step(In2<T> x, View2<T> y, Workspace& workspace, compute_t<T> beta) const;
  // Recomputes G chunk by chunk and accumulates the parameter gradients;
  // dx = beta * dx + dG/dx^T dy. When `recomputed` is not empty it receives
  // G(x) (the reversible backward needs it to rebuild its input). dx and
  // recomputed may not alias x or dy.
  void backward(In2<T> x, In2<T> dy, View2<T> dx, const FeedForwardCall& call, Workspace& workspace,
                compute_t<T> beta = compute_t<T>(0), View2<T> recomputed = View2<T>()) const;
  const FeedForwardConfig& config() const { return config_; }

 private:
  Index chunk_rows(Index rows) const;
  // The chunk starting at row r0: normed = LN(xc), pre = normed W1 + b1,
  // hidden = dropout(act(pre)) (pre may be hidden). Returns the rows W1 read:
  // normed, or xc itself without the LayerNorm.
  In2<T> hidden_chunk(In2<T> xc, Index r0, const FeedForwardCall& call, double rate,
                      View2<T> normed, View1<compute_t<T>> mean, View1<compute_t<T>> rstd,
                      View2<T> pre, View2<T> hidden) const;
  FeedForwardConfig config_;
  Parameter<param_t<T>>* gamma_ = nullptr;
  Parameter<param_t<T>>* beta_ = nullptr;
  Parameter<param_t<T>>* w1_ = nullptr;
  Parameter<param_t<T>>* b1_ = nullptr;
  Parameter<param_t<T>>* w2_ = nullptr;
  Parameter<param_t<T>>* b2_ = nullptr;
};

}  // namespace reformer::layers
