#include "reformer/attention/lsh.hpp"

#include "reformer/attention/shared_qk.hpp"

#include "attention/attention_checks.hpp"
#include "attention/chunked_kernels.hpp"
#include "reformer/core/instantiate.hpp"

#include <algorithm>
#include <cmath>

namespace reformer::attention {
namespace {

using IntView2 = Kokkos::View<int**, Layout, MemSpace>;
using IntView3 = Kokkos::View<int***, Layout, MemSpace>;
constexpr Index kMaxHashes = 64;
// Automatic bucket counts above this are split into two factors (trax).
constexpr Index kMaxUnfactorisedBuckets = 128;

// The chunk actually used: a sequence shorter than the chunk is one chunk.
Index effective_chunk(const LshAttentionConfig& config, Index length) {
  return lsh_chunk_geometry(config, length).chunk;
}

void check_length(const char* op, const LshAttentionConfig& config, Index length) {
  config.validate();
  detail::check_chunking(op, length, effective_chunk(config, length));
}

// The bucket of one item from its projections p = x R (width columns: the
// factors' n_buckets / 2 each, in order): argmax over [p ; -p] per factor,
// combined as h1 + b1 * h2.
template <class C>
KOKKOS_INLINE_FUNCTION int combined_bucket(const C* p, Index factors, Index b1, Index b2) {
  Index combined = 0, stride = 1, column = 0;
  for (Index f = 0; f < factors; ++f) {
    const Index nb = f == 0 ? b1 : b2, half = nb / 2;
    C best = p[column];
    Index arg = 0;
    for (Index c = 0; c < half; ++c) {
      if (p[column + c] > best) best = p[column + c], arg = c;
      if (-p[column + c] > best) best = -p[column + c], arg = c + half;
    }
    combined += arg * stride;
    stride *= nb;
    column += half;
  }
  return int(combined);
}

// Buckets of every (batch, position, head, round) (combined_bucket). Padding
// positions get bucket n_buckets.
// One team hashes kRows positions of one (batch, head, round): the rotation
// [d_head, width] and the projections [kRows, width] live in scratch.
// `elements` (TileLoops::elements, the GPUs' default): the team's threads
// take the loads and the projections' sums an element each, neighbouring
// threads on neighbouring columns, the rows staged in scratch; else a thread
// takes a row and its projection loop runs over contiguous rotation columns,
// so that it vectorises (the host's default). The sums are added in another
// order, so the two agree on every bucket but a near-tie's.
template <class T>
struct HashKernel {
  using C = compute_t<T>;
  static constexpr Index kRows = 32;
  Kokkos::View<const T****, Layout, MemSpace> qk;
  Kokkos::View<const C****, Layout, MemSpace> rot;
  Kokkos::View<const int**, Layout, MemSpace> key_valid;
  IntView2 buckets;
  Index length, heads, rounds, d_head, width, factors, b1, b2;
  bool elements = false;
  int level = 0;

  Index row_blocks() const { return (length + kRows - 1) / kRows; }
  size_t scratch_bytes() const {
    return ScratchMatrix<C>::shmem_size(d_head, width) +
           ScratchMatrix<C>::shmem_size(kRows, width) +
           (elements ? ScratchMatrix<C>::shmem_size(kRows, d_head) : 0);
  }

  KOKKOS_INLINE_FUNCTION void operator()(const TeamMember& team) const {
    const Index blocks = (length + kRows - 1) / kRows;
    const Index block = team.league_rank() % blocks, r = team.league_rank() / blocks % rounds;
    const Index bh = team.league_rank() / (blocks * rounds), b = bh / heads, h = bh % heads;
    const Index first = block * kRows, rows = first + kRows < length ? kRows : length - first;
    const auto scratch = team.team_scratch(level);
    ScratchMatrix<C> rt(scratch, d_head, width), proj(scratch, kRows, width);
    const auto padding = [&](Index row) {
      return key_valid.extent(0) && key_valid(b, first + row) == 0;
    };
    if (elements) {
      ScratchMatrix<C> q(scratch, kRows, d_head);
      Kokkos::parallel_for(Kokkos::TeamThreadRange(team, d_head * width), [&](Index e) {
        rt(e / width, e % width) = rot(h, e / width, r, e % width);
      });
      Kokkos::parallel_for(Kokkos::TeamThreadRange(team, rows * d_head), [&](Index e) {
        q(e / d_head, e % d_head) = load(qk(b, first + e / d_head, h, e % d_head));
      });
      team.team_barrier();
      Kokkos::parallel_for(Kokkos::TeamThreadRange(team, rows * width), [&](Index e) {
        const Index row = e / width, c = e % width;
        C sum = 0;
        for (Index d = 0; d < d_head; ++d) sum += q(row, d) * rt(d, c);
        proj(row, c) = sum;
      });
      team.team_barrier();
    } else {
      Kokkos::parallel_for(Kokkos::TeamThreadRange(team, d_head), [&](Index d) {
        for (Index c = 0; c < width; ++c) rt(d, c) = rot(h, d, r, c);
      });
      team.team_barrier();
      Kokkos::parallel_for(Kokkos::TeamThreadRange(team, rows), [&](Index row) {
        if (padding(row)) return;
        C* p = &proj(row, 0);
        for (Index c = 0; c < width; ++c) p[c] = 0;
        accumulate_rows(p, &rt(0, 0), width, &qk(b, first + row, h, 0), 1, d_head, width);
      });
    }
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, rows), [&](Index row) {
      buckets(bh, r * length + first + row) =
          padding(row) ? int(b1 * b2) : combined_bucket(&proj(row, 0), factors, b1, b2);
    });
  }
};

