#include "reformer/layers/feed_forward.hpp"

#include "config/value_rules.hpp"
#include "reformer/core/error.hpp"
#include "reformer/core/initializers.hpp"
#include "reformer/core/shape.hpp"
#include "reformer/ops/dropout.hpp"
#include "reformer/ops/elementwise.hpp"
#include "reformer/ops/layer_norm.hpp"
#include "reformer/ops/linear.hpp"
#include "reformer/ops/rows_linear.hpp"

namespace reformer::layers {
namespace {

enum Stream : std::uint64_t { kHiddenDropout = 1, kOutputDropout = 2 };

RandomKey sub_key(RandomKey key, Stream stream) {
  return {key.seed, stream_id(key.stream, stream)};
}

// Rows [begin, begin + count) of a row-major matrix, without a copy.
template <class T>
Kokkos::View<T**, Layout, MemSpace> rows_of(const Kokkos::View<T**, Layout, MemSpace>& m,
                                            Index begin, Index count) {
  return Kokkos::View<T**, Layout, MemSpace>(m.data() + begin * m.extent(1), count, m.extent(1));
}

}  // namespace

void FeedForwardConfig::validate() const {
  const char* op = "FeedForwardConfig";
  require<ConfigError>(d_model > 0 && d_ff > 0, op, ": d_model and d_ff must be positive, got ",
                       d_model, " and ", d_ff);
  require_rate(op, "dropout", dropout);
  require<ConfigError>(chunk >= 0, op, ": chunk is ", chunk,
                       " but must be >= 0 (0 processes all rows at once)",
                       chunk == kAutoChunk ? unresolved_auto_chunk() : "");
  require<ConfigError>(layer_norm_eps > 0.0, op, ": layer_norm_eps is ", layer_norm_eps,
                       " but must be positive");
}

template <class T>
FeedForward<T>::FeedForward(const std::string& prefix, const FeedForwardConfig& config,
                            ParameterSet<param_t<T>>& params)
    : config_(config) {
  config_.validate();
  if (config.layer_norm) {
    gamma_ = &params.add(prefix + ".norm.gamma", {config.d_model});
    beta_ = &params.add(prefix + ".norm.beta", {config.d_model});
  }
  w1_ = &params.add(prefix + ".w1", {config.d_model, config.d_ff});
  b1_ = &params.add(prefix + ".b1", {config.d_ff});
  w2_ = &params.add(prefix + ".w2", {config.d_ff, config.d_model});
  b2_ = &params.add(prefix + ".b2", {config.d_model});
}

template <class T>
void FeedForward<T>::init(RandomKey key) {
  if (gamma_) {
    init_constant(*gamma_, 1.0);
    init_constant(*beta_, 0.0);
  }
  init_xavier_uniform(*w1_, {key.seed, stream_id(key.stream, 1)});
  init_constant(*b1_, 0.0);
  init_xavier_uniform(*w2_, {key.seed, stream_id(key.stream, 2)});
  init_constant(*b2_, 0.0);
}

template <class T>
Index FeedForward<T>::chunk_rows(Index rows) const {
  return config_.chunk > 0 && config_.chunk < rows ? config_.chunk : rows;
}

template <class T>
In2<T> FeedForward<T>::hidden_chunk(In2<T> xc, Index r0, const FeedForwardCall& call, double rate,
                                    View2<T> normed, View1<compute_t<T>> mean,
                                    View1<compute_t<T>> rstd, View2<T> pre, View2<T> hidden) const {
  In2<T> input = xc;
  if (gamma_) {
    ops::layer_norm_forward<T>(xc, gamma_->value, beta_->value,
                               compute_t<T>(config_.layer_norm_eps), normed, mean, rstd);
    input = normed;
  }
  ops::linear_activation_forward<T>(input, w1_->matrix(), b1_->value, config_.activation, pre,
                                    hidden);
  if (rate > 0)
    ops::dropout_forward<T>(as_vector(hidden), rate, sub_key(call.key, kHiddenDropout),
                            ops::dropout_offset(call.first_row + r0, config_.d_ff),
                            as_vector(hidden));
  return input;
}

template <class T>
void FeedForward<T>::step(In2<T> x, View2<T> y, Workspace& workspace, compute_t<T> beta) const {
  const Index rows = x.extent(0);
  if constexpr (!is_reduced_precision<T>) {
    if (ops::fused_step_rows(rows)) {
      require_extent("FeedForward::step", "x", x, 1, config_.d_model);
      require_same_shape("FeedForward::step", "x", x, "y", y);
      Workspace::Frame frame(workspace);
      auto hidden = frame.take<View2<T>>(rows, config_.d_ff);
      ops::RowNorm<T> norm;
      if (gamma_) norm = {gamma_->value, beta_->value, compute_t<T>(config_.layer_norm_eps)};
      // hidden = f(LN(x) W1 + b1); y = (hidden W2 + b2) + beta y.
      ops::rows_linear<T>(x, norm, {{w1_->matrix(), b1_->value, hidden}}, config_.activation, 0);
      ops::rows_linear<T>(hidden, {}, {{w2_->matrix(), b2_->value, y}}, std::nullopt, beta);
      return;
    }
  }
  forward(x, y, {{}, false}, workspace, beta);
}

template <class T>
void FeedForward<T>::forward(In2<T> x, View2<T> y, const FeedForwardCall& call,
                             Workspace& workspace, compute_t<T> beta) const {
  const char* op = "FeedForward::forward";
  require_extent(op, "x", x, 1, config_.d_model);
  require_same_shape(op, "x", x, "y", y);
  const Index rows = x.extent(0), d = config_.d_model, f = config_.d_ff;
  const Index step = chunk_rows(rows);
  const double rate = call.training ? config_.dropout : 0.0;
  Workspace::Frame frame(workspace);
  auto normed = frame.take<View2<T>>(step, d);
  auto hidden = frame.take<View2<T>>(step, f);
  auto out = frame.take<View2<T>>(step, d);
  auto mean = frame.take<View1<compute_t<T>>>(step);
  auto rstd = frame.take<View1<compute_t<T>>>(step);
  for (Index r0 = 0; r0 < rows; r0 += step) {
    const Index n = std::min(step, rows - r0);
    auto xc = rows_of(x, r0, n);
    auto nc = rows_of(normed, 0, n), hc = rows_of(hidden, 0, n), oc = rows_of(out, 0, n);
    auto mc = View1<compute_t<T>>(mean.data(), n), sc = View1<compute_t<T>>(rstd.data(), n);
    hidden_chunk(xc, r0, call, rate, nc, mc, sc, hc, hc);
    if (rate == 0) {
      // y = (h W2 + b2) + beta y in one kernel after the product.
      ops::linear_residual_forward<T>(hc, w2_->matrix(), b2_->value, beta, oc, rows_of(y, r0, n));
      continue;
    }
    ops::linear_forward<T>(hc, w2_->matrix(), b2_->value, oc);
    ops::dropout_forward<T>(as_vector(oc), rate, sub_key(call.key, kOutputDropout),
                            ops::dropout_offset(call.first_row + r0, d), as_vector(oc));
    ops::axpby<T>(compute_t<T>(1), as_vector(oc), beta, as_vector(rows_of(y, r0, n)));
  }
}

template <class T>
void FeedForward<T>::backward(In2<T> x, In2<T> dy, View2<T> dx, const FeedForwardCall& call,
                              Workspace& workspace, compute_t<T> beta, View2<T> recomputed) const {
  const char* op = "FeedForward::backward";
  require_extent(op, "x", x, 1, config_.d_model);
  require_same_shape(op, "x", x, "dy", dy);
  require_same_shape(op, "x", x, "dx", dx);
  if (recomputed.data()) require_same_shape(op, "x", x, "recomputed", recomputed);
  const Index rows = x.extent(0), d = config_.d_model, f = config_.d_ff;
  const Index step = chunk_rows(rows);
  const double rate = call.training ? config_.dropout : 0.0;
  Workspace::Frame frame(workspace);
  auto normed = frame.take<View2<T>>(step, d);
  auto pre = frame.take<View2<T>>(step, f);     // LayerNorm(x) W1 + b1
  auto hidden = frame.take<View2<T>>(step, f);  // after activation and dropout
  auto dhidden = frame.take<View2<T>>(step, f);
  auto dout = frame.take<View2<T>>(step, d);  // dy through the output dropout
  auto dnormed = frame.take<View2<T>>(step, d);
  auto dxc_tmp = frame.take<View2<T>>(step, d);
  auto mean = frame.take<View1<compute_t<T>>>(step);
  auto rstd = frame.take<View1<compute_t<T>>>(step);
  for (Index r0 = 0; r0 < rows; r0 += step) {
    const Index n = std::min(step, rows - r0);
    auto xc = rows_of(x, r0, n);
    auto dyc = rows_of(dy, r0, n);
    auto nc = rows_of(normed, 0, n), pc = rows_of(pre, 0, n), hc = rows_of(hidden, 0, n);
    auto dhc = rows_of(dhidden, 0, n), doc = rows_of(dout, 0, n), dnc = rows_of(dnormed, 0, n);
    auto mc = View1<compute_t<T>>(mean.data(), n), sc = View1<compute_t<T>>(rstd.data(), n);
    // Recompute the chunk's hidden activation.
    const auto input = hidden_chunk(xc, r0, call, rate, nc, mc, sc, pc, hc);
    if (recomputed.data()) {
      auto rc = rows_of(recomputed, r0, n);
      ops::linear_forward<T>(hc, w2_->matrix(), b2_->value, rc);
      if (rate > 0)
        ops::dropout_forward<T>(as_vector(rc), rate, sub_key(call.key, kOutputDropout),
                                ops::dropout_offset(call.first_row + r0, d), as_vector(rc));
    }
    // Output dropout and the second projection.
    Kokkos::View<const T**, Layout, MemSpace> g = dyc;
    if (rate > 0) {
      ops::dropout_backward<T>(as_vector(dyc), rate, sub_key(call.key, kOutputDropout),
                               ops::dropout_offset(call.first_row + r0, d), as_vector(doc));
      g = doc;
    }
    ops::linear_backward<T>(hc, w2_->matrix(), g, dhc, w2_->grad_matrix(), b2_->grad);
    // Hidden dropout, activation, first projection.
    if (rate > 0)
      ops::dropout_backward<T>(as_vector(dhc), rate, sub_key(call.key, kHiddenDropout),
                               ops::dropout_offset(call.first_row + r0, f), as_vector(dhc));
    ops::activation_backward<T>(config_.activation, as_vector(pc), as_vector(dhc), as_vector(dhc));
    // LayerNorm, then dx = beta * dx + the chunk's input gradient.
    auto dxc = rows_of(dx, r0, n);
    auto target = beta == compute_t<T>(0) ? dxc : rows_of(dxc_tmp, 0, n);
    ops::linear_backward<T>(input, w1_->matrix(), dhc, gamma_ ? dnc : target, w1_->grad_matrix(),
                            b1_->grad);
    if (gamma_)
      ops::layer_norm_backward<T>(xc, gamma_->value, mc, sc, dnc, target, gamma_->grad,
                                  beta_->grad);
    if (beta != compute_t<T>(0))
      ops::axpby<T>(compute_t<T>(1), as_vector(target), beta, as_vector(dxc));
  }
}

template class FeedForward<float>;
template class FeedForward<double>;
template class FeedForward<bf16>;

}  // namespace reformer::layers
