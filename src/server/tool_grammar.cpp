#include "server/tool_grammar.h"

namespace deepinfer::server {

namespace {

constexpr std::string_view kDsml = "｜DSML｜";
constexpr uint32_t kFnvOffset = 2166136261u;

bool is_name_char(uint8_t c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' ||
         c == '.';
}

uint64_t low_bits(size_t n) { return n >= 64 ? ~uint64_t(0) : (uint64_t(1) << n) - 1; }

}  // namespace

ToolGrammar::ToolGrammar(chat::ChatFamily family, const std::vector<ToolSpec>& tools, bool parallel)
    : parallel_(parallel), json_(JsonSchema{}, true) {
  const bool v41 = family == chat::ChatFamily::V41;
  const std::string d(kDsml);
  tag_block_ = d + (v41 ? " calls" : "tool_calls");
  tag_invoke_ = d + (v41 ? " invoke" : "invoke");
  tag_param_ = d + (v41 ? " parameter" : "parameter");
  terminator_ = "</" + tag_param_ + ">";
  terminator_fixed_ = 2 + d.size();
  free_names_ = tools.size() > 64;
  for (const ToolSpec& t : tools) {
    names_.push_back(t.name);
    try {
      params_.push_back(json_.add_schema(t.parameters));
    } catch (const SchemaError& e) {
      throw SchemaError("function '" + t.name + "' parameters: " + e.what());
    }
  }
  for (int32_t p : params_) {
    const JsonSchemaNode& n = json_.schema().nodes[size_t(p)];
    uint64_t ok = 0;
    for (size_t i = 0; i < n.keys.size(); ++i)
      if (json_.schema().nodes[size_t(n.key_schema[i])].need <= JsonGrammar::kMaxDepth) ok |= uint64_t(1) << i;
    usable_.push_back(ok);
  }
  const std::string param_open = "<" + tag_param_ + " name=\"";
  const std::string invoke_close = "\n</" + tag_invoke_ + ">";
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

ToolState ToolGrammar::start(int named) {
  ToolState s;
  if (named >= 0) {
    s.tool = int16_t(named);
    s.n_calls = 1;
    enter(s, kParamsFirst);
  } else {
    enter(s, kInvokeOpen);
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
      const bool more_keys = free_keys(n) ? s.n_free < 4 : (usable(s) & ~s.used) != 0;
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
      s.alive = uint8_t(((parallel_ && s.n_calls < kMaxCalls) ? 1 : 0) | 2);
      break;
    default: break;
  }
}

void ToolGrammar::go(ToolState& s, const Choice& c) {
  switch (c.phase) {
    case kLit: enter(s, c.point); return;
    case kName:
      s.phase = kName;
      s.cand = free_names_ ? 0 : low_bits(names_.size());
      s.len = 0;
      return;
    case kKey:
      s.phase = kKey;
      s.cand = usable(s) & ~s.used;
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
      s.json = json_.start(s.value_schema);
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

bool ToolGrammar::name_byte(ToolState& s, uint8_t c) {
  if (c == '"') {
    int match = -1;
    if (free_names_) {
      if (s.len == 0) return false;
    } else {
      for (uint64_t bits = s.cand; bits; bits &= bits - 1) {
        const int p = __builtin_ctzll(bits);
        if (names_[size_t(p)].size() == s.len) match = p;
      }
      if (match < 0) return false;
    }
    s.tool = int16_t(match);
    ++s.n_calls;
    s.used = 0;
    s.n_free = 0;
    enter(s, kNameEnd);
    return true;
  }
  if (free_names_) {
    if (!is_name_char(c) || s.len >= 64) return false;
  } else {
    uint64_t cand = s.cand;
    for (uint64_t bits = cand; bits; bits &= bits - 1) {
      const int p = __builtin_ctzll(bits);
      const std::string& k = names_[size_t(p)];
      if (k.size() <= s.len || uint8_t(k[s.len]) != c) cand &= ~(uint64_t(1) << p);
    }
    if (!cand) return false;
    s.cand = cand;
  }
  ++s.len;
  return true;
}

bool ToolGrammar::key_byte(ToolState& s, uint8_t c) {
  const JsonSchemaNode& n = params_of(s);
  if (c == '"') {
    if (!free_keys(n)) {
      int match = -1;
      for (uint64_t bits = s.cand; bits; bits &= bits - 1) {
        const int p = __builtin_ctzll(bits);
        if (n.keys[size_t(p)].size() == s.len) match = p;
      }
      if (match < 0) return false;
      s.used |= uint64_t(1) << match;
      s.value_schema = n.key_schema[size_t(match)];
    } else {
      if (s.len == 0) return false;
      for (uint8_t i = 0; i < s.n_free; ++i)
        if (s.free_keys[i] == s.hash) return false;  // (a hash collision only refuses a key)
      s.free_keys[s.n_free++] = s.hash;
      s.value_schema = n.extra;
    }
    enter(s, kKeyEnd);
    return true;
  }
  if (!free_keys(n)) {
    uint64_t cand = s.cand;
    for (uint64_t bits = cand; bits; bits &= bits - 1) {
      const int p = __builtin_ctzll(bits);
      const std::string& k = n.keys[size_t(p)];
      if (k.size() <= s.len || uint8_t(k[s.len]) != c) cand &= ~(uint64_t(1) << p);
    }
    if (!cand) return false;
    s.cand = cand;
  } else {
    if (!is_name_char(c) || s.len >= 64) return false;
    s.hash = (s.hash ^ c) * 16777619u;
  }
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
  if (s.phase == kJson) return json_.in_free_string(s.json) ? 0 : -1;
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
      if (json_.feed(s.json, c)) return true;
      if (c != '<' || !json_.complete(s.json)) return false;
      enter(s, kParamClose);
      return lit_byte(s, c);
    default: return false;
  }
}

}  // namespace deepinfer::server
