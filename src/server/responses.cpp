// POST /v1/responses (OpenAI's Responses API), GET / DELETE /v1/responses/{id}, and
// GET /v1/responses/{id}/input_items.
//
// A Responses request is translated into the chat request it means (input items -> messages,
// flat function tools -> chat tools, text.format -> response_format, reasoning.effort ->
// reasoning_effort, max_output_tokens -> max_tokens) and runs through the same prompt
// builder, constraints and output parser as /v1/chat/completions. The answer is a list of
// output items: reasoning, message (output_text), function_call. Conversations continue with
// previous_response_id from an in-memory store (least recently used out first); a restart
// forgets them.
#include <algorithm>
#include <list>
#include <mutex>
#include <unordered_map>

#include "core/log.h"
#include "server/chat_prompt.h"
#include "server/common.h"
#include "server/errors.h"
#include "server/params.h"
#include "server/routes.h"
#include "tokenizer/chat/output_parser.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer::server {

using chat::Json;

// id -> the conversation up to and including that response (chat messages, no
// instructions), the response object for GET, and the request's input items for
// GET /v1/responses/{id}/input_items.
class ResponseStore {
 public:
  struct Entry {
    Json messages;
    json response;
    Json input_items = Json::array();  // as the client sent them (key order kept)
  };
  void put(const std::string& id, Entry e) {
    const size_t bytes = e.messages.dump().size() + e.response.dump().size() + e.input_items.dump().size();
    std::lock_guard<std::mutex> lk(mu_);
    erase_locked(id);
    order_.push_front(id);
    map_[id] = Slot{std::move(e), bytes, order_.begin()};
    bytes_ += bytes;
    while (!order_.empty() && (map_.size() > kMaxEntries || bytes_ > kMaxBytes)) erase_locked(order_.back());
  }
  std::optional<Entry> get(const std::string& id) {
    std::lock_guard<std::mutex> lk(mu_);
    auto it = map_.find(id);
    if (it == map_.end()) return std::nullopt;
    order_.splice(order_.begin(), order_, it->second.pos);
    return it->second.entry;
  }
  bool erase(const std::string& id) {
    std::lock_guard<std::mutex> lk(mu_);
    return erase_locked(id);
  }

 private:
  static constexpr size_t kMaxEntries = 4096;
  static constexpr size_t kMaxBytes = size_t(256) << 20;
  struct Slot {
    Entry entry;
    size_t bytes;
    std::list<std::string>::iterator pos;
  };
  bool erase_locked(const std::string& id) {
    auto it = map_.find(id);
    if (it == map_.end()) return false;
    bytes_ -= it->second.bytes;
    order_.erase(it->second.pos);
    map_.erase(it);
    return true;
  }
  std::mutex mu_;
  std::list<std::string> order_;  // most recent first
  std::unordered_map<std::string, Slot> map_;
  size_t bytes_ = 0;
};

std::shared_ptr<ResponseStore> make_response_store() { return std::make_shared<ResponseStore>(); }

