// The schema compiler: a JSON Schema (the subset structured outputs take) into the node table
// the grammar runtime (json_grammar.cpp) walks: types, enums and consts, properties and
// required keys, items and lengths, numeric bounds as exact scaled integers, anyOf / oneOf /
// allOf, local $ref; string patterns and formats through json_regex. Also JsonSchema::admits
// (the whole-value check) and the minimal closing depth of each node.
#include "server/json_grammar.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <set>

#include "server/json_number.h"
#include "server/json_regex.h"

namespace deepinfer::server {

namespace {

using Node = JsonSchemaNode;
using chat::Json;
using json_number::ceil_of;
using json_number::floor_of;
using json_number::kHuge;
using json_number::pow10;
using json_number::Scaled;
using json_number::to_scaled;

constexpr int kMaxSchemaDepth = 64;  // nesting of the schema document itself
constexpr int kNeedImpossible = JsonGrammar::kMaxDepth + 1;

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

size_t code_points(std::string_view s) {
  size_t n = 0;
  for (char c : s) n += (uint8_t(c) & 0xC0) != 0x80;
  return n;
}

}  // namespace

ByteDfa compile_pattern(std::string_view pattern) { return json_regex::pruned(json_regex::pattern_dfa(pattern)); }

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

struct JsonSchema::Site {
  const Json& s;
  const std::string& where;

  const Json* field(const char* k) const {
    auto it = s.find(k);
    return it == s.end() ? nullptr : &*it;
  }
  [[noreturn]] void error(const std::string& what) const { schema_error(where, what); }
  // Keywords besides `self` (and annotations / allowed) make the combination unsupported.
  void alone(const char* self, std::initializer_list<const char*> allowed) const {
    for (auto it = s.begin(); it != s.end(); ++it) {
      const std::string& k = it.key();
      if (k == self || kAnnotations.count(k)) continue;
      if (std::find_if(allowed.begin(), allowed.end(), [&](const char* a) { return k == a; }) != allowed.end()) continue;
      error(std::string("'") + self + "' together with '" + k + "' is not supported");
    }
  }
};

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
  const Site at{s, where};
  if (at.field("$ref")) return compile_ref(at, cx, depth);
  if (const Json* all = at.field("allOf")) {
    at.alone("allOf", {});
    if (!all->is_array() || all->size() != 1) at.error("'allOf' is only supported with one schema");
    return compile((*all)[0], cx, where + "/allOf/0", depth + 1);
  }
  for (const char* comb : {"anyOf", "oneOf"})
    if (at.field(comb)) return compile_alternatives(at, comb, cx, depth);

  JsonSchemaNode n;
  if (const Json* t = at.field("type")) {
    auto bits = [&](const Json& x) -> uint8_t {
      const std::string v = x.is_string() ? x.get<std::string>() : "";
      if (v == "object") return Node::kObject;
      if (v == "array") return Node::kArray;
      if (v == "string") return Node::kString;
      if (v == "integer") return Node::kInteger;
      if (v == "number") return Node::kInteger | Node::kFraction;
      if (v == "boolean") return Node::kBool;
      if (v == "null") return Node::kNull;
      at.error("unknown type " + x.dump());
    };
    if (t->is_array()) {
      n.types = 0;
      for (const auto& x : *t) n.types |= bits(x);
      if (!n.types) at.error("'type' is an empty list");
    } else {
      n.types = bits(*t);
    }
  }
  compile_object(at, cx, depth, n);
  compile_array(at, cx, depth, n);
  compile_string(at, n);
  compile_number(at, n);
  if (!n.types) at.error("no value satisfies the schema");
  const int32_t id = int32_t(nodes.size());
  nodes.push_back(n);
  keep_literals(at, id);
  return id;
}