// Stable counting sort of the items of every (batch*head, round) "row" by
// bucket, parallel within each row: the row's positions are cut into blocks;
//  1. each block counts its buckets:        counts(row, bucket, block);
//  2. an exclusive scan over (bucket, block) gives every block's first slot in
//     every bucket (buckets in order, blocks in position order);
//  3. each block places its items in position order from those slots.
// Equal buckets keep position order, so the sort is stable and its result does
// not depend on the number of threads or blocks.
// Round r of row bh holds its items at (bh, r * stride + i), in buckets, perm
// and undo alike: stride = length for a plan, the cache's capacity for the
// cached step, whose rows hold n_b = last(b) + 1 items (b = bh / heads; all
// `length` when last is empty) and whose ranks(bh, r) get the rank of the last
// item (the query).
struct SortPass {
  Kokkos::View<const int**, Layout, MemSpace> buckets;
  IntView2 perm, undo;  // undo may be empty
  IntView3 counts;      // [rows, bins, blocks]: the scan runs over contiguous memory
  Index length, rounds, bins, blocks, block_size, stride, heads;
  Kokkos::View<const Index*, Layout, MemSpace> last;  // empty: every row holds `length`
  IntView2 ranks;                                     // empty: not asked for

  struct Count {};
  struct Scatter {};

  // The items of batch row b.
  KOKKOS_INLINE_FUNCTION Index items_of(Index b) const {
    return last.extent(0) ? last(b) + 1 : length;
  }
  // Items before row `row` over all rows (each holds items_of(its b)).
  KOKKOS_INLINE_FUNCTION Index row_start(Index row) const {
    if (last.extent(0) == 0) return row * length;
    const Index per_batch = heads * rounds, b = row / per_batch;
    Index before = 0;
    for (Index x = 0; x < b; ++x) before += (last(x) + 1) * per_batch;
    return before + (row - b * per_batch) * (last(b) + 1);
  }
  KOKKOS_INLINE_FUNCTION void items(Index idx, Index& bh, Index& r, Index& row, Index& blk,
                                    Index& begin, Index& end) const {
    row = idx / blocks;
    blk = idx % blocks;
    bh = row / rounds;
    r = row % rounds;
    const Index n = items_of(bh / heads);
    begin = blk * block_size;
    end = begin + block_size < n ? begin + block_size : n;
  }
  // Raw pointers and local copies keep the loops' bounds and strides in
  // registers (an int store could alias a view's int fields: the loops were
  // 8-14% slower through the views).
  KOKKOS_INLINE_FUNCTION void operator()(Count, Index idx) const {
    Index bh, r, row, blk, begin, end;
    items(idx, bh, r, row, blk, begin, end);
    int* c = &counts(row, 0, blk);
    const Index cs = Index(counts.stride(1)), nb = bins;
    const int* bucket = &buckets(bh, r * stride);
    for (Index k = 0; k < nb; ++k) c[k * cs] = 0;
    for (Index i = begin; i < end; ++i) c[bucket[i] * cs] += 1;
  }
  KOKKOS_INLINE_FUNCTION void operator()(Scatter, Index idx) const {
    Index bh, r, row, blk, begin, end;
    items(idx, bh, r, row, blk, begin, end);
    int* c = &counts(row, 0, blk);
    const Index cs = Index(counts.stride(1));
    const int* bucket = &buckets(bh, r * stride);
    int* order = &perm(bh, 0);
    int* inverse = undo.extent(0) ? &undo(bh, r * stride) : nullptr;
    // The query's rank is its bucket's next slot when its turn comes (split
    // loops: a test inside the loop made the step 15-25% slower on 2 cores).
    const Index query = ranks.extent(0) ? items_of(bh / heads) - 1 : -1;
    const Index mid = begin <= query && query < end ? query : end;
    for (Index i = begin; i < mid; ++i) {
      const int s = c[bucket[i] * cs]++;
      order[s] = int(i);
      if (inverse != nullptr) inverse[i] = s;
    }
    if (mid < end) ranks(bh, r) = int(c[bucket[mid] * cs] - r * stride);
    for (Index i = mid; i < end; ++i) {
      const int s = c[bucket[i] * cs]++;
      order[s] = int(i);
      if (inverse != nullptr) inverse[i] = s;
    }
  }
  // One block per row: the row's count, scan and placement in one thread.
  struct Whole {};
  KOKKOS_INLINE_FUNCTION void operator()(Whole, Index row) const {
    (*this)(Count(), row);
    int* c = &counts(row, 0, 0);
    const Index cs = Index(counts.stride(1)), nb = bins;
    int sum = int(row % rounds * stride);
    for (Index k = 0; k < nb; ++k) {
      const int n = c[k * cs];
      c[k * cs] = sum;
      sum += n;
    }
    (*this)(Scatter(), row);
  }
  // Launches the passes (counts holds rows x bins x blocks): one with a block
  // per row, else three.
  void run() const {
    const Index rows = Index(counts.extent(0));
    if (blocks == 1) {
      Kokkos::parallel_for("lsh_sort_rows",
                           Kokkos::RangePolicy<ExecSpace, SortPass::Whole, LaunchHint>(0, rows),
                           *this);
      return;
    }
    Kokkos::parallel_for(
        "lsh_sort_count",
        Kokkos::RangePolicy<ExecSpace, SortPass::Count, LaunchHint>(0, rows * blocks), *this);
    // One exclusive scan over every row's (bucket, block) counts, in place: a
    // row's counts add up to its items (each is in one bucket), so the scan
    // reaches row `row` at row_start(row), and the round's sorted items start
    // at r * stride. (A team per row scanned its 16K counts in 450 us on an
    // H200 at 16K positions; the device-wide scan takes all rows at once.)
    int* c = counts.data();
    const Index per_row = bins * blocks;
    const SortPass pass = *this;
    Kokkos::parallel_scan(
        "lsh_sort_scan", range(rows * per_row), KOKKOS_LAMBDA(Index k, Index & sum, bool final) {
          const int n = c[k];
          const Index row = k / per_row;
          if (final) c[k] = int(sum - pass.row_start(row) + row % pass.rounds * pass.stride);
          sum += n;
        });
    Kokkos::parallel_for(
        "lsh_sort_scatter",
        Kokkos::RangePolicy<ExecSpace, SortPass::Scatter, LaunchHint>(0, rows * blocks), *this);
  }
};

