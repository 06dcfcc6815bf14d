// What the families' memory predictions and `reformer memory` sweeps share
// (private to the library): measuring a synthetic step per phase, the point
// with its prediction and budget, a variant's spec, and saturated byte counts.
#pragma once

#include "reformer/attention/attention_layer.hpp"
#include "reformer/attention/chunked_scratch.hpp"
#include "reformer/attention/local.hpp"
#include "reformer/attention/lsh.hpp"
#include "reformer/core/error.hpp"
#include "reformer/core/kernel_profile.hpp"
#include "reformer/core/memory_tracker.hpp"
#include "reformer/core/runtime.hpp"
#include "reformer/train/chunk_choice.hpp"
#include "reformer/train/memory_sweep.hpp"
#include "reformer/train/synthetic_step.hpp"

#include <algorithm>
#include <chrono>
#include <initializer_list>
#include <map>
#include <string>
#include <type_traits>
#include <vector>

namespace reformer::train::sweep {

// Uniform random ids and targets below vocab, keyed by position (a free
// function: nvcc limits which member functions may hold a device lambda).
void fill_random_tokens(Kokkos::View<int**, Layout, MemSpace> ids,
                        Kokkos::View<int**, Layout, MemSpace> targets, Index vocab);

std::int64_t phase_peak(const std::vector<PhaseMemory>& phases, const std::string& name,
                        const std::string& space, std::int64_t base);

// Bytes of the backend's own allocations in a composition: Kokkos names them
// "[unlabeled]" (host thread scratch) or "Kokkos::..." (a GPU's team scratch
// pool, "Kokkos::CudaSpace::TeamScratchMemory", and internal buffers); no View
// of ours has such a label.
std::int64_t backend_bytes(const std::vector<LabelBytes>& composition);

void check_point(const SweepOptions& options, Index batch, Index length);

// Bytes of the batched shapes' workspace (attention/chunked_scratch.hpp) for
// one LSH, local or exact attention layer of `heads` heads of d_head over
// [batch, length], s-byte compute values, a-byte activations: its largest
// slice, forward or backward; 0 for full attention or with the fused products
// (exact: also for bf16 activations, which keep the fused kernels).
double chunk_slice_bytes(attention::AttentionKind kind, const attention::LshAttentionConfig& lsh,
                         const attention::LocalAttentionConfig& local, Index batch, Index heads,
                         Index d_head, Index length, double s, double a);

// Bytes of the float32 sub-panels that products of bf16 activations widen,
// outside the workspace (a bf16 step's only activation-sized float32 scratch
// besides the kernels' own), given the step's products of bf16 activations
// [rows, k] (read transposed when `transposed`) by float32 weights [k, n]
// into a bf16 result, or a float32 one when `float_result`.
struct MixedProduct {
  double rows, k, n;
  bool float_result = false, transposed = false;
};
double mixed_panel_bytes(std::initializer_list<MixedProduct> products);
// Bytes of exact attention's float32 dq accumulator in a bf16 backward pass
// (attention/exact.cpp, the one-pass schedule): 0 for float32 activations or
// the two-pass schedule.
double exact_bf16_dq_bytes(Index batch, Index heads, double rows, double inner, double a, double s);

// A training step's terms of the Reformer LM's stack of blocks (embedding to
// the top streams), which the LM and other families put their heads on; bytes.
struct EncoderStackMemory {
  double alive = 0;        // streams and gradients, stored layers or plans, recompute, chunks
  double ws_forward = 0;   // the deepest workspace of a forward pass
  double ws_backward = 0;  // ... of a backward pass
  double panels = 0;       // bf16: the widened panels of the products
};
EncoderStackMemory encoder_stack_memory(const models::ReformerConfig& config, Index batch,
                                        Index length, double s, double a);

// One point of either model: Step is SyntheticStep<T> or Seq2SeqSyntheticStep<T>.
template <class Step, class Config>
SweepPoint measure(SweepPoint point, const Config& config, const SweepOptions& options) {
  auto& tracker = MemoryTracker::instance();
  tracker.install();
  // The batched chunk shape's workspace outlives a step: free it, so that
  // this point counts its own slices (not an earlier point's high-water mark).
  attention::release_chunk_batched_workspace();
  const std::string space = MemSpace::name();
  const std::int64_t start = tracker.space(space).current_bytes;
  Step synthetic(config, point.batch, point.length);
  const std::int64_t before = tracker.space(space).current_bytes;
  const std::int64_t backend_before = backend_bytes(tracker.live_composition(space));
  point.state_bytes = before - start - synthetic.id_bytes();
  // The first step takes the workspace reserved from the prediction, as a
  // training run does (a reserve below the need still grows it, one above is
  // given back after the step); the measured step is the second one, as every
  // later step of a training run.
  tracker.reset_peaks();
  synthetic.workspace().reserve(workspace_reserve(point.predicted.workspace));
  synthetic.run(0);
  point.warmup_peak = tracker.space(space).peak_bytes - before;
  point.workspace_bytes = synthetic.workspace().high_water_bytes();
  synthetic.workspace().shrink_to_high_water();
  tracker.reset_peaks();
  tracker.clear_phases();
  tracker.reset_launches();
  // A kernel profile (REFORMER_KERNEL_PROFILE) covers the steps from the
  // measured one on: the first step's one-time costs (the vendor library
  // loading its kernels, the workspace growing) are not a step's.
  if (KernelProfile::instance().installed()) KernelProfile::instance().reset();
  const auto measured_start = std::chrono::steady_clock::now();
  synthetic.run(1);
  const double measured_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - measured_start).count();
  point.launches_per_step = tracker.launches().ours();
  const auto phases = tracker.phases();
  point.measured = {phase_peak(phases, "forward", space, before),
                    phase_peak(phases, "loss", space, before),
                    phase_peak(phases, "backward", space, before),
                    phase_peak(phases, "optimizer", space, before)};
  point.composition = tracker.peak_composition(space);
  // The backend's allocations made during this point and live at its peak.
  point.backend_bytes =
      std::max<std::int64_t>(0, backend_bytes(point.composition) - backend_before);
  std::vector<double> seconds;
  for (int n = 0; n < options.timed_steps; ++n) {
    const auto t0 = std::chrono::steady_clock::now();
    synthetic.run(std::uint64_t(n) + 2);
    seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(seconds.begin(), seconds.end());
  // Without timed steps, the measured step's time (the tracker adds a label
  // lookup per phase, nothing per kernel).
  point.seconds_per_step = seconds.empty() ? measured_seconds : seconds[seconds.size() / 2];
  point.ran = true;
  return point;
}

// The spec of a variant; ConfigError naming it and the known ones otherwise.
template <class Spec>
const Spec& find_variant(const std::map<std::string, Spec>& specs, const std::string& variant) {
  auto it = specs.find(variant);
  if (it == specs.end()) {
    std::string known;
    for (const auto& entry : specs) known += (known.empty() ? "" : ", ") + entry.first;
    throw ConfigError("memory sweep: unknown variant '" + variant + "' (expected one of " + known +
                      ")");
  }
  return it->second;
}

// A variant's length rules (`check` throws a run's ConfigError): the error
// names the variant and the length, and the sweep's own ways out (a run's
// "pad the sequence" has no meaning here).
template <class Check>
void check_variant_length(const std::string& variant, Index length, const Check& check) {
  try {
    check();
  } catch (const ConfigError& e) {
    throw ConfigError(detail::concat("memory sweep (", variant, ", --lengths ", length,
                                     "): ", e.what(),
                                     ". In a sweep: other --lengths, a smaller chunk "
                                     "(model.lsh.chunk, model.local.chunk) or --variants "
                                     "without ",
                                     variant));
  }
}

// The point with its predictions, measured unless the prediction exceeds the
// budget (then skipped with the reason, nothing allocated).
// `predict(config, batch, length, scalar_bytes, activation_bytes)` gives the
// point's StepMemory and `state(config, scalar_bytes)` its state bytes (a
// family's own predictions; run_point below uses the overloads of
// memory_sweep.hpp).
template <template <class> class Step, class Config, class Predict, class State>
SweepPoint run_point_with(const std::string& variant, const Config& asked, Index layers,
                          Index batch, Index length, const SweepOptions& options,
                          const Predict& predict, const State& state) {
  SweepPoint point;
  point.variant = variant;
  point.length = length;
  point.batch = batch;
  point.layers = layers;
  const std::int64_t scalar = options.dtype == "float" ? 4 : 8;
  const bool reduced = options.precision == "bf16";
  const std::int64_t activation = reduced ? 2 : scalar;
  // "auto" chunks, chosen by this point's own prediction.
  const Config config = with_auto_chunks(
      asked, batch * length, [](Config& c) -> models::ModelSizes& { return c.sizes(); },
      [&](const Config& c) { return predict(c, batch, length, scalar, activation).peak(); });
  point.ff_chunk = config.sizes().ff_chunk;
  point.loss_chunk = config.sizes().loss_chunk;
  point.predicted = predict(config, batch, length, scalar, activation);
  point.predicted_state_bytes = state(config, scalar);
  const std::int64_t needed = point.predicted.peak() + point.predicted_state_bytes;
  const std::int64_t budget =
      options.budget_bytes >= 0 ? options.budget_bytes : available_memory_bytes();
  if (budget >= 0 && needed > budget) {
    point.skipped = "predicted " + format_bytes(needed) + " (step peak + parameters, gradients " +
                    "and Adam moments) exceeds the budget of " + format_bytes(budget);
    return point;
  }
  if (reduced) return measure<Step<bf16>>(point, config, options);
  return options.dtype == "float" ? measure<Step<float>>(point, config, options)
                                  : measure<Step<double>>(point, config, options);
}

template <template <class> class Step, class Config>
SweepPoint run_point(const std::string& variant, const Config& config, Index layers, Index batch,
                     Index length, const SweepOptions& options) {
  return run_point_with<Step>(
      variant, config, layers, batch, length, options,
      [](const Config& c, Index b, Index l, std::int64_t s, std::int64_t a) {
        return predict_step_memory(c, b, l, s, a);
      },
      [](const Config& c, std::int64_t s) { return predict_state_bytes(c, s); });
}

// A byte count from a double, capped far below where int64 would overflow.
inline std::int64_t saturated_bytes(double bytes) { return std::int64_t(std::min(bytes, 9.0e18)); }

// Either model's run: the state (training: parameters, gradients and Adam
// moments; evaluation: the values alone) and a step's peak (training) or a
// forward pass's and the loss's.
inline RunMemory run_memory_of(const StepMemory& step, std::int64_t state, bool training) {
  RunMemory memory;
  memory.state = training ? state : state / 4;
  memory.peak = training ? step.peak() : std::max(step.forward, step.loss);
  memory.workspace = training ? step.workspace : 0;
  return memory;
}
// The check uses float32 activations (for bf16 too: conservative); the
// workspace a training run reserves is the step's at the run's own activation
// size. step_at(activation_bytes) is the step's StepMemory (0: scalar_bytes).
template <class StepAt>
RunMemory run_memory_at(const StepAt& step_at, std::int64_t state, bool training,
                        std::int64_t scalar_bytes, std::int64_t activation_bytes) {
  RunMemory memory = run_memory_of(step_at(0), state, training);
  if (training && activation_bytes > 0 && activation_bytes != scalar_bytes)
    memory.workspace = step_at(activation_bytes).workspace;
  return memory;
}
template <class Config>
RunMemory run_memory(const Config& config, Index batch, Index length, std::int64_t scalar_bytes,
                     bool training, std::int64_t activation_bytes) {
  return run_memory_at(
      [&](std::int64_t a) { return predict_step_memory(config, batch, length, scalar_bytes, a); },
      predict_state_bytes(config, scalar_bytes), training, scalar_bytes, activation_bytes);
}

}  // namespace reformer::train::sweep