int32_t JsonSchema::compile_ref(const Site& at, Ctx& cx, int depth) {
  at.alone("$ref", {});
  const Json* ref = at.field("$ref");
  if (!ref->is_string()) at.error("'$ref' must be a string");
  const std::string r = ref->get<std::string>();
  if (auto it = cx.refs.find(r); it != cx.refs.end()) return it->second;
  const Json* target = resolve(*cx.root, r);
  if (!target) at.error("'$ref' " + r + " does not resolve within the schema (only local refs are supported)");
  // The node exists before its body so that a recursive ref finds it.
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

int32_t JsonSchema::compile_alternatives(const Site& at, const char* comb, Ctx& cx, int depth) {
  const Json* a = at.field(comb);
  at.alone(comb, {"type"});
  if (!a->is_array() || a->empty()) at.error(std::string("'") + comb + "' must be a non-empty array");
  uint8_t allowed = Node::kAnyType;
  if (const Json* t = at.field("type")) {
    const Json only = Json{{"type", *t}};
    allowed = nodes[size_t(compile(only, cx, at.where, depth + 1))].types;
  }
  std::vector<int32_t> branches;
  for (size_t i = 0; i < a->size(); ++i) {
    const int32_t b = compile((*a)[i], cx, at.where + "/" + comb + "/" + std::to_string(i), depth + 1);
    if (cx.in_progress.count(b)) at.error(std::string("a recursive '$ref' directly in '") + comb + "' is not supported");
    branches.push_back(b);
  }
  if (branches.size() == 1 && allowed == Node::kAnyType) return branches[0];
  // The grammar picks the branch by the value's first byte, so branches may not share a type.
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
        at.error(std::string("'") + comb + "' branches that take the same JSON type are not supported");
    }
    for (int bit = 0; bit < 7; ++bit)
      if ((cls >> bit) & 1) n.branch[size_t(bit)] = b;
    n.types |= t;
  }
  if (!n.types) at.error(std::string("no branch of '") + comb + "' allows the schema's type");
  nodes.push_back(std::move(n));
  return int32_t(nodes.size() - 1);
}

void JsonSchema::compile_object(const Site& at, Ctx& cx, int depth, JsonSchemaNode& n) {
  if (const Json* p = at.field("properties")) {
    if (!p->is_object()) at.error("'properties' must be an object");
    if (p->size() > 64) at.error("more than 64 properties are not supported");
    n.has_properties = true;
    for (auto it = p->begin(); it != p->end(); ++it) {
      n.keys.push_back(it.key());
      n.key_schema.push_back(compile(it.value(), cx, at.where + "/properties/" + it.key(), depth + 1));
    }
  }
  bool extra_none = false;
  if (const Json* a = at.field("additionalProperties")) {
    if (a->is_boolean()) extra_none = !a->get<bool>();
    else n.extra = compile(*a, cx, at.where + "/additionalProperties", depth + 1);
  }
  n.closed = extra_none;
  if (const Json* r = at.field("required")) {
    if (!r->is_array()) at.error("'required' must be an array");
    for (const auto& k : *r) {
      if (!k.is_string()) at.error("'required' must hold strings");
      const std::string& key = k.get_ref<const std::string&>();
      size_t i = std::find(n.keys.begin(), n.keys.end(), key) - n.keys.begin();
      if (i == n.keys.size()) {
        if (extra_none) at.error("required property '" + key + "' is not allowed by additionalProperties false");
        if (n.keys.size() >= 64) at.error("more than 64 properties are not supported");
        n.keys.push_back(key);
        n.key_schema.push_back(n.extra);
      }
      n.required |= uint64_t(1) << i;
    }
  }
}

void JsonSchema::compile_array(const Site& at, Ctx& cx, int depth, JsonSchemaNode& n) {
  auto item_schema = [&](const Json& v, const std::string& w) -> int32_t {
    if (v.is_boolean() && !v.get<bool>()) return -1;
    return compile(v, cx, w, depth + 1);
  };
  const std::string& where = at.where;
  const Json* items = at.field("items");
  if (const Json* p = at.field("prefixItems")) {
    if (!p->is_array()) at.error("'prefixItems' must be an array");
    for (size_t i = 0; i < p->size(); ++i) n.prefix_items.push_back(item_schema((*p)[i], where + "/prefixItems/" + std::to_string(i)));
  }
  if (items && items->is_array()) {  // draft 7 tuples
    if (at.field("prefixItems")) at.error("'items' as an array together with 'prefixItems'");
    for (size_t i = 0; i < items->size(); ++i) n.prefix_items.push_back(item_schema((*items)[i], where + "/items/" + std::to_string(i)));
    if (const Json* ai = at.field("additionalItems")) n.items = item_schema(*ai, where + "/additionalItems");
  } else {
    if (at.field("additionalItems")) at.error("'additionalItems' is only supported with an 'items' array");
    if (items) n.items = item_schema(*items, where + "/items");
  }
  if (const Json* v = at.field("minItems")) n.min_items = count_of(*v, where, "minItems");
  if (const Json* v = at.field("maxItems")) n.max_items = count_of(*v, where, "maxItems");
  if (n.items < 0) n.max_items = std::min<uint32_t>(n.max_items, uint32_t(n.prefix_items.size()));
  for (size_t i = 0; i < n.prefix_items.size(); ++i)
    if (n.prefix_items[i] < 0) n.max_items = std::min<uint32_t>(n.max_items, uint32_t(i));
  if (n.min_items > n.max_items) {
    if (n.types & Node::kArray) n.types &= uint8_t(~Node::kArray);
  }
}

