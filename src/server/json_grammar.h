// A byte-level incremental JSON validator with a subset of JSON Schema, for constrained
// decoding (response_format json_schema, tool arguments).
//
// feed() takes one byte and says whether the text so far is still a prefix of a valid
// document (RFC 8259, strict: UTF-8 checked byte by byte, no lone surrogate escapes, no
// leading zeros, no trailing commas) that satisfies the schema. complete() says whether the
// text is a whole document. The state is a small copyable struct: containers below the
// innermost one live in an append-only arena owned by the grammar (a persistent stack), so
// trying a byte on a copy of the state costs a copy of ~150 bytes. Arena entries made while
// trying tokens are dropped with truncate().
//
// Schema keywords enforced (JsonSchema::add throws SchemaError, a 400 naming the keyword and
// where it is, for any other keyword; nothing is silently ignored):
//   * type (a name or a list); enum / const: the value is one of the listed JSON values,
//     written compactly (the values are filtered by the schema's other keywords);
//   * anyOf / oneOf whose branches take disjoint JSON types (Optional[X], Union[int, str]...):
//     the first byte of the value picks the branch; allOf with one schema;
//   * $ref to "#" or a JSON pointer into the document ($defs, definitions, ...), recursive
//     refs included (each target is compiled once);
//   * objects: properties (up to 64), required (a required key that is not declared takes
//     additionalProperties' schema), additionalProperties false / a schema;
//   * arrays: items, prefixItems (and draft-7 items arrays / additionalItems), minItems,
//     maxItems;
//   * strings: minLength / maxLength (in code points), pattern (the regex subset below) and
//     format date, time, date-time, uuid, ipv4, email (as patterns); other formats are
//     annotations (as in JSON Schema 2020-12) and not checked;
//   * integers: minimum / maximum / exclusiveMinimum / exclusiveMaximum, exactly;
//   * numbers with any of those bounds: exactly, written without an exponent with at most 15
//     integer and 15 fraction digits (a bound with more than 15 fraction digits is rounded
//     inwards to 15).
// Annotations accepted and not checked: title, description, examples, default, $schema, $id,
// $comment, $anchor, deprecated, readOnly, writeOnly, $defs / definitions (compiled only where
// referenced). Trivially true forms (additionalProperties true, uniqueItems false, minItems 0,
// minLength 0) are accepted.
//
// pattern: ECMA-262 syntax subset, matched (unanchored unless ^ / $) against the decoded
// characters of the string as they are generated (a DFA over their UTF-8 bytes): literals,
// '.', classes [...] / [^...] with ranges, \d \D \w \W \s \S, escapes \t \n \r \f \v \0 \xHH
// \uHHHH and escaped punctuation, groups (...) (?:...) (?<name>...), alternation, * + ? {n}
// {n,} {n,m} (lazy forms too). ^ and $ only at the start / end of a top-level alternative.
// Not supported (400): backreferences, lookaround, \b \B, \p{...}, flags. In a string with a
// pattern, the escapes \" \\ \/ \b \f \n \r \t stand for their characters and \u is refused.
// (Where chat markers are forbidden, a pattern whose only continuation spells one, e.g.
// "^<think>$", could still dead-end; no other case does.)
//
// Limits that keep a sampled document finite and parseable everywhere: nesting depth <= 32
// (a schema value is only opened where what it requires still fits, so the grammar never
// dead-ends; a schema that cannot fit in 32 levels is a 400), numbers <= 32 bytes with at
// most 2 exponent digits (no overflow to infinity), values of schema type "integer" <= 18
// digits (an int64 in every client), no whitespace after the top-level value.
//
// Whitespace (JsonWhitespace): a sampled document is compact. kCompact, the grammar of
// constrained decoding, allows one space after ':' and after ',' (the separators of Python's
// json.dumps) and no other whitespace, so both that style and fully compact JSON (OpenAI's
// strict outputs) are accepted; a model cannot spend its tokens on indentation, and every
// whitespace byte stands next to a separator, so the document finishes as soon as its values
// do. kLoose, for validating text written by others (json_valid), allows any whitespace
// between tokens, in runs of at most 32 bytes.
#pragma once
#include <array>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/chat/py_json.h"

