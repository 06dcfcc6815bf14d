#include "reformer/data/listops.hpp"

#include "data/task_detail.hpp"
#include "reformer/core/error.hpp"
#include "reformer/core/random.hpp"

#include <algorithm>
#include <sstream>

namespace reformer::data {

namespace {

constexpr std::uint64_t kListOpsStream = 0x6c6973746f7073;  // "listops"
const char* const kOperatorText[] = {"[MIN", "[MAX", "[MED", "[SM"};

// One attempt's draws: a counter over its own stream.
struct Draws {
  RandomKey key;
  std::uint64_t counter = 0;
  std::uint64_t below(std::uint64_t n) {
    return internal::uniform_below(random_bits(key, counter++), n);
  }
  double uniform() { return random_uniform(key, counter++); }
};

// Appends a node at `depth` (LRA's generate_tree); false once the tokens pass
// `limit` (the attempt is rejected).
bool grow(const ListOpsOptions& o, int depth, Draws& draws, std::vector<int>& tokens,
          std::size_t limit) {
  if (tokens.size() >= limit) return false;
  // A digit with probability 3/4 (LRA's VALUE_P = 0.25 is the chance of an
  // operator), and always at the deepest level.
  if (depth >= o.max_depth || draws.uniform() > 0.25) {
    tokens.push_back(listops::kDigit0 + int(draws.below(10)));
    return true;
  }
  const int children = 2 + int(draws.below(std::uint64_t(o.max_args - 1)));
  tokens.push_back(listops::kMin + int(draws.below(4)));
  for (int c = 0; c < children; ++c)
    if (!grow(o, depth + 1, draws, tokens, limit)) return false;
  tokens.push_back(listops::kClose);
  return tokens.size() <= limit;
}

// The value of one operator over its arguments' values.
int apply(int op, std::vector<int>& args) {
  switch (op) {
    case listops::kMin:
      return *std::min_element(args.begin(), args.end());
    case listops::kMax:
      return *std::max_element(args.begin(), args.end());
    case listops::kMed: {
      // numpy.median, then int: the middle value, or the integer part of the
      // mean of the middle two.
      std::sort(args.begin(), args.end());
      const std::size_t n = args.size();
      return n % 2 ? args[n / 2] : (args[n / 2 - 1] + args[n / 2]) / 2;
    }
    default: {
      int sum = 0;
      for (int v : args) sum += v;
      return sum % 10;
    }
  }
}

}  // namespace

void ListOpsOptions::validate() const {
  require<ConfigError>(max_depth >= 1, "data.listops.max_depth is ", max_depth,
                       "; it must be at least 1 (LRA: 10)");
  require<ConfigError>(max_args >= 2, "data.listops.max_args is ", max_args,
                       "; an operator takes at least 2 arguments (LRA: 10)");
  require<ConfigError>(min_length >= 0, "data.listops.min_length is ", min_length,
                       "; it must be at least 0 (a tree's length is above it; LRA: 500)");
  require<ConfigError>(min_length + 1 < max_length, "data.listops: min_length ", min_length,
                       " and max_length ", max_length,
                       " leave no length between them (a tree's length is above min_length and "
                       "below max_length; LRA: 500 and 2000)");
  require<ConfigError>(max_depth > 1 || min_length < 1,
                       "data.listops: max_depth 1 makes every tree "
                       "one digit (length 1), which min_length ",
                       min_length, " excludes");
}

ListOpsExample listops_example(const ListOpsOptions& options, Split split, std::uint64_t index) {
  options.validate();
  ListOpsExample example;
  const std::size_t limit = std::size_t(options.max_length - 1);
  for (std::uint64_t attempt = 0;; ++attempt) {
    Draws draws{
        {options.seed, stream_id(stream_id(kListOpsStream, std::uint64_t(split)), index, attempt)}};
    example.tokens.clear();
    const bool within = grow(options, 1, draws, example.tokens, limit);
    if (within && Index(example.tokens.size()) > options.min_length) {
      example.label = listops_value(example.tokens);
      example.attempts = int(attempt) + 1;
      return example;
    }
    // A range no tree reaches would loop forever: 100,000 attempts is about
    // 10,000 times what LRA's range needs.
    require<ConfigError>(attempt < 100000, "data.listops: no tree with a length in (",
                         options.min_length, ", ", options.max_length, ") in 100000 attempts (",
                         "max_depth ", options.max_depth, ", max_args ", options.max_args,
                         "); widen the range or allow deeper or wider trees");
  }
}

int listops_value(const std::vector<int>& tokens) {
  std::vector<std::pair<int, std::vector<int>>> open;  // operator and its arguments' values
  int value = -1;
  std::size_t t = 0;
  for (; t < tokens.size() && tokens[t] != listops::kPad; ++t) {
    const int id = tokens[t];
    require<ShapeError>(value < 0, "listops: token ", t, " (", id,
                        ") follows a complete tree; a sequence holds one tree, then padding");
    if (id >= listops::kDigit0 && id < listops::kDigit0 + 10) {
      const int digit = id - listops::kDigit0;
      if (open.empty())
        value = digit;
      else
        open.back().second.push_back(digit);
    } else if (id >= listops::kMin && id <= listops::kSumMod) {
      open.push_back({id, {}});
    } else {
      require<ShapeError>(id == listops::kClose, "listops: token ", t, " is ", id,
                          ", not a ListOps id (0 padding, 1-10 digits, 11-14 operators, 15 ])");
      require<ShapeError>(!open.empty(), "listops: token ", t, " closes no open operator");
      auto [op, args] = std::move(open.back());
      open.pop_back();
      require<ShapeError>(args.size() >= 2, "listops: the operator closed at token ", t, " has ",
                          args.size(), " argument(s); an operator takes at least 2");
      const int result = apply(op, args);
      if (open.empty())
        value = result;
      else
        open.back().second.push_back(result);
    }
  }
  for (; t < tokens.size(); ++t)
    require<ShapeError>(tokens[t] == listops::kPad, "listops: token ", t, " (", tokens[t],
                        ") follows padding; padding ends a sequence");
  require<ShapeError>(open.empty(), "listops: ", open.size(),
                      " operator(s) are not closed at the end of the sequence");
  require<ShapeError>(value >= 0, "listops: the sequence holds no tree");
  return value;
}

std::string listops_text(const std::vector<int>& tokens) {
  std::ostringstream out;
  for (std::size_t t = 0; t < tokens.size(); ++t) {
    const int id = tokens[t];
    if (t) out << ' ';
    if (id >= listops::kDigit0 && id < listops::kDigit0 + 10)
      out << id - listops::kDigit0;
    else if (id >= listops::kMin && id <= listops::kSumMod)
      out << kOperatorText[id - listops::kMin];
    else if (id == listops::kClose)
      out << ']';
    else
      out << "<pad>";
  }
  return out.str();
}

std::vector<int> listops_tokens(const std::string& text) {
  std::vector<int> tokens;
  std::istringstream in(text);
  std::string word;
  while (in >> word) {
    if (word.size() == 1 && word[0] >= '0' && word[0] <= '9') {
      tokens.push_back(listops::kDigit0 + (word[0] - '0'));
    } else if (word == "]") {
      tokens.push_back(listops::kClose);
    } else if (word == "<pad>") {
      tokens.push_back(listops::kPad);
    } else {
      const auto* end = std::end(kOperatorText);
      const auto* at = std::find(std::begin(kOperatorText), end, word);
      require<ConfigError>(at != end, "listops: '", word,
                           "' is not a ListOps token ([MIN, [MAX, [MED, [SM, ], a digit 0-9 or "
                           "<pad>)");
      tokens.push_back(listops::kMin + int(at - std::begin(kOperatorText)));
    }
  }
  return tokens;
}

}  // namespace reformer::data