void JsonSchema::compile_string(const Site& at, JsonSchemaNode& n) {
  if (const Json* v = at.field("minLength")) n.min_length = count_of(*v, at.where, "minLength");
  if (const Json* v = at.field("maxLength")) n.max_length = count_of(*v, at.where, "maxLength");
  if (n.min_length > n.max_length) n.types &= uint8_t(~Node::kString);
  const Json* pattern = at.field("pattern");
  const char* fmt = nullptr;
  if (const Json* f = at.field("format")) {
    if (!f->is_string()) at.error("'format' must be a string");
    fmt = json_regex::format_pattern(f->get<std::string>());
  }
  if (pattern && !pattern->is_string()) at.error("'pattern' must be a string");
  if (!(pattern || fmt) || !(n.types & Node::kString)) return;
  // One byte automaton for the pattern, the format and the length bounds together.
  try {
    std::vector<ByteDfa> parts;
    if (pattern) parts.push_back(json_regex::pattern_dfa(pattern->get<std::string>()));
    if (fmt) parts.push_back(json_regex::pattern_dfa(fmt));
    if (n.min_length > 0 || n.max_length != UINT32_MAX) parts.push_back(json_regex::length_dfa(n.min_length, n.max_length));
    ByteDfa d = std::move(parts[0]);
    for (size_t i = 1; i < parts.size(); ++i) d = json_regex::intersect(d, parts[i]);
    dfas.push_back(json_regex::pruned(std::move(d)));
    n.dfa = int32_t(dfas.size() - 1);
  } catch (const SchemaError& e) {
    at.error(e.what());
  }
}

void JsonSchema::compile_number(const Site& at, JsonSchemaNode& n) {
  // Bounds as exact scaled integers: units for integers, 10^-15 for numbers.
  const bool int_only = !(n.types & Node::kFraction);
  const int scale = int_only ? 0 : 15;
  __int128 lo = -kHuge, hi = kHuge;
  bool any = false;
  bool excl_min_flag = false, excl_max_flag = false;  // draft 4 boolean forms
  for (const char* k : {"exclusiveMinimum", "exclusiveMaximum"})
    if (const Json* v = at.field(k); v && v->is_boolean()) (k[9] == 'i' ? excl_min_flag : excl_max_flag) = v->get<bool>();
  for (const char* k : {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}) {
    const Json* v = at.field(k);
    if (!v || v->is_boolean()) continue;
    if (!v->is_number()) at.error(std::string("'") + k + "' must be a number");
    const Scaled x = to_scaled(v->dump(), scale);
    const bool is_min = std::string_view(k).find("inimum") != std::string_view::npos;
    const bool excl = k[0] == 'e' || (is_min ? excl_min_flag : excl_max_flag);
    any = true;
    if (x.huge) {
      if (x.negative != is_min) at.error(std::string("no number satisfies '") + k + "'");
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

void JsonSchema::keep_literals(const Site& at, int32_t id) {
  // enum / const: the listed values that satisfy the rest of the schema (node id, compiled).
  const Json* e = at.field("enum");
  const Json* c = at.field("const");
  if (!e && !c) return;
  if (e && (!e->is_array() || e->empty())) at.error("'enum' must be a non-empty array");
  std::vector<const Json*> values;
  if (e)
    for (const auto& v : *e) values.push_back(&v);
  else
    values.push_back(c);
  std::vector<std::string> lits;
  uint8_t types = 0;
  for (const Json* v : values) {
    if (literal_depth(*v, 0) > kMaxSchemaDepth) at.error("an enum value is nested too deeply");
    if (c && e && !(*v == *c)) continue;
    if (!admits(id, *v)) continue;
    std::string text = v->dump();
    if (forbid_markers && contains_marker(text)) continue;
    types |= value_types(*v);
    lits.push_back(std::move(text));
  }
  if (lits.empty()) at.error(std::string("no '") + (e ? "enum" : "const") + "' value satisfies the schema");
  std::sort(lits.begin(), lits.end());
  lits.erase(std::unique(lits.begin(), lits.end()), lits.end());
  JsonSchemaNode& m = nodes[size_t(id)];
  m.literals = std::move(lits);
  m.has_enum = true;
  m.types = types;
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

}  // namespace deepinfer::server
