#include "reformer/ops/cross_entropy.hpp"

#include "ops/column_sums.hpp"
#include "reformer/core/element_map.hpp"
#include "reformer/core/instantiate.hpp"
#include "reformer/core/shape.hpp"
#include "reformer/ops/embedding.hpp"
#include "reformer/ops/gemm.hpp"
#include "reformer/ops/linear.hpp"

#include <algorithm>
#include <cmath>
#include <optional>

namespace reformer::ops {
namespace {

using TeamPolicy = Kokkos::TeamPolicy<ExecSpace>;
using Member = TeamPolicy::member_type;

// The smoothed target distribution of a non-pad row: q = target_q on the target,
// 0 on the pad class, other_q elsewhere.
struct Smoothing {
  double target_q, other_q;
};

template <class T>
Smoothing check_inputs(const char* op, const In2<T>& h, const In2<param_t<T>>& weight,
                       const In1<param_t<T>>& bias, const In1<int>& targets,
                       const CrossEntropyOptions& options) {
  require_nonempty(op, "h", h);
  require_nonempty(op, "weight", weight);
  const bool tied = options.weight_is_embedding;
  const unsigned d_dim = tied ? 1 : 0;
  const Index n = h.extent(0), d = h.extent(1), vocab = weight.extent(1 - d_dim);
  require<ShapeError>(static_cast<Index>(weight.extent(d_dim)) == d, op, ": weight has shape ",
                      shape_string(weight), " and h has shape ", shape_string(h),
                      "; weight must be ",
                      tied ? "[V, d] (weight_is_embedding)" : "[d, V] (weight_is_embedding off)",
                      ", so its dimension ", d_dim, " must be ", d);
  if (bias.extent(0) > 0) require_extent(op, "bias", bias, 0, vocab);
  require_extent(op, "targets", targets, 0, n);
  const double eps = options.smoothing;
  const int pad = options.pad_id;
  require<ConfigError>(options.chunk_rows > 0, op, ": chunk_rows is ", options.chunk_rows,
                       " but must be positive");
  require<ConfigError>(eps >= 0 && eps < 1, op, ": smoothing is ", eps, " but must be in [0, 1)");
  require<ConfigError>(pad == -1 || (pad >= 0 && pad < vocab), op, ": pad_id is ", pad,
                       " but must be -1 (none) or in [0, ", vocab, ")");
  const Index others = vocab - 1 - (pad >= 0 ? 1 : 0);
  require<ConfigError>(eps == 0 || others > 0, op, ": smoothing ", eps,
                       " needs a class besides the target and pad_id, but the vocabulary has ",
                       vocab, " classes");
  require_ids_in_range(op, "targets", targets, vocab, pad);
  return {1 - eps, others > 0 ? eps / others : 0.0};
}

}  // namespace

double smoothed_target_entropy(double smoothing, Index vocab, int pad_id) {
  const Index others = vocab - 1 - (pad_id >= 0 ? 1 : 0);
  if (smoothing <= 0 || others <= 0) return 0.0;
  const double other_q = smoothing / double(others);
  return -(1 - smoothing) * std::log(1 - smoothing) - smoothing * std::log(other_q);
}

namespace {

Index count_tokens(const In1<int>& targets, int pad) {
  Index tokens = 0;
  Kokkos::parallel_reduce(
      "cross_entropy_tokens", range(targets.extent(0)),
      KOKKOS_LAMBDA(Index i, Index & sum) { sum += targets(i) != pad ? 1 : 0; }, tokens);
  return tokens;
}

// For the chunk rows i (global row row0 + i) of the logits z [m, V]:
//   log p_c = z_c - lse,  loss_i = -sum_c q_c log p_c,  correct_i = (argmax z == t_i),
//   nll_i = -log p_{t_i} (into row_nll when it is not empty: with smoothing),
// and if kGradient, z is overwritten with dz = (p - q) * inv_tokens (0 on pad rows).
// T here is the compute type (the logits are never stored narrower).
template <class T, bool kGradient>
void chunk_rows_softmax(View2<T> z, In1<int> targets, Index row0, int pad, Smoothing smoothing,
                        T inv_tokens, View1<double> row_loss, View1<int> row_correct,
                        View1<double> row_nll) {
  const bool with_nll = row_nll.extent(0) > 0;
  const Index m = z.extent(0), vocab = z.extent(1);
  const T target_q = static_cast<T>(smoothing.target_q);
  const T other_q = static_cast<T>(smoothing.other_q);
  Kokkos::parallel_for(
      "cross_entropy_rows", TeamPolicy(m, Kokkos::AUTO), KOKKOS_LAMBDA(const Member& team) {
        const Index i = team.league_rank(), row = row0 + i;
        const int t = targets(row);
        if (t == pad) {
          if (kGradient)
            Kokkos::parallel_for(Kokkos::TeamThreadRange(team, vocab),
                                 [&](Index c) { z(i, c) = T(0); });
          Kokkos::single(Kokkos::PerTeam(team), [&] {
            row_loss(row) = 0;
            row_correct(row) = 0;
            if (with_nll) row_nll(row) = 0;
          });
          return;
        }
        T z_max = 0;
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, vocab),
            [&](Index c, T& mx) { mx = z(i, c) > mx ? z(i, c) : mx; }, Kokkos::Max<T>(z_max));
        Index argmax = vocab;
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, vocab),
            [&](Index c, Index& first) {
              if (z(i, c) == z_max && c < first) first = c;
            },
            Kokkos::Min<Index>(argmax));
        T sum_exp = 0;
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, vocab),
            [&](Index c, T& acc) { acc += compat::exp(z(i, c) - z_max); }, sum_exp);
        const T lse = z_max + compat::log(sum_exp);
        const T logp_target = z(i, t) - lse;
        const T logp_pad = pad >= 0 ? z(i, pad) - lse : T(0);
        T sum_logp = 0;
        Kokkos::parallel_reduce(
            Kokkos::TeamThreadRange(team, vocab), [&](Index c, T& acc) { acc += z(i, c) - lse; },
            sum_logp);
        // -sum_c q_c log p_c, the other classes being all but the target and pad.
        const T loss = -(target_q * logp_target + other_q * (sum_logp - logp_target - logp_pad));
        if (kGradient) {
          team.team_barrier();  // every thread has read z before it is overwritten
          Kokkos::parallel_for(Kokkos::TeamThreadRange(team, vocab), [&](Index c) {
            const T q = c == t ? target_q : (c == pad ? T(0) : other_q);
            z(i, c) = (compat::exp(z(i, c) - lse) - q) * inv_tokens;
          });
        }
        Kokkos::single(Kokkos::PerTeam(team), [&] {
          row_loss(row) = static_cast<double>(loss);
          row_correct(row) = argmax == t ? 1 : 0;
          if (with_nll) row_nll(row) = -static_cast<double>(logp_target);
        });
      });
}

