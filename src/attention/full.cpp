#include "reformer/attention/full.hpp"

#include "attention/attention_checks.hpp"
#include "reformer/core/instantiate.hpp"
#include "reformer/core/memory_tracker.hpp"
#include "reformer/core/runtime.hpp"
#include "reformer/core/team_scratch.hpp"
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
// copies a contiguous row of d values. The head-major copies are in compute
// precision (bf16 rows are widened to float32, and rounded once on the way back).
template <class T>
View3<compute_t<T>> to_heads(In4<T> x, Workspace::Frame& frame) {
  using C = compute_t<T>;
  const Index batch = x.extent(0), length = x.extent(1), heads = x.extent(2), d = x.extent(3);
  auto y = frame.take<View3<C>>(batch * heads, length, d);
  Kokkos::parallel_for(
      "attention_to_heads", range(batch * length * heads), KOKKOS_LAMBDA(Index e) {
        const Index h = e % heads, i = e / heads % length, b = e / (heads * length);
        const T* src = &x(b, i, h, 0);
        C* dst = &y(b * heads + h, i, 0);
        for (Index c = 0; c < d; ++c) dst[c] = load(src[c]);
      });
  return y;
}

template <class T>
void from_heads(In3<compute_t<T>> y, View4<T> x) {
  using C = compute_t<T>;
  const Index batch = x.extent(0), length = x.extent(1), heads = x.extent(2), d = x.extent(3);
  Kokkos::parallel_for(
      "attention_from_heads", range(batch * length * heads), KOKKOS_LAMBDA(Index e) {
        const Index h = e % heads, i = e / heads % length, b = e / (heads * length);
        const C* src = &y(b * heads + h, i, 0);
        T* dst = &x(b, i, h, 0);
        for (Index c = 0; c < d; ++c) dst[c] = store<T>(src[c]);
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

// Row i of (bh) in place: S -> softmax(masked S). The loops over the row
// vectorise.
template <class T>
KOKKOS_INLINE_FUNCTION void masked_softmax_row(T* row, const ScoreMask& mask, Index bh, Index i,
                                               Index lk) {
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
}

// In place: S -> softmax(masked S), one thread per row.
template <class T>
void masked_softmax(View3<T> s, ScoreMask mask) {
  const Index lq = s.extent(1), lk = s.extent(2);
  Kokkos::parallel_for(
      "full_attention_softmax", range(s.extent(0) * lq), KOKKOS_LAMBDA(Index r) {
        masked_softmax_row(&s(r / lq, r % lq, 0), mask, r / lq, r % lq, lk);
      });
}

// dropped = P * keep / (1 - rate), with the mask of score (bh, i, j), in
// compute precision (bf16 P is widened; with rate 0, dropped = P). dropped may
// be p itself.
template <class T>
void apply_dropout(In3<T> p, const AttentionDropout& dropout, Index heads,
                   View3<compute_t<T>> dropped) {
  using C = compute_t<T>;
  const Index lq = p.extent(1), lk = p.extent(2);
  const double rate = dropout.rate;
  const C scale = C(1.0 / (1.0 - rate));
  using Policy = Kokkos::MDRangePolicy<ExecSpace, Kokkos::Rank<3>>;
  Kokkos::parallel_for(
      "full_attention_dropout", Policy({0, 0, 0}, {Index(p.extent(0)), lq, lk}),
      KOKKOS_LAMBDA(Index bh, Index i, Index j) {
        const C value = load(p(bh, i, j));
        dropped(bh, i, j) = rate == 0.0                              ? value
                            : dropout.keeps(bh, heads, i, j, lq, lk) ? value * scale
                                                                     : C(0);
      });
}

// Row i of (bh) in place: dP' -> dS = P * (dP - sum_j P dP), where dP = dP' *
// keep / (1 - rate) undoes the dropout of the probabilities; zero for constant
// (masked) scores. P is stored (T: bf16 or the compute type C), g is C.
template <class T, class C>
KOKKOS_INLINE_FUNCTION void softmax_backward_row(const T* prow, C* g, const ScoreMask& mask,
                                                 Index bh, Index i, Index lq, Index lk,
                                                 const AttentionDropout& dropout) {
  if (dropout.rate > 0.0) {
    const C scale = C(1.0 / (1.0 - dropout.rate));
    for (Index j = 0; j < lk; ++j)
      g[j] *= dropout.keeps(bh, mask.heads, i, j, lq, lk) ? scale : C(0);
  }
  // Masked probabilities are exactly 0, so they add nothing to the dot product.
  const C dot = dot_values(prow, g, lk);
  if (mask.key_valid.extent(0) == 0) {
    for (Index t = 0; t < lk; ++t) {
      const bool constant = (mask.self_mask && i == t) || (mask.causal && t > i);
      g[t] = constant ? C(0) : load(prow[t]) * (g[t] - dot);
    }
  } else {
    for (Index t = 0; t < lk; ++t) g[t] = mask.kind(bh, i, t) ? C(0) : load(prow[t]) * (g[t] - dot);
  }
}

// In place: dP' -> dS for every row, one thread per row.
template <class T>
void softmax_backward_masked(In3<T> p, View3<compute_t<T>> grad, ScoreMask mask,
                             const AttentionDropout& dropout) {
  const Index lq = p.extent(1), lk = p.extent(2);
  Kokkos::parallel_for(
      "full_attention_softmax_backward", range(p.extent(0) * lq), KOKKOS_LAMBDA(Index r) {
        const Index bh = r / lq, i = r % lq;
        softmax_backward_row(&p(bh, i, 0), &grad(bh, i, 0), mask, bh, i, lq, lk, dropout);
      });
}

// Short sequences on the host: one thread per (batch, head) computes that
// head's whole attention, reading q, k, v and writing the outputs in their
// [batch, length, heads, d_head] layout, with the transposed keys (values) and
// the rows of P' and dS in local arrays. The batched path's head-major copies
// and tiny products (seven launches forward, twelve backward, mostly overhead
// at these sizes) become one launch. Every product is accumulate_rows (its
// inner loops have run-time bounds, which keeps the compiler vectorising them
// rather than unrolling them).
constexpr Index kShortLength = 32, kShortHeadDim = 64;
constexpr Index kShortValues = kShortLength * kShortHeadDim;  // rows of one head

bool short_attention(Index lq, Index lk, Index d_head) {
  return kHostMemory && lq <= kShortLength && lk <= kShortLength && d_head <= kShortHeadDim;
}

using HostRange = Kokkos::RangePolicy<Kokkos::DefaultHostExecutionSpace>;

// P' = dropout(P) of score (bh, i, j).
template <class T>
KOKKOS_INLINE_FUNCTION T dropped_probability(T p, const AttentionDropout& dropout, T keep_scale,
                                             Index bh, Index heads, Index i, Index j, Index lq,
                                             Index lk) {
  if (dropout.rate <= 0.0) return p;
  return dropout.keeps(bh, heads, i, j, lq, lk) ? p * keep_scale : T(0);
}

// cols[c][j] = x[j * stride + c] for the n rows of x [n, d] (row stride `stride`),
// in compute precision.
template <class T>
void load_transposed(const T* x, Index stride, Index n, Index d,
                     compute_t<T> (&cols)[kShortHeadDim][kShortLength]) {
  for (Index j = 0; j < n; ++j)
    for (Index c = 0; c < d; ++c) cols[c][j] = load(x[j * stride + c]);
}

// The n rows of x (row stride `stride`) as compute-precision rows for
// accumulate_rows: float and double rows are read in place (stride kept),
// bf16 rows are widened into `rows` (stride kShortHeadDim).
template <class T, class C, Index N>
const C* compute_rows(const T* x, Index stride, Index n, Index d, C (&rows)[N], Index& ld) {
  if constexpr (is_reduced_precision<T>) {
    static_assert(N == kShortValues, "widened rows need a whole buffer");
    for (Index j = 0; j < n; ++j)
      for (Index c = 0; c < d; ++c) rows[j * kShortHeadDim + c] = load(x[j * stride + c]);
    ld = kShortHeadDim;
    return rows;
  } else {
    ld = stride;
    return x;
  }
}

// Rows widened by compute_rows: a whole buffer for bf16, none otherwise.
template <class T>
constexpr Index kWidenedRows = is_reduced_precision<T> ? kShortValues : 1;
// A row of at most kShortLength results: a compute-precision buffer for bf16
// (rounded once when stored), the destination itself otherwise.
template <class T>
constexpr Index kRowBuffer = is_reduced_precision<T> ? kShortLength : 1;
template <class T>
constexpr Index kHeadBuffer = is_reduced_precision<T> ? kShortHeadDim : 1;

template <class T, class C, Index N>
C* result_row(T* to, C (&buffer)[N]) {
  if constexpr (is_reduced_precision<T>)
    return buffer;
  else
    return to;
}
template <class T, class C>
void store_row(T* to, const C* from, Index n) {
  if constexpr (is_reduced_precision<T>)
    for (Index c = 0; c < n; ++c) to[c] = store<T>(from[c]);
}

// S = scale Q K^T, P = softmax(masked S) (saved), out = dropout(P) V.
template <class T>
void short_attention_forward(In4<T> q, In4<T> k, In4<T> v, compute_t<T> scale, ScoreMask mask,
                             AttentionDropout dropout, View3<T> probs, View4<T> out) {
  using C = compute_t<T>;
  const Index lq = q.extent(1), lk = k.extent(1), heads = q.extent(2), d = q.extent(3);
  const Index stride = heads * d;  // between positions
  const C keep_scale = C(1.0 / (1.0 - dropout.rate));
  Kokkos::parallel_for(
      "full_attention_short_forward", HostRange(0, q.extent(0) * heads), [=](Index bh) {
        const Index b = bh / heads, h = bh % heads;
        C kt[kShortHeadDim][kShortLength], dropped[kShortLength];
        C v_rows[kWidenedRows<T>], p_row[kRowBuffer<T>], o_row[kHeadBuffer<T>];
        load_transposed(&k(b, 0, h, 0), stride, lk, d, kt);
        Index v_ld = 0;
        const C* vs = compute_rows(&v(b, 0, h, 0), stride, lk, d, v_rows, v_ld);
        for (Index i = 0; i < lq; ++i) {
          C* row = result_row(&probs(bh, i, 0), p_row);
          for (Index j = 0; j < lk; ++j) row[j] = 0;
          accumulate_rows(row, &kt[0][0], kShortLength, &q(b, i, h, 0), 1, d, lk);
          for (Index j = 0; j < lk; ++j) row[j] *= scale;
          masked_softmax_row(row, mask, bh, i, lk);
          store_row(&probs(bh, i, 0), row, lk);
          const C* p = row;
          if (dropout.rate > 0) {
            for (Index j = 0; j < lk; ++j)
              dropped[j] =
                  dropped_probability(row[j], dropout, keep_scale, bh, heads, i, j, lq, lk);
            p = dropped;
          }
          C* o = result_row(&out(b, i, h, 0), o_row);
          for (Index c = 0; c < d; ++c) o[c] = 0;
          accumulate_rows(o, vs, v_ld, p, 1, lk, d);
          store_row(&out(b, i, h, 0), o, d);
        }
      });
}

// dP' = dO V^T -> dS (rows kept, scaled), dQ = scale dS K; then per key
// dK = scale dS^T Q and dV = P'^T dO.
template <class T>
void short_attention_backward(In4<T> q, In4<T> k, In4<T> v, In3<T> probs, In4<T> dout,
                              compute_t<T> scale, ScoreMask mask, AttentionDropout dropout,
                              View4<T> dq, View4<T> dk, View4<T> dv) {
  using C = compute_t<T>;
  const Index lq = q.extent(1), lk = k.extent(1), heads = q.extent(2), d = q.extent(3);
  const Index stride = heads * d;
  const C keep_scale = C(1.0 / (1.0 - dropout.rate));
  Kokkos::parallel_for(
      "full_attention_short_backward", HostRange(0, q.extent(0) * heads), [=](Index bh) {
        const Index b = bh / heads, h = bh % heads;
        C vt[kShortHeadDim][kShortLength], dropped[kShortLength][kShortLength],
            ds[kShortLength][kShortLength];
        C q_rows[kWidenedRows<T>], k_rows[kWidenedRows<T>], do_rows[kWidenedRows<T>];
        C g_row[kHeadBuffer<T>];
        load_transposed(&v(b, 0, h, 0), stride, lk, d, vt);
        Index q_ld = 0, k_ld = 0, do_ld = 0;
        const C* ks = compute_rows(&k(b, 0, h, 0), stride, lk, d, k_rows, k_ld);
        for (Index i = 0; i < lq; ++i) {
          const T* prow = &probs(bh, i, 0);
          C* g = ds[i];
          for (Index j = 0; j < lk; ++j) {
            g[j] = 0;
            dropped[i][j] =
                dropped_probability(load(prow[j]), dropout, keep_scale, bh, heads, i, j, lq, lk);
          }
          accumulate_rows(g, &vt[0][0], kShortLength, &dout(b, i, h, 0), 1, d, lk);
          softmax_backward_row(prow, g, mask, bh, i, lq, lk, dropout);
          for (Index j = 0; j < lk; ++j) g[j] *= scale;
          C* dqi = result_row(&dq(b, i, h, 0), g_row);
          for (Index c = 0; c < d; ++c) dqi[c] = 0;
          accumulate_rows(dqi, ks, k_ld, g, 1, lk, d);
          store_row(&dq(b, i, h, 0), dqi, d);
        }
        const C* qs = compute_rows(&q(b, 0, h, 0), stride, lq, d, q_rows, q_ld);
        const C* dos = compute_rows(&dout(b, 0, h, 0), stride, lq, d, do_rows, do_ld);
        for (Index j = 0; j < lk; ++j) {
          C* dkj = result_row(&dk(b, j, h, 0), g_row);
          for (Index c = 0; c < d; ++c) dkj[c] = 0;
          accumulate_rows(dkj, qs, q_ld, &ds[0][j], kShortLength, lq, d);
          store_row(&dk(b, j, h, 0), dkj, d);
          C* dvj = result_row(&dv(b, j, h, 0), g_row);
          for (Index c = 0; c < d; ++c) dvj[c] = 0;
          accumulate_rows(dvj, dos, do_ld, &dropped[0][j], kShortLength, lq, d);
          store_row(&dv(b, j, h, 0), dvj, d);
        }
      });
}

// Causal probabilities are zero above the diagonal, unless padding masks every
// key a query may see: such a row holds only mask constants and attends
// uniformly to every key (masks.hpp), later ones included.
bool lower_triangular_probs(const AttentionCall& call) {
  return call.masks.causal && call.masks.key_valid.extent(0) == 0;
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
  const std::int64_t scores = std::int64_t(batch) * heads * length_q * length_k;
  // bf16: the saved probabilities and one float32 buffer (scores, then their gradient).
  if (scalar_bytes < std::int64_t(sizeof(float))) return scores * (scalar_bytes + 4);
  return scores * scalar_bytes * (dropout ? 3 : 2);
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
  using C = compute_t<T>;
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
  const C scale = detail::dense_score_scale<C>(config, q.extent(3));
  if (short_attention(lq, lk, q.extent(3))) {
    short_attention_forward<T>(q, k, v, scale, score_mask(config, call, heads), call.dropout,
                               saved.probs, out);
    return;
  }
  Workspace::Frame frame(workspace);
  auto qh = to_heads<T>(q, frame);
  auto kh = to_heads<T>(k, frame);
  auto vh = to_heads<T>(v, frame);
  // Causal: scores above the diagonal are masked, so P is lower-triangular and
  // every product below skips the blocks that are known to be zero.
  const auto lower_c = call.masks.causal ? Structure::LowerC : Structure::Dense;
  const auto lower_a = lower_triangular_probs(call) ? Structure::LowerA : Structure::Dense;
  // The scores: the saved probabilities themselves, or for bf16 a float32
  // buffer whose softmax is saved rounded (the output uses the float32 P).
  View3<C> scores;
  if constexpr (is_reduced_precision<T>)
    scores = frame.take<View3<C>>(batch * heads, lq, lk);
  else
    scores = saved.probs;
  ops::batched_matmul<C>(qh, Trans::No, kh, Trans::Yes, scores, scale, C(0), lower_c);
  masked_softmax<C>(scores, score_mask(config, call, heads));
  auto oh = frame.take<View3<C>>(batch * heads, lq, q.extent(3));
  if constexpr (is_reduced_precision<T>) {
    auto from = as_vector(scores);
    auto to = as_vector(saved.probs);
    Kokkos::parallel_for(
        "full_attention_store_probs", range(to.extent(0)),
        KOKKOS_LAMBDA(Index e) { to(e) = store<T>(from(e)); });
    if (dropout) apply_dropout<C>(scores, call.dropout, heads, scores);
    ops::batched_matmul<C>(scores, Trans::No, vh, Trans::No, oh, C(1), C(0), lower_a);
  } else if (dropout) {
    auto dropped = frame.take<View3<T>>(batch * heads, lq, lk);
    apply_dropout<T>(saved.probs, call.dropout, heads, dropped);
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
  using C = compute_t<T>;
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
  const C scale = detail::dense_score_scale<C>(config, q.extent(3));
  if (short_attention(lq, lk, q.extent(3))) {
    short_attention_backward<T>(q, k, v, saved.probs, dout, scale, score_mask(config, call, heads),
                                call.dropout, dq, dk, dv);
    return;
  }
  const bool causal = call.masks.causal;
  // dS is zero above the diagonal (masked scores get no gradient), P only
  // without padding (lower_triangular_probs).
  const auto lower_a = causal ? Structure::LowerA : Structure::Dense;
  const auto upper_a = causal ? Structure::UpperA : Structure::Dense;
  const auto upper_p = lower_triangular_probs(call) ? Structure::UpperA : Structure::Dense;
  const auto lower_c = causal ? Structure::LowerC : Structure::Dense;
  Workspace::Frame frame(workspace);
  auto qh = to_heads<T>(q, frame);
  auto kh = to_heads<T>(k, frame);
  auto vh = to_heads<T>(v, frame);
  auto doh = to_heads<T>(dout, frame);
  auto grad = frame.take<View3<C>>(batch * heads, lq, lk);
  // dV = P'^T dO (P' = dropout(P), built in the gradient buffer before it is
  // needed; bf16 P is widened there).
  auto dvh = frame.take<View3<C>>(batch * heads, lk, v.extent(3));
  if (call.dropout.rate > 0 || is_reduced_precision<T>) {
    apply_dropout<T>(saved.probs, call.dropout, heads, grad);
    ops::batched_matmul<C>(grad, Trans::Yes, doh, Trans::No, dvh, C(1), C(0), upper_p);
  } else if constexpr (!is_reduced_precision<T>) {
    ops::batched_matmul<T>(saved.probs, Trans::Yes, doh, Trans::No, dvh, T(1), T(0), upper_p);
  }
  // dP' = dO V^T, then dS through dropout and softmax, in place.
  ops::batched_matmul<C>(doh, Trans::No, vh, Trans::Yes, grad, C(1), C(0), lower_c);
  softmax_backward_masked<T>(saved.probs, grad, score_mask(config, call, heads), call.dropout);
  // dQ = scale dS K, dK = scale dS^T Q.
  auto dqh = frame.take<View3<C>>(batch * heads, lq, q.extent(3));
  auto dkh = frame.take<View3<C>>(batch * heads, lk, k.extent(3));
  ops::batched_matmul<C>(grad, Trans::No, kh, Trans::No, dqh, scale, C(0), lower_a);
  ops::batched_matmul<C>(grad, Trans::Yes, qh, Trans::No, dkh, scale, C(0), upper_a);
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
REFORMER_INSTANTIATE_STORAGE_TYPES(REFORMER_INSTANTIATE)

}  // namespace reformer::attention
