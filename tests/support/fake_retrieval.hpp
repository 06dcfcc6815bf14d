// LRA's Retrieval files in miniature, for the retrieval task's tests
// (data/classification.hpp): <prefix>.train.tsv, .eval.tsv and .test.tsv.
#pragma once

#include <array>
#include <fstream>
#include <string>
#include <vector>

namespace reformer::testing {

struct FakeRetrievalPair {
  int label;
  std::string text1, text2;
};

// Writes counts[s] pairs into the file of split s (train, valid = .eval, test)
// and returns them. Pair i of split s: label i % 2, written as "1.0" / "0.0"
// for every third pair and "1" / "0" otherwise (LRA's float column); texts of
// 3 + (7 i + s) % 20 and 2 + (5 i + 3 s) % 17 bytes from a pattern of
// (s, i); the second starts with the first's two bytes when the label is 1.
inline std::array<std::vector<FakeRetrievalPair>, 3> write_fake_retrieval(
    const std::string& prefix, const std::array<int, 3>& counts) {
  const char* suffix[3] = {".train.tsv", ".eval.tsv", ".test.tsv"};
  std::array<std::vector<FakeRetrievalPair>, 3> pairs;
  for (int s = 0; s < 3; ++s) {
    std::ofstream out(prefix + suffix[s], std::ios::binary);
    for (int i = 0; i < counts[std::size_t(s)]; ++i) {
      FakeRetrievalPair p{i % 2, "", ""};
      for (int t = 0; t < 3 + (7 * i + s) % 20; ++t) p.text1 += char('a' + (3 * t + i + s) % 26);
      for (int t = 0; t < 2 + (5 * i + 3 * s) % 17; ++t) p.text2 += char('A' + (t + 2 * i) % 26);
      if (p.label == 1)
        p.text2.replace(0, 2, p.text1.substr(0, 2));
      else
        p.text2[0] = p.text1[0] == '~' ? '}' : '~';
      out << p.label << (i % 3 == 0 ? ".0" : "") << "\tdoc" << s << "_" << i << "a\tdoc" << s << "_"
          << i << "b\t" << p.text1 << "\t" << p.text2 << "\n";
      pairs[std::size_t(s)].push_back(p);
    }
  }
  return pairs;
}

}  // namespace reformer::testing
