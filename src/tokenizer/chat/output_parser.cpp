#include "tokenizer/chat/output_parser.h"

#include <algorithm>
#include <utility>

#include "tokenizer/chat/encoder.h"
#include "tokenizer/chat/py_json.h"

namespace deepinfer::chat {
namespace {

constexpr std::string_view kOpen = "<｜DSML｜";
constexpr std::string_view kClose = "</｜DSML｜";
constexpr std::string_view kEosV = "<｜end▁of▁sentence｜>";
constexpr std::string_view kThinkOpen = "<think>";
constexpr std::string_view kThinkClose = "</think>";
constexpr size_t kMaxTagBytes = 4096;

enum Marker { kThinkEndM, kThinkStartM, kDsmlM, kBareDsmlM, kEosM };
struct MarkerDef {
  std::string_view text;
  Marker kind;
  size_t lead;  // newline bytes before the markup proper (dropped from the text)
};

// Text states: the two newlines the encoder puts before a tool-calls block belong
// to the markup, not to the content.
constexpr MarkerDef kTextMarkers[] = {
    {"</think>", kThinkEndM, 0},
    {"<think>", kThinkStartM, 0},
    {"\n\n<｜DSML｜", kDsmlM, 2},
    {"\n<｜DSML｜", kDsmlM, 1},
    {"<｜DSML｜", kDsmlM, 0},
    {"\n\n</｜DSML｜", kDsmlM, 2},
    {"\n</｜DSML｜", kDsmlM, 1},
    {"</｜DSML｜", kDsmlM, 0},
    {"｜DSML｜", kBareDsmlM, 0},  // the DSML token without its '<': never text
    {"<｜end▁of▁sentence｜>", kEosM, 0},
};
constexpr MarkerDef kValueMarkers[] = {
    {"<｜DSML｜", kDsmlM, 0},
    {"</｜DSML｜", kDsmlM, 0},
    {"<｜end▁of▁sentence｜>", kEosM, 0},
};

struct Hit {
  size_t pos = std::string::npos;
  const MarkerDef* m = nullptr;
};

template <size_t N>
Hit find_first(std::string_view s, const MarkerDef (&ms)[N]) {
  Hit h;
  for (const auto& m : ms) {
    size_t p = s.find(m.text);
    if (p == std::string_view::npos) continue;
    if (p < h.pos || (p == h.pos && m.text.size() > h.m->text.size())) h = {p, &m};
  }
  return h;
}

// Length of the longest suffix of s that is a proper prefix of a marker.
template <size_t N>
size_t partial_suffix(std::string_view s, const MarkerDef (&ms)[N]) {
  size_t best = 0;
  for (const auto& m : ms) {
    const size_t maxk = std::min(s.size(), m.text.size() - 1);
    for (size_t k = maxk; k > best; --k)
      if (s.substr(s.size() - k) == m.text.substr(0, k)) {
        best = k;
        break;
      }
  }
  return best;
}

// Moves `cut` back so that s[0, cut) does not end inside a UTF-8 sequence.
size_t utf8_cut(std::string_view s, size_t cut) {
  size_t i = cut;
  for (int back = 0; back < 4 && i > 0; ++back) {
    const unsigned char c = static_cast<unsigned char>(s[i - 1]);
    if ((c & 0xC0) == 0x80) {
      --i;
      continue;
    }
    const size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    return (i - 1) + need > cut ? i - 1 : cut;
  }
  return cut;
}

bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }
bool is_space(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }
bool is_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
}

std::string snippet(std::string_view s) {
  if (s.size() <= 80) return std::string(s);
  return std::string(s.substr(0, utf8_cut(s, 80))) + "...";
}

}  // namespace

struct OutputParser::Tag {
  enum Kind { Block, Invoke, Param, Unknown } kind = Unknown;
  bool closing = false;
  std::string name;
  std::vector<std::pair<std::string, std::string>> attrs;
  std::string raw;
  const std::string* attr(const char* k) const {
    for (const auto& a : attrs)
      if (a.first == k) return &a.second;
    return nullptr;
  }
};

OutputParser::OutputParser(ChatFamily family, bool thinking)
    : family_(family), state_(thinking ? State::Reasoning : State::Content) {}

