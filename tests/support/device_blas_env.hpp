// The vendor BLAS loader's environment for a scope (ops/device_blas.hpp): the
// loader reads REFORMER_CUBLAS, REFORMER_DEVICE_BLAS, REFORMER_BF16_WEIGHTS
// and the like when it loads, so a test sets one and asks it to look again.
#pragma once

#include "reformer/core/error.hpp"
#include "reformer/ops/device_blas.hpp"

#include <cstdlib>
#include <string>

namespace reformer::testing {

// Sets (or unsets, for nullptr) an environment variable until destroyed, then
// puts the old value back and makes the loader look again.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    const char* old = std::getenv(name);
    had_ = old != nullptr;
    if (had_) old_ = old;
    set(value);
  }
  ~ScopedEnv() {
    set(had_ ? old_.c_str() : nullptr);
    try {
      ops::reload_device_blas();
    } catch (const Error&) {
      // The variable was bad before the test: the next product reports it.
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  void set(const char* value) {
    if (value != nullptr)
      setenv(name_, value, 1);
    else
      unsetenv(name_);
  }
  const char* name_;
  std::string old_;
  bool had_ = false;
};

// REFORMER_BF16_WEIGHTS=keep for the life of this object: GPU products of a
// bf16 activation and a float32 weight then use the weight as stored, as every
// host path does, so that the tests of the exact-weight bounds hold on every
// backend. The default's rounding of the weight is bounded in
// tests/ops/test_device_blas.cpp. Nothing changes on host builds.
class KeepFloatWeights {
 public:
  KeepFloatWeights() : keep_("REFORMER_BF16_WEIGHTS", "keep") { ops::reload_device_blas(); }

 private:
  ScopedEnv keep_;
};

}  // namespace reformer::testing
