// JSON Schema's regular-expression subset (`pattern`, and `format` as patterns) as byte DFAs:
// what the schema compiler (json_schema.cpp) builds string constraints from. The patterns are
// parsed by the shared front end (regex/syntax.h, ECMA-262 dialect); this is the byte-DFA back
// end. Internal to src/server.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>

#include "server/json_grammar.h"

namespace deepinfer::server::json_regex {

// The DFA of an ECMA-262 pattern as JSON Schema uses it (unanchored sides match anything).
// Throws SchemaError naming what it does not support.
ByteDfa pattern_dfa(std::string_view pattern);
// Strings both accept.
ByteDfa intersect(const ByteDfa& a, const ByteDfa& b);
// UTF-8 strings of lo..hi code points (hi UINT32_MAX: no upper bound).
ByteDfa length_dfa(uint32_t lo, uint32_t hi);
// d without the states from which no accepting state is reachable.
ByteDfa pruned(ByteDfa d);
// The anchored pattern of a supported `format` value; nullptr for any other.
const char* format_pattern(const std::string& format);
// Whether d accepts s (run over its bytes).
bool dfa_accepts(const ByteDfa& d, std::string_view s);

inline bool is_digit(uint8_t c) { return c >= '0' && c <= '9'; }
// The value of a hexadecimal digit, -1 for any other byte.
inline int hex_value(uint8_t c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace deepinfer::server::json_regex
