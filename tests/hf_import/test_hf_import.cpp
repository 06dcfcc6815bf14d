// Hugging Face Reformer weights in this project: the committed fixtures
// (tests/fixtures/hf_reformer_tiny*, written by experiments/hf_import/make_fixture.py
// with transformers 4.46.3) hold a tiny ReformerModelWithLMHead's config.json and
// model.safetensors, and in expected.h5 the logits and loss HF computed in double
// for given tokens, its LSH layers hashing with the rotations this project draws
// under a recorded call key. ctest first runs experiments/hf_import/import_hf_reformer.py
// on each fixture (the hf_import fixture of ctest); here the imported checkpoint is
// loaded like `reformer eval` loads one (its own config, the C++ loader) and
// ReformerLM<double> run with that key and dropout off must give HF's numbers.
#include "reformer/attention/lsh.hpp"
#include "reformer/config/run_config.hpp"
#include "reformer/core/random.hpp"
#include "reformer/io/checkpoint.hpp"
#include "reformer/models/reformer_lm.hpp"
#include "reformer/train/chunk_choice.hpp"

#include <gtest/gtest.h>
#include <hdf5.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#ifndef REFORMER_HF_FIXTURES
#error "REFORMER_HF_FIXTURES (tests/fixtures) must be defined by the build"
#endif
#ifndef REFORMER_HF_IMPORTED
#error "REFORMER_HF_IMPORTED (where ctest's hf_import step writes) must be defined by the build"
#endif

