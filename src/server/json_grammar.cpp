#include "server/json_grammar.h"

#include "server/json_regex.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <set>
#include <unordered_map>

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
constexpr int kMaxSchemaDepth = 64;  // nesting of the schema document itself
constexpr int kNeedImpossible = JsonGrammar::kMaxDepth + 1;

bool is_ws(uint8_t c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }
using json_regex::hex_value;
using json_regex::is_digit;

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

__int128 pow10(int n) {
  __int128 v = 1;
  while (n-- > 0) v *= 10;
  return v;
}
const __int128 kHuge = pow10(36);  // beyond every number the grammar writes

// Type bits of a value; a float with an integral value is also an integer (JSON Schema).
uint8_t value_types(const Json& v) {
  if (v.is_object()) return Node::kObject;
  if (v.is_array()) return Node::kArray;
  if (v.is_string()) return Node::kString;
  if (v.is_boolean()) return Node::kBool;
  if (v.is_null()) return Node::kNull;
  if (v.is_number_integer() || v.is_number_unsigned()) return Node::kInteger;
  const double d = v.get<double>();
  return std::isfinite(d) && std::floor(d) == d ? (Node::kInteger | Node::kFraction) : Node::kFraction;
}

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

// A JSON number's text as an integer in units of 10^-scale: *q is |value| truncated, the
// flags say whether digits were dropped and whether it is beyond kHuge.
struct Scaled {
  bool negative = false, inexact = false, huge = false;
  __int128 q = 0;
};
Scaled to_scaled(std::string_view t, int scale) {
  Scaled r;
  size_t i = 0;
  if (i < t.size() && t[i] == '-') r.negative = true, ++i;
  std::string digits;
  int exp = 0;
  bool dot = false;
  for (; i < t.size() && (is_digit(uint8_t(t[i])) || t[i] == '.'); ++i) {
    if (t[i] == '.') dot = true;
    else {
      digits += t[i];
      if (dot) --exp;
    }
  }
  if (i < t.size() && (t[i] == 'e' || t[i] == 'E')) exp += std::atoi(std::string(t.substr(i + 1)).c_str());
  while (digits.size() > 1 && digits[0] == '0') digits.erase(0, 1);
  exp += scale;
  if (digits == "0") return r;
  if (exp >= 0) {
    if (int(digits.size()) + exp > 36) {
      r.huge = true;
      r.q = kHuge;
      return r;
    }
    for (char c : digits) r.q = r.q * 10 + (c - '0');
    r.q *= pow10(exp);
    return r;
  }
  const int drop = -exp;
  if (drop >= int(digits.size())) {
    r.inexact = true;
    return r;
  }
  const std::string keep = digits.substr(0, digits.size() - size_t(drop));
  if (keep.size() > 36) {
    r.huge = true;
    r.q = kHuge;
    return r;
  }
  for (char c : keep) r.q = r.q * 10 + (c - '0');
  r.inexact = digits.find_first_not_of('0', keep.size()) != std::string::npos;
  return r;
}
__int128 ceil_of(const Scaled& s) { return s.negative ? -s.q : s.q + (s.inexact ? 1 : 0); }
__int128 floor_of(const Scaled& s) { return s.negative ? -s.q - (s.inexact ? 1 : 0) : s.q; }

size_t code_points(std::string_view s) {
  size_t n = 0;
  for (char c : s) n += (uint8_t(c) & 0xC0) != 0x80;
  return n;
}

}  // namespace

ByteDfa compile_pattern(std::string_view pattern) { return json_regex::pruned(json_regex::pattern_dfa(pattern)); }

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

// ------------------------------------------------------------------ schema

struct JsonSchema::Ctx {
  const Json* root;
  std::map<std::string, int32_t> refs;  // resolved "$ref" -> node
  std::set<int32_t> in_progress;        // ref nodes being compiled
};