namespace deepinfer::server {

enum class JsonWhitespace : uint8_t { kCompact, kLoose };

// A schema the grammar cannot enforce: the message names the keyword and its JSON pointer.
struct SchemaError : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

// A DFA over bytes (a string pattern): next() is -1 where no accepted string goes on.
struct ByteDfa {
  std::array<uint8_t, 256> cls{};
  int32_t n_class = 1;
  std::vector<int32_t> trans;  // state * n_class + class
  std::vector<uint8_t> accept;
  int32_t next(int32_t s, uint8_t b) const { return trans[size_t(s) * size_t(n_class) + cls[b]]; }
  size_t size() const { return accept.size(); }
};

// Compiles a pattern (the subset above); throws SchemaError.
ByteDfa compile_pattern(std::string_view pattern);

// Compiled schema nodes; node 0 accepts any value.
struct JsonSchemaNode {
  enum : uint8_t { kObject = 1, kArray = 2, kString = 4, kInteger = 8, kFraction = 16, kBool = 32, kNull = 64 };
  static constexpr uint8_t kAnyType = 127;
  uint8_t types = kAnyType;  // kInteger alone: integers; kInteger | kFraction: any number
  // anyOf / oneOf: the branch node for each type bit (by bit index), -1 none; empty: no branches.
  std::vector<int32_t> branch;
  // enum / const: the values' compact texts, sorted (non-empty: the value is one of them).
  std::vector<std::string> literals;
  bool has_enum = false;
  // objects
  std::vector<std::string> keys;  // declared properties
  std::vector<int32_t> key_schema;
  uint64_t required = 0;          // bits over keys
  bool closed = false;            // additionalProperties: false
  bool has_properties = false;    // "properties" present (a tool's {"properties": {}} takes no keys)
  int32_t extra = 0;              // schema of undeclared properties
  // arrays
  int32_t items = 0;              // schema of elements after prefix_items (-1: none allowed)
  std::vector<int32_t> prefix_items;
  uint32_t min_items = 0, max_items = UINT32_MAX;
  // strings
  uint32_t min_length = 0, max_length = UINT32_MAX;
  int32_t dfa = -1;               // pattern / format (JsonSchema::dfas)
  // numbers: bounds as integers (kInteger alone) or in units of 1e-15 (numbers)
  bool bounded = false;
  __int128 lo = 0, hi = 0;
  // the fewest containers a value must open (enforced per opening), kMaxDepth + 1: impossible
  uint8_t need_object = 1, need_array = 1, need = 0;

  int32_t element_schema(uint32_t index) const {
    return index < prefix_items.size() ? prefix_items[index] : items;
  }
  // A string here is any text (the fast token path, a DSML string="true" value).
  bool plain_string() const {
    return (types & kString) && branch.empty() && !has_enum && dfa < 0 && min_length == 0 &&
           max_length == UINT32_MAX;
  }
};

struct JsonSchema {
  std::vector<JsonSchemaNode> nodes{JsonSchemaNode{}};
  std::vector<ByteDfa> dfas;
  bool forbid_markers = false;  // enum values with chat markup are dropped
  // Compiles `schema` and returns its node id; throws SchemaError (what() names the keyword).
  int32_t add(const chat::Json& schema);
  // A node for "any JSON value of these types".
  int32_t add_types(uint8_t types);
  // Whether `v` satisfies node `n` (enum filtering, tests).
  bool admits(int32_t n, const chat::Json& v, int depth = 0) const;

