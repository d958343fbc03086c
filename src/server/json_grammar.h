// A byte-level incremental JSON validator with a subset of JSON Schema, for constrained
// decoding (response_format json_object / json_schema, string="false" tool arguments).
//
// feed() takes one byte and says whether the text so far is still a prefix of a valid
// document (RFC 8259, strict: UTF-8 checked byte by byte, no lone surrogate escapes, no
// leading zeros, no trailing commas). complete() says whether the text is a whole document.
// The state is a small copyable struct: containers below the innermost one live in an
// append-only arena owned by the grammar (a persistent stack), so trying a byte on a copy
// of the state costs a copy of ~100 bytes. Arena entries made while trying tokens are
// dropped with truncate().
//
// Schema subset enforced (anything else is accepted as "any value"):
//   * "type" (a name or a list of names); "enum"/"const" restrict the types to those of
//     their values; "anyOf"/"oneOf" to the union of their branches' types;
//   * objects: "properties" (up to 64) give each declared key its own subschema;
//     "required" keys must all be present before '}'; "additionalProperties": false
//     limits keys to the declared ones (no duplicates), a schema object applies to the
//     other keys;
//   * arrays: "items" (a schema object) applies to every element.
// Not enforced: $ref, allOf, not, if/then/else, patternProperties, prefixItems, string
// formats/patterns/lengths, numeric ranges, min/maxItems, the enum values themselves.
//
// Limits that keep a sampled document finite and parseable everywhere: nesting depth <= 32,
// numbers <= 32 bytes with at most 2 exponent digits (no overflow to infinity), values of
// schema type "integer" <= 18 digits (an int64 in every client), whitespace
// runs <= 32 bytes, no whitespace after the top-level value.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/chat/py_json.h"

namespace deepinfer::server {

// Compiled schema nodes; node 0 accepts any value.
struct JsonSchemaNode {
  enum : uint8_t { kObject = 1, kArray = 2, kString = 4, kInteger = 8, kFraction = 16, kBool = 32, kNull = 64 };
  static constexpr uint8_t kAnyType = 127;
  uint8_t types = kAnyType;  // kInteger alone: integers; kInteger | kFraction: any number
  std::vector<std::string> keys;  // declared properties (objects)
  std::vector<int32_t> key_schema;
  uint64_t required = 0;          // bits over keys
  bool closed = false;            // additionalProperties: false
  int32_t extra = 0;              // schema of undeclared properties
  int32_t items = 0;              // schema of array elements
};

struct JsonSchema {
  std::vector<JsonSchemaNode> nodes{JsonSchemaNode{}};
  // Compiles `schema` and returns its node id (0 for a non-object).
  int32_t add(const chat::Json& schema);
  // A node for "any JSON value of these types".
  int32_t add_types(uint8_t types);

 private:
  int32_t compile(const chat::Json& s, int depth);
};

// One byte of UTF-8 text: `need` continuation bytes are still due, the next one in
// [lo, hi]. Rejects overlong forms, surrogates and code points above U+10FFFF.
inline bool utf8_step(uint8_t c, uint8_t& need, uint8_t& lo, uint8_t& hi) {
  if (need > 0) {
    if (c < lo || c > hi) return false;
    --need;
    lo = 0x80;
    hi = 0xBF;
    return true;
  }
  if (c < 0x80) return true;
  if (c >= 0xC2 && c <= 0xDF) need = 1;
  else if (c >= 0xE0 && c <= 0xEF) need = 2;
  else if (c >= 0xF0 && c <= 0xF4) need = 3;
  else return false;
  if (c == 0xE0) lo = 0xA0;
  if (c == 0xED) hi = 0x9F;
  if (c == 0xF0) lo = 0x90;
  if (c == 0xF4) hi = 0x8F;
  return true;
}

struct JsonFrame {
  uint8_t kind = 0;    // 'o' or 'a'
  bool first = true;   // nothing inside yet
  int32_t schema = 0;
  uint64_t seen = 0;   // declared keys present (objects)
};

struct JsonState {
  JsonFrame top;            // innermost open container (valid when depth > 0)
  int32_t below = -1;       // arena index of the next container down
  uint16_t depth = 0;
  uint8_t mode = 0;         // JsonGrammar::Mode
  uint8_t sub = 0;          // string / number / literal sub-state
  uint8_t pos = 0;          // literal position, \\u digit count, number length
  uint8_t ws = 0;           // current whitespace run
  uint8_t utf8_need = 0, utf8_lo = 0x80, utf8_hi = 0xBF;
  bool is_key = false, key_plain = true, want_low = false, int_only = false, negative = false;
  uint16_t uval = 0;        // \\u escape value so far
  uint16_t key_len = 0;
  int32_t value_schema = 0; // schema of the value being read or expected
  uint64_t key_cand = 0;    // declared keys still matching the key being read
  uint64_t tail = 0;        // last bytes of the current string (forbidden markers)
};

class JsonGrammar {
 public:
  using State = JsonState;
  enum Mode : uint8_t { kValue, kArrFirst, kObjKey, kColon, kAfter, kString, kNumber, kLiteral, kDone };
  static constexpr int kMaxDepth = 32;
  static constexpr int kMaxNumberBytes = 32;
  static constexpr int kMaxIntegerDigits = 18;  // schema "integer": fits an int64
  static constexpr int kMaxWhitespace = 32;

  // forbid_markers: strings may not contain what the chat output parser treats as markup
  // ("<｜", "｜DSML", "<think>", "</think>"), so the parsed content keeps the document.
  JsonGrammar(JsonSchema schema, bool forbid_markers);

  JsonState start(int32_t schema_node) const;
  bool feed(JsonState& s, uint8_t c);
  // The text is a whole document (a top-level number is complete yet may still grow).
  bool complete(const JsonState& s) const;
  const JsonSchema& schema() const { return schema_; }
  int32_t add_schema(const chat::Json& schema) { return schema_.add(schema); }

  size_t arena_size() const { return arena_.size(); }
  void truncate(size_t n) { arena_.resize(n); }

 private:
  struct Below {
    JsonFrame frame;
    int32_t below;
  };
  bool value_start(JsonState& s, uint8_t c);
  bool string_byte(JsonState& s, uint8_t c);
  bool key_byte(JsonState& s, uint8_t c);
  bool close_string(JsonState& s);
  bool number_byte(JsonState& s, uint8_t c) const;
  bool after_byte(JsonState& s, uint8_t c);
  bool whitespace(JsonState& s, uint8_t c) const;
  void push(JsonState& s, uint8_t kind, int32_t schema);
  void pop(JsonState& s);
  void value_done(JsonState& s);
  bool forbidden_tail(uint64_t tail) const;

  JsonSchema schema_;
  bool forbid_markers_;
  std::vector<Below> arena_;
};

// Whether `text` is a complete valid document (no schema; the limits above apply).
bool json_valid(std::string_view text);
// Whether `text` is a prefix of some valid document.
bool json_valid_prefix(std::string_view text);

}  // namespace deepinfer::server