namespace {

const std::set<std::string> kAnnotations = {"title",   "description", "examples", "default",   "$schema",
                                            "$id",     "$comment",    "$anchor",  "deprecated", "readOnly",
                                            "writeOnly", "$defs",     "definitions"};
const std::set<std::string> kKeywords = {
    "type",     "enum",      "const",     "properties", "required",  "additionalProperties", "items",
    "prefixItems", "additionalItems", "minItems", "maxItems", "minLength", "maxLength", "pattern", "format",
    "minimum",  "maximum",   "exclusiveMinimum", "exclusiveMaximum", "anyOf", "oneOf", "allOf", "$ref",
    "uniqueItems"};

[[noreturn]] void schema_error(const std::string& where, const std::string& what) {
  throw SchemaError(what + " (at " + (where.empty() ? "/" : where) + ")");
}

uint32_t count_of(const Json& v, const std::string& where, const char* key) {
  if (!(v.is_number_integer() || v.is_number_unsigned()) || v.get<int64_t>() < 0)
    schema_error(where, std::string("'") + key + "' must be a non-negative integer");
  const int64_t n = v.get<int64_t>();
  return n >= int64_t(UINT32_MAX) ? UINT32_MAX - 1 : uint32_t(n);
}

std::string pointer_token(std::string t) {
  std::string out;
  for (size_t i = 0; i < t.size(); ++i) {
    if (t[i] == '~' && i + 1 < t.size() && (t[i + 1] == '0' || t[i + 1] == '1')) {
      out += t[i + 1] == '0' ? '~' : '/';
      ++i;
    } else {
      out += t[i];
    }
  }
  return out;
}

const Json* resolve(const Json& root, const std::string& ref) {
  if (ref.empty() || ref[0] != '#') return nullptr;
  const Json* cur = &root;
  size_t i = 1;
  while (i < ref.size()) {
    if (ref[i] != '/') return nullptr;
    const size_t j = ref.find('/', i + 1);
    const std::string tok = pointer_token(ref.substr(i + 1, j == std::string::npos ? std::string::npos : j - i - 1));
    if (cur->is_object()) {
      auto it = cur->find(tok);
      if (it == cur->end()) return nullptr;
      cur = &*it;
    } else if (cur->is_array()) {
      if (tok.empty() || tok.find_first_not_of("0123456789") != std::string::npos || tok.size() > 9) return nullptr;
      const size_t k = size_t(std::stoul(tok));
      if (k >= cur->size()) return nullptr;
      cur = &(*cur)[k];
    } else {
      return nullptr;
    }
    i = j == std::string::npos ? ref.size() : j;
  }
  return cur;
}

int literal_depth(const Json& v, int depth) {
  if (depth > kMaxSchemaDepth) return depth;
  int d = depth;
  if (v.is_object() || v.is_array())
    for (const auto& x : v) d = std::max(d, literal_depth(x, depth + 1));
  return d;
}

}  // namespace

int32_t JsonSchema::add(const Json& schema) {
  if (schema.is_null()) return 0;
  Ctx cx{&schema, {}, {}};
  const int32_t root = compile(schema, cx, "", 0);
  compute_need();
  if (nodes[size_t(root)].need > JsonGrammar::kMaxDepth)
    throw SchemaError("the schema has no value that fits in " + std::to_string(JsonGrammar::kMaxDepth) +
                        " levels of nesting");
  return root;
}

int32_t JsonSchema::add_types(uint8_t types) {
  JsonSchemaNode n;
  n.types = types;
  nodes.push_back(n);
  compute_need();
  return int32_t(nodes.size() - 1);
}

