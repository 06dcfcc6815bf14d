// CIFAR-10's binary version in miniature, for the image task's tests
// (data/classification.hpp).
#pragma once

#include "reformer/data/classification.hpp"

#include <fstream>
#include <string>
#include <vector>

namespace reformer::testing {

// Writes data_batch_1.bin .. data_batch_5.bin and test_batch.bin into `folder`
// with `records[f]` records in file f (the five training files, then the test
// file) and returns each file's bytes. Record r of file f has label
// (3 f + r) % 10 and colour bytes that follow a pattern of (f, r, plane, pixel).
inline std::vector<std::vector<unsigned char>> write_fake_cifar(const std::string& folder,
                                                                const std::vector<int>& records) {
  std::vector<std::vector<unsigned char>> files(6);
  for (int f = 0; f < 6; ++f) {
    auto& bytes = files[std::size_t(f)];
    for (int r = 0; r < records[std::size_t(f)]; ++r) {
      bytes.push_back((unsigned char)((3 * f + r) % 10));
      for (int plane = 0; plane < 3; ++plane)
        for (int p = 0; p < 1024; ++p)
          bytes.push_back((unsigned char)((p * (plane + 3) + 37 * r + 101 * f) % 256));
    }
    std::ofstream(folder + "/" + data::image::kCifarFiles[f], std::ios::binary)
        .write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
  }
  return files;
}

}  // namespace reformer::testing