namespace reformer {
namespace {

using models::ModelCall;
using models::ReformerConfig;
using models::ReformerLM;
using models::ReformerState;

struct Expected {
  Index batch = 0, length = 0, vocab = 0;
  std::vector<int> tokens;     // [batch, length]
  std::vector<double> logits;  // [batch, length, vocab]
  double loss = 0;             // HF's shifted next-token cross-entropy
  RandomKey key{};             // the ModelCall key of the injected rotations
};

// One HDF5 dataset read whole as `type`, with its dimensions.
template <class Value>
std::vector<Value> read_dataset(hid_t file, const std::string& name, hid_t type,
                                std::vector<hsize_t>* dims = nullptr) {
  const hid_t dataset = H5Dopen2(file, name.c_str(), H5P_DEFAULT);
  EXPECT_GE(dataset, 0) << "expected.h5 has no dataset " << name;
  if (dataset < 0) return {};
  const hid_t space = H5Dget_space(dataset);
  const int rank = H5Sget_simple_extent_ndims(space);
  std::vector<hsize_t> shape(std::size_t(std::max(rank, 0)));
  H5Sget_simple_extent_dims(space, shape.data(), nullptr);
  hsize_t count = 1;
  for (hsize_t d : shape) count *= d;
  std::vector<Value> values(count);
  EXPECT_GE(H5Dread(dataset, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data()), 0) << name;
  H5Sclose(space);
  H5Dclose(dataset);
  if (dims) *dims = shape;
  return values;
}

std::uint64_t read_uint_attribute(hid_t file, const char* name) {
  std::uint64_t value = 0;
  const hid_t attribute = H5Aopen(file, name, H5P_DEFAULT);
  EXPECT_GE(attribute, 0) << "expected.h5 has no attribute " << name;
  if (attribute < 0) return 0;
  EXPECT_GE(H5Aread(attribute, H5T_NATIVE_UINT64, &value), 0) << name;
  H5Aclose(attribute);
  return value;
}

std::string fixture_path(const std::string& fixture, const std::string& file) {
  return std::string(REFORMER_HF_FIXTURES) + "/" + fixture + "/" + file;
}

std::string checkpoint_path(const std::string& fixture) {
  return std::string(REFORMER_HF_IMPORTED) + "/" + fixture + "/checkpoints/step_00000000.h5";
}

Expected read_expected(const std::string& fixture) {
  Expected e;
  const std::string path = fixture_path(fixture, "expected.h5");
  const hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  EXPECT_GE(file, 0) << "cannot open " << path;
  if (file < 0) return e;
  std::vector<hsize_t> dims;
  e.tokens = read_dataset<int>(file, "tokens", H5T_NATIVE_INT, &dims);
  if (dims.size() == 2) e.batch = Index(dims[0]), e.length = Index(dims[1]);
  e.logits = read_dataset<double>(file, "logits", H5T_NATIVE_DOUBLE, &dims);
  if (dims.size() == 3) e.vocab = Index(dims[2]);
  const auto loss = read_dataset<double>(file, "loss", H5T_NATIVE_DOUBLE);
  e.loss = loss.empty() ? NAN : loss[0];
  e.key = {read_uint_attribute(file, "key_seed"), read_uint_attribute(file, "key_stream")};
  H5Fclose(file);
  return e;
}

// The imported model: the config stored in the checkpoint, the parameters
// through the C++ loader (checksum, names, shapes), as `reformer eval` does.
struct Imported {
  ReformerConfig config;
  ParameterSet<double> params;
  std::unique_ptr<ReformerLM<double>> model;
};

std::unique_ptr<Imported> load_imported(const std::string& fixture) {
  const std::string path = checkpoint_path(fixture);
  auto m = std::make_unique<Imported>();
  const auto meta = io::read_checkpoint_meta(path);
  const auto run = config::parse_run_config(meta.config, path);
  run.validate();
  EXPECT_EQ(run.train.dtype, "double");
  m->config = train::resolve_auto_chunks(run, 1, false).model;
  m->model = std::make_unique<ReformerLM<double>>(m->config, m->params);
  io::load_checkpoint<double>(path, m->params, nullptr);
  return m;
}

std::vector<double> to_host(const View1<double>& v) {
  const auto h = Kokkos::create_mirror_view_and_copy(HostSpace(), v);
  return std::vector<double>(h.data(), h.data() + h.size());
}

// Logits [batch, length, vocab] of the top streams after forward: the LM head
// (LayerNorm over [y1 ; y2], then W_out, b) computed on the host in double.
std::vector<double> head_logits(const Imported& m, const ReformerState<double>& state) {
  const Index batch = state.batch, length = state.length, d = m.config.d_model;
  const Index vocab = m.config.vocab;
  const auto x1 = Kokkos::create_mirror_view_and_copy(HostSpace(), state.x1);
  const auto x2 = Kokkos::create_mirror_view_and_copy(HostSpace(), state.x2);
  const auto gamma = to_host(m.params.get("out.norm.gamma").value);
  const auto beta = to_host(m.params.get("out.norm.beta").value);
  const auto w = to_host(m.params.get("out.w").value);  // [2 d, vocab]
  const auto b = to_host(m.params.get("out.b").value);
  const double eps = m.config.layer_norm_eps;
  std::vector<double> logits(std::size_t(batch * length * vocab));
  std::vector<double> h(std::size_t(2 * d));
  for (Index s = 0; s < batch; ++s)
    for (Index t = 0; t < length; ++t) {
      double mean = 0, var = 0;
      for (Index j = 0; j < 2 * d; ++j) {
        h[j] = j < d ? x1(s, t, j) : x2(s, t, j - d);
        mean += h[j];
      }
      mean /= double(2 * d);
      for (Index j = 0; j < 2 * d; ++j) var += (h[j] - mean) * (h[j] - mean);
      const double rstd = 1.0 / std::sqrt(var / double(2 * d) + eps);
      for (Index j = 0; j < 2 * d; ++j) h[j] = (h[j] - mean) * rstd * gamma[j] + beta[j];
      for (Index v = 0; v < vocab; ++v) {
        double z = b[v];
        for (Index j = 0; j < 2 * d; ++j) z += h[j] * w[j * vocab + v];
        logits[(s * length + t) * vocab + v] = z;
      }
    }
  return logits;
}

Kokkos::View<int**, Layout, MemSpace> device_ids(const std::vector<int>& values, Index batch,
                                                 Index length) {
  Kokkos::View<int**, Layout, MemSpace> ids("hf_ids", batch, length);
  auto host = Kokkos::create_mirror_view(ids);
  for (Index s = 0; s < batch; ++s)
    for (Index t = 0; t < length; ++t) host(s, t) = values[s * length + t];
  Kokkos::deep_copy(ids, host);
  return ids;
}

// The rotations key of layer `layer` under a ModelCall key, as the model
// derives it: ReformerLM::block_call (stream kLayers = 2, layer), the block's
// attention call (kAttention = 1), AttentionLayer::run's sub_key(kRotations = 1).
// make_fixture.py derives the same.
RandomKey rotations_key(RandomKey call, Index layer) {
  const std::uint64_t block = stream_id(call.stream, 2, std::uint64_t(layer));
  const std::uint64_t attention = stream_id(block, 1);
  return {call.seed, stream_id(attention, 1)};
}

// What make_fixture.py handed HF as rotations (its numpy port of
// core/random.hpp) is what this build draws for those layers: a failure here
// means random.hpp or the model's streams changed and the fixtures must be
// rebuilt, not that the import is wrong. Needs no import.
void check_rotations(const std::string& fixture) {
  const Expected e = read_expected(fixture);
  const hid_t file =
      H5Fopen(fixture_path(fixture, "expected.h5").c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  ASSERT_GE(file, 0);
  const hid_t group = H5Gopen2(file, "rotations", H5P_DEFAULT);
  ASSERT_GE(group, 0) << fixture << ": expected.h5 has no rotations group";
  H5G_info_t info{};
  H5Gget_info(group, &info);
  EXPECT_GT(info.nlinks, 0u) << fixture << " has no LSH layer";
  for (hsize_t i = 0; i < info.nlinks; ++i) {
    char name[32] = {};
    H5Lget_name_by_idx(group, ".", H5_INDEX_NAME, H5_ITER_INC, i, name, sizeof name, H5P_DEFAULT);
    const Index layer = std::stoll(name);
    std::vector<hsize_t> dims;
    const auto recorded = read_dataset<double>(group, name, H5T_NATIVE_DOUBLE, &dims);
    ASSERT_EQ(dims.size(), 4u);
    View4<double> rotations("rotations", dims[0], dims[1], dims[2], dims[3]);
    attention::lsh_random_rotations<double>(rotations_key(e.key, layer), rotations);
    const auto ours = Kokkos::create_mirror_view_and_copy(HostSpace(), rotations);
    double worst = 0;
    for (std::size_t j = 0; j < recorded.size(); ++j)
      worst = std::max(worst, std::abs(ours.data()[j] - recorded[j]));
    EXPECT_LE(worst, 1e-14) << fixture << " layer " << layer;
  }
  H5Gclose(group);
  H5Fclose(file);
}

// The logits of every position, and the loss, of the imported checkpoint
// equal Hugging Face's.
void check_logits_and_loss(const std::string& fixture) {
  const Expected e = read_expected(fixture);
  ASSERT_GT(e.batch * e.length * e.vocab, 0);
  const auto m = load_imported(fixture);
  ASSERT_EQ(m->config.vocab, e.vocab);

  const auto ids = device_ids(e.tokens, e.batch, e.length);
  const ModelCall call{e.key, /*training=*/false};
  ReformerState<double> state;
  m->model->forward(ids, call, state);
  const auto logits = head_logits(*m, state);
  ASSERT_EQ(logits.size(), e.logits.size());
  double worst = 0, largest = 0;
  std::size_t at = 0;
  for (std::size_t i = 0; i < logits.size(); ++i) {
    const double diff = std::abs(logits[i] - e.logits[i]);
    if (diff > worst) worst = diff, at = i;
    largest = std::max(largest, std::abs(e.logits[i]));
  }
  std::printf("%s: max |logit - HF| = %.3g over %zu logits (largest |logit| %.3g)\n",
              fixture.c_str(), worst, logits.size(), largest);
  EXPECT_LE(worst, 1e-10) << fixture << ": logit " << at << " is " << logits[at] << " here and "
                          << e.logits[at] << " in Hugging Face";

  // HF's loss: position t predicts token t + 1; the last position's target is
  // marked 0 and ignored (the fixture's tokens are >= 1).
  std::vector<int> shifted(e.tokens.size());
  for (Index s = 0; s < e.batch; ++s)
    for (Index t = 0; t < e.length; ++t)
      shifted[s * e.length + t] = t + 1 < e.length ? e.tokens[s * e.length + t + 1] : 0;
  const auto targets = device_ids(shifted, e.batch, e.length);
  const auto result = m->model->evaluate(ids, targets, 0, call, state);
  std::printf("%s: loss %.15f here, %.15f in Hugging Face\n", fixture.c_str(), result.loss, e.loss);
  EXPECT_NEAR(result.loss, e.loss, 1e-11) << fixture;
}

// hf_reformer_tiny: local/lsh/local/lsh, axial positions, [2, 4] buckets, 2 rounds,
// chunked feed-forward, GELU, layer_norm_eps 1e-12.
TEST(HfImport, AxialRotationsAreThisProjectsRotations) { check_rotations("hf_reformer_tiny"); }
TEST(HfImport, AxialLogitsAndLossEqualHuggingFace) { check_logits_and_loss("hf_reformer_tiny"); }
// hf_reformer_tiny_learned: lsh/local, learned positions, 4 buckets, 1 round, ReLU.
TEST(HfImport, LearnedRotationsAreThisProjectsRotations) {
  check_rotations("hf_reformer_tiny_learned");
}
TEST(HfImport, LearnedLogitsAndLossEqualHuggingFace) {
  check_logits_and_loss("hf_reformer_tiny_learned");
}

}  // namespace
}  // namespace reformer