std::vector<ChatEvent> OutputParser::feed(std::string_view bytes) {
  std::vector<ChatEvent> out;
  feed(bytes, out);
  return out;
}
std::vector<ChatEvent> OutputParser::finish() {
  std::vector<ChatEvent> out;
  finish(out);
  return out;
}

void OutputParser::feed(std::string_view bytes, std::vector<ChatEvent>& out) {
  if (state_ == State::Done) return;
  buf_.append(bytes);
  run(false, out);
}

void OutputParser::finish(std::vector<ChatEvent>& out) {
  // What feed() left is what needed more bytes: a call failing from here on was cut.
  finishing_ = true;
  if (state_ != State::Done) run(true, out);
  switch (state_) {
    case State::Block:
      if (block_explicit_) error("truncated output: tool-calls block not closed", out);
      break;
    case State::Invoke: fail_call("truncated output inside invoke (missing </invoke>)", out); break;
    case State::Value: fail_call("truncated output inside parameter '" + param_name_ + "'", out); break;
    default: break;
  }
  state_ = State::Done;
  buf_.clear();
}

void OutputParser::emit(ChatEventKind kind, std::string text, std::vector<ChatEvent>& out, int index) {
  if (text.empty() && (kind == ChatEventKind::Content || kind == ChatEventKind::Reasoning ||
                       kind == ChatEventKind::ToolCallArguments))
    return;
  out.push_back(ChatEvent{kind, std::move(text), index});
}

void OutputParser::error(const std::string& why, std::vector<ChatEvent>& out) {
  emit(ChatEventKind::Error, why, out, -1);
}

void OutputParser::fail_call(const std::string& why, std::vector<ChatEvent>& out) {
  if (call_ >= 0) {
    emit(ChatEventKind::Error, "tool call " + std::to_string(call_) + " ('" + call_name_ + "'): " + why, out, call_);
    out.back().cut = finishing_;
    call_ = -1;
  } else {
    error(why, out);
  }
  state_ = State::Skip;
}

void OutputParser::begin_call(const std::string& name, std::vector<ChatEvent>& out) {
  call_ = next_call_++;
  call_name_ = name;
  param_names_.clear();
  calls_in_block_ = true;
  emit(ChatEventKind::ToolCallBegin, name, out, call_);
  emit(ChatEventKind::ToolCallArguments, "{", out, call_);
  state_ = State::Invoke;
}

void OutputParser::run(bool final, std::vector<ChatEvent>& out) {
  for (;;) {
    bool progressed = false;
    switch (state_) {
      case State::Reasoning:
      case State::Content: progressed = step_text(final, out); break;
      case State::AfterBlock: {
        size_t i = 0;
        while (i < buf_.size() && is_space(buf_[i])) ++i;
        buf_.erase(0, i);
        if (buf_.empty()) return;
        state_ = State::Content;
        progressed = true;
        break;
      }
      case State::Block:
      case State::Invoke: progressed = step_markup(final, out); break;
      case State::Value: progressed = step_value(final, out); break;
      case State::Skip: progressed = step_skip(final, out); break;
      case State::Done: buf_.clear(); return;
    }
    if (!progressed) return;
  }
}

// Reasoning or content text: emit up to the next marker, hold back a partial one.
bool OutputParser::step_text(bool final, std::vector<ChatEvent>& out) {
  const ChatEventKind kind = state_ == State::Reasoning ? ChatEventKind::Reasoning : ChatEventKind::Content;
  if (at_start_) {
    if (starts_with(buf_, kThinkOpen)) {
      buf_.erase(0, kThinkOpen.size());
      at_start_ = false;
      state_ = State::Reasoning;  // a model that opens its own reasoning block
      return true;
    }
    if (!final && starts_with(kThinkOpen, buf_)) return false;
    at_start_ = false;
  }
  const Hit h = find_first(buf_, kTextMarkers);
  if (h.m) {
    emit(kind, buf_.substr(0, h.pos), out);
    switch (h.m->kind) {
      case kThinkEndM:
        buf_.erase(0, h.pos + h.m->text.size());
        state_ = State::Content;
        break;
      case kThinkStartM: buf_.erase(0, h.pos + h.m->text.size()); break;
      case kBareDsmlM:
        buf_.erase(0, h.pos + h.m->text.size());
        error("stray DSML token outside a tag (dropped)", out);
        break;
      case kEosM:
        buf_.clear();
        state_ = State::Done;
        break;
      case kDsmlM:
        buf_.erase(0, h.pos + h.m->lead);
        block_explicit_ = false;
        calls_in_block_ = false;
        state_ = State::Block;
        break;
    }
    return true;
  }
  size_t cut = buf_.size();
  if (!final) cut = utf8_cut(buf_, cut - partial_suffix(buf_, kTextMarkers));
  if (cut == 0) return false;
  emit(kind, buf_.substr(0, cut), out);
  buf_.erase(0, cut);
  return false;
}