 private:
  struct Ctx;
  struct Site;  // the schema object being compiled: its keywords and where it sits
  int32_t compile(const chat::Json& s, Ctx& cx, const std::string& where, int depth);
  // compile() in parts, by keyword family:
  int32_t compile_ref(const Site& at, Ctx& cx, int depth);                            // $ref
  int32_t compile_alternatives(const Site& at, const char* comb, Ctx& cx, int depth);  // anyOf / oneOf
  void compile_object(const Site& at, Ctx& cx, int depth, JsonSchemaNode& n);        // properties, required
  void compile_array(const Site& at, Ctx& cx, int depth, JsonSchemaNode& n);         // items, lengths
  void compile_string(const Site& at, JsonSchemaNode& n);                            // lengths, pattern, format
  static void compile_number(const Site& at, JsonSchemaNode& n);                     // minimum, maximum, ...
  void keep_literals(const Site& at, int32_t id);                                    // enum / const
  void compute_need();
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
  uint32_t count = 0;  // arrays: index of the current element
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
  bool key_free = false;    // an undeclared key may still be written
  uint16_t uval = 0;        // \\u escape value so far
  uint16_t key_len = 0;
  int32_t value_schema = 0; // schema of the value being read or expected
  int32_t dfa_state = -1;   // string pattern state
  uint32_t str_len = 0;     // code points of the current string
  uint32_t lit_lo = 0, lit_hi = 0, lit_pos = 0;  // enum literals still matching, bytes matched
  uint8_t int_digits = 0, frac_digits = 0;       // bounded numbers
  bool seen_dot = false;
  int64_t int_part = 0, frac_part = 0;
  uint64_t key_cand = 0;    // declared keys still matching the key being read (and allowed here)
  uint64_t key_any = 0;     // declared keys still matching it, allowed here or not
  uint64_t tail = 0;        // last bytes of the current string (forbidden markers)
};

class JsonGrammar {
 public:
  using State = JsonState;
  enum Mode : uint8_t { kValue, kArrFirst, kObjKey, kColon, kAfter, kString, kNumber, kLiteral, kDone, kEnum };
  static constexpr int kMaxDepth = 32;
  static constexpr int kMaxNumberBytes = 32;
  static constexpr int kMaxIntegerDigits = 18;  // schema "integer": fits an int64
  static constexpr int kMaxBoundedDigits = 15;  // numbers with bounds: integer / fraction digits
  static constexpr int kMaxWhitespace = 32;  // kLoose: bytes in one whitespace run

  // forbid_markers: strings may not contain what the chat output parser treats as markup
  // ("<｜", "｜DSML", "<think>", "</think>"), so the parsed content keeps the document.
  JsonGrammar(JsonSchema schema, bool forbid_markers, JsonWhitespace whitespace = JsonWhitespace::kCompact);

  JsonState start(int32_t schema_node) const;
  bool feed(JsonState& s, uint8_t c);
  // The text is a whole document (a top-level number is complete yet may still grow).
  bool complete(const JsonState& s) const;
  const JsonSchema& schema() const { return schema_; }
  int32_t add_schema(const chat::Json& schema) { return schema_.add(schema); }

  // Inside a string at a character boundary where every character but '"', '\\' and
  // control bytes is accepted whatever came before (no pattern, length or key limit, and no
  // partial chat marker in the last bytes): a token made only of such characters, without a
  // marker inside, is accepted (token_constraint.cpp's fast path).
  bool in_free_string(const JsonState& s) const;
  int fast_class(const JsonState& s) const { return in_free_string(s) ? 0 : -1; }

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
  bool string_char(JsonState& s, uint8_t c, bool lead);
  bool number_byte(JsonState& s, uint8_t c) const;
  bool number_done(const JsonState& s) const;
  bool bounded_feasible(const JsonState& s) const;
  bool enum_byte(JsonState& s, uint8_t c);
  bool enum_done(const JsonState& s) const;
  bool after_byte(JsonState& s, uint8_t c);
  bool whitespace(JsonState& s, uint8_t c) const;
  bool fits(const JsonState& s, int32_t schema) const;
  uint64_t key_choices(const JsonState& s, bool* free) const;
  void push(JsonState& s, uint8_t kind, int32_t schema);
  void pop(JsonState& s);
  void value_done(JsonState& s);
  bool forbidden_tail(uint64_t tail) const;

  JsonSchema schema_;
  bool forbid_markers_;
  JsonWhitespace whitespace_;
  std::vector<Below> arena_;
};

// Whether `text` is a complete valid document (no schema; the limits above apply, with
// kLoose whitespace).
bool json_valid(std::string_view text);
// Whether `text` is a prefix of some valid document.
bool json_valid_prefix(std::string_view text);
// Whether the last bytes of a string (a uint64 shift register, newest lowest) end with a
// proper prefix of a chat marker, or `text` contains a whole one.
bool marker_prefix_pending(uint64_t tail);
bool contains_marker(std::string_view text);

}  // namespace deepinfer::server
