// Error types. Every check on user input throws one of these with a message that
// names the operation, the offending value and the rule it breaks.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace reformer {

// Base of all errors the library reports.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A tensor has the wrong rank or extents for an operation.
class ShapeError : public Error {
 public:
  using Error::Error;
};

// A configuration value, option or hyper-parameter is invalid.
class ConfigError : public Error {
 public:
  using Error::Error;
};

// A file (checkpoint, config, data) is missing, corrupt or does not match.
class IoError : public Error {
 public:
  using Error::Error;
};

// A file could not be written: the disk is full, the file system is read-only,
// or the write failed. The message names the path, the system's reason and the
// free space on that file system; what was saved before is left as it was (the
// file being written aside is removed, appends are undone).
class WriteError : public IoError {
 public:
  using IoError::IoError;
};

// An allocation would not fit into the memory that is available.
class MemoryError : public Error {
 public:
  using Error::Error;
};

// Training produced a non-finite loss, gradient or parameter.
class DivergenceError : public Error {
 public:
  using Error::Error;
};

namespace detail {
template <class... Parts>
std::string concat(Parts&&... parts) {
  std::ostringstream out;
  (out << ... << std::forward<Parts>(parts));
  return out.str();
}
}  // namespace detail

// Throws E with the concatenated message parts unless `condition` holds.
template <class E = Error, class... Parts>
void require(bool condition, Parts&&... parts) {
  if (!condition) throw E(detail::concat(std::forward<Parts>(parts)...));
}

}  // namespace reformer
