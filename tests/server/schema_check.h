// A small JSON Schema validator for the tests, written apart from the grammar's compiler
// (server/json_grammar.cpp) so that the two check each other: type, enum, const, $ref (local
// JSON pointers), allOf / anyOf / oneOf, properties, required, additionalProperties, items /
// prefixItems / additionalItems, minItems / maxItems, minLength / maxLength (code points),
// pattern (std::regex, ECMAScript, searched; ASCII patterns), format date / time / date-time /
// ipv4 / email / uuid, and the numeric bounds (compared as doubles). Returns "" when `v` is valid, else what failed.
#pragma once
#include <cctype>
#include <cmath>
#include <regex>
#include <string>
#include <vector>

#include "tokenizer/chat/py_json.h"

namespace schema_check {

using deepinfer::chat::Json;

inline const Json* pointer(const Json& root, const std::string& ref) {
  const Json* cur = &root;
  size_t i = 1;
  while (i < ref.size()) {
    size_t j = ref.find('/', i + 1);
    if (j == std::string::npos) j = ref.size();
    const std::string tok = ref.substr(i + 1, j - i - 1);
    if (!cur->is_object() || !cur->contains(tok)) return nullptr;
    cur = &(*cur)[tok];
    i = j;
  }
  return cur;
}

// The formats, checked field by field in plain code (the grammar compiles them to automata).
inline bool all_digits(const std::string& s, size_t at, size_t n) {
  if (at + n > s.size()) return false;
  for (size_t i = at; i < at + n; ++i)
    if (s[i] < '0' || s[i] > '9') return false;
  return true;
}
inline int number_at(const std::string& s, size_t at, size_t n) { return std::stoi(s.substr(at, n)); }

inline bool is_date(const std::string& s) {
  if (s.size() != 10 || s[4] != '-' || s[7] != '-' || !all_digits(s, 0, 4) || !all_digits(s, 5, 2) ||
      !all_digits(s, 8, 2))
    return false;
  const int y = number_at(s, 0, 4), m = number_at(s, 5, 2), d = number_at(s, 8, 2);
  const bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
  const int month_days[] = {31, leap ? 29 : 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  return m >= 1 && m <= 12 && d >= 1 && d <= month_days[m - 1];
}

// hh:mm:ss[.f{1,9}](Z|+-hh:mm), no leap second.
inline bool is_time(const std::string& s) {
  auto hh_mm = [&](size_t at) {
    return all_digits(s, at, 2) && all_digits(s, at + 3, 2) && s[at + 2] == ':' && number_at(s, at, 2) < 24 &&
           number_at(s, at + 3, 2) < 60;
  };
  if (s.size() < 9 || !hh_mm(0) || s[5] != ':' || !all_digits(s, 6, 2) || number_at(s, 6, 2) > 59) return false;
  size_t i = 8;
  if (s[i] == '.') {
    size_t n = 0;
    while (i + 1 + n < s.size() && s[i + 1 + n] >= '0' && s[i + 1 + n] <= '9') ++n;
    if (n < 1 || n > 9) return false;
    i += 1 + n;
  }
  if (i + 1 == s.size() && (s[i] == 'Z' || s[i] == 'z')) return true;
  return i + 6 == s.size() && (s[i] == '+' || s[i] == '-') && hh_mm(i + 1);
}

inline bool is_ipv4(const std::string& s) {
  size_t i = 0;
  for (int part = 0; part < 4; ++part) {
    if (part > 0 && (i >= s.size() || s[i++] != '.')) return false;
    size_t n = 0;
    while (i + n < s.size() && s[i + n] >= '0' && s[i + n] <= '9') ++n;
    if (n < 1 || n > 3 || (n > 1 && s[i] == '0') || number_at(s, i, n) > 255) return false;
    i += n;
  }
  return i == s.size();
}

// Dot-atom local part (RFC 5322 atext) @ hostname labels (1-63 LDH, no hyphen at either end).
inline bool is_email(const std::string& s) {
  const size_t at = s.find('@');
  if (at == std::string::npos) return false;
  auto split = [](const std::string& x) {
    std::vector<std::string> parts{""};
    for (char c : x) {
      if (c == '.') parts.emplace_back();
      else parts.back().push_back(c);
    }
    return parts;
  };
  const std::string atext_symbols = "!#$%&'*+/=?^_`{|}~-";
  for (const std::string& atom : split(s.substr(0, at))) {
    if (atom.empty()) return false;
    for (char c : atom)
      if (!std::isalnum(static_cast<unsigned char>(c)) && atext_symbols.find(c) == std::string::npos) return false;
  }
  for (const std::string& label : split(s.substr(at + 1))) {
    if (label.empty() || label.size() > 63 || label.front() == '-' || label.back() == '-') return false;
    for (char c : label)
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-') return false;
  }
  return true;
}

inline size_t code_points(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

// UTF-8 to code points (wchar_t is 32 bits here), so that '.' and classes see characters.
inline std::wstring wide(const std::string& s) {
  std::wstring out;
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = s[i];
    const int n = c < 0x80 ? 0 : c >= 0xF0 ? 3 : c >= 0xE0 ? 2 : 1;
    uint32_t cp = n == 0 ? c : (c & (0x3F >> n));
    for (int k = 1; k <= n && i + k < s.size(); ++k) cp = (cp << 6) | (s[i + k] & 0x3F);
    out += wchar_t(cp);
    i += size_t(n) + 1;
  }
  return out;
}

inline bool type_is(const Json& v, const std::string& t) {
  if (t == "object") return v.is_object();
  if (t == "array") return v.is_array();
  if (t == "string") return v.is_string();
  if (t == "boolean") return v.is_boolean();
  if (t == "null") return v.is_null();
  if (t == "number") return v.is_number();
  if (t == "integer")
    return v.is_number_integer() || v.is_number_unsigned() ||
           (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>());
  return false;
}

inline std::string check(const Json& s, const Json& v, const Json& root, const std::string& at = "") {
  if (s.is_boolean()) return s.get<bool>() ? "" : at + ": false schema";
  if (s.contains("$ref")) {
    const Json* t = pointer(root, s["$ref"].get<std::string>());
    if (!t) return at + ": bad $ref";
    return check(*t, v, root, at);
  }
  if (s.contains("allOf"))
    for (const auto& b : s["allOf"])
      if (auto e = check(b, v, root, at); !e.empty()) return e;
  for (const char* k : {"anyOf", "oneOf"})
    if (s.contains(k)) {
      int ok = 0;
      for (const auto& b : s[k]) ok += check(b, v, root, at).empty();
      if (ok == 0 || (k[0] == 'o' && ok > 1)) return at + ": " + k + " matched " + std::to_string(ok);
    }
  if (s.contains("type")) {
    bool ok = false;
    if (s["type"].is_array()) {
      for (const auto& t : s["type"]) ok = ok || type_is(v, t.get<std::string>());
    } else {
      ok = type_is(v, s["type"].get<std::string>());
    }
    if (!ok) return at + ": type " + s["type"].dump() + " but " + v.dump();
  }
  if (s.contains("enum")) {
    bool ok = false;
    for (const auto& e : s["enum"]) ok = ok || e == v;
    if (!ok) return at + ": not in enum: " + v.dump();
  }
  if (s.contains("const") && !(s["const"] == v)) return at + ": not the const: " + v.dump();
  if (v.is_object()) {
    for (auto it = v.begin(); it != v.end(); ++it) {
      const std::string sub = at + "/" + it.key();
      if (s.contains("properties") && s["properties"].contains(it.key())) {
        if (auto e = check(s["properties"][it.key()], it.value(), root, sub); !e.empty()) return e;
      } else if (s.contains("additionalProperties")) {
        if (auto e = check(s["additionalProperties"], it.value(), root, sub); !e.empty()) return e;
      }
    }
    if (s.contains("required"))
      for (const auto& r : s["required"])
        if (!v.contains(r.get<std::string>())) return at + ": missing " + r.dump();
  }
  if (v.is_array()) {
    const Json* prefix = s.contains("prefixItems") ? &s["prefixItems"]
                         : (s.contains("items") && s["items"].is_array()) ? &s["items"]
                                                                           : nullptr;
    const Json* rest = s.contains("items") && !s["items"].is_array() ? &s["items"]
                       : s.contains("additionalItems")                ? &s["additionalItems"]
                                                                      : nullptr;
    for (size_t i = 0; i < v.size(); ++i) {
      const Json* sch = prefix && i < prefix->size() ? &(*prefix)[i] : rest;
      if (sch)
        if (auto e = check(*sch, v[i], root, at + "/" + std::to_string(i)); !e.empty()) return e;
    }
    if (s.contains("minItems") && v.size() < s["minItems"].get<size_t>()) return at + ": too few items";
    if (s.contains("maxItems") && v.size() > s["maxItems"].get<size_t>()) return at + ": too many items";
  }
  if (v.is_string()) {
    const std::string& str = v.get_ref<const std::string&>();
    if (s.contains("minLength") && code_points(str) < s["minLength"].get<size_t>()) return at + ": too short";
    if (s.contains("maxLength") && code_points(str) > s["maxLength"].get<size_t>()) return at + ": too long";
    if (s.contains("pattern") &&
        !std::regex_search(wide(str), std::wregex(wide(s["pattern"].get<std::string>()))))
      return at + ": " + v.dump() + " does not match " + s["pattern"].dump();
    if (s.contains("format")) {
      const std::string f = s["format"].get<std::string>();
      if (f == "date" && !is_date(str)) return at + ": not a date: " + str;
      if (f == "time" && !is_time(str)) return at + ": not a time: " + str;
      if (f == "date-time" &&
          !(str.size() > 11 && is_date(str.substr(0, 10)) && (str[10] == 'T' || str[10] == 't') && is_time(str.substr(11))))
        return at + ": not a date-time: " + str;
      if (f == "ipv4" && !is_ipv4(str)) return at + ": not an ipv4 address: " + str;
      if (f == "email" && !is_email(str)) return at + ": not an email address: " + str;
      if (f == "uuid" && !std::regex_match(str, std::regex("[0-9a-fA-F]{8}(-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}")))
        return at + ": not a uuid: " + str;
    }
  }
  if (v.is_number()) {
    const double x = v.get<double>();
    if (s.contains("minimum") && x < s["minimum"].get<double>()) return at + ": below minimum " + v.dump();
    if (s.contains("maximum") && x > s["maximum"].get<double>()) return at + ": above maximum " + v.dump();
    if (s.contains("exclusiveMinimum") && x <= s["exclusiveMinimum"].get<double>()) return at + ": <= exclusiveMinimum";
    if (s.contains("exclusiveMaximum") && x >= s["exclusiveMaximum"].get<double>()) return at + ": >= exclusiveMaximum";
  }
  return "";
}

inline std::string check(const Json& schema, const Json& v) { return check(schema, v, schema); }

}  // namespace schema_check
