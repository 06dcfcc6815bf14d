#include "reformer/core/error.hpp"
#include "reformer/core/parameter_set.hpp"
#include "support/checks.hpp"
#include "support/gradcheck.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace reformer {
namespace {

using namespace reformer::testing;

TEST(ParameterSet, RegistersZeroedTensorsInOrder) {
  ParameterSet<double> params;
  params.add("embed.tokens", {10, 4});
  params.add("layers.0.attn.w_qk", {4, 8});
  params.add("final_norm.scale", {4});
  EXPECT_EQ(params.names(),
            (std::vector<std::string>{"embed.tokens", "layers.0.attn.w_qk", "final_norm.scale"}));
  EXPECT_EQ(params.size(), 3u);
  EXPECT_EQ(params.total_elements(), 40 + 32 + 4);
  EXPECT_TRUE(params.contains("layers.0.attn.w_qk"));
  EXPECT_FALSE(params.contains("layers.0.attn"));

  const auto& w = params.get("layers.0.attn.w_qk");
  EXPECT_EQ(w.shape, (std::vector<Index>{4, 8}));
  EXPECT_EQ(w.size(), 32);
  EXPECT_EQ(static_cast<Index>(w.value.extent(0)), 32);
  EXPECT_EQ(static_cast<Index>(w.grad.extent(0)), 32);
  EXPECT_NE(w.value.data(), w.grad.data());
  for (double x : to_host(w.value)) EXPECT_EQ(x, 0.0);
  for (double x : to_host(w.grad)) EXPECT_EQ(x, 0.0);
}

TEST(ParameterSet, IteratesInRegistrationOrder) {
  ParameterSet<float> params;
  params.add("b", {3});
  params.add("a", {2, 5});
  std::vector<std::string> seen;
  Index elements = 0;
  for (const auto& p : params) {
    seen.push_back(p.name);
    elements += p.size();
  }
  EXPECT_EQ(seen, params.names());
  EXPECT_EQ(elements, params.total_elements());
}

TEST(ParameterSet, ReferencesAndContentsSurviveGrowth) {
  ParameterSet<double> params;
  auto& first = params.add("first", {3});
  Kokkos::deep_copy(first.value, 2.5);
  Kokkos::deep_copy(first.grad, -1.0);
  for (int i = 0; i < 1000; ++i) params.add("p" + std::to_string(i), {2});
  EXPECT_EQ(&first, &params.get("first"));
  EXPECT_EQ(first.name, "first");
  // The buffers were reallocated; the views follow them and the values stay.
  EXPECT_EQ(first.value.data(), params.values().data() + first.offset);
  auto value = Kokkos::create_mirror_view_and_copy(HostSpace(), first.value);
  auto grad = Kokkos::create_mirror_view_and_copy(HostSpace(), first.grad);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(value(i), 2.5);
    EXPECT_EQ(grad(i), -1.0);
  }
  EXPECT_EQ(&params.get("p999"), &params.get("p999"));
  EXPECT_EQ(params.total_elements(), 3 + 2000);
}

// All values live in one buffer and all gradients in another, each parameter
// a 64-byte-aligned slice in registration order; zero_grad clears the buffer.
TEST(ParameterSet, OneContiguousBufferForValuesAndOneForGradients) {
  ParameterSet<float> params;
  auto& a = params.add("a", {3, 5});
  auto& b = params.add("b", {7});
  auto& c = params.add("c", {2, 2});
  EXPECT_EQ(a.offset, 0);
  EXPECT_EQ(b.offset, 16);  // 15 floats rounded up to 64 bytes
  EXPECT_EQ(c.offset, 32);
  EXPECT_EQ(Index(params.values().extent(0)), 36);
  EXPECT_EQ(Index(params.grads().extent(0)), 36);
  for (const auto* p : {&a, &b, &c}) {
    EXPECT_EQ(p->value.data(), params.values().data() + p->offset);
    EXPECT_EQ(p->grad.data(), params.grads().data() + p->offset);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p->value.data()) % 64, 0u) << p->name;
  }
  Kokkos::deep_copy(params.grads(), 3.0f);
  params.zero_grad();
  auto grads = Kokkos::create_mirror_view_and_copy(HostSpace(), params.grads());
  for (Index i = 0; i < 36; ++i) EXPECT_EQ(grads(i), 0.0f);
}

