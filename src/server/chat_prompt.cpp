#include "server/chat_prompt.h"

#include <algorithm>
#include <optional>
#include <stdexcept>

#include "server/errors.h"
#include "server/structured_output.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer::server {

namespace {

using chat::Json;

[[noreturn]] void bad(const std::string& msg, const std::string& param) { bad_request(msg, param); }
const Json* find(const Json& o, const char* key) { return find_field(o, key); }

// Text parts joined; other part types are refused rather than silently dropped.
Json flatten_content(const Json& content, const std::string& where) {
  if (!content.is_array()) return content;
  std::string text;
  for (const auto& part : content) {
    const Json* type = find(part, "type");
    const Json* t = find(part, "text");
    if (!type || !type->is_string() || *type != "text" || !t || !t->is_string())
      bad("only text content parts are supported (in " + where + ")", "messages");
    text += t->get<std::string>();
  }
  return text;
}

Json checked_messages(const Json& body) {
  const Json* m = find(body, "messages");
  if (!m) bad("'messages' is required", "messages");
  if (!m->is_array() || m->empty()) bad("'messages' must be a non-empty array", "messages");
  Json out = Json::array();
  for (size_t i = 0; i < m->size(); ++i) {
    const Json& msg = (*m)[i];
    const std::string where = "messages[" + std::to_string(i) + "]";
    if (!msg.is_object()) bad(where + " must be an object", "messages");
    const Json* role = find(msg, "role");
    if (!role || !role->is_string()) bad(where + ".role must be a string", "messages");
    Json copy = msg;
    if (const Json* c = find(msg, "content")) copy["content"] = flatten_content(*c, where);
    out.push_back(std::move(copy));
  }
  return out;
}

bool truthy_flag(const Json& v) { return v.is_boolean() ? v.get<bool>() : false; }

// thinking on/off and the effort, from every spelling clients use.
void thinking_options(const Json& body, bool* thinking, Json* effort) {
  std::optional<bool> explicit_thinking;
  if (const Json* t = find(body, "thinking")) {
    if (t->is_boolean()) explicit_thinking = t->get<bool>();
    else if (const Json* type = find(*t, "type"); type && type->is_string()) explicit_thinking = *type == "enabled";
    else bad("'thinking' must be a boolean or {\"type\": \"enabled\" | \"disabled\"}", "thinking");
  }
  *effort = nullptr;
  if (const Json* e = find(body, "reasoning_effort")) *effort = *e;
  if (const Json* k = find(body, "chat_template_kwargs")) {
    if (!k->is_object()) bad("'chat_template_kwargs' must be an object", "chat_template_kwargs");
    if (const Json* t = find(*k, "thinking")) explicit_thinking = truthy_flag(*t);
    if (const Json* t = find(*k, "enable_thinking")) explicit_thinking = truthy_flag(*t);
    if (const Json* t = find(*k, "thinking_mode"); t && t->is_string()) explicit_thinking = *t == "thinking";
    if (const Json* e = find(*k, "reasoning_effort")) *effort = *e;
  }
  if (effort->is_string() && *effort == "none") {
    *effort = nullptr;
    if (!explicit_thinking) explicit_thinking = false;
  }
  *thinking = explicit_thinking.value_or(!effort->is_null());
}

// Tools and response_format live on a system message in the reference encoders.
void attach_system_extras(const Json& body, Json& messages) {
  Json tools;
  if (const Json* t = find(body, "tools")) {
    if (!t->is_array()) bad("'tools' must be an array", "tools");
    bool none = false;
    if (const Json* c = find(body, "tool_choice")) none = c->is_string() && *c == "none";
    if (!none && !t->empty()) tools = *t;
  }
  Json format;
  if (const Json* f = find(body, "response_format")) {
    if (!f->is_object()) bad("'response_format' must be an object", "response_format");
    const Json* type = find(*f, "type");
    if (!type || !type->is_string() || (*type != "text" && *type != "json_object" && *type != "json_schema"))
      bad("response_format.type must be text, json_object or json_schema", "response_format");
    if (*type != "text") format = *f;
  }
  if (tools.is_null() && format.is_null()) return;
  if (!(messages[0]["role"] == "system")) messages.insert(messages.begin(), Json{{"role", "system"}, {"content", ""}});
  if (!tools.is_null()) messages[0]["tools"] = tools;
  if (!format.is_null()) messages[0]["response_format"] = format;
}

}  // namespace

