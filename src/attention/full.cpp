#include "reformer/attention/full.hpp"

#include "attention/attention_checks.hpp"
#include "reformer/core/instantiate.hpp"
#include "reformer/core/memory_tracker.hpp"
#include "reformer/core/runtime.hpp"
#include "reformer/core/vector_loops.hpp"
#include "reformer/ops/dropout.hpp"
#include "reformer/ops/gemm.hpp"

#include <cmath>

namespace reformer::attention {
namespace {

using ops::Structure;
using ops::Trans;

// [batch, length, heads, d] <-> [batch * heads, length, d], so that every head's
// matrix is contiguous for the batched products. One thread per (b, i, h)
// copies a contiguous row of d values.
template <class T>
View3<T> to_heads(In4<T> x, Workspace::Frame& frame) {
  const Index batch = x.extent(0), length = x.extent(1), heads = x.extent(2), d = x.extent(3);
  auto y = frame.take<View3<T>>(batch * heads, length, d);
  Kokkos::parallel_for(
      "attention_to_heads", range(batch * length * heads), KOKKOS_LAMBDA(Index e) {
        const Index h = e % heads, i = e / heads % length, b = e / (heads * length);
        const T* src = &x(b, i, h, 0);
        T* dst = &y(b * heads + h, i, 0);
        for (Index c = 0; c < d; ++c) dst[c] = src[c];
      });
  return y;
}

template <class T>
void from_heads(In3<T> y, View4<T> x) {
  const Index batch = x.extent(0), length = x.extent(1), heads = x.extent(2), d = x.extent(3);
  Kokkos::parallel_for(
      "attention_from_heads", range(batch * length * heads), KOKKOS_LAMBDA(Index e) {
        const Index h = e % heads, i = e / heads % length, b = e / (heads * length);
        const T* src = &y(b * heads + h, i, 0);
        T* dst = &x(b, i, h, 0);
        for (Index c = 0; c < d; ++c) dst[c] = src[c];
      });
}

// Which scores are replaced by a mask constant, and by which.
struct ScoreMask {
  Kokkos::View<const int**, Layout, MemSpace> key_valid;
  bool causal, self_mask;
  Index heads;
  // 0: keep, 1: masked (causal or padding), 2: own position.
  KOKKOS_INLINE_FUNCTION int kind(Index bh, Index i, Index j) const {
    if (self_mask && i == j) return 2;
    if ((causal && j > i) || (key_valid.extent(0) && key_valid(bh / heads, j) == 0)) return 1;
    return 0;
  }
};

KOKKOS_INLINE_FUNCTION std::uint64_t score_index(Index bh, Index i, Index j, Index lq, Index lk) {
  return (std::uint64_t(bh) * lq + i) * lk + j;
}

// In place: S -> softmax(masked S), one thread per row; the loops over the
// row vectorise.
template <class T>
void masked_softmax(View3<T> s, ScoreMask mask) {
  const Index lq = s.extent(1), lk = s.extent(2);
  Kokkos::parallel_for(
      "full_attention_softmax", range(s.extent(0) * lq), KOKKOS_LAMBDA(Index r) {
        const Index bh = r / lq, i = r % lq;
        T* row = &s(bh, i, 0);
        if (mask.key_valid.extent(0) == 0) {
          for (Index j = 0; j < lk; ++j) {
            const bool self = mask.self_mask && i == j, future = mask.causal && j > i;
            row[j] = self ? T(MaskValues<T>::self) : future ? T(MaskValues<T>::masked) : row[j];
          }
        } else {
          for (Index j = 0; j < lk; ++j) {
            const int kind = mask.kind(bh, i, j);
            if (kind == 1) row[j] = T(MaskValues<T>::masked);
            if (kind == 2) row[j] = T(MaskValues<T>::self);
          }
        }
        const T m = max_values(row, lk);
        for (Index j = 0; j < lk; ++j) row[j] = softmax_weight(row[j] - m);
        const T inverse = T(1) / sum_values(row, lk);
        for (Index j = 0; j < lk; ++j) row[j] *= inverse;
      });
}

// dropped = P * keep / (1 - rate), with the mask of score (bh, i, j).
template <class T>
void apply_dropout(In3<T> p, const AttentionDropout& dropout, View3<T> dropped) {
  const Index lq = p.extent(1), lk = p.extent(2);
  const double rate = dropout.rate;
  const RandomKey key = dropout.key;
  const T scale = T(1.0 / (1.0 - rate));
  using Policy = Kokkos::MDRangePolicy<ExecSpace, Kokkos::Rank<3>>;
  Kokkos::parallel_for(
      "full_attention_dropout", Policy({0, 0, 0}, {Index(p.extent(0)), lq, lk}),
      KOKKOS_LAMBDA(Index bh, Index i, Index j) {
        dropped(bh, i, j) = ops::dropout_keeps(key, score_index(bh, i, j, lq, lk), rate)
                                ? p(bh, i, j) * scale
                                : T(0);
      });
}

// In place: dP' -> dS = P * (dP - sum_j P dP), dP = dP' * drop; zero for
// constant (masked) scores. One thread per row.
template <class T>
void softmax_backward_masked(In3<T> p, View3<T> grad, ScoreMask mask,
                             const AttentionDropout& dropout) {
  const Index lq = p.extent(1), lk = p.extent(2);
  const double rate = dropout.rate;
  const RandomKey key = dropout.key;
  const T scale = T(1.0 / (1.0 - rate));
  Kokkos::parallel_for(
      "full_attention_softmax_backward", range(p.extent(0) * lq), KOKKOS_LAMBDA(Index r) {
        const Index bh = r / lq, i = r % lq;
        const T* prow = &p(bh, i, 0);
        T* g = &grad(bh, i, 0);
        if (rate > 0.0)
          for (Index j = 0; j < lk; ++j)
            g[j] *= ops::dropout_keeps(key, score_index(bh, i, j, lq, lk), rate) ? scale : T(0);
        // Masked probabilities are exactly 0, so they add nothing to the dot product.
        T part[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        Index j = 0;
        for (; j + 8 <= lk; j += 8)
          for (int u = 0; u < 8; ++u) part[u] += prow[j + u] * g[j + u];
        T dot = 0;
        for (int u = 0; u < 8; ++u) dot += part[u];
        for (; j < lk; ++j) dot += prow[j] * g[j];
        if (mask.key_valid.extent(0) == 0) {
          for (Index t = 0; t < lk; ++t) {
            const bool constant = (mask.self_mask && i == t) || (mask.causal && t > i);
            g[t] = constant ? T(0) : prow[t] * (g[t] - dot);
          }
        } else {
          for (Index t = 0; t < lk; ++t) g[t] = mask.kind(bh, i, t) ? T(0) : prow[t] * (g[t] - dot);
        }
      });
}

ScoreMask score_mask(const FullAttentionConfig& config, const AttentionCall& call, Index heads) {
  return {call.masks.key_valid, call.masks.causal, config.self_mask, heads};
}

}  // namespace

void FullAttentionConfig::validate() const {
  require<ConfigError>(std::isfinite(scale) && scale >= 0, "FullAttentionConfig: scale is ", scale,
                       " but must be finite and >= 0 (0: 1 / sqrt(d_head))");
}

std::int64_t full_attention_score_bytes(Index batch, Index heads, Index length_q, Index length_k,
                                        std::int64_t scalar_bytes, bool dropout) {
  return std::int64_t(batch) * heads * length_q * length_k * scalar_bytes * (dropout ? 3 : 2);
}

void check_full_attention_fits(Index batch, Index heads, Index length_q, Index length_k,
                               std::int64_t scalar_bytes, bool dropout) {
  const std::int64_t needed =
      full_attention_score_bytes(batch, heads, length_q, length_k, scalar_bytes, dropout);
  const std::int64_t available = available_memory_bytes();
  require<MemoryError>(available < 0 || needed <= available, "full attention at length ", length_q,
                       " x ", length_k, " (batch ", batch, ", heads ", heads, ") needs ",
                       format_bytes(needed), " for its L x L score buffers but only ",
                       format_bytes(available),
                       " are available; use LSH or local attention for this length");
}

template <class T>
void full_attention_forward(In4<T> q, In4<T> k, In4<T> v, const FullAttentionConfig& config,
                            const AttentionCall& call, View4<T> out, FullAttentionSaved<T>& saved,
                            Workspace& workspace) {
  const char* op = "full_attention_forward";
  detail::check_dense_inputs(op, q, k, v, config, call);
  require_same_shape(op, "q", q, "out", out);
  const Index batch = q.extent(0), lq = q.extent(1), lk = k.extent(1), heads = q.extent(2);
  const bool dropout = call.dropout.rate > 0;
  if (Index(saved.probs.extent(0)) != batch * heads || Index(saved.probs.extent(1)) != lq ||
      Index(saved.probs.extent(2)) != lk) {
    saved.probs = View3<T>();
    check_full_attention_fits(batch, heads, lq, lk, sizeof(T), dropout);
    saved.probs = View3<T>(Kokkos::view_alloc(Kokkos::WithoutInitializing, "full_attention_probs"),
                           batch * heads, lq, lk);
  }
  Workspace::Frame frame(workspace);
  auto qh = to_heads<T>(q, frame);
  auto kh = to_heads<T>(k, frame);
  auto vh = to_heads<T>(v, frame);
  // Causal: scores above the diagonal are masked, so P is lower-triangular and
  // every product below skips the blocks that are known to be zero.
  const auto lower_c = call.masks.causal ? Structure::LowerC : Structure::Dense;
  const auto lower_a = call.masks.causal ? Structure::LowerA : Structure::Dense;
  ops::batched_matmul<T>(qh, Trans::No, kh, Trans::Yes, saved.probs,
                         detail::dense_score_scale<T>(config, q.extent(3)), T(0), lower_c);
  masked_softmax<T>(saved.probs, score_mask(config, call, heads));
  auto oh = frame.take<View3<T>>(batch * heads, lq, q.extent(3));
  if (dropout) {
    auto dropped = frame.take<View3<T>>(batch * heads, lq, lk);
    apply_dropout<T>(saved.probs, call.dropout, dropped);
    ops::batched_matmul<T>(dropped, Trans::No, vh, Trans::No, oh, T(1), T(0), lower_a);
  } else {
    ops::batched_matmul<T>(saved.probs, Trans::No, vh, Trans::No, oh, T(1), T(0), lower_a);
  }
  from_heads<T>(oh, out);
}

template <class T>
void full_attention_backward(In4<T> q, In4<T> k, In4<T> v, const FullAttentionSaved<T>& saved,
                             In4<T> dout, const FullAttentionConfig& config,
                             const AttentionCall& call, View4<T> dq, View4<T> dk, View4<T> dv,
                             Workspace& workspace) {
  const char* op = "full_attention_backward";
  detail::check_dense_inputs(op, q, k, v, config, call);
  require_same_shape(op, "q", q, "dout", dout);
  require_same_shape(op, "q", q, "dq", dq);
  require_same_shape(op, "k", k, "dk", dk);
  require_same_shape(op, "v", v, "dv", dv);
  const Index batch = q.extent(0), lq = q.extent(1), lk = k.extent(1), heads = q.extent(2);
  require<ShapeError>(Index(saved.probs.extent(0)) == batch * heads &&
                          Index(saved.probs.extent(1)) == lq && Index(saved.probs.extent(2)) == lk,
                      op, ": saved probabilities have shape ", shape_string(saved.probs),
                      "; run full_attention_forward on these inputs first");
  const T scale = detail::dense_score_scale<T>(config, q.extent(3));
  const bool causal = call.masks.causal;
  const auto lower_a = causal ? Structure::LowerA : Structure::Dense;
  const auto upper_a = causal ? Structure::UpperA : Structure::Dense;
  const auto lower_c = causal ? Structure::LowerC : Structure::Dense;
  Workspace::Frame frame(workspace);
  auto qh = to_heads<T>(q, frame);
  auto kh = to_heads<T>(k, frame);
  auto vh = to_heads<T>(v, frame);
  auto doh = to_heads<T>(dout, frame);
  auto grad = frame.take<View3<T>>(batch * heads, lq, lk);
  // dV = P'^T dO (P' = dropout(P), built in the gradient buffer before it is needed).
  auto dvh = frame.take<View3<T>>(batch * heads, lk, v.extent(3));
  if (call.dropout.rate > 0) {
    apply_dropout<T>(saved.probs, call.dropout, grad);
    ops::batched_matmul<T>(grad, Trans::Yes, doh, Trans::No, dvh, T(1), T(0), upper_a);
  } else {
    ops::batched_matmul<T>(saved.probs, Trans::Yes, doh, Trans::No, dvh, T(1), T(0), upper_a);
  }
  // dP' = dO V^T, then dS through dropout and softmax, in place.
  ops::batched_matmul<T>(doh, Trans::No, vh, Trans::Yes, grad, T(1), T(0), lower_c);
  softmax_backward_masked<T>(saved.probs, grad, score_mask(config, call, heads), call.dropout);
  // dQ = scale dS K, dK = scale dS^T Q.
  auto dqh = frame.take<View3<T>>(batch * heads, lq, q.extent(3));
  auto dkh = frame.take<View3<T>>(batch * heads, lk, k.extent(3));
  ops::batched_matmul<T>(grad, Trans::No, kh, Trans::No, dqh, scale, T(0), lower_a);
  ops::batched_matmul<T>(grad, Trans::Yes, qh, Trans::No, dkh, scale, T(0), upper_a);
  from_heads<T>(dqh, dq);
  from_heads<T>(dkh, dk);
  from_heads<T>(dvh, dv);
}

#define REFORMER_INSTANTIATE(T)                                                                   \
  template void full_attention_forward<T>(In4<T>, In4<T>, In4<T>, const FullAttentionConfig&,     \
                                          const AttentionCall&, View4<T>, FullAttentionSaved<T>&, \
                                          Workspace&);                                            \
  template void full_attention_backward<T>(                                                       \
      In4<T>, In4<T>, In4<T>, const FullAttentionSaved<T>&, In4<T>, const FullAttentionConfig&,   \
      const AttentionCall&, View4<T>, View4<T>, View4<T>, Workspace&);
REFORMER_INSTANTIATE_FLOAT_AND_DOUBLE(REFORMER_INSTANTIATE)

}  // namespace reformer::attention