TEST(ParameterSet, RejectsBadNames) {
  ParameterSet<double> params;
  params.add("layers.0.w", {2});
  const std::string rule = "[a-z0-9_.]";
  expect_error<ConfigError>([&] { params.add("Layers.0.w", {2}); },
                            {"ParameterSet::add", "\"Layers.0.w\"", "'L'", rule});
  expect_error<ConfigError>([&] { params.add("layers-0", {2}); }, {"\"layers-0\"", "'-'", rule});
  expect_error<ConfigError>([&] { params.add("a b", {2}); }, {"\"a b\"", rule});
  expect_error<ConfigError>([&] { params.add("", {2}); }, {"empty"});
  for (const std::string bad : {".w", "w.", "layers..w"})
    expect_error<ConfigError>([&] { params.add(bad, {2}); }, {"\"" + bad + "\"", "empty segment"});
  expect_error<ConfigError>([&] { params.add("layers.0.w", {3}); },
                            {"\"layers.0.w\"", "already registered"});
  EXPECT_EQ(params.size(), 1u);
}

TEST(ParameterSet, RejectsBadShapes) {
  ParameterSet<double> params;
  expect_error<ShapeError>([&] { params.add("w", {3, 0}); }, {"w", "[3, 0]", "positive"});
  expect_error<ShapeError>([&] { params.add("v", {-2}); }, {"[-2]", "positive"});
  expect_error<ShapeError>([&] { params.add("s", {}); }, {"s", "at least one dimension"});
  EXPECT_EQ(params.size(), 0u);
  EXPECT_FALSE(params.contains("w"));
}

TEST(ParameterSet, GetNamesAMissingParameter) {
  ParameterSet<double> params;
  params.add("layers.1.ff.w_in", {2, 2});
  const auto& constant_params = params;
  expect_error<ConfigError>([&] { params.get("layers.1.ff.w_out"); },
                            {"ParameterSet::get", "\"layers.1.ff.w_out\""});
  expect_error<ConfigError>([&] { constant_params.get("nothing"); }, {"\"nothing\""});
  EXPECT_EQ(constant_params.get("layers.1.ff.w_in").name, "layers.1.ff.w_in");
}

TEST(ParameterSet, ZeroGradClearsEveryGradient) {
  ParameterSet<double> params;
  auto& a = params.add("a", {5, 3});
  auto& b = params.add("b", {7});
  fill_uniform(a.grad, 1, 1.0, 2.0);
  fill_uniform(b.grad, 2, 1.0, 2.0);
  fill_uniform(a.value, 3, 1.0, 2.0);
  ASSERT_GT(dot(a.grad, a.grad), 0.0);
  params.zero_grad();
  for (const auto& p : params)
    for (double g : to_host(p.grad)) EXPECT_EQ(g, 0.0);
  EXPECT_GT(dot(a.value, a.value), 0.0) << "zero_grad must leave values alone";
}

TEST(ParameterSet, MatrixViewsShareMemoryWithValueAndGrad) {
  ParameterSet<double> params;
  auto& w = params.add("w", {3, 4});
  const auto m = w.matrix();
  EXPECT_EQ(m.data(), w.value.data());
  EXPECT_EQ(m.extent(0), 3u);
  EXPECT_EQ(m.extent(1), 4u);
  EXPECT_EQ(w.grad_matrix().data(), w.grad.data());

  // Row-major: m(i, j) is value(i * 4 + j).
  auto host = Kokkos::create_mirror_view(m);
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 4; ++j) host(i, j) = 10 * i + j;
  Kokkos::deep_copy(m, host);
  const auto flat = to_host(w.value);
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 4; ++j) EXPECT_EQ(flat[i * 4 + j], 10 * i + j);
}

TEST(ParameterSet, MatrixViewNeedsRankTwo) {
  ParameterSet<double> params;
  auto& t = params.add("layers.2.heads", {2, 3, 4});
  expect_error<ShapeError>([&] { t.matrix(); }, {"layers.2.heads", "[2, 3, 4]", "rank 2"});
  expect_error<ShapeError>([&] { t.grad_matrix(); }, {"grad_matrix", "[2, 3, 4]"});
  auto& v = params.add("bias", {4});
  expect_error<ShapeError>([&] { v.matrix(); }, {"bias", "[4]"});
}

}  // namespace
}  // namespace reformer
