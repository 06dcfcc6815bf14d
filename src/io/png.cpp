#include "reformer/io/png.hpp"

#include "reformer/core/error.hpp"
#include "reformer/io/files.hpp"

#include <png.h>

namespace reformer::io {

namespace {

std::string format_name(png_uint_32 format) {
  std::string name = (format & PNG_FORMAT_FLAG_COLOR) ? "colour" : "grayscale";
  if (format & PNG_FORMAT_FLAG_ALPHA) name += " with alpha";
  if (format & PNG_FORMAT_FLAG_LINEAR) name += ", 16-bit";
  if (format & PNG_FORMAT_FLAG_COLORMAP) name += ", palette";
  return name;
}

}  // namespace

GrayImage read_gray_png(const std::string& path, const std::string& op, Index max_pixels) {
  // The bytes first (the project's checks: a FIFO or a folder is named, never
  // opened), then libpng reads them from memory.
  const std::string bytes = read_text_file(path, op, "give the path of a PNG image");
  require<IoError>(!bytes.empty(), op, ": \"", path, "\" is empty (0 bytes), not a PNG image");
  png_image image{};
  image.version = PNG_IMAGE_VERSION;
  struct Release {  // png_image_free on every path out
    png_image* image;
    ~Release() { png_image_free(image); }
  } release{&image};
  if (!png_image_begin_read_from_memory(&image, bytes.data(), bytes.size()))
    throw IoError(detail::concat(op, ": \"", path,
                                 "\" is not a readable PNG image (libpng: ", image.message, ")"));
  require<IoError>(image.format == PNG_FORMAT_GRAY, op, ": \"", path, "\" is a ",
                   format_name(image.format),
                   " PNG image; only grayscale without alpha, of at most 8 bits, is read (as "
                   "the file's own channels, like LRA's Pathfinder)");
  require<IoError>(
      image.width > 0 && image.height > 0 && Index(image.width) * Index(image.height) <= max_pixels,
      op, ": \"", path, "\" is ", image.width, " x ", image.height, " pixels; at most ", max_pixels,
      " pixels are read here");
  GrayImage out;
  out.width = Index(image.width);
  out.height = Index(image.height);
  out.levels.resize(std::size_t(out.width) * std::size_t(out.height));
  if (!png_image_finish_read(&image, nullptr, out.levels.data(), png_int_32(image.width), nullptr))
    throw IoError(detail::concat(op, ": \"", path,
                                 "\" is a damaged PNG image (libpng: ", image.message, ")"));
  return out;
}

void write_gray_png(const std::string& path, const GrayImage& image) {
  require<IoError>(image.width > 0 && image.height > 0 &&
                       image.levels.size() == std::size_t(image.width) * std::size_t(image.height),
                   "write_gray_png: \"", path, "\": ", image.levels.size(), " levels for ",
                   image.width, " x ", image.height, " pixels");
  png_image out{};
  out.version = PNG_IMAGE_VERSION;
  out.width = png_uint_32(image.width);
  out.height = png_uint_32(image.height);
  out.format = PNG_FORMAT_GRAY;
  if (!png_image_write_to_file(&out, path.c_str(), 0, image.levels.data(), png_int_32(image.width),
                               nullptr))
    throw IoError(
        detail::concat("write_gray_png: cannot write \"", path, "\" (libpng: ", out.message, ")"));
}

}  // namespace reformer::io
