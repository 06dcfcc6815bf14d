// LRA's Pathfinder release in miniature, for the pathfinder task's tests
// (data/classification.hpp).
#pragma once

#include "reformer/io/png.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace reformer::testing {

// One line of the fake release: its label, its levels (side x side), and
// whether its file was written empty (0 bytes), as LRA's release has some.
struct FakePathfinderImage {
  int label;
  std::vector<std::uint8_t> levels;
  bool empty;
};

// Writes `folder`/metadata/2.npy and 10.npy (10 after 2 only by number) and
// `images` PNG images of side `side` under `folder`/imgs/<file>/: image i has
// label i % 2 and levels (7 p + 13 i) % 256; 2.npy lists images 0 ..
// images/2 - 1, 10.npy the rest; the images numbered in `empty` are 0-byte
// files. Returns every line in the order the task reads them.
inline std::vector<FakePathfinderImage> write_fake_pathfinder(const std::string& folder, int images,
                                                              int side,
                                                              const std::vector<int>& empty = {}) {
  namespace fs = std::filesystem;
  fs::create_directories(folder + "/metadata");
  std::vector<FakePathfinderImage> lines;
  const int half = images / 2;
  for (int file = 0; file < 2; ++file) {
    const std::string dir = "imgs/" + std::to_string(file);
    fs::create_directories(folder + "/" + dir);
    std::ofstream meta(folder + "/metadata/" + std::to_string(file == 0 ? 2 : 10) + ".npy");
    for (int i = file == 0 ? 0 : half; i < (file == 0 ? half : images); ++i) {
      const std::string name = "sample_" + std::to_string(i) + ".png";
      meta << dir << " " << name << " " << i << " " << i % 2 << " 14 1.5\n";
      io::GrayImage image;
      image.width = side;
      image.height = side;
      for (int p = 0; p < side * side; ++p)
        image.levels.push_back(std::uint8_t((7 * p + 13 * i) % 256));
      const bool is_empty = std::find(empty.begin(), empty.end(), i) != empty.end();
      if (is_empty)
        std::ofstream(folder + "/" + dir + "/" + name);
      else
        io::write_gray_png(folder + "/" + dir + "/" + name, image);
      lines.push_back({i % 2, image.levels, is_empty});
    }
  }
  return lines;
}

}  // namespace reformer::testing
