// A small JSON Schema validator for the tests, written apart from the grammar's compiler
// (server/json_grammar.cpp) so that the two check each other: type, enum, const, $ref (local
// JSON pointers), allOf / anyOf / oneOf, properties, required, additionalProperties, items /
// prefixItems / additionalItems, minItems / maxItems, minLength / maxLength (code points),
// pattern (std::regex, ECMAScript, searched; ASCII patterns), format date / uuid, and the
// numeric bounds (compared as doubles). Returns "" when `v` is valid, else what failed.
#pragma once
#include <cmath>
#include <regex>
#include <string>

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
      int y, m, d;
      char tail;
      if (f == "date" && (std::sscanf(str.c_str(), "%4d-%2d-%2d%c", &y, &m, &d, &tail) != 3 || str.size() != 10 ||
                          m < 1 || m > 12 || d < 1 || d > 31))
        return at + ": not a date: " + str;
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
