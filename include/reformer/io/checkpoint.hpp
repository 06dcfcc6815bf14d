// HDF5 checkpoints: parameters, Adam moments and the position of a run.
//
// One file per checkpoint, readable with h5py and no special tools:
//   /                       attributes format_version (int64), step (int64),
//                           data_position (uint64), seed (uint64), dtype ("float"
//                           or "double"), library_version (strings are
//                           fixed-length UTF-8), skipped_batches (int64:
//                           batches the divergence guard skipped), meta_checksum
//                           (uint64, FNV-1a over every attribute, the optimizer's
//                           steps and the config text; version 2)
//   /config                 the resolved run config (TOML text), a scalar string
//   /parameters/<name>      one dataset per parameter under its dotted name
//                           ("layers.0.attn.w_qk"), with the parameter's shape, in
//                           registration order (link creation order is tracked)
//   /optimizer              attribute steps (int64), only when saved with an optimizer
//   /optimizer/m/<name>     Adam's first moments, shaped like the parameter
//   /optimizer/v/<name>     Adam's second moments
//   /state/<name>           what else a resumed run needs, when there is any
//                           (Transformer-XL's memories, "memory.<j>.<layer>")
// Datasets are chunked with a Fletcher-32 checksum and the metadata has its own,
// so flipped bits or edits anywhere are found when loading ("... is damaged").
// Version 1 files (no meta_checksum) are still read. Randomness is counter-based (core/random.hpp):
// the seed, the step and the data position restore every random stream; there is no RNG state to
// store.
//
// Writing is atomic: the file is built in memory (HDF5's core driver), written
// as "<path>.tmp.<pid>" in the same directory, fsync'ed, renamed over <path>, and
// the directory is fsync'ed. A crash (even SIGKILL) at any moment leaves either
// the previous file or the new one at <path>, never a torn file, and never
// touches other checkpoints. A full disk or a read-only file system is a
// WriteError naming the path and the free space; the partial file is removed.
// (HDF5 never writes to the disk itself: in HDF5 1.10 a failed write leaves a
// file object that crashes the process when the library shuts down.)
//
// Loading validates the whole file before it changes anything: format version,
// the metadata checksum, dtype, the set of parameter names, every shape and, with
// an optimizer, every moment; and every value and moment must be finite. The IoError names the
// first mismatch, the file and the fix; the model and the optimizer are unchanged when loading
// fails.
#pragma once

#include "reformer/core/error.hpp"
#include "reformer/core/optimizer_moments.hpp"
#include "reformer/core/parameter_set.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace reformer::io {

// A checkpoint whose parameters the model does not match (a name missing on
// either side, another shape): the model was built from another config.
class CheckpointMismatchError : public IoError {
 public:
  using IoError::IoError;
};

constexpr int kCheckpointFormatVersion = 2;

struct CheckpointMeta {
  std::int64_t step = 0;                          // optimizer steps taken
  std::uint64_t data_position = 0;                // index of the next training batch
  std::uint64_t seed = 0;                         // the run's seed
  std::int64_t skipped_batches = 0;               // batches skipped as non-finite
  std::string config;                             // the resolved run config (TOML text)
  std::string dtype;                              // "float" or "double"; written by save_checkpoint
  int format_version = kCheckpointFormatVersion;  // written by save_checkpoint
  std::int64_t optimizer_steps = -1;  // read: the optimizer's steps, -1 when saved without one
};

// The optimizer state of a ParameterSet<T> (train::Adam<T> is one): moments
// laid out like the set's values() and a step count. The optimizer argument
// does not take part in deducing T, so `save_checkpoint(path, params, nullptr,
// meta)` and `save_checkpoint(path, params, &adam, meta)` both work.
template <class T>
using OptimizerOf = typename NonDeduced<OptimizerMoments<T>>::type;

// Writes the parameters' values (not their gradients), the optimizer's moments
// and step count when `optimizer` is not null, and `meta` (its dtype and
// format_version are ignored: the file gets T's dtype and this build's version).
// Creates the parent directory if needed. IoError naming the path on failure
// (WriteError when the file cannot be written: full disk, read-only file
// system); a file already at `path` is then unchanged. ConfigError, and no
// file, when the optimizer's moments are not laid out like `params`' values.
// `state`, when not null, is written under /state (its values only).
template <class T>
void save_checkpoint(const std::string& path, const ParameterSet<T>& params,
                     const OptimizerOf<T>* optimizer, const CheckpointMeta& meta,
                     const typename NonDeduced<ParameterSet<T>>::type* state = nullptr);

// Restores the parameters' values and, when `optimizer` is not null, its
// moments and step count (its moments must be laid out like `params`' values,
// as those of an optimizer built on `params` after every parameter was
// registered; ConfigError otherwise).
// Returns the file's metadata. IoError naming the path and the first mismatch
// (see above), or when the file is missing, truncated, corrupt or not HDF5.
template <class T>
CheckpointMeta load_checkpoint(const std::string& path, ParameterSet<T>& params,
                               OptimizerOf<T>* optimizer);

// The metadata alone (no model needed). IoError as for load_checkpoint.
CheckpointMeta read_checkpoint_meta(const std::string& path);

// The names and shapes of the parameters stored in a checkpoint, in the order
// they were saved.
struct StoredParameter {
  std::string name;
  std::vector<Index> shape;
};
std::vector<StoredParameter> read_checkpoint_parameters(const std::string& path);
// The names and shapes under /state (empty when the file has none).
std::vector<StoredParameter> read_checkpoint_state(const std::string& path);
// Fills `state` (shaped from read_checkpoint_state) from /state: the same
// validation as parameters (names both ways, dtype, shapes, finite values),
// `state` unchanged on failure.
template <class T>
void load_checkpoint_state(const std::string& path, ParameterSet<T>& state);

// Run folders keep their checkpoints as <run_dir>/checkpoints/step_<step>.h5,
// the step zero-padded to at least 8 digits ("step_00000100.h5").
std::string checkpoint_file(const std::string& run_dir, std::int64_t step);
// The step a checkpoint's file name says ("step_00000100.h5" -> 100), -1 for a
// name of another form.
std::int64_t checkpoint_step(const std::string& path);

// The checkpoint of the highest step in <run_dir>/checkpoints, or nothing when
// there is none (or no such folder). Files that are not named step_<digits>.h5,
// such as the temporary files of a write in progress, are ignored. Every file
// with a checkpoint name is complete, since files only get there by rename; a
// checkpoint name on anything but a readable regular file (a folder, a dangling
// link) is an IoError naming it, never skipped for an older checkpoint.
std::optional<std::string> latest_checkpoint(const std::string& run_dir);

// The metadata of `checkpoint` (read_checkpoint_meta), which was resolved from
// `target`: a checkpoint file, or a run folder whose newest checkpoint it is.
// When a run folder's newest is damaged, the IoError also names the run's
// newest other checkpoint and how to use it (eval, generate or warm-start from
// it by its path; move the damaged file aside to resume from it), without
// reading it: nothing is skipped silently.
CheckpointMeta read_target_meta(const std::string& target, const std::string& checkpoint);

// Deletes all but the `keep` newest checkpoints of <run_dir>/checkpoints
// (keep >= 1, ConfigError otherwise), and the temporary files left by writers
// that no longer run ("*.tmp.<pid>" whose process is gone). IoError naming a
// file that cannot be removed.
void prune_checkpoints(const std::string& run_dir, int keep);

}  // namespace reformer::io
