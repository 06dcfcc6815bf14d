// Exact (memory-efficient) attention against the materialised full attention:
// the same outputs and gradients (1e-12 in double, 1e-5 norm-wise in float)
// with every mask, cross-attention, shared q/k and dropout; finite-difference
// gradients; memory that never holds an L x L matrix; clear errors.
#include "reformer/attention/attention_layer.hpp"
#include "reformer/attention/exact.hpp"
#include "reformer/attention/full.hpp"
#include "reformer/core/error.hpp"
#include "reformer/core/memory_tracker.hpp"
#include "reformer/core/tile_multiply.hpp"
#include "reformer/core/workspace.hpp"
#include "support/attention_reference.hpp"
#include "support/checks.hpp"
#include "support/chunk_settings.hpp"
#include "support/gradcheck.hpp"
#include "support/kernel_settings.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

namespace reformer {
namespace {

using namespace reformer::testing;
using attention::AttentionCall;
using attention::ExactAttentionConfig;
using attention::FullAttentionConfig;

template <class T>
struct Grads {
  std::vector<double> out, dq, dk, dv;
};

// One problem, solved by full and by exact attention.
template <class T>
struct ExactCase {
  Index batch, lq, lk, heads, d;
  bool self_mask = false;
  AttentionCall call;
  attention::ExactBackwardSchedule schedule = attention::ExactBackwardSchedule::Auto;
  Workspace workspace;
  View4<T> q, k, v, r, out, dq, dk, dv;
  View3<T> lse;
  Kokkos::View<int**, Layout, MemSpace> valid;

