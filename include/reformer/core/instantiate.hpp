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

// Every combination of float and bf16 operands and result of a mixed product
// (ops::mixed_matmul and its host path).
#define REFORMER_INSTANTIATE_MIXED_TYPES(MACRO) \
  MACRO(bf16, float, bf16)                      \
  MACRO(bf16, float, float)                     \
  MACRO(bf16, bf16, float)                      \
  MACRO(bf16, bf16, bf16)                       \
  MACRO(float, bf16, float)                     \
  MACRO(float, bf16, bf16)                      \
  MACRO(float, float, bf16)                     \
  MACRO(float, float, float)