// Blocks of positions per row of the sort: on the host, blocks of at least
// 2048 positions, at most 64 per row. GPUs: blocks of at least 256 positions,
// with at most 2^18 counts per row (a thread walks its block serially: 2048
// positions took 0.8 ms on an H200), so the counts stay small while every row
// has many threads.
Index sort_blocks(Index length, Index bins) {
  return kHostMemory ? std::max<Index>(1, std::min<Index>(64, length / 2048))
                     : std::max<Index>(1, std::min<Index>(length / 256, (Index(1) << 18) / bins));
}

// Cached LSH decoding (lsh_attention_step), in three steps:
//  0. with rotations, the query is hashed (a team per (batch, head), the
//     `Hash` pass) and its buckets written at its position;
//  1. every round's n = t + 1 cached buckets are counting-sorted stably by
//     SortPass over all (batch, head, round) rows at once (blocks of positions
//     count, one device-wide scan, the blocks place their positions; the
//     query's rank noted): the serial stable sort's order, whatever the number
//     of blocks. (A team per (batch, head) sorted alone: 4 teams on an H200's
//     132 multiprocessors, 57% of a cached token's time at 4K.)
//  2. a team per (batch, head): per round the query's window (its chunk and `reach` chunks before
//  it in
//     the cycle of rounds) is scored, threads over keys and lanes over d_head,
//     and reduced to lse_r = log sum_j exp(s_j).
//  3. out = sum_r sum_j exp(s_j - LSE) v_j, LSE = logsumexp_r lse_r: one softmax
//     over the union of the windows, threads over blocks of d_head.
// A team of one thread runs the serial algorithm in the same order.
template <class T>
struct StepKernel {
  Kokkos::View<const T***, Layout, MemSpace> q, keys, values;
  Kokkos::View<const Index*, Layout, MemSpace> positions;
  View3<T> out, scores;  // scores [bh, rounds, window], then the softmax weights
  IntView3 perm, slots;  // perm [bh, rounds, capacity]: each round's sorted positions
  IntView2 ranks;        // the query's rank in every round's order
  Index heads, dh, rounds, chunk, n_before;
  // With rotations [heads, d_head, rounds, width]: the Hash pass hashes the
  // query (as lsh_hash does, the same bits) and writes its buckets at its
  // position into query_buckets, the cache's buckets; projections [bh, rounds
  // * width] is the hashing's scratch. Empty: the buckets are there.
  Kokkos::View<const T****, Layout, MemSpace> rotations;
  IntView3 query_buckets;
  View2<T> projections;
  Index factors = 1, b1 = 0, b2 = 1;
  // With write_keys (the caches, writable, the same as keys and values): the
  // Hash pass also writes the query's key (the query normalised,
  // shared_qk.hpp) and its value new_values [batch, heads * d_head] at its
  // position, so that the step needs no launch for its cache write.
  View3<T> write_keys, write_values;
  Kokkos::View<const T**, Layout, MemSpace> new_values;

  struct Hash {};
  KOKKOS_INLINE_FUNCTION void operator()(Hash, const TeamMember& team) const {
    const Index bh = team.league_rank(), b = bh / heads, h = bh % heads;
    const Index t = positions(b), width = rotations.extent(3);
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, rounds), [&](Index r) {
      T* p = &projections(bh, r * width);
      for (Index c = 0; c < width; ++c) p[c] = 0;
      accumulate_rows(p, &rotations(h, 0, r, 0), Index(rotations.stride(1)), &q(b, h, 0), 1, dh,
                      width);
      query_buckets(bh, r, t) = combined_bucket(p, factors, b1, b2);
    });
    if (write_keys.extent(0) == 0) return;
    // The key is the query normalised (shared_qk.hpp), as attend_cached writes it.
    const T* from = &q(b, h, 0);
    const compute_t<T> f = detail::shared_key_factor(from, dh);
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, dh), [&](Index x) {
      write_keys(b, t, h * dh + x) = store<T>(load(from[x]) * f);
      write_values(b, t, h * dh + x) = new_values(b, h * dh + x);
    });
  }

  KOKKOS_INLINE_FUNCTION void operator()(const TeamMember& team) const {
    const Index bh = team.league_rank(), b = bh / heads, h = bh % heads;
    const Index t = positions(b), n = t + 1;
    // The chunk of this sequence's forward pass: one chunk when n <= chunk.
    const Index c = n <= chunk ? n : chunk, rc = (n + c - 1) / c, cycle = rounds * rc;
    const Index reach = rc == 1 ? 0 : (n_before < cycle - 1 ? n_before : cycle - 1);
    const T* qv = &q(b, h, 0);
    T lse[kMaxHashes];
    Index width[kMaxHashes];
    for (Index r = 0; r < rounds; ++r) {
      const Index vq = r * rc + ranks(bh, r) / c;
      Index w = 0;
      for (Index back = 0; back <= reach; ++back) {
        Index v = vq - back;
        if (v < 0) v += cycle;
        const Index kr = v / rc, first = v % rc * c, count = n - first < c ? n - first : c;
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, count), [&](Index i) {
          const Index j = perm(bh, kr, first + i);
          const T* kv = &keys(b, j, h * dh);
          T dot = 0;
          Kokkos::parallel_reduce(
              Kokkos::ThreadVectorRange(team, dh), [&](Index d, T& acc) { acc += qv[d] * kv[d]; },
              dot);
          Kokkos::single(Kokkos::PerThread(team), [&] {
            scores(bh, r, w + i) = j == t ? T(MaskValues<T>::self) : dot;
            slots(bh, r, w + i) = int(j);
          });
        });
        w += count;
      }
      team.team_barrier();
      T m = 0;
      Kokkos::parallel_reduce(
          Kokkos::TeamThreadRange(team, w),
          [&](Index i, T& mx) { mx = compat::fmax(mx, scores(bh, r, i)); }, Kokkos::Max<T>(m));
      T sum = 0;
      Kokkos::parallel_reduce(
          Kokkos::TeamThreadRange(team, w),
          [&](Index i, T& acc) { acc += softmax_weight(scores(bh, r, i) - m); }, sum);
      lse[r] = m + compat::log(sum);
      width[r] = w;
    }
    T m = lse[0];
    for (Index r = 1; r < rounds; ++r) m = compat::fmax(m, lse[r]);
    T total = 0;
    for (Index r = 0; r < rounds; ++r) total += compat::exp(lse[r] - m);
    const T big = m + compat::log(total);
    team.team_barrier();  // every thread has its sums before the scores become weights
    for (Index r = 0; r < rounds; ++r)
      Kokkos::parallel_for(Kokkos::TeamThreadRange(team, width[r]), [&](Index i) {
        Kokkos::single(Kokkos::PerThread(team),
                       [&] { scores(bh, r, i) = softmax_weight(scores(bh, r, i) - big); });
      });
    team.team_barrier();
    // Threads over blocks of d_head, each accumulating the windows in order.
    const Index threads = team.team_size(), parts = threads < dh ? threads : dh;
    const Index part = (dh + parts - 1) / parts;
    T* o = &out(b, h, 0);
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, parts), [&](Index p) {
      const Index d0 = p * part, d1 = d0 + part < dh ? d0 + part : dh;
      Kokkos::parallel_for(Kokkos::ThreadVectorRange(team, d0, d1), [&](Index d) { o[d] = 0; });
      for (Index r = 0; r < rounds; ++r)
        for (Index i = 0; i < width[r]; ++i) {
          const T weight = scores(bh, r, i);
          const T* vv = &values(b, slots(bh, r, i), h * dh);
          Kokkos::parallel_for(Kokkos::ThreadVectorRange(team, d0, d1),
                               [&](Index d) { o[d] += weight * vv[d]; });
        }
    });
  }
};

