#include "io/hdf5.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>

namespace reformer::io::hdf5 {

namespace {

// HDF5 closes itself at exit and, when a damaged file left blocks it cannot
// free, prints "HDF5: infinite loop closing library" unless automatic error
// printing is off then. This handler, registered after HDF5's own (the first
// QuietErrors is made after HDF5 has started), runs before it and turns the
// printing off: a refused checkpoint prints our one line and nothing of HDF5's.
void quiet_at_exit() { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); }

}  // namespace

QuietErrors::QuietErrors() {
  H5Eget_auto2(H5E_DEFAULT, &function_, &data_);
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  static const bool registered = std::atexit(quiet_at_exit) == 0;
  (void)registered;
}

QuietErrors::~QuietErrors() { H5Eset_auto2(H5E_DEFAULT, function_, data_); }

namespace {

herr_t innermost_message(unsigned depth, const H5E_error2_t* error, void* out) {
  // Walking upward starts at the most specific error: keep the first one.
  if (depth == 0 && error && error->desc) *static_cast<std::string*>(out) = error->desc;
  return 0;
}

Handle scalar_space() { return Handle(H5Screate(H5S_SCALAR), H5Sclose); }

// Strings are written with a fixed length (NUL-padded UTF-8): a variable-length
// string lives in HDF5's global heap, which has no checksum, and a corrupt heap
// reference makes HDF5 1.10 read out of bounds instead of failing.
Handle utf8_string_type(std::size_t size) {
  Handle type(H5Tcopy(H5T_C_S1), H5Tclose);
  if (size == 0)
    H5Tset_size(type.get(), H5T_VARIABLE);
  else
    H5Tset_size(type.get(), size);
  H5Tset_strpad(type.get(), H5T_STR_NULLPAD);
  H5Tset_cset(type.get(), H5T_CSET_UTF8);
  return type;
}

// Longest string a checkpoint holds (the config text); a larger size in a file
// is damage, not a string to allocate.
constexpr std::size_t kMaxStringBytes = std::size_t(64) << 20;

std::string describe_name(const std::string& context, const char* kind, const std::string& name) {
  return detail::concat(context, ": ", kind, " \"", name, "\"");
}

template <class Value>
void write_scalar_attribute(hid_t object, const char* name, hid_t type, const Value& value,
                            const std::string& context) {
  const Handle space = scalar_space();
  if (H5Aexists(object, name) > 0) H5Adelete(object, name);
  const Handle attribute(H5Acreate2(object, name, type, space.get(), H5P_DEFAULT, H5P_DEFAULT),
                         H5Aclose);
  check(attribute.valid(), context, detail::concat("cannot create attribute \"", name, "\""));
  check(H5Awrite(attribute.get(), type, &value) >= 0, context,
        detail::concat("cannot write attribute \"", name, "\""));
}

Handle open_attribute(hid_t object, const char* name, const std::string& context) {
  check(H5Aexists(object, name) > 0, context,
        detail::concat("attribute \"", name, "\" is missing"));
  Handle attribute(H5Aopen(object, name, H5P_DEFAULT), H5Aclose);
  check(attribute.valid(), context, detail::concat("cannot open attribute \"", name, "\""));
  return attribute;
}

template <class Value>
Value read_scalar_attribute(hid_t object, const char* name, hid_t type,
                            const std::string& context) {
  const Handle attribute = open_attribute(object, name, context);
  const Handle file_type(H5Aget_type(attribute.get()), H5Tclose);
  check(H5Tget_class(file_type.get()) == H5T_INTEGER, context,
        detail::concat("attribute \"", name, "\" is not an integer"));
  Value value{};
  check(H5Aread(attribute.get(), type, &value) >= 0, context,
        detail::concat("cannot read attribute \"", name, "\""));
  return value;
}

// A string read through `read`: fixed-length (this version's files) or
// variable-length into HDF5-owned memory (format 1 files).
template <class Read>
std::string read_any_string(hid_t file_type, const Read& read, const std::string& context,
                            const std::string& what) {
  check(H5Tget_class(file_type) == H5T_STRING, context, what + " is not a string");
  if (H5Tis_variable_str(file_type) > 0) {
    const Handle type = utf8_string_type(0);
    char* text = nullptr;
    check(read(type.get(), &text) >= 0, context, "cannot read " + what);
    std::string out = text ? text : "";
    if (text) H5free_memory(text);
    return out;
  }
  const std::size_t size = H5Tget_size(file_type);
  check(size > 0 && size <= kMaxStringBytes, context,
        detail::concat(what, " has a size of ", size, " bytes (at most ", kMaxStringBytes,
                       "); the file is damaged"));
  const Handle type = utf8_string_type(size);
  std::string out(size, '\0');
  check(read(type.get(), out.data()) >= 0, context, "cannot read " + what);
  out.resize(std::strlen(out.c_str()));  // NUL-padded
  return out;
}

// Bob Jenkins' lookup3 hash (hashlittle, byte by byte), HDF5's metadata checksum
// (H5_checksum_metadata: initial value 0).
std::uint32_t lookup3(const unsigned char* k, std::size_t length) {
  auto rot = [](std::uint32_t x, int r) { return (x << r) | (x >> (32 - r)); };
  auto word = [](const unsigned char* p) {
    return std::uint32_t(p[0]) | std::uint32_t(p[1]) << 8 | std::uint32_t(p[2]) << 16 |
           std::uint32_t(p[3]) << 24;
  };
  std::uint32_t a, b, c;
  a = b = c = 0xdeadbeefu + std::uint32_t(length);
  while (length > 12) {
    a += word(k);
    b += word(k + 4);
    c += word(k + 8);
    a -= c, a ^= rot(c, 4), c += b;
    b -= a, b ^= rot(a, 6), a += c;
    c -= b, c ^= rot(b, 8), b += a;
    a -= c, a ^= rot(c, 16), c += b;
    b -= a, b ^= rot(a, 19), a += c;
    c -= b, c ^= rot(b, 4), b += a;
    length -= 12;
    k += 12;
  }
  if (length == 0) return c;
  unsigned char tail[12] = {};
  std::memcpy(tail, k, length);
  a += word(tail);
  b += word(tail + 4);
  c += word(tail + 8);
  c ^= b, c -= rot(b, 14);
  a ^= c, a -= rot(c, 11);
  b ^= a, b -= rot(a, 25);
  c ^= b, c -= rot(b, 16);
  a ^= c, a -= rot(c, 4);
  b ^= a, b -= rot(a, 14);
  c ^= b, c -= rot(b, 24);
  return c;
}

}  // namespace

