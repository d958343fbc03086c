#include "server/tool_grammar.h"

#include <algorithm>

namespace deepinfer::server {

namespace {

constexpr std::string_view kDsml = "｜DSML｜";
constexpr uint32_t kFnvOffset = 2166136261u;

bool is_name_char(uint8_t c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' ||
         c == '.';
}

uint64_t low_bits(size_t n) { return n >= 64 ? ~uint64_t(0) : (uint64_t(1) << n) - 1; }

uint32_t fnv1a(std::string_view s) {
  uint32_t h = kFnvOffset;
  for (char c : s) h = (h ^ uint8_t(c)) * 16777619u;
  return h;
}

// kName: the range [lo, hi) of ToolGrammar::by_name_ still matching, packed in ToolState::cand.
uint64_t pack_range(uint32_t lo, uint32_t hi) { return uint64_t(lo) | (uint64_t(hi) << 32); }
uint32_t range_lo(uint64_t r) { return uint32_t(r); }
uint32_t range_hi(uint64_t r) { return uint32_t(r >> 32); }

// A non-strict tool's declared keys, as a schema that takes them with any values (the first
// 64: the JSON grammar's limit; others are still written as undeclared keys).
chat::Json declared_keys_only(const chat::Json& params) {
  chat::Json props = chat::Json::object();
  if (params.is_object())
    if (auto it = params.find("properties"); it != params.end() && it->is_object())
      for (auto p = it->begin(); p != it->end() && props.size() < 64; ++p) props[p.key()] = chat::Json::object();
  return chat::Json{{"type", "object"}, {"properties", std::move(props)}};
}

}  // namespace

ToolGrammar::ToolGrammar(chat::ChatFamily family, const std::vector<ToolSpec>& tools, bool parallel, int max_calls)
    : parallel_(parallel),
      max_calls_(std::clamp(max_calls, 1, 0xFFFF)),
      json_(JsonSchema{}, true),
      loose_(JsonSchema{}, true, JsonWhitespace::kLoose) {
  const bool v41 = family == chat::ChatFamily::V41;
  const std::string d(kDsml);
  tag_block_ = d + (v41 ? " calls" : "tool_calls");
  tag_invoke_ = d + (v41 ? " invoke" : "invoke");
  tag_param_ = d + (v41 ? " parameter" : "parameter");
  terminator_ = "</" + tag_param_ + ">";
  terminator_fixed_ = 2 + d.size();
  for (const ToolSpec& t : tools) {
    names_.push_back(t.name);
    free_args_.push_back(!t.enforce);
    key_hash_.emplace_back();
    if (!t.enforce) {
      int32_t node = 0;
      try {
        node = json_.add_schema(declared_keys_only(t.parameters));
      } catch (const SchemaError&) {
        node = 0;  // (cannot happen: only keys) any keys, as undeclared ones
      }
      params_.push_back(node);
      for (const std::string& k : json_.schema().nodes[size_t(node)].keys) key_hash_.back().push_back(fnv1a(k));
      continue;
    }
    try {
      params_.push_back(json_.add_schema(t.parameters));
    } catch (const SchemaError& e) {
      throw SchemaError("function '" + t.name + "' parameters: " + e.what());
    }
  }
  by_name_.resize(names_.size());
  for (size_t i = 0; i < by_name_.size(); ++i) by_name_[i] = uint32_t(i);
  std::stable_sort(by_name_.begin(), by_name_.end(), [&](uint32_t a, uint32_t b) { return names_[a] < names_[b]; });
  for (int32_t p : params_) {
    const JsonSchemaNode& n = json_.schema().nodes[size_t(p)];
    uint64_t ok = 0;
    for (size_t i = 0; i < n.keys.size(); ++i)
      if (json_.schema().nodes[size_t(n.key_schema[i])].need <= JsonGrammar::kMaxDepth) ok |= uint64_t(1) << i;
    usable_.push_back(ok);
  }
  const std::string param_open = "<" + tag_param_ + " name=\"";
  const std::string invoke_close = "\n</" + tag_invoke_ + ">";
  points_[kBlockRest] = {{tag_block_.substr(d.size()) + ">\n", kLit, kInvokeOpen}};
  points_[kInvokeOpen] = {{"<" + tag_invoke_ + " name=\"", kName, 0}};
  points_[kNameEnd] = {{">\n", kLit, kParamsFirst}};
  points_[kParamsFirst] = {{param_open, kKey, 0}, {invoke_close, kLit, kAfterInvoke}};
  points_[kKeyEnd] = {{" string=\"true\">", kText, 0}, {" string=\"false\">", kJson, 0}};
  points_[kParamClose] = {{terminator_, kLit, kAfterParam}};
  points_[kAfterParam] = {{"\n" + param_open, kKey, 0}, {invoke_close, kLit, kAfterInvoke}};
  points_[kAfterInvoke] = {{"\n<" + tag_invoke_ + " name=\"", kName, 0}, {"\n</" + tag_block_ + ">", kEnd, 0}};
}

std::string ToolGrammar::forced_prefix(int named) const {
  std::string s = "\n\n<" + tag_block_ + ">\n";
  if (named >= 0) s += "<" + tag_invoke_ + " name=\"" + names_[size_t(named)] + "\">\n";
  return s;
}

std::string ToolGrammar::trigger() { return "<" + std::string(kDsml); }

ToolState ToolGrammar::start(int named) {
  ToolState s;
  if (named >= 0) {
    s.tool = int32_t(named);
    s.n_calls = 1;
    enter(s, kParamsFirst);
  } else {
    enter(s, named == kAfterDsml ? kBlockRest : kInvokeOpen);
  }
  return s;
}

const JsonSchemaNode& ToolGrammar::params_of(const ToolState& s) const {
  const int32_t node = s.tool >= 0 ? params_[size_t(s.tool)] : 0;
  return json_.schema().nodes[size_t(node)];
}

// Which choices of a point are open in this state.
void ToolGrammar::enter(ToolState& s, uint8_t point) {
  s.phase = kLit;
  s.point = point;
  s.lit_pos = 0;
  s.alive = uint8_t(low_bits(points_[point].size()));
  const JsonSchemaNode& n = params_of(s);
  switch (point) {
    case kParamsFirst:
    case kAfterParam: {
      const bool more_keys = free_args(s) || (free_keys(n) ? s.n_free < 4 : (usable(s) & ~s.used) != 0);
      const bool may_close = (n.required & ~s.used) == 0;
      s.alive = uint8_t((more_keys ? 1 : 0) | (may_close ? 2 : 0));
      break;
    }
    case kKeyEnd: {
      const JsonSchemaNode& v = json_.schema().nodes[size_t(s.value_schema)];
      const bool text = v.plain_string();
      const bool json = (v.types & ~JsonSchemaNode::kString) || ((v.types & JsonSchemaNode::kString) && !text);
      s.alive = uint8_t((text ? 1 : 0) | (json ? 2 : 0));
      break;
    }
    case kAfterInvoke:
      s.alive = uint8_t(((parallel_ && s.n_calls < max_calls_) ? 1 : 0) | 2);
      break;
    default: break;
  }
}

void ToolGrammar::go(ToolState& s, const Choice& c) {
  switch (c.phase) {
    case kLit: enter(s, c.point); return;
    case kName:
      s.phase = kName;
      s.cand = pack_range(0, uint32_t(by_name_.size()));
      s.len = 0;
      return;
    case kKey:
      s.phase = kKey;
      s.cand = usable(s) & ~s.used;
      s.extra = extra_keys(s) ? 1 : 0;
      s.len = 0;
      s.hash = kFnvOffset;
      return;
    case kText:
      s.phase = kText;
      s.tm = 0;
      s.utf8_need = 0;
      return;
    case kJson:
      s.phase = kJson;
      s.json = json_of(s).start(s.value_schema);
      return;
    default: s.phase = c.phase; return;
  }
}

bool ToolGrammar::lit_byte(ToolState& s, uint8_t c) {
  const std::vector<Choice>& ch = points_[s.point];
  uint8_t alive = 0;
  for (size_t i = 0; i < ch.size(); ++i)
    if (((s.alive >> i) & 1) && s.lit_pos < ch[i].text.size() && uint8_t(ch[i].text[s.lit_pos]) == c)
      alive |= uint8_t(1u << i);
  if (!alive) return false;
  ++s.lit_pos;
  s.alive = alive;
  for (size_t i = 0; i < ch.size(); ++i)
    if (((alive >> i) & 1) && ch[i].text.size() == s.lit_pos) {
      go(s, ch[i]);
      break;
    }
  return true;
}

// The names still matching share their first s.len bytes and are sorted: the next byte
// narrows them to a sub-range, and a complete name is the first of its range.
bool ToolGrammar::name_byte(ToolState& s, uint8_t c) {
  uint32_t lo = range_lo(s.cand), hi = range_hi(s.cand);
  if (c == '"') {
    if (lo == hi || names_[by_name_[lo]].size() != s.len) return false;
    s.tool = int32_t(by_name_[lo]);
    ++s.n_calls;
    s.used = 0;
    s.n_free = 0;
    s.free_keys = -1;
    enter(s, kNameEnd);
    return true;
  }
  // The byte at s.len of a name in the range; -1 where the name ends there.
  auto at = [&](uint32_t i) {
    const std::string& n = names_[by_name_[i]];
    return n.size() > s.len ? int(uint8_t(n[s.len])) : -1;
  };
  // The first i in [a, b) where below(i) is false (it is true, then false, over the range).
  auto bound = [](uint32_t a, uint32_t b, auto below) {
    while (a < b) {
      const uint32_t mid = a + (b - a) / 2;
      if (below(mid)) a = mid + 1;
      else b = mid;
    }
    return a;
  };
  lo = bound(lo, hi, [&](uint32_t i) { return at(i) < int(c); });
  hi = bound(lo, hi, [&](uint32_t i) { return at(i) == int(c); });
  if (lo == hi) return false;
  s.cand = pack_range(lo, hi);
  ++s.len;
  return true;
}

// A declared key (s.cand) or, where the tool takes them, an undeclared one ([A-Za-z0-9_.-],
// s.extra), each at most once per invoke.
bool ToolGrammar::key_byte(ToolState& s, uint8_t c) {
  const JsonSchemaNode& n = params_of(s);
  if (c == '"') {
    int match = -1;
    for (uint64_t bits = s.cand; bits; bits &= bits - 1) {
      const int p = __builtin_ctzll(bits);
      if (n.keys[size_t(p)].size() == s.len) match = p;
    }
    if (match >= 0) {
      s.used |= uint64_t(1) << match;
      s.value_schema = free_args(s) ? 0 : n.key_schema[size_t(match)];
    } else {
      if (!s.extra || s.len == 0) return false;
      // (a hash collision only refuses a key)
      for (uint32_t h : key_hash_[size_t(s.tool)])
        if (h == s.hash) return false;  // a declared key written before
      for (int32_t k = s.free_keys; k >= 0; k = keys_[size_t(k)].next)
        if (keys_[size_t(k)].hash == s.hash) return false;
      keys_.push_back({s.hash, s.free_keys});
      s.free_keys = int32_t(keys_.size() - 1);
      ++s.n_free;
      s.value_schema = free_args(s) ? 0 : n.extra;
    }
    enter(s, kKeyEnd);
    return true;
  }
  uint64_t cand = s.cand;
  for (uint64_t bits = cand; bits; bits &= bits - 1) {
    const int p = __builtin_ctzll(bits);
    const std::string& k = n.keys[size_t(p)];
    if (k.size() <= s.len || uint8_t(k[s.len]) != c) cand &= ~(uint64_t(1) << p);
  }
  if (s.extra && (!is_name_char(c) || s.len >= 64)) s.extra = 0;
  if (!cand && !s.extra) return false;
  s.cand = cand;
  s.hash = (s.hash ^ c) * 16777619u;
  ++s.len;
  return true;
}

// A string="true" value: any UTF-8 text up to "</｜DSML｜parameter>".
bool ToolGrammar::text_byte(ToolState& s, uint8_t c) {
  if (s.tm > 0) {
    if (c == uint8_t(terminator_[s.tm])) {
      if (!utf8_step(c, s.utf8_need, s.utf8_lo, s.utf8_hi)) return false;
      if (++s.tm == terminator_.size()) enter(s, kAfterParam);
      return true;
    }
    if (s.tm >= terminator_fixed_) return false;  // "</｜DSML｜" must close the parameter
    if (s.tm == 1 && c == 0xEF) return false;     // "<｜": DSML or an end-of-sentence marker
    s.tm = 0;
  }
  if (s.utf8_need == 0 && c < 0x20 && c != '\t' && c != '\n' && c != '\r') return false;
  if (!utf8_step(c, s.utf8_need, s.utf8_lo, s.utf8_hi)) return false;
  if (c == '<') s.tm = 1;
  return true;
}

int ToolGrammar::fast_class(const ToolState& s) const {
  if (s.phase == kJson) return json_of(s).in_free_string(s.json) ? 0 : -1;
  if (s.phase == kText) return s.tm == 0 && s.utf8_need == 0 ? 1 : -1;
  return -1;
}

bool ToolGrammar::feed(ToolState& s, uint8_t c) {
  switch (s.phase) {
    case kLit: return lit_byte(s, c);
    case kName: return name_byte(s, c);
    case kKey: return key_byte(s, c);
    case kText: return text_byte(s, c);
    case kJson:
      // On failure the JSON state may have moved on (a finished number): complete() then
      // tells whether the value may end before this byte.
      if (json_of(s).feed(s.json, c)) return true;
      if (c != '<' || !json_of(s).complete(s.json)) return false;
      enter(s, kParamClose);
      return lit_byte(s, c);
    default: return false;
  }
}

}  // namespace deepinfer::server
