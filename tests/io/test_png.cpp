// Grayscale PNG images (io/png.hpp): what is written is read back, and every
// file that is not such an image, or is larger than asked, is refused by name.
#include "reformer/core/error.hpp"
#include "reformer/io/png.hpp"
#include "support/checks.hpp"
#include "support/temp_dir.hpp"

#include <gtest/gtest.h>
#include <png.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace reformer {
namespace {

using reformer::testing::TempDir;

std::string bytes_of(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST(Png, GrayImagesRoundTripAndOthersAreRefusedByName) {
  TempDir dir;
  io::GrayImage image;
  image.width = 7;  // not a multiple of 4 or 8: rows of odd length
  image.height = 5;
  for (int i = 0; i < 35; ++i) image.levels.push_back(std::uint8_t((i * 53 + 11) % 256));
  const std::string path = dir.path() + "/gray.png";
  io::write_gray_png(path, image);
  const auto back = io::read_gray_png(path, "test");
  EXPECT_EQ(back.width, 7);
  EXPECT_EQ(back.height, 5);
  EXPECT_EQ(back.levels, image.levels);

  // An image larger than the caller allows is refused before it is decoded.
  testing::expect_error<IoError>([&] { io::read_gray_png(path, "test", 34); },
                                 {"gray.png", "is 7 x 5 pixels; at most 34 pixels"});
  EXPECT_EQ(io::read_gray_png(path, "test", 35).levels, image.levels);
  // A colour image (written by libpng itself) is refused, not converted.
  png_image colour{};
  colour.version = PNG_IMAGE_VERSION;
  colour.width = 2;
  colour.height = 2;
  colour.format = PNG_FORMAT_RGB;
  const std::uint8_t rgb[12] = {255, 0, 0, 0, 255, 0, 0, 0, 255, 9, 9, 9};
  ASSERT_TRUE(
      png_image_write_to_file(&colour, (dir.path() + "/rgb.png").c_str(), 0, rgb, 0, nullptr));
  testing::expect_error<IoError>(
      [&] { io::read_gray_png(dir.path() + "/rgb.png", "test"); },
      {"rgb.png", "is a colour PNG image", "only grayscale without alpha"});
  // Not a PNG, empty, cut short, missing, a folder.
  std::ofstream(dir.path() + "/text.png") << "hello, not an image";
  testing::expect_error<IoError>([&] { io::read_gray_png(dir.path() + "/text.png", "test"); },
                                 {"text.png", "is not a readable PNG image (libpng:"});
  std::ofstream(dir.path() + "/empty.png");
  testing::expect_error<IoError>([&] { io::read_gray_png(dir.path() + "/empty.png", "test"); },
                                 {"empty.png", "is empty (0 bytes)"});
  const std::string whole = bytes_of(path);
  std::ofstream(dir.path() + "/cut.png", std::ios::binary) << whole.substr(0, whole.size() - 20);
  testing::expect_error<IoError>([&] { io::read_gray_png(dir.path() + "/cut.png", "test"); },
                                 {"cut.png", "PNG image (libpng:"});
  testing::expect_error<IoError>([&] { io::read_gray_png(dir.path() + "/none.png", "test"); },
                                 {"none.png"});
  testing::expect_error<IoError>([&] { io::read_gray_png(dir.path(), "test"); }, {dir.path()});
  // Damaged pixel data: every byte of the image data flipped in turn is
  // refused or read as some image of the same size, never a crash.
  int refused = 0;
  for (std::size_t at = 40; at < whole.size() - 12; ++at) {
    std::string damaged = whole;
    damaged[at] = char(damaged[at] ^ 0x5a);
    std::ofstream(dir.path() + "/flip.png", std::ios::binary) << damaged;
    try {
      const auto read = io::read_gray_png(dir.path() + "/flip.png", "test");
      EXPECT_EQ(read.levels.size(), 35u);
    } catch (const IoError& e) {
      EXPECT_NE(std::string(e.what()).find("flip.png"), std::string::npos) << e.what();
      ++refused;
    }
  }
  EXPECT_GT(refused, 0);
  // A write whose levels do not fill the image is refused.
  image.levels.pop_back();
  testing::expect_error<IoError>([&] { io::write_gray_png(dir.path() + "/short.png", image); },
                                 {"34 levels for 7 x 5 pixels"});
}

}  // namespace
}  // namespace reformer