void check_plan(const char* op, const LshPlan& plan, Index batch, Index length, Index heads,
                Index rounds) {
  require<ConfigError>(!plan.empty(), op, ": the LSH plan is empty; build it with lsh_build_plan");
  require<ShapeError>(plan.batch == batch && plan.length == length && plan.heads == heads &&
                          plan.n_hashes == rounds,
                      op, ": the LSH plan was built for batch ", plan.batch, ", length ",
                      plan.length, ", ", plan.heads, " heads and ", plan.n_hashes,
                      " hash rounds but the inputs have batch ", batch, ", length ", length, ", ",
                      heads, " heads and the config ", rounds, " rounds");
}

template <class T>
detail::ChunkedInputs<T> chunked_inputs(In4<T> qk, In4<T> v, const LshPlan& plan,
                                        In3<compute_t<T>> key_scale,
                                        const LshAttentionConfig& config,
                                        const AttentionCall& call) {
  const Index length = qk.extent(1), rounds = config.n_hashes;
  detail::ChunkedInputs<T> in;
  in.q = qk;
  in.k = qk;
  in.v = v;
  in.perm = plan.perm;
  in.undo = plan.undo;
  in.real = plan.real;
  in.key_scale = key_scale;
  in.key_valid = call.masks.key_valid;
  in.causal = call.masks.causal;
  in.self_mask = true;
  in.duplicate_correction = config.duplicate_correction;
  in.rounds = rounds;
  in.length = length;
  in.heads = qk.extent(2);
  in.d_head = qk.extent(3);
  in.dropout = call.dropout;
  // A chunk as long as the sequence is plain shared-QK attention: no look-back.
  const auto g = lsh_chunk_geometry(config, length);
  in.window = {rounds * length, g.chunk, g.n_chunks, g.n_before, true};
  return in;
}

template <class T>
void check_call(const char* op, In4<T> qk, In4<T> v, const LshPlan& plan,
                const LshAttentionConfig& config, const AttentionCall& call) {
  detail::check_qkv(op, qk, v, v);
  const Index batch = qk.extent(0), length = qk.extent(1);
  check_length(op, config, length);
  detail::check_masks(op, call.masks, batch, length);
  detail::check_dropout(op, call.dropout);
  check_plan(op, plan, batch, length, qk.extent(2), config.n_hashes);
}

}  // namespace

void LshAttentionConfig::validate() const {
  const char* op = "LshAttentionConfig";
  require<ConfigError>(chunk > 0, op, ": chunk is ", chunk, " but must be positive");
  require<ConfigError>(n_hashes >= 1 && n_hashes <= kMaxHashes, op, ": n_hashes is ", n_hashes,
                       " but must be in [1, ", kMaxHashes, "]");
  require<ConfigError>(n_before >= 0, op, ": n_before is ", n_before, " but must be >= 0");
  require<ConfigError>(n_buckets.size() <= 2, op, ": n_buckets has ", n_buckets.size(),
                       " factors but at most 2 are supported");
  for (Index f : n_buckets)
    require<ConfigError>(f >= 2 && f % 2 == 0, op, ": bucket count ", f,
                         " must be even and at least 2 (hashing takes the argmax over "
                         "[xR, -xR])");
}

std::vector<Index> lsh_bucket_factors(const LshAttentionConfig& config, Index length) {
  if (!config.n_buckets.empty()) return config.n_buckets;
  const Index n = 2 * std::max<Index>(1, length / effective_chunk(config, length));
  if (n <= kMaxUnfactorisedBuckets) return {n};
  // Two even factors b1 <= b2 as close to sqrt(n) as possible.
  for (Index b1 = Index(std::sqrt(double(n))); b1 >= 2; --b1)
    if (b1 % 2 == 0 && n % b1 == 0 && (n / b1) % 2 == 0) return {b1, n / b1};
  return {n};
}