void seal_file_image(unsigned char* image, std::size_t size) {
  // Superblock 2 and 3: signature (8 bytes), version, sizes of offsets and of
  // lengths, status flags, four addresses, the checksum of all that.
  static const unsigned char signature[8] = {0x89, 'H', 'D', 'F', '\r', '\n', 0x1a, '\n'};
  if (size < 12 || std::memcmp(image, signature, 8) != 0 || (image[8] != 2 && image[8] != 3))
    return;
  const std::size_t covered = 12 + 4 * std::size_t(image[9]);
  if (covered + 4 > size) return;
  const std::uint32_t sum = lookup3(image, covered);
  for (int i = 0; i < 4; ++i) image[covered + std::size_t(i)] = (sum >> (8 * i)) & 0xff;
}

std::string last_error() {
  std::string message;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, innermost_message, &message);
  return message;
}

void check(bool ok, const std::string& context, const std::string& what) {
  if (ok) return;
  const std::string hdf5 = last_error();
  H5Eclear2(H5E_DEFAULT);
  throw IoError(hdf5.empty() ? detail::concat(context, ": ", what)
                             : detail::concat(context, ": ", what, " (HDF5: ", hdf5, ")"));
}

bool has_link(hid_t location, const std::string& name) {
  return H5Lexists(location, name.c_str(), H5P_DEFAULT) > 0;
}

