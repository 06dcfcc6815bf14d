// ListOps (Nangia and Bowman, 2018) as Long Range Arena generates it (Tay et
// al., ICLR 2021; google-research/long-range-arena, lra_benchmarks/data/
// listops.py): nested lists of the operators MIN, MAX, MED (median) and SM (sum
// modulo 10) over the digits 0-9, whose value, a digit, is the class.
//
//   [MAX 4 3 [MIN 2 3 ] 1 0 [MED 1 5 8 9 2 ] ]   ->  5
//
// The recipe: a node at depth d < max_depth is a digit (uniform) with
// probability 3/4, otherwise an operator (uniform) over 2..max_args children
// (uniform), each a node at depth d + 1; a node at max_depth is a digit. The
// root is at depth 1. A tree's length counts operators, digits and closing
// brackets; trees are drawn until one has min_length < length < max_length
// (LRA: 500 and 2000, max_depth 10, max_args 10, splits of 96,000 / 2,000 /
// 2,000). MED of an even count is the integer part of the mean of the middle
// two (numpy.median, then int, as LRA's evaluator).
//
// Example i of a split is a pure function of (seed, split, i): attempt a draws
// from its own counter-based stream (core/random.hpp), so any example is made
// on the fly, in any order, on any process, without a cache file. The
// generator stops an attempt as soon as it passes max_length (it would be
// rejected; the accepted trees are distributed as the recipe's).
#pragma once

#include "reformer/core/types.hpp"
#include "reformer/data/tasks.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace reformer::data {

// Token ids of ListOps: 0 is padding, 1..10 the digits 0..9.
namespace listops {
constexpr int kPad = 0, kDigit0 = 1, kMin = 11, kMax = 12, kMed = 13, kSumMod = 14, kClose = 15;
constexpr int kVocab = 16, kClasses = 10;
}  // namespace listops

struct ListOpsOptions {
  int max_depth = 10;
  int max_args = 10;
  Index min_length = 500;   // a tree's length is above this ...
  Index max_length = 2000;  // ... and below this
  std::uint64_t seed = 1;
  // ConfigError naming the first bad field (max_depth >= 1, 2 <= max_args,
  // 0 <= min_length < max_length - 1, a length range a tree can have).
  void validate() const;
};

struct ListOpsExample {
  std::vector<int> tokens;  // min_length < size < max_length
  int label = 0;            // the value, 0..9
  int attempts = 0;         // trees drawn until this one was accepted
};

// Example `index` of `split`.
ListOpsExample listops_example(const ListOpsOptions& options, Split split, std::uint64_t index);

// The value of a ListOps token sequence (the library's evaluator, a stack over
// the tokens); ShapeError naming the position and the rule for a sequence that
// is not one well-formed tree (padding ends it).
int listops_value(const std::vector<int>& tokens);

// Tokens as text ("[MAX 4 3 ]", one space between tokens) and back; ConfigError
// naming the word for one that is not a ListOps token.
std::string listops_text(const std::vector<int>& tokens);
std::vector<int> listops_tokens(const std::string& text);

}  // namespace reformer::data
