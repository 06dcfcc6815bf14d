// The words for a host vector target and the float register block of its tile
// kernels, e.g. "AVX2, 32-byte vectors, 16 registers; float tile blocks 6 x 16":
// what `reformer info`, the benchmarks and the tile guard print
// (cpu_target_description() in core/runtime.hpp gives the library's own).
// Taken by value, not read from CpuTarget here: a program compiled for another
// target than the library (bench/tile_guard's x86-64-v3 build) names its own.
#pragma once

#include <string>

namespace reformer {

std::string describe_cpu_target(const char* name, int vector_bytes, int vector_registers,
                                int block_rows, int block_cols);

}  // namespace reformer
