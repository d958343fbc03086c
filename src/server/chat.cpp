// POST /v1/chat/completions: DeepSeek-V4 prompt rendering (chat_prompt.h), generation,
// and the output split into reasoning_content, content and tool calls by the streaming
// DSML / reasoning parser (tokenizer/chat/output_parser.h).
#include "core/log.h"
#include "server/chat_prompt.h"
#include "server/common.h"
#include "server/errors.h"
#include "server/params.h"
#include "server/routes.h"
#include "tokenizer/chat/output_parser.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer::server {

namespace {

json chat_logprobs(const Backend& b, const std::vector<GeneratedToken>& toks) {
  auto entry = [&](int32_t id, float lp) {
    const std::string s = token_text(b, id);
    json bytes = json::array();
    for (unsigned char c : s) bytes.push_back(int(c));
    return json{{"token", s}, {"logprob", json_logprob(lp)}, {"bytes", bytes}};
  };
  json content = json::array();
  for (const GeneratedToken& t : toks) {
    json e = entry(t.token, t.logprob);
    json top = json::array();
    for (const TokenLogprob& a : t.top) top.push_back(entry(a.token, a.logprob));
    e["top_logprobs"] = top;
    content.push_back(e);
  }
  return json{{"content", content}};
}

std::string finish_name(const StreamEvent& e, bool tool_calls) {
  if (e.finish_reason == FinishReason::kStop && tool_calls) return "tool_calls";
  return finish_reason_name(e.finish_reason);
}

// Streaming state: ids assigned to tool calls as the parser announces them.
struct ChatStreamState {
  std::unique_ptr<chat::OutputParser> parser;
  std::unique_ptr<TextDecoder> decoder;
  std::vector<std::string> call_ids;
  bool any_call = false;
};

json delta_of(ChatStreamState& st, const std::vector<chat::ChatEvent>& events) {
  json delta = json::object();
  std::string content, reasoning;
  json calls = json::array();
  for (const chat::ChatEvent& e : events) {
    switch (e.kind) {
      case chat::ChatEventKind::Content: content += e.text; break;
      case chat::ChatEventKind::Reasoning: reasoning += e.text; break;
      case chat::ChatEventKind::ToolCallBegin:
        st.any_call = true;
        st.call_ids.resize(size_t(e.tool_index + 1));
        st.call_ids[size_t(e.tool_index)] = random_id("call_");
        calls.push_back({{"index", e.tool_index},
                         {"id", st.call_ids[size_t(e.tool_index)]},
                         {"type", "function"},
                         {"function", {{"name", e.text}, {"arguments", ""}}}});
        break;
      case chat::ChatEventKind::ToolCallArguments:
        calls.push_back({{"index", e.tool_index}, {"function", {{"arguments", e.text}}}});
        break;
      case chat::ChatEventKind::ToolCallEnd: break;
      case chat::ChatEventKind::Error: log_warn("chat output: %s", e.text.c_str()); break;
    }
  }
  if (!reasoning.empty()) delta["reasoning_content"] = reasoning;
  if (!content.empty()) delta["content"] = content;
  if (!calls.empty()) delta["tool_calls"] = calls;
  return delta;
}

json message_of(const chat::ParsedOutput& out, bool thinking) {
  json calls = json::array();
  for (const auto& c : out.tool_calls)
    calls.push_back({{"id", random_id("call_")},
                     {"type", "function"},
                     {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
  json m = {{"role", "assistant"},
            {"content", out.content.empty() && !calls.empty() ? json(nullptr) : json(out.content)},
            {"tool_calls", calls}};
  if (thinking || !out.reasoning_content.empty()) m["reasoning_content"] = out.reasoning_content;
  return m;
}

}  // namespace

void handle_chat(BackendPtr bp, const ServerOptions& o, const httplib::Request& req, httplib::Response& res) {
  const Backend& b = *bp;
  const json body = parse_body(req.body);
  check_model(body, b);
  const RequestOptions ro = parse_request_options(body, Api::kChat);
  const bool skip_special = get_bool(body, "skip_special_tokens").value_or(false);  // the parser needs </think>
  const ChatPrompt cp = build_chat_prompt(b, chat::Json::parse(req.body));
  GenerateRequest g{cp.ids, ro.sampling};
  g.params.constraint = cp.constraint;
  const Status s = b.engine->validate(g);
  if (!s.ok()) throw ApiError(s);
  const std::vector<std::string> stops = g.params.stop;
  const bool logprobs = g.params.logprobs >= 0;
  auto stream = b.engine->submit(std::move(g));
  const std::string id = random_id("chatcmpl-");
  const int64_t created = unix_time();
  auto envelope = [bp, id, created](const char* object) {
    return json{{"id", id}, {"object", object}, {"created", created}, {"model", bp->model_id}};
  };

  if (!ro.stream) {
    Collected c = collect(*stream);
    TextDecoder dec(b, stops, skip_special);
    std::string text = dec.push(c.tokens);
    text += dec.finish();  // after push: the order of operands of + is unspecified
    const chat::ParsedOutput out = chat::parse_output(cp.family, text, cp.thinking);
    for (const auto& e : out.errors) log_warn("chat output: %s", e.c_str());
    json choice = {{"index", 0},
                   {"message", message_of(out, cp.thinking)},
                   {"logprobs", logprobs ? chat_logprobs(b, c.tokens) : json(nullptr)},
                   {"finish_reason", finish_name(c.last, !out.tool_calls.empty())}};
    json r = envelope("chat.completion");
    r["choices"] = json::array({choice});
    r["usage"] = usage_json(c.last.usage);
    send_json(res, r);
    return;
  }

  auto st = std::make_shared<ChatStreamState>();
  st->parser = std::make_unique<chat::OutputParser>(cp.family, cp.thinking);
  st->decoder = std::make_unique<TextDecoder>(b, stops, skip_special);
  auto job = std::make_shared<SseJob>();
  job->stream = stream;
  auto chunk = [envelope](json delta, json finish, json lp) {
    json c = envelope("chat.completion.chunk");
    c["choices"] = json::array({json{{"index", 0}, {"delta", std::move(delta)}, {"logprobs", std::move(lp)},
                                     {"finish_reason", std::move(finish)}}});
    return c;
  };
  job->on_start = [chunk](httplib::DataSink& sink) {
    return sse_write(sink, chunk(json{{"role", "assistant"}, {"content", ""}}, nullptr, nullptr));
  };
  const bool usage = ro.include_usage;
  job->on_event = [=](httplib::DataSink& sink, StreamEvent& ev) {
    if (ev.finish_reason == FinishReason::kError)
      return sse_write_raw(sink, "data: " + error_json(ev.error) + "\n\n") && sse_write_raw(sink, "data: [DONE]\n\n");
    std::string text = st->decoder->push(ev.tokens);
    if (ev.finished) text += st->decoder->finish();
    std::vector<chat::ChatEvent> events = st->parser->feed(text);
    if (ev.finished) st->parser->finish(events);
    json delta = delta_of(*st, events);
    const json lp = logprobs ? chat_logprobs(*bp, ev.tokens) : json(nullptr);
    if (!delta.empty() || ev.finished || logprobs) {
      const json finish = ev.finished ? json(finish_name(ev, st->any_call)) : json(nullptr);
      if (!sse_write(sink, chunk(std::move(delta), finish, lp))) return false;
    }
    if (!ev.finished) return true;
    if (usage) {
      json u = envelope("chat.completion.chunk");
      u["choices"] = json::array();
      u["usage"] = usage_json(ev.usage);
      if (!sse_write(sink, u)) return false;
    }
    return sse_write_raw(sink, "data: [DONE]\n\n");
  };
  start_sse(res, job, o.sse_keepalive);
}

}  // namespace deepinfer::server