int OutputParser::read_tag(bool final, Tag& tag, size_t& len) const {
  std::string_view s = buf_;
  const bool closing = starts_with(s, kClose);
  size_t i = closing ? kClose.size() : kOpen.size();
  auto malformed = [&](size_t upto) {
    len = std::max(upto, std::min(s.size(), i));
    return -1;
  };
  // The tag must end before any EOS.
  const size_t eos = s.find(kEosV);
  if (eos != std::string_view::npos) s = s.substr(0, eos);
  const bool capped = s.size() > kMaxTagBytes;  // the same limit whatever the chunking
  if (capped) s = s.substr(0, kMaxTagBytes);
  const bool may_grow = !final && eos == std::string_view::npos && !capped;
  // A bad tag extends to its '>' (so that its extent does not depend on the chunking).
  auto bad = [&](size_t from) -> int {
    const size_t gt = s.find('>', from);
    if (gt == std::string_view::npos && may_grow) return 0;
    return malformed(gt == std::string_view::npos ? s.size() : gt + 1);
  };
  auto need_more = [&]() -> int { return may_grow ? 0 : bad(i); };
  tag = Tag{};
  tag.closing = closing;
  while (i < s.size() && s[i] == ' ') ++i;
  while (i < s.size() && is_name_char(s[i])) tag.name += s[i++];
  for (;;) {
    while (i < s.size() && is_space(s[i])) ++i;
    if (i >= s.size()) return need_more();
    if (s[i] == '>') {
      ++i;
      break;
    }
    if (!is_name_char(s[i])) return bad(i);
    std::string key;
    while (i < s.size() && is_name_char(s[i])) key += s[i++];
    if (i >= s.size()) return need_more();
    if (s[i] != '=') return bad(i);
    ++i;
    if (i >= s.size()) return need_more();
    if (s[i] != '"') return bad(i);
    const size_t q = s.find('"', i + 1);
    if (q == std::string_view::npos) return need_more();
    tag.attrs.emplace_back(key, std::string(s.substr(i + 1, q - i - 1)));
    i = q + 1;
  }
  len = i;
  tag.raw = std::string(s.substr(0, i));
  if (tag.name == "tool_calls" || tag.name == "function_calls" || tag.name == "calls") tag.kind = Tag::Block;
  else if (tag.name == "invoke") tag.kind = Tag::Invoke;
  else if (tag.name == "parameter") tag.kind = Tag::Param;
  return 1;
}

// Between tags inside a block or an invoke.
bool OutputParser::step_markup(bool final, std::vector<ChatEvent>& out) {
  size_t i = 0;
  while (i < buf_.size() && is_space(buf_[i])) ++i;
  buf_.erase(0, i);
  if (buf_.empty()) return false;
  const std::string_view s = buf_;
  if (starts_with(s, kEosV)) {
    buf_.clear();
    if (state_ == State::Invoke) fail_call("end of sentence inside invoke (missing </invoke>)", out);
    else if (block_explicit_) error("end of sentence inside the tool-calls block (missing closing tag)", out);
    state_ = State::Done;
    return true;
  }
  if (starts_with(s, kOpen) || starts_with(s, kClose)) {
    Tag tag;
    size_t len = 0;
    const int r = read_tag(final, tag, len);
    if (r == 0) return false;
    const std::string raw = buf_.substr(0, len);
    buf_.erase(0, len);
    if (r < 0) {
      if (state_ == State::Invoke) fail_call("malformed DSML tag: " + snippet(raw), out);
      else {
        error("malformed DSML tag: " + snippet(raw), out);
        state_ = State::Skip;
      }
      return true;
    }
    handle_tag(tag, out);
    return true;
  }
  if (!final && (starts_with(kOpen, s) || starts_with(kClose, s) || starts_with(kEosV, s))) return false;
  // Plain text where only markup may appear.
  if (state_ == State::Block && !block_explicit_) {
    state_ = State::Content;  // an invoke written without a block opener, followed by text
    return true;
  }
  // (The message names no text: how much of it has arrived depends on the chunking.)
  if (state_ == State::Invoke) fail_call("unexpected text inside invoke", out);
  else {
    error("unexpected text inside the tool-calls block", out);
    state_ = State::Skip;
  }
  return true;
}

