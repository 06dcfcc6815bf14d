// The only source that includes toml++ (see toml_document.hpp).
#include "config/toml_document.hpp"

#include "reformer/core/error.hpp"

#include <toml++/toml.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string_view>

namespace reformer::config::detail {
namespace {

using reformer::detail::concat;

std::string origin_of(const toml::source_region& where, const std::string& source_name) {
  if (!where.begin) return source_name;
  return concat(source_name, ":", where.begin.line, ":", where.begin.column);
}

template <class T>
std::string streamed(const T& value) {
  std::ostringstream out;
  out << value;
  return out.str();
}

bool before(const toml::source_region& a, const toml::source_region& b) {
  if (a.begin.line != b.begin.line) return a.begin.line < b.begin.line;
  return a.begin.column < b.begin.column;
}

TomlNode convert(const toml::node& node, std::string origin, const std::string& source_name) {
  TomlNode out;
  out.origin = std::move(origin);
  switch (node.type()) {
    case toml::node_type::table: {
      out.type = TomlNode::Type::Table;
      // toml++ keeps keys sorted; errors should name the first in the file.
      std::vector<std::pair<const toml::key*, const toml::node*>> entries;
      for (auto&& [key, value] : *node.as_table()) entries.emplace_back(&key, &value);
      std::stable_sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) {
        return before(a.first->source(), b.first->source());
      });
      for (const auto& [key, value] : entries)
        out.table.emplace_back(std::string(key->str()),
                               convert(*value, origin_of(key->source(), source_name), source_name));
      break;
    }
    case toml::node_type::array:
      out.type = TomlNode::Type::Array;
      for (const toml::node& element : *node.as_array())
        out.array.push_back(
            convert(element, origin_of(element.source(), source_name), source_name));
      break;
    case toml::node_type::string:
      out.type = TomlNode::Type::String;
      out.string = node.as_string()->get();
      break;
    case toml::node_type::integer:
      out.type = TomlNode::Type::Integer;
      out.integer = node.as_integer()->get();
      break;
    case toml::node_type::floating_point:
      out.type = TomlNode::Type::Float;
      out.floating = node.as_floating_point()->get();
      break;
    case toml::node_type::boolean:
      out.type = TomlNode::Type::Boolean;
      out.boolean = node.as_boolean()->get();
      break;
    case toml::node_type::date:
      out.type = TomlNode::Type::Date;
      out.string = streamed(*node.as_date());
      break;
    case toml::node_type::time:
      out.type = TomlNode::Type::Time;
      out.string = streamed(*node.as_time());
      break;
    case toml::node_type::date_time:
      out.type = TomlNode::Type::DateTime;
      out.string = streamed(*node.as_date_time());
      break;
    default:
      throw ConfigError(concat(out.origin, ": unsupported TOML value"));
  }
  return out;
}

}  // namespace

TomlNode* TomlNode::find(const std::string& key) {
  for (auto& [name, value] : table)
    if (name == key) return &value;
  return nullptr;
}

TomlNode parse_toml(const std::string& text, const std::string& source_name) {
  try {
    const toml::table root = toml::parse(std::string_view(text), std::string_view(source_name));
    return convert(root, source_name, source_name);
  } catch (const toml::parse_error& e) {
    throw ConfigError(
        concat(origin_of(e.source(), source_name), ": TOML syntax error: ", e.description()));
  }
}

std::string describe(const TomlNode& node) {
  switch (node.type) {
    case TomlNode::Type::Table:
      return "a table";
    case TomlNode::Type::Array:
      return "the array " + to_toml_text(node);
    case TomlNode::Type::String:
      return "the string " + to_toml_text(node);
    case TomlNode::Type::Integer:
      return "the integer " + to_toml_text(node);
    case TomlNode::Type::Float:
      return "the float " + to_toml_text(node);
    case TomlNode::Type::Boolean:
      return "the boolean " + to_toml_text(node);
    case TomlNode::Type::Date:
      return "the date " + node.string;
    case TomlNode::Type::Time:
      return "the time " + node.string;
    case TomlNode::Type::DateTime:
      return "the date-time " + node.string;
  }
  return "a value";
}

std::string to_toml_text(const TomlNode& node) {
  switch (node.type) {
    case TomlNode::Type::Table: {
      std::string out = "{";
      for (std::size_t i = 0; i < node.table.size(); ++i)
        out += (i ? ", " : " ") + node.table[i].first + " = " + to_toml_text(node.table[i].second);
      return out + (node.table.empty() ? "}" : " }");
    }
    case TomlNode::Type::Array: {
      std::string out = "[";
      for (std::size_t i = 0; i < node.array.size(); ++i)
        out += (i ? ", " : "") + to_toml_text(node.array[i]);
      return out + "]";
    }
    case TomlNode::Type::String:
      return toml_quote(node.string);
    case TomlNode::Type::Integer:
      return std::to_string(node.integer);
    case TomlNode::Type::Float:
      return toml_float(node.floating);
    case TomlNode::Type::Boolean:
      return node.boolean ? "true" : "false";
    case TomlNode::Type::Date:
    case TomlNode::Type::Time:
    case TomlNode::Type::DateTime:
      return node.string;
  }
  return "";
}

std::string toml_quote(const std::string& text) {
  std::string out = "\"";
  for (const char c : text) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\f':
        out += "\\f";
        break;
      case '\r':
        out += "\\r";
        break;
      default:
        if ((unsigned char)c < 0x20 || c == 0x7f) {
          char escaped[8];
          std::snprintf(escaped, sizeof escaped, "\\u%04X", unsigned((unsigned char)c));
          out += escaped;
        } else {
          out += c;  // UTF-8 passes through
        }
    }
  }
  return out + "\"";
}

std::string toml_float(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  char text[64];
  const double magnitude = std::fabs(value);
  if (magnitude == 0 || (magnitude >= 1e-5 && magnitude < 1e15)) {
    // Fixed notation with the fewest decimals that read back exactly: 100.0, 0.001.
    for (int decimals = 0; decimals <= 24; ++decimals) {
      std::snprintf(text, sizeof text, "%.*f", decimals, value);
      if (std::strtod(text, nullptr) == value) {
        std::string out = text;
        return decimals == 0 ? out + ".0" : out;
      }
    }
  }
  // Exponent notation with the fewest significant digits: 1e-9, 6.02e23.
  for (int digits = 1; digits <= 17; ++digits) {
    std::snprintf(text, sizeof text, "%.*e", digits - 1, value);
    if (std::strtod(text, nullptr) == value) break;
  }
  std::string out = text;
  const auto e = out.find('e');
  std::string exponent = out.substr(e + 1);
  const bool negative = exponent[0] == '-';
  exponent = exponent.substr(exponent.find_first_not_of("+-"));
  exponent = exponent.substr(std::min(exponent.find_first_not_of('0'), exponent.size() - 1));
  return out.substr(0, e) + "e" + (negative ? "-" : "") + exponent;
}

}  // namespace reformer::config::detail
