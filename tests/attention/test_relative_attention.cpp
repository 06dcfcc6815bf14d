// Relative positional attention (Transformer-XL) against plain host loops:
// a per-(i, j) reference of the four-term score with the causal mask over
// [memory; segment], clamp_len and same_length written as the reference code
// writes them (triu/tril with its mask_shift_len), its forward and its
// gradients (1e-12 in double, 1e-5 in float); the reference's relative shift
// (pad, reshape, drop a row) on whole score matrices gives the same scores;
// finite-difference gradients of q, k, v, r, u and v; memory that never holds
// an L x (M + L) matrix; clear errors.
#include "reformer/attention/relative.hpp"
#include "reformer/core/error.hpp"
#include "reformer/core/memory_tracker.hpp"
#include "reformer/core/tile_multiply.hpp"
#include "reformer/core/workspace.hpp"
#include "reformer/ops/dropout.hpp"
#include "support/checks.hpp"
#include "support/gradcheck.hpp"
#include "support/kernel_settings.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

namespace reformer {
namespace {

using namespace reformer::testing;
using attention::AttentionDropout;
using attention::RelativeAttentionConfig;

struct Result {
  std::vector<double> out, lse, dq, dk, dv, dr, du, dbv;
};

// One problem: a segment of `length` queries over `memory` + `length` keys.
template <class T>
struct RelativeCase {
  Index batch, length, memory, heads, d, positions;
  RelativeAttentionConfig config;
  AttentionDropout dropout;
  Workspace workspace;
  View4<T> q, k, v, out, g, dq, dk, dv;
  View3<T> r, dr, lse;
  View2<T> u, bv, du, dbv;