void OutputParser::handle_tag(const Tag& tag, std::vector<ChatEvent>& out) {
  if (state_ == State::Block) {
    switch (tag.kind) {
      case Tag::Block:
        if (tag.closing) {
          state_ = State::AfterBlock;
        } else if (!block_explicit_ && !calls_in_block_) {
          block_explicit_ = true;
        } else {
          error("nested tool-calls block opener: " + snippet(tag.raw), out);
        }
        return;
      case Tag::Invoke:
        if (tag.closing) {
          error("stray closing invoke tag", out);
          return;
        }
        if (const std::string* name = tag.attr("name")) {
          begin_call(*name, out);
        } else {
          error("invoke tag without a name: " + snippet(tag.raw), out);
          state_ = State::Skip;
        }
        return;
      case Tag::Param:
        error("parameter outside of an invoke: " + snippet(tag.raw), out);
        if (!tag.closing) state_ = State::Skip;
        return;
      case Tag::Unknown:
        error("unknown DSML tag: " + snippet(tag.raw), out);
        return;
    }
  }
  // Inside an invoke.
  switch (tag.kind) {
    case Tag::Param: {
      if (tag.closing) {
        fail_call("stray closing parameter tag", out);
        return;
      }
      const std::string* name = tag.attr("name");
      const std::string* str = tag.attr("string");
      if (!name || !str || (*str != "true" && *str != "false")) {
        fail_call("malformed parameter tag: " + snippet(tag.raw), out);
        return;
      }
      if (!param_names_.insert(*name).second) {
        fail_call("duplicate parameter name '" + *name + "'", out);
        return;
      }
      param_name_ = *name;
      param_string_ = *str == "true";
      param_raw_.clear();
      std::string head = param_names_.size() > 1 ? ", " : "";
      head += '"';
      py_json_escape_to(*name, head);
      head += "\": ";
      if (param_string_) head += '"';
      emit(ChatEventKind::ToolCallArguments, std::move(head), out, call_);
      state_ = State::Value;
      return;
    }
    case Tag::Invoke:
      if (tag.closing) {
        emit(ChatEventKind::ToolCallArguments, "}", out, call_);
        emit(ChatEventKind::ToolCallEnd, "", out, call_);
        call_ = -1;
        state_ = State::Block;
        return;
      }
      fail_call("missing closing invoke tag before the next invoke", out);
      state_ = State::Block;
      handle_tag(tag, out);
      return;
    case Tag::Block:
      if (tag.closing) {
        fail_call("missing closing invoke tag before the end of the block", out);
        state_ = State::AfterBlock;
        return;
      }
      fail_call("tool-calls block opener inside an invoke", out);
      return;
    case Tag::Unknown: fail_call("unknown DSML tag: " + snippet(tag.raw), out); return;
  }
}

