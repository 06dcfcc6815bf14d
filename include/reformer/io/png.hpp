// 8-bit grayscale PNG images (libpng's simplified API), for image data such
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
// and one that is not 8-bit grayscale without alpha (its format named; colour
// is refused rather than converted, as LRA's Pathfinder reads the file's own
// channels). `op` begins each message.
GrayImage read_gray_png(const std::string& path, const std::string& op);

// Writes `image` as an 8-bit grayscale PNG at `path` (replacing a file there):
// IoError naming the path when libpng cannot, or when the levels do not hold
// width x height values.
void write_gray_png(const std::string& path, const GrayImage& image);

}  // namespace reformer::io
