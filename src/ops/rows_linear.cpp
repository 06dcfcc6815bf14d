#include "reformer/ops/rows_linear.hpp"

#include "reformer/core/error.hpp"
#include "reformer/core/lane_rows.hpp"
#include "reformer/core/shape.hpp"
#include "reformer/core/team_scratch.hpp"
#include "reformer/core/vector_loops.hpp"

#include <string>

namespace reformer::ops {
namespace {

constexpr Index kColumns = 32;  // output columns a team (a lane each on GPUs)
constexpr Index kSplits = 8;    // input row k goes to split k % kSplits (a warp each on GPUs)
constexpr int kMaxProducts = 3;
constexpr Index kGroup = 4;  // weights a lane loads ahead

StepProducts& step_products_setting() {
  static StepProducts products = reformer::detail::environment_choice(
      "REFORMER_STEP_PRODUCTS", {"vendor", "fused"}, {StepProducts::vendor, StepProducts::fused},
      StepProducts::vendor);
  return products;
}

// The weights of one call; the teams of product i are [first_team[i],
// first_team[i + 1]), a team per kColumns output columns.
template <class T>
struct RowsLinearProducts {
  Kokkos::View<const T**, Layout, MemSpace> weight[kMaxProducts];
  Kokkos::View<const T*, Layout, MemSpace> bias[kMaxProducts];
  View2<T> out[kMaxProducts];
  Index first_team[kMaxProducts + 1] = {0, 0, 0, 0};
  int count = 0;
};

// A team per (product, block of kColumns output columns), kRows >= rows.
template <class T, Index kRows>
struct RowsLinearKernel {
  using C = compute_t<T>;
  Kokkos::View<const T**, Layout, MemSpace> x;
  Kokkos::View<const T*, Layout, MemSpace> gamma, beta;  // empty: no layer norm
  C eps;
  RowsLinearProducts<T> products;
  Index rows, in;
  bool activate;
  Activation activation;
  C residual;  // out = f(...) + residual out

  static std::size_t scratch_bytes() {
    return ScratchMatrix<C>::shmem_size(kRows, 2) +
           ScratchMatrix<C>::shmem_size(kSplits * kRows, kColumns);
  }

