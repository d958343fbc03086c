// Python-compatible value formatting for the chat encoders.
//
// DeepSeek's reference encoders are Python: they serialise JSON with
// `json.dumps(value, ensure_ascii=False)` (default separators ", " and ": ",
// no key sorting, floats via float.__repr__, non-ASCII left raw, only '"', '\\'
// and control characters escaped) and splice non-JSON values into templates
// with `str.format`, i.e. Python's `str()`. This header reproduces both on
// nlohmann::ordered_json values (insertion order = Python dict order).
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace deepinfer::chat {

using Json = nlohmann::ordered_json;

// json.dumps(v, ensure_ascii=False).
std::string py_json_dumps(const Json& v);
void py_json_dumps_to(const Json& v, std::string& out);

// The body of a JSON string literal as json.dumps(s, ensure_ascii=False)
// writes it (without the surrounding quotes).
void py_json_escape_to(std::string_view s, std::string& out);

// float.__repr__ (shortest round-trip digits, exponent form outside 1e-4..1e16).
std::string py_float_repr(double d);

// str(v) for scalars: strings as-is, None, True/False, ints, float repr.
// Lists and dicts would print a Python repr, which is not reproduced: they throw
// std::invalid_argument naming `what`.
std::string py_str(const Json& v, std::string_view what);

// Python truthiness (None, False, 0, 0.0, "", [] and {} are false).
bool py_truthy(const Json& v);

// Python's `a == b` for JSON-decoded values (1 == 1.0 == True, "1" != 1).
bool py_equal(const Json& a, const Json& b);

// A string naming the dict-key identity of a hashable value (1, 1.0 and True
// collide like in a Python dict). Lists and dicts are unhashable and throw.
std::string py_hash_key(const Json& v, std::string_view what);

}  // namespace deepinfer::chat