int32_t JsonSchema::compile(const Json& s, Ctx& cx, const std::string& where, int depth) {
  if (depth > kMaxSchemaDepth) schema_error(where, "the schema is nested too deeply");
  if (s.is_boolean()) {
    if (s.get<bool>()) return 0;
    schema_error(where, "the schema false matches nothing");
  }
  if (!s.is_object()) schema_error(where, "a schema must be an object or a boolean");
  for (auto it = s.begin(); it != s.end(); ++it) {
    const std::string& k = it.key();
    if (kAnnotations.count(k)) continue;
    if (!kKeywords.count(k)) schema_error(where, "the schema keyword '" + k + "' is not supported");
    if (k == "uniqueItems" && !(it->is_boolean() && !it->get<bool>()))
      schema_error(where, "the schema keyword 'uniqueItems' is not supported");
  }
  auto field = [&](const char* k) -> const Json* {
    auto it = s.find(k);
    return it == s.end() ? nullptr : &*it;
  };
  // Keywords besides `self` (and annotations / allowed) make the combination unsupported.
  auto alone = [&](const char* self, std::initializer_list<const char*> allowed) {
    for (auto it = s.begin(); it != s.end(); ++it) {
      const std::string& k = it.key();
      if (k == self || kAnnotations.count(k)) continue;
      if (std::find_if(allowed.begin(), allowed.end(), [&](const char* a) { return k == a; }) != allowed.end()) continue;
      schema_error(where, std::string("'") + self + "' together with '" + k + "' is not supported");
    }
  };

  if (const Json* ref = field("$ref")) {
    alone("$ref", {});
    if (!ref->is_string()) schema_error(where, "'$ref' must be a string");
    const std::string r = ref->get<std::string>();
    if (auto it = cx.refs.find(r); it != cx.refs.end()) return it->second;
    const Json* target = resolve(*cx.root, r);
    if (!target) schema_error(where, "'$ref' " + r + " does not resolve within the schema (only local refs are supported)");
    const int32_t id = int32_t(nodes.size());
    nodes.emplace_back();
    cx.refs[r] = id;
    cx.in_progress.insert(id);
    const int32_t body = compile(*target, cx, r.substr(1), depth + 1);
    cx.in_progress.erase(id);
    JsonSchemaNode copy = nodes[size_t(body)];
    nodes[size_t(id)] = std::move(copy);
    return id;
  }
  if (const Json* all = field("allOf")) {
    alone("allOf", {});
    if (!all->is_array() || all->size() != 1) schema_error(where, "'allOf' is only supported with one schema");
    return compile((*all)[0], cx, where + "/allOf/0", depth + 1);
  }
  for (const char* comb : {"anyOf", "oneOf"}) {
    const Json* a = field(comb);
    if (!a) continue;
    alone(comb, {"type"});
    if (!a->is_array() || a->empty()) schema_error(where, std::string("'") + comb + "' must be a non-empty array");
    uint8_t allowed = Node::kAnyType;
    if (const Json* t = field("type")) {
      const Json only = Json{{"type", *t}};
      allowed = nodes[size_t(compile(only, cx, where, depth + 1))].types;
    }
    std::vector<int32_t> branches;
    for (size_t i = 0; i < a->size(); ++i) {
      const int32_t b = compile((*a)[i], cx, where + "/" + comb + "/" + std::to_string(i), depth + 1);
      if (cx.in_progress.count(b)) schema_error(where, std::string("a recursive '$ref' directly in '") + comb + "' is not supported");
      branches.push_back(b);
    }
    if (branches.size() == 1 && allowed == Node::kAnyType) return branches[0];
    JsonSchemaNode n;
    n.branch.assign(7, -1);
    n.types = 0;
    for (int32_t b : branches) {
      const uint8_t t = nodes[size_t(b)].types & allowed;
      // Numbers are one class by their first byte: integer and number branches overlap.
      const uint8_t cls = (t & (Node::kInteger | Node::kFraction)) ? uint8_t(t | Node::kInteger | Node::kFraction) : t;
      for (int bit = 0; bit < 7; ++bit) {
        if (!((cls >> bit) & 1)) continue;
        if (n.branch[size_t(bit)] >= 0)
          schema_error(where, std::string("'") + comb + "' branches that take the same JSON type are not supported");
      }
      for (int bit = 0; bit < 7; ++bit)
        if ((cls >> bit) & 1) n.branch[size_t(bit)] = b;
      n.types |= t;
    }
    if (!n.types) schema_error(where, std::string("no branch of '") + comb + "' allows the schema's type");
    nodes.push_back(std::move(n));
    return int32_t(nodes.size() - 1);
  }

  JsonSchemaNode n;
  if (const Json* t = field("type")) {
    auto bits = [&](const Json& x) -> uint8_t {
      const std::string v = x.is_string() ? x.get<std::string>() : "";
      if (v == "object") return Node::kObject;
      if (v == "array") return Node::kArray;
      if (v == "string") return Node::kString;
      if (v == "integer") return Node::kInteger;
      if (v == "number") return Node::kInteger | Node::kFraction;
      if (v == "boolean") return Node::kBool;
      if (v == "null") return Node::kNull;
      schema_error(where, "unknown type " + x.dump());
    };
    if (t->is_array()) {
      n.types = 0;
      for (const auto& x : *t) n.types |= bits(x);
      if (!n.types) schema_error(where, "'type' is an empty list");
    } else {
      n.types = bits(*t);
    }
  }
  // objects
  if (const Json* p = field("properties")) {
    if (!p->is_object()) schema_error(where, "'properties' must be an object");
    if (p->size() > 64) schema_error(where, "more than 64 properties are not supported");
    n.has_properties = true;
    for (auto it = p->begin(); it != p->end(); ++it) {
      n.keys.push_back(it.key());
      n.key_schema.push_back(compile(it.value(), cx, where + "/properties/" + it.key(), depth + 1));
    }
  }
  bool extra_none = false;
  if (const Json* a = field("additionalProperties")) {
    if (a->is_boolean()) extra_none = !a->get<bool>();
    else n.extra = compile(*a, cx, where + "/additionalProperties", depth + 1);
  }
  n.closed = extra_none;
  if (const Json* r = field("required")) {
    if (!r->is_array()) schema_error(where, "'required' must be an array");
    for (const auto& k : *r) {
      if (!k.is_string()) schema_error(where, "'required' must hold strings");
      const std::string& key = k.get_ref<const std::string&>();
      size_t i = std::find(n.keys.begin(), n.keys.end(), key) - n.keys.begin();
      if (i == n.keys.size()) {
        if (extra_none) schema_error(where, "required property '" + key + "' is not allowed by additionalProperties false");
        if (n.keys.size() >= 64) schema_error(where, "more than 64 properties are not supported");
        n.keys.push_back(key);
        n.key_schema.push_back(n.extra);
      }
      n.required |= uint64_t(1) << i;
    }
  }
  // arrays
  auto item_schema = [&](const Json& v, const std::string& w) -> int32_t {
    if (v.is_boolean() && !v.get<bool>()) return -1;
    return compile(v, cx, w, depth + 1);
  };
  const Json* items = field("items");
  if (const Json* p = field("prefixItems")) {
    if (!p->is_array()) schema_error(where, "'prefixItems' must be an array");
    for (size_t i = 0; i < p->size(); ++i) n.prefix_items.push_back(item_schema((*p)[i], where + "/prefixItems/" + std::to_string(i)));
  }
  if (items && items->is_array()) {  // draft 7 tuples
    if (field("prefixItems")) schema_error(where, "'items' as an array together with 'prefixItems'");
    for (size_t i = 0; i < items->size(); ++i) n.prefix_items.push_back(item_schema((*items)[i], where + "/items/" + std::to_string(i)));
    if (const Json* ai = field("additionalItems")) n.items = item_schema(*ai, where + "/additionalItems");
  } else {
    if (field("additionalItems")) schema_error(where, "'additionalItems' is only supported with an 'items' array");
    if (items) n.items = item_schema(*items, where + "/items");
  }
  if (const Json* v = field("minItems")) n.min_items = count_of(*v, where, "minItems");
  if (const Json* v = field("maxItems")) n.max_items = count_of(*v, where, "maxItems");
  if (n.items < 0) n.max_items = std::min<uint32_t>(n.max_items, uint32_t(n.prefix_items.size()));
  for (size_t i = 0; i < n.prefix_items.size(); ++i)
    if (n.prefix_items[i] < 0) n.max_items = std::min<uint32_t>(n.max_items, uint32_t(i));
  if (n.min_items > n.max_items) {
    if (n.types & Node::kArray) n.types &= uint8_t(~Node::kArray);
  }
  // strings
  if (const Json* v = field("minLength")) n.min_length = count_of(*v, where, "minLength");
  if (const Json* v = field("maxLength")) n.max_length = count_of(*v, where, "maxLength");
  if (n.min_length > n.max_length) n.types &= uint8_t(~Node::kString);
  const Json* pattern = field("pattern");
  const char* fmt = nullptr;
  if (const Json* f = field("format")) {
    if (!f->is_string()) schema_error(where, "'format' must be a string");
    fmt = json_regex::format_pattern(f->get<std::string>());
  }
  if (pattern && !pattern->is_string()) schema_error(where, "'pattern' must be a string");
  if ((pattern || fmt) && (n.types & Node::kString)) {
    try {
      std::vector<ByteDfa> parts;
      if (pattern) {
        parts.push_back(json_regex::pattern_dfa(pattern->get<std::string>()));
      }
      if (fmt) parts.push_back(json_regex::pattern_dfa(fmt));
      if (n.min_length > 0 || n.max_length != UINT32_MAX) parts.push_back(json_regex::length_dfa(n.min_length, n.max_length));
      ByteDfa d = std::move(parts[0]);
      for (size_t i = 1; i < parts.size(); ++i) d = json_regex::intersect(d, parts[i]);
      dfas.push_back(json_regex::pruned(std::move(d)));
      n.dfa = int32_t(dfas.size() - 1);
    } catch (const SchemaError& e) {
      schema_error(where, e.what());
    }
  }
  // numbers
  {
    const bool int_only = !(n.types & Node::kFraction);
    const int scale = int_only ? 0 : 15;
    __int128 lo = -kHuge, hi = kHuge;
    bool any = false;
    bool excl_min_flag = false, excl_max_flag = false;  // draft 4 boolean forms
    for (const char* k : {"exclusiveMinimum", "exclusiveMaximum"})
      if (const Json* v = field(k); v && v->is_boolean()) (k[9] == 'i' ? excl_min_flag : excl_max_flag) = v->get<bool>();
    for (const char* k : {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}) {
      const Json* v = field(k);
      if (!v || v->is_boolean()) continue;
      if (!v->is_number()) schema_error(where, std::string("'") + k + "' must be a number");
      const Scaled x = to_scaled(v->dump(), scale);
      const bool is_min = std::string_view(k).find("inimum") != std::string_view::npos;
      const bool excl = k[0] == 'e' || (is_min ? excl_min_flag : excl_max_flag);
      any = true;
      if (x.huge) {
        if (x.negative != is_min) schema_error(where, std::string("no number satisfies '") + k + "'");
        continue;
      }
      if (is_min) {
        __int128 b = ceil_of(x);
        if (excl && !x.inexact) ++b;
        lo = std::max(lo, b);
      } else {
        __int128 b = floor_of(x);
        if (excl && !x.inexact) --b;
        hi = std::min(hi, b);
      }
    }
    if (any && (n.types & Node::kInteger)) {
      n.bounded = true;
      n.lo = lo;
      n.hi = hi;
      const __int128 reach = pow10(int_only ? JsonGrammar::kMaxIntegerDigits : 2 * JsonGrammar::kMaxBoundedDigits) - 1;
      if (lo > hi || lo > reach || hi < -reach) n.types &= uint8_t(~(Node::kInteger | Node::kFraction));
    }
  }
  if (!n.types) schema_error(where, "no value satisfies the schema");
  const int32_t id = int32_t(nodes.size());
  nodes.push_back(n);
  // enum / const: the listed values that satisfy the rest of the schema
  const Json* e = field("enum");
  const Json* c = field("const");
  if (e || c) {
    if (e && (!e->is_array() || e->empty())) schema_error(where, "'enum' must be a non-empty array");
    std::vector<const Json*> values;
    if (e)
      for (const auto& v : *e) values.push_back(&v);
    else
      values.push_back(c);
    std::vector<std::string> lits;
    uint8_t types = 0;
    for (const Json* v : values) {
      if (literal_depth(*v, 0) > kMaxSchemaDepth) schema_error(where, "an enum value is nested too deeply");
      if (c && e && !(*v == *c)) continue;
      if (!admits(id, *v)) continue;
      std::string text = v->dump();
      if (forbid_markers && contains_marker(text)) continue;
      types |= value_types(*v);
      lits.push_back(std::move(text));
    }
    if (lits.empty()) schema_error(where, std::string("no '") + (e ? "enum" : "const") + "' value satisfies the schema");
    std::sort(lits.begin(), lits.end());
    lits.erase(std::unique(lits.begin(), lits.end()), lits.end());
    JsonSchemaNode& m = nodes[size_t(id)];
    m.literals = std::move(lits);
    m.has_enum = true;
    m.types = types;
  }
  return id;
}

