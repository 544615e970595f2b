#include "gguf/tokenizer/python_json.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string_view>
#include <system_error>

namespace moetier {
namespace {

void AppendEscapedString(std::string_view s, std::string* out) {
  out->push_back('"');
  for (const char c : s) {
    switch (c) {
      case '"':
        *out += "\\\"";
        break;
      case '\\':
        *out += "\\\\";
        break;
      case '\n':
        *out += "\\n";
        break;
      case '\r':
        *out += "\\r";
        break;
      case '\t':
        *out += "\\t";
        break;
      case '\b':
        *out += "\\b";
        break;
      case '\f':
        *out += "\\f";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned>(c));
          *out += buf;
        } else {
          out->push_back(c);
        }
    }
  }
  out->push_back('"');
}

void AppendDumps(const nlohmann::ordered_json& value, std::string* out) {
  switch (value.type()) {
    case nlohmann::json::value_t::object: {
      out->push_back('{');
      bool first = true;
      for (const auto& [key, item] : value.items()) {
        if (!first) *out += ", ";
        first = false;
        AppendEscapedString(key, out);
        *out += ": ";
        AppendDumps(item, out);
      }
      out->push_back('}');
      return;
    }
    case nlohmann::json::value_t::array: {
      out->push_back('[');
      for (size_t i = 0; i < value.size(); ++i) {
        if (i > 0) *out += ", ";
        AppendDumps(value[i], out);
      }
      out->push_back(']');
      return;
    }
    case nlohmann::json::value_t::string:
      AppendEscapedString(value.get_ref<const std::string&>(), out);
      return;
    case nlohmann::json::value_t::boolean:
      *out += value.get<bool>() ? "true" : "false";
      return;
    case nlohmann::json::value_t::number_integer:
      *out += std::to_string(value.get<int64_t>());
      return;
    case nlohmann::json::value_t::number_unsigned:
      *out += std::to_string(value.get<uint64_t>());
      return;
    case nlohmann::json::value_t::number_float: {
      // json.dumps writes floats with float.__repr__, and NaN / Infinity
      // as JavaScript names (allow_nan=True).
      const double d = value.get<double>();
      if (std::isnan(d)) {
        *out += "NaN";
      } else if (std::isinf(d)) {
        *out += d > 0 ? "Infinity" : "-Infinity";
      } else {
        *out += PythonFloatRepr(d);
      }
      return;
    }
    case nlohmann::json::value_t::null:
    case nlohmann::json::value_t::discarded:
    case nlohmann::json::value_t::binary:
      *out += "null";
      return;
  }
}

}  // namespace

std::string PythonFloatRepr(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  // The shortest digits that round-trip (Python's repr picks the same), as
  // d.ddddde±XX; then laid out the way repr lays them out.
  char buf[64];
  const std::to_chars_result r =
      std::to_chars(buf, buf + sizeof(buf), value, std::chars_format::scientific);
  std::string_view sci(buf, static_cast<size_t>(r.ptr - buf));
  std::string out;
  if (sci.front() == '-') {
    out.push_back('-');
    sci.remove_prefix(1);
  }
  const size_t e_pos = sci.find('e');
  const int exponent = std::atoi(std::string(sci.substr(e_pos + 1)).c_str());
  std::string digits;
  for (const char c : sci.substr(0, e_pos)) {
    if (c != '.') digits.push_back(c);
  }
  // repr switches to exponent form outside 1e-4 <= |x| < 1e16.
  if (exponent < -4 || exponent >= 16) {
    out.push_back(digits[0]);
    if (digits.size() > 1) {
      out.push_back('.');
      out.append(digits, 1);
    }
    char exp_buf[16];
    std::snprintf(exp_buf, sizeof(exp_buf), "e%c%02d", exponent < 0 ? '-' : '+',
                  std::abs(exponent));
    out += exp_buf;
    return out;
  }
  if (exponent < 0) {
    out += "0.";
    out.append(static_cast<size_t>(-exponent - 1), '0');
    out += digits;
    return out;
  }
  const size_t integer_digits = static_cast<size_t>(exponent) + 1;
  if (digits.size() <= integer_digits) {
    out += digits;
    out.append(integer_digits - digits.size(), '0');
    out += ".0";
  } else {
    out.append(digits, 0, integer_digits);
    out.push_back('.');
    out.append(digits, integer_digits);
  }
  return out;
}

std::string PythonJsonDumps(const nlohmann::ordered_json& value) {
  std::string out;
  AppendDumps(value, &out);
  return out;
}

std::string PythonStr(const nlohmann::ordered_json& value) {
  switch (value.type()) {
    case nlohmann::json::value_t::string:
      return value.get<std::string>();
    case nlohmann::json::value_t::boolean:
      return value.get<bool>() ? "True" : "False";
    case nlohmann::json::value_t::null:
      return "None";
    case nlohmann::json::value_t::number_float:
      return PythonFloatRepr(value.get<double>());
    default:
      return PythonJsonDumps(value);
  }
}

}  // namespace moetier
