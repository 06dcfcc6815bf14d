// Explicit instantiation helpers: every op is compiled for float (training)
// and double (exact gradient checks); ops on the bf16 training path are also
// compiled for bf16 activations (core/precision.hpp).
#pragma once

#include "reformer/core/precision.hpp"

#define REFORMER_INSTANTIATE_FLOAT_AND_DOUBLE(MACRO) \
  MACRO(float)                                       \
  MACRO(double)

#define REFORMER_INSTANTIATE_STORAGE_TYPES(MACRO) \
  MACRO(float)                                    \
  MACRO(double)                                   \
  MACRO(bf16)