namespace {

[[noreturn]] void bad(const std::string& msg, const std::string& param) { bad_request(msg, param); }

// Text of a content value: a string, or a list of text parts.
std::string content_text(const Json& c, const std::string& where) {
  if (c.is_string()) return c.get<std::string>();
  if (!c.is_array()) bad(where + " must be a string or an array of content parts", "input");
  std::string text;
  for (const Json& part : c) {
    const Json* type = find_field(part, "type");
    if (!type || !type->is_string()) bad(where + ": every content part needs a type", "input");
    if (*type == "input_text" || *type == "output_text" || *type == "text") {
      const Json* t = find_field(part, "text");
      if (!t || !t->is_string()) bad(where + ": a text part needs a string 'text'", "input");
      text += t->get<std::string>();
    } else if (*type == "refusal") {
      if (const Json* t = find_field(part, "refusal"); t && t->is_string()) text += t->get<std::string>();
    } else {
      bad(where + ": content part type '" + type->get<std::string>() + "' is not supported by this model", "input");
    }
  }
  return text;
}

// Input items appended to `messages` as chat messages.
void append_input(const Json& input, Json& messages) {
  if (input.is_string()) {
    messages.push_back(Json{{"role", "user"}, {"content", input}});
    return;
  }
  if (!input.is_array()) bad("'input' must be a string or an array of items", "input");
  for (size_t i = 0; i < input.size(); ++i) {
    const Json& item = input[i];
    const std::string where = "input[" + std::to_string(i) + "]";
    if (!item.is_object()) bad(where + " must be an object", "input");
    const Json* type = find_field(item, "type");
    const std::string t = type && type->is_string() ? type->get<std::string>() : "message";
    if (t == "message" || (!type && find_field(item, "role"))) {
      const Json* role = find_field(item, "role");
      if (!role || !role->is_string()) bad(where + ".role must be a string", "input");
      std::string r = role->get<std::string>();
      if (r == "developer") r = "system";
      if (r != "system" && r != "user" && r != "assistant") bad(where + ": unknown role '" + r + "'", "input");
      const Json* c = find_field(item, "content");
      messages.push_back(Json{{"role", r}, {"content", c ? content_text(*c, where + ".content") : std::string()}});
    } else if (t == "function_call") {
      const Json* name = find_field(item, "name");
      const Json* args = find_field(item, "arguments");
      const Json* call_id = find_field(item, "call_id");
      if (!name || !name->is_string() || !call_id || !call_id->is_string())
        bad(where + ": a function_call needs string 'name' and 'call_id'", "input");
      Json call = {{"id", *call_id},
                   {"type", "function"},
                   {"function", {{"name", *name}, {"arguments", args && args->is_string() ? *args : Json("{}")}}}};
      // Consecutive calls belong to one assistant turn.
      if (!messages.empty() && messages.back()["role"] == "assistant" && messages.back().contains("tool_calls") &&
          !messages.back()["tool_calls"].empty()) {
        messages.back()["tool_calls"].push_back(std::move(call));
      } else if (!messages.empty() && messages.back()["role"] == "assistant" && !messages.back().contains("tool_calls")) {
        messages.back()["tool_calls"] = Json::array({std::move(call)});
      } else {
        messages.push_back(Json{{"role", "assistant"}, {"content", ""}, {"tool_calls", Json::array({std::move(call)})}});
      }
    } else if (t == "function_call_output") {
      const Json* call_id = find_field(item, "call_id");
      const Json* out = find_field(item, "output");
      if (!call_id || !call_id->is_string()) bad(where + ": a function_call_output needs a string 'call_id'", "input");
      messages.push_back(Json{{"role", "tool"},
                              {"tool_call_id", *call_id},
                              {"content", out ? content_text(*out, where + ".output") : std::string()}});
    } else if (t == "reasoning") {
      // Earlier reasoning is dropped from the prompt, as the encoders drop it from history.
    } else {
      bad(where + ": input item type '" + t + "' is not supported", "input");
    }
  }
}

// The request's input as the item list OpenAI returns from input_items (oldest first): a
// string is one user message; a message's string content becomes one text part; an item
// without an id gets one. Client items keep their fields and order (chat::Json, no re-parse).
// (Called after append_input() accepted the input.)
Json input_item_list(const Json& input) {
  auto text_part = [](const std::string& role, const std::string& text) {
    return Json{{"type", role == "assistant" ? "output_text" : "input_text"}, {"text", text}};
  };
  Json items = Json::array();
  if (input.is_string()) {
    items.push_back(Json{{"id", random_id("msg_")}, {"type", "message"}, {"role", "user"}, {"status", "completed"},
                         {"content", Json::array({text_part("user", input.get<std::string>())})}});
    return items;
  }
  for (const Json& in : input) {
    Json item = in;
    const Json* type_field = find_field(in, "type");
    const std::string type = type_field && type_field->is_string() ? type_field->get<std::string>() : "message";
    if (type == "message") {
      item["type"] = "message";
      const Json* content = find_field(in, "content");
      if (!content || content->is_null()) item["content"] = Json::array();
      else if (content->is_string())
        item["content"] = Json::array({text_part(in["role"].get<std::string>(), content->get<std::string>())});
    }
    const Json* id = find_field(in, "id");
    if (!id || !id->is_string()) {
      const char* prefix = type == "message" ? "msg_" : type == "function_call" ? "fc_" : type == "reasoning" ? "rs_" : "item_";
      item["id"] = random_id(prefix);
    }
    if (type != "reasoning" && !find_field(in, "status")) item["status"] = "completed";
    items.push_back(std::move(item));
  }
  return items;
}

// The chat request a Responses request means.
Json chat_body_of(const Json& body, const Json& history) {
  Json chat = Json::object();
  Json messages = Json::array();
  if (const Json* ins = find_field(body, "instructions")) {
    if (!ins->is_string()) bad("'instructions' must be a string", "instructions");
    messages.push_back(Json{{"role", "system"}, {"content", *ins}});
  }
  for (const Json& m : history) messages.push_back(m);
  const Json* input = find_field(body, "input");
  if (!input) bad("'input' is required", "input");
  append_input(*input, messages);
  // Several system messages (instructions, then one from the input) become one, in order.
  if (messages.size() > 1 && messages[0]["role"] == "system" && messages[1]["role"] == "system") {
    messages[0]["content"] = messages[0]["content"].get<std::string>() + "\n\n" + messages[1]["content"].get<std::string>();
    messages.erase(messages.begin() + 1);
  }
  chat["messages"] = messages;
  if (const Json* tools = find_field(body, "tools")) {
    if (!tools->is_array()) bad("'tools' must be an array", "tools");
    Json out = Json::array();
    for (const Json& t : *tools) {
      const Json* type = find_field(t, "type");
      if (!type || *type != "function")
        bad("only function tools are supported (got '" + (type && type->is_string() ? type->get<std::string>() : "?") + "')",
            "tools");
      Json fn = Json::object();
      for (const char* k : {"name", "description", "parameters", "strict"})
        if (const Json* v = find_field(t, k)) fn[k] = *v;
      if (!fn.contains("name") || !fn["name"].is_string()) bad("a function tool needs a string 'name'", "tools");
      out.push_back(Json{{"type", "function"}, {"function", fn}});
    }
    chat["tools"] = out;
  }
  if (const Json* tc = find_field(body, "tool_choice")) {
    if (tc->is_object()) {
      const Json* name = find_field(*tc, "name");
      if (!name || !name->is_string()) bad("tool_choice must name a function", "tool_choice");
      chat["tool_choice"] = Json{{"type", "function"}, {"function", {{"name", *name}}}};
    } else {
      chat["tool_choice"] = *tc;
    }
  }
  if (const Json* text = find_field(body, "text")) {
    if (const Json* f = find_field(*text, "format")) {
      const Json* type = find_field(*f, "type");
      if (!type || !type->is_string()) bad("text.format.type must be a string", "text");
      if (*type == "json_schema") {
        Json js = Json::object();
        for (const char* k : {"name", "schema", "strict", "description"})
          if (const Json* v = find_field(*f, k)) js[k] = *v;
        chat["response_format"] = Json{{"type", "json_schema"}, {"json_schema", js}};
      } else if (*type == "json_object") {
        chat["response_format"] = Json{{"type", "json_object"}};
      } else if (*type != "text") {
        bad("text.format.type must be text, json_object or json_schema", "text");
      }
    }
  }
  if (const Json* r = find_field(body, "reasoning")) {
    if (!r->is_object()) bad("'reasoning' must be an object", "reasoning");
    if (const Json* e = find_field(*r, "effort")) chat["reasoning_effort"] = *e;
  }
  if (const Json* m = find_field(body, "max_output_tokens")) chat["max_tokens"] = *m;
  for (const char* k : {"temperature", "top_p", "top_k", "min_p", "seed", "presence_penalty", "frequency_penalty",
                        "repetition_penalty", "stream", "thinking", "chat_template_kwargs", "model"})
    if (const Json* v = find_field(body, k)) chat[k] = *v;
  return chat;
}

// Output items under construction, for the final response object and the stream.
struct OutputBuilder {
  json items = json::array();
  json assistant;  // the chat message to store for previous_response_id
  std::string text, reasoning;

