// A small RAII layer over the HDF5 C API (private to the library): owned
// handles, quiet error stacks, attributes and datasets of the types the
// checkpoints use. Every failure throws IoError with the HDF5 error text.
#pragma once

#include "reformer/core/error.hpp"
#include "reformer/core/types.hpp"

#include <hdf5.h>

#include <cstdint>
#include <string>
#include <vector>

namespace reformer::io::hdf5 {

// One owned hid_t, closed with the function that matches its kind.
class Handle {
 public:
  using Closer = herr_t (*)(hid_t);
  Handle() = default;
  Handle(hid_t id, Closer closer) : id_(id), closer_(closer) {}
  ~Handle() { close(); }
  Handle(Handle&& other) noexcept : id_(other.id_), closer_(other.closer_) { other.id_ = -1; }
  Handle& operator=(Handle&& other) noexcept {
    if (this != &other) {
      close();
      id_ = other.id_;
      closer_ = other.closer_;
      other.id_ = -1;
    }
    return *this;
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;

  hid_t get() const { return id_; }
  bool valid() const { return id_ >= 0; }
  // Closes now; false if HDF5 reports an error (for files: data not written).
  bool close() {
    if (id_ < 0) return true;
    const herr_t status = closer_(id_);
    id_ = -1;
    return status >= 0;
  }

 private:
  hid_t id_ = -1;
  Closer closer_ = nullptr;
};

// While alive, HDF5 does not print its error stack to stderr (failures become
// IoErrors carrying the innermost HDF5 message instead).
class QuietErrors {
 public:
  QuietErrors();
  ~QuietErrors();
  QuietErrors(const QuietErrors&) = delete;
  QuietErrors& operator=(const QuietErrors&) = delete;

 private:
  H5E_auto2_t function_ = nullptr;
  void* data_ = nullptr;
};

// The most specific message on HDF5's current error stack ("" if none).
std::string last_error();

// Throws IoError("<context>: <what> (HDF5: <last_error>)") unless ok.
void check(bool ok, const std::string& context, const std::string& what);

// Links and objects.
bool has_link(hid_t location, const std::string& name);
// Link names of a group in creation order when it is tracked, else by name.
std::vector<std::string> link_names(hid_t group, const std::string& context);
Handle create_group(hid_t location, const std::string& name, const std::string& context);
Handle open_group(hid_t location, const std::string& name, const std::string& context);
Handle open_dataset(hid_t location, const std::string& name, const std::string& context);

// Attributes on an object: scalars of these types and fixed-length UTF-8 strings
// (variable-length ones, of format-1 checkpoints, are still read).
void write_attribute(hid_t object, const char* name, std::int64_t value,
                     const std::string& context);
void write_attribute(hid_t object, const char* name, std::uint64_t value,
                     const std::string& context);
void write_attribute(hid_t object, const char* name, const std::string& value,
                     const std::string& context);
bool has_attribute(hid_t object, const char* name);
std::int64_t read_int_attribute(hid_t object, const char* name, const std::string& context);
std::uint64_t read_uint_attribute(hid_t object, const char* name, const std::string& context);
std::string read_string_attribute(hid_t object, const char* name, const std::string& context);

// A scalar fixed-length UTF-8 string dataset (variable-length ones are still read).
void write_string(hid_t location, const char* name, const std::string& value,
                  const std::string& context);
std::string read_string(hid_t location, const char* name, const std::string& context);

// A dataset of floating-point numbers (float or double, from `memory_type`)
// with `shape`, chunked with a Fletcher-32 checksum.
void write_floats(hid_t location, const std::string& name, const std::vector<Index>& shape,
                  hid_t memory_type, const void* data, const std::string& context);

// Makes an image from H5Fget_file_image a file HDF5 opens: the call clears the
// status flags of a version 2 or 3 superblock (written while the file is open)
// in the copy, but HDF5 1.10 leaves the superblock's checksum as computed with
// the flags set. Recomputes that checksum; other images are left as they are.
void seal_file_image(unsigned char* image, std::size_t size);

// Shape and element description of a dataset.
struct DatasetInfo {
  std::vector<Index> shape;
  bool is_float = false;  // the stored class is floating point
  std::size_t bytes = 0;  // bytes per stored element
};
DatasetInfo dataset_info(hid_t dataset, const std::string& context);
// Reads the whole dataset, converted to `memory_type`.
void read_all(hid_t dataset, hid_t memory_type, void* data, const std::string& context);

}  // namespace reformer::io::hdf5
