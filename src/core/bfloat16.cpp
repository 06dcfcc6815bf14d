#include "reformer/core/bfloat16.hpp"

#include "reformer/core/error.hpp"
#include "reformer/core/precision.hpp"

namespace reformer {

void convert(In1<float> from, View1<bf16> to) {
  require<ShapeError>(from.extent(0) == to.extent(0), "convert (float -> bf16): the input has ",
                      from.extent(0), " elements but the output has ", to.extent(0),
                      "; give both views the same length");
  Kokkos::parallel_for(
      "convert_float_to_bf16", range(to.extent(0)),
      KOKKOS_LAMBDA(Index i) { to(i) = bf16(from(i)); });
}

void convert(In1<bf16> from, View1<float> to) {
  require<ShapeError>(from.extent(0) == to.extent(0), "convert (bf16 -> float): the input has ",
                      from.extent(0), " elements but the output has ", to.extent(0),
                      "; give both views the same length");
  Kokkos::parallel_for(
      "convert_bf16_to_float", range(to.extent(0)),
      KOKKOS_LAMBDA(Index i) { to(i) = static_cast<float>(from(i)); });
}

Precision parse_precision(const std::string& name) {
  if (name == "float32") return Precision::Float32;
  if (name == "bf16") return Precision::BF16;
  throw ConfigError("precision: unknown precision '" + name +
                    "' (expected \"float32\" or \"bf16\")");
}

const char* to_string(Precision precision) {
  return precision == Precision::BF16 ? "bf16" : "float32";
}

int activation_bytes(Precision precision) { return precision == Precision::BF16 ? 2 : 4; }

}  // namespace reformer
