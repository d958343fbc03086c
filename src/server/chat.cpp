// POST /v1/chat/completions: DeepSeek-V4 prompt rendering (chat_prompt.h), generation,
// and the output split into reasoning_content, content and tool calls by the streaming
// DSML / reasoning parser (tokenizer/chat/output_parser.h).
#include <algorithm>

#include "core/log.h"
#include "server/chat_prompt.h"
#include "server/common.h"
#include "server/errors.h"
#include "server/params.h"
#include "server/routes.h"
#include "server/structured_output.h"
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
  Usage usage;
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
      case chat::ChatEventKind::ToolCallArguments: {
        // One entry per call in a chunk, as OpenAI sends them: clients that take a first
        // tool_calls list as it comes (openai-python's stream accumulator) would keep a second
        // entry of the same index apart, and its text out of the arguments.
        auto same = std::find_if(calls.begin(), calls.end(), [&](const json& c) { return c["index"] == e.tool_index; });
        if (same == calls.end()) calls.push_back({{"index", e.tool_index}, {"function", {{"arguments", e.text}}}});
        else (*same)["function"]["arguments"] = (*same)["function"]["arguments"].get<std::string>() + e.text;
        break;
      }
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
  // Key order kept: the prompt renders tool schemas as the client wrote them.
  const chat::Json body = parse_body_ordered(req.body);
  check_model(body, b);
  const RequestOptions ro = parse_request_options(body, Api::kChat);
  // Special tokens are hidden by default (vLLM's default); the parser's own markers
  // (</think>, DSML) are never hidden (chat_hidden_tokens).
  const bool skip_special = get_bool(body, "skip_special_tokens").value_or(true);
  const std::vector<int32_t> hidden = skip_special ? chat_hidden_tokens(b) : std::vector<int32_t>{};
  const ChatPrompt cp = build_chat_prompt(b, body);
  const int64_t n = ro.n;
  std::vector<GenerateRequest> gens;
  auto waiter = std::make_shared<StreamWaiter>();
  for (int64_t j = 0; j < n; ++j) {
    GenerateRequest g{cp.ids, ro.sampling, cp.cache_points};
    // A constraint holds one request's state: each choice gets its own.
    g.params.constraint = j == 0 ? cp.constraint : output_constraint(b, body, cp.family, cp.thinking);
    if (g.params.seed) g.params.seed = *g.params.seed + uint64_t(j);
    const Status s = b.engine->validate(g);
    if (!s.ok()) throw ApiError(s);
    gens.push_back(std::move(g));
  }
  const std::vector<std::string> stops = ro.sampling.stop;
  const bool logprobs = ro.sampling.logprobs >= 0;
  std::vector<std::shared_ptr<RequestStream>> streams = b.engine->submit_all(std::move(gens), waiter);
  const std::string id = random_id("chatcmpl-");
  const int64_t created = unix_time();
  auto envelope = [bp, id, created](const char* object) {
    return json{{"id", id}, {"object", object}, {"created", created}, {"model", bp->model_id}};
  };

  if (!ro.stream) {
    std::vector<Collected> all = collect_all(streams);
    json choices = json::array();
    Usage total;
    for (size_t j = 0; j < all.size(); ++j) {
      const Collected& c = all[j];
      TextDecoder dec(b, stops, skip_special, hidden);
      std::string text = dec.push(c.tokens);
      text += dec.finish();  // after push: the order of operands of + is unspecified
      chat::ParsedOutput out = chat::parse_output(cp.family, text, cp.thinking);
      for (const auto& e : out.errors) log_warn("chat output: %s", e.c_str());
      // Cut by max_tokens inside a call: that call as generated so far (a stream has sent it),
      // under finish_reason "length".
      if (c.last.finish_reason == FinishReason::kLength)
        out.tool_calls.insert(out.tool_calls.end(), out.cut_tool_calls.begin(), out.cut_tool_calls.end());
      choices.push_back({{"index", j},
                         {"message", message_of(out, cp.thinking)},
                         {"logprobs", logprobs ? chat_logprobs(b, c.tokens) : json(nullptr)},
                         {"finish_reason", finish_name(c.last, !out.tool_calls.empty())}});
      if (j == 0) total = c.last.usage;
      else add_output_usage(total, c.last.usage);  // the prompt counts once
    }
    json r = envelope("chat.completion");
    r["choices"] = std::move(choices);
    r["usage"] = usage_json(total);
    send_json(res, r);
    return;
  }

  auto states = std::make_shared<std::vector<ChatStreamState>>(size_t(n));
  for (auto& st : *states) {
    st.parser = std::make_unique<chat::OutputParser>(cp.family, cp.thinking);
    st.decoder = std::make_unique<TextDecoder>(b, stops, skip_special, hidden);
  }
  auto job = std::make_shared<SseJob>();
  job->streams = streams;
  job->waiter = waiter;
  auto chunk = [envelope](size_t index, json delta, json finish, json lp) {
    json c = envelope("chat.completion.chunk");
    c["choices"] = json::array({json{{"index", index}, {"delta", std::move(delta)}, {"logprobs", std::move(lp)},
                                     {"finish_reason", std::move(finish)}}});
    return c;
  };
  job->on_start = [chunk, n](httplib::DataSink& sink) {
    for (size_t j = 0; j < size_t(n); ++j)
      if (!sse_write(sink, chunk(j, json{{"role", "assistant"}, {"content", ""}}, nullptr, nullptr))) return false;
    return true;
  };
  job->on_event = [=](httplib::DataSink& sink, StreamEvent& ev, size_t j) {
    ChatStreamState& st = (*states)[j];
    std::string text = st.decoder->push(ev.tokens);
    if (ev.finished) text += st.decoder->finish();
    std::vector<chat::ChatEvent> events = st.parser->feed(text);
    if (ev.finished) st.parser->finish(events);
    json delta = delta_of(st, events);
    const json lp = logprobs ? chat_logprobs(*bp, ev.tokens) : json(nullptr);
    if (ev.finished) st.usage = ev.usage;
    if (!delta.empty() || ev.finished || logprobs) {
      const json finish = ev.finished ? json(finish_name(ev, st.any_call)) : json(nullptr);
      if (!sse_write(sink, chunk(j, std::move(delta), finish, lp))) return false;
    }
    return true;
  };
  const bool usage = ro.include_usage;
  job->on_end = [=](httplib::DataSink& sink) {
    if (usage) {
      Usage total = (*states)[0].usage;
      for (size_t j = 1; j < states->size(); ++j) add_output_usage(total, (*states)[j].usage);
      json u = envelope("chat.completion.chunk");
      u["choices"] = json::array();
      u["usage"] = usage_json(total);
      if (!sse_write(sink, u)) return false;
    }
    return sse_write_raw(sink, "data: [DONE]\n\n");
  };
  job->on_error = [](httplib::DataSink& sink, const Status& s) {
    return sse_write_raw(sink, "data: " + error_json(s) + "\n\n") && sse_write_raw(sink, "data: [DONE]\n\n");
  };
  start_sse(res, job, o.sse_keepalive);
}

}  // namespace deepinfer::server
