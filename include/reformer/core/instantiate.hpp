// Explicit instantiation helper: every op is compiled for float (training) and
// double (exact gradient checks).
#pragma once

#define REFORMER_INSTANTIATE_FLOAT_AND_DOUBLE(MACRO) \
  MACRO(float)                                       \
  MACRO(double)