const Json* find_field(const Json& o, const char* key) {
  if (!o.is_object()) return nullptr;
  auto it = o.find(key);
  return it == o.end() || it->is_null() ? nullptr : &*it;
}

void bad_request(const std::string& msg, const std::string& param) {
  throw ApiError(ErrorCode::kInvalidRequest, msg, param);
}

// OpenAI clients send reasoning_effort as minimal / low / medium / high / xhigh; DeepSeek's
// encoders take a narrower set (V4: high, max; V4-0731 and V4.1: low, high, max; V4.1 also
// 1..100). Map the OpenAI names onto the nearest level the family has; anything else goes to
// the encoder as given, which rejects what the reference would.
Json family_effort(chat::ChatFamily family, const Json& effort) {
  if (!effort.is_string()) return effort;
  const std::string e = effort.get<std::string>();
  const bool two_levels = family == chat::ChatFamily::V4;
  if (e == "minimal" || e == "low") return two_levels ? "high" : "low";
  if (e == "medium") return "high";
  if (e == "xhigh") return "max";
  return effort;
}

// Tokens up to and including the last assistant-role marker of the template: where the next
// turn, which renders this answer differently, diverges. With the marker a special token of
// the vocabulary that is an exact token boundary; a tokenizer without it may merge across
// it, so the common prefix of both tokenizations is taken (a wrong guess only costs a miss:
// hits compare tokens).
static int64_t answer_start(const tokenizer::Tokenizer& tok, const chat::RenderedPrompt& rendered,
                     const std::vector<int32_t>& ids, bool trusted) {
  const std::string marker = chat::kAssistant;
  for (size_t i = rendered.pieces.size(); i-- > 0;) {
    const chat::PromptPiece& piece = rendered.pieces[i];
    const size_t at = piece.from_template ? piece.text.rfind(marker) : std::string::npos;
    if (at == std::string::npos) continue;
    chat::RenderedPrompt head;
    head.pieces.assign(rendered.pieces.begin(), rendered.pieces.begin() + long(i));
    head.pieces.push_back({piece.text.substr(0, at + marker.size()), true});
    const std::vector<int32_t> h = chat::tokenize_prompt(tok, head, trusted);
    const size_t n = size_t(std::mismatch(h.begin(), h.end(), ids.begin(), ids.end()).first - h.begin());
    return n < ids.size() ? int64_t(n) : 0;
  }
  return 0;
}

ChatPrompt build_chat_prompt(const Backend& b, const Json& body, bool trusted_special_tokens) {
  if (b.chat_family.empty() || !b.tokenizer)
    throw ApiError(ErrorCode::kInvalidRequest, "this model has no chat template or tokenizer; use /v1/completions");
  ChatPrompt p;
  p.family = *chat::parse_family(b.chat_family);
  Json messages = checked_messages(body);
  attach_system_extras(body, messages);
  Json effort;
  thinking_options(body, &p.thinking, &effort);
  chat::EncodeOptions opt;
  opt.thinking_mode = p.thinking ? "thinking" : "chat";
  opt.reasoning_effort = family_effort(p.family, effort);
  if (const Json* k = find(body, "chat_template_kwargs"))
    if (const Json* d = find(*k, "drop_thinking")) opt.drop_thinking = *d;
  chat::RenderedPrompt rendered;
  try {
    rendered = chat::render_messages(p.family, messages, opt);
  } catch (const std::invalid_argument& e) {
    throw ApiError(ErrorCode::kInvalidRequest, std::string("the chat template rejected the messages: ") + e.what(),
                   "messages");
  } catch (const nlohmann::json::exception& e) {
    throw ApiError(ErrorCode::kInvalidRequest, std::string("malformed messages: ") + e.what(), "messages");
  }
  p.ids = chat::tokenize_prompt(*b.tokenizer, rendered, trusted_special_tokens || b.trusted_special_tokens);
  p.constraint = output_constraint(b, body, p.family, p.thinking);
  if (const int64_t at = answer_start(*b.tokenizer, rendered, p.ids, trusted_special_tokens || b.trusted_special_tokens);
      at > 0)
    p.cache_points.push_back(at);
  return p;
}

}  // namespace deepinfer::server
