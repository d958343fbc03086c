// POST /v1/messages: the Anthropic Messages API over the same engine and chat encoders.
// The request is translated into the OpenAI chat shape build_chat_prompt() reads:
//   system (string or text blocks)   -> a system message
//   user text / tool_result blocks   -> tool messages (tool_call_id = tool_use_id), then a
//                                       user message with the text
//   assistant text / thinking / tool_use blocks -> content, reasoning_content, tool_calls
//   tools [{name, description, input_schema, strict}] -> OpenAI function tools (under "auto"
//     a call names one of them; a strict one's input follows its schema: structured_output.h)
//   thinking {"type": "enabled" | "adaptive"} -> thinking mode; stop_sequences -> stop
//   tool_choice {"type": "any"} -> "required", {"type": "tool", "name": X} -> named X
//     (both enforced, structured_output.h), disable_parallel_tool_use -> one call
// The answer is content blocks (thinking, text, tool_use) with Anthropic stop reasons;
// streaming uses the message_start / content_block_* / message_delta / message_stop events.
// Errors use Anthropic's {"type": "error", "error": {...}} body with the usual status.
#include <optional>

#include "core/log.h"
#include "server/chat_prompt.h"
#include "server/common.h"
#include "server/errors.h"
#include "core/json_limits.h"
#include "server/params.h"
#include "server/routes.h"
#include "tokenizer/chat/output_parser.h"

namespace deepinfer::server {

namespace {

using chat::Json;

[[noreturn]] void bad(const std::string& msg, const std::string& param = {}) {
  throw ApiError(ErrorCode::kInvalidRequest, msg, param);
}

std::string text_of_blocks(const Json& content, const char* where) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) bad(std::string(where) + " must be a string or an array of blocks");
  std::string s;
  for (const auto& b : content)
    if (b.is_object() && b.value("type", "") == "text" && b.contains("text") && b["text"].is_string())
      s += b["text"].get<std::string>();
  return s;
}

void add_user(const Json& m, Json& out) {
  const Json& content = m["content"];
  if (content.is_string()) {
    out.push_back(Json{{"role", "user"}, {"content", content}});
    return;
  }
  if (!content.is_array()) bad("message content must be a string or an array of blocks", "messages");
  std::string text;
  for (const auto& b : content) {
    const std::string type = b.is_object() ? b.value("type", "") : "";
    if (type == "text") {
      text += b.value("text", "");
    } else if (type == "tool_result") {
      const Json c = b.contains("content") ? b["content"] : Json("");
      out.push_back(Json{{"role", "tool"}, {"tool_call_id", b.value("tool_use_id", "")},
                         {"content", text_of_blocks(c, "tool_result content")}});
    } else {
      bad("unsupported content block type '" + type + "'", "messages");
    }
  }
  if (!text.empty()) out.push_back(Json{{"role", "user"}, {"content", text}});
}

void add_assistant(const Json& m, Json& out) {
  const Json& content = m["content"];
  Json msg = {{"role", "assistant"}, {"content", ""}};
  if (content.is_string()) {
    msg["content"] = content;
    out.push_back(msg);
    return;
  }
  if (!content.is_array()) bad("message content must be a string or an array of blocks", "messages");
  std::string text, reasoning;
  Json calls = Json::array();
  for (const auto& b : content) {
    const std::string type = b.is_object() ? b.value("type", "") : "";
    if (type == "text") text += b.value("text", "");
    else if (type == "thinking") reasoning += b.value("thinking", "");
    else if (type == "redacted_thinking") continue;
    else if (type == "tool_use")
      calls.push_back(Json{{"id", b.value("id", "")}, {"type", "function"},
                           {"function", {{"name", b.value("name", "")},
                                         {"arguments", chat::py_json_dumps(b.contains("input") ? b["input"] : Json::object())}}}});
    else bad("unsupported content block type '" + type + "'", "messages");
  }
  msg["content"] = text;
  if (!reasoning.empty()) msg["reasoning_content"] = reasoning;
  if (!calls.empty()) msg["tool_calls"] = calls;
  out.push_back(msg);
}