  static json reasoning_item(const std::string& id, const std::string& text) {
    return json{{"type", "reasoning"},
                {"id", id},
                {"summary", json::array()},
                {"content", json::array({json{{"type", "reasoning_text"}, {"text", text}}})}};
  }
  static json message_item(const std::string& id, const std::string& text, const char* status) {
    return json{{"type", "message"},
                {"id", id},
                {"status", status},
                {"role", "assistant"},
                {"content", json::array({json{{"type", "output_text"}, {"text", text}, {"annotations", json::array()},
                                              {"logprobs", json::array()}}})}};
  }
  static json call_item(const std::string& id, const std::string& call_id, const std::string& name,
                        const std::string& args, const char* status) {
    return json{{"type", "function_call"}, {"id", id},           {"call_id", call_id},
                {"name", name},            {"arguments", args},  {"status", status}};
  }
};

json usage_of(const Usage& u, int64_t reasoning_tokens) {
  return json{{"input_tokens", u.prompt_tokens},
              {"input_tokens_details", {{"cached_tokens", u.cached_tokens}}},
              {"output_tokens", u.completion_tokens},
              {"output_tokens_details", {{"reasoning_tokens", reasoning_tokens}}},
              {"total_tokens", u.prompt_tokens + u.completion_tokens}};
}

// The response object (without output / usage / status, which the caller sets). Values
// echoed from the body become plain json (their objects' keys sorted, as in every response).
json response_shell(const Backend& b, const std::string& id, int64_t created, const Json& body) {
  auto get = [&](const char* k, json fallback) {
    auto it = body.find(k);
    return it == body.end() || it->is_null() ? fallback : json(*it);
  };
  return json{{"id", id},
              {"object", "response"},
              {"created_at", created},
              {"status", "in_progress"},
              {"model", b.model_id},
              {"output", json::array()},
              {"error", nullptr},
              {"incomplete_details", nullptr},
              {"instructions", get("instructions", nullptr)},
              {"previous_response_id", get("previous_response_id", nullptr)},
              {"tools", get("tools", json::array())},
              {"tool_choice", get("tool_choice", "auto")},
              {"parallel_tool_calls", get("parallel_tool_calls", true)},
              {"temperature", get("temperature", 1.0)},
              {"top_p", get("top_p", 1.0)},
              {"max_output_tokens", get("max_output_tokens", nullptr)},
              {"text", get("text", json{{"format", {{"type", "text"}}}})},
              {"reasoning", get("reasoning", json{{"effort", nullptr}, {"summary", nullptr}})},
              {"store", get("store", true)},
              {"metadata", get("metadata", json::object())},
              {"usage", nullptr}};
}

void finish_response(json& r, const StreamEvent& last, const json& output, int64_t reasoning_tokens) {
  r["output"] = output;
  r["usage"] = usage_of(last.usage, reasoning_tokens);
  if (last.finish_reason == FinishReason::kLength) {
    r["status"] = "incomplete";
    r["incomplete_details"] = json{{"reason", "max_output_tokens"}};
  } else {
    r["status"] = "completed";
  }
}

// The answer as a chat message, for the conversation store (the encoder reads its fields by
// name).
Json assistant_message(const std::string& content, const std::string& reasoning, const Json& calls) {
  Json m = {{"role", "assistant"}, {"content", content}};
  if (!reasoning.empty()) m["reasoning_content"] = reasoning;
  if (!calls.empty()) m["tool_calls"] = calls;
  return m;
}

// One chat tool call of the answer.
Json chat_tool_call(const std::string& id, const std::string& name, const std::string& arguments) {
  return Json{{"id", id}, {"type", "function"}, {"function", {{"name", name}, {"arguments", arguments}}}};
}

// Streaming: the open output item and the event counter.
struct ResponseStream {
  std::unique_ptr<chat::OutputParser> parser;
  std::unique_ptr<TextDecoder> decoder;
  json response;  // the shell, updated at the end
  int64_t seq = 0;
  enum class Open { kNone, kReasoning, kMessage, kCall } open = Open::kNone;
  std::string item_id, call_id, call_name, text;
  json output = json::array();
  std::string content_all, reasoning_all;
  Json calls = Json::array();  // chat tool_calls for the store
  int64_t reasoning_tokens = 0;
  bool cut = false;  // the output ended inside the open call
};

}  // namespace

