// The grammar runtime: JsonGrammar feeds a document byte by byte against the node table the
// schema compiler (json_schema.cpp) built, keeping the bounded state constrained sampling
// copies per token (stack of open values, number and string sub-states, enum and key
// candidates, string DFAs from json_regex). Also the marker checks and the plain validator.
#include "server/json_grammar.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <map>
#include <set>
#include <unordered_map>

#include "server/json_number.h"
#include "server/json_regex.h"

namespace deepinfer::server {

namespace {

using Node = JsonSchemaNode;
using chat::Json;

// kNExp2: two exponent digits, the most allowed (so that every number is finite as a double).
enum NumberState : uint8_t { kNMinus, kNZero, kNInt, kNDot, kNFrac, kNE, kNESign, kNExp, kNExp2 };
bool number_complete(uint8_t sub) {
  return sub == kNZero || sub == kNInt || sub == kNFrac || sub == kNExp || sub == kNExp2;
}

constexpr const char* kLiterals[] = {"true", "false", "null"};
constexpr uint8_t kLiteralLen[] = {4, 5, 4};

bool is_ws(uint8_t c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }
using json_regex::hex_value;
using json_regex::is_digit;
using json_number::pow10;

// Text the chat output parser would take for markup, as the last bytes of a uint64 shift
// register (most recent byte lowest).
struct Marker {
  uint64_t bytes, mask;
};
constexpr Marker pack(std::string_view s) {
  uint64_t v = 0;
  for (char c : s) v = (v << 8) | uint8_t(c);
  return {v, s.size() >= 8 ? ~uint64_t(0) : (uint64_t(1) << (8 * s.size())) - 1};
}
constexpr std::string_view kMarkerText[] = {"<｜", "｜DSML", "<think>", "</think>"};
constexpr Marker kMarkers[] = {pack(kMarkerText[0]), pack(kMarkerText[1]), pack(kMarkerText[2]), pack(kMarkerText[3])};

int type_bit_index(uint8_t bit) { return __builtin_ctz(bit); }

// The type bit a value starting with byte c has (numbers: kInteger).
uint8_t first_byte_type(uint8_t c) {
  switch (c) {
    case '{': return Node::kObject;
    case '[': return Node::kArray;
    case '"': return Node::kString;
    case 't':
    case 'f': return Node::kBool;
    case 'n': return Node::kNull;
    default: return (c == '-' || is_digit(c)) ? Node::kInteger : 0;
  }
}



}  // namespace


bool marker_prefix_pending(uint64_t tail) {
  for (std::string_view m : kMarkerText)
    for (size_t l = 1; l < m.size(); ++l) {
      const Marker p = pack(m.substr(0, l));
      if ((tail & p.mask) == p.bytes) return true;
    }
  return false;
}

bool contains_marker(std::string_view text) {
  for (std::string_view m : kMarkerText)
    if (text.find(m) != std::string_view::npos) return true;
  return false;
}

// ------------------------------------------------------------------ grammar

JsonGrammar::JsonGrammar(JsonSchema schema, bool forbid_markers, JsonWhitespace whitespace)
    : schema_(std::move(schema)), forbid_markers_(forbid_markers), whitespace_(whitespace) {
  schema_.forbid_markers = forbid_markers;
}

JsonState JsonGrammar::start(int32_t schema_node) const {
  JsonState s;
  s.mode = kValue;
  s.value_schema = schema_node;
  return s;
}

bool JsonGrammar::complete(const JsonState& s) const {
  if (s.mode == kDone) return true;
  if (s.depth != 0) return false;
  return (s.mode == kNumber && number_done(s)) || (s.mode == kEnum && enum_done(s));
}

bool JsonGrammar::in_free_string(const JsonState& s) const {
  if (s.mode != kString || s.sub != 0 || s.utf8_need != 0 || s.want_low) return false;
  if (s.is_key ? !s.key_free : !schema_.nodes[size_t(s.value_schema)].plain_string()) return false;
  return !forbid_markers_ || !marker_prefix_pending(s.tail);
}

bool JsonGrammar::forbidden_tail(uint64_t tail) const {
  for (const Marker& m : kMarkers)
    if ((tail & m.mask) == m.bytes) return true;
  return false;
}

bool JsonGrammar::fits(const JsonState& s, int32_t schema) const {
  return schema >= 0 && s.depth + schema_.nodes[size_t(schema)].need <= kMaxDepth;
}

// Declared keys that may still be written here, and whether an undeclared one may.
uint64_t JsonGrammar::key_choices(const JsonState& s, bool* free) const {
  const Node& n = schema_.nodes[size_t(s.top.schema)];
  uint64_t cand = 0;
  for (size_t i = 0; i < n.keys.size(); ++i)
    if (!((s.top.seen >> i) & 1) && fits(s, n.key_schema[i])) cand |= uint64_t(1) << i;
  *free = !n.closed && fits(s, n.extra);
  return cand;
}

void JsonGrammar::push(JsonState& s, uint8_t kind, int32_t schema) {
  arena_.push_back({s.top, s.below});
  s.below = int32_t(arena_.size() - 1);
  s.top = JsonFrame{kind, true, schema, 0, 0};
  ++s.depth;
}

void JsonGrammar::pop(JsonState& s) {
  const Below b = arena_[size_t(s.below)];
  s.top = b.frame;
  s.below = b.below;
  --s.depth;
}

void JsonGrammar::value_done(JsonState& s) {
  s.mode = s.depth == 0 ? kDone : kAfter;
  s.ws = 0;
}

bool JsonGrammar::whitespace(JsonState& s, uint8_t c) const {
  if (whitespace_ == JsonWhitespace::kCompact) {
    // Inside a container, kValue follows ':' or an array's ',' and kObjKey after the first
    // member follows ','; every other state follows '{', '[', a key or a value.
    const bool after_separator = s.depth > 0 && (s.mode == kValue || (s.mode == kObjKey && !s.top.first));
    if (c != ' ' || !after_separator || s.ws > 0) return false;
  } else if (s.ws >= kMaxWhitespace) {
    return false;
  }
  ++s.ws;
  return true;
}

bool JsonGrammar::value_start(JsonState& s, uint8_t c) {
  if (s.value_schema < 0) return false;
  // anyOf / oneOf: the first byte picks the branch.
  for (int hops = 0; !schema_.nodes[size_t(s.value_schema)].branch.empty(); ++hops) {
    const uint8_t t = first_byte_type(c);
    if (!t || hops > 64) return false;
    const int32_t b = schema_.nodes[size_t(s.value_schema)].branch[size_t(type_bit_index(t))];
    if (b < 0) return false;
    s.value_schema = b;
  }
  const Node& n = schema_.nodes[size_t(s.value_schema)];
  s.ws = 0;
  if (n.has_enum) {
    s.mode = kEnum;
    s.lit_lo = 0;
    s.lit_hi = uint32_t(n.literals.size());
    s.lit_pos = 0;
    return enum_byte(s, c);
  }
  switch (c) {
    case '{':
      if (!(n.types & Node::kObject) || s.depth + n.need_object > kMaxDepth) return false;
      push(s, 'o', s.value_schema);
      s.mode = kObjKey;
      return true;
    case '[': {
      if (!(n.types & Node::kArray) || s.depth + n.need_array > kMaxDepth) return false;
      const int32_t first = n.max_items > 0 ? n.element_schema(0) : -1;
      push(s, 'a', s.value_schema);
      s.value_schema = first;
      s.mode = kArrFirst;
      return true;
    }
    case '"':
      if (!(n.types & Node::kString)) return false;
      s.mode = kString;
      s.is_key = false;
      s.sub = 0;
      s.utf8_need = 0;
      s.want_low = false;
      s.tail = 0;
      s.str_len = 0;
      s.dfa_state = n.dfa >= 0 ? 0 : -1;
      return true;
    case 't':
    case 'f':
    case 'n':
      if (!(n.types & (c == 'n' ? Node::kNull : Node::kBool))) return false;
      s.mode = kLiteral;
      s.sub = c == 't' ? 0 : c == 'f' ? 1 : 2;
      s.pos = 1;
      return true;
    default:
      if (c != '-' && !is_digit(c)) return false;
      if (!(n.types & Node::kInteger)) return false;
      s.mode = kNumber;
      s.int_only = !(n.types & Node::kFraction);
      s.negative = c == '-';
      s.sub = c == '-' ? kNMinus : c == '0' ? kNZero : kNInt;
      s.pos = 1;
      s.int_digits = c == '-' ? 0 : 1;
      s.int_part = c == '-' ? 0 : c - '0';
      s.frac_digits = 0;
      s.frac_part = 0;
      s.seen_dot = false;
      return !n.bounded || bounded_feasible(s);
  }
}

// Whether some number that starts with the text so far lies within the node's bounds.
bool JsonGrammar::bounded_feasible(const JsonState& s) const {
  const Node& n = schema_.nodes[size_t(s.value_schema)];
  const int scale = s.int_only ? 0 : kMaxBoundedDigits;
  const int cap = s.int_only ? kMaxIntegerDigits : kMaxBoundedDigits;
  const __int128 unit = pow10(scale);
  auto hits = [&](__int128 a, __int128 b) {  // magnitudes [a, b]
    const __int128 lo = s.negative ? -b : a, hi = s.negative ? -a : b;
    return std::max(lo, n.lo) <= std::min(hi, n.hi);
  };
  if (s.int_digits == 0) return hits(0, pow10(cap) * unit - 1);
  if (s.seen_dot) {
    const __int128 step = pow10(scale - s.frac_digits);
    const __int128 base = __int128(s.int_part) * unit + __int128(s.frac_part) * step;
    return hits(base, base + step - 1);
  }
  const int max_j = s.int_part == 0 ? 0 : cap - s.int_digits;
  for (int j = 0; j <= max_j; ++j) {
    const __int128 p = pow10(j) * unit;
    if (hits(__int128(s.int_part) * p, __int128(s.int_part + 1) * p - 1)) return true;
  }
  return false;
}

bool JsonGrammar::number_done(const JsonState& s) const {
  if (!number_complete(s.sub)) return false;
  const Node& n = schema_.nodes[size_t(s.value_schema)];
  if (!n.bounded) return true;
  const int scale = s.int_only ? 0 : kMaxBoundedDigits;
  __int128 v = __int128(s.int_part) * pow10(scale) + __int128(s.frac_part) * pow10(scale - s.frac_digits);
  if (s.negative) v = -v;
  return v >= n.lo && v <= n.hi;
}

bool JsonGrammar::number_byte(JsonState& s, uint8_t c) const {
  if (s.pos >= kMaxNumberBytes) return false;
  const bool digit = is_digit(c);
  const Node& node = schema_.nodes[size_t(s.value_schema)];
  if (node.bounded) {
    // Bounded numbers: no exponent, at most 15 integer (18 for integers) and 15 fraction digits.
    JsonState t = s;
    if (digit && !t.seen_dot) {
      if (t.sub == kNZero || t.int_digits >= (t.int_only ? kMaxIntegerDigits : kMaxBoundedDigits)) return false;
      t.int_part = t.int_part * 10 + (c - '0');
      t.sub = (t.int_digits == 0 && c == '0') ? kNZero : kNInt;
      ++t.int_digits;
    } else if (digit) {
      if (t.frac_digits >= kMaxBoundedDigits) return false;
      t.frac_part = t.frac_part * 10 + (c - '0');
      ++t.frac_digits;
      t.sub = kNFrac;
    } else if (c == '.' && !t.int_only && !t.seen_dot && (t.sub == kNZero || t.sub == kNInt)) {
      t.seen_dot = true;
      t.sub = kNDot;
    } else {
      return false;
    }
    ++t.pos;
    if (!bounded_feasible(t)) return false;
    s = t;
    return true;
  }
  // A value whose schema says "integer" keeps to 18 digits: clients read it as an int64.
  if (s.int_only && digit && s.pos - (s.negative ? 1 : 0) >= kMaxIntegerDigits) return false;
  const bool dot = c == '.' && !s.int_only;
  const bool exp = (c == 'e' || c == 'E') && !s.int_only;
  uint8_t next;
  switch (s.sub) {
    case kNMinus:
      if (!digit) return false;
      next = c == '0' ? kNZero : kNInt;
      break;
    case kNZero:
    case kNInt:
      if (digit && s.sub == kNInt) next = kNInt;
      else if (dot) next = kNDot;
      else if (exp) next = kNE;
      else return false;
      break;
    case kNDot:
      if (!digit) return false;
      next = kNFrac;
      break;
    case kNFrac:
      if (digit) next = kNFrac;
      else if (exp) next = kNE;
      else return false;
      break;
    case kNE:
      if (c == '+' || c == '-') next = kNESign;
      else if (digit) next = kNExp;
      else return false;
      break;
    case kNESign:
    case kNExp:
      if (!digit) return false;
      next = s.sub == kNExp ? kNExp2 : kNExp;
      break;
    default: return false;
  }
  s.sub = next;
  ++s.pos;
  return true;
}

// enum / const: the literals in [lit_lo, lit_hi) share the lit_pos bytes read so far; they are
// sorted, so those that go on with byte c are a sub-range.
bool JsonGrammar::enum_byte(JsonState& s, uint8_t c) {
  const std::vector<std::string>& L = schema_.nodes[size_t(s.value_schema)].literals;
  const size_t pos = s.lit_pos;
  auto key = [&](uint32_t i) { return L[i].size() > pos ? int(uint8_t(L[i][pos])) : -1; };
  uint32_t a = s.lit_lo, b = s.lit_hi;
  while (a < b) {  // first with key >= c
    const uint32_t m = (a + b) / 2;
    if (key(m) < int(c)) a = m + 1;
    else b = m;
  }
  uint32_t e = a, f = s.lit_hi;
  while (e < f) {  // first with key > c
    const uint32_t m = (e + f) / 2;
    if (key(m) <= int(c)) e = m + 1;
    else f = m;
  }
  if (a == e) return false;
  s.lit_lo = a;
  s.lit_hi = e;
  ++s.lit_pos;
  if (e - a == 1 && L[a].size() == s.lit_pos) value_done(s);
  return true;
}

bool JsonGrammar::enum_done(const JsonState& s) const {
  const std::vector<std::string>& L = schema_.nodes[size_t(s.value_schema)].literals;
  return s.lit_lo < s.lit_hi && L[s.lit_lo].size() == s.lit_pos;
}

// One byte of a key's text (not of an escape) narrows the declared keys it may be.
bool JsonGrammar::key_byte(JsonState& s, uint8_t c) {
  const Node& n = schema_.nodes[size_t(s.top.schema)];
  uint64_t cand = s.key_cand;
  for (uint64_t bits = cand; bits; bits &= bits - 1) {
    const int p = __builtin_ctzll(bits);
    const std::string& k = n.keys[size_t(p)];
    if (k.size() <= s.key_len || uint8_t(k[s.key_len]) != c) cand &= ~(uint64_t(1) << p);
  }
  if (!s.key_free && cand == 0) return false;
  s.key_cand = cand;
  for (uint64_t bits = s.key_any; bits; bits &= bits - 1) {
    const int p = __builtin_ctzll(bits);
    const std::string& k = n.keys[size_t(p)];
    if (k.size() <= s.key_len || uint8_t(k[s.key_len]) != c) s.key_any &= ~(uint64_t(1) << p);
  }
  if (s.key_len < UINT16_MAX) ++s.key_len;
  return true;
}

bool JsonGrammar::close_string(JsonState& s) {
  if (!s.is_key) {
    const Node& n = schema_.nodes[size_t(s.value_schema)];
    if (s.dfa_state >= 0 ? !schema_.dfas[size_t(n.dfa)].accept[size_t(s.dfa_state)] : s.str_len < n.min_length)
      return false;
    value_done(s);
    return true;
  }
  const Node& n = schema_.nodes[size_t(s.top.schema)];
  int match = -1;
  if (s.key_plain)
    for (uint64_t bits = s.key_cand; bits; bits &= bits - 1) {
      const int p = __builtin_ctzll(bits);
      if (n.keys[size_t(p)].size() == s.key_len) match = p;
    }
  if (match >= 0) {
    s.top.seen |= uint64_t(1) << match;
    s.value_schema = n.key_schema[size_t(match)];
  } else {
    if (!s.key_free) return false;
    // A declared key (already written, or too deep here) is never written as an undeclared one.
    if (s.key_plain)
      for (uint64_t bits = s.key_any; bits; bits &= bits - 1)
        if (n.keys[size_t(__builtin_ctzll(bits))].size() == s.key_len) return false;
    s.value_schema = n.extra;
  }
  s.mode = kColon;
  s.ws = 0;
  return true;
}

// One decoded character byte of a value string: the pattern and the length bounds.
bool JsonGrammar::string_char(JsonState& s, uint8_t c, bool lead) {
  if (s.is_key) return true;
  const Node& n = schema_.nodes[size_t(s.value_schema)];
  if (s.dfa_state >= 0) {
    const int32_t t = schema_.dfas[size_t(n.dfa)].next(s.dfa_state, c);
    if (t < 0) return false;
    s.dfa_state = t;
  }
  if (lead) {
    if (s.str_len >= n.max_length) return false;
    ++s.str_len;
  }
  return true;
}

bool JsonGrammar::string_byte(JsonState& s, uint8_t c) {
  if (s.sub == 1) {  // after a backslash
    if (s.want_low && c != 'u') return false;
    if (c == 'u') {
      if (s.dfa_state >= 0) return false;  // (patterned strings: no \u escapes)
      s.sub = 2;
      s.pos = 0;
      s.uval = 0;
      return true;
    }
    static const char kEsc[] = "\"\\/bfnrt";
    static const char kDecoded[] = "\"\\/\b\f\n\r\t";
    const char* e = std::strchr(kEsc, c);
    if (!e || c == 0) return false;
    if (s.dfa_state >= 0 && !string_char(s, uint8_t(kDecoded[e - kEsc]), true)) return false;
    s.sub = 0;
    return true;
  }
  if (s.sub == 2) {  // \uXXXX; surrogates must pair
    const int h = hex_value(c);
    if (h < 0) return false;
    s.uval = uint16_t(s.uval * 16 + h);
    ++s.pos;
    if (s.pos == 2) {
      const bool low = s.uval >= 0xDC && s.uval <= 0xDF;
      if (s.want_low != low) return false;
    }
    if (s.pos == 4) {
      const unsigned hb = s.uval >> 8;
      s.want_low = !s.want_low && hb >= 0xD8 && hb <= 0xDB;
      s.sub = 0;
    }
    return true;
  }
  if (s.utf8_need == 0) {
    if (s.want_low && c != '\\') return false;
    if (c == '"') return close_string(s);
    if (c == '\\') {
      if (s.is_key) {
        if (!s.key_free || !schema_.nodes[size_t(s.top.schema)].keys.empty()) return false;
        s.key_plain = false;
        s.key_cand = 0;
      } else if (s.dfa_state >= 0) {
        // Some escaped character must fit the pattern.
        const ByteDfa& d = schema_.dfas[size_t(schema_.nodes[size_t(s.value_schema)].dfa)];
        bool any = false;
        for (uint8_t x : {'"', '\\', '/', '\b', '\f', '\n', '\r', '\t'}) any = any || d.next(s.dfa_state, x) >= 0;
        if (!any || s.str_len >= schema_.nodes[size_t(s.value_schema)].max_length) return false;
      } else if (!s.want_low) {
        // An escape is one character (the low half of a surrogate pair is not another).
        if (!string_char(s, '\\', true)) return false;
      }
      s.sub = 1;
      return true;
    }
    if (c < 0x20) return false;
  }
  const bool lead = s.utf8_need == 0;
  if (!utf8_step(c, s.utf8_need, s.utf8_lo, s.utf8_hi)) return false;
  if (!string_char(s, c, lead)) return false;
  if (forbid_markers_) {
    s.tail = (s.tail << 8) | c;
    if (forbidden_tail(s.tail)) return false;
  }
  if (s.is_key && s.key_plain) return key_byte(s, c);
  return true;
}

bool JsonGrammar::after_byte(JsonState& s, uint8_t c) {
  if (is_ws(c)) return whitespace(s, c);
  s.ws = 0;
  const Node& n = schema_.nodes[size_t(s.top.schema)];
  if (c == ',') {
    if (s.top.kind == 'o') {
      // No comma when no key could follow it.
      bool free = false;
      if (key_choices(s, &free) == 0 && !free) return false;
      s.top.first = false;
      s.mode = kObjKey;
    } else {
      const uint32_t next = s.top.count + 1;
      if (next >= n.max_items) return false;
      const int32_t es = n.element_schema(next);
      if (!fits(s, es)) return false;
      s.top.count = next;
      s.value_schema = es;
      s.mode = kValue;
    }
    return true;
  }
  if (c == '}' && s.top.kind == 'o') {
    if (n.required & ~s.top.seen) return false;
    pop(s);
    value_done(s);
    return true;
  }
  if (c == ']' && s.top.kind == 'a') {
    if (s.top.count + 1 < n.min_items) return false;
    pop(s);
    value_done(s);
    return true;
  }
  return false;
}

bool JsonGrammar::feed(JsonState& s, uint8_t c) {
  switch (s.mode) {
    case kString: return string_byte(s, c);
    case kNumber:
      if (number_byte(s, c)) return true;
      if (!number_done(s)) return false;
      value_done(s);
      return feed(s, c);
    case kEnum:
      if (enum_byte(s, c)) return true;
      if (!enum_done(s)) return false;
      value_done(s);
      return feed(s, c);
    case kLiteral:
      if (c != uint8_t(kLiterals[s.sub][s.pos])) return false;
      if (++s.pos == kLiteralLen[s.sub]) value_done(s);
      return true;
    case kValue:
      if (is_ws(c)) return whitespace(s, c);
      return value_start(s, c);
    case kArrFirst:
      if (is_ws(c)) return whitespace(s, c);
      if (c == ']') {
        if (schema_.nodes[size_t(s.top.schema)].min_items > 0) return false;
        pop(s);
        value_done(s);
        return true;
      }
      return value_start(s, c);
    case kObjKey: {
      if (is_ws(c)) return whitespace(s, c);
      s.ws = 0;
      const Node& n = schema_.nodes[size_t(s.top.schema)];
      if (c == '}') {
        if (!s.top.first || (n.required & ~s.top.seen)) return false;
        pop(s);
        value_done(s);
        return true;
      }
      if (c != '"') return false;
      bool free = false;
      s.key_cand = key_choices(s, &free);
      if (s.key_cand == 0 && !free) return false;
      s.key_any = n.keys.size() >= 64 ? ~uint64_t(0) : (uint64_t(1) << n.keys.size()) - 1;
      s.key_free = free;
      s.mode = kString;
      s.is_key = true;
      s.key_plain = true;
      s.key_len = 0;
      s.sub = 0;
      s.utf8_need = 0;
      s.want_low = false;
      s.tail = 0;
      s.dfa_state = -1;
      return true;
    }
    case kColon:
      if (is_ws(c)) return whitespace(s, c);
      if (c != ':') return false;
      s.mode = kValue;
      s.ws = 0;
      return true;
    case kAfter: return after_byte(s, c);
    case kDone: return false;
  }
  return false;
}

namespace {
// -1: a byte was refused; 0: a valid prefix; 1: a whole document.
int check_document(std::string_view text) {
  JsonGrammar g(JsonSchema{}, false, JsonWhitespace::kLoose);
  JsonState s = g.start(0);
  for (char c : text)
    if (!g.feed(s, uint8_t(c))) return -1;
  return g.complete(s) ? 1 : 0;
}
}  // namespace

bool json_valid_prefix(std::string_view text) { return check_document(text) >= 0; }
bool json_valid(std::string_view text) { return check_document(text) == 1; }

}  // namespace deepinfer::server