// {"type": "auto" | "any" | "none"} or {"type": "tool", "name": X} as OpenAI's tool_choice
// ("any" = "required"). disable_parallel_tool_use is read by to_openai().
Json tool_choice(const Json& c) {
  const std::string type = c.is_object() ? c.value("type", "") : "";
  if (type == "auto" || type == "none") return type;
  if (type == "any") return "required";
  if (type == "tool" && c.contains("name") && c["name"].is_string())
    return Json{{"type", "function"}, {"function", {{"name", c["name"]}}}};
  bad("tool_choice must be {\"type\": \"auto\" | \"any\" | \"none\"} or {\"type\": \"tool\", \"name\": ...}",
      "tool_choice");
}

// output_config.format (or the beta's top-level output_format) {"type": "json_schema",
// "schema": S} as OpenAI's response_format, which the chat prompt renders and the structured
// output machinery enforces. Null when the request asks for no format.
std::optional<Json> output_format(const Json& a) {
  const Json* f = nullptr;
  if (const Json* oc = find_field(a, "output_config")) {
    if (!oc->is_object()) bad("'output_config' must be an object", "output_config");
    f = find_field(*oc, "format");
  }
  if (!f) f = find_field(a, "output_format");
  if (!f) return std::nullopt;
  const Json* type = find_field(*f, "type");
  if (!f->is_object() || !type || !type->is_string() || *type != "json_schema")
    bad("output_config.format must be {\"type\": \"json_schema\", \"schema\": {...}}", "output_config.format");
  const Json* schema = find_field(*f, "schema");
  if (!schema || !schema->is_object()) bad("output_config.format.schema must be an object", "output_config.format");
  return Json{{"type", "json_schema"}, {"json_schema", {{"name", "output"}, {"schema", *schema}}}};
}

// The Anthropic request as the OpenAI chat body build_chat_prompt() understands.
Json to_openai(const Json& a) {
  Json o = Json::object();
  Json msgs = Json::array();
  if (a.contains("system") && !a["system"].is_null())
    msgs.push_back(Json{{"role", "system"}, {"content", text_of_blocks(a["system"], "system")}});
  if (!a.contains("messages") || !a["messages"].is_array() || a["messages"].empty())
    bad("'messages' must be a non-empty array", "messages");
  for (const auto& m : a["messages"]) {
    if (!m.is_object() || !m.contains("role") || !m.contains("content")) bad("each message needs role and content", "messages");
    if (m["role"] == "user") add_user(m, msgs);
    else if (m["role"] == "assistant") add_assistant(m, msgs);
    else bad("message role must be user or assistant", "messages");
  }
  o["messages"] = msgs;
  if (a.contains("tools") && a["tools"].is_array()) {
    Json tools = Json::array();
    for (const auto& t : a["tools"]) {
      if (!t.is_object() || !t.contains("name")) bad("each tool needs a name", "tools");
      Json f = {{"name", t["name"]}};
      if (t.contains("description")) f["description"] = t["description"];
      f["parameters"] = t.contains("input_schema") ? t["input_schema"] : Json::object();
      if (t.contains("strict")) f["strict"] = t["strict"];  // structured outputs: the input follows the schema
      tools.push_back(Json{{"type", "function"}, {"function", f}});
    }
    o["tools"] = tools;
  }
  if (a.contains("tool_choice") && !a["tool_choice"].is_null()) o["tool_choice"] = tool_choice(a["tool_choice"]);
  if (a.contains("tool_choice") && a["tool_choice"].is_object() &&
      a["tool_choice"].value("disable_parallel_tool_use", false) == true)
    o["parallel_tool_calls"] = false;
  // "adaptive" (the model decides whether and how much to think) is DeepSeek's thinking mode;
  // "enabled" with a budget_tokens too (the budget is not enforced: max_tokens bounds it).
  if (a.contains("thinking") && a["thinking"].is_object()) {
    const std::string type = a["thinking"].value("type", "");
    o["thinking"] = type == "enabled" || type == "adaptive";
  }
  if (auto f = output_format(a)) o["response_format"] = std::move(*f);
  return o;
}