void handle_responses(BackendPtr bp, const ServerOptions& o, const httplib::Request& req, httplib::Response& res) {
  const Backend& b = *bp;
  // Key-ordered: tool schemas and input items keep the client's order.
  const Json body = parse_body_ordered(req.body);
  check_model(body, b);
  Json history = Json::array();
  if (const Json* prev = find_field(body, "previous_response_id")) {
    if (!prev->is_string()) bad("'previous_response_id' must be a string", "previous_response_id");
    auto e = b.responses->get(prev->get<std::string>());
    if (!e)
      throw ApiError(ErrorCode::kNotFound, "no stored response '" + prev->get<std::string>() + "'", "previous_response_id");
    history = e->messages;
  }
  if (const Json* bg = find_field(body, "background"); bg && bg->is_boolean() && bg->get<bool>())
    bad("background responses are not supported", "background");
  const Json chat = chat_body_of(body, history);
  Json input_items = input_item_list(*find_field(body, "input"));
  const RequestOptions ro = parse_request_options(chat, Api::kChat);
  const ChatPrompt cp = build_chat_prompt(b, chat);
  GenerateRequest g{cp.ids, ro.sampling, cp.cache_points};
  g.params.constraint = cp.constraint;
  const Status s = b.engine->validate(g);
  if (!s.ok()) throw ApiError(s);
  const std::vector<std::string> stops = g.params.stop;
  auto stream = b.engine->submit(std::move(g));
  const std::string id = random_id("resp_");
  const bool store = !(body.contains("store") && body["store"].is_boolean() && !body["store"].get<bool>());
  // The conversation without instructions: they apply to one request only.
  Json convo = chat["messages"];
  if (find_field(body, "instructions") && !convo.empty() && convo[0]["role"] == "system") convo.erase(convo.begin());
  auto store_ptr = b.responses;

  if (!ro.stream) {
    Collected c = collect(*stream);
    TextDecoder dec(b, stops, false);
    std::string text = dec.push(c.tokens);
    text += dec.finish();
    const chat::ParsedOutput out = chat::parse_output(cp.family, text, cp.thinking);
    json output = json::array();
    Json calls = Json::array();
    if (!out.reasoning_content.empty())
      output.push_back(OutputBuilder::reasoning_item(random_id("rs_"), out.reasoning_content));
    // Cut by max_output_tokens inside a call: that call as generated so far (as streamed),
    // "incomplete" in an incomplete response.
    const size_t whole = out.tool_calls.size();
    std::vector<chat::ParsedToolCall> all_calls = out.tool_calls;
    if (c.last.finish_reason == FinishReason::kLength)
      all_calls.insert(all_calls.end(), out.cut_tool_calls.begin(), out.cut_tool_calls.end());
    if (!out.content.empty() || all_calls.empty())
      output.push_back(OutputBuilder::message_item(random_id("msg_"), out.content, "completed"));
    for (size_t k = 0; k < all_calls.size(); ++k) {
      const auto& call = all_calls[k];
      const std::string call_id = random_id("call_");
      output.push_back(OutputBuilder::call_item(random_id("fc_"), call_id, call.name, call.arguments,
                                                k < whole ? "completed" : "incomplete"));
      calls.push_back(chat_tool_call(call_id, call.name, call.arguments));
    }
    json r = response_shell(b, id, unix_time(), body);
    finish_response(r, c.last, output, 0);
    if (store) {
      Json saved = convo;
      saved.push_back(assistant_message(out.content, out.reasoning_content, calls));
      store_ptr->put(id, ResponseStore::Entry{std::move(saved), r, std::move(input_items)});
    }
    send_json(res, r);
    return;
  }

  auto st = std::make_shared<ResponseStream>();
  st->parser = std::make_unique<chat::OutputParser>(cp.family, cp.thinking);
  st->decoder = std::make_unique<TextDecoder>(b, stops, false);
  st->response = response_shell(b, id, unix_time(), body);
  auto emit = [st](httplib::DataSink& sink, const char* type, json ev) {
    ev["type"] = type;
    ev["sequence_number"] = st->seq++;
    return sse_write_raw(sink, std::string("event: ") + type + "\ndata: " + dump(ev) + "\n\n");
  };
  // Closes the open item: its .done events and output_item.done.
  auto close_item = [st, emit](httplib::DataSink& sink) {
    const int64_t index = int64_t(st->output.size());
    bool ok = true;
    json item;
    switch (st->open) {
      case ResponseStream::Open::kNone: return true;
      case ResponseStream::Open::kReasoning:
        item = OutputBuilder::reasoning_item(st->item_id, st->text);
        ok = emit(sink, "response.reasoning_text.done",
                  {{"item_id", st->item_id}, {"output_index", index}, {"content_index", 0}, {"text", st->text}});
        break;
      case ResponseStream::Open::kMessage: {
        item = OutputBuilder::message_item(st->item_id, st->text, "completed");
        const json part = item["content"][0];
        ok = emit(sink, "response.output_text.done",
                  {{"item_id", st->item_id}, {"output_index", index}, {"content_index", 0}, {"text", st->text},
                   {"logprobs", json::array()}}) &&
             emit(sink, "response.content_part.done",
                  {{"item_id", st->item_id}, {"output_index", index}, {"content_index", 0}, {"part", part}});
        break;
      }
      case ResponseStream::Open::kCall:
        item = OutputBuilder::call_item(st->item_id, st->call_id, st->call_name, st->text,
                                        st->cut ? "incomplete" : "completed");
        st->calls.push_back(chat_tool_call(st->call_id, st->call_name, st->text));
        ok = emit(sink, "response.function_call_arguments.done",
                  {{"item_id", st->item_id}, {"output_index", index}, {"name", st->call_name}, {"arguments", st->text}});
        break;
    }
    ok = ok && emit(sink, "response.output_item.done", {{"output_index", index}, {"item", item}});
    st->output.push_back(item);
    st->open = ResponseStream::Open::kNone;
    st->text.clear();
    return ok;
  };
  // Opens an item of `kind` unless one is open already.
  auto open_item = [st, emit, close_item](httplib::DataSink& sink, ResponseStream::Open kind, const std::string& name) {
    if (st->open == kind && kind != ResponseStream::Open::kCall) return true;
    if (!close_item(sink)) return false;
    const int64_t index = int64_t(st->output.size());
    st->open = kind;
    st->text.clear();
    json item;
    if (kind == ResponseStream::Open::kReasoning) {
      st->item_id = random_id("rs_");
      item = json{{"type", "reasoning"}, {"id", st->item_id}, {"summary", json::array()}, {"content", json::array()}};
      return emit(sink, "response.output_item.added", {{"output_index", index}, {"item", item}});
    }
    if (kind == ResponseStream::Open::kMessage) {
      st->item_id = random_id("msg_");
      item = json{{"type", "message"}, {"id", st->item_id}, {"status", "in_progress"}, {"role", "assistant"},
                  {"content", json::array()}};
      return emit(sink, "response.output_item.added", {{"output_index", index}, {"item", item}}) &&
             emit(sink, "response.content_part.added",
                  {{"item_id", st->item_id}, {"output_index", index}, {"content_index", 0},
                   {"part", {{"type", "output_text"}, {"text", ""}, {"annotations", json::array()}, {"logprobs", json::array()}}}});
    }
    st->item_id = random_id("fc_");
    st->call_id = random_id("call_");
    st->call_name = name;
    item = OutputBuilder::call_item(st->item_id, st->call_id, name, "", "in_progress");
    return emit(sink, "response.output_item.added", {{"output_index", index}, {"item", item}});
  };

  auto job = std::make_shared<SseJob>();
  job->streams = {stream};
  job->on_start = [st, emit](httplib::DataSink& sink) {
    return emit(sink, "response.created", {{"response", st->response}}) &&
           emit(sink, "response.in_progress", {{"response", st->response}});
  };
  job->on_error = [st, emit](httplib::DataSink& sink, const Status& error) {
    json r = st->response;
    r["status"] = "failed";
    r["error"] = json{{"code", error_code_name(error.code)}, {"message", error.message}};
    return emit(sink, "response.failed", {{"response", r}});
  };
  job->on_event = [=](httplib::DataSink& sink, StreamEvent& ev, size_t) {
    std::string text = st->decoder->push(ev.tokens);
    if (ev.finished) text += st->decoder->finish();
    std::vector<chat::ChatEvent> events = st->parser->feed(text);
    if (ev.finished) st->parser->finish(events);
    for (const chat::ChatEvent& e : events) {
      const int64_t index = int64_t(st->output.size());
      bool ok = true;
      switch (e.kind) {
        case chat::ChatEventKind::Reasoning:
          ok = open_item(sink, ResponseStream::Open::kReasoning, "") &&
               emit(sink, "response.reasoning_text.delta",
                    {{"item_id", st->item_id}, {"output_index", index}, {"content_index", 0}, {"delta", e.text}});
          st->text += e.text;
          st->reasoning_all += e.text;
          break;
        case chat::ChatEventKind::Content:
          ok = open_item(sink, ResponseStream::Open::kMessage, "") &&
               emit(sink, "response.output_text.delta",
                    {{"item_id", st->item_id}, {"output_index", index}, {"content_index", 0}, {"delta", e.text},
                     {"logprobs", json::array()}});
          st->text += e.text;
          st->content_all += e.text;
          break;
        case chat::ChatEventKind::ToolCallBegin: ok = open_item(sink, ResponseStream::Open::kCall, e.text); break;
        case chat::ChatEventKind::ToolCallArguments:
          ok = emit(sink, "response.function_call_arguments.delta",
                    {{"item_id", st->item_id}, {"output_index", index}, {"delta", e.text}});
          st->text += e.text;
          break;
        case chat::ChatEventKind::ToolCallEnd: ok = close_item(sink); break;
        case chat::ChatEventKind::Error: log_warn("responses output: %s", e.text.c_str()); break;
      }
      if (!ok) return false;
    }
    if (!ev.finished) return true;
    if (st->output.empty() && st->open == ResponseStream::Open::kNone &&
        !open_item(sink, ResponseStream::Open::kMessage, ""))
      return false;  // an empty answer is still one (empty) message, as without streaming
    st->cut = st->open == ResponseStream::Open::kCall;
    if (!close_item(sink)) return false;
    json r = st->response;
    finish_response(r, ev, st->output, st->reasoning_tokens);
    if (store) {
      Json saved = convo;
      saved.push_back(assistant_message(st->content_all, st->reasoning_all, st->calls));
      store_ptr->put(id, ResponseStore::Entry{std::move(saved), r, input_items});
    }
    return emit(sink, r["status"] == "completed" ? "response.completed" : "response.incomplete", {{"response", r}});
  };
  start_sse(res, job, o.sse_keepalive);
}