// Logits of a chunk: z = h W + b, or z = h E^T + b for a tied embedding table E,
// in compute precision (bf16 h is widened into the float32 product).
template <class T>
void chunk_logits(const In2<T>& h, const In2<param_t<T>>& weight, bool tied,
                  const In1<param_t<T>>& bias, const View2<compute_t<T>>& z) {
  const Trans trans_w = tied ? Trans::Yes : Trans::No;
  if constexpr (is_reduced_precision<T>) {
    mixed_matmul<T, param_t<T>, compute_t<T>>(h, Trans::No, weight, trans_w, z, 1.0f, 0.0f, bias);
  } else {
    matmul<T>(h, Trans::No, weight, trans_w, z);
    if (bias.extent(0) > 0) add_bias<T>(z, bias);
  }
}

// Gradients of a chunk from dz: dh = dz W^T and dW += h^T dz, or dh = dz E and
// dE += dz^T h for a tied embedding table; db += sum_rows dz. For bf16 h, dh is
// rounded once from the float32 product and dW, dE, db sum in float32.
template <class T>
void chunk_gradients(const In2<T>& h, const In2<param_t<T>>& weight, bool tied,
                     const In2<compute_t<T>>& dz, const View2<T>& dh,
                     const View2<param_t<T>>& dweight, const View1<param_t<T>>& dbias) {
  using C = compute_t<T>;
  using P = param_t<T>;
  if constexpr (is_reduced_precision<T>) {
    mixed_matmul<C, P, T>(dz, Trans::No, weight, tied ? Trans::No : Trans::Yes, dh);
    if (tied)
      mixed_matmul<C, T, P>(dz, Trans::Yes, h, Trans::No, dweight, 1.0f, 1.0f);
    else
      mixed_matmul<T, C, P>(h, Trans::Yes, dz, Trans::No, dweight, 1.0f, 1.0f);
  } else {
    matmul<T>(dz, Trans::No, weight, tied ? Trans::No : Trans::Yes, dh);
    if (tied)
      matmul<T>(dz, Trans::Yes, h, Trans::No, dweight, T(1), T(1));
    else
      matmul<T>(h, Trans::Yes, dz, Trans::No, dweight, T(1), T(1));
  }
  if (dbias.extent(0) > 0)
    detail::add_column_sums<P>(
        "cross_entropy_bias_grad", dz.extent(0), dbias,
        KOKKOS_LAMBDA(Index i, Index c) { return P(dz(i, c)); });
}