std::vector<std::string> link_names(hid_t group, const std::string& context) {
  H5G_info_t info{};
  check(H5Gget_info(group, &info) >= 0, context, "cannot list a group");
  const Handle plist(H5Gget_create_plist(group), H5Pclose);
  unsigned order_flags = 0;
  const bool tracked = plist.valid() &&
                       H5Pget_link_creation_order(plist.get(), &order_flags) >= 0 &&
                       (order_flags & H5P_CRT_ORDER_INDEXED);
  const H5_index_t index = tracked ? H5_INDEX_CRT_ORDER : H5_INDEX_NAME;
  std::vector<std::string> names;
  for (hsize_t i = 0; i < info.nlinks; ++i) {
    const ssize_t size =
        H5Lget_name_by_idx(group, ".", index, H5_ITER_INC, i, nullptr, 0, H5P_DEFAULT);
    check(size >= 0, context, "cannot read a link name");
    std::string name(std::size_t(size) + 1, '\0');
    H5Lget_name_by_idx(group, ".", index, H5_ITER_INC, i, name.data(), name.size(), H5P_DEFAULT);
    name.resize(std::size_t(size));
    names.push_back(std::move(name));
  }
  return names;
}

Handle create_group(hid_t location, const std::string& name, const std::string& context) {
  const Handle plist(H5Pcreate(H5P_GROUP_CREATE), H5Pclose);
  H5Pset_link_creation_order(plist.get(), H5P_CRT_ORDER_TRACKED | H5P_CRT_ORDER_INDEXED);
  Handle group(H5Gcreate2(location, name.c_str(), H5P_DEFAULT, plist.get(), H5P_DEFAULT), H5Gclose);
  check(group.valid(), describe_name(context, "group", name), "cannot create it");
  return group;
}

Handle open_group(hid_t location, const std::string& name, const std::string& context) {
  Handle group(H5Gopen2(location, name.c_str(), H5P_DEFAULT), H5Gclose);
  check(group.valid(), describe_name(context, "group", name), "cannot open it");
  return group;
}

Handle open_dataset(hid_t location, const std::string& name, const std::string& context) {
  Handle dataset(H5Dopen2(location, name.c_str(), H5P_DEFAULT), H5Dclose);
  check(dataset.valid(), describe_name(context, "dataset", name), "cannot open it");
  return dataset;
}

void write_attribute(hid_t object, const char* name, std::int64_t value,
                     const std::string& context) {
  write_scalar_attribute(object, name, H5T_NATIVE_INT64, value, context);
}

void write_attribute(hid_t object, const char* name, std::uint64_t value,
                     const std::string& context) {
  write_scalar_attribute(object, name, H5T_NATIVE_UINT64, value, context);
}