  KOKKOS_INLINE_FUNCTION void operator()(const TeamMember& team) const {
    int p = 0;
    while (p + 1 < products.count && team.league_rank() >= products.first_team[p + 1]) ++p;
    const Index j0 = (team.league_rank() - products.first_team[p]) * kColumns;
    const auto w = products.weight[p];
    const Index width = w.extent(1);
    const bool normed = gamma.extent(0) > 0;
    ScratchMatrix<C> stats(team.team_scratch(0), kRows, 2);
    ScratchMatrix<C> partial(team.team_scratch(0), kSplits * kRows, kColumns);
    // The rows' mean and 1 / sqrt(var + eps) (ops::layer_norm_forward's sums:
    // a thread's loop on the host, the lanes of a warp on GPUs).
    if (normed) {
      Kokkos::parallel_for(Kokkos::TeamThreadRange(team, rows), [&](Index r) {
        C mu, rs;
        if constexpr (kRowLanes == 1) {
          mu = sum_values(&x(r, 0), in) / C(in);
          rs = C(1) / compat::sqrt(sum_squared_differences(&x(r, 0), mu, in) / C(in) + eps);
        } else {
          mu = lane_sum<C>(team, in, [&](Index k) { return C(load(x(r, k))); }) / C(in);
          const C sq = lane_sum<C>(team, in, [&](Index k) {
            const C c = load(x(r, k)) - mu;
            return c * c;
          });
          rs = C(1) / compat::sqrt(sq / C(in) + eps);
        }
        Kokkos::single(Kokkos::PerThread(team), [&] {
          stats(r, 0) = mu;
          stats(r, 1) = rs;
        });
      });
      team.team_barrier();
    }
    // Split s sums input rows k = s, s + kSplits, ... of each column: a lane
    // per column, so a GPU's warp reads kColumns adjacent weights a row.
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, kSplits), [&](Index s) {
      Kokkos::parallel_for(Kokkos::ThreadVectorRange(team, kColumns), [&](Index c) {
        // Columns past the end read the last one; their sums are dropped below.
        const Index j = j0 + c < width ? j0 + c : width - 1;
        C acc[kRows], mu[kRows], rs[kRows];
        for (Index r = 0; r < kRows; ++r) {
          acc[r] = 0;
          mu[r] = normed && r < rows ? stats(r, 0) : C(0);
          rs[r] = normed && r < rows ? stats(r, 1) : C(1);
        }
        // acc[r] += LN(x)(r, k) w(k, j), with LN(x)_k = (x_k - mean) rstd
        // gamma_k + beta_k. kGroup weights are loaded before the first is
        // used, so that a GPU thread has that many loads in flight (in a
        // plain loop each multiply-add waits for its load before the next
        // load issues); the sums keep k's order either way.
        const auto add = [&](Index k, C wk) {
          const C g = normed ? C(gamma(k)) : C(1), b = normed ? C(beta(k)) : C(0);
          for (Index r = 0; r < kRows; ++r) {
            if (r >= rows) break;
            C v = load(x(r, k));
            if (normed) v = (v - mu[r]) * rs[r] * g + b;
            acc[r] += v * wk;
          }
        };
        Index k = s;
        for (; k + (kGroup - 1) * kSplits < in; k += kGroup * kSplits) {
          C wk[kGroup];
          for (Index u = 0; u < kGroup; ++u) wk[u] = load(w(k + u * kSplits, j));
          for (Index u = 0; u < kGroup; ++u) add(k + u * kSplits, wk[u]);
        }
        for (; k < in; k += kSplits) add(k, load(w(k, j)));
        for (Index r = 0; r < kRows; ++r)
          if (r < rows) partial(s * kRows + r, c) = acc[r];
      });
    });
    team.team_barrier();
    // The splits in order, then the bias, activation and residual sum.
    const auto bias = products.bias[p];
    const auto out = products.out[p];
    Kokkos::parallel_for(Kokkos::TeamThreadRange(team, rows), [&](Index r) {
      Kokkos::parallel_for(Kokkos::ThreadVectorRange(team, kColumns), [&](Index c) {
        const Index j = j0 + c;
        if (j >= width) return;
        C v = 0;
        for (Index s = 0; s < kSplits; ++s) v += partial(s * kRows + r, c);
        if (bias.extent(0) > 0) v += C(bias(j));
        if (activate) v = activation_value(activation, v);
        if (residual != C(0)) v += residual * load(out(r, j));
        out(r, j) = store<T>(v);
      });
    });
  }
};

// The largest team's scratch (double, 16 rows; with Kokkos' alignment of
// each view) fits the level 0 that a GPU team can count on.
static_assert(kSplits * kRowsLinearMaxRows * kColumns * sizeof(double) +
                      2 * kRowsLinearMaxRows * sizeof(double) + 2 * 128 <=
                  kLevel0ScratchBytes,
              "rows_linear's team scratch exceeds level 0");

template <class T, Index kRows>
void launch_rows_linear(const RowsLinearKernel<T, kRows>& kernel) {
  using Kernel = RowsLinearKernel<T, kRows>;
  const Index teams = kernel.products.first_team[kernel.products.count];
  // GPUs: a warp per split, a lane per column; the host: one thread runs the splits in turn.
  TeamPolicy policy =
      kHostMemory ? TeamPolicy(teams, 1, 1) : TeamPolicy(teams, int(kSplits), int(kColumns));
  policy.set_scratch_size(0, Kokkos::PerTeam(Kernel::scratch_bytes()));
  Kokkos::parallel_for("rows_linear", policy, kernel);
}

