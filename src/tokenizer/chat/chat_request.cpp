#include "tokenizer/chat/chat_request.h"

#include <optional>

namespace deepinfer::chat {

namespace {

[[noreturn]] void bad(const std::string& msg, const std::string& param) { throw RequestError(msg, param); }

// o[key] when o is an object with a non-null `key`, else null.
const Json* find(const Json& o, const char* key) {
  if (!o.is_object()) return nullptr;
  auto it = o.find(key);
  return it == o.end() || it->is_null() ? nullptr : &*it;
}

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

// OpenAI clients send reasoning_effort as minimal / low / medium / high / xhigh; DeepSeek's
// encoders take a narrower set (V4: high, max; V4-0731 and V4.1: low, high, max; V4.1 also
// 1..100). Map the OpenAI names onto the nearest level the family has; anything else goes to
// the encoder as given, which rejects what the reference would.
Json family_effort(ChatFamily family, const Json& effort) {
  if (!effort.is_string()) return effort;
  const std::string e = effort.get<std::string>();
  const bool two_levels = family == ChatFamily::V4;
  if (e == "minimal" || e == "low") return two_levels ? "high" : "low";
  if (e == "medium") return "high";
  if (e == "xhigh") return "max";
  return effort;
}

}  // namespace

ChatRequest chat_request(ChatFamily family, const Json& body) {
  ChatRequest r;
  r.messages = checked_messages(body);
  attach_system_extras(body, r.messages);
  Json effort;
  thinking_options(body, &r.thinking, &effort);
  r.options.thinking_mode = r.thinking ? "thinking" : "chat";
  r.options.reasoning_effort = family_effort(family, effort);
  if (const Json* k = find(body, "chat_template_kwargs"))
    if (const Json* d = find(*k, "drop_thinking")) r.options.drop_thinking = *d;
  return r;
}

RenderedPrompt render_chat_request(ChatFamily family, const Json& body, bool* thinking) {
  const ChatRequest r = chat_request(family, body);
  if (thinking) *thinking = r.thinking;
  try {
    return render_messages(family, r.messages, r.options);
  } catch (const std::invalid_argument& e) {
    throw RequestError(std::string("the chat template rejected the messages: ") + e.what(), "messages");
  } catch (const nlohmann::json::exception& e) {
    throw RequestError(std::string("malformed messages: ") + e.what(), "messages");
  }
}

}  // namespace deepinfer::chat
