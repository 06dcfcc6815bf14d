// LRA's Pathfinder release in miniature, for the pathfinder task's tests
// (data/classification.hpp).
#pragma once

#include "reformer/io/png.hpp"

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace reformer::testing {

// One image of the fake release: its label and its levels (side x side).
struct FakePathfinderImage {
  int label;
  std::vector<std::uint8_t> levels;
};

// Writes `folder`/metadata/0.npy and 1.npy (the second listed first in the
// folder's order only by name: "10.npy" would sort before "2.npy" as text) and
// `images` PNG images of side `side` under `folder`/imgs/<file>/: image i has
// label i % 2 and levels (7 p + 13 i) % 256, and file 0 lists images 0 ..
// images/2 - 1, file 1 the rest. `empty` images (the last ones listed in file
// 0) are written as 0-byte files, as LRA's release has some. Returns the
// non-empty images in the order the task reads them.
inline std::vector<FakePathfinderImage> write_fake_pathfinder(const std::string& folder, int images,
                                                              int side, int empty = 0) {
  namespace fs = std::filesystem;
  fs::create_directories(folder + "/metadata");
  std::vector<FakePathfinderImage> kept;
  const int half = images / 2;
  for (int file = 0; file < 2; ++file) {
    const std::string dir = "imgs/" + std::to_string(file);
    fs::create_directories(folder + "/" + dir);
    std::ofstream meta(folder + "/metadata/" + std::to_string(file == 0 ? 2 : 10) + ".npy");
    for (int i = file == 0 ? 0 : half; i < (file == 0 ? half : images); ++i) {
      const std::string name = "sample_" + std::to_string(i) + ".png";
      meta << dir << " " << name << " " << i << " " << i % 2 << " 14 1.5\n";
      const bool is_empty = file == 0 && i >= half - empty;
      if (is_empty) {
        std::ofstream(folder + "/" + dir + "/" + name);
        continue;
      }
      io::GrayImage image;
      image.width = side;
      image.height = side;
      for (int p = 0; p < side * side; ++p)
        image.levels.push_back(std::uint8_t((7 * p + 13 * i) % 256));
      io::write_gray_png(folder + "/" + dir + "/" + name, image);
      kept.push_back({i % 2, image.levels});
    }
  }
  return kept;
}

}  // namespace reformer::testing
