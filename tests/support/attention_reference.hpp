// Plain host implementations of attention for the tests: dense loops over
// every (query, key) pair, no chunking tricks, tensors [batch, length, heads, d].
#pragma once

#include "reformer/core/types.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <utility>
#include <vector>

namespace reformer::testing {

struct Dims {
  long batch, length, heads, d;
  long at(long b, long i, long h, long x) const { return ((b * length + i) * heads + h) * d + x; }
};

// What a reference score is: allowed (a real dot product, possibly offset),
// replaced by a constant (mask), or absent (key not visible at all).
struct RefScore {
  enum Kind { Dot, Constant, Absent } kind = Dot;
  double value = 0;  // the constant, or an offset added to the dot product
};
using ScoreRule = std::function<RefScore(long b, long h, long i, long j)>;

// out_i = sum_j softmax_j(score_ij) v_j with score_ij = scale * q_i . k_j (+ offset).
inline std::vector<double> reference_attention(const Dims& dm, const std::vector<double>& q,
                                               const std::vector<double>& k,
                                               const std::vector<double>& v, double scale,
                                               const ScoreRule& rule,
                                               std::vector<double>* lse_out = nullptr) {
  std::vector<double> out(q.size(), 0.0);
  if (lse_out) lse_out->assign(dm.batch * dm.length * dm.heads, 0.0);
  for (long b = 0; b < dm.batch; ++b)
    for (long h = 0; h < dm.heads; ++h)
      for (long i = 0; i < dm.length; ++i) {
        std::vector<double> scores;
        std::vector<long> keys;
        for (long j = 0; j < dm.length; ++j) {
          const RefScore r = rule(b, h, i, j);
          if (r.kind == RefScore::Absent) continue;
          double s = r.value;
          if (r.kind == RefScore::Dot) {
            double dot = 0;
            for (long x = 0; x < dm.d; ++x) dot += q[dm.at(b, i, h, x)] * k[dm.at(b, j, h, x)];
            s += scale * dot;
          }
          scores.push_back(s);
          keys.push_back(j);
        }
        const double m = *std::max_element(scores.begin(), scores.end());
        double sum = 0;
        for (double s : scores) sum += std::exp(s - m);
        for (size_t n = 0; n < keys.size(); ++n) {
          const double p = std::exp(scores[n] - m) / sum;
          for (long x = 0; x < dm.d; ++x) out[dm.at(b, i, h, x)] += p * v[dm.at(b, keys[n], h, x)];
        }
        if (lse_out) (*lse_out)[(b * dm.length + i) * dm.heads + h] = m + std::log(sum);
      }
  return out;
}

// Key-validity mask [batch, length]: 1 everywhere except the (batch, position)
// pairs in `padded`.
inline void mark_padding(const Kokkos::View<int**, Layout, MemSpace>& valid,
                         const std::vector<std::pair<int, int>>& padded) {
  Kokkos::deep_copy(valid, 1);
  auto host = Kokkos::create_mirror_view_and_copy(HostSpace(), valid);
  for (auto [b, i] : padded) host(b, i) = 0;
  Kokkos::deep_copy(valid, host);
}

}  // namespace reformer::testing
