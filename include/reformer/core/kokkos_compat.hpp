// Hides the API differences between Kokkos 3.4 (Debian bookworm) and Kokkos 4.x.
//
// Everything outside include/reformer/core uses the names defined here instead of
// the version-specific Kokkos spellings, so model code has no version #ifs.
#pragma once

#include <Kokkos_Core.hpp>

#include <string>

#if KOKKOS_VERSION >= 30700
#define REFORMER_KOKKOS_MATH_NS Kokkos
#else
#define REFORMER_KOKKOS_MATH_NS Kokkos::Experimental
#endif

// Debian's 3.4 package is configured as C++14 and does not define it.
#ifndef KOKKOS_CLASS_LAMBDA
#define KOKKOS_CLASS_LAMBDA [ =, *this ] KOKKOS_FUNCTION
#endif

namespace reformer::compat {

// Device-callable math: Kokkos::Experimental:: in 3.4, Kokkos:: from 3.7 on.
using REFORMER_KOKKOS_MATH_NS::cos;
using REFORMER_KOKKOS_MATH_NS::erf;
using REFORMER_KOKKOS_MATH_NS::exp;
using REFORMER_KOKKOS_MATH_NS::fabs;
using REFORMER_KOKKOS_MATH_NS::fmax;
using REFORMER_KOKKOS_MATH_NS::fmin;
using REFORMER_KOKKOS_MATH_NS::isfinite;
using REFORMER_KOKKOS_MATH_NS::log;
using REFORMER_KOKKOS_MATH_NS::pow;
using REFORMER_KOKKOS_MATH_NS::sin;
using REFORMER_KOKKOS_MATH_NS::sqrt;
using REFORMER_KOKKOS_MATH_NS::tanh;

// Labelled fences exist from 3.5; older versions fence without a label.
inline void fence([[maybe_unused]] const std::string& label) {
#if KOKKOS_VERSION >= 30500
  Kokkos::fence(label);
#else
  Kokkos::fence();
#endif
}

// Options understood by initialize(); -1 leaves the choice to Kokkos
// (which honours OMP_NUM_THREADS / KOKKOS_NUM_THREADS).
struct InitOptions {
  int num_threads = -1;
  int device_id = -1;
};

// Kokkos::InitArguments (removed in 4.0) vs Kokkos::InitializationSettings (3.7+).
inline void initialize(const InitOptions& options) {
#if KOKKOS_VERSION >= 30700
  Kokkos::InitializationSettings settings;
  if (options.num_threads > 0) settings.set_num_threads(options.num_threads);
  if (options.device_id >= 0) settings.set_device_id(options.device_id);
  Kokkos::initialize(settings);
#else
  Kokkos::InitArguments arguments;
  arguments.num_threads = options.num_threads;
  arguments.device_id = options.device_id;
  Kokkos::initialize(arguments);
#endif
}

// "major.minor.patch" of the Kokkos the project was compiled against.
inline std::string kokkos_version_string() {
  constexpr int v = KOKKOS_VERSION;
  return std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." +
         std::to_string(v % 100);
}

}  // namespace reformer::compat
