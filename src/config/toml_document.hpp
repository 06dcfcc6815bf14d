// A parsed TOML document as plain C++ values (internal to src/config).
//
// toml++ is included by toml_document.cpp only: that source holds no Kokkos
// code, so CUDA builds can hand it to the host compiler (toml++ 3.3 does not
// compile through nvcc), and toml++ never reaches a public header.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace reformer::config::detail {

struct TomlNode {
  enum class Type { Table, Array, String, Integer, Float, Boolean, Date, Time, DateTime };
  Type type = Type::Table;
  std::string string{};  // String; the TOML text of a date or time
  std::int64_t integer = 0;
  double floating = 0.0;
  bool boolean = false;
  std::vector<std::pair<std::string, TomlNode>> table{};  // in document order
  std::vector<TomlNode> array{};
  // Where the value was written: "file:line:column", or the override it came from.
  std::string origin{};

  // The entry named `key` of a table, or null.
  TomlNode* find(const std::string& key);
};

// Parses a whole document. ConfigError "<source>:<line>:<column>: TOML syntax
// error: <what>" on malformed input.
TomlNode parse_toml(const std::string& text, const std::string& source_name);

// "a string", "the integer 12", "an array [1, 2]": how error messages name a value.
std::string describe(const TomlNode& node);
// The value as TOML text (scalars and arrays; tables as inline tables).
std::string to_toml_text(const TomlNode& node);

// TOML literals written by hand (exact round trip).
std::string toml_quote(const std::string& text);  // a basic string, escaped
std::string toml_float(double value);             // shortest text that reads back exactly

}  // namespace reformer::config::detail
