#include "reformer/io/checkpoint.hpp"
#include "io/text.hpp"

#include "io/hdf5.hpp"
#include "reformer/core/error.hpp"
#include "reformer/core/instantiate.hpp"
#include "reformer/io/files.hpp"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <system_error>
#include <type_traits>

namespace reformer::io {
namespace {
using text::quoted;

namespace fs = std::filesystem;
using hdf5::Handle;

template <class T>
const char* dtype_name() {
  static_assert(std::is_same_v<T, float> || std::is_same_v<T, double>, "float or double");
  return std::is_same_v<T, float> ? "float" : "double";
}

template <class T>
hid_t memory_type() {
  return std::is_same_v<T, float> ? H5T_NATIVE_FLOAT : H5T_NATIVE_DOUBLE;
}

Handle open_checkpoint(const std::string& path, const std::string& context) {
  require_regular_file(path, context, "");
  // Closing the file closes whatever is still open in it (a read that failed
  // half-way may leave HDF5's own objects behind).
  const Handle access(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
  H5Pset_fclose_degree(access.get(), H5F_CLOSE_STRONG);
  Handle file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, access.get()), H5Fclose);
  hdf5::check(file.valid(), context,
              detail::concat(quoted(path),
                             " is not a readable HDF5 checkpoint (truncated, corrupt or "
                             "another format)"));
  return file;
}

// FNV-1a (64 bit) of the metadata written as "key=value" lines: the root
// attributes, the optimizer's step count and the config text. HDF5 checksums
// only the datasets (Fletcher-32), so this is what finds an attribute or the
// config changed after writing (an edit, a flipped byte).
// experiments/hf_import/import_hf_reformer.py writes checkpoints with h5py and
// ports this function (and the layout of write_file); change them together
// (tests/hf_import loads what it writes).
std::uint64_t meta_checksum(const CheckpointMeta& meta, const std::string& library_version) {
  std::string text = detail::concat(
      "format_version=", meta.format_version, "\nstep=", meta.step,
      "\ndata_position=", meta.data_position, "\nseed=", meta.seed, "\ndtype=", meta.dtype,
      "\nlibrary_version=", library_version, "\nskipped_batches=", meta.skipped_batches,
      "\noptimizer_steps=", meta.optimizer_steps, "\nconfig=", meta.config);
  std::uint64_t hash = 14695981039346656037ull;
  for (const unsigned char c : text) hash = (hash ^ c) * 1099511628211ull;
  return hash;
}

// Reads the root attributes, /config and the optimizer's step count, and checks
// them against the stored checksum; version first, so that a file of another
// format is reported as such.
CheckpointMeta read_meta(hid_t file, const std::string& path, const std::string& context) {
  CheckpointMeta meta;
  const std::string where = detail::concat(context, ": ", quoted(path));
  hdf5::check(hdf5::has_attribute(file, "format_version"), where,
              "has no format_version attribute; it is not a reformer checkpoint");
  const std::int64_t version = hdf5::read_int_attribute(file, "format_version", where);
  const bool checksummed = hdf5::has_attribute(file, "meta_checksum");
  // Version 1 (no checksum) is still read; a version-1 file with a checksum
  // can only be a damaged version-2 file.
  require<IoError>(version == kCheckpointFormatVersion || (version == 1 && !checksummed), where,
                   " has format version ", version, " but this build reads versions 1 and ",
                   kCheckpointFormatVersion,
                   version == 1 ? " (and version 1 files carry no checksum: the file is damaged)"
                                : "; load it with the reformer version that wrote it");
  require<IoError>(version == 1 || checksummed, where,
                   " is damaged: it has no meta_checksum attribute (every version-",
                   kCheckpointFormatVersion, " checkpoint has one); restore it from a copy or ",
                   "use an earlier checkpoint");
  meta.format_version = int(version);
  meta.step = hdf5::read_int_attribute(file, "step", where);
  meta.data_position = hdf5::read_uint_attribute(file, "data_position", where);
  meta.seed = hdf5::read_uint_attribute(file, "seed", where);
  meta.dtype = hdf5::read_string_attribute(file, "dtype", where);
  meta.config = hdf5::read_string(file, "config", where);
  if (hdf5::has_attribute(file, "skipped_batches"))
    meta.skipped_batches = hdf5::read_int_attribute(file, "skipped_batches", where);
  if (hdf5::has_link(file, "optimizer")) {
    const Handle group = hdf5::open_group(file, "optimizer", where);
    meta.optimizer_steps = hdf5::read_int_attribute(group.get(), "steps", where);
  }
  if (checksummed) {
    const std::string library_version =
        hdf5::has_attribute(file, "library_version")
            ? hdf5::read_string_attribute(file, "library_version", where)
            : std::string();
    const std::uint64_t stored = hdf5::read_uint_attribute(file, "meta_checksum", where);
    require<IoError>(stored == meta_checksum(meta, library_version), where,
                     " is damaged: its metadata (step, data position, seed, dtype, optimizer "
                     "steps or config text) does not match the checksum written with it; "
                     "restore it from a copy or use an earlier checkpoint");
  }
  require<IoError>(meta.step >= 0 && meta.skipped_batches >= 0, where, ": step ", meta.step,
                   " and skipped_batches ", meta.skipped_batches, " must be >= 0");
  return meta;
}

std::vector<StoredParameter> read_parameters(hid_t file, const std::string& path,
                                             const std::string& context,
                                             const std::string& group_name = "parameters") {
  const std::string where = detail::concat(context, ": ", quoted(path));
  hdf5::check(hdf5::has_link(file, group_name), where, "has no /" + group_name + " group");
  const Handle group = hdf5::open_group(file, group_name, where);
  std::vector<StoredParameter> out;
  for (const std::string& name : hdf5::link_names(group.get(), where)) {
    const Handle dataset = hdf5::open_dataset(group.get(), name, where);
    out.push_back({name, hdf5::dataset_info(dataset.get(), where).shape});
  }
  return out;
}

// A validated dataset: open, floating point of T's size, of the expected shape.
template <class T>
Handle open_matching(hid_t file, const std::string& dataset_path, const std::string& what,
                     const std::vector<Index>& shape, const std::string& where,
                     const std::string& missing_fix) {
  require<CheckpointMismatchError>(hdf5::has_link(file, dataset_path), where, " has no ", what,
                                   " (/", dataset_path, ", shape ", shape_string(shape), ")",
                                   missing_fix);
  Handle dataset = hdf5::open_dataset(file, dataset_path, where);
  const hdf5::DatasetInfo info = hdf5::dataset_info(dataset.get(), where);
  require<IoError>(info.is_float && info.bytes == sizeof(T), where, ": /", dataset_path, " stores ",
                   info.bytes, "-byte ", info.is_float ? "floats" : "non-floats",
                   " but the model uses ", dtype_name<T>(), " (", sizeof(T), " bytes)");
  require<CheckpointMismatchError>(info.shape == shape, where, ": ", what, " has shape ",
                                   shape_string(info.shape), " in the file but ",
                                   shape_string(shape),
                                   " in the model; the model config differs from the checkpoint's");
  return dataset;
}

template <class T>
std::vector<T> read_values(const Handle& dataset, Index size, const std::string& where,
                           const std::string& what) {
  std::vector<T> values(static_cast<std::size_t>(size));
  hdf5::read_all(dataset.get(), memory_type<T>(), values.data(), where + ": " + what);
  return values;
}

template <class T>
void require_finite(const std::vector<T>& values, const std::string& where,
                    const std::string& what) {
  std::size_t bad = 0, first = 0;
  for (std::size_t i = values.size(); i-- > 0;)
    if (!std::isfinite(values[i])) {
      ++bad;
      first = i;
    }
  require<IoError>(bad == 0, where, ": ", what, " holds ", bad, " non-finite value",
                   bad == 1 ? "" : "s", " (the first at index ", first, " is ",
                   bad ? double(values[first]) : 0.0,
                   "); the run had diverged when it was saved: use an earlier checkpoint");
}

// Every tensor of `set` from /<group>/<name>, validated (names both ways,
// dtype, shapes, finite values) before anything is returned.
template <class T>
std::vector<std::vector<T>> read_set(hid_t file, const std::string& path,
                                     const std::string& context, const std::string& group,
                                     const ParameterSet<T>& set, const std::string& kind) {
  const std::string where = context + ": " + quoted(path);
  std::vector<Handle> datasets;
  for (const Parameter<T>& p : set)
    datasets.push_back(open_matching<T>(
        file, group + "/" + p.name, kind + " \"" + p.name + "\"", p.shape, where,
        "; the model has it but the checkpoint does not: the model config differs from the "
        "checkpoint's"));
  for (const StoredParameter& stored : read_parameters(file, path, context, group))
    require<CheckpointMismatchError>(
        set.contains(stored.name), where, " has ", kind, " \"", stored.name, "\" (shape ",
        shape_string(stored.shape),
        ") that the model lacks; the model config differs from the checkpoint's");
  std::vector<std::vector<T>> data;
  std::size_t i = 0;
  for (const Parameter<T>& p : set)
    data.push_back(read_values<T>(datasets[i++], p.size(), where, kind + " " + p.name));
  i = 0;
  for (const Parameter<T>& p : set) require_finite(data[i++], where, kind + " \"" + p.name + "\"");
  return data;
}

template <class T>
void copy_to(const View1<T>& destination, const std::vector<T>& values) {
  Kokkos::View<const T*, HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>> host(values.data(),
                                                                                  values.size());
  Kokkos::deep_copy(destination, host);
}

template <class T>
void write_view(hid_t group, const std::string& name, const std::vector<Index>& shape,
                const View1<T>& values, const std::string& context) {
  const auto host = Kokkos::create_mirror_view_and_copy(HostSpace(), values);
  hdf5::write_floats(group, name, shape, memory_type<T>(), host.data(), context);
}

// An HDF5 file image in memory, as written to disk.
struct FileImage {
  std::unique_ptr<char[]> bytes;
  std::size_t size = 0;
};

// The whole checkpoint as the bytes of an HDF5 file, built in memory (the core
// driver without a backing store): HDF5 itself never writes to the disk. A
// write HDF5 makes that fails (a full disk) leaves its file object half closed:
// HDF5 1.10 frees the file's structures when the final flush of H5Fclose fails
// but keeps its id, and closes that id again at exit (H5_term_library), reading
// freed memory — the trainer's segmentation fault after ENOSPC. In memory,
// every HDF5 call here either succeeds or fails without touching a file, and
// the one write to disk is ours (write_file_atomically), whose failures are
// plain errno values. The cost: host memory for one checkpoint, twice while
// the image is copied out.
// An optimizer's moments must be laid out like the set's values (ConfigError
// naming both sizes otherwise).
template <class T>
View1<T> moments_like(const char* op, const View1<T>& moments, const ParameterSet<T>& params) {
  require<ConfigError>(moments.extent(0) == params.values().extent(0), op,
                       ": the optimizer's moments hold ", moments.extent(0),
                       " elements but the parameter set's values hold ", params.values().extent(0),
                       "; build the optimizer on this set after registering every parameter");
  return moments;
}

// The moments of parameter p in buffers laid out like its set's values.
template <class T>
View1<T> moment_of(const View1<T>& moments, const Parameter<T>& p) {
  return Kokkos::subview(moments, std::make_pair(p.offset, p.offset + p.size()));
}

template <class T>
FileImage write_image(const ParameterSet<T>& params, const OptimizerMoments<T>* optimizer,
                      const CheckpointMeta& meta, const ParameterSet<T>* state,
                      const std::string& context) {
  // The image grows in steps of about its expected size (values, moments, state
  // and room for HDF5's metadata), at most 64 MiB at a time.
  std::size_t expected = std::size_t(params.total_elements()) * sizeof(T) * (optimizer ? 3 : 1) +
                         meta.config.size() + (std::size_t(1) << 16);
  if (state) expected += std::size_t(state->total_elements()) * sizeof(T);
  const std::size_t increment =
      std::min<std::size_t>(std::size_t(64) << 20, std::max<std::size_t>(1 << 16, expected));
  // Closing the file closes every object in it, so nothing can stay unwritten.
  const Handle access(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
  hdf5::check(access.valid() && H5Pset_fclose_degree(access.get(), H5F_CLOSE_STRONG) >= 0 &&
                  H5Pset_fapl_core(access.get(), increment, 0) >= 0,
              context, "cannot set up an in-memory HDF5 file");
  // The 1.10 file format: superblock, object headers and chunk indexes carry
  // checksums, so damage to HDF5's own structures is found when they are read
  // instead of being followed (the 1.8 format, the default, has none).
  H5Pset_libver_bounds(access.get(), H5F_LIBVER_V110, H5F_LIBVER_V110);
  // The name only labels the image; nothing is created at it.
  Handle file(H5Fcreate("checkpoint-image.h5", H5F_ACC_TRUNC, H5P_DEFAULT, access.get()), H5Fclose);
  hdf5::check(file.valid(), context, "cannot create an in-memory HDF5 file");
  const hid_t root = file.get();
  hdf5::write_attribute(root, "format_version", std::int64_t(kCheckpointFormatVersion), context);
  hdf5::write_attribute(root, "step", std::int64_t(meta.step), context);
  hdf5::write_attribute(root, "data_position", std::uint64_t(meta.data_position), context);
  hdf5::write_attribute(root, "seed", std::uint64_t(meta.seed), context);
  hdf5::write_attribute(root, "dtype", std::string(dtype_name<T>()), context);
  hdf5::write_attribute(root, "library_version", std::string(REFORMER_VERSION), context);
  hdf5::write_attribute(root, "skipped_batches", std::int64_t(meta.skipped_batches), context);
  hdf5::write_string(root, "config", meta.config, context);
  CheckpointMeta written = meta;
  written.format_version = kCheckpointFormatVersion;
  written.dtype = dtype_name<T>();
  written.optimizer_steps = optimizer ? optimizer->steps() : -1;
  hdf5::write_attribute(root, "meta_checksum", meta_checksum(written, REFORMER_VERSION), context);
  {
    const Handle group = hdf5::create_group(root, "parameters", context);
    for (const Parameter<T>& p : params) write_view(group.get(), p.name, p.shape, p.value, context);
  }
  if (optimizer) {
    const Handle group = hdf5::create_group(root, "optimizer", context);
    hdf5::write_attribute(group.get(), "steps", std::int64_t(optimizer->steps()), context);
    const Handle m = hdf5::create_group(group.get(), "m", context);
    const Handle v = hdf5::create_group(group.get(), "v", context);
    const View1<T> first = moments_like("save_checkpoint", optimizer->first_moments(), params);
    const View1<T> second = moments_like("save_checkpoint", optimizer->second_moments(), params);
    for (const Parameter<T>& p : params) {
      write_view(m.get(), p.name, p.shape, moment_of(first, p), context);
      write_view(v.get(), p.name, p.shape, moment_of(second, p), context);
    }
  }
  if (state) {
    const Handle group = hdf5::create_group(root, "state", context);
    for (const Parameter<T>& p : *state) write_view(group.get(), p.name, p.shape, p.value, context);
  }
  hdf5::check(H5Fflush(root, H5F_SCOPE_GLOBAL) >= 0, context, "cannot flush the HDF5 file image");
  const ssize_t size = H5Fget_file_image(root, nullptr, 0);
  hdf5::check(size > 0, context, "cannot get the size of the HDF5 file image");
  FileImage image;
  image.bytes.reset(new char[std::size_t(size)]);
  image.size = std::size_t(size);
  hdf5::check(H5Fget_file_image(root, image.bytes.get(), image.size) == size, context,
              "cannot copy the HDF5 file image");
  hdf5::seal_file_image(reinterpret_cast<unsigned char*>(image.bytes.get()), image.size);
  hdf5::check(file.close(), context, "cannot close the in-memory HDF5 file");
  return image;
}

}  // namespace

template <class T>
void save_checkpoint(const std::string& path, const ParameterSet<T>& params,
                     const OptimizerOf<T>* optimizer, const CheckpointMeta& meta,
                     const typename NonDeduced<ParameterSet<T>>::type* state) {
  const std::string context = "save_checkpoint " + quoted(path);
  require<IoError>(!path.empty(), "save_checkpoint: the path is empty");
  const hdf5::QuietErrors quiet;
  fs::path directory = fs::path(path).parent_path();
  if (directory.empty()) directory = ".";
  std::error_code error;
  fs::create_directories(directory, error);
  if (error) throw_write_error(context, "create the folder", directory.string(), error.value());

  // Build the file in memory, then write it aside, sync, and rename it over the
  // final name: a reader (or a crash) sees the old file or the new one, never a
  // partial one; a failed write (a full disk) removes the partial file.
  const FileImage image = write_image(params, optimizer, meta, state, context);
  // Before it replaces anything, the written file must read back as a checkpoint
  // (its metadata and checksum; opened read-only, HDF5 writes nothing).
  write_file_atomically(path, image.bytes.get(), image.size, context,
                        [&](const std::string& written) {
                          const Handle file = open_checkpoint(written, context);
                          read_meta(file.get(), written, context);
                        });
}

template <class T>
CheckpointMeta load_checkpoint(const std::string& path, ParameterSet<T>& params,
                               OptimizerOf<T>* optimizer) {
  const std::string context = "load_checkpoint";
  const std::string where = context + ": " + quoted(path);
  const hdf5::QuietErrors quiet;
  const Handle file = open_checkpoint(path, context);
  const CheckpointMeta meta = read_meta(file.get(), path, context);
  require<IoError>(meta.dtype == dtype_name<T>(), where, " holds ", meta.dtype,
                   " parameters but the model uses ", dtype_name<T>(), "; load it into a ",
                   "ParameterSet<", meta.dtype, "> (dtype = \"", meta.dtype, "\")");

  // Validate and read everything first: names both ways, shapes, types,
  // moments, finite values (a run that diverged must not be continued or
  // evaluated from its NaNs).
  const auto value_data = read_set<T>(file.get(), path, context, "parameters", params, "parameter");
  std::vector<Handle> first, second;
  std::vector<View1<T>> first_views, second_views;
  const std::int64_t optimizer_steps = meta.optimizer_steps;
  std::vector<std::vector<T>> first_data, second_data;
  if (optimizer) {
    require<IoError>(hdf5::has_link(file.get(), "optimizer"), where,
                     " has no optimizer state (it was saved without an optimizer); load it "
                     "with optimizer = nullptr to restore the parameters only");
    require<IoError>(optimizer_steps >= 0, where, ": the optimizer's steps attribute is ",
                     optimizer_steps, " but must be >= 0");
    const std::string fix = "; the optimizer state is incomplete";
    // ConfigError now, before anything changed, if the optimizer is not params'.
    const View1<T> first_moments =
                       moments_like("load_checkpoint", optimizer->first_moments(), params),
                   second_moments =
                       moments_like("load_checkpoint", optimizer->second_moments(), params);
    for (const Parameter<T>& p : params) {
      first_views.push_back(moment_of(first_moments, p));
      second_views.push_back(moment_of(second_moments, p));
      first.push_back(open_matching<T>(file.get(), "optimizer/m/" + p.name,
                                       "first moment of \"" + p.name + "\"", p.shape, where, fix));
      second.push_back(open_matching<T>(file.get(), "optimizer/v/" + p.name,
                                        "second moment of \"" + p.name + "\"", p.shape, where,
                                        fix));
    }
    std::size_t i = 0;
    for (const Parameter<T>& p : params) {
      first_data.push_back(read_values<T>(first[i], p.size(), where, "first moment " + p.name));
      second_data.push_back(read_values<T>(second[i], p.size(), where, "second moment " + p.name));
      require_finite(first_data[i], where, "first moment of \"" + p.name + "\"");
      require_finite(second_data[i], where, "second moment of \"" + p.name + "\"");
      ++i;
    }
  }
  // Only then change the model and the optimizer.
  std::size_t i = 0;
  for (Parameter<T>& p : params) {
    copy_to(p.value, value_data[i]);
    if (optimizer) {
      copy_to(first_views[i], first_data[i]);
      copy_to(second_views[i], second_data[i]);
    }
    ++i;
  }
  if (optimizer) optimizer->set_steps(optimizer_steps);
  return meta;
}

CheckpointMeta read_checkpoint_meta(const std::string& path) {
  const hdf5::QuietErrors quiet;
  const Handle file = open_checkpoint(path, "read_checkpoint_meta");
  return read_meta(file.get(), path, "read_checkpoint_meta");
}

std::vector<StoredParameter> read_checkpoint_parameters(const std::string& path) {
  const hdf5::QuietErrors quiet;
  const Handle file = open_checkpoint(path, "read_checkpoint_parameters");
  read_meta(file.get(), path, "read_checkpoint_parameters");
  return read_parameters(file.get(), path, "read_checkpoint_parameters");
}

std::vector<StoredParameter> read_checkpoint_state(const std::string& path) {
  const hdf5::QuietErrors quiet;
  const Handle file = open_checkpoint(path, "read_checkpoint_state");
  read_meta(file.get(), path, "read_checkpoint_state");
  if (!hdf5::has_link(file.get(), "state")) return {};
  return read_parameters(file.get(), path, "read_checkpoint_state", "state");
}

template <class T>
void load_checkpoint_state(const std::string& path, ParameterSet<T>& state) {
  const std::string context = "load_checkpoint_state";
  const hdf5::QuietErrors quiet;
  const Handle file = open_checkpoint(path, context);
  read_meta(file.get(), path, context);
  if (state.size() == 0 && !hdf5::has_link(file.get(), "state")) return;
  const auto data = read_set<T>(file.get(), path, context, "state", state, "state tensor");
  std::size_t i = 0;
  for (Parameter<T>& p : state) copy_to(p.value, data[i++]);
}

#define REFORMER_INSTANTIATE(T)                                                       \
  template void save_checkpoint<T>(const std::string&, const ParameterSet<T>&,        \
                                   const OptimizerMoments<T>*, const CheckpointMeta&, \
                                   const ParameterSet<T>*);                           \
  template CheckpointMeta load_checkpoint<T>(const std::string&, ParameterSet<T>&,    \
                                             OptimizerMoments<T>*);                   \
  template void load_checkpoint_state<T>(const std::string&, ParameterSet<T>&);
REFORMER_INSTANTIATE_FLOAT_AND_DOUBLE(REFORMER_INSTANTIATE)

}  // namespace reformer::io