  // extra_rows: r gets that many rows beyond the ones the kernel reads.
  RelativeCase(Index batch_, Index length_, Index memory_, Index heads_, Index d_,
               const RelativeAttentionConfig& config_, Index extra_rows = 0)
      : batch(batch_), length(length_), memory(memory_), heads(heads_), d(d_), config(config_) {
    positions = attention::relative_attention_positions(memory, length, config) + extra_rows;
    const Index keys = memory + length;
    q = View4<T>("q", batch, length, heads, d);
    k = View4<T>("k", batch, keys, heads, d);
    v = View4<T>("v", batch, keys, heads, d);
    out = View4<T>("out", batch, length, heads, d);
    g = View4<T>("g", batch, length, heads, d);
    dq = View4<T>("dq", batch, length, heads, d);
    dk = View4<T>("dk", batch, keys, heads, d);
    dv = View4<T>("dv", batch, keys, heads, d);
    r = View3<T>("r", positions, heads, d);
    dr = View3<T>("dr", positions, heads, d);
    lse = View3<T>("lse", batch, length, heads);
    u = View2<T>("u", heads, d);
    bv = View2<T>("bv", heads, d);
    du = View2<T>("du", heads, d);
    dbv = View2<T>("dbv", heads, d);
    // Scores of a few units, so that the softmax is far from uniform.
    fill_uniform(q, 1, -1.5, 1.5);
    fill_uniform(k, 2, -1.5, 1.5);
    fill_uniform(v, 3);
    fill_uniform(r, 4, -1.5, 1.5);
    fill_uniform(u, 5, -0.5, 0.5);
    fill_uniform(bv, 6, -0.5, 0.5);
    fill_uniform(g, 7);
  }
  double loss() {
    attention::relative_attention_forward<T>(q, k, v, r, u, bv, config, dropout, out, lse,
                                             workspace);
    return dot(out, g);
  }
  void backward() {
    attention::relative_attention_backward<T>(q, k, v, r, u, bv, out, lse, g, config, dropout, dq,
                                              dk, dv, dr, du, dbv, workspace);
  }
  Result run() {
    loss();
    backward();
    return {to_host(out), to_host(lse), to_host(dq), to_host(dk),
            to_host(dv),  to_host(dr),  to_host(du), to_host(dbv)};
  }
};

// The reference's mask (kimiyoung/transformer-xl, mem_transformer.py, in our
// words): key j is masked for query i when triu(ones(L, K), 1 + M) is set,
// i.e. j > i + M, or, with same_length, when tril(ones(L, K), -shift) is set,
// i.e. j <= i - shift, where shift = L - (K - mem_len) if K > mem_len, else L.
bool reference_masked(long i, long j, long length, long memory, const RelativeAttentionConfig& c) {
  const long keys = memory + length;
  if (j > i + memory) return true;
  if (!c.same_length) return false;
  const long mask_len = keys - long(c.mem_len);
  const long shift = mask_len > 0 ? length - mask_len : length;
  return j <= i - shift;
}

// The reference's row of the position encodings: distance M + i - j, clamped.
long reference_row(long i, long j, long memory, const RelativeAttentionConfig& c) {
  const long distance = memory + i - j;
  return c.clamp_len > 0 ? std::min(distance, long(c.clamp_len)) : distance;
}

// Plain loops over every (query, key) pair: the four terms
//   S_ij = scale ((q_i + u) . k_j + (q_i + v) . r_row(i, j)),
// softmax, dropout, values, and the gradients for dout = c.g.
template <class T>
Result reference(RelativeCase<T>& c) {
  const auto q = to_host(c.q), k = to_host(c.k), v = to_host(c.v), r = to_host(c.r);
  const auto u = to_host(c.u), bv = to_host(c.bv), g = to_host(c.g);
  const long B = c.batch, L = c.length, M = c.memory, K = M + L, H = c.heads, D = c.d;
  const double scale = 1.0 / std::sqrt(double(D));
  auto at_q = [&](long b, long i, long h) { return ((b * L + i) * H + h) * D; };
  auto at_k = [&](long b, long j, long h) { return ((b * K + j) * H + h) * D; };
  auto at_r = [&](long row, long h) { return (row * H + h) * D; };
  Result res;
  res.out.assign(q.size(), 0.0);
  res.dq.assign(q.size(), 0.0);
  res.lse.assign(B * L * H, 0.0);
  res.dk.assign(k.size(), 0.0);
  res.dv.assign(k.size(), 0.0);
  res.dr.assign(r.size(), 0.0);
  res.du.assign(u.size(), 0.0);
  res.dbv.assign(bv.size(), 0.0);
  for (long b = 0; b < B; ++b)
    for (long h = 0; h < H; ++h)
      for (long i = 0; i < L; ++i) {
        std::vector<long> keys;
        std::vector<double> scores, keep;
        for (long j = 0; j < K; ++j) {
          if (reference_masked(i, j, L, M, c.config)) continue;
          const long row = reference_row(i, j, M, c.config);
          double content = 0, position = 0;
          for (long x = 0; x < D; ++x) {
            content += (q[at_q(b, i, h) + x] + u[h * D + x]) * k[at_k(b, j, h) + x];
            position += (q[at_q(b, i, h) + x] + bv[h * D + x]) * r[at_r(row, h) + x];
          }
          keys.push_back(j);
          scores.push_back(scale * (content + position));
          double kept = 1;
          if (c.dropout.rate > 0) {
            const std::uint64_t index = ((std::uint64_t(b) * H + h) * L + i) * K + j;
            kept = ops::dropout_keeps(c.dropout.key, index, c.dropout.rate)
                       ? 1.0 / (1.0 - c.dropout.rate)
                       : 0.0;
          }
          keep.push_back(kept);
        }
        const double m = *std::max_element(scores.begin(), scores.end());
        double sum = 0;
        for (double s : scores) sum += std::exp(s - m);
        const double lse = m + std::log(sum);
        res.lse[(b * L + i) * H + h] = lse;
        std::vector<double> p(keys.size());
        for (size_t n = 0; n < keys.size(); ++n) {
          p[n] = std::exp(scores[n] - lse);
          for (long x = 0; x < D; ++x)
            res.out[at_q(b, i, h) + x] += p[n] * keep[n] * v[at_k(b, keys[n], h) + x];
        }
        double delta = 0;
        for (long x = 0; x < D; ++x) delta += g[at_q(b, i, h) + x] * res.out[at_q(b, i, h) + x];
        for (size_t n = 0; n < keys.size(); ++n) {
          const long j = keys[n], row = reference_row(i, j, M, c.config);
          double dp = 0;
          for (long x = 0; x < D; ++x) dp += g[at_q(b, i, h) + x] * v[at_k(b, j, h) + x];
          const double ds = scale * p[n] * (keep[n] * dp - delta);
          for (long x = 0; x < D; ++x) {
            const double qx = q[at_q(b, i, h) + x], kx = k[at_k(b, j, h) + x];
            const double rx = r[at_r(row, h) + x];
            res.dq[at_q(b, i, h) + x] += ds * (kx + rx);
            res.dk[at_k(b, j, h) + x] += ds * (qx + u[h * D + x]);
            res.dv[at_k(b, j, h) + x] += p[n] * keep[n] * g[at_q(b, i, h) + x];
            res.dr[at_r(row, h) + x] += ds * (qx + bv[h * D + x]);
            res.du[h * D + x] += ds * kx;
            res.dbv[h * D + x] += ds * rx;
          }
        }
      }
  return res;
}

void expect_same(const Result& a, const Result& b, double tolerance, const std::string& what) {
  EXPECT_LT(relative_error(a.out, b.out), tolerance) << what << ": out";
  EXPECT_LT(relative_error(a.lse, b.lse), tolerance) << what << ": lse";
  EXPECT_LT(relative_error(a.dq, b.dq), tolerance) << what << ": dq";
  EXPECT_LT(relative_error(a.dk, b.dk), tolerance) << what << ": dk";
  EXPECT_LT(relative_error(a.dv, b.dv), tolerance) << what << ": dv";
  EXPECT_LT(relative_error(a.dr, b.dr), tolerance) << what << ": dr";
  EXPECT_LT(relative_error(a.du, b.du), tolerance) << what << ": du";
  EXPECT_LT(relative_error(a.dbv, b.dbv), tolerance) << what << ": dv_bias";
}

constexpr Index kTile = TileTraits<double>::query_tile;

// The options of one comparison.
struct Variant {
  const char* name;
  Index clamp_len;
  bool same_length;
  Index mem_len;  // with same_length; -1: the call's memory length M (3 without memory)
  double dropout;
};

std::vector<Variant> variants() {
  return {{"plain", 0, false, 0, 0.0},
          {"clamp_len 7", 7, false, 0, 0.0},
          {"same_length mem_len M", 0, true, -1, 0.0},
          {"same_length mem_len 10", 0, true, 10, 0.0},
          {"dropout", 0, false, 0, 0.25},
          {"same_length + clamp_len 5 + dropout", 5, true, 12, 0.2}};
}

// Lengths (queries, memory) around the tile size: shorter than a tile, no
// memory, a memory that is not a multiple of the tile, longer than a tile.
TEST(RelativeAttention, MatchesPerPairReferenceInDouble) {
  const std::vector<std::pair<Index, Index>> shapes = {
      {5, 0}, {6, 4}, {kTile + 13, 0}, {kTile + 13, 37}, {2 * kTile + 1, kTile + 5}};
  for (const auto& shape : shapes)
    for (const Variant& variant : variants())
      for (Index d : {Index(5), Index(16)}) {
        const Index length = shape.first, memory = shape.second;
        RelativeAttentionConfig config;
        config.clamp_len = variant.clamp_len;
        config.same_length = variant.same_length;
        // mem_len 1 (M = 0) would leave every query one key and zero gradients.
        config.mem_len = variant.mem_len >= 0 ? variant.mem_len : memory > 0 ? memory : 3;
        RelativeCase<double> c(2, length, memory, 2, d, config, /*extra_rows=*/2);
        c.dropout = {variant.dropout, {11, 12}};
        const std::string what = std::string(variant.name) + " L " + std::to_string(length) +
                                 " M " + std::to_string(memory) + " d " + std::to_string(d);
        expect_same(c.run(), reference(c), 1e-12, what);
      }
}

// The forward's online softmax with a thread per element (TileLoops::elements,
// the GPUs' default) gives the bits of a thread per row (the host's).
TEST(RelativeAttention, ElementLoopsGiveTheSameBitsAsRowLoops) {
  for (const Variant& variant : variants()) {
    RelativeAttentionConfig config;
    config.clamp_len = variant.clamp_len;
    config.same_length = variant.same_length;
    config.mem_len = variant.mem_len >= 0 ? variant.mem_len : kTile + 5;
    RelativeCase<double> c(2, 2 * kTile + 1, kTile + 5, 2, 5, config, /*extra_rows=*/2);
    c.dropout = {variant.dropout, {11, 12}};
    const ScopedTileLoops rows(TileLoops::rows);
    const Result by_rows = c.run();
    const ScopedTileLoops elements(TileLoops::elements);
    const Result by_elements = c.run();
    EXPECT_EQ(by_elements.out, by_rows.out) << variant.name;
    EXPECT_EQ(by_elements.lse, by_rows.lse) << variant.name;
    EXPECT_EQ(by_elements.dq, by_rows.dq) << variant.name;
    EXPECT_EQ(by_elements.dr, by_rows.dr) << variant.name;
  }
}

TEST(RelativeAttention, MatchesPerPairReferenceInFloat) {
  RelativeAttentionConfig config;
  config.clamp_len = 150;
  RelativeCase<float> c(1, 200, 100, 2, 64, config);
  c.dropout = {0.1, {3, 4}};
  expect_same(c.run(), reference(c), 1e-5, "float");
  config.same_length = true;
  config.mem_len = 120;
  RelativeCase<float> s(2, 150, 120, 1, 32, config);
  expect_same(s.run(), reference(s), 1e-5, "float same_length");
}

// The reference computes the position term for every (query, encoding row)
// pair, BD [L, K] with row p the encoding of distance K - 1 - p, and shifts
// it: pad a zero column in front, read the [L, K + 1] buffer as [K + 1, L],
// drop its first row and read the rest as [L, K]. Entry (i, j) is then the
// term of distance M + i - j wherever j <= i + M (the rest is masked). Here
// that shift, on whole host matrices, against the per-pair terms, and the
// kernel's logsumexp against the one of the shifted scores.
TEST(RelativeAttention, RelativeShiftEqualsPerPairTerms) {
  for (Index memory : {Index(0), Index(3), Index(kTile + 2)}) {
    RelativeAttentionConfig config;
    config.clamp_len = memory > 10 ? 50 : 0;
    const Index length = 9 + memory / 2, keys = memory + length, heads = 2, d = 6;
    RelativeCase<double> c(1, length, memory, heads, d, config);
    c.loss();
    const auto q = to_host(c.q), k = to_host(c.k), r = to_host(c.r);
    const auto u = to_host(c.u), bv = to_host(c.bv), lse = to_host(c.lse);
    const double scale = 1.0 / std::sqrt(double(d));
    double worst_term = 0, worst_lse = 0;
    for (long h = 0; h < heads; ++h) {
      // BD[i][p] = (q_i + v) . r(distance K - 1 - p, clamped), then the shift.
      std::vector<double> bd(length * keys), padded(length * (keys + 1), 0.0);
      for (long i = 0; i < length; ++i)
        for (long p = 0; p < keys; ++p) {
          long distance = keys - 1 - p;
          if (config.clamp_len > 0) distance = std::min(distance, long(config.clamp_len));
          double sum = 0;
          for (long x = 0; x < d; ++x)
            sum += (q[(i * heads + h) * d + x] + bv[h * d + x]) * r[(distance * heads + h) * d + x];
          bd[i * keys + p] = sum;
          padded[i * (keys + 1) + 1 + p] = sum;
        }
      // Dropping the first `length` values of the flat buffer is dropping the
      // first row of its [K + 1, L] reading.
      const std::vector<double> shifted(padded.begin() + length,
                                        padded.begin() + length + length * keys);
      for (long i = 0; i < length; ++i) {
        double m = -1e300, sum = 0;
        std::vector<double> scores;
        for (long j = 0; j <= i + memory; ++j) {
          const long row = reference_row(i, j, memory, config);
          double per_pair = 0, content = 0;
          for (long x = 0; x < d; ++x) {
            per_pair += (q[(i * heads + h) * d + x] + bv[h * d + x]) * r[(row * heads + h) * d + x];
            content += (q[(i * heads + h) * d + x] + u[h * d + x]) * k[(j * heads + h) * d + x];
          }
          worst_term = std::max(worst_term, std::fabs(shifted[i * keys + j] - per_pair));
          scores.push_back(scale * (content + shifted[i * keys + j]));
          m = std::max(m, scores.back());
        }
        for (double s : scores) sum += std::exp(s - m);
        worst_lse = std::max(worst_lse, std::fabs(m + std::log(sum) - lse[i * heads + h]));
      }
    }
    EXPECT_LT(worst_term, 1e-14) << "M " << memory;
    EXPECT_LT(worst_lse, 1e-12) << "M " << memory;
  }
}

// Finite differences in double for every input, with memory, clamp_len,
// same_length and dropout (a fixed key), and once across a tile boundary.
TEST(RelativeAttention, GradientsMatchFiniteDifferences) {
  struct GradCase {
    const char* name;
    Index length, memory, clamp_len;
    bool same_length;
    Index mem_len;
    double dropout;
  };
  const std::vector<GradCase> cases = {{"memory", 9, 6, 0, false, 0, 0.0},
                                       {"clamp_len", 9, 6, 3, false, 0, 0.0},
                                       {"same_length", 9, 6, 0, true, 5, 0.0},
                                       {"same_length mem_len M", 9, 6, 0, true, 6, 0.0},
                                       {"dropout", 9, 6, 0, false, 0, 0.3},
                                       {"all", 9, 6, 4, true, 7, 0.3},
                                       {"across a tile", kTile + 3, 5, 0, false, 0, 0.0}};
  for (const auto& gc : cases) {
    RelativeAttentionConfig config;
    config.clamp_len = gc.clamp_len;
    config.same_length = gc.same_length;
    config.mem_len = gc.mem_len;
    const Index batch = gc.length > kTile ? 1 : 2;
    RelativeCase<double> c(batch, gc.length, gc.memory, 2, 4, config);
    c.dropout = {gc.dropout, {21, 22}};
    c.run();
    auto loss = [&] { return c.loss(); };
    EXPECT_LT(gradient_error(c.q, c.dq, loss), 1e-6) << gc.name << ": q";
    EXPECT_LT(gradient_error(c.k, c.dk, loss), 1e-6) << gc.name << ": k";
    EXPECT_LT(gradient_error(c.v, c.dv, loss), 1e-6) << gc.name << ": v";
    EXPECT_LT(gradient_error(c.r, c.dr, loss), 1e-6) << gc.name << ": r";
    EXPECT_LT(gradient_error(c.u, c.du, loss), 1e-6) << gc.name << ": u";
    EXPECT_LT(gradient_error(c.bv, c.dbv, loss), 1e-6) << gc.name << ": v bias";
  }
}

// The rows of r the kernels read.
TEST(RelativeAttention, PositionsInUse) {
  using attention::relative_attention_positions;
  RelativeAttentionConfig c;
  EXPECT_EQ(relative_attention_positions(0, 8, c), 8);
  EXPECT_EQ(relative_attention_positions(16, 8, c), 24);
  c.clamp_len = 10;
  EXPECT_EQ(relative_attention_positions(16, 8, c), 11);
  EXPECT_EQ(relative_attention_positions(0, 8, c), 8);
  c.clamp_len = 0;
  c.same_length = true;
  c.mem_len = 16;
  EXPECT_EQ(relative_attention_positions(16, 8, c), 16);
  EXPECT_EQ(relative_attention_positions(4, 8, c), 12);
  c.clamp_len = 5;
  EXPECT_EQ(relative_attention_positions(16, 8, c), 6);
}

// Forward + backward with L = M = 2048 never hold anything of size
// L x (M + L): the tracker's peak stays below an eighth of one head's scores.
TEST(RelativeAttention, MemoryIsLinearInLength) {
  const Index length = 2048, memory = 2048, heads = 2, d = 16, keys = memory + length;
  auto& tracker = MemoryTracker::instance();
  ASSERT_TRUE(tracker.installed());
  const std::string space = MemSpace::name();
  RelativeAttentionConfig config;
  RelativeCase<float> c(1, length, memory, heads, d, config);
  Kokkos::fence();
  tracker.reset_peaks();
  const auto before = tracker.space(space).current_bytes;
  {
    Workspace workspace;
    attention::relative_attention_forward<float>(c.q, c.k, c.v, c.r, c.u, c.bv, config, {}, c.out,
                                                 c.lse, workspace);
    attention::relative_attention_backward<float>(c.q, c.k, c.v, c.r, c.u, c.bv, c.out, c.lse, c.g,
                                                  config, {}, c.dq, c.dk, c.dv, c.dr, c.du, c.dbv,
                                                  workspace);
    Kokkos::fence();
  }
  const double peak = double(tracker.space(space).peak_bytes - before);
  const double scores = double(length) * double(keys) * sizeof(float);
  EXPECT_LT(peak, scores / 8) << "peak " << peak << " bytes";
  EXPECT_GT(peak, 0);  // the workspace was counted
  const std::vector<std::vector<double>> grads = {to_host(c.dq), to_host(c.dk), to_host(c.dr)};
  for (const auto& grad : grads)
    for (std::size_t i = 0; i < grad.size(); i += 997) ASSERT_TRUE(std::isfinite(grad[i])) << i;
}

// Decoding reads its keys where the cache holds them: k and v of a larger
// capacity, of which the call names the first `keys` positions, give the
// output and logsumexps of the call on exactly those positions, bit for bit,
// for several batch rows; the positions past them are NaN and never read.
TEST(RelativeAttention, LiveKeysOfALargerCacheEqualTheCallOnThem) {
  RelativeAttentionConfig same_length;
  same_length.same_length = true;
  same_length.mem_len = 6;
  RelativeAttentionConfig clamped;
  clamped.clamp_len = 4;
  for (const auto& config : {RelativeAttentionConfig{}, same_length, clamped})
    for (const Index length : {1, 5}) {
      const Index batch = 3, memory = 7, heads = 2, d = 8, keys = memory + length;
      const Index capacity = keys + 9;
      RelativeCase<double> c(batch, length, memory, heads, d, config);
      c.loss();
      View4<double> kc("k_cache", batch, capacity, heads, d),
          vc("v_cache", batch, capacity, heads, d);
      auto hk = Kokkos::create_mirror_view(kc), hv = Kokkos::create_mirror_view(vc);
      auto k = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), c.k);
      auto v = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), c.v);
      for (Index b = 0; b < batch; ++b)
        for (Index j = 0; j < capacity; ++j)
          for (Index h = 0; h < heads; ++h)
            for (Index e = 0; e < d; ++e) {
              hk(b, j, h, e) = j < keys ? k(b, j, h, e) : std::nan("");
              hv(b, j, h, e) = j < keys ? v(b, j, h, e) : std::nan("");
            }
      Kokkos::deep_copy(kc, hk);
      Kokkos::deep_copy(vc, hv);
      View4<double> out("out", batch, length, heads, d);
      View3<double> lse("lse", batch, length, heads);
      attention::relative_attention_forward<double>(c.q, kc, vc, c.r, c.u, c.bv, config, {}, out,
                                                    lse, c.workspace, keys);
      const auto want = to_host(c.out), got = to_host(out);
      const auto want_lse = to_host(c.lse), got_lse = to_host(lse);
      for (std::size_t i = 0; i < want.size(); ++i)
        ASSERT_EQ(got[i], want[i]) << "out element " << i << ", length " << length;
      for (std::size_t i = 0; i < want_lse.size(); ++i)
        ASSERT_EQ(got_lse[i], want_lse[i]) << "lse element " << i << ", length " << length;
      // More keys than the cache holds, or fewer than the queries: refused.
      expect_error<ShapeError>(
          [&] {
            attention::relative_attention_forward<double>(c.q, kc, vc, c.r, c.u, c.bv, config, {},
                                                          out, lse, c.workspace, capacity + 1);
          },
          {"keys is " + std::to_string(capacity + 1),
           "k and v hold " + std::to_string(capacity) + " positions"});
      expect_error<ShapeError>(
          [&] {
            attention::relative_attention_forward<double>(c.q, kc, vc, c.r, c.u, c.bv, config, {},
                                                          out, lse, c.workspace, length - 1);
          },
          {"k and v have length " + std::to_string(length - 1), "M + " + std::to_string(length)});
    }
}

