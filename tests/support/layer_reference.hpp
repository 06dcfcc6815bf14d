// Plain host implementations of the layers for the tests: LayerNorm, the
// feed-forward sub-layer and a causal full-attention layer, on row-major
// std::vector<double> tensors read from a ParameterSet by name.
#pragma once

#include "reformer/core/parameter_set.hpp"
#include "reformer/ops/activations.hpp"
#include "support/attention_reference.hpp"
#include "support/gradcheck.hpp"

#include <cmath>
#include <string>
#include <vector>

namespace reformer::testing {

// c [n, m] = a [n, k] b [k, m]
inline std::vector<double> host_matmul(const std::vector<double>& a, const std::vector<double>& b,
                                       Index n, Index k, Index m) {
  std::vector<double> c(n * m, 0.0);
  for (Index i = 0; i < n; ++i)
    for (Index p = 0; p < k; ++p)
      for (Index j = 0; j < m; ++j) c[i * m + j] += a[i * k + p] * b[p * m + j];
  return c;
}

inline std::vector<double> host_layer_norm(const std::vector<double>& x, Index rows, Index d,
                                           const std::vector<double>& gamma,
                                           const std::vector<double>& beta, double eps = 1e-5) {
  std::vector<double> y(rows * d);
  for (Index r = 0; r < rows; ++r) {
    double mu = 0, var = 0;
    for (Index j = 0; j < d; ++j) mu += x[r * d + j] / d;
    for (Index j = 0; j < d; ++j) var += (x[r * d + j] - mu) * (x[r * d + j] - mu) / d;
    for (Index j = 0; j < d; ++j)
      y[r * d + j] = (x[r * d + j] - mu) / std::sqrt(var + eps) * gamma[j] + beta[j];
  }
  return y;
}

inline std::vector<double> param(const ParameterSet<double>& params, const std::string& name) {
  return to_host(params.get(name).value);
}

// G(x) = act(LayerNorm(x) W1 + b1) W2 + b2 (no dropout), parameters under `prefix`.
inline std::vector<double> host_feed_forward(const ParameterSet<double>& params,
                                             const std::string& prefix,
                                             const std::vector<double>& x, Index rows, Index d,
                                             Index f, ops::Activation act) {
  auto n = host_layer_norm(x, rows, d, param(params, prefix + ".norm.gamma"),
                           param(params, prefix + ".norm.beta"));
  auto h = host_matmul(n, param(params, prefix + ".w1"), rows, d, f);
  const auto b1 = param(params, prefix + ".b1");
  for (Index r = 0; r < rows; ++r)
    for (Index k = 0; k < f; ++k) {
      const double s = h[r * f + k] + b1[k];
      h[r * f + k] = act == ops::Activation::ReLU ? std::max(s, 0.0)
                                                  : 0.5 * s * (1 + std::erf(s / std::sqrt(2.0)));
    }
  auto y = host_matmul(h, param(params, prefix + ".w2"), rows, f, d);
  const auto b2 = param(params, prefix + ".b2");
  for (Index r = 0; r < rows; ++r)
    for (Index j = 0; j < d; ++j) y[r * d + j] += b2[j];
  return y;
}

// Causal full attention with separate q, k and projections w_q, w_k, w_v, w_o
// under `prefix` (no dropout): x [batch * length, d_model].
inline std::vector<double> host_full_attention_layer(const ParameterSet<double>& params,
                                                     const std::string& prefix,
                                                     const std::vector<double>& x, Index batch,
                                                     Index length, Index d_model, Index heads,
                                                     Index d_head) {
  const Index rows = batch * length, inner = heads * d_head;
  const auto q = host_matmul(x, param(params, prefix + ".w_q"), rows, d_model, inner);
  const auto k = host_matmul(x, param(params, prefix + ".w_k"), rows, d_model, inner);
  const auto v = host_matmul(x, param(params, prefix + ".w_v"), rows, d_model, inner);
  const Dims dims{long(batch), long(length), long(heads), long(d_head)};
  const auto a = reference_attention(
      dims, q, k, v, 1.0 / std::sqrt(double(d_head)),
      [](long, long, long i, long j) { return j <= i ? RefScore{} : RefScore{RefScore::Absent}; });
  return host_matmul(a, param(params, prefix + ".w_o"), rows, inner, d_model);
}

}  // namespace reformer::testing