Index lsh_bucket_count(const LshAttentionConfig& config, Index length) {
  Index n = 1;
  for (Index f : lsh_bucket_factors(config, length)) n *= f;
  return n;
}

Index lsh_rotation_width(const LshAttentionConfig& config, Index length) {
  Index w = 0;
  for (Index f : lsh_bucket_factors(config, length)) w += f / 2;
  return w;
}

template <class T>
void lsh_random_rotations(RandomKey key, View4<T> rotations) {
  auto flat = Kokkos::View<T*, Layout, MemSpace>(rotations.data(), rotations.size());
  Kokkos::parallel_for(
      "lsh_random_rotations", range(flat.extent(0)),
      KOKKOS_LAMBDA(Index i) { flat(i) = T(random_normal(key, i)); });
}

// The inputs of the hashing: qk, the sequence length, the masks and the
// rotations' shape; ShapeError or ConfigError naming `op` otherwise.
// Rotations must be [heads, d_head, n_hashes, width].
template <class R>
void check_rotations(const char* op, const R& rotations, Index heads, Index dh, Index rounds,
                     Index width) {
  require<ShapeError>(
      Index(rotations.extent(0)) == heads && Index(rotations.extent(1)) == dh &&
          Index(rotations.extent(2)) == rounds && Index(rotations.extent(3)) == width,
      op, ": rotations have shape ", shape_string(rotations), " but must be [", heads, ", ", dh,
      ", ", rounds, ", ", width, "] (heads, d_head, n_hashes, sum of n_buckets / 2)");
}

template <class T>
void check_hash_inputs(const char* op, In4<T> qk, In4<compute_t<T>> rotations,
                       const LshAttentionConfig& config, const MaskOptions& masks) {
  require_nonempty(op, "qk", qk);
  const Index batch = qk.extent(0), length = qk.extent(1), heads = qk.extent(2);
  const Index dh = qk.extent(3), rounds = config.n_hashes;
  check_length(op, config, length);
  detail::check_masks(op, masks, batch, length);
  check_rotations(op, rotations, heads, dh, rounds, lsh_rotation_width(config, length));
}

template <class T>
void lsh_hash(In4<T> qk, In4<compute_t<T>> rotations, const LshAttentionConfig& config,
              const MaskOptions& masks, Kokkos::View<int**, Layout, MemSpace> buckets) {
  const char* op = "lsh_hash";
  check_hash_inputs<T>(op, qk, rotations, config, masks);
  const Index batch = qk.extent(0), length = qk.extent(1), heads = qk.extent(2);
  const Index dh = qk.extent(3), rounds = config.n_hashes;
  const auto factors = lsh_bucket_factors(config, length);
  const Index width = lsh_rotation_width(config, length);
  require<ShapeError>(
      Index(buckets.extent(0)) == batch * heads && Index(buckets.extent(1)) == rounds * length, op,
      ": buckets have shape ", shape_string(buckets), " but must be [", batch * heads, ", ",
      rounds * length, "] (batch * heads, n_hashes * length)");
  const Index b1 = factors[0], b2 = factors.size() > 1 ? factors[1] : 1;
  HashKernel<T> hash{qk, rotations, masks.key_valid,       buckets, length, heads, rounds,
                     dh, width,     Index(factors.size()), b1,      b2};
  hash.elements = tile_loops() == TileLoops::elements;
  const size_t hash_bytes = hash.scratch_bytes();
  hash.level = scratch_level(hash_bytes);
  Kokkos::parallel_for(
      "lsh_hash",
      team_policy(batch * heads * rounds * hash.row_blocks(), hash_bytes, hash.elements ? 128 : 0),
      hash);
}

template <class T>
void lsh_build_plan(In4<T> qk, In4<compute_t<T>> rotations, const LshAttentionConfig& config,
                    const MaskOptions& masks, LshPlan& plan, Workspace& workspace) {
  // Checked before the plan changes, so that a refused call leaves it as it was.
  check_hash_inputs<T>("lsh_build_plan", qk, rotations, config, masks);
  const Index batch = qk.extent(0), length = qk.extent(1), heads = qk.extent(2);
  const Index rounds = config.n_hashes;
  const Index items = rounds * length, n_buckets = lsh_bucket_count(config, length);
  if (Index(plan.perm.extent(0)) != batch * heads || Index(plan.perm.extent(1)) != items) {
    plan.release();
    auto ints = [&](const char* label) {
      return IntView2(Kokkos::view_alloc(Kokkos::WithoutInitializing, std::string(label)),
                      batch * heads, items);
    };
    plan.buckets = ints("lsh_buckets");
    plan.perm = ints("lsh_perm");
    plan.undo = ints("lsh_undo");
  }
  plan.batch = batch;
  plan.length = length;
  plan.heads = heads;
  plan.n_hashes = rounds;
  plan.n_buckets = n_buckets;
  lsh_hash<T>(qk, rotations, config, masks, plan.buckets);
  lsh_sort_buckets(plan, workspace);
  if (masks.key_valid.extent(0) == 0) {
    plan.real = Kokkos::View<int*, Layout, MemSpace>();
    return;
  }
  if (Index(plan.real.extent(0)) != batch)
    plan.real = Kokkos::View<int*, Layout, MemSpace>("lsh_real_items", batch);
  const auto valid = masks.key_valid;
  const auto real = plan.real;
  Kokkos::parallel_for(
      "lsh_real_items", range(batch), KOKKOS_LAMBDA(Index b) {
        int n = 0;
        for (Index i = 0; i < length; ++i) n += valid(b, i) != 0;
        real(b) = n;
      });
}