namespace {

// GET /v1/responses/{id}/input_items: a page of the stored input items, OpenAI's list shape.
// Query: order (desc, the default, or asc), limit (1..100, default 20), after / before (an
// item id: the page starts after it / ends before it, in that order).
void send_input_items(const Json& all, const httplib::Request& req, httplib::Response& res) {
  const std::string order = req.has_param("order") ? req.get_param_value("order") : "desc";
  if (order != "asc" && order != "desc") bad("'order' must be asc or desc", "order");
  int64_t limit = 20;
  if (req.has_param("limit")) {
    const std::string v = req.get_param_value("limit");
    if (v.empty() || v.size() > 3 || v.find_first_not_of("0123456789") != std::string::npos) limit = 0;
    else limit = std::stoll(v);
    if (limit < 1 || limit > 100) bad("'limit' must be an integer from 1 to 100", "limit");
  }
  std::vector<const Json*> items;
  for (const Json& it : all) items.push_back(&it);
  if (order == "desc") std::reverse(items.begin(), items.end());
  auto position = [&](const char* param) -> size_t {
    const std::string id = req.get_param_value(param);
    for (size_t i = 0; i < items.size(); ++i)
      if ((*items[i])["id"] == id) return i;
    throw ApiError(ErrorCode::kNotFound, "no input item '" + id + "' in this response", param);
  };
  size_t begin = 0, end = items.size();
  if (req.has_param("after")) begin = position("after") + 1;
  if (req.has_param("before")) end = std::max(begin, position("before"));
  const size_t stop = std::min(end, begin + size_t(limit));
  Json data = Json::array();
  for (size_t i = begin; i < stop; ++i) data.push_back(*items[i]);
  const Json page = {{"object", "list"},
                     {"data", data},
                     {"first_id", data.empty() ? Json(nullptr) : data.front()["id"]},
                     {"last_id", data.empty() ? Json(nullptr) : data.back()["id"]},
                     {"has_more", stop < end}};
  res.status = 200;
  res.set_content(page.dump(-1, ' ', false, Json::error_handler_t::replace), "application/json");
}

}  // namespace

void handle_response_get(const Backend& b, const httplib::Request& req, httplib::Response& res) {
  static constexpr std::string_view kRoute = "/v1/responses/", kItems = "/input_items";
  std::string id = req.path.substr(kRoute.size());
  const bool want_items = id.size() > kItems.size() && id.compare(id.size() - kItems.size(), kItems.size(), kItems) == 0;
  if (want_items) id.resize(id.size() - kItems.size());
  auto e = b.responses->get(id);
  if (!e) throw ApiError(ErrorCode::kNotFound, "no stored response '" + id + "'");
  if (want_items) send_input_items(e->input_items, req, res);
  else send_json(res, e->response);
}

void handle_response_delete(const Backend& b, const std::string& id, httplib::Response& res) {
  if (!b.responses->erase(id)) throw ApiError(ErrorCode::kNotFound, "no stored response '" + id + "'");
  send_json(res, json{{"id", id}, {"object", "response.deleted"}, {"deleted", true}});
}

}  // namespace deepinfer::server