// Sampling fields under their OpenAI names, for parse_request_options().
Json sampling_body(const Json& a) {
  if (!a.contains("max_tokens")) bad("'max_tokens' is required", "max_tokens");
  Json o = Json::object();
  for (const char* k : {"max_tokens", "temperature", "top_p", "top_k", "stream"})
    if (a.contains(k)) o[k] = a[k];
  if (a.contains("stop_sequences")) o["stop"] = a["stop_sequences"];
  return o;
}

const char* stop_reason(const StreamEvent& e, bool tool_use) {
  if (e.finish_reason == FinishReason::kLength) return "max_tokens";
  if (!e.stop_string.empty()) return "stop_sequence";
  return tool_use ? "tool_use" : "end_turn";
}

// Anthropic counts prompt tokens read from the cache apart: input_tokens +
// cache_read_input_tokens is the whole prompt.
json usage_of(const Usage& u) {
  return json{{"input_tokens", u.prompt_tokens - u.cached_tokens}, {"output_tokens", u.completion_tokens},
              {"cache_read_input_tokens", u.cached_tokens}};
}

bool event(httplib::DataSink& sink, const char* type, json data) {
  data["type"] = type;
  return sse_write_raw(sink, std::string("event: ") + type + "\ndata: " + dump(data) + "\n\n");
}

// Streaming: content blocks opened and closed as the output parser changes kind.
struct BlockStream {
  enum class Kind { kNone, kThinking, kText, kTool } kind = Kind::kNone;
  int index = -1;
  bool any_tool = false;

  bool close(httplib::DataSink& sink) {
    if (kind == Kind::kNone) return true;
    kind = Kind::kNone;
    return event(sink, "content_block_stop", {{"index", index}});
  }
  bool open(httplib::DataSink& sink, Kind k, json block) {
    if (!close(sink)) return false;
    kind = k;
    ++index;
    return event(sink, "content_block_start", {{"index", index}, {"content_block", std::move(block)}});
  }
  bool feed(httplib::DataSink& sink, const chat::ChatEvent& e) {
    switch (e.kind) {
      case chat::ChatEventKind::Reasoning:
        if (kind != Kind::kThinking && !open(sink, Kind::kThinking, {{"type", "thinking"}, {"thinking", ""}})) return false;
        return event(sink, "content_block_delta", {{"index", index}, {"delta", {{"type", "thinking_delta"}, {"thinking", e.text}}}});
      case chat::ChatEventKind::Content:
        if (kind != Kind::kText && !open(sink, Kind::kText, {{"type", "text"}, {"text", ""}})) return false;
        return event(sink, "content_block_delta", {{"index", index}, {"delta", {{"type", "text_delta"}, {"text", e.text}}}});
      case chat::ChatEventKind::ToolCallBegin:
        any_tool = true;
        return open(sink, Kind::kTool,
                    {{"type", "tool_use"}, {"id", random_id("toolu_")}, {"name", e.text}, {"input", json::object()}});
      case chat::ChatEventKind::ToolCallArguments:
        return event(sink, "content_block_delta",
                     {{"index", index}, {"delta", {{"type", "input_json_delta"}, {"partial_json", e.text}}}});
      case chat::ChatEventKind::ToolCallEnd: return close(sink);
      case chat::ChatEventKind::Error: log_warn("messages output: %s", e.text.c_str()); return true;
    }
    return true;
  }
};