void lsh_sort_buckets(LshPlan& plan, Workspace& workspace) {
  const char* op = "lsh_sort_buckets";
  const Index length = plan.length, rounds = plan.n_hashes;
  require<ShapeError>(Index(plan.buckets.extent(0)) == plan.batch * plan.heads &&
                          Index(plan.buckets.extent(1)) == rounds * length &&
                          plan.perm.extent(1) == plan.buckets.extent(1) &&
                          plan.undo.extent(1) == plan.buckets.extent(1),
                      op, ": the plan's buckets have shape ", shape_string(plan.buckets),
                      " but its fields say batch * heads ", plan.batch * plan.heads,
                      " and n_hashes * length ", rounds * length);
  const Index rows = plan.batch * plan.heads * rounds, bins = plan.n_buckets + 1;
  const Index blocks = sort_blocks(length, bins);
  Workspace::Frame frame(workspace);
  const SortPass sort{
      plan.buckets, plan.perm, plan.undo, frame.take<IntView3>(rows, bins, blocks), length,
      rounds,       bins,      blocks,    (length + blocks - 1) / blocks,           length,
      plan.heads};
  sort.run();
}

template <class T>
void lsh_attention_forward(In4<T> qk, In4<T> v, const LshPlan& plan,
                           const LshAttentionConfig& config, const AttentionCall& call,
                           View4<T> out, View3<compute_t<T>> lse, Workspace& workspace) {
  using C = compute_t<T>;
  const char* op = "lsh_attention_forward";
  check_call<T>(op, qk, v, plan, config, call);
  require_same_shape(op, "qk", qk, "out", out);
  const Index batch = qk.extent(0), length = qk.extent(1), heads = qk.extent(2);
  const Index dh = qk.extent(3), rounds = config.n_hashes, items = rounds * length;
  detail::check_lse(op, lse, qk);
  Workspace::Frame frame(workspace);
  auto key_scale = frame.take<View3<C>>(batch, length, heads);
  auto out_sorted = frame.take<View4<T>>(batch, items, heads, dh);
  auto lse_sorted = frame.take<View3<C>>(batch, items, heads);
  shared_key_scale<T>(qk, key_scale);
  const auto in = chunked_inputs<T>(qk, v, plan, key_scale, config, call);
  detail::run_forward_chunks<T>("lsh_attention_chunks", in, out_sorted, lse_sorted, batch);
  // Unsort and combine the rounds (one softmax over the union of the rounds'
  // windows): LSE_i = logsumexp_r lse_i^r,  out_i = sum_r exp(lse_i^r - LSE_i) o_i^r.
  auto undo = plan.undo;
  // The rounds' weights of item (b, i, h) relative to the largest round, so
  // that rounds with equal logsumexps get exactly equal weights whatever their
  // magnitude: w[r] = exp(lse^r - m) / total; os[r], its rows of out_sorted.
  // Returns LSE_i.
  const auto weigh = KOKKOS_LAMBDA(const detail::ItemIndex& at, C* w, const T** os) {
    const Index bh = at.b * heads + at.h;
    C m = lse_sorted(at.b, undo(bh, at.i), at.h);
    for (Index r = 1; r < rounds; ++r)
      m = compat::fmax(m, lse_sorted(at.b, undo(bh, r * length + at.i), at.h));
    C total = 0;
    for (Index r = 0; r < rounds; ++r)
      total += compat::exp(lse_sorted(at.b, undo(bh, r * length + at.i), at.h) - m);
    const C inverse = C(1) / total;
    for (Index r = 0; r < rounds; ++r) {
      const Index s = undo(bh, r * length + at.i);
      w[r] = compat::exp(lse_sorted(at.b, s, at.h) - m) * inverse;
      os[r] = &out_sorted(at.b, s, at.h, 0);
    }
    return m + compat::log(total);
  };
  // Each output element is summed over the rounds in registers, in round
  // order, and rounded once: both forms give the same bits.
  detail::for_items(
      "lsh_combine_rounds", batch, length, heads,
      KOKKOS_LAMBDA(const detail::ItemIndex& at) {
        // The rounds' sorted rows of the item 8 ahead, asked of the cache (they
        // are scattered): it halves this kernel's time on a CPU.
        const Index ahead = at.b * length * heads + at.i * heads + at.h + 8;
        if (ahead < batch * length * heads) {
          const detail::ItemIndex next(ahead, length, heads);
          for (Index r = 0; r < rounds; ++r)
            prefetch_bytes(
                &out_sorted(next.b, undo(next.b * heads + next.h, r * length + next.i), next.h, 0),
                dh * Index(sizeof(T)));
        }
        C w[kMaxHashes];
        const T* os[kMaxHashes];
        const C total_lse = weigh(at, w, os);
        T* o = &out(at.b, at.i, at.h, 0);
        for (Index d = 0; d < dh; ++d) {
          C sum = 0;
          for (Index r = 0; r < rounds; ++r) sum += w[r] * load(os[r][d]);
          o[d] = store<T>(sum);
        }
        lse(at.b, at.i, at.h) = total_lse;
      },
      KOKKOS_LAMBDA(const TeamMember& team, const detail::ItemIndex& at) {
        C w[kMaxHashes];
        const T* os[kMaxHashes];
        const C total_lse = weigh(at, w, os);
        T* o = &out(at.b, at.i, at.h, 0);
        lane_map<C>(
            team, dh,
            [&](Index d) {
              C sum = 0;
              for (Index r = 0; r < rounds; ++r) sum += w[r] * load(os[r][d]);
              return sum;
            },
            [&](Index d, C sum) { o[d] = store<T>(sum); });
        Kokkos::single(Kokkos::PerThread(team), [&] { lse(at.b, at.i, at.h) = total_lse; });
      });
}