// The loop over chunks shared by the forward and the forward-backward passes.
template <class T, bool kGradient>
CrossEntropyResult run_chunks(const char* op, In2<T> h, In2<param_t<T>> weight,
                              In1<param_t<T>> bias, In1<int> targets,
                              const CrossEntropyOptions& options, View2<T> dh,
                              View2<param_t<T>> dweight, View1<param_t<T>> dbias) {
  using C = compute_t<T>;
  const Smoothing smoothing = check_inputs<T>(op, h, weight, bias, targets, options);
  if constexpr (kGradient) {
    require_same_shape(op, "h", h, "dh", dh);
    require_same_shape(op, "weight", weight, "dweight", dweight);
    require_same_shape(op, "bias", bias, "dbias", dbias);
  }
  const bool tied = options.weight_is_embedding;
  const Index n = h.extent(0), vocab = weight.extent(tied ? 0 : 1);
  const int pad = options.pad_id;
  CrossEntropyResult result;
  result.tokens = count_tokens(targets, pad);
  if (result.tokens == 0) {
    if constexpr (kGradient) fill_elements("cross_entropy_zero_dh", dh, store<T>(C(0)));
    return result;
  }
  const C inv_tokens = static_cast<C>(options.gradient_scale / static_cast<double>(result.tokens));
  const Index chunk = std::min(options.chunk_rows, n);
  std::optional<Workspace::Frame> frame;
  if (options.workspace) frame.emplace(*options.workspace);
  const View2<C> logits =
      frame ? frame->take<View2<C>>(chunk, vocab) : View2<C>("cross_entropy_logits", chunk, vocab);
  View1<double> row_loss("cross_entropy_row_loss", n);
  View1<int> row_correct("cross_entropy_row_correct", n);
  // Without smoothing the loss is the negative log-likelihood: no rows of their own.
  View1<double> row_nll;
  if (options.smoothing > 0) row_nll = View1<double>("cross_entropy_row_nll", n);
  for (Index row0 = 0; row0 < n; row0 += chunk) {
    const auto rows = Kokkos::make_pair(row0, std::min(row0 + chunk, n));
    const In2<T> h_chunk = Kokkos::subview(h, rows, Kokkos::ALL);
    const View2<C> z =
        Kokkos::subview(logits, Kokkos::make_pair(Index(0), rows.second - row0), Kokkos::ALL);
    chunk_logits<T>(h_chunk, weight, tied, bias, z);
    chunk_rows_softmax<C, kGradient>(z, targets, row0, pad, smoothing, inv_tokens, row_loss,
                                     row_correct, row_nll);
    if constexpr (kGradient)
      chunk_gradients<T>(h_chunk, weight, tied, z, Kokkos::subview(dh, rows, Kokkos::ALL), dweight,
                         dbias);
  }
  double loss_sum = 0;
  Kokkos::parallel_reduce(
      "cross_entropy_loss", range(n), KOKKOS_LAMBDA(Index i, double& sum) { sum += row_loss(i); },
      loss_sum);
  Kokkos::parallel_reduce(
      "cross_entropy_correct", range(n),
      KOKKOS_LAMBDA(Index i, Index & sum) { sum += row_correct(i); }, result.correct);
  result.loss = loss_sum / static_cast<double>(result.tokens);
  result.nll = result.loss;
  if (row_nll.extent(0) > 0) {
    double nll_sum = 0;
    Kokkos::parallel_reduce(
        "cross_entropy_nll", range(n), KOKKOS_LAMBDA(Index i, double& sum) { sum += row_nll(i); },
        nll_sum);
    result.nll = nll_sum / static_cast<double>(result.tokens);
  }
  return result;
}

}  // namespace

template <class T>
CrossEntropyResult cross_entropy_forward(In2<T> h, In2<param_t<T>> weight, In1<param_t<T>> bias,
                                         In1<int> targets, const CrossEntropyOptions& options) {
  return run_chunks<T, false>("cross_entropy_forward", h, weight, bias, targets, options, {}, {},
                              {});
}

template <class T>
CrossEntropyResult cross_entropy_forward_backward(In2<T> h, In2<param_t<T>> weight,
                                                  In1<param_t<T>> bias, In1<int> targets,
                                                  const CrossEntropyOptions& options, View2<T> dh,
                                                  View2<param_t<T>> dweight,
                                                  View1<param_t<T>> dbias) {
  return run_chunks<T, true>("cross_entropy_forward_backward", h, weight, bias, targets, options,
                             dh, dweight, dbias);
}

#define REFORMER_INSTANTIATE(T)                                                                  \
  template CrossEntropyResult cross_entropy_forward<T>(In2<T>, In2<param_t<T>>, In1<param_t<T>>, \
                                                       In1<int>, const CrossEntropyOptions&);    \
  template CrossEntropyResult cross_entropy_forward_backward<T>(                                 \
      In2<T>, In2<param_t<T>>, In1<param_t<T>>, In1<int>, const CrossEntropyOptions&, View2<T>,  \
      View2<param_t<T>>, View1<param_t<T>>);
REFORMER_INSTANTIATE_STORAGE_TYPES(REFORMER_INSTANTIATE)

}  // namespace reformer::ops