// The input of a tool_use cut by max_tokens: its arguments are an unfinished JSON object (as
// the output parser streams them); what they hold so far, as a partial-JSON reader (the SDKs'
// stream accumulators) takes it: an open string value closed where it stops, a member without
// its value dropped, the containers closed. {} where nothing of it parses.
json cut_input(const std::string& a) {
  std::string closers;          // of the open containers, innermost last
  std::vector<bool> key_next;   // per open container: an object expecting a key
  bool in_str = false, str_is_key = false;
  int esc = 0;                  // in a string escape: -1 its letter, n > 0 \u digits left
  size_t esc_at = 0;
  size_t mark = 0, top = 0;     // ends of the last complete value, and of the last member
  std::string mark_closers, top_closers;
  auto value_done = [&](size_t end) {
    mark = end;
    mark_closers = closers;
    if (closers.size() == 1) top = end, top_closers = closers;
  };
  for (size_t i = 0; i < a.size(); ++i) {
    const char c = a[i];
    if (in_str) {
      if (esc < 0) esc = c == 'u' ? 4 : 0;
      else if (esc > 0) --esc;
      else if (c == '\\') esc = -1, esc_at = i;
      else if (c == '"') {
        in_str = false;
        if (!str_is_key) value_done(i + 1);
      }
      continue;
    }
    switch (c) {
      case '"': in_str = true, str_is_key = !key_next.empty() && key_next.back(); break;
      case '{':
      case '[':
        closers += c == '{' ? '}' : ']';
        key_next.push_back(c == '{');
        mark = i + 1, mark_closers = closers;
        break;
      case '}':
      case ']':
        if (closers.empty()) return json::object();
        closers.pop_back();
        key_next.pop_back();
        value_done(i + 1);
        break;
      case ':':
        if (!key_next.empty()) key_next.back() = false;
        break;
      case ',':
        if (!key_next.empty() && closers.back() == '}') key_next.back() = true;
        value_done(i);  // (a number or literal ended here; checked below)
        break;
      default: break;
    }
  }
  auto parsed = [](std::string text, const std::string& closing) -> std::optional<json> {
    text.append(closing.rbegin(), closing.rend());
    std::optional<json> j = parse_json_bounded<json>(text);
    return j && j->is_object() ? j : std::nullopt;
  };
  std::string whole = in_str && esc != 0 ? a.substr(0, esc_at) : a;
  if (in_str) whole += '"';
  for (auto j : {parsed(whole, closers), parsed(a.substr(0, mark), mark_closers), parsed(a.substr(0, top), top_closers)})
    if (j) return *j;
  return json::object();
}

json anthropic_error(const Status& s) {
  return json{{"type", "error"}, {"error", {{"type", error_type(s.code)}, {"message", s.message}}}};
}