// Parameter value: streamed as argument deltas until </｜DSML｜parameter>.
bool OutputParser::step_value(bool final, std::vector<ChatEvent>& out) {
  auto send = [&](std::string_view v) {
    if (v.empty()) return;
    std::string delta;
    if (param_string_) py_json_escape_to(v, delta);
    else {
      delta.assign(v);
      param_raw_.append(v);
    }
    emit(ChatEventKind::ToolCallArguments, std::move(delta), out, call_);
  };
  const Hit h = find_first(buf_, kValueMarkers);
  if (!h.m) {
    // At the end of the output the value is cut: a partial tag there is the start of its
    // closing tag (or of other markup), not text.
    size_t cut = buf_.size() - partial_suffix(buf_, kValueMarkers);
    if (!final) cut = utf8_cut(buf_, cut);
    send(std::string_view(buf_).substr(0, cut));
    buf_.erase(0, cut);
    return false;
  }
  send(std::string_view(buf_).substr(0, h.pos));
  buf_.erase(0, h.pos);
  if (h.m->kind == kEosM) {
    buf_.clear();
    fail_call("end of sentence inside parameter '" + param_name_ + "'", out);
    state_ = State::Done;
    return true;
  }
  Tag tag;
  size_t len = 0;
  const int r = read_tag(final, tag, len);
  if (r == 0) return false;
  if (r > 0 && tag.kind == Tag::Param && tag.closing) {
    buf_.erase(0, len);
    if (param_string_) {
      emit(ChatEventKind::ToolCallArguments, "\"", out, call_);
    } else if (!Json::accept(param_raw_)) {
      fail_call("parameter '" + param_name_ + "' has string=\"false\" but its value is not JSON: " +
                    snippet(param_raw_),
                out);
      return true;
    }
    state_ = State::Invoke;
    return true;
  }
  // Any other tag ends the value without closing it; Skip re-reads the tag.
  fail_call("parameter '" + param_name_ + "' is not closed", out);
  return true;
}

// Error recovery: drop everything up to the next invoke opener or block end.
bool OutputParser::step_skip(bool final, std::vector<ChatEvent>& out) {
  const Hit h = find_first(buf_, kValueMarkers);
  if (!h.m) {
    size_t keep = final ? 0 : partial_suffix(buf_, kValueMarkers);
    buf_.erase(0, buf_.size() - keep);
    return false;
  }
  buf_.erase(0, h.pos);
  if (h.m->kind == kEosM) {
    buf_.clear();
    state_ = State::Done;
    return true;
  }
  Tag tag;
  size_t len = 0;
  const int r = read_tag(final, tag, len);
  if (r == 0) return false;
  if (r > 0 && tag.kind == Tag::Invoke && !tag.closing) {
    state_ = State::Block;  // step_markup reads the tag again
    return true;
  }
  buf_.erase(0, std::max<size_t>(len, 1));
  if (r > 0 && tag.kind == Tag::Block && tag.closing) state_ = State::AfterBlock;
  return true;
}

// ------------------------------------------------------------------ results

void OutputAccumulator::add(const ChatEvent& e) {
  auto call = [&](int i) -> Call& {
    if (i >= int(calls_.size())) calls_.resize(size_t(i) + 1);
    return calls_[size_t(i)];
  };
  switch (e.kind) {
    case ChatEventKind::Content: out_.content += e.text; break;
    case ChatEventKind::Reasoning: out_.reasoning_content += e.text; break;
    case ChatEventKind::ToolCallBegin: call(e.tool_index).name = e.text; break;
    case ChatEventKind::ToolCallArguments: call(e.tool_index).arguments += e.text; break;
    case ChatEventKind::ToolCallEnd: call(e.tool_index).done = true; break;
    case ChatEventKind::Error:
      out_.errors.push_back(e.text);
      if (e.tool_index >= 0) (e.cut ? call(e.tool_index).cut : call(e.tool_index).failed) = true;
      break;
  }
}

ParsedOutput OutputAccumulator::result() const {
  ParsedOutput p = out_;
  for (const auto& c : calls_) {
    if (c.done && !c.failed) p.tool_calls.push_back({c.name, c.arguments});
    if (c.cut && !c.done && !c.failed) p.cut_tool_calls.push_back({c.name, c.arguments});
  }
  return p;
}

ParsedOutput parse_output(ChatFamily family, std::string_view text, bool thinking) {
  OutputParser parser(family, thinking);
  OutputAccumulator acc;
  acc.add(parser.feed(text));
  acc.add(parser.finish());
  return acc.result();
}

std::string parsed_output_json(const ParsedOutput& p) {
  Json j = Json::object();
  j["content"] = p.content;
  j["reasoning_content"] = p.reasoning_content;
  j["tool_calls"] = Json::array();
  for (const auto& c : p.tool_calls) j["tool_calls"].push_back(Json{{"name", c.name}, {"arguments", c.arguments}});
  return py_json_dumps(j);
}

}  // namespace deepinfer::chat
