#include "tokenizer/chat/py_json.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <stdexcept>

namespace deepinfer::chat {

std::string py_float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  // Shortest round-trip digits in scientific form, e.g. "-1.2345e+07".
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  std::string out;
  size_t i = 0;
  if (sci[i] == '-') {
    out += '-';
    ++i;
  }
  std::string digits;
  for (; i < sci.size() && sci[i] != 'e'; ++i)
    if (sci[i] != '.') digits += sci[i];
  const int exp10 = std::atoi(sci.c_str() + i + 1);
  // Python: decpt = position of the decimal point relative to the digit string.
  const int decpt = exp10 + 1;
  const int nd = int(digits.size());
  if (decpt <= -4 || decpt > 16) {
    out += digits[0];
    if (nd > 1) {
      out += '.';
      out.append(digits, 1, std::string::npos);
    }
    char e[16];
    std::snprintf(e, sizeof e, "e%c%02d", exp10 < 0 ? '-' : '+', exp10 < 0 ? -exp10 : exp10);
    out += e;
  } else if (decpt <= 0) {
    out += "0.";
    out.append(size_t(-decpt), '0');
    out += digits;
  } else if (decpt < nd) {
    out.append(digits, 0, size_t(decpt));
    out += '.';
    out.append(digits, size_t(decpt), std::string::npos);
  } else {
    out += digits;
    out.append(size_t(decpt - nd), '0');
    out += ".0";
  }
  return out;
}

void py_json_escape_to(std::string_view s, std::string& out) {
  static const char* hex = "0123456789abcdef";
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
          out += "\\u00";
          out += hex[c >> 4];
          out += hex[c & 15];
        } else {
          out += char(c);
        }
    }
  }
}

static void dump_float(double d, std::string& out) {
  if (std::isnan(d)) out += "NaN";
  else if (std::isinf(d)) out += d > 0 ? "Infinity" : "-Infinity";
  else out += py_float_repr(d);
}

void py_json_dumps_to(const Json& v, std::string& out) {
  switch (v.type()) {
    case Json::value_t::null: out += "null"; break;
    case Json::value_t::boolean: out += v.get<bool>() ? "true" : "false"; break;
    case Json::value_t::number_integer: out += std::to_string(v.get<int64_t>()); break;
    case Json::value_t::number_unsigned: out += std::to_string(v.get<uint64_t>()); break;
    case Json::value_t::number_float: dump_float(v.get<double>(), out); break;
    case Json::value_t::string:
      out += '"';
      py_json_escape_to(v.get_ref<const std::string&>(), out);
      out += '"';
      break;
    case Json::value_t::array: {
      out += '[';
      bool first = true;
      for (const auto& e : v) {
        if (!first) out += ", ";
        first = false;
        py_json_dumps_to(e, out);
      }
      out += ']';
      break;
    }
    case Json::value_t::object: {
      out += '{';
      bool first = true;
      for (auto it = v.begin(); it != v.end(); ++it) {
        if (!first) out += ", ";
        first = false;
        out += '"';
        py_json_escape_to(it.key(), out);
        out += "\": ";
        py_json_dumps_to(it.value(), out);
      }
      out += '}';
      break;
    }
    default:
      throw std::invalid_argument("value cannot be serialised as JSON (binary or discarded)");
  }
}

std::string py_json_dumps(const Json& v) {
  std::string out;
  py_json_dumps_to(v, out);
  return out;
}

std::string py_str(const Json& v, std::string_view what) {
  switch (v.type()) {
    case Json::value_t::string: return v.get<std::string>();
    case Json::value_t::null: return "None";
    case Json::value_t::boolean: return v.get<bool>() ? "True" : "False";
    case Json::value_t::number_integer: return std::to_string(v.get<int64_t>());
    case Json::value_t::number_unsigned: return std::to_string(v.get<uint64_t>());
    case Json::value_t::number_float: return py_float_repr(v.get<double>());
    default:
      throw std::invalid_argument(std::string(what) + ": a " + v.type_name() +
                                  " cannot be used as text (the reference would insert its Python repr)");
  }
}

bool py_truthy(const Json& v) {
  switch (v.type()) {
    case Json::value_t::null: return false;
    case Json::value_t::boolean: return v.get<bool>();
    case Json::value_t::number_integer: return v.get<int64_t>() != 0;
    case Json::value_t::number_unsigned: return v.get<uint64_t>() != 0;
    case Json::value_t::number_float: return v.get<double>() != 0.0;
    case Json::value_t::string: return !v.get_ref<const std::string&>().empty();
    case Json::value_t::array:
    case Json::value_t::object: return !v.empty();
    default: return true;
  }
}

// Numeric value of a bool/number for Python equality, as a canonical string.
static bool numeric_key(const Json& v, std::string& key) {
  if (v.is_boolean()) {
    key.assign(1, v.get<bool>() ? '1' : '0');
    return true;
  }
  if (v.is_number_integer() && !v.is_number_unsigned()) {
    key = std::to_string(v.get<int64_t>());
    return true;
  }
  if (v.is_number_unsigned()) {
    key = std::to_string(v.get<uint64_t>());
    return true;
  }
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 1.8e19) {
      if (d < 0) key = std::to_string(int64_t(d));
      else key = std::to_string(uint64_t(d));
    } else {
      key = py_float_repr(d);
    }
    return true;
  }
  return false;
}

bool py_equal(const Json& a, const Json& b) {
  std::string ka, kb;
  const bool na = numeric_key(a, ka), nb = numeric_key(b, kb);
  if (na || nb) return na && nb && ka == kb;
  if (a.type() != b.type()) return false;
  if (a.is_array()) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i)
      if (!py_equal(a[i], b[i])) return false;
    return true;
  }
  if (a.is_object()) {
    if (a.size() != b.size()) return false;
    for (auto it = a.begin(); it != a.end(); ++it) {
      auto jt = b.find(it.key());
      if (jt == b.end() || !py_equal(it.value(), *jt)) return false;
    }
    return true;
  }
  return a == b;
}

std::string py_hash_key(const Json& v, std::string_view what) {
  std::string k;
  if (numeric_key(v, k)) return "n:" + k;
  if (v.is_string()) return "s:" + v.get<std::string>();
  if (v.is_null()) return "none";
  throw std::invalid_argument(std::string(what) + ": unhashable type '" +
                              (v.is_array() ? "list" : "dict") + "'");
}

}  // namespace deepinfer::chat
