#include "server/json_grammar.h"

namespace deepinfer::server {

namespace {

using Node = JsonSchemaNode;

// kNExp2: two exponent digits, the most allowed (so that every number is finite as a double).
enum NumberState : uint8_t { kNMinus, kNZero, kNInt, kNDot, kNFrac, kNE, kNESign, kNExp, kNExp2 };
bool number_complete(uint8_t sub) {
  return sub == kNZero || sub == kNInt || sub == kNFrac || sub == kNExp || sub == kNExp2;
}

constexpr const char* kLiterals[] = {"true", "false", "null"};
constexpr uint8_t kLiteralLen[] = {4, 5, 4};

bool is_ws(uint8_t c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }
bool is_digit(uint8_t c) { return c >= '0' && c <= '9'; }
int hex_value(uint8_t c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

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
constexpr Marker kMarkers[] = {pack("<｜"), pack("｜DSML"), pack("<think>"), pack("</think>")};

uint8_t value_types(const chat::Json& v) {
  if (v.is_object()) return Node::kObject;
  if (v.is_array()) return Node::kArray;
  if (v.is_string()) return Node::kString;
  if (v.is_boolean()) return Node::kBool;
  if (v.is_null()) return Node::kNull;
  if (v.is_number_integer() || v.is_number_unsigned()) return Node::kInteger;
  return Node::kInteger | Node::kFraction;
}

uint8_t type_name_bits(const chat::Json& t) {
  if (!t.is_string()) return Node::kAnyType;
  const std::string& s = t.get_ref<const std::string&>();
  if (s == "object") return Node::kObject;
  if (s == "array") return Node::kArray;
  if (s == "string") return Node::kString;
  if (s == "integer") return Node::kInteger;
  if (s == "number") return Node::kInteger | Node::kFraction;
  if (s == "boolean") return Node::kBool;
  if (s == "null") return Node::kNull;
  return Node::kAnyType;
}

}  // namespace

// ------------------------------------------------------------------ schema

int32_t JsonSchema::add(const chat::Json& schema) { return compile(schema, 0); }

int32_t JsonSchema::add_types(uint8_t types) {
  JsonSchemaNode n;
  n.types = types;
  nodes.push_back(n);
  return int32_t(nodes.size() - 1);
}

int32_t JsonSchema::compile(const chat::Json& s, int depth) {
  if (!s.is_object() || depth > JsonGrammar::kMaxDepth) return 0;
  JsonSchemaNode n;
  auto field = [&](const char* k) -> const chat::Json* {
    auto it = s.find(k);
    return it == s.end() ? nullptr : &*it;
  };
  if (const chat::Json* t = field("type")) {
    if (t->is_array()) {
      uint8_t bits = 0;
      for (const auto& x : *t) bits |= type_name_bits(x);
      n.types = bits ? bits : Node::kAnyType;
    } else {
      n.types = type_name_bits(*t);
    }
  }
  uint8_t allowed = Node::kAnyType;
  if (const chat::Json* e = field("enum"); e && e->is_array() && !e->empty()) {
    allowed = 0;
    for (const auto& v : *e) allowed |= value_types(v);
  }
  if (const chat::Json* c = field("const")) allowed &= value_types(*c);
  for (const char* k : {"anyOf", "oneOf"})
    if (const chat::Json* a = field(k); a && a->is_array() && !a->empty()) {
      uint8_t u = 0;
      for (const auto& b : *a) u |= nodes[size_t(compile(b, depth + 1))].types;
      allowed &= u;
    }
  if (uint8_t t = n.types & allowed) n.types = t;  // a contradiction keeps the declared type
  bool keys_known = true;  // more than 64 properties: keys are not checked at all
  if (const chat::Json* p = field("properties"); p && p->is_object() && p->size() > 64) keys_known = false;
  if (const chat::Json* p = field("properties"); p && p->is_object() && p->size() <= 64) {
    for (auto it = p->begin(); it != p->end(); ++it) {
      n.keys.push_back(it.key());
      n.key_schema.push_back(compile(it.value(), depth + 1));
    }
    if (const chat::Json* r = field("required"); r && r->is_array())
      for (const auto& k : *r)
        for (size_t i = 0; i < n.keys.size(); ++i)
          if (k.is_string() && k.get_ref<const std::string&>() == n.keys[i]) n.required |= uint64_t(1) << i;
  }
  if (const chat::Json* a = field("additionalProperties")) {
    if (a->is_boolean() && !a->get<bool>() && keys_known)
      n.closed = true;
    else if (a->is_object())
      n.extra = compile(*a, depth + 1);
  }
  if (const chat::Json* i = field("items"); i && i->is_object()) n.items = compile(*i, depth + 1);
  nodes.push_back(std::move(n));
  return int32_t(nodes.size() - 1);
}

// ------------------------------------------------------------------ grammar

JsonGrammar::JsonGrammar(JsonSchema schema, bool forbid_markers)
    : schema_(std::move(schema)), forbid_markers_(forbid_markers) {}

JsonState JsonGrammar::start(int32_t schema_node) const {
  JsonState s;
  s.mode = kValue;
  s.value_schema = schema_node;
  return s;
}

bool JsonGrammar::complete(const JsonState& s) const {
  return s.mode == kDone || (s.mode == kNumber && s.depth == 0 && number_complete(s.sub));
}

bool JsonGrammar::forbidden_tail(uint64_t tail) const {
  for (const Marker& m : kMarkers)
    if ((tail & m.mask) == m.bytes) return true;
  return false;
}

void JsonGrammar::push(JsonState& s, uint8_t kind, int32_t schema) {
  arena_.push_back({s.top, s.below});
  s.below = int32_t(arena_.size() - 1);
  s.top = JsonFrame{kind, true, schema, 0};
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

bool JsonGrammar::whitespace(JsonState& s, uint8_t) const {
  if (s.ws >= kMaxWhitespace) return false;
  ++s.ws;
  return true;
}

bool JsonGrammar::value_start(JsonState& s, uint8_t c) {
  const Node& n = schema_.nodes[size_t(s.value_schema)];
  s.ws = 0;
  switch (c) {
    case '{':
      if (!(n.types & Node::kObject) || s.depth >= kMaxDepth) return false;
      push(s, 'o', s.value_schema);
      s.mode = kObjKey;
      return true;
    case '[':
      if (!(n.types & Node::kArray) || s.depth >= kMaxDepth) return false;
      push(s, 'a', s.value_schema);
      s.value_schema = n.items;
      s.mode = kArrFirst;
      return true;
    case '"':
      if (!(n.types & Node::kString)) return false;
      s.mode = kString;
      s.is_key = false;
      s.sub = 0;
      s.utf8_need = 0;
      s.want_low = false;
      s.tail = 0;
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
      return true;
  }
}

bool JsonGrammar::number_byte(JsonState& s, uint8_t c) const {
  if (s.pos >= kMaxNumberBytes) return false;
  const bool digit = is_digit(c);
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

// One byte of a key's text (not of an escape) narrows the declared keys it may be.
bool JsonGrammar::key_byte(JsonState& s, uint8_t c) {
  const Node& n = schema_.nodes[size_t(s.top.schema)];
  uint64_t cand = s.key_cand;
  for (uint64_t bits = cand; bits; bits &= bits - 1) {
    const int p = __builtin_ctzll(bits);
    const std::string& k = n.keys[size_t(p)];
    if (k.size() <= s.key_len || uint8_t(k[s.key_len]) != c) cand &= ~(uint64_t(1) << p);
  }
  if (n.closed && cand == 0) return false;
  s.key_cand = cand;
  if (s.key_len < UINT16_MAX) ++s.key_len;
  return true;
}

bool JsonGrammar::close_string(JsonState& s) {
  if (!s.is_key) {
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
    if (n.closed) return false;
    s.value_schema = n.extra;
  }
  s.mode = kColon;
  s.ws = 0;
  return true;
}

bool JsonGrammar::string_byte(JsonState& s, uint8_t c) {
  if (s.sub == 1) {  // after a backslash
    if (s.want_low && c != 'u') return false;
    if (c == 'u') {
      s.sub = 2;
      s.pos = 0;
      s.uval = 0;
      return true;
    }
    if (c != '"' && c != '\\' && c != '/' && c != 'b' && c != 'f' && c != 'n' && c != 'r' && c != 't') return false;
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
        if (schema_.nodes[size_t(s.top.schema)].closed) return false;
        s.key_plain = false;
        s.key_cand = 0;
      }
      s.sub = 1;
      return true;
    }
    if (c < 0x20) return false;
  }
  if (!utf8_step(c, s.utf8_need, s.utf8_lo, s.utf8_hi)) return false;
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
      // No comma when no key could follow it (a closed object with every key present).
      if (n.closed && (n.keys.size() >= 64 ? ~uint64_t(0) : (uint64_t(1) << n.keys.size()) - 1) == s.top.seen)
        return false;
      s.top.first = false;
      s.mode = kObjKey;
    } else {
      s.value_schema = n.items;
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
      if (!number_complete(s.sub)) return false;
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
      s.key_cand = n.keys.size() >= 64 ? ~uint64_t(0) : (uint64_t(1) << n.keys.size()) - 1;
      s.key_cand &= ~s.top.seen;
      if (n.closed && s.key_cand == 0) return false;
      s.mode = kString;
      s.is_key = true;
      s.key_plain = true;
      s.key_len = 0;
      s.sub = 0;
      s.utf8_need = 0;
      s.want_low = false;
      s.tail = 0;
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
  JsonGrammar g(JsonSchema{}, false);
  JsonState s = g.start(0);
  for (char c : text)
    if (!g.feed(s, uint8_t(c))) return -1;
  return g.complete(s) ? 1 : 0;
}
}  // namespace

bool json_valid_prefix(std::string_view text) { return check_document(text) >= 0; }
bool json_valid(std::string_view text) { return check_document(text) == 1; }

}  // namespace deepinfer::server