template <class T, Index kRows>
void run_rows_linear(In2<T> x, const RowNorm<T>& norm, const RowsLinearProducts<T>& products,
                     std::optional<Activation> activation, compute_t<T> residual) {
  RowsLinearKernel<T, kRows> kernel{x,
                                    norm.gamma,
                                    norm.beta,
                                    norm.eps,
                                    products,
                                    Index(x.extent(0)),
                                    Index(x.extent(1)),
                                    activation.has_value(),
                                    activation.value_or(Activation::ReLU),
                                    residual};
  launch_rows_linear(kernel);
}

}  // namespace

StepProducts step_products() { return step_products_setting(); }
void set_step_products(StepProducts products) { step_products_setting() = products; }
const char* step_products_name(StepProducts products) {
  return products == StepProducts::fused ? "fused" : "vendor";
}

template <class T>
void rows_linear(In2<T> x, const RowNorm<T>& norm, const std::vector<RowProduct<T>>& products,
                 std::optional<Activation> activation, compute_t<T> residual) {
  const char* op = "rows_linear";
  const Index rows = x.extent(0), in = x.extent(1);
  require<ShapeError>(rows >= 1 && rows <= kRowsLinearMaxRows, op, ": x has ", rows,
                      " rows but the fused step products take 1 to ", kRowsLinearMaxRows,
                      " (use the vendor products for more)");
  require<ShapeError>(in >= 1, op, ": x has shape ", shape_string(x), " but needs an input column");
  require<ShapeError>(!products.empty() && products.size() <= std::size_t(kMaxProducts), op, ": ",
                      products.size(), " products but one call takes 1 to ", kMaxProducts);
  if (norm.active()) {
    require_extent(op, "gamma", norm.gamma, 0, in);
    require_extent(op, "beta", norm.beta, 0, in);
    require<ConfigError>(norm.eps > compute_t<T>(0), op, ": eps is ", norm.eps,
                         " but must be positive");
  }
  RowsLinearProducts<T> all;
  for (std::size_t i = 0; i < products.size(); ++i) {
    const auto& p = products[i];
    const std::string name = "weight " + std::to_string(i);
    require_extent(op, name.c_str(), p.weight, 0, in);
    const Index width = p.weight.extent(1);
    require<ShapeError>(width >= 1, op, ": ", name, " has no output columns");
    require<ShapeError>(Index(p.out.extent(0)) == rows && Index(p.out.extent(1)) == width, op,
                        ": output ", i, " has shape ", shape_string(p.out), " but must be [", rows,
                        ", ", width, "] for x ", shape_string(x), " and ", name, " ",
                        shape_string(p.weight));
    if (p.bias.extent(0) > 0) require_extent(op, "bias", p.bias, 0, width);
    // Every team reads all of x while others write their outputs.
    const auto* out_begin = p.out.data();
    const auto* x_begin = x.data();
    const bool overlaps = out_begin < x_begin + x.span() && x_begin < out_begin + p.out.span();
    require<ShapeError>(!overlaps, op, ": output ", i,
                        " overlaps x; the products need an output of their own");
    all.weight[i] = p.weight;
    all.bias[i] = p.bias;
    all.out[i] = p.out;
    all.first_team[i + 1] = all.first_team[i] + (width + kColumns - 1) / kColumns;
  }
  all.count = int(products.size());
  if (rows == 1)
    run_rows_linear<T, 1>(x, norm, all, activation, residual);
  else if (rows <= 4)
    run_rows_linear<T, 4>(x, norm, all, activation, residual);
  else
    run_rows_linear<T, kRowsLinearMaxRows>(x, norm, all, activation, residual);
}

#define REFORMER_INSTANTIATE(T)                                                              \
  template void rows_linear<T>(In2<T>, const RowNorm<T>&, const std::vector<RowProduct<T>>&, \
                               std::optional<Activation>, compute_t<T>);
REFORMER_INSTANTIATE(float)
REFORMER_INSTANTIATE(double)
#undef REFORMER_INSTANTIATE

}  // namespace reformer::ops