  ExactCase(Index batch_, Index lq_, Index lk_, Index heads_, Index d_, bool causal)
      : batch(batch_), lq(lq_), lk(lk_), heads(heads_), d(d_) {
    call.masks.causal = causal;
    q = View4<T>("q", batch, lq, heads, d);
    k = View4<T>("k", batch, lk, heads, d);
    v = View4<T>("v", batch, lk, heads, d);
    r = View4<T>("r", batch, lq, heads, d);
    out = View4<T>("out", batch, lq, heads, d);
    dq = View4<T>("dq", batch, lq, heads, d);
    dk = View4<T>("dk", batch, lk, heads, d);
    dv = View4<T>("dv", batch, lk, heads, d);
    lse = View3<T>("lse", batch, lq, heads);
    valid = Kokkos::View<int**, Layout, MemSpace>("valid", batch, lk);
    // Scores of a few units, so that the softmax is far from uniform.
    fill_uniform(q, 1, -2, 2);
    fill_uniform(k, 2, -2, 2);
    fill_uniform(v, 3);
    fill_uniform(r, 4);
  }
  void pad(const std::vector<std::pair<int, int>>& padded) {
    mark_padding(valid, padded);
    call.masks.key_valid = valid;
  }
  // Shared q/k: keys are the queries (the layer's shared projection).
  void share_qk() {
    self_mask = true;
    k = q;
  }
  ExactAttentionConfig exact_config() const {
    ExactAttentionConfig c;
    c.self_mask = self_mask;
    return c;
  }
  double exact_loss() {
    attention::exact_attention_forward<T>(q, k, v, exact_config(), call, out, lse, workspace);
    return dot(out, r);
  }
  Grads<T> exact() {
    exact_loss();
    Grads<T> g;
    g.out = to_host(out);
    attention::exact_attention_backward<T>(q, k, v, out, lse, r, exact_config(), call, dq, dk, dv,
                                           workspace, schedule);
    g.dq = to_host(dq);
    g.dk = to_host(dk);
    g.dv = to_host(dv);
    return g;
  }
  Grads<T> full() {
    FullAttentionConfig c;
    c.self_mask = self_mask;
    attention::FullAttentionSaved<T> saved;
    View4<T> o("o", batch, lq, heads, d), gq("gq", batch, lq, heads, d),
        gk("gk", batch, lk, heads, d), gv("gv", batch, lk, heads, d);
    attention::full_attention_forward<T>(q, k, v, c, call, o, saved, workspace);
    attention::full_attention_backward<T>(q, k, v, saved, r, c, call, gq, gk, gv, workspace);
    return {to_host(o), to_host(gq), to_host(gk), to_host(gv)};
  }
};

template <class T>
void expect_same(const Grads<T>& a, const Grads<T>& b, double tolerance, const std::string& what) {
  EXPECT_LT(relative_error(a.out, b.out), tolerance) << what << ": out";
  EXPECT_LT(relative_error(a.dq, b.dq), tolerance) << what << ": dq";
  EXPECT_LT(relative_error(a.dk, b.dk), tolerance) << what << ": dk";
  EXPECT_LT(relative_error(a.dv, b.dv), tolerance) << what << ": dv";
}

constexpr Index kQueryTile = TileTraits<double>::query_tile;

// Lengths around the tile size: shorter, not a multiple, a multiple.
std::vector<Index> test_lengths() {
  return {5, kQueryTile + 13, 2 * kQueryTile, 2 * kQueryTile + 1};
}

TEST(ExactAttention, MatchesFullAttentionInDouble) {
  for (Index length : test_lengths())
    for (bool causal : {false, true})
      for (Index d : {Index(16), Index(5)}) {
        ExactCase<double> c(2, length, length, 2, d, causal);
        const std::string what =
            "L " + std::to_string(length) + (causal ? " causal" : "") + " d " + std::to_string(d);
        expect_same(c.exact(), c.full(), 1e-12, what);
      }
}

// Both backward schedules (one team per key tile and one per query tile, or
// one team per (batch, head) in one pass) give full attention's gradients,
// with every option: padding, causal, dropout, shared q/k, cross-attention,
// head sizes that need padded columns (5) and that do not (16, 64: streamed
// tiles are then read in place).
TEST(ExactAttention, BothBackwardSchedulesMatchFullAttention) {
  using attention::ExactBackwardSchedule;
  for (auto schedule : {ExactBackwardSchedule::OnePass, ExactBackwardSchedule::TwoPass}) {
    const std::string name = schedule == ExactBackwardSchedule::OnePass ? "one pass" : "two passes";
    for (bool causal : {false, true})
      for (Index d : {Index(5), Index(16)}) {
        ExactCase<double> c(2, 2 * kQueryTile + 3, 2 * kQueryTile + 3, 3, d, causal);
        c.schedule = schedule;
        c.pad({{0, 2}, {1, 40}});
        c.call.dropout = {0.2, {3, 4}};
        expect_same(c.exact(), c.full(), 1e-12,
                    name + (causal ? " causal" : "") + " d " + std::to_string(d));
      }
    ExactCase<double> shared(1, kQueryTile + 9, kQueryTile + 9, 2, 8, true);
    shared.schedule = schedule;
    shared.share_qk();
    expect_same(shared.exact(), shared.full(), 1e-12, name + " shared q/k");
    ExactCase<double> cross(2, 70, kQueryTile + 50, 2, 16, false);
    cross.schedule = schedule;
    cross.pad({{1, 3}});
    expect_same(cross.exact(), cross.full(), 1e-12, name + " cross");
    ExactCase<float> single(1, 300, 300, 2, 64, true);
    single.schedule = schedule;
    expect_same(single.exact(), single.full(), 1e-5, name + " float");
  }
}

// One problem of the loop and tiling checks below.
struct LoopCase {
  Index lq, lk, d;
  bool causal, padded, shared;
  double dropout;
};

// Solves s (double, batch 2, 2 heads) by rows and by elements in the
// process's tiling: the same bits in out, lse and every gradient, and full
// attention's results to 1e-12.
void expect_elements_equal_rows(const LoopCase& s, attention::ExactBackwardSchedule schedule,
                                const std::string& prefix) {
  const std::string what =
      prefix + "Lq " + std::to_string(s.lq) + " Lk " + std::to_string(s.lk) + " d " +
      std::to_string(s.d) + (s.causal ? " causal" : "") + (s.padded ? " padded" : "") +
      (s.shared ? " shared" : "") + " dropout " + std::to_string(s.dropout) +
      (schedule == attention::ExactBackwardSchedule::OnePass ? " one pass" : "");
  ExactCase<double> c(2, s.lq, s.lk, 2, s.d, s.causal);
  c.schedule = schedule;
  if (s.shared) c.share_qk();
  if (s.padded) c.pad({{0, 2}, {1, int(s.lk) - 1}, {1, 0}});
  c.call.dropout = {s.dropout, {3, 4}};
  Grads<double> rows, elements;
  {
    const ScopedTileLoops loops(TileLoops::rows);
    rows = c.exact();
  }
  const auto rows_lse = to_host(c.lse);
  {
    const ScopedTileLoops loops(TileLoops::elements);
    elements = c.exact();
  }
  EXPECT_EQ(elements.out, rows.out) << what;
  EXPECT_EQ(to_host(c.lse), rows_lse) << what;
  EXPECT_EQ(elements.dq, rows.dq) << what;
  EXPECT_EQ(elements.dk, rows.dk) << what;
  EXPECT_EQ(elements.dv, rows.dv) << what;
  expect_same(elements, c.full(), 1e-12, what);
}

// A thread per element in the passes inside tiles (TileLoops::elements, the
// GPUs' default) gives the same bits as a thread per row (the host's), in the
// forward (out and lse) and in both backward schedules, with every mask,
// dropout, shared q/k, cross-attention and head sizes read in place (16) or
// padded (5); and full attention's results.
TEST(ExactAttention, ElementLoopsGiveTheSameBitsAsRowLoops) {
  using attention::ExactBackwardSchedule;
  const Index n = 2 * kQueryTile + 3;
  for (auto schedule : {ExactBackwardSchedule::OnePass, ExactBackwardSchedule::TwoPass})
    for (const LoopCase& s :
         std::vector<LoopCase>{{n, n, 16, true, false, false, 0.0},
                               {n, n, 5, true, true, false, 0.2},
                               {n, n, 16, false, true, false, 0.0},
                               {kQueryTile + 9, kQueryTile + 9, 8, true, false, true, 0.0},
                               {70, kQueryTile + 50, 16, false, true, false, 0.1},
                               {9, 9, 4, true, false, false, 0.0}})
      expect_elements_equal_rows(s, schedule, "");
  ExactCase<float> single(1, 300, 300, 2, 64, true);
  single.schedule = ExactBackwardSchedule::TwoPass;
  const auto rows = single.exact();
  ScopedTileLoops loops(TileLoops::elements);
  const auto elements = single.exact();
  EXPECT_EQ(elements.out, rows.out);
  EXPECT_EQ(elements.dq, rows.dq);
  EXPECT_EQ(elements.dk, rows.dk);
  EXPECT_EQ(elements.dv, rows.dv);
}

// The GPU tilings (ExactTiles::gpu: 16 x 16 tiles and 1 x 4 blocks;
// gpu_wide: a 32 x 32 forward with 4 x 4 blocks, backward passes of 16 x 16
// and 32 x 16 tiles with 2 x 4 blocks) run here as on a GPU: full attention's
// results with every mask, dropout, shared q/k, cross-attention, head sizes
// padded to whole blocks (5, 6) or not, lengths that are not whole tiles, both
// backward schedules; and within a tiling, rows and elements give the same
// bits.
TEST(ExactAttention, GpuTilingsMatchFullAttention) {
  using attention::ExactBackwardSchedule;
  const Index n = 2 * GpuTarget::wide_forward_tile + 3;
  for (ExactTiles tiles : {ExactTiles::gpu, ExactTiles::gpu_wide}) {
    const ScopedExactTiles scoped(tiles);
    for (auto schedule : {ExactBackwardSchedule::OnePass, ExactBackwardSchedule::TwoPass})
      for (const LoopCase& s : std::vector<LoopCase>{{n, n, 16, true, false, false, 0.0},
                                                     {n, n, 5, true, true, false, 0.2},
                                                     {n, n, 6, false, true, false, 0.0},
                                                     {45, 45, 8, true, false, true, 0.0},
                                                     {40, 100, 16, false, true, false, 0.1},
                                                     {9, 9, 4, true, false, false, 0.0}})
        expect_elements_equal_rows(s, schedule, std::string(exact_tiles_name(tiles)) + " ");
    // float, d_head 64: K and V rows read in place.
    ExactCase<float> single(1, 300, 300, 2, 64, true);
    single.schedule = ExactBackwardSchedule::TwoPass;
    expect_same(single.exact(), single.full(), 1e-5,
                std::string(exact_tiles_name(tiles)) + " float");
  }
}

// The batched shape (ExactProducts::batched: slices of query rows, every
// head at once, strided-batched products on the tensors in place, the GPUs'
// alternative to the fused kernels) against the fused kernels and full
// attention, in double, with every mask (causal, padding with rows that see
// only padding, shared q/k), dropout, cross-attention and custom scales; with
// every query row in one slice, one row per slice and slices of five rows (the
// last one partial); and its gradients against finite differences. float32
// to 1e-5. The workspace it takes is what exact_batched_bytes predicts.
TEST(ExactAttention, BatchedShapeMatchesFusedKernelsFullAttentionAndFiniteDifferences) {
  using attention::ExactProducts;
  const Index n = 2 * kQueryTile + 3;
  for (const LoopCase& s : std::vector<LoopCase>{{n, n, 16, true, false, false, 0.0},
                                                 {n, n, 5, true, true, false, 0.2},
                                                 {n, n, 6, false, true, false, 0.0},
                                                 {45, 45, 8, true, false, true, 0.0},
                                                 {40, 100, 16, false, true, false, 0.1},
                                                 {9, 9, 4, true, false, false, 0.0}}) {
    const std::string what = "Lq " + std::to_string(s.lq) + " Lk " + std::to_string(s.lk) + " d " +
                             std::to_string(s.d) + (s.causal ? " causal" : "") +
                             (s.padded ? " padded" : "") + (s.shared ? " shared" : "") +
                             " dropout " + std::to_string(s.dropout);
    ExactCase<double> c(2, s.lq, s.lk, 2, s.d, s.causal);
    if (s.shared) c.share_qk();
    if (s.padded) c.pad({{0, 2}, {1, int(s.lk) - 1}, {1, 0}, {0, 0}, {0, 1}});
    c.call.dropout = {s.dropout, {3, 4}};
    const auto fused = c.exact();
    const auto fused_lse = to_host(c.lse);
    const ScopedExactProducts batched(ExactProducts::batched);
    for (const std::size_t rows : {std::size_t(1), std::size_t(5), std::size_t(1000)}) {
      // A budget of `rows` query rows of scores and score gradients.
      const ScopedChunkSlice slice(rows * 2 * 2 * s.lk * sizeof(double));
      Kokkos::deep_copy(c.out, 7.0);
      Kokkos::deep_copy(c.dq, 7.0);
      const auto g = c.exact();
      const std::string at = what + ", slices of " + std::to_string(rows) + " rows";
      expect_same(g, fused, 1e-12, at);
      EXPECT_LT(relative_error(to_host(c.lse), fused_lse), 1e-12) << at;
    }
    expect_same(c.exact(), c.full(), 1e-12, what + " against full attention");
  }
  const ScopedExactProducts batched(ExactProducts::batched);
  for (const bool causal : {false, true}) {
    ExactCase<double> c(2, 11, 11, 2, 3, causal);
    c.pad({{1, 9}, {1, 10}});
    c.call.dropout = {0.1, {5, 6}};
    const ScopedChunkSlice slice(4 * 2 * 2 * 11 * sizeof(double));
    c.exact();
    auto loss = [&] { return c.exact_loss(); };
    EXPECT_LT(gradient_error(c.q, c.dq, loss), 1e-6) << causal;
    EXPECT_LT(gradient_error(c.k, c.dk, loss), 1e-6) << causal;
    EXPECT_LT(gradient_error(c.v, c.dv, loss), 1e-6) << causal;
  }
  ExactCase<double> scaled(1, 30, 30, 3, 8, true);
  const auto fused_scaled = [&] {
    const ScopedExactProducts fused(ExactProducts::fused);
    return scaled.exact();
  }();
  expect_same(scaled.exact(), fused_scaled, 1e-12, "3 heads");
  ExactCase<float> single(1, 300, 300, 2, 64, true);
  expect_same(single.exact(), single.full(), 1e-5, "float");
  // The workspace: 2 heads, 300 rows of 300 keys (and their gradients) fit
  // the default budget; the forward takes the backward's buffer.
  const auto bytes = attention::exact_batched_bytes(2, 300, 300, sizeof(float), false,
                                                    attention::chunk_slice_budget());
  EXPECT_EQ(bytes.backward, std::size_t(2) * 2 * 300 * 300 * sizeof(float));
  EXPECT_EQ(bytes.forward, bytes.backward);
  // 7 rows of scores forward, 3 of scores and gradients backward.
  const auto limited = attention::exact_batched_bytes(2, 300, 300, sizeof(float), false,
                                                      7 * 2 * 300 * sizeof(float));
  EXPECT_EQ(limited.forward, std::size_t(7) * 2 * 300 * sizeof(float));
  EXPECT_EQ(limited.backward, limited.forward);
  EXPECT_EQ(attention::exact_batched_bytes(2, 300, 300, sizeof(float), true, 1 << 20).forward, 0u);
  const ScopedExactProducts fused(ExactProducts::fused);
  EXPECT_EQ(attention::exact_batched_bytes(2, 300, 300, sizeof(float), false, 1 << 20).backward,
            0u);
}

// What each tiling asks of its kernels: the GPU tilings' tiles fit the level-0
// scratch of a GPU team at d_head 64 (so no level-1 pool) and their sizes are
// GpuTarget's; the cpu tiling has TileTraits' and is refused by GPU builds,
// as is an unknown tiling by name.
TEST(ExactAttention, TilingsAndTheirScratch) {
  for (ExactTiles tiles : {ExactTiles::gpu, ExactTiles::gpu_wide}) {
    const auto info = attention::exact_tiling_info(tiles, 64);
    for (const auto* k : {&info.forward, &info.keys, &info.queries}) {
      EXPECT_LE(k->scratch_bytes, kLevel0ScratchBytes) << exact_tiles_name(tiles);
      EXPECT_GT(k->scratch_bytes, size_t(0)) << exact_tiles_name(tiles);
      EXPECT_EQ(k->block_cols, GpuTarget::block_cols);
    }
  }
  const auto small = attention::exact_tiling_info(ExactTiles::gpu, 64);
  EXPECT_EQ(small.forward.queries, GpuTarget::exact_tile);
  EXPECT_EQ(small.queries.keys, GpuTarget::exact_tile);
  EXPECT_EQ(small.forward.block_rows, GpuTarget::exact_block_rows);
  const auto wide = attention::exact_tiling_info(ExactTiles::gpu_wide, 64);
  EXPECT_EQ(wide.forward.queries, GpuTarget::wide_forward_tile);
  EXPECT_EQ(wide.forward.keys, GpuTarget::wide_forward_tile);
  EXPECT_EQ(wide.forward.block_rows, GpuTarget::wide_forward_block_rows);
  EXPECT_EQ(wide.keys.keys, GpuTarget::wide_keys_key_tile);
  EXPECT_EQ(wide.queries.queries, GpuTarget::wide_queries_query_tile);
  EXPECT_EQ(wide.queries.block_rows, GpuTarget::wide_backward_block_rows);
  EXPECT_EQ(wide.team_size, GpuTarget::wide_team_size);
  // The wide forward holds 4x the scores of the small one.
  EXPECT_GT(wide.forward.scratch_bytes, small.forward.scratch_bytes);
  if (kHostMemory) {
    const auto cpu = attention::exact_tiling_info(ExactTiles::cpu, 64);
    EXPECT_EQ(cpu.forward.queries, TileTraits<float>::query_tile);
    EXPECT_EQ(cpu.forward.block_rows, TileTraits<float>::block_rows);
    if (std::getenv("REFORMER_EXACT_TILES") == nullptr) EXPECT_EQ(exact_tiles(), ExactTiles::cpu);
  } else {
    EXPECT_THROW(attention::exact_tiling_info(ExactTiles::cpu, 64), ConfigError);
    EXPECT_THROW(set_exact_tiles(ExactTiles::cpu), ConfigError);
    if (std::getenv("REFORMER_EXACT_TILES") == nullptr) EXPECT_EQ(exact_tiles(), ExactTiles::gpu);
  }
}

// Auto takes one pass where the (batch, head) pairs fill the host threads
// evenly, or are at least four per thread, and two passes elsewhere.
TEST(ExactAttention, BackwardScheduleChoice) {
  using attention::exact_backward_one_pass;
  using attention::ExactBackwardSchedule;
  EXPECT_EQ(exact_backward_one_pass(4, 2), kHostMemory);
  EXPECT_EQ(exact_backward_one_pass(1, 1), kHostMemory);
  EXPECT_EQ(exact_backward_one_pass(17, 4), kHostMemory);
  EXPECT_FALSE(exact_backward_one_pass(3, 2));
  EXPECT_FALSE(exact_backward_one_pass(2, 4));
  EXPECT_FALSE(exact_backward_one_pass(6, 4));
  EXPECT_TRUE(exact_backward_one_pass(3, 2, ExactBackwardSchedule::OnePass));
  EXPECT_FALSE(exact_backward_one_pass(4, 2, ExactBackwardSchedule::TwoPass));
}

// The logsumexp saved for backward is that of the dense reference.
TEST(ExactAttention, SavesTheRowLogsumexp) {
  const Index length = kQueryTile + 7;
  ExactCase<double> c(1, length, length, 2, 4, true);
  c.exact_loss();
  std::vector<double> lse_ref;
  Dims dm{1, length, 2, 4};
  auto rule = [](long, long, long i, long j) {
    return j > i ? RefScore{RefScore::Constant, -1e9} : RefScore{};
  };
  const auto out_ref =
      reference_attention(dm, to_host(c.q), to_host(c.k), to_host(c.v), 0.5, rule, &lse_ref);
  EXPECT_LT(relative_error(to_host(c.out), out_ref), 1e-12);
  EXPECT_LT(relative_error(to_host(c.lse), lse_ref), 1e-12);
}

// Padding everywhere a tile can see it: scattered keys, the last key, and a
// batch entry whose first 70 keys are padding (causal: those queries see only
// padding and attend uniformly to every key, as the mask constants say, across
// a tile boundary); without the causal mask, an entry whose every key is
// padding. Compared with full attention, except for causal rows of only
// padding longer than one tile: there full attention's triangular products
// skip blocks above the diagonal and so drop part of those rows' uniform
// weights; they are compared with the dense reference and finite differences.
TEST(ExactAttention, PaddingIncludingFullyPaddedRows) {
  for (Index length : {Index(9), 2 * kQueryTile + 5})
    for (bool causal : {false, true}) {
      ExactCase<double> c(2, length, length, 2, 8, causal);
      std::vector<std::pair<int, int>> padded{{0, 1}, {0, int(length) - 1}, {0, int(length) / 2}};
      const int lead = causal ? int(std::min<Index>(length - 2, 70)) : int(length);
      for (int i = 0; i < lead; ++i) padded.push_back({1, i});
      c.pad(padded);
      const auto exact = c.exact();
      const std::string what = "L " + std::to_string(length) + (causal ? " causal" : "");
      if (!causal || length <= kQueryTile) {
        expect_same(exact, c.full(), 1e-12, what);
      } else {
        auto hv = to_host(c.valid);
        auto rule = [&](long b, long, long i, long j) {
          if (j > i || hv[b * length + j] == 0) return RefScore{RefScore::Constant, -1e9};
          return RefScore{};
        };
        Dims dm{2, length, 2, 8};
        const auto ref = reference_attention(dm, to_host(c.q), to_host(c.k), to_host(c.v),
                                             1 / std::sqrt(8.0), rule);
        EXPECT_LT(relative_error(exact.out, ref), 1e-12) << what;
        auto loss = [&] { return c.exact_loss(); };
        EXPECT_LT(gradient_error(c.q, c.dq, loss), 1e-6) << what;
        EXPECT_LT(gradient_error(c.k, c.dk, loss), 1e-6) << what;
        EXPECT_LT(gradient_error(c.v, c.dv, loss), 1e-6) << what;
      }
      // The rows of only padding attend uniformly: out = mean of every v.
      const auto v = to_host(c.v);
      Dims dm{2, length, 2, 8};
      double mean = 0;
      for (Index j = 0; j < length; ++j) mean += v[dm.at(1, j, 1, 3)];
      EXPECT_NEAR(exact.out[dm.at(1, 0, 1, 3)], mean / double(length), 1e-12) << what;
    }
}

TEST(ExactAttention, MatchesFullAttentionInFloat) {
  for (bool causal : {false, true}) {
    ExactCase<float> c(1, 300, 300, 2, 64, causal);
    c.pad({{0, 7}, {0, 299}});
    expect_same(c.exact(), c.full(), 1e-5, causal ? "causal" : "non-causal");
  }
  ExactCase<float> cross(2, 70, 200, 2, 64, false);
  expect_same(cross.exact(), cross.full(), 1e-5, "cross");
}

TEST(ExactAttention, CrossAttentionWithOtherKeyLength) {
  for (auto [lq, lk] : std::vector<std::pair<Index, Index>>{{7, 150}, {150, 9}, {70, 70 + 64}}) {
    ExactCase<double> c(2, lq, lk, 2, 6, false);
    c.pad({{0, 3}, {1, int(lk) - 1}});
    expect_same(c.exact(), c.full(), 1e-12,
                "Lq " + std::to_string(lq) + " Lk " + std::to_string(lk));
  }
}

TEST(ExactAttention, SharedQueriesAndKeys) {
  for (bool causal : {false, true}) {
    ExactCase<double> c(2, kQueryTile + 9, kQueryTile + 9, 2, 8, causal);
    c.share_qk();
    c.pad({{1, 4}});
    expect_same(c.exact(), c.full(), 1e-12, causal ? "causal" : "non-causal");
  }
}

// Exact attention draws the dropout mask of full attention (score (bh, i, j)
// keeps the same counter), so forward and backward agree with it too.
TEST(ExactAttention, DropoutMatchesFullAttention) {
  for (bool causal : {false, true}) {
    ExactCase<double> c(2, kQueryTile + 30, kQueryTile + 30, 2, 8, causal);
    c.call.dropout = {0.3, {5, 9}};
    c.pad({{0, 2}});
    const auto exact = c.exact();
    expect_same(exact, c.full(), 1e-12, causal ? "causal" : "non-causal");
    // And dropout changed something.
    c.call.dropout.rate = 0;
    EXPECT_GT(relative_error(exact.out, c.full().out), 1e-3);
  }
}

// Central differences of loss = sum(out * r) in double, with every option on.
TEST(ExactAttention, GradientCheck) {
  struct Setting {
    bool causal, padded, shared;
    double dropout;
  };
  for (const Setting& s : std::vector<Setting>{
           {true, true, false, 0.2}, {false, true, false, 0.0}, {true, false, true, 0.2}}) {
    ExactCase<double> c(2, 70, 70, 2, 5, s.causal);
    if (s.shared) c.share_qk();
    if (s.padded) c.pad({{0, 3}, {1, 69}});
    c.call.dropout = {s.dropout, {3, 3}};
    c.exact();
    auto loss = [&] { return c.exact_loss(); };
    if (s.shared) {  // q is also k: its gradient is dq + dk
      auto dq = Kokkos::create_mirror_view_and_copy(HostSpace(), c.dq);
      auto dk = Kokkos::create_mirror_view_and_copy(HostSpace(), c.dk);
      for (std::size_t i = 0; i < dq.size(); ++i) dq.data()[i] += dk.data()[i];
      Kokkos::deep_copy(c.dq, dq);
    }
    EXPECT_LT(gradient_error(c.q, c.dq, loss), 1e-6) << s.causal << s.padded << s.shared;
    if (!s.shared) EXPECT_LT(gradient_error(c.k, c.dk, loss), 1e-6) << s.causal << s.padded;
    EXPECT_LT(gradient_error(c.v, c.dv, loss), 1e-6) << s.causal << s.padded << s.shared;
  }
  ExactCase<double> cross(1, 9, 75, 2, 4, false);
  cross.exact();
  auto loss = [&] { return cross.exact_loss(); };
  EXPECT_LT(gradient_error(cross.q, cross.dq, loss), 1e-6);
  EXPECT_LT(gradient_error(cross.k, cross.dk, loss), 1e-6);
  EXPECT_LT(gradient_error(cross.v, cross.dv, loss), 1e-6);
}

// Causal: key tiles wholly above the diagonal are never read. NaN keys and
// values there leave the first query tile's outputs and query gradients
// unchanged, bit for bit (a masked tile would multiply NaN by zero).
TEST(ExactAttention, CausalSkipsTilesAboveTheDiagonal) {
  constexpr Index tile = TileTraits<float>::query_tile;
  ASSERT_EQ(TileTraits<float>::key_tile, tile);
  ExactCase<float> c(1, 3 * tile, 3 * tile, 2, 16, true);
  const auto clean = c.exact();
  for (auto* view : {&c.k, &c.v}) {
    auto host = Kokkos::create_mirror_view_and_copy(HostSpace(), *view);
    for (Index j = tile; j < 3 * tile; ++j)
      for (Index h = 0; h < 2; ++h)
        for (Index x = 0; x < 16; ++x) host(0, j, h, x) = std::nanf("");
    Kokkos::deep_copy(*view, host);
  }
  const auto poisoned = c.exact();
  const Index first_tile_values = tile * 2 * 16;
  for (Index e = 0; e < first_tile_values; ++e) {
    ASSERT_EQ(poisoned.out[e], clean.out[e]) << e;
    ASSERT_EQ(poisoned.dq[e], clean.dq[e]) << e;
  }
  EXPECT_TRUE(std::isnan(poisoned.out[first_tile_values]));
}

// Forward + backward at L = 8192 never holds anything of size L x L: the
// tracker's peak stays below an eighth of one head's score matrix.
TEST(ExactAttention, MemoryIsLinearInLength) {
  const Index length = 8192, heads = 2, d = 16;
  auto& tracker = MemoryTracker::instance();
  ASSERT_TRUE(tracker.installed());
  const std::string space = MemSpace::name();
  View4<float> q("q", 1, length, heads, d), k("k", 1, length, heads, d),
      v("v", 1, length, heads, d), out("out", 1, length, heads, d), dq("dq", 1, length, heads, d),
      dk("dk", 1, length, heads, d), dv("dv", 1, length, heads, d);
  View3<float> lse("lse", 1, length, heads);
  fill_uniform(q, 1);
  fill_uniform(k, 2);
  fill_uniform(v, 3);
  Kokkos::fence();
  tracker.reset_peaks();
  const auto before = tracker.space(space).current_bytes;
  {
    Workspace workspace;
    AttentionCall call;
    call.masks.causal = true;
    attention::exact_attention_forward<float>(q, k, v, {}, call, out, lse, workspace);
    attention::exact_attention_backward<float>(q, k, v, out, lse, out, {}, call, dq, dk, dv,
                                               workspace);
    Kokkos::fence();
  }
  const double peak = double(tracker.space(space).peak_bytes - before);
  const double scores = double(length) * double(length) * sizeof(float);
  EXPECT_LT(peak, scores / 8) << "peak " << peak << " bytes";
  EXPECT_GT(peak, 0);  // the workspace was counted
  const auto host = to_host(dq);
  for (std::size_t i = 0; i < host.size(); i += 997) ASSERT_TRUE(std::isfinite(host[i])) << i;
}

TEST(ExactAttention, ClearErrors) {
  ExactCase<double> c(1, 8, 8, 2, 4, false);
  Workspace& w = c.workspace;
  View4<double> k3("k", 1, 8, 3, 4);
  expect_error<ShapeError>(
      [&] { attention::exact_attention_forward<double>(c.q, k3, k3, {}, c.call, c.out, c.lse, w); },
      {"exact_attention_forward", "q has 2 heads but k has 3"});
  View4<double> wide("wide", 1, 8, 2, 129), wide_out("wide_out", 1, 8, 2, 129);
  expect_error<ShapeError>(
      [&] {
        attention::exact_attention_forward<double>(wide, wide, wide, {}, c.call, wide_out, c.lse,
                                                   w);
      },
      {"d_head is 129", "at most 128"});
  ExactCase<double> cross(1, 8, 6, 2, 4, true);
  expect_error<ShapeError>(
      [&] { cross.exact_loss(); },
      {"causal or self masks need equal query and key lengths", "Lq = 8 and Lk = 6"});
  View3<double> bad_lse("lse", 1, 7, 2);
  expect_error<ShapeError>(
      [&] {
        attention::exact_attention_forward<double>(c.q, c.k, c.v, {}, c.call, c.out, bad_lse, w);
      },
      {"lse has shape [1, 7, 2]"});
  ExactAttentionConfig negative;
  negative.scale = -1;
  expect_error<ConfigError>(
      [&] {
        attention::exact_attention_forward<double>(c.q, c.k, c.v, negative, c.call, c.out, c.lse,
                                                   w);
      },
      {"scale is -1"});
  c.call.dropout.rate = 1.0;
  expect_error<ConfigError>([&] { c.exact_loss(); }, {"dropout rate is 1"});
}

// ---- The layer: exact and full attention layers with the same weights agree.

using attention::AttentionKind;
using attention::AttentionLayer;
using attention::AttentionLayerConfig;
using attention::AttentionState;

AttentionLayerConfig layer_config(AttentionKind kind) {
  AttentionLayerConfig c;
  c.kind = kind;
  c.d_model = 12;
  c.heads = 2;
  c.d_head = 6;
  c.causal = true;
  c.attention_dropout = 0.1;
  c.output_dropout = 0.1;
  return c;
}

struct LayerRun {
  std::vector<double> y, dx, dmemory, grads;
};

LayerRun run_layer(const AttentionLayerConfig& config, Index lq, Index lk, bool cross) {
  ParameterSet<double> params;
  AttentionLayer<double> layer("attn", config, params);
  layer.init({2, 5});
  View3<double> x("x", 2, lq, 12), memory("memory", 2, lk, 12), y("y", 2, lq, 12),
      dy("dy", 2, lq, 12), dx("dx", 2, lq, 12), dmemory("dmemory", 2, lk, 12);
  fill_uniform(x, 11);
  fill_uniform(memory, 12);
  fill_uniform(dy, 13);
  Kokkos::View<int**, Layout, MemSpace> valid("valid", 2, lk);
  mark_padding(valid, {{0, 1}, {1, int(lk) - 1}});
  AttentionState<double> state;
  Workspace workspace;
  attention::AttentionLayerCall call{{4, 4}, valid};
  params.zero_grad();
  if (cross) {
    layer.forward_cross(x, memory, y, call, state, workspace);
    layer.backward_cross(x, memory, dy, dx, dmemory, state, workspace);
  } else {
    layer.forward(x, y, call, state, workspace);
    layer.backward(x, dy, dx, state, workspace);
  }
  return {to_host(y), to_host(dx), to_host(dmemory), to_host(params.grads())};
}

void expect_same_layer(const LayerRun& a, const LayerRun& b, const std::string& what) {
  EXPECT_LT(relative_error(a.y, b.y), 1e-12) << what;
  EXPECT_LT(relative_error(a.dx, b.dx), 1e-12) << what;
  EXPECT_LT(relative_error(a.grads, b.grads), 1e-12) << what;
}

TEST(ExactAttentionLayer, SameAsFullAttentionLayer) {
  for (bool shared : {false, true}) {
    auto exact = layer_config(AttentionKind::Exact);
    auto full = layer_config(AttentionKind::Full);
    exact.shared_qk = full.shared_qk = shared;
    expect_same_layer(run_layer(exact, 75, 75, false), run_layer(full, 75, 75, false),
                      shared ? "shared qk" : "separate qk");
  }
  auto exact = layer_config(AttentionKind::Exact);
  auto full = layer_config(AttentionKind::Full);
  exact.causal = full.causal = false;
  const auto a = run_layer(exact, 9, 70, true), b = run_layer(full, 9, 70, true);
  expect_same_layer(a, b, "cross");
  EXPECT_LT(relative_error(a.dmemory, b.dmemory), 1e-12);
}

TEST(ExactAttentionLayer, ParsesAndNamesTheKind) {
  EXPECT_EQ(attention::parse_attention_kind("exact"), AttentionKind::Exact);
  EXPECT_EQ(std::string(attention::to_string(AttentionKind::Exact)), "exact");
  EXPECT_FALSE(layer_config(AttentionKind::Exact).shares_qk());
  auto config = layer_config(AttentionKind::Exact);
  config.d_head = 130;
  config.d_model = 260;
  ParameterSet<double> params;
  expect_error<ConfigError>([&] { AttentionLayer<double>("a", config, params); },
                            {"d_head is 130", "exact attention supports at most 128"});
}

}  // namespace
}  // namespace reformer