bool JsonSchema::admits(int32_t id, const Json& v, int depth) const {
  if (id < 0 || depth > kMaxSchemaDepth) return false;
  const Node& n = nodes[size_t(id)];
  const uint8_t vt = value_types(v);
  if (!n.branch.empty()) {
    for (int bit = 0; bit < 7; ++bit)
      if (((vt >> bit) & 1) && n.branch[size_t(bit)] >= 0 && admits(n.branch[size_t(bit)], v, depth + 1)) return true;
    return false;
  }
  if (n.has_enum) return std::binary_search(n.literals.begin(), n.literals.end(), v.dump());
  if (!(vt & n.types)) return false;
  if (v.is_object()) {
    uint64_t seen = 0;
    for (auto it = v.begin(); it != v.end(); ++it) {
      const size_t i = std::find(n.keys.begin(), n.keys.end(), it.key()) - n.keys.begin();
      if (i < n.keys.size()) {
        seen |= uint64_t(1) << i;
        if (!admits(n.key_schema[i], it.value(), depth + 1)) return false;
      } else if (n.closed || !admits(n.extra, it.value(), depth + 1)) {
        return false;
      }
    }
    return (n.required & ~seen) == 0;
  }
  if (v.is_array()) {
    if (v.size() < n.min_items || v.size() > n.max_items) return false;
    for (size_t i = 0; i < v.size(); ++i)
      if (!admits(n.element_schema(uint32_t(i)), v[i], depth + 1)) return false;
    return true;
  }
  if (v.is_string()) {
    const std::string& s = v.get_ref<const std::string&>();
    const size_t len = code_points(s);
    if (len < n.min_length || len > n.max_length) return false;
    return n.dfa < 0 || json_regex::dfa_accepts(dfas[size_t(n.dfa)], s);
  }
  if (v.is_number() && n.bounded) {
    const Scaled x = to_scaled(v.dump(), (n.types & Node::kFraction) ? 15 : 0);
    if (x.inexact || x.huge) return false;
    const __int128 q = x.negative ? -x.q : x.q;
    return q >= n.lo && q <= n.hi;
  }
  return true;
}

