// Decoding of the encoder-decoder with caches (DecodeCache): start_decoding,
// decode_step, reorder, greedy and beam search.
#include "reformer/models/transformer.hpp"

#include "models/transformer_detail.hpp"
#include "reformer/core/error.hpp"
#include "reformer/core/instantiate.hpp"
#include "reformer/core/matrix_policy.hpp"
#include "reformer/core/shape.hpp"
#include "reformer/ops/elementwise.hpp"
#include "reformer/ops/embedding.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>
#include <vector>

namespace reformer::models {
namespace {

using internal::flat;

// out(i, ...) = in(order(i), ...) for the rows of a [n, a, b] tensor.
template <class T>
void gather_rows(View3<T> in, Kokkos::View<const int*, Layout, MemSpace> order, View3<T> out) {
  const Index a = in.extent(1), b = in.extent(2);
  Kokkos::parallel_for(
      "decode_gather_rows", matrix_policy(Index(out.extent(0)), a * b),
      KOKKOS_LAMBDA(Index i, Index j) { out(i, j / b, j % b) = in(order(i), j / b, j % b); });
}

void gather_mask(Kokkos::View<int**, Layout, MemSpace> in,
                 Kokkos::View<const int*, Layout, MemSpace> order,
                 Kokkos::View<int**, Layout, MemSpace> out) {
  Kokkos::parallel_for(
      "decode_gather_mask", matrix_policy(Index(out.extent(0)), Index(out.extent(1))),
      KOKKOS_LAMBDA(Index i, Index j) { out(i, j) = in(order(i), j); });
}

// The GNMT length penalty ((5 + length) / 6)^alpha.
double length_penalty(Index length, double alpha) {
  return std::pow((5.0 + double(length)) / 6.0, alpha);
}

}  // namespace

template <class T>
void EncoderDecoder<T>::start_decoding(IdMatrix source, MaskMatrix source_valid, Index capacity,
                                       DecodeCache<T>& cache) const {
  const char* op = "EncoderDecoder::start_decoding";
  const Index b = source.extent(0), ls = source.extent(1);
  require<ConfigError>(capacity > 0 && capacity <= config_.max_length, op, ": capacity ", capacity,
                       " must be in [1, model.max_length = ", config_.max_length, "]");
  require<ShapeError>(b > 0 && ls > 0 && ls <= config_.max_length, op, ": source has shape ",
                      shape_string(source), " but needs one token or more and at most ",
                      "model.max_length = ", config_.max_length, " per sequence");
  require_same_shape(op, "source", source, "source_valid", source_valid);
  ops::require_ids_in_range(op, "source", flat(source), config_.source_vocab);
  cache.batch = b;
  cache.source_length = ls;
  cache.capacity = capacity;
  cache.length = 0;
  encode(source, source_valid, {{}, false}, cache.encoder_state);
  cache.memory = cache.encoder_state.memory;
  cache.source_valid = Kokkos::View<int**, Layout, MemSpace>("decode_source_valid", b, ls);
  Kokkos::deep_copy(cache.source_valid, source_valid);
  const Index inner = config_.heads * config_.d_head;
  const std::size_t layers = decoder_.size();
  cache.cross_k.resize(layers);
  cache.cross_v.resize(layers);
  cache.self_k.resize(layers);
  cache.self_v.resize(layers);
  for (std::size_t i = 0; i < layers; ++i) {
    ensure_view(cache.cross_k[i], "decode_cross_k", b, ls, inner);
    ensure_view(cache.cross_v[i], "decode_cross_v", b, ls, inner);
    ensure_view(cache.self_k[i], "decode_self_k", b, capacity, inner);
    ensure_view(cache.self_v[i], "decode_self_v", b, capacity, inner);
    decoder_[i]->project_memory(cache.memory, cache.cross_k[i], cache.cross_v[i]);
  }
}

template <class T>
void EncoderDecoder<T>::decode_step(Kokkos::View<const int*, Layout, MemSpace> tokens,
                                    DecodeCache<T>& cache, View2<T> out) const {
  const char* op = "EncoderDecoder::decode_step";
  require<ConfigError>(cache.length < cache.capacity, op, ": the cache holds ", cache.length,
                       " positions, its capacity; start decoding with a larger capacity");
  require<ShapeError>(
      Index(tokens.extent(0)) == cache.batch && Index(out.extent(0)) == cache.batch &&
          Index(out.extent(1)) == config_.target_vocab,
      op, ": tokens ", shape_string(tokens), " and log_probs ", shape_string(out), " must be [",
      cache.batch, "] and [", cache.batch, ", ", config_.target_vocab, "]");
  ops::require_ids_in_range(op, "tokens", tokens, config_.target_vocab);
  const Index b = cache.batch, d = config_.d_model;
  Workspace::Frame frame(cache.workspace);
  auto x = frame.take<View2<T>>(b, d);
  // The embedding of position `length`, then every layer at that position.
  ops::token_embedding_forward<T>(target_embedding_->matrix(), tokens, true, x,
                                  ops::IdCheck::AlreadyChecked);
  if (target_positions_)
    ops::learned_positions_forward<T>(x, target_positions_->matrix(), 1, cache.length, x);
  else
    ops::sinusoidal_positions_forward<T>(x, 1, cache.length, x);
  // Both streams start as the embedding (one view for the one-stream decoder).
  View2<T> x2 = x;
  if (config_.reversible) {
    x2 = frame.take<View2<T>>(b, d);
    Kokkos::deep_copy(x2, x);
  }
  for (std::size_t i = 0; i < decoder_.size(); ++i)
    decoder_[i]->step(x, x2, cache.self_k[i], cache.self_v[i], cache.length, cache.cross_k[i],
                      cache.cross_v[i], cache.source_valid, cache.workspace);
  if (config_.reversible)  // the streams' average
    ops::axpby<T>(T(0.5), as_vector(x2), T(0.5), as_vector(x));
  head_log_probs(x, out, cache.workspace);
  ++cache.length;
}

template <class T>
void EncoderDecoder<T>::reorder(DecodeCache<T>& cache,
                                Kokkos::View<const int*, Layout, MemSpace> order) const {
  require<ShapeError>(Index(order.extent(0)) == cache.batch, "EncoderDecoder::reorder: order has ",
                      order.extent(0), " entries but the cache holds ", cache.batch, " sequences");
  auto gather = [&](View3<T>& slot) {
    View3<T> out(Kokkos::view_alloc(Kokkos::WithoutInitializing, slot.label()), slot.extent(0),
                 slot.extent(1), slot.extent(2));
    gather_rows<T>(slot, order, out);
    slot = out;
  };
  std::vector<View3<T>>* const groups[4] = {&cache.cross_k, &cache.cross_v, &cache.self_k,
                                            &cache.self_v};
  for (std::vector<View3<T>>* group : groups)
    for (auto& view : *group) gather(view);
  Kokkos::View<int**, Layout, MemSpace> valid("decode_source_valid", cache.batch,
                                              cache.source_length);
  gather_mask(cache.source_valid, order, valid);
  cache.source_valid = valid;
}

template <class T>
std::vector<std::vector<int>> EncoderDecoder<T>::greedy(IdMatrix source, MaskMatrix source_valid,
                                                        int start, int end,
                                                        Index max_length) const {
  const char* op = "EncoderDecoder::greedy";
  const int special[2] = {start, end};
  for (const int id : special)
    require<ConfigError>(id >= 0 && id < config_.target_vocab, op, ": the start and end ids (",
                         start, ", ", end, ") must be in the target vocabulary [0, ",
                         config_.target_vocab, ")");
  const Index rows = source.extent(0), vocab = config_.target_vocab;
  DecodeCache<T> cache;
  start_decoding(source, source_valid, max_length, cache);
  Kokkos::View<int*, Layout, MemSpace> tokens("greedy_tokens", rows);
  auto tokens_host = Kokkos::create_mirror_view(tokens);
  View2<T> step_lp("greedy_log_probs", rows, vocab);
  auto lp_host = Kokkos::create_mirror_view(step_lp);
  std::vector<std::vector<int>> out(static_cast<std::size_t>(rows));
  std::vector<bool> ended(static_cast<std::size_t>(rows), false);
  for (Index r = 0; r < rows; ++r) tokens_host(r) = start;
  for (Index t = 0; t < max_length; ++t) {
    Kokkos::deep_copy(tokens, tokens_host);
    decode_step(tokens, cache, step_lp);
    Kokkos::deep_copy(lp_host, step_lp);
    for (Index r = 0; r < rows; ++r) {
      if (ended[std::size_t(r)]) continue;
      Index best = 0;  // the lowest id among equal maxima
      for (Index v = 1; v < vocab; ++v)
        if (lp_host(r, v) > lp_host(r, best)) best = v;
      out[std::size_t(r)].push_back(int(best));
      tokens_host(r) = int(best);
      ended[std::size_t(r)] = best == end;
    }
    if (std::all_of(ended.begin(), ended.end(), [](bool x) { return x; })) break;
  }
  return out;
}

template <class T>
std::vector<std::vector<int>> EncoderDecoder<T>::beam_search(IdMatrix source,
                                                             MaskMatrix source_valid, int start,
                                                             int end, Index max_length,
                                                             const BeamOptions& options) const {
  const char* op = "EncoderDecoder::beam_search";
  require<ConfigError>(options.beam >= 1 && options.beam <= 1024, op, ": beam is ", options.beam,
                       " but must be in [1, 1024]");
  require<ConfigError>(std::isfinite(options.length_penalty) && options.length_penalty >= 0, op,
                       ": length_penalty is ", options.length_penalty,
                       " but must be finite and >= 0");
  const int special[2] = {start, end};
  for (const int id : special)
    require<ConfigError>(id >= 0 && id < config_.target_vocab, op, ": the start and end ids (",
                         start, ", ", end, ") must be in the target vocabulary [0, ",
                         config_.target_vocab, ")");
  const Index sources = source.extent(0), ls = source.extent(1), k = options.beam;
  const Index rows = sources * k, vocab = config_.target_vocab;
  // Every source repeated `beam` times: rows b * k .. b * k + k - 1.
  Kokkos::View<int**, Layout, MemSpace> ids("beam_source", rows, ls);
  Kokkos::View<int**, Layout, MemSpace> valid("beam_source_valid", rows, ls);
  {
    Kokkos::View<int*, Layout, MemSpace> repeat("beam_repeat", rows);
    auto h = Kokkos::create_mirror_view(repeat);
    for (Index r = 0; r < rows; ++r) h(r) = int(r / k);
    Kokkos::deep_copy(repeat, h);
    Kokkos::parallel_for(
        "beam_repeat_sources", matrix_policy(rows, ls), KOKKOS_LAMBDA(Index r, Index j) {
          ids(r, j) = source(repeat(r), j);
          valid(r, j) = source_valid(repeat(r), j);
        });
  }
  DecodeCache<T> cache;
  start_decoding(ids, valid, max_length, cache);

  const double minus_inf = -std::numeric_limits<double>::infinity();
  std::vector<double> score(std::size_t(rows), minus_inf);
  std::vector<std::vector<int>> alive(static_cast<std::size_t>(rows));
  for (Index b = 0; b < sources; ++b) score[std::size_t(b * k)] = 0.0;  // one beam to start
  struct Finished {
    double normalised;
    std::vector<int> tokens;
  };
  std::vector<std::vector<Finished>> finished(static_cast<std::size_t>(sources));
  std::vector<bool> done(std::size_t(sources), false);
  Kokkos::View<int*, Layout, MemSpace> tokens("beam_tokens", rows), order("beam_order", rows);
  auto tokens_host = Kokkos::create_mirror_view(tokens);
  auto order_host = Kokkos::create_mirror_view(order);
  for (Index r = 0; r < rows; ++r) tokens_host(r) = start;
  View2<T> step_lp("beam_log_probs", rows, vocab);
  auto lp_host = Kokkos::create_mirror_view(step_lp);
  std::vector<std::pair<double, Index>> candidates;

  for (Index t = 0; t < max_length; ++t) {
    Kokkos::deep_copy(tokens, tokens_host);
    decode_step(tokens, cache, step_lp);
    Kokkos::deep_copy(lp_host, step_lp);
    std::vector<double> next_score(std::size_t(rows), minus_inf);
    std::vector<std::vector<int>> next_alive(static_cast<std::size_t>(rows));
    for (Index b = 0; b < sources; ++b) {
      for (Index j = 0; j < k; ++j) {
        order_host(b * k + j) = int(b * k + j);
        tokens_host(b * k + j) = end;
      }
      if (done[std::size_t(b)]) continue;
      // The 2k best (beam, token) extensions of this source's beams.
      candidates.clear();
      for (Index j = 0; j < k; ++j) {
        const double base = score[std::size_t(b * k + j)];
        if (base == minus_inf) continue;
        for (Index v = 0; v < vocab; ++v)
          candidates.emplace_back(base + double(lp_host(b * k + j, v)), j * vocab + v);
      }
      const std::size_t keep = std::min<std::size_t>(candidates.size(), std::size_t(2 * k));
      std::partial_sort(candidates.begin(), candidates.begin() + keep, candidates.end(),
                        [](const auto& x, const auto& y) {
                          return x.first > y.first || (x.first == y.first && x.second < y.second);
                        });
      Index kept = 0;
      for (std::size_t rank = 0; rank < keep && kept < k; ++rank) {
        const Index from = candidates[rank].second / vocab;
        const int token = int(candidates[rank].second % vocab);
        auto hypothesis = alive[std::size_t(b * k + from)];
        hypothesis.push_back(token);
        if (token == end) {
          // An ended hypothesis counts when it ranks among the k best (so that
          // beam 1 stops where greedy decoding does).
          if (Index(rank) < k)
            finished[std::size_t(b)].push_back(
                {candidates[rank].first /
                     length_penalty(Index(hypothesis.size()), options.length_penalty),
                 hypothesis});
          continue;
        }
        const Index row = b * k + kept;
        next_score[std::size_t(row)] = candidates[rank].first;
        next_alive[std::size_t(row)] = std::move(hypothesis);
        order_host(row) = int(b * k + from);
        tokens_host(row) = token;
        ++kept;
      }
      // Early stop: k hypotheses ended.
      if (Index(finished[std::size_t(b)].size()) >= k || kept == 0) done[std::size_t(b)] = true;
    }
    score = std::move(next_score);
    alive = std::move(next_alive);
    if (std::all_of(done.begin(), done.end(), [](bool x) { return x; })) break;
    if (t + 1 < max_length) {
      Kokkos::deep_copy(order, order_host);
      reorder(cache, order);
    }
  }
  std::vector<std::vector<int>> out(static_cast<std::size_t>(sources));
  for (Index b = 0; b < sources; ++b) {
    double best = minus_inf;
    for (const auto& f : finished[std::size_t(b)])
      if (f.normalised > best) {
        best = f.normalised;
        out[std::size_t(b)] = f.tokens;
      }
    if (best == minus_inf)  // nothing ended within max_length: the best beam
      for (Index j = 0; j < k; ++j) {
        const double s = score[std::size_t(b * k + j)];
        if (s == minus_inf) continue;
        const double n =
            s / length_penalty(Index(alive[std::size_t(b * k + j)].size()), options.length_penalty);
        if (n > best) {
          best = n;
          out[std::size_t(b)] = alive[std::size_t(b * k + j)];
        }
      }
  }
  return out;
}

#define REFORMER_INSTANTIATE(T)                                                                    \
  template void EncoderDecoder<T>::start_decoding(IdMatrix, MaskMatrix, Index, DecodeCache<T>&)    \
      const;                                                                                       \
  template void EncoderDecoder<T>::decode_step(Kokkos::View<const int*, Layout, MemSpace>,         \
                                               DecodeCache<T>&, View2<T>) const;                   \
  template void EncoderDecoder<T>::reorder(DecodeCache<T>&,                                        \
                                           Kokkos::View<const int*, Layout, MemSpace>) const;      \
  template std::vector<std::vector<int>> EncoderDecoder<T>::greedy(IdMatrix, MaskMatrix, int, int, \
                                                                   Index) const;                   \
  template std::vector<std::vector<int>> EncoderDecoder<T>::beam_search(                           \
      IdMatrix, MaskMatrix, int, int, Index, const BeamOptions&) const;
REFORMER_INSTANTIATE_FLOAT_AND_DOUBLE(REFORMER_INSTANTIATE)

}  // namespace reformer::models
