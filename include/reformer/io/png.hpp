// Grayscale PNG images (libpng's simplified API, libpng >= 1.6), for image data such
// as Long Range Arena's Pathfinder (data/classification.hpp).
#pragma once

#include "reformer/core/types.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace reformer::io {

struct GrayImage {
  Index width = 0, height = 0;
  std::vector<std::uint8_t> levels;  // [height][width], rows top to bottom
};

// The image of the PNG file `path`. IoError naming the path for a missing or
// unreadable file, one that is not a PNG or is damaged (libpng's own words),
// one that is not grayscale without alpha (its format named; colour is refused
// rather than converted, as LRA's Pathfinder reads the file's own channels),
// and one of more than `max_pixels` pixels (checked before any allocation).
// Grayscale of 1, 2 or 4 bits is expanded to 8-bit levels; 16-bit is refused.
// libpng's simplified API applies a gAMA chunk far from sRGB's to the levels
// (LRA's images have none). `op` begins each message.
GrayImage read_gray_png(const std::string& path, const std::string& op,
                        Index max_pixels = Index(1) << 26);

// Writes `image` as an 8-bit grayscale PNG at `path` (replacing a file there):
// IoError naming the path when libpng cannot, or when the levels do not hold
// width x height values.
void write_gray_png(const std::string& path, const GrayImage& image);

}  // namespace reformer::io