template <class T>
void lsh_attention_backward(In4<T> qk, In4<T> v, const LshPlan& plan, In4<T> out,
                            In3<compute_t<T>> lse, In4<T> dout, const LshAttentionConfig& config,
                            const AttentionCall& call, View4<T> dqk, View4<T> dv,
                            Workspace& workspace) {
  const char* op = "lsh_attention_backward";
  check_call<T>(op, qk, v, plan, config, call);
  require_same_shape(op, "qk", qk, "out", out);
  require_same_shape(op, "qk", qk, "dout", dout);
  require_same_shape(op, "qk", qk, "dqk", dqk);
  require_same_shape(op, "v", v, "dv", dv);
  const Index batch = qk.extent(0), length = qk.extent(1), heads = qk.extent(2);
  const Index dh = qk.extent(3);
  detail::check_lse(op, lse, qk);
  Workspace::Frame frame(workspace);
  auto key_scale = frame.take<View3<compute_t<T>>>(batch, length, heads);
  auto delta = frame.take<View3<compute_t<T>>>(batch, length, heads);
  auto dk = frame.take<View4<T>>(batch, length, heads, dh);
  shared_key_scale<T>(qk, key_scale);
  detail::item_dot<T>(dout, out, delta);
  const auto in = chunked_inputs<T>(qk, v, plan, key_scale, config, call);
  detail::chunked_backward<T>(in, lse, delta, dout, dqk, dk, dv);
  // The key gradient goes through the key normalisation.
  shared_keys_backward<T>(qk, key_scale, dk, dqk);
}

namespace {

// Both lsh_attention_step forms: with rotations (non-empty) the kernel hashes
// the query into query_buckets (the View of buckets) first.
template <class T>
void run_lsh_step(In3<T> q, In4<T> rotations, In3<T> keys, In3<T> values,
                  Kokkos::View<const int***, Layout, MemSpace> buckets, IntView3 query_buckets,
                  Kokkos::View<const Index*, Layout, MemSpace> positions, Index max_position,
                  const LshAttentionConfig& config, View3<T> out, Workspace& workspace,
                  Index sort_slices, In2<T> new_values = {}, View3<T> write_keys = {},
                  View3<T> write_values = {}) {
  const char* op = "lsh_attention_step";
  config.validate();
  require<ConfigError>(!config.n_buckets.empty(), op,
                       ": cached LSH decoding needs a fixed bucket count; set n_buckets "
                       "(model.lsh.n_buckets)");
  require<ConfigError>(!config.duplicate_correction, op,
                       ": cached LSH decoding does not support duplicate_correction; decode by "
                       "rerunning the prefix or turn it off");
  const Index batch = q.extent(0), heads = q.extent(1), dh = q.extent(2);
  const Index capacity = keys.extent(1), rounds = config.n_hashes;
  require<ShapeError>(Index(keys.extent(0)) == batch && Index(keys.extent(2)) == heads * dh &&
                          values.extent(0) == keys.extent(0) &&
                          values.extent(1) == keys.extent(1) && values.extent(2) == keys.extent(2),
                      op, ": keys ", shape_string(keys), " and values ", shape_string(values),
                      " must be [", batch, ", capacity, ", heads * dh, "]");
  require<ShapeError>(Index(buckets.extent(0)) == batch * heads &&
                          Index(buckets.extent(1)) == rounds &&
                          Index(buckets.extent(2)) == capacity,
                      op, ": buckets have shape ", shape_string(buckets), " but must be [",
                      batch * heads, ", ", rounds, ", ", capacity, "]");
  require<ShapeError>(max_position >= 0 && max_position < capacity, op, ": position ", max_position,
                      " is outside the cache of ", capacity, " positions");
  require_same_shape(op, "q", q, "out", out);
  require<ConfigError>(sort_slices >= 0, op, ": sort_slices is ", sort_slices,
                       " but must be >= 0 (0: one per team thread)");
  const Index n_buckets = lsh_bucket_count(config, capacity), bins = n_buckets + 1;
  const Index chunk = config.chunk, n_before = config.n_before;
  const Index window = (n_before + 1) * chunk, n_max = max_position + 1, rows = batch * heads;
  Workspace::Frame frame(workspace);
  StepKernel<T> kernel{q,  keys, values, positions, out,    {},    {},
                       {}, {},   heads,  dh,        rounds, chunk, n_before};
  kernel.scores = frame.take<View3<T>>(rows, rounds, window);
  kernel.perm = frame.take<IntView3>(rows, rounds, capacity);
  kernel.slots = frame.take<IntView3>(rows, rounds, window);
  kernel.ranks = frame.take<IntView2>(rows, rounds);
  if (rotations.extent(0)) {
    const auto factors = lsh_bucket_factors(config, capacity);
    const Index width = lsh_rotation_width(config, capacity);
    check_rotations(op, rotations, heads, dh, rounds, width);
    kernel.rotations = rotations;
    kernel.query_buckets = query_buckets;
    if (new_values.extent(0) > 0) {
      require<ShapeError>(
          Index(new_values.extent(0)) == batch && Index(new_values.extent(1)) == heads * dh, op,
          ": the new values have shape ", shape_string(new_values), " but must be [", batch, ", ",
          heads * dh, "]");
      kernel.write_keys = write_keys;
      kernel.write_values = write_values;
      kernel.new_values = new_values;
    }
    kernel.projections = frame.take<View2<T>>(rows, rounds * width);
    kernel.factors = Index(factors.size());
    kernel.b1 = factors[0];
    kernel.b2 = factors.size() > 1 ? factors[1] : 1;
    using HashPolicy = Kokkos::TeamPolicy<ExecSpace, LaunchHint, typename StepKernel<T>::Hash>;
    Kokkos::parallel_for("lsh_attention_step_hash", HashPolicy(rows, Kokkos::AUTO), kernel);
  }
  // The sort's buffers are sized by the cache's capacity, not by this
  // position: a generation then takes the same workspace at every step, which
  // never grows again after the first (on a GPU, no allocation per token).
  // Blocks per row: the host's few threads take whole rows (more blocks only
  // add counts to zero and scan: 32 blocks of 2,049 buckets made a 64K step 7x
  // slower on 2 cores); GPUs as lsh_sort_buckets.
  const auto step_blocks = [&](Index n) {
    return sort_slices > 0 ? sort_slices : kHostMemory ? 1 : sort_blocks(n, bins);
  };
  const Index blocks = step_blocks(n_max), most_blocks = step_blocks(capacity);
  auto counts =
      frame.take<Kokkos::View<int*, Layout, MemSpace>>(rows * rounds * bins * most_blocks);
  const SortPass sort{
      Kokkos::View<const int**, Layout, MemSpace>(buckets.data(), rows, rounds * capacity),
      IntView2(kernel.perm.data(), rows, rounds * capacity),
      IntView2(),
      IntView3(counts.data(), rows * rounds, bins, blocks),
      n_max,
      rounds,
      bins,
      blocks,
      (n_max + blocks - 1) / blocks,
      capacity,
      heads,
      positions,
      kernel.ranks};
  sort.run();
  // A team per (batch, head) for the windows.
  const int threads =
      TeamPolicy(rows, Kokkos::AUTO).team_size_recommended(kernel, Kokkos::ParallelForTag());
  Kokkos::parallel_for("lsh_attention_step", TeamPolicy(batch * heads, threads), kernel);
}

// The forms that hash their query need the cache's rotations.
template <class R>
void require_step_rotations(const R& rotations) {
  require<ShapeError>(rotations.extent(0) > 0, "lsh_attention_step",
                      ": the rotations are empty; fill them with lsh_random_rotations (the "
                      "layer's start_cache does)");
}

}  // namespace

