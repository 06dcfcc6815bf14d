#include "reformer/core/error.hpp"
#include "reformer/io/checkpoint.hpp"
#include "reformer/io/files.hpp"
#include "reformer/train/optimizer.hpp"
#include "support/checks.hpp"
#include "support/gradcheck.hpp"
#include "support/temp_dir.hpp"
#include "support/test_python.hpp"

#include <gtest/gtest.h>
#include <hdf5.h>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/lsan_interface.h>
#endif
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <limits>
#include <memory>

namespace reformer::io {
namespace {

using reformer::testing::expect_error;
using reformer::testing::fill_uniform;
using reformer::testing::TempDir;
using reformer::testing::to_host;
using reformer::testing::write_file;
namespace fs = std::filesystem;

// A small model: three parameters of ranks 2, 2 and 1, and its optimizer.
template <class T>
struct Model {
  ParameterSet<T> params;
  std::unique_ptr<train::Adam<T>> adam;

  explicit Model(std::uint64_t seed, Index width = 5) {
    params.add("embedding.table", {7, width});
    params.add("layers.0.attn.w_qk", {width, 6});
    params.add("layers.0.norm.scale", {width});
    adam = std::make_unique<train::Adam<T>>(params);
    std::uint64_t stream = seed * 100;
    for (auto& p : params) {
      fill_uniform(p.value, ++stream);
      fill_uniform(adam->first_moment(p.name), ++stream);
      fill_uniform(adam->second_moment(p.name), ++stream, 0.0, 1.0);
    }
    adam->set_steps(Index(seed) * 3);
  }