void write_attribute(hid_t object, const char* name, const std::string& value,
                     const std::string& context) {
  const Handle type = utf8_string_type(std::max<std::size_t>(1, value.size()));
  const Handle space = scalar_space();
  if (H5Aexists(object, name) > 0) H5Adelete(object, name);
  const Handle attribute(
      H5Acreate2(object, name, type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  check(attribute.valid(), context, detail::concat("cannot create attribute \"", name, "\""));
  std::string padded = value;
  padded.resize(std::max<std::size_t>(1, value.size()), '\0');
  check(H5Awrite(attribute.get(), type.get(), padded.data()) >= 0, context,
        detail::concat("cannot write attribute \"", name, "\""));
}

bool has_attribute(hid_t object, const char* name) { return H5Aexists(object, name) > 0; }

std::int64_t read_int_attribute(hid_t object, const char* name, const std::string& context) {
  return read_scalar_attribute<std::int64_t>(object, name, H5T_NATIVE_INT64, context);
}

std::uint64_t read_uint_attribute(hid_t object, const char* name, const std::string& context) {
  return read_scalar_attribute<std::uint64_t>(object, name, H5T_NATIVE_UINT64, context);
}

std::string read_string_attribute(hid_t object, const char* name, const std::string& context) {
  const Handle attribute = open_attribute(object, name, context);
  const Handle file_type(H5Aget_type(attribute.get()), H5Tclose);
  return read_any_string(
      file_type.get(), [&](hid_t type, void* out) { return H5Aread(attribute.get(), type, out); },
      context, detail::concat("attribute \"", name, "\""));
}

void write_string(hid_t location, const char* name, const std::string& value,
                  const std::string& context) {
  const std::size_t size = std::max<std::size_t>(1, value.size());
  const Handle type = utf8_string_type(size);
  const Handle space = scalar_space();
  const Handle dataset(
      H5Dcreate2(location, name, type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
      H5Dclose);
  check(dataset.valid(), describe_name(context, "dataset", name), "cannot create it");
  std::string padded = value;
  padded.resize(size, '\0');
  check(H5Dwrite(dataset.get(), type.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, padded.data()) >= 0,
        describe_name(context, "dataset", name), "cannot write it");
}

std::string read_string(hid_t location, const char* name, const std::string& context) {
  const Handle dataset = open_dataset(location, name, context);
  const Handle file_type(H5Dget_type(dataset.get()), H5Tclose);
  return read_any_string(
      file_type.get(),
      [&](hid_t type, void* out) {
        return H5Dread(dataset.get(), type, H5S_ALL, H5S_ALL, H5P_DEFAULT, out);
      },
      context, detail::concat("dataset \"", name, "\""));
}

void write_floats(hid_t location, const std::string& name, const std::vector<Index>& shape,
                  hid_t memory_type, const void* data, const std::string& context) {
  const std::string where = describe_name(context, "dataset", name);
  const int rank = int(shape.size());
  std::vector<hsize_t> dims(shape.begin(), shape.end()), chunk(shape.size());
  // Chunks of at most 16 MiB, filled from the last dimension (an HDF5 chunk
  // must stay below 4 GiB; the checksum needs chunked storage).
  constexpr hsize_t kChunkBytes = hsize_t(16) << 20;
  hsize_t inner = H5Tget_size(memory_type);
  for (int d = rank - 1; d >= 0; --d) {
    chunk[d] = std::min(dims[d], std::max<hsize_t>(1, kChunkBytes / inner));
    inner *= chunk[d];
  }
  const Handle space(H5Screate_simple(rank, dims.data(), nullptr), H5Sclose);
  const Handle plist(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
  check(space.valid() && plist.valid() && H5Pset_chunk(plist.get(), rank, chunk.data()) >= 0 &&
            H5Pset_fletcher32(plist.get()) >= 0,
        where, "cannot set up the dataset");
  const Handle dataset(H5Dcreate2(location, name.c_str(), memory_type, space.get(), H5P_DEFAULT,
                                  plist.get(), H5P_DEFAULT),
                       H5Dclose);
  check(dataset.valid(), where, "cannot create it");
  check(H5Dwrite(dataset.get(), memory_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) >= 0, where,
        "cannot write it");
}

DatasetInfo dataset_info(hid_t dataset, const std::string& context) {
  const Handle space(H5Dget_space(dataset), H5Sclose);
  const Handle type(H5Dget_type(dataset), H5Tclose);
  check(space.valid() && type.valid(), context, "cannot read the dataset's shape and type");
  const int rank = H5Sget_simple_extent_ndims(space.get());
  check(rank >= 0, context, "cannot read the dataset's rank");
  std::vector<hsize_t> dims(std::size_t(rank), 0);
  H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr);
  DatasetInfo info;
  info.shape.assign(dims.begin(), dims.end());
  info.is_float = H5Tget_class(type.get()) == H5T_FLOAT;
  info.bytes = H5Tget_size(type.get());
  return info;
}

void read_all(hid_t dataset, hid_t memory_type, void* data, const std::string& context) {
  check(H5Dread(dataset, memory_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) >= 0, context,
        "cannot read the data (corrupt file or checksum mismatch)");
}

}  // namespace reformer::io::hdf5