// The fewest containers each node's values open, to a fixed point (recursive refs included).
void JsonSchema::compute_need() {
  for (auto& n : nodes) n.need = n.need_object = n.need_array = kNeedImpossible;
  auto need_of = [&](int32_t id) -> int { return id < 0 ? kNeedImpossible : nodes[size_t(id)].need; };
  for (bool changed = true; changed;) {
    changed = false;
    for (auto& n : nodes) {
      int obj = kNeedImpossible, arr = kNeedImpossible, scalar = kNeedImpossible;
      if (!n.branch.empty()) {
        const int ob = n.branch[0], ab = n.branch[1];
        if (ob >= 0) obj = nodes[size_t(ob)].need_object;
        if (ab >= 0) arr = nodes[size_t(ab)].need_array;
        for (int bit = 2; bit < 7; ++bit)
          if (n.branch[size_t(bit)] >= 0) scalar = 0;
      } else if (n.has_enum) {
        obj = arr = scalar = 0;  // written as literals: no container is pushed
      } else {
        if (n.types & Node::kObject) {
          int m = 0;
          for (size_t i = 0; i < n.keys.size(); ++i)
            if ((n.required >> i) & 1) m = std::max(m, need_of(n.key_schema[i]));
          obj = std::min(kNeedImpossible, 1 + m);
        }
        if (n.types & Node::kArray) {
          int m = 0;
          for (uint32_t i = 0; i < n.min_items && m < kNeedImpossible; ++i) {
            m = std::max(m, need_of(n.element_schema(i)));
            if (i >= n.prefix_items.size()) break;  // the rest share `items`
          }
          arr = std::min(kNeedImpossible, 1 + m);
        }
        if (n.types & ~(Node::kObject | Node::kArray)) scalar = 0;
      }
      const int all = std::min(scalar, std::min(obj, arr));
      if (obj != n.need_object || arr != n.need_array || all != n.need) {
        n.need_object = uint8_t(obj);
        n.need_array = uint8_t(arr);
        n.need = uint8_t(all);
        changed = true;
      }
    }
  }
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
