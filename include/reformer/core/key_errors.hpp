// Error messages that name config keys: config and models validate their
// structs through it.
#pragma once

#include "reformer/core/error.hpp"

#include <string>

namespace reformer::detail {

// Runs a part's validate(); its ConfigError "<Struct>: n_hashes is 0 ..."
// comes back as "<op>: model.lsh.n_hashes is 0 ..." (prefix "model.lsh"), so
// that the message names the key of the config file. A message that does not
// start with a field name gets "<op>: model.lsh: ..." instead.
template <class F>
void with_key_prefix(const char* op, const std::string& prefix, F&& check) {
  try {
    check();
  } catch (const ConfigError& e) {
    const std::string message = e.what();
    const auto colon = message.find(": ");
    const std::string rest = colon == std::string::npos ? message : message.substr(colon + 2);
    const std::string word = rest.substr(0, rest.find(' '));
    const bool names_field =
        !word.empty() &&
        word.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789_") == std::string::npos;
    throw ConfigError(concat(op, ": ", prefix, names_field ? "." : ": ", rest));
  }
}

}  // namespace reformer::detail