  // Every value and moment, in order.
  std::vector<double> state() const {
    std::vector<double> out;
    for (const auto& p : params)
      // A named vector, not a braced list: nvcc 11.8 cannot range over one.
      for (const auto& view : std::vector<View1<T>>{p.value, adam->first_moment(p.name),
                                                    adam->second_moment(p.name)}) {
        const auto host = to_host(view);
        out.insert(out.end(), host.begin(), host.end());
      }
    out.push_back(double(adam->steps()));
    return out;
  }
};

CheckpointMeta sample_meta() {
  CheckpointMeta meta;
  meta.step = 1234;
  meta.data_position = 98765432109876ULL;
  meta.seed = (std::uint64_t(1) << 63) + 5;  // above INT64_MAX
  meta.config = "[model]\nd_model = 256 # width\nname = \"r\u00e9former\"\n";
  return meta;
}

std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

std::vector<std::string> folder_entries(const std::string& folder) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(folder))
    names.push_back(entry.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

// Edits a saved file with the HDF5 C API (to build mismatching checkpoints).
void edit_file(const std::string& path, const std::function<void(hid_t)>& edit) {
  const hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  ASSERT_GE(file, 0);
  edit(file);
  H5Fclose(file);
}

template <class T>
class CheckpointRoundTrip : public ::testing::Test {};
using Scalars = ::testing::Types<float, double>;
TYPED_TEST_SUITE(CheckpointRoundTrip, Scalars);

TYPED_TEST(CheckpointRoundTrip, RestoresValuesMomentsAndMeta) {
  using T = TypeParam;
  TempDir dir;
  const std::string path = dir.file("run/checkpoints/step_00001234.h5");  // folders are created
  const Model<T> saved(1);
  save_checkpoint(path, saved.params, saved.adam.get(), sample_meta());
  EXPECT_EQ(folder_entries(dir.file("run/checkpoints")),
            std::vector<std::string>{"step_00001234.h5"});  // no temporary file is left

  Model<T> loaded(2);
  ASSERT_NE(loaded.state(), saved.state());
  const CheckpointMeta meta = load_checkpoint(path, loaded.params, loaded.adam.get());
  EXPECT_EQ(loaded.state(), saved.state());  // bitwise, steps included
  EXPECT_EQ(loaded.adam->steps(), 3);
  const CheckpointMeta expected = sample_meta();
  EXPECT_EQ(meta.step, expected.step);
  EXPECT_EQ(meta.data_position, expected.data_position);
  EXPECT_EQ(meta.seed, expected.seed);
  EXPECT_EQ(meta.config, expected.config);
  EXPECT_EQ(meta.dtype, std::string(std::is_same_v<T, float> ? "float" : "double"));
  EXPECT_EQ(meta.format_version, kCheckpointFormatVersion);

  const CheckpointMeta alone = read_checkpoint_meta(path);
  EXPECT_EQ(alone.step, expected.step);
  EXPECT_EQ(alone.config, expected.config);
  EXPECT_EQ(alone.dtype, meta.dtype);
  const auto stored = read_checkpoint_parameters(path);
  ASSERT_EQ(stored.size(), 3u);  // in registration order, not alphabetical
  EXPECT_EQ(stored[0].name, "embedding.table");
  EXPECT_EQ(stored[1].name, "layers.0.attn.w_qk");
  EXPECT_EQ(stored[1].shape, (std::vector<Index>{5, 6}));
  EXPECT_EQ(stored[2].name, "layers.0.norm.scale");
}

TYPED_TEST(CheckpointRoundTrip, ParametersOnlyAndOverwrite) {
  using T = TypeParam;
  TempDir dir;
  const std::string path = dir.file("model.h5");
  const Model<T> first(1), second(3);
  save_checkpoint(path, first.params, first.adam.get(), CheckpointMeta{});
  save_checkpoint(path, second.params, nullptr, CheckpointMeta{});  // replaces the file

  Model<T> loaded(2);
  const auto moments_before = to_host(loaded.adam->first_moment("embedding.table"));
  load_checkpoint(path, loaded.params, nullptr);
  for (const auto& p : loaded.params)
    EXPECT_EQ(to_host(p.value), to_host(second.params.get(p.name).value)) << p.name;
  EXPECT_EQ(to_host(loaded.adam->first_moment("embedding.table")), moments_before);
  // The file has no optimizer state now.
  const auto state = loaded.state();
  expect_error<IoError>([&] { load_checkpoint(path, loaded.params, loaded.adam.get()); },
                        {path, "has no optimizer state", "optimizer = nullptr"});
  EXPECT_EQ(loaded.state(), state);
}

// ---------------------------------------------------------------- mismatches

// Loads `path` into a fresh model of width `width`, expects an IoError with
// `parts`, and checks that nothing in the model or optimizer changed.
template <class T>
void expect_load_error(const std::string& path, const std::vector<std::string>& parts,
                       Index width = 5, const std::function<void(Model<T>&)>& adjust = {}) {
  Model<T> model(9, width);
  if (adjust) adjust(model);
  const auto before = model.state();
  expect_error<IoError>([&] { load_checkpoint(path, model.params, model.adam.get()); }, parts);
  EXPECT_EQ(model.state(), before) << "a failed load changed the model";
}

TEST(CheckpointMismatch, FormatVersion) {
  TempDir dir;
  const std::string path = dir.file("v3.h5");
  const Model<float> model(1);
  save_checkpoint(path, model.params, model.adam.get(), sample_meta());
  edit_file(path, [](hid_t file) {
    const std::int64_t version = 3;
    const hid_t attribute = H5Aopen(file, "format_version", H5P_DEFAULT);
    H5Awrite(attribute, H5T_NATIVE_INT64, &version);
    H5Aclose(attribute);
  });
  expect_load_error<float>(path, {path, "format version 3", "this build reads versions 1 and 2"});
  expect_error<IoError>([&] { read_checkpoint_meta(path); }, {"format version 3"});
}

TEST(CheckpointMismatch, Dtype) {
  TempDir dir;
  const std::string path = dir.file("double.h5");
  const Model<double> model(1);
  save_checkpoint(path, model.params, model.adam.get(), sample_meta());
  expect_load_error<float>(
      path, {path, "holds double parameters", "the model uses float", "ParameterSet<double>"});
}

TEST(CheckpointMismatch, ParameterMissingInTheFile) {
  TempDir dir;
  const std::string path = dir.file("small.h5");
  const Model<float> model(1);
  save_checkpoint(path, model.params, model.adam.get(), sample_meta());
  // A model with one more parameter, registered before building a new optimizer.
  Model<float> larger(9);
  larger.params.add("layers.1.norm.scale", {5});
  larger.adam = std::make_unique<train::Adam<float>>(larger.params);
  const auto before = larger.state();
  expect_error<IoError>([&] { load_checkpoint(path, larger.params, larger.adam.get()); },
                        {path, "has no parameter \"layers.1.norm.scale\"",
                         "/parameters/layers.1.norm.scale", "[5]", "model config differs"});
  EXPECT_EQ(larger.state(), before);
}

// The checkpoint takes an optimizer's moments laid out like the parameters'
// values (core/optimizer_moments.hpp): an optimizer built before the last
// parameter was registered is a ConfigError naming both sizes, when saving (no
// file is written) and when loading (nothing changes).
TEST(CheckpointMismatch, OptimizerBuiltBeforeTheLastParameter) {
  TempDir dir;
  Model<float> model(1);
  model.params.add("head.bias", {7});
  const std::vector<std::string> parts = {"optimizer's moments hold", "parameter set's values hold",
                                          "after registering every parameter"};
  expect_error<ConfigError>(
      [&] { save_checkpoint(dir.file("late.h5"), model.params, model.adam.get(), sample_meta()); },
      parts);
  EXPECT_FALSE(fs::exists(dir.file("late.h5")));
  const train::Adam<float> full(model.params);
  save_checkpoint(dir.file("full.h5"), model.params, &full, sample_meta());
  const auto values = to_host(model.params.values());
  const auto moments = to_host(model.adam->first_moments());
  const std::int64_t steps = model.adam->steps();
  expect_error<ConfigError>(
      [&] { load_checkpoint(dir.file("full.h5"), model.params, model.adam.get()); }, parts);
  EXPECT_EQ(to_host(model.params.values()), values);
  EXPECT_EQ(to_host(model.adam->first_moments()), moments);
  EXPECT_EQ(model.adam->steps(), steps);
}

TEST(CheckpointMismatch, ParameterMissingInTheModel) {
  TempDir dir;
  const std::string path = dir.file("large.h5");
  ParameterSet<float> params;
  params.add("embedding.table", {7, 5});
  params.add("layers.0.attn.w_qk", {5, 6});
  params.add("layers.0.norm.scale", {5});
  params.add("head.bias", {7});
  save_checkpoint(path, params, nullptr, sample_meta());
  Model<float> model(9);
  const auto before = model.state();
  expect_error<IoError>([&] { load_checkpoint(path, model.params, nullptr); },
                        {path, "parameter \"head.bias\"", "[7]", "the model lacks"});
  EXPECT_EQ(model.state(), before);
}

TEST(CheckpointMismatch, Shape) {
  TempDir dir;
  const std::string path = dir.file("wide.h5");
  const Model<float> model(1, 5);
  save_checkpoint(path, model.params, model.adam.get(), sample_meta());
  expect_load_error<float>(
      path,
      {path, "parameter \"embedding.table\" has shape [7, 5] in the file", "[7, 4] in the model"},
      4);
}

TEST(CheckpointMismatch, OptimizerMomentMissing) {
  TempDir dir;
  const std::string path = dir.file("moments.h5");
  const Model<float> model(1);
  save_checkpoint(path, model.params, model.adam.get(), sample_meta());
  edit_file(path, [](hid_t file) {
    ASSERT_GE(H5Ldelete(file, "optimizer/v/layers.0.attn.w_qk", H5P_DEFAULT), 0);
  });
  expect_load_error<float>(path, {path, "has no second moment of \"layers.0.attn.w_qk\"",
                                  "/optimizer/v/layers.0.attn.w_qk"});
  // The parameters alone still load.
  Model<float> loaded(9);
  EXPECT_NO_THROW(load_checkpoint(path, loaded.params, nullptr));
  EXPECT_EQ(to_host(loaded.params.get("layers.0.attn.w_qk").value),
            to_host(model.params.get("layers.0.attn.w_qk").value));
}

// ---------------------------------------------------------------- damaged files

TEST(CheckpointCorrupt, MissingTruncatedRandomAndFlippedFiles) {
  TempDir dir;
  const std::string path = dir.file("good.h5");
  const Model<float> model(1);
  save_checkpoint(path, model.params, model.adam.get(), sample_meta());
  const std::string good = file_bytes(path);

  ::testing::internal::CaptureStderr();
  expect_load_error<float>(dir.file("missing.h5"), {"missing.h5", "No such file"});
  write_file(dir.file("truncated.h5"), good.substr(0, good.size() / 2));
  expect_load_error<float>(dir.file("truncated.h5"),
                           {"truncated.h5", "not a readable HDF5 checkpoint", "HDF5:"});
  write_file(dir.file("header_only.h5"), good.substr(0, 600));
  expect_load_error<float>(dir.file("header_only.h5"), {"header_only.h5", "not a readable"});
  std::string noise(4096, '\0');
  for (std::size_t i = 0; i < noise.size(); ++i) noise[i] = char((i * 2654435761u) >> 13);
  write_file(dir.file("noise.h5"), noise);
  expect_load_error<float>(dir.file("noise.h5"), {"noise.h5", "not a readable"});
  expect_error<IoError>([&] { read_checkpoint_meta(dir.file("noise.h5")); }, {"noise.h5"});
  // An HDF5 file that is not a checkpoint.
  {
    const hid_t file =
        H5Fcreate(dir.file("other.h5").c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    ASSERT_GE(file, 0);
    H5Fclose(file);
  }
  expect_load_error<float>(dir.file("other.h5"),
                           {"other.h5", "no format_version", "not a reformer checkpoint"});
  // A checkpoint whose data bytes changed on disk: the checksum catches it.
  {
    ParameterSet<float> params;
    params.add("w", {64});
    Kokkos::deep_copy(params.get("w").value, 1234.5f);  // a byte pattern easy to find
    save_checkpoint(dir.file("flipped.h5"), params, nullptr, CheckpointMeta{});
    std::string bytes = file_bytes(dir.file("flipped.h5"));
    const float marker = 1234.5f;
    const auto at = bytes.find(std::string(reinterpret_cast<const char*>(&marker), 4));
    ASSERT_NE(at, std::string::npos);
    bytes[at + 40] ^= 0x10;
    write_file(dir.file("flipped.h5"), bytes);
    ParameterSet<float> target;
    target.add("w", {64});
    expect_error<IoError>([&] { load_checkpoint(dir.file("flipped.h5"), target, nullptr); },
                          {"flipped.h5", "parameter w", "checksum"});
    EXPECT_EQ(to_host(target.get("w").value), std::vector<double>(64, 0.0));
  }
  // HDF5 printed nothing: the errors carry its message instead.
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
}

TEST(CheckpointCorrupt, FailedSaveKeepsTheOldFile) {
  TempDir dir;
  const Model<float> model(1);
  // The target is a folder: the rename fails, the temporary file is removed.
  fs::create_directories(dir.file("taken.h5"));
  expect_error<IoError>(
      [&] { save_checkpoint(dir.file("taken.h5"), model.params, nullptr, sample_meta()); },
      {"taken.h5", "cannot rename"});
  EXPECT_EQ(folder_entries(dir.path()), std::vector<std::string>{"taken.h5"});
  // The parent is a file: no folder can be made there.
  write_file(dir.file("plain"), "x");
  expect_error<IoError>(
      [&] { save_checkpoint(dir.file("plain/ckpt.h5"), model.params, nullptr, sample_meta()); },
      {"plain/ckpt.h5", "cannot create the folder"});
}

// State beyond the parameters (Transformer-XL's memories) under /state:
// written when given, read back by name and shape, refused when it does not
// match or is not finite; a checkpoint without it reads as empty.
TEST(CheckpointState, RoundTripsAndIsValidated) {
  TempDir dir;
  const Model<float> model(6);
  ParameterSet<float> state;
  state.add("memory.0.0", {2, 3, 4});
  state.add("memory.0.1", {2, 3, 4});
  for (auto& p : state) fill_uniform(p.value, 77);
  const std::string path = dir.file("s.h5");
  save_checkpoint(path, model.params, model.adam.get(), sample_meta(), &state);
  const auto stored = read_checkpoint_state(path);
  ASSERT_EQ(stored.size(), 2u);
  EXPECT_EQ(stored[1].name, "memory.0.1");
  EXPECT_EQ(stored[1].shape, (std::vector<Index>{2, 3, 4}));
  ParameterSet<float> back;
  back.add("memory.0.0", {2, 3, 4});
  back.add("memory.0.1", {2, 3, 4});
  load_checkpoint_state(path, back);
  for (const auto& p : state) EXPECT_EQ(to_host(back.get(p.name).value), to_host(p.value));
  // The parameters still load as before.
  Model<float> other(9);
  load_checkpoint(path, other.params, other.adam.get());
  EXPECT_EQ(other.state(), model.state());
  ParameterSet<float> wrong;
  wrong.add("memory.0.0", {2, 5, 4});
  wrong.add("memory.0.1", {2, 3, 4});
  expect_error<IoError>([&] { load_checkpoint_state(path, wrong); },
                        {"state tensor \"memory.0.0\"", "[2, 3, 4]", "[2, 5, 4]"});
  ParameterSet<float> fewer;
  fewer.add("memory.0.0", {2, 3, 4});
  expect_error<IoError>([&] { load_checkpoint_state(path, fewer); },
                        {"state tensor \"memory.0.1\"", "lacks"});
  Kokkos::deep_copy(Kokkos::subview(state.get("memory.0.1").value, std::make_pair(0, 1)),
                    std::numeric_limits<float>::quiet_NaN());
  save_checkpoint(path, model.params, model.adam.get(), sample_meta(), &state);
  expect_error<IoError>([&] { load_checkpoint_state(path, back); },
                        {"state tensor \"memory.0.1\"", "non-finite"});
  save_checkpoint(dir.file("plain.h5"), model.params, model.adam.get(), sample_meta());
  EXPECT_TRUE(read_checkpoint_state(dir.file("plain.h5")).empty());
}

// ---------------------------------------------------------------- run folders

TEST(CheckpointFiles, NamesLatestAndPrune) {
  TempDir dir;
  const std::string run = dir.path();
  EXPECT_EQ(checkpoint_file(run, 100), run + "/checkpoints/step_00000100.h5");
  EXPECT_EQ(checkpoint_file(run, 123456789), run + "/checkpoints/step_123456789.h5");
  expect_error<ConfigError>([&] { checkpoint_file(run, -1); }, {"step is -1"});
  EXPECT_FALSE(latest_checkpoint(run).has_value());  // no checkpoints folder yet

  ParameterSet<float> params;
  params.add("w", {3});
  for (const std::int64_t step : {5, 40, 99999999, 123456789, 300}) {
    CheckpointMeta meta;
    meta.step = step;
    save_checkpoint(checkpoint_file(run, step), params, nullptr, meta);
  }
  const std::string folder = run + "/checkpoints/";
  // Names that are not checkpoints, a temporary file of this process (alive)
  // and of a process that is gone.
  write_file(folder + "step_99999999999.h5.tmp.1", "partial");
  write_file(folder + "step_00000500.h5.tmp." + std::to_string(::getpid()), "partial");
  write_file(folder + "step_00000600.h5.tmp.999999999", "partial");
  write_file(folder + "notes.txt", "x");
  write_file(folder + "step_x.h5", "x");
  EXPECT_EQ(latest_checkpoint(run), checkpoint_file(run, 123456789));  // numeric order

  expect_error<ConfigError>([&] { prune_checkpoints(run, 0); }, {"keep is 0", ">= 1"});
  prune_checkpoints(run, 2);
  std::vector<std::string> expected = {"notes.txt",
                                       "step_00000500.h5.tmp." + std::to_string(::getpid()),
                                       "step_123456789.h5", "step_99999999.h5", "step_x.h5"};
  // pid 1 is alive (init) unless this runs in a namespace without it.
  if (::kill(1, 0) == 0 || errno == EPERM) expected.push_back("step_99999999999.h5.tmp.1");
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(folder_entries(folder), expected);
  EXPECT_EQ(read_checkpoint_meta(*latest_checkpoint(run)).step, 123456789);
  prune_checkpoints(run, 1);
  EXPECT_EQ(latest_checkpoint(run), checkpoint_file(run, 123456789));
  EXPECT_FALSE(fs::exists(checkpoint_file(run, 99999999)));
}

// ---------------------------------------------------------------- h5py

// ---------------------------------------------------------------- metadata

void write_int_attribute(hid_t object, const char* name, std::int64_t value) {
  const hid_t attribute = H5Aopen(object, name, H5P_DEFAULT);
  ASSERT_GE(attribute, 0) << name;
  H5Awrite(attribute, H5T_NATIVE_INT64, &value);
  H5Aclose(attribute);
}

// Every metadata field is covered by the checksum: an edit to any of them (as
// h5py or a flipped byte would make) is "damaged", and the file is not changed
// by the failed load.
TEST(CheckpointMetadata, EditsAreFoundAsDamage) {
  TempDir dir;
  const Model<float> model(2);
  const std::string good = dir.file("good.h5");
  save_checkpoint(good, model.params, model.adam.get(), sample_meta());
  const std::vector<std::pair<std::string, std::function<void(hid_t)>>> edits = {
      {"step", [](hid_t f) { write_int_attribute(f, "step", 3); }},
      {"step 2^62", [](hid_t f) { write_int_attribute(f, "step", std::int64_t(1) << 62); }},
      {"data_position", [](hid_t f) { write_int_attribute(f, "data_position", 7); }},
      {"skipped_batches", [](hid_t f) { write_int_attribute(f, "skipped_batches", 1); }},
      {"optimizer steps",
       [](hid_t f) {
         const hid_t group = H5Gopen2(f, "optimizer", H5P_DEFAULT);
         write_int_attribute(group, "steps", 99);
         H5Gclose(group);
       }},
      {"checksum", [](hid_t f) { write_int_attribute(f, "meta_checksum", 12345); }},
      {"config text",
       [](hid_t f) {
         // Rewrite /config with other text of the same length.
         ASSERT_GE(H5Ldelete(f, "config", H5P_DEFAULT), 0);
         const hid_t type = H5Tcopy(H5T_C_S1);
         H5Tset_size(type, H5T_VARIABLE);
         H5Tset_cset(type, H5T_CSET_UTF8);
         const hid_t space = H5Screate(H5S_SCALAR);
         const hid_t data =
             H5Dcreate2(f, "config", type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
         const char* text = "[model]\nd_model = 512 # width\n";
         H5Dwrite(data, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, &text);
         H5Dclose(data);
         H5Sclose(space);
         H5Tclose(type);
       }},
  };
  for (const auto& [what, edit] : edits) {
    SCOPED_TRACE(what);
    const std::string path = dir.file("edited.h5");
    write_file(path, file_bytes(good));
    edit_file(path, edit);
    const std::string before = file_bytes(path);
    expect_error<IoError>([&] { read_checkpoint_meta(path); },
                          {path, "is damaged", "does not match the checksum"});
    expect_load_error<float>(path, {path, "is damaged"});
    EXPECT_EQ(file_bytes(path), before) << "a failed load changed the file";
  }
}

// Under LeakSanitizer: allocations made from now on in this process are not
// reported, including HDF5's own when it closes the library at exit (ctest runs
// each test in a process of its own).
struct LeakChecksOff {
#if defined(__SANITIZE_ADDRESS__)
  LeakChecksOff() { __lsan_disable(); }
#endif
};

// Single-byte flips anywhere in a checkpoint (the attribute area included)
// never load silently: a flipped file either fails with an IoError or loads
// exactly what was saved (a flip in unused bytes).
TEST(CheckpointMetadata, ByteFlipsNeverLoadSilently) {
  // HDF5 1.10 cannot free everything of some opens that fail half-way (it says
  // "infinite loop closing library" at exit, and then leaves its own earlier
  // allocations unfreed too); that is its memory, not ours, and LeakSanitizer is
  // told not to count anything HDF5 allocates in this test's process.
  [[maybe_unused]] const LeakChecksOff off{};
  TempDir dir;
  const Model<float> model(6);
  CheckpointMeta meta = sample_meta();
  meta.skipped_batches = 2;
  const std::string good = dir.file("good.h5");
  save_checkpoint(good, model.params, model.adam.get(), meta);
  const std::string bytes = file_bytes(good);
  const std::string path = dir.file("flipped.h5");
  Model<float> loaded(9);
  int refused = 0, identical = 0;
  ::testing::internal::CaptureStderr();
  for (std::size_t at = 0; at < bytes.size(); at += 7) {
    std::string flipped = bytes;
    flipped[at] = char(flipped[at] ^ (1 << (at % 8)));
    write_file(path, flipped);
    try {
      const CheckpointMeta read = load_checkpoint(path, loaded.params, loaded.adam.get());
      EXPECT_TRUE(read.step == meta.step && read.data_position == meta.data_position &&
                  read.seed == meta.seed && read.config == meta.config &&
                  read.skipped_batches == meta.skipped_batches)
          << "byte " << at << " flipped: the metadata changed silently";
      EXPECT_EQ(loaded.state(), model.state()) << "byte " << at << " flipped: values changed";
      ++identical;
    } catch (const IoError&) {
      ++refused;
    }
  }
  ::testing::internal::GetCapturedStderr();
  EXPECT_GT(refused, 0);
  std::printf("[ flips    ] %d of %d flipped files refused, %d loaded unchanged\n", refused,
              refused + identical, identical);
}

// Files of format version 1 (no checksum) still load; a version-1 file that
// carries a checksum can only be a damaged version-2 file.
TEST(CheckpointMetadata, VersionOneFilesStillLoad) {
  TempDir dir;
  const Model<float> model(3);
  const std::string path = dir.file("v1.h5");
  save_checkpoint(path, model.params, model.adam.get(), sample_meta());
  edit_file(path, [](hid_t f) { write_int_attribute(f, "format_version", 1); });
  expect_load_error<float>(path, {path, "format version 1", "the file is damaged"});
  edit_file(path, [](hid_t f) {
    ASSERT_GE(H5Adelete(f, "meta_checksum"), 0);
    ASSERT_GE(H5Adelete(f, "skipped_batches"), 0);
  });
  Model<float> loaded(9);
  const CheckpointMeta meta = load_checkpoint(path, loaded.params, loaded.adam.get());
  EXPECT_EQ(meta.format_version, 1);
  EXPECT_EQ(meta.step, sample_meta().step);
  EXPECT_EQ(meta.skipped_batches, 0);
  EXPECT_EQ(loaded.state(), model.state());
}

TEST(CheckpointMetadata, SkippedBatchesAndOptimizerStepsRoundTrip) {
  TempDir dir;
  const Model<double> model(4);
  CheckpointMeta meta = sample_meta();
  meta.skipped_batches = 5;
  save_checkpoint(dir.file("a.h5"), model.params, model.adam.get(), meta);
  const CheckpointMeta read = read_checkpoint_meta(dir.file("a.h5"));
  EXPECT_EQ(read.skipped_batches, 5);
  EXPECT_EQ(read.optimizer_steps, model.adam->steps());
  save_checkpoint(dir.file("b.h5"), model.params, nullptr, meta);
  EXPECT_EQ(read_checkpoint_meta(dir.file("b.h5")).optimizer_steps, -1);
}

// A checkpoint holding inf or nan (a run that diverged) is refused by name.
TEST(CheckpointMetadata, NonFiniteValuesAreRefused) {
  TempDir dir;
  for (int which = 0; which < 3; ++which) {
    SCOPED_TRACE("which " + std::to_string(which));
    Model<float> model(5);
    const auto& p = model.params.get("layers.0.attn.w_qk");
    const View1<float> views[3] = {p.value, model.adam->first_moment(p.name),
                                   model.adam->second_moment(p.name)};
    Kokkos::deep_copy(Kokkos::subview(views[which], std::make_pair(Index(3), Index(5))),
                      which == 1 ? std::numeric_limits<float>::infinity()
                                 : std::numeric_limits<float>::quiet_NaN());
    const std::string path = dir.file("nan.h5");
    save_checkpoint(path, model.params, model.adam.get(), sample_meta());
    const char* names[3] = {"parameter \"layers.0.attn.w_qk\"",
                            "first moment of \"layers.0.attn.w_qk\"",
                            "second moment of \"layers.0.attn.w_qk\""};
    expect_load_error<float>(path, {path, names[which], "holds 2 non-finite values",
                                    "the first at index 3", "diverged"});
  }
}

// ---------------------------------------------------------------- run folders

// A checkpoint name on a folder, a dangling link or a FIFO is an error naming
// it, never skipped in favour of an older checkpoint.
TEST(RunFolder, NonRegularCheckpointNamesAreErrors) {
  TempDir dir;
  const std::string run = dir.path();
  const Model<float> model(1);
  save_checkpoint(checkpoint_file(run, 4), model.params, model.adam.get(), sample_meta());
  const std::string newest = checkpoint_file(run, 8);
  fs::create_directory(newest);
  expect_error<IoError>([&] { latest_checkpoint(run); }, {newest, "is a directory"});
  expect_error<IoError>([&] { prune_checkpoints(run, 1); }, {newest, "is a directory"});
  fs::remove(newest);
  fs::create_symlink(dir.file("gone.h5"), newest);
  expect_error<IoError>([&] { latest_checkpoint(run); }, {newest, "No such file"});
  fs::remove(newest);
  ASSERT_EQ(::mkfifo(newest.c_str(), 0600), 0);
  expect_error<IoError>([&] { latest_checkpoint(run); }, {newest, "is a FIFO"});
  expect_error<IoError>([&] { read_checkpoint_meta(newest); }, {newest, "is a FIFO"});
  fs::remove(newest);
  EXPECT_EQ(latest_checkpoint(run), checkpoint_file(run, 4));
  // A link to a complete checkpoint is a checkpoint.
  fs::create_symlink(checkpoint_file(run, 4), newest);
  EXPECT_EQ(latest_checkpoint(run), newest);
}

TEST(RunFolder, StaleTemporariesAreRemoved) {
  TempDir dir;
  const std::string run = dir.path();
  fs::create_directories(run + "/checkpoints");
  const std::string mine = ".tmp." + std::to_string(::getpid());
  const std::vector<std::string> names = {"metrics.csv.tmp.999999999",
                                          "config.toml.tmp.999999998",
                                          "metrics.csv" + mine,
                                          "checkpoints/step_00000002.h5.tmp.999999999",
                                          "checkpoints/step_00000003.h5" + mine,
                                          "checkpoints/notes.tmp.x"};
  for (const std::string& name : names) write_file(run + "/" + name, "partial");
  auto removed = remove_stale_temporaries(run);
  std::sort(removed.begin(), removed.end());
  EXPECT_EQ(removed, (std::vector<std::string>{run + "/checkpoints/step_00000002.h5.tmp.999999999",
                                               run + "/config.toml.tmp.999999998",
                                               run + "/metrics.csv.tmp.999999999"}));
  for (const auto& path : removed) EXPECT_FALSE(fs::exists(path)) << path;
  EXPECT_TRUE(fs::exists(run + "/metrics.csv" + mine));  // a live writer's file stays
  EXPECT_TRUE(fs::exists(run + "/checkpoints/notes.tmp.x"));
  EXPECT_TRUE(remove_stale_temporaries(run).empty());
}

TEST(RunFolder, LockIsExclusiveAndNamesItsHolder) {
  TempDir dir;
  EXPECT_EQ(RunLock::holder(dir.path()), -1);
  {
    const RunLock lock(dir.path(), "train");
    EXPECT_EQ(RunLock::holder(dir.path()), long(::getpid()));
    // flock locks belong to an open file: a second lock in this process is
    // refused as one in another process would be.
    expect_error<IoError>([&] { RunLock second(dir.path(), "train"); },
                          {"train: the run folder", dir.path(), "is in use by process",
                           std::to_string(::getpid()), ".lock", "choose another run.dir"});
  }
  EXPECT_EQ(RunLock::holder(dir.path()), -1);  // released with the object
  EXPECT_NO_THROW(RunLock(dir.path(), "train"));
}

TEST(RunFolder, SpecialFilesAreRefusedAndWritesAreAtomic) {
  TempDir dir;
  const std::string fifo = dir.file("config.toml");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  // Refused without opening (opening a FIFO would block until a writer comes).
  expect_error<IoError>(
      [&] { read_text_file(fifo, "config", "give a file"); },
      {"config: ", fifo, "is a FIFO (named pipe), not a regular file", "give a file"});
  expect_error<IoError>([&] { read_text_file(dir.path(), "config", ""); }, {"is a directory"});
  expect_error<IoError>([&] { read_text_file("/dev/null", "config", ""); },
                        {"is a character device"});
  expect_error<IoError>([&] { read_text_file(dir.file("none"), "config", ""); }, {"No such file"});
  const std::string path = dir.file("metrics.csv");
  write_file_atomically(path, "a,b\n1,2\n", "metrics");
  write_file_atomically(path, "a,b\n", "metrics");
  EXPECT_EQ(read_text_file(path, "metrics", ""), "a,b\n");
  EXPECT_EQ(folder_entries(dir.path()), (std::vector<std::string>{"config.toml", "metrics.csv"}));
}

TEST(CheckpointH5py, ReadsTheLayout) {
  const std::string python = reformer::testing::test_python();
  if (std::system((python + " -c 'import h5py, numpy' >/dev/null 2>&1").c_str()) != 0)
    GTEST_SKIP() << python << " has no h5py; install python3-h5py (cmake/install-deps.sh testing)";
  TempDir dir;
  const std::string path = dir.file("ckpt.h5");
  ParameterSet<float> params;
  params.add("layers.0.attn.w_qk", {3, 4});
  params.add("embedding.table", {2, 4});
  auto host = Kokkos::create_mirror_view(params.get("layers.0.attn.w_qk").value);
  for (Index i = 0; i < 12; ++i) host(i) = 0.5f * float(i) - 2.0f;
  Kokkos::deep_copy(params.get("layers.0.attn.w_qk").value, host);
  train::Adam<float> adam(params);
  adam.set_steps(17);
  save_checkpoint(path, params, &adam, sample_meta());

  const std::string script = R"(
import sys, h5py, numpy as np
f = h5py.File(sys.argv[1], "r")
w = f["parameters"]["layers.0.attn.w_qk"]
assert w.shape == (3, 4) and w.dtype == np.float32, (w.shape, w.dtype)
assert np.array_equal(w[...], 0.5 * np.arange(12, dtype=np.float32).reshape(3, 4) - 2.0), w[...]
assert list(f["parameters"]) == ["layers.0.attn.w_qk", "embedding.table"], list(f["parameters"])
assert f["optimizer/m/embedding.table"].shape == (2, 4)
assert int(f["optimizer"].attrs["steps"]) == 17
a = f.attrs
assert int(a["format_version"]) == 2 and int(a["step"]) == 1234, dict(a)
assert int(a["data_position"]) == 98765432109876 and int(a["seed"]) == 2**63 + 5, dict(a)
# Strings are fixed-length UTF-8 (h5py reads them as bytes).
text = lambda v: v.decode() if isinstance(v, (bytes, np.bytes_)) else v
assert text(a["dtype"]) == "float", a["dtype"]
config = text(f["config"][()])
assert "d_model = 256" in config and "r\u00e9former" in config, config
print("h5py ok")
)";
  write_file(dir.file("check.py"), script);
  const std::string command = python + " " + dir.file("check.py") + " " + path + " 2>&1";
  FILE* pipe = ::popen(command.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string output;
  char buffer[512];
  while (std::fgets(buffer, sizeof(buffer), pipe)) output += buffer;
  const int status = ::pclose(pipe);
  EXPECT_EQ(status, 0) << output;
  EXPECT_NE(output.find("h5py ok"), std::string::npos) << output;
}

}  // namespace
}  // namespace reformer::io
