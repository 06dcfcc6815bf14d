// The memory and speed instrument (`reformer memory`): one training step
// (forward, loss, backward, Adam) of a model variant at a sequence length,
// measured with the memory tracker per phase and timed, beside the memory
// predicted from the shapes alone.
//
// Variants (the rows of the paper's Table 3, plus local attention):
//   full        full attention, stored activations (a plain Transformer)
//   full-rev    full attention, reversible blocks
//   lsh-N       LSH attention with N hash rounds (N = 1, 2, 4, 8), stored activations
//   local       local attention, stored activations
//   exact       exact attention in O(L) memory (FlashAttention-style), stored activations
//   exact-rev   exact attention, reversible blocks
//   reformer    LSH (the base config's rounds), reversible, chunked feed-forward and loss
// Everything but the attention, the reversibility and the chunking comes from a
// base config (d_model, heads, d_ff, vocabulary, layers, LSH chunk, ...).
#pragma once

#include "reformer/core/memory_tracker.hpp"
#include "reformer/models/reformer_config.hpp"
#include "reformer/models/transformer.hpp"
#include "reformer/train/synthetic_step.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace reformer::train {

// The base model of the sweep as a [model] TOML table: the Reformer
// (vocabulary 256, d_model 256, 4 heads of 64, d_ff 1024, LSH chunk 64 with 2
// rounds, local chunk 128, feed-forward chunks of 1024 positions, loss chunks of
// 1024 rows, axial positions, causal, 2 layers). `reformer memory` overrides it
// with model.k=v arguments; bench_model uses it as it is.
const char* sweep_base_model();

// The encoder-decoder's base model (`reformer memory --model transformer`): the
// same widths, 2 + 2 layers, sinusoidal positions, no dropout.
const char* sweep_base_transformer();

// The variant names above, in that order. For the encoder-decoder (sources and
// targets of the same length): full and exact are that attention everywhere
// (encoder, decoder, cross), lsh-N and local put LSH-N or local attention in
// the encoder with a local decoder and exact cross-attention, -rev and
// reformer are reversible, and reformer is LSH in the encoder with chunked
// feed-forward and loss.
const std::vector<std::string>& sweep_variant_names();

// Transformer-XL's base model (`reformer memory --model transformer_xl`): the
// same widths, 2 layers, post-LN, no dropout; and its variants, by memory
// length: xl-mem0 (no recurrence), xl (mem_len = the segment length, as the
// paper trains) and xl-mem4x (four segments of memory, as it evaluates).
const char* sweep_base_xl();
const std::vector<std::string>& sweep_xl_variant_names();
XLStepConfig variant_config(const std::string& variant, models::TransformerXLConfig base,
                            Index length);

// The base config turned into `variant` at `length` (max_length and the axial
// shape follow the length). ConfigError naming the variant if it is unknown.
models::ReformerConfig variant_config(const std::string& variant, models::ReformerConfig base,
                                      Index length);
models::TransformerConfig variant_config(const std::string& variant, models::TransformerConfig base,
                                         Index length);

// A key of the base config that a sweep point sets itself, and what sets it
// (`--layers`, `--lengths` or the variant): `reformer memory` refuses an
// override of such a key by name, since it would have no effect.
struct SweepSetKey {
  std::string key, by;
};
std::vector<SweepSetKey> variant_keys(const std::string& variant, const models::ReformerConfig&);
std::vector<SweepSetKey> variant_keys(const std::string& variant, const models::TransformerConfig&);
std::vector<SweepSetKey> variant_keys(const std::string& variant,
                                      const models::TransformerXLConfig&);

// Peak bytes of each phase of one training step above what existed before it
// (the parameters, their gradients and the optimizer moments, the token ids).
struct StepMemory {
  std::int64_t forward = 0, loss = 0, backward = 0, optimizer = 0;
  // Of each: the model's workspace arena at its high-water mark (every phase
  // of a steady step holds it), which a run reserves before its first step
  // so that the first step peaks no higher than the later ones
  // (core/workspace.hpp).
  std::int64_t workspace = 0;
  std::int64_t peak() const;
};

// What the step needs before it starts: parameters + gradients + Adam moments.
std::int64_t predict_state_bytes(const models::ReformerConfig& config, std::int64_t scalar_bytes);
std::int64_t predict_state_bytes(const models::TransformerConfig& config,
                                 std::int64_t scalar_bytes);

// The step's peaks predicted from the shapes (docs/memory.md has the formulas);
// the encoder-decoder's with sources and targets of `length`.
// activation_bytes: the stored activations' size (2 with train.precision =
// "bf16"; 0: scalar_bytes), the row statistics and logsumexps staying at
// scalar_bytes (every family).
StepMemory predict_step_memory(const models::ReformerConfig& config, Index batch, Index length,
                               std::int64_t scalar_bytes, std::int64_t activation_bytes = 0);
StepMemory predict_step_memory(const models::TransformerConfig& config, Index batch, Index length,
                               std::int64_t scalar_bytes, std::int64_t activation_bytes = 0);
