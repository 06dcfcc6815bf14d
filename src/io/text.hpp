#pragma once
// Small text helpers shared by the io sources (one definition each).
#include <algorithm>
#include <string>

namespace reformer::io::text {

// A path in double quotes, for messages.
inline std::string quoted(const std::string& path) { return "\"" + path + "\""; }

// True for a non-empty string of the digits 0-9 only.
inline bool all_digits(const std::string& text) {
  return !text.empty() &&
         std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; });
}

}  // namespace reformer::io::text