void messages(BackendPtr bp, const ServerOptions& o, const httplib::Request& req, httplib::Response& res) {
  const Backend& b = *bp;
  const Json body = parse_body_ordered(req.body);
  check_model(body, b);
  const RequestOptions ro = parse_request_options(sampling_body(body), Api::kChat);
  // Special tokens hidden unless the client asks for them (as in chat).
  const bool skip_special = get_bool(body, "skip_special_tokens").value_or(true);
  const std::vector<int32_t> hidden = skip_special ? chat_hidden_tokens(b) : std::vector<int32_t>{};
  const ChatPrompt cp = build_chat_prompt(b, to_openai(body));
  GenerateRequest g{cp.ids, ro.sampling, cp.cache_points};
  g.params.constraint = cp.constraint;
  const Status s = b.engine->validate(g);
  if (!s.ok()) throw ApiError(s);
  const std::vector<std::string> stops = g.params.stop;
  auto stream = b.engine->submit(std::move(g));
  const std::string id = random_id("msg_");

  if (!ro.stream) {
    Collected c = collect(*stream);
    TextDecoder dec(b, stops, skip_special, hidden);
    std::string text = dec.push(c.tokens);
    text += dec.finish();
    const chat::ParsedOutput out = chat::parse_output(cp.family, text, cp.thinking);
    json content = json::array();
    if (!out.reasoning_content.empty())
      content.push_back({{"type", "thinking"}, {"thinking", out.reasoning_content}, {"signature", ""}});
    if (!out.content.empty()) content.push_back({{"type", "text"}, {"text", out.content}});
    for (const auto& call : out.tool_calls) {
      // Model output, held to the limits of a request's JSON (dumping the value recurses).
      const std::optional<json> input = parse_json_bounded<json>(call.arguments);
      content.push_back({{"type", "tool_use"}, {"id", random_id("toolu_")}, {"name", call.name},
                         {"input", input && input->is_object() ? *input : json::object()}});
    }
    // Cut by max_tokens inside a call: that tool_use as generated so far (a stream has sent it).
    if (c.last.finish_reason == FinishReason::kLength)
      for (const auto& call : out.cut_tool_calls)
        content.push_back({{"type", "tool_use"}, {"id", random_id("toolu_")}, {"name", call.name},
                           {"input", cut_input(call.arguments)}});
    send_json(res, json{{"id", id}, {"type", "message"}, {"role", "assistant"}, {"model", b.model_id},
                        {"content", content}, {"stop_reason", stop_reason(c.last, !out.tool_calls.empty())},
                        {"stop_sequence", c.last.stop_string.empty() ? json(nullptr) : json(c.last.stop_string)},
                        {"usage", usage_of(c.last.usage)}});
    return;
  }

  auto job = std::make_shared<SseJob>();
  job->streams = {stream};
  auto parser = std::make_shared<chat::OutputParser>(cp.family, cp.thinking);
  auto dec = std::make_shared<TextDecoder>(b, stops, skip_special, hidden);
  auto blocks = std::make_shared<BlockStream>();
  const std::string model = b.model_id;
  // message_start goes out with the first engine event: its usage is the first to know how
  // much of the prompt came from the prefix cache (until then, keep-alive comments).
  auto started = std::make_shared<bool>(false);
  job->on_error = [](httplib::DataSink& sink, const Status& s) {
    return event(sink, "error", {{"error", anthropic_error(s)["error"]}});
  };
  job->on_event = [=](httplib::DataSink& sink, StreamEvent& ev, size_t) {
    if (!*started) {
      *started = true;
      json usage = usage_of(ev.usage);
      usage["output_tokens"] = 0;
      json m = {{"id", id}, {"type", "message"}, {"role", "assistant"}, {"model", model}, {"content", json::array()},
                {"stop_reason", nullptr}, {"stop_sequence", nullptr}, {"usage", std::move(usage)}};
      if (!event(sink, "message_start", {{"message", m}})) return false;
    }
    std::string text = dec->push(ev.tokens);
    if (ev.finished) text += dec->finish();
    std::vector<chat::ChatEvent> events = parser->feed(text);
    if (ev.finished) parser->finish(events);
    for (const auto& e : events)
      if (!blocks->feed(sink, e)) return false;
    if (!ev.finished) return true;
    return blocks->close(sink) &&
           event(sink, "message_delta",
                 {{"delta", {{"stop_reason", stop_reason(ev, blocks->any_tool)},
                             {"stop_sequence", ev.stop_string.empty() ? json(nullptr) : json(ev.stop_string)}}},
                  {"usage", usage_of(ev.usage)}}) &&
           event(sink, "message_stop", json::object());
  };
  start_sse(res, job, o.sse_keepalive);
}

}  // namespace

void handle_messages(BackendPtr b, const ServerOptions& o, const httplib::Request& req, httplib::Response& res) {
  try {
    messages(std::move(b), o, req, res);
  } catch (const ApiError& e) {
    // Same status as everywhere (errors.cpp); Anthropic's body shape.
    res.status = http_status(e.status.code);
    res.set_content(dump(anthropic_error(e.status)), "application/json");
  }
}

void handle_count_tokens(BackendPtr bp, const ServerOptions&, const httplib::Request& req, httplib::Response& res) {
  try {
    const Backend& b = *bp;
    const Json body = parse_body_ordered(req.body);
    check_model(body, b);
    // The prompt exactly as /v1/messages would build it (tools, system, thinking, format).
    const ChatPrompt cp = build_chat_prompt(b, to_openai(body));
    send_json(res, json{{"input_tokens", cp.ids.size()}});
  } catch (const ApiError& e) {
    res.status = http_status(e.status.code);
    res.set_content(dump(anthropic_error(e.status)), "application/json");
  }
}

}  // namespace deepinfer::server
