#include "chat/py_json.h"

#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <cstdlib>

namespace ds4::chat {

void py_json_quote(std::string_view s, std::string& out) {
  out.push_back('"');
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          out += fmt::format("\\u{:04x}", c);
        } else {
          out.push_back(static_cast<char>(c));
        }
    }
  }
  out.push_back('"');
}

std::string py_float_repr(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v < 0 ? "-Infinity" : "Infinity";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::scientific);
  std::string_view sci(buf, static_cast<size_t>(res.ptr - buf));
  // sci looks like "-d.ddde+XX"; split sign, digits and exponent.
  bool neg = !sci.empty() && sci[0] == '-';
  if (neg) sci.remove_prefix(1);
  size_t epos = sci.find('e');
  std::string digits;
  for (char c : sci.substr(0, epos)) {
    if (c != '.') digits.push_back(c);
  }
  int exp = std::atoi(std::string(sci.substr(epos + 1)).c_str());
  std::string out = neg ? "-" : "";
  if (exp >= -4 && exp < 16) {
    if (exp >= 0) {
      size_t int_len = static_cast<size_t>(exp) + 1;
      if (digits.size() <= int_len) {
        out += digits;
        out.append(int_len - digits.size(), '0');
        out += ".0";
      } else {
        out += digits.substr(0, int_len);
        out += '.';
        out += digits.substr(int_len);
      }
    } else {
      out += "0.";
      out.append(static_cast<size_t>(-exp - 1), '0');
      out += digits;
    }
  } else {
    out += digits[0];
    if (digits.size() > 1) {
      out += '.';
      out += digits.substr(1);
    }
    out += fmt::format("e{}{:02d}", exp < 0 ? '-' : '+', std::abs(exp));
  }
  return out;
}

void py_json_dump_to(const Json& value, std::string& out) {
  switch (value.type()) {
    case Json::value_t::null: out += "null"; break;
    case Json::value_t::boolean: out += value.get<bool>() ? "true" : "false"; break;
    case Json::value_t::number_integer: out += fmt::format("{}", value.get<std::int64_t>()); break;
    case Json::value_t::number_unsigned: out += fmt::format("{}", value.get<std::uint64_t>()); break;
    case Json::value_t::number_float: out += py_float_repr(value.get<double>()); break;
    case Json::value_t::string: py_json_quote(value.get_ref<const std::string&>(), out); break;
    case Json::value_t::array: {
      out.push_back('[');
      bool first = true;
      for (const auto& item : value) {
        if (!first) out += ", ";
        first = false;
        py_json_dump_to(item, out);
      }
      out.push_back(']');
      break;
    }
    case Json::value_t::object: {
      out.push_back('{');
      bool first = true;
      for (const auto& [key, item] : value.items()) {
        if (!first) out += ", ";
        first = false;
        py_json_quote(key, out);
        out += ": ";
        py_json_dump_to(item, out);
      }
      out.push_back('}');
      break;
    }
    case Json::value_t::binary:
    case Json::value_t::discarded:
      out += "null";
      break;
  }
}

std::string py_json_dumps(const Json& value) {
  std::string out;
  py_json_dump_to(value, out);
  return out;
}

}  // namespace ds4::chat
