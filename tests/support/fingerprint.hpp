// A named collection of op outputs written to a small binary file, for comparing
// the results of two backends (see tests/backends/op_fingerprint.cpp).
#pragma once

#include "reformer/core/shape.hpp"

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

namespace reformer::testing {

enum class Rule : std::uint32_t { Bitwise = 0, Close = 1 };

struct FingerprintEntry {
  std::string name;
  Rule rule;
  std::vector<float> values;
};

class Fingerprint {
 public:
  template <class V>
  void add(const std::string& name, const V& v, Rule rule) {
    Kokkos::View<float*, Layout, MemSpace> flat("fingerprint", v.size());
    Kokkos::deep_copy(flat, as_vector(v));
    auto host = Kokkos::create_mirror_view_and_copy(HostSpace(), flat);
    entries_.push_back({name, rule, std::vector<float>(host.data(), host.data() + host.size())});
  }
  size_t size() const { return entries_.size(); }

  void write(const std::string& path) const {
    std::ofstream out(path, std::ios::binary);
    for (const auto& e : entries_) {
      const std::uint32_t len = e.name.size(), rule = std::uint32_t(e.rule);
      const std::uint64_t count = e.values.size();
      out.write(reinterpret_cast<const char*>(&len), sizeof len);
      out.write(e.name.data(), len);
      out.write(reinterpret_cast<const char*>(&rule), sizeof rule);
      out.write(reinterpret_cast<const char*>(&count), sizeof count);
      out.write(reinterpret_cast<const char*>(e.values.data()), count * sizeof(float));
    }
    if (!out) throw std::runtime_error("could not write " + path);
  }

  static std::vector<FingerprintEntry> read(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw std::runtime_error("could not open " + path);
    std::vector<FingerprintEntry> entries;
    std::uint32_t len = 0;
    while (in.read(reinterpret_cast<char*>(&len), sizeof len)) {
      FingerprintEntry e;
      e.name.resize(len);
      std::uint32_t rule = 0;
      std::uint64_t count = 0;
      in.read(e.name.data(), len);
      in.read(reinterpret_cast<char*>(&rule), sizeof rule);
      in.read(reinterpret_cast<char*>(&count), sizeof count);
      e.rule = Rule(rule);
      e.values.resize(count);
      in.read(reinterpret_cast<char*>(e.values.data()), count * sizeof(float));
      if (!in) throw std::runtime_error("truncated fingerprint file " + path);
      entries.push_back(std::move(e));
    }
    return entries;
  }

 private:
  std::vector<FingerprintEntry> entries_;
};

// Prints one line per output and returns whether all agree.
inline bool compare_fingerprints(const std::string& path_a, const std::string& path_b) {
  const auto a = Fingerprint::read(path_a), b = Fingerprint::read(path_b);
  bool ok = a.size() == b.size() && !a.empty();
  if (!ok) std::printf("FAIL different number of outputs: %zu vs %zu\n", a.size(), b.size());
  for (size_t i = 0; ok && i < a.size(); ++i) {
    const auto &ea = a[i], &eb = b[i];
    if (ea.name != eb.name || ea.values.size() != eb.values.size()) {
      std::printf("FAIL output %zu: %s vs %s\n", i, ea.name.c_str(), eb.name.c_str());
      ok = false;
      continue;
    }
    double diff = 0, ref = 0;
    size_t differing = 0;
    for (size_t j = 0; j < ea.values.size(); ++j) {
      diff += (double(ea.values[j]) - eb.values[j]) * (double(ea.values[j]) - eb.values[j]);
      ref += double(eb.values[j]) * eb.values[j];
      differing += ea.values[j] != eb.values[j];
    }
    const double rel = ref > 0 ? std::sqrt(diff / ref) : std::sqrt(diff);
    const bool pass = ea.rule == Rule::Bitwise ? differing == 0 : rel < 1e-6;
    std::printf("%s %-28s %-8s relative error %.3g, %zu of %zu values differ\n",
                pass ? "ok  " : "FAIL", ea.name.c_str(),
                ea.rule == Rule::Bitwise ? "bitwise" : "1e-6", rel, differing, ea.values.size());
    ok = ok && pass;
  }
  return ok;
}

}  // namespace reformer::testing