// Transformer-XL's parameters (its memory is not state: see XLSyntheticStep),
// and a step on segments of `length` over a full memory of config.mem_len.
std::int64_t predict_state_bytes(const XLStepConfig& config, std::int64_t scalar_bytes);
StepMemory predict_step_memory(const XLStepConfig& config, Index batch, Index length,
                               std::int64_t scalar_bytes, std::int64_t activation_bytes = 0);
// The memory itself: layers x batch x mem_len x d_model values.
std::int64_t predict_xl_memory_bytes(const XLStepConfig& config, Index batch,
                                     std::int64_t scalar_bytes);

// What a run reserves in its workspace before its first step: the predicted
// arena (StepMemory::workspace) and 64 KiB. The prediction leaves out each
// buffer's 256-byte alignment, and a reserve short by even that much serves
// a whole buffer beside the arena (Transformer-XL's was 512 bytes short);
// what the step did not use is given back after it
// (Workspace::shrink_to_high_water).
std::int64_t workspace_reserve(std::int64_t predicted_workspace);

// What a run needs at most, predicted as `reformer memory` does: the state
// (training: parameters, gradients and Adam moments; evaluation: parameters)
// and the peak of a step (training) or of a forward pass and the loss. The
// trainer, eval and generate compare it with the free memory before they
// allocate anything. Saturates at about 9e18 bytes instead of overflowing.
struct RunMemory {
  std::int64_t state = 0, peak = 0;
  std::int64_t workspace = 0;  // training: the step's arena (StepMemory::workspace); else 0
  std::int64_t total() const;
};
// activation_bytes: the run's stored activations (2 for train.precision =
// "bf16"; 0: scalar_bytes), for RunMemory::workspace alone.
RunMemory predict_run_memory(const models::ReformerConfig& config, Index batch, Index length,
                             std::int64_t scalar_bytes, bool training,
                             std::int64_t activation_bytes = 0);
RunMemory predict_run_memory(const models::TransformerConfig& config, Index batch, Index length,
                             std::int64_t scalar_bytes, bool training,
                             std::int64_t activation_bytes = 0);
// Transformer-XL: `groups` memories of `batch` rows (train.accumulate of them
// in training, 1 in evaluation) count into the state; evaluation keeps one
// layer's activations.
RunMemory predict_run_memory(const XLStepConfig& config, Index batch, Index length,
                             std::int64_t scalar_bytes, bool training, Index groups,
                             std::int64_t activation_bytes = 0);

struct SweepPoint {
  std::string variant;
  Index length = 0, layers = 0, batch = 0;
  bool ran = false;
  std::string skipped;  // why the point did not run (empty if it ran)
  StepMemory measured, predicted;
  // The first step's peak, with the workspace reserved from the prediction
  // before it (predicted.workspace) and shrunk to its high-water mark after it.
  std::int64_t warmup_peak = 0;
  std::int64_t workspace_bytes = 0;  // the workspace's measured high-water mark
  std::int64_t state_bytes = 0;      // measured parameters + gradients + Adam moments
  std::int64_t predicted_state_bytes = 0;
  double seconds_per_step = 0.0;        // median of the timed steps
  std::vector<LabelBytes> composition;  // what was live at the step's peak
  // Of the measured peak: the backend's own allocations made during the point
  // and live at it (Kokkos' team scratch: per thread on the host, growing with
  // the thread count and the largest team kernel run so far; on a GPU a pool for
  // every team that can be resident, 2-4 GiB on an H100 for the LSH and local
  // kernels' level-1 tiles). The prediction models the model's allocations,
  // measured.peak() - backend_bytes.
  std::int64_t backend_bytes = 0;
  // Our kernel launches in the measured step (MemoryTracker::launches().ours():
  // Kokkos' copies, fills and View initialisation not counted).
  std::int64_t launches_per_step = 0;
  // The feed-forward's and the loss's chunks the point ran with, in rows
  // (model.ff_chunk and model.loss_chunk, "auto" resolved; ff 0: all rows).
  Index ff_chunk = 0, loss_chunk = 0;
};

struct SweepOptions {
  int timed_steps = 2;  // steps timed after the measured one (0: the measured step is timed)
  std::int64_t budget_bytes = -1;  // skip points predicted above it; < 0: free memory now
  std::string dtype = "float";     // "float" or "double"
  // "float32" or "bf16" (bf16 activations on float32 parameters, gradients
  // and Adam moments: train.precision), for every family
  std::string precision = "float32";
};

// ConfigError naming the value unless `precision` is "float32" or "bf16".
void check_sweep_precision(const std::string& precision);

// Runs one point: skipped (with the reason) when the predicted peak plus the
// state exceeds the budget, never attempted.
SweepPoint run_sweep_point(const std::string& variant, const models::ReformerConfig& base,
                           Index batch, Index length, const SweepOptions& options);
SweepPoint run_sweep_point(const std::string& variant, const models::TransformerConfig& base,
                           Index batch, Index length, const SweepOptions& options);
SweepPoint run_sweep_point(const std::string& variant, const models::TransformerXLConfig& base,
                           Index batch, Index length, const SweepOptions& options);

}  // namespace reformer::train