TEST(RelativeAttention, ClearErrors) {
  RelativeAttentionConfig config;
  RelativeCase<double> c(2, 8, 4, 2, 4, config);
  Workspace& w = c.workspace;
  auto forward = [&](const View4<double>& q, const View4<double>& k, const View3<double>& r,
                     const View2<double>& u, const RelativeAttentionConfig& cfg) {
    attention::relative_attention_forward<double>(q, k, k, r, u, c.bv, cfg, c.dropout, c.out, c.lse,
                                                  w);
  };
  // Memory (and segment) keys of another batch.
  View4<double> other_batch("k", 3, 12, 2, 4);
  expect_error<ShapeError>([&] { forward(c.q, other_batch, c.r, c.u, config); },
                           {"relative_attention_forward", "batch 3", "q has batch 2"});
  View4<double> short_k("k", 2, 6, 2, 4);
  expect_error<ShapeError>([&] { forward(c.q, short_k, c.r, c.u, config); },
                           {"k and v have length 6", "M + 8"});
  View4<double> k3("k", 2, 12, 3, 4);
  expect_error<ShapeError>([&] { forward(c.q, k3, c.r, c.u, config); },
                           {"q has 2 heads but k has 3"});
  View3<double> few("r", 11, 2, 4), wrong_heads("r", 12, 3, 4);
  expect_error<ShapeError>([&] { forward(c.q, c.k, few, c.u, config); },
                           {"r has shape [11, 2, 4]", "positions >= 12"});
  expect_error<ShapeError>([&] { forward(c.q, c.k, wrong_heads, c.u, config); },
                           {"r has shape [12, 3, 4]", "[positions >= 12, 2, 4]"});
  View2<double> bad_u("u", 2, 5);
  expect_error<ShapeError>([&] { forward(c.q, c.k, c.r, bad_u, config); },
                           {"bias_u has shape [2, 5]", "[2, 4]"});
  View4<double> wide("wide", 2, 8, 2, 129), wide_k("wide_k", 2, 12, 2, 129);
  View3<double> wide_r("wide_r", 12, 2, 129);
  View2<double> wide_u("wide_u", 2, 129);
  expect_error<ShapeError>([&] { forward(wide, wide_k, wide_r, wide_u, config); },
                           {"d_head is 129", "at most 128"});
  RelativeAttentionConfig bad;
  bad.clamp_len = -2;
  expect_error<ConfigError>([&] { forward(c.q, c.k, c.r, c.u, bad); }, {"clamp_len is -2"});
  bad.clamp_len = 0;
  bad.same_length = true;
  expect_error<ConfigError>([&] { forward(c.q, c.k, c.r, c.u, bad); },
                            {"same_length is set but mem_len is 0"});
  bad.same_length = false;
  bad.scale = -1;
  expect_error<ConfigError>([&] { forward(c.q, c.k, c.r, c.u, bad); }, {"scale is -1"});
  c.dropout.rate = 1.0;
  expect_error<ConfigError>([&] { c.loss(); }, {"dropout rate is 1"});
  c.dropout.rate = 0.0;
  c.loss();
  View3<double> dr_wrong("dr", 13, 2, 4);
  expect_error<ShapeError>(
      [&] {
        attention::relative_attention_backward<double>(c.q, c.k, c.v, c.r, c.u, c.bv, c.out, c.lse,
                                                       c.g, config, c.dropout, c.dq, c.dk, c.dv,
                                                       dr_wrong, c.du, c.dbv, w);
      },
      {"relative_attention_backward", "dr"});
}

}  // namespace
}  // namespace reformer