template <class T>
void lsh_attention_step(In3<T> q, In3<T> keys, In3<T> values,
                        Kokkos::View<const int***, Layout, MemSpace> buckets,
                        Kokkos::View<const Index*, Layout, MemSpace> positions, Index max_position,
                        const LshAttentionConfig& config, View3<T> out, Workspace& workspace,
                        Index sort_slices) {
  run_lsh_step<T>(q, {}, keys, values, buckets, {}, positions, max_position, config, out, workspace,
                  sort_slices);
}

template <class T>
void lsh_attention_step(In3<T> q, In4<T> rotations, In3<T> keys, In3<T> values,
                        Kokkos::View<int***, Layout, MemSpace> buckets,
                        Kokkos::View<const Index*, Layout, MemSpace> positions, Index max_position,
                        const LshAttentionConfig& config, View3<T> out, Workspace& workspace,
                        Index sort_slices) {
  require_step_rotations(rotations);
  run_lsh_step<T>(q, rotations, keys, values, buckets, buckets, positions, max_position, config,
                  out, workspace, sort_slices);
}

template <class T>
void lsh_attention_step(In3<T> q, In2<T> new_values, In4<T> rotations, View3<T> keys,
                        View3<T> values, Kokkos::View<int***, Layout, MemSpace> buckets,
                        Kokkos::View<const Index*, Layout, MemSpace> positions, Index max_position,
                        const LshAttentionConfig& config, View3<T> out, Workspace& workspace,
                        Index sort_slices) {
  require_step_rotations(rotations);
  require<ShapeError>(new_values.extent(0) > 0, "lsh_attention_step",
                      ": new_values is empty; the form that writes the caches needs the values");
  run_lsh_step<T>(q, rotations, keys, values, buckets, buckets, positions, max_position, config,
                  out, workspace, sort_slices, new_values, keys, values);
}

#define REFORMER_INSTANTIATE_STEP(T)                                                           \
  template void lsh_attention_step<T>(In3<T>, In3<T>, In3<T>,                                  \
                                      Kokkos::View<const int***, Layout, MemSpace>,            \
                                      Kokkos::View<const Index*, Layout, MemSpace>, Index,     \
                                      const LshAttentionConfig&, View3<T>, Workspace&, Index); \
  template void lsh_attention_step<T>(In3<T>, In4<T>, In3<T>, In3<T>,                          \
                                      Kokkos::View<int***, Layout, MemSpace>,                  \
                                      Kokkos::View<const Index*, Layout, MemSpace>, Index,     \
                                      const LshAttentionConfig&, View3<T>, Workspace&, Index); \
  template void lsh_attention_step<T>(In3<T>, In2<T>, In4<T>, View3<T>, View3<T>,              \
                                      Kokkos::View<int***, Layout, MemSpace>,                  \
                                      Kokkos::View<const Index*, Layout, MemSpace>, Index,     \
                                      const LshAttentionConfig&, View3<T>, Workspace&, Index); \
  template void lsh_random_rotations<T>(RandomKey, View4<T>);
REFORMER_INSTANTIATE_FLOAT_AND_DOUBLE(REFORMER_INSTANTIATE_STEP)

#define REFORMER_INSTANTIATE(T)                                                                 \
  template void lsh_build_plan<T>(In4<T>, In4<compute_t<T>>, const LshAttentionConfig&,         \
                                  const MaskOptions&, LshPlan&, Workspace&);                    \
  template void lsh_hash<T>(In4<T>, In4<compute_t<T>>, const LshAttentionConfig&,               \
                            const MaskOptions&, Kokkos::View<int**, Layout, MemSpace>);         \
  template void lsh_attention_forward<T>(In4<T>, In4<T>, const LshPlan&,                        \
                                         const LshAttentionConfig&, const AttentionCall&,       \
                                         View4<T>, View3<compute_t<T>>, Workspace&);            \
  template void lsh_attention_backward<T>(In4<T>, In4<T>, const LshPlan&, In4<T>,               \
                                          In3<compute_t<T>>, In4<T>, const LshAttentionConfig&, \
                                          const AttentionCall&, View4<T>, View4<T>, Workspace&);
REFORMER_INSTANTIATE_STORAGE_TYPES(REFORMER_INSTANTIATE)

}  // namespace reformer::attention
