// Chat output through the HTTP routes with a scripted "model": the engine runs a runner
// that emits a fixed text (reasoning, </think>, content, a DSML tool call, EOS), so the
// reasoning split, tool-call parsing and streaming deltas of /v1/chat/completions and
// /v1/messages are checked end to end with the tiny model's tokenizer. Also: tool_choice
// "auto" holds a tool-call block to the declared tools (the constraint over the tiny
// tokenizer, and a script that calls an undeclared tool), and a call cut by max_tokens.
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "engine/engine_impl.h"
#include "server/server.h"
#include "server/structured_output.h"
#include "server/token_constraint.h"
#include "server/tool_grammar.h"
#include "server_harness.h"
#include "tokenizer/chat/output_parser.h"
#include "tokenizer/tokenizer.h"

using namespace deepinfer;
using namespace deepinfer::testing;

namespace {

const char* kScript =
    "Let me check.</think>Sure.\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"get_weather\">\n"
    "<｜DSML｜parameter name=\"city\" string=\"true\">Paris</｜DSML｜parameter>\n"
    "<｜DSML｜parameter name=\"days\" string=\"false\">3</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>";

// Emits script[k] at the k-th sample of each sequence, then EOS.
class ScriptedRunner final : public engine::Runner {
 public:
  ScriptedRunner(int64_t vocab, std::vector<int32_t> script) : vocab_(vocab), script_(std::move(script)) {}
  int64_t vocab_size() const override { return vocab_; }
  void run(const std::vector<engine::ScheduledChunk>& chunks, std::vector<float>& rows) override {
    int64_t n = 0;
    for (const auto& c : chunks) n += c.want_logits;
    rows.assign(size_t(n * vocab_), 0.0f);
    float* row = rows.data();
    for (const auto& c : chunks) {
      if (!c.want_logits) continue;
      const size_t k = size_t(samples_[c.seq_id]++);
      row[k < script_.size() ? script_[k] : 1] = 50.0f;
      row += vocab_;
    }
  }
  void apply(const engine::StateOp& op) override {
    if (op.kind == engine::StateOp::Kind::kFree || op.kind == engine::StateOp::Kind::kSaveSnapshot) samples_.erase(op.seq);
  }

 private:
  int64_t vocab_;
  std::vector<int32_t> script_;
  std::map<uint64_t, int64_t> samples_;
};

std::shared_ptr<const server::Backend> scripted_backend(const char* script = kScript) {
  const std::string dir = std::string(DI_SHARED_DIR) + "/golden/tiny-v4-c/model";
  auto tok = std::make_shared<const tokenizer::Tokenizer>(tokenizer::Tokenizer::from_file(dir));
  kv::KvLayout layout;
  layout.window_tokens = 4;
  layout.head_dim = 8;
  layout.index_head_dim = 8;
  layout.layer_ratios = {0, 4, 128};
  const kv::KvSpec spec = kv::KvSpec::make(layout, 16);
  EngineInfo info;
  info.vocab_size = tok->vocab_size();
  info.max_model_len = 4096;
  engine::EngineCoreOptions o;
  o.max_model_len = 4096;
  o.eos_token_id = 1;
  o.token_text = [tok](int32_t id) { return tok->is_special(id) ? std::string() : tok->token_bytes(id); };
  auto b = std::make_shared<server::Backend>();
  b->engine = engine::make_engine(info, o, spec, 10000,
                                  std::make_unique<ScriptedRunner>(info.vocab_size, tok->encode(script, false)));
  b->tokenizer = tok;
  b->chat_family = "v4";
  b->model_id = "scripted";
  return b;
}

const json kChat = {{"messages", {{{"role", "user"}, {"content", "Weather in Paris?"}}}},
                    {"chat_template_kwargs", {{"thinking", true}}},
                    {"tools", {{{"type", "function"}, {"function", {{"name", "get_weather"}, {"parameters", {{"type", "object"}}}}}}}}};

}  // namespace

TEST(ToolCalls, ChatSplitsReasoningContentAndCalls) {
  Running srv(server::ServerOptions{}, scripted_backend());
  int st = 0;
  json r = post(srv, "/v1/chat/completions", kChat.dump(), &st);
  ASSERT_EQ(st, 200) << r.dump();
  const json& m = r["choices"][0]["message"];
  EXPECT_EQ(m["reasoning_content"], "Let me check.");
  EXPECT_EQ(m["content"], "Sure.");
  ASSERT_EQ(m["tool_calls"].size(), 1u);
  EXPECT_EQ(m["tool_calls"][0]["function"]["name"], "get_weather");
  EXPECT_EQ(json::parse(m["tool_calls"][0]["function"]["arguments"].get<std::string>()),
            (json{{"city", "Paris"}, {"days", 3}}));
  EXPECT_EQ(r["choices"][0]["finish_reason"], "tool_calls");

  json body = kChat;
  body["stream"] = true;
  Sse s = stream_post(srv.port, "/v1/chat/completions", body);
  ASSERT_EQ(s.status, 200);
  std::string reasoning, content, args, name, id;
  for (const json& c : s.chunks) {
    const json& d = c["choices"][0]["delta"];
    if (d.contains("reasoning_content")) reasoning += d["reasoning_content"].get<std::string>();
    if (d.contains("content")) content += d["content"].get<std::string>();
    if (d.contains("tool_calls"))
      for (const json& t : d["tool_calls"]) {
        EXPECT_EQ(t["index"], 0);
        if (t.contains("id")) id = t["id"], name = t["function"]["name"];
        args += t["function"]["arguments"].get<std::string>();
      }
  }
  EXPECT_EQ(reasoning, "Let me check.");
  EXPECT_EQ(content, "Sure.");
  EXPECT_EQ(name, "get_weather");
  EXPECT_FALSE(id.empty());
  EXPECT_EQ(json::parse(args), (json{{"city", "Paris"}, {"days", 3}}));
  EXPECT_EQ(s.chunks.back()["choices"][0]["finish_reason"], "tool_calls");
  EXPECT_TRUE(s.done);
}

TEST(ToolCalls, AnthropicBlocks) {
  Running srv(server::ServerOptions{}, scripted_backend());
  json req = {{"max_tokens", 2000},
              {"thinking", {{"type", "enabled"}, {"budget_tokens", 100}}},
              {"tools", {{{"name", "get_weather"}, {"input_schema", {{"type", "object"}}}}}},
              {"messages", {{{"role", "user"}, {"content", "Weather in Paris?"}}}}};
  int st = 0;
  json r = post(srv, "/v1/messages", req.dump(), &st);
  ASSERT_EQ(st, 200) << r.dump();
  ASSERT_EQ(r["content"].size(), 3u);
  EXPECT_EQ(r["content"][0]["type"], "thinking");
  EXPECT_EQ(r["content"][0]["thinking"], "Let me check.");
  EXPECT_EQ(r["content"][1]["text"], "Sure.");
  EXPECT_EQ(r["content"][2]["type"], "tool_use");
  EXPECT_EQ(r["content"][2]["input"], (json{{"city", "Paris"}, {"days", 3}}));
  EXPECT_EQ(r["stop_reason"], "tool_use");

  req["stream"] = true;
  Sse s = stream_post(srv.port, "/v1/messages", req);
  ASSERT_EQ(s.status, 200);
  std::vector<std::string> types;
  std::string partial;
  for (const json& e : s.chunks) {
    if (e["type"] == "content_block_start") types.push_back(e["content_block"]["type"]);
    if (e["type"] == "content_block_delta" && e["delta"]["type"] == "input_json_delta")
      partial += e["delta"]["partial_json"].get<std::string>();
  }
  EXPECT_EQ(types, (std::vector<std::string>{"thinking", "text", "tool_use"}));
  EXPECT_EQ(json::parse(partial), (json{{"city", "Paris"}, {"days", 3}}));
  EXPECT_EQ(s.chunks.back()["type"], "message_stop");
}

// ------------------------------------------------------------------ tool_choice "auto"

namespace {

using chat::Json;

// Whether the constraint allows token t next (no mask at all: every token is).
bool allows(TokenConstraint& c, int32_t t, int64_t vocab) {
  std::vector<uint64_t> mask(size_t((vocab + 63) / 64));
  if (!c.allowed(mask.data(), vocab)) return true;
  return (mask[size_t(t) / 64] >> (t % 64)) & 1;
}

// Accepts `text` token by token, each allowed first; the text of the first token refused, or "".
std::string feed_checked(TokenConstraint& c, const tokenizer::Tokenizer& tok, const std::string& text) {
  for (int32_t t : tok.encode(text, true)) {
    if (!allows(c, t, tok.vocab_size())) return tok.token_bytes(t);
    c.accept(t);
  }
  return "";
}

// Tokens allowed next whose text starts with `first`.
int allowed_starting_with(TokenConstraint& c, const tokenizer::Tokenizer& tok, char first) {
  const int64_t V = tok.vocab_size();
  std::vector<uint64_t> mask(size_t((V + 63) / 64));
  if (!c.allowed(mask.data(), V)) return int(V);
  int n = 0;
  for (int32_t t = 0; t < V; ++t)
    if (((mask[size_t(t) / 64] >> (t % 64)) & 1) && !tok.token_bytes(t).empty() && tok.token_bytes(t)[0] == first) ++n;
  return n;
}

// One strict tool and one that is not, whose schema the grammar could not enforce ("multipleOf").
const Json kMixedTools = Json::parse(R"([
  {"type": "function", "function": {"name": "get_weather", "strict": true, "parameters": {"type": "object",
    "properties": {"city": {"type": "string"}}, "required": ["city"], "additionalProperties": false}}},
  {"type": "function", "function": {"name": "lookup", "parameters": {"type": "object",
    "properties": {"q": {"type": "string"}, "n": {"type": "integer", "multipleOf": 5}}, "required": ["q"]}}}])");

Json auto_body(const Json& tools, bool explicit_auto) {
  Json body = {{"messages", Json::array({Json{{"role", "user"}, {"content", "Weather?"}}})}, {"tools", tools}};
  if (explicit_auto) body["tool_choice"] = "auto";
  return body;
}

const char* kOpen = "\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"";

}  // namespace

// Under tool_choice "auto" (or none given) with any tools, a tool-call block the answer opens
// (in the reasoning too) calls a declared tool: an undeclared name is refused, whether the
// tools are strict or not. A strict tool's arguments follow its schema; a non-strict tool's are
// free (undeclared keys, more than four, any values), even where its schema has a keyword the
// grammar cannot enforce (no 400).
TEST(ToolCallsAuto, BlockCallsOnlyDeclaredTools) {
  auto b = scripted_backend();
  const tokenizer::Tokenizer& tok = *b->tokenizer;
  const int64_t V = tok.vocab_size();
  Json no_strict = kMixedTools;
  no_strict[0]["function"].erase("strict");
  for (const Json* tools : {&kMixedTools, static_cast<const Json*>(&no_strict)})
    for (bool thinking : {false, true}) {
      SCOPED_TRACE(std::string(tools == &kMixedTools ? "one strict tool" : "no strict tool") +
                   (thinking ? ", block inside the reasoning" : ""));
      const Json body = auto_body(*tools, tools == &kMixedTools);
      const std::string free_text = std::string(thinking ? "Let me think. " : "Sure.") + kOpen;
      auto fresh = [&] {
        auto c = server::output_constraint(*b, body, chat::ChatFamily::V4, thinking);
        EXPECT_TRUE(c) << "no constraint under tool_choice auto";
        if (c) EXPECT_EQ(feed_checked(*c, tok, free_text), "");
        return c;
      };
      auto c = fresh();
      ASSERT_TRUE(c);
      EXPECT_EQ(allowed_starting_with(*c, tok, 'd'), 0);  // "dentionedon"
      EXPECT_EQ(allowed_starting_with(*c, tok, 'x'), 0);
      EXPECT_GT(allowed_starting_with(*c, tok, 'l'), 0);
      EXPECT_NE(feed_checked(*c, tok, "lookuq"), "");  // a declared name's prefix, then off it
      // The non-strict tool: any keys (declared or not, five of them), any values.
      c = fresh();
      ASSERT_EQ(feed_checked(*c, tok,
                             "lookup\">\n<｜DSML｜parameter name=\"n\" string=\"false\">7</｜DSML｜parameter>\n"
                             "<｜DSML｜parameter name=\"a\" string=\"true\">x</｜DSML｜parameter>\n"
                             "<｜DSML｜parameter name=\"b\" string=\"false\">[1, {\"z\": null}]</｜DSML｜parameter>\n"
                             "<｜DSML｜parameter name=\"c\" string=\"true\">y</｜DSML｜parameter>\n"
                             "<｜DSML｜parameter name=\"d\" string=\"false\">\"w\"</｜DSML｜parameter>\n"
                             "<｜DSML｜parameter name=\"e\" string=\"true\">v</｜DSML｜parameter>\n</｜DSML｜invoke>\n"
                             "</｜DSML｜tool_calls>"),
                "");
      EXPECT_TRUE(allows(*c, 1, V));  // EOS
      // Each key once.
      c = fresh();
      EXPECT_NE(feed_checked(*c, tok,
                             "lookup\">\n<｜DSML｜parameter name=\"a\" string=\"true\">x</｜DSML｜parameter>\n"
                             "<｜DSML｜parameter name=\"a\""),
                "");
      // get_weather: strict, its schema holds; otherwise its arguments are free too.
      c = fresh();
      const std::string undeclared = "get_weather\">\n<｜DSML｜parameter name=\"zzz\" string=\"true\">1</｜DSML｜parameter>";
      if (tools == &kMixedTools) EXPECT_NE(feed_checked(*c, tok, undeclared), "");
      else EXPECT_EQ(feed_checked(*c, tok, undeclared), "");
      c = fresh();
      EXPECT_EQ(feed_checked(*c, tok,
                             "get_weather\">\n<｜DSML｜parameter name=\"city\" string=\"true\">Paris</｜DSML｜parameter>\n"
                             "</｜DSML｜invoke>\n</｜DSML｜tool_calls>"),
                "");
      EXPECT_TRUE(allows(*c, 1, V));
    }
}

// The names are held however many tools there are (once a 64-bit candidate mask: beyond 64
// tools, any name went).
TEST(ToolCallsAuto, NamesHeldBeyondSixtyFourTools) {
  auto b = scripted_backend();
  const tokenizer::Tokenizer& tok = *b->tokenizer;
  Json tools = Json::array();
  for (int i = 0; i < 100; ++i)
    tools.push_back(Json{{"type", "function"}, {"function", {{"name", "t" + std::to_string(i)}}}});
  auto fresh = [&] {
    auto c = server::output_constraint(*b, auto_body(tools, false), chat::ChatFamily::V4, false);
    EXPECT_TRUE(c);
    if (c) EXPECT_EQ(feed_checked(*c, tok, kOpen), "");
    return c;
  };
  auto c = fresh();
  ASSERT_TRUE(c);
  EXPECT_EQ(allowed_starting_with(*c, tok, 'x'), 0);
  EXPECT_EQ(feed_checked(*c, tok, "t99\">\n\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>"), "");
  c = fresh();
  EXPECT_NE(feed_checked(*c, tok, "t100\""), "");
  c = fresh();
  EXPECT_NE(feed_checked(*c, tok, "t7x"), "");
  // The grammar alone: a sorted name list narrowed byte by byte.
  std::vector<server::ToolSpec> specs;
  for (int i = 0; i < 300; ++i) specs.push_back({"fn_" + std::to_string(i), Json(), false});
  server::ToolGrammar g(chat::ChatFamily::V4, specs, true);
  auto refused_at = [&](const std::string& text) {
    server::ToolState s = g.start(-1);
    for (size_t i = 0; i < text.size(); ++i)
      if (!g.feed(s, uint8_t(text[i]))) return int(i);
    return -1;
  };
  const std::string invoke = "<｜DSML｜invoke name=\"";
  EXPECT_EQ(refused_at(invoke + "fn_299\">\n\n</｜DSML｜invoke>"), -1);
  EXPECT_EQ(refused_at(invoke + "fn_2\">\n"), -1);
  EXPECT_EQ(refused_at(invoke + "fn_300\""), int(invoke.size()) + 5);
  EXPECT_EQ(refused_at(invoke + "fn_\""), int(invoke.size()) + 3);
  EXPECT_EQ(refused_at(invoke + "fn_29a"), int(invoke.size()) + 5);
}

namespace {

// A model that opens a block and calls a tool nobody declared.
const char* kUndeclaredCall =
    "Sure.\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"dentionedon\">\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>";

}  // namespace

// The scripted model writes a call of "dentionedon": under tool_choice "auto" the name is held
// to the declared tools in chat, Responses (its function tools) and Anthropic messages.
TEST(ToolCallsAuto, UndeclaredToolIsNeverCalled) {
  Running srv(server::ServerOptions{}, scripted_backend(kUndeclaredCall));
  const std::set<std::string> declared = {"get_weather", "lookup"};
  const json tools = json::parse(kMixedTools.dump());
  int st = 0;
  json chat = {{"messages", {{{"role", "user"}, {"content", "Weather?"}}}}, {"tools", tools},
               {"tool_choice", "auto"}, {"temperature", 0}, {"max_tokens", 200}};
  json r = post(srv, "/v1/chat/completions", chat.dump(), &st);
  ASSERT_EQ(st, 200) << r.dump();
  EXPECT_EQ(r.dump().find("dentionedon"), std::string::npos) << r.dump();
  const json& calls = r["choices"][0]["message"]["tool_calls"];
  ASSERT_GE(calls.size(), 1u) << r.dump();
  for (const json& c : calls) EXPECT_TRUE(declared.count(c["function"]["name"].get<std::string>())) << r.dump();

  json rtools = json::array();
  for (const json& t : tools) {
    json f = t["function"];
    f["type"] = "function";
    rtools.push_back(f);
  }
  json resp = {{"input", "Weather?"}, {"tools", rtools}, {"temperature", 0}, {"max_output_tokens", 200}};
  r = post(srv, "/v1/responses", resp.dump(), &st);
  ASSERT_EQ(st, 200) << r.dump();
  EXPECT_EQ(r.dump().find("dentionedon"), std::string::npos) << r.dump();
  int n = 0;
  for (const json& item : r["output"])
    if (item["type"] == "function_call") {
      ++n;
      EXPECT_TRUE(declared.count(item["name"].get<std::string>())) << r.dump();
    }
  EXPECT_GE(n, 1) << r.dump();

  json atools = json::array();
  for (const json& t : tools) {
    json a = {{"name", t["function"]["name"]}, {"input_schema", t["function"]["parameters"]}};
    if (t["function"].contains("strict")) a["strict"] = t["function"]["strict"];
    atools.push_back(a);
  }
  json msg = {{"messages", {{{"role", "user"}, {"content", "Weather?"}}}}, {"tools", atools}, {"temperature", 0},
              {"max_tokens", 200}};
  r = post(srv, "/v1/messages", msg.dump(), &st);
  ASSERT_EQ(st, 200) << r.dump();
  EXPECT_EQ(r.dump().find("dentionedon"), std::string::npos) << r.dump();
  n = 0;
  for (const json& block : r["content"])
    if (block["type"] == "tool_use") {
      ++n;
      EXPECT_TRUE(declared.count(block["name"].get<std::string>())) << r.dump();
    }
  EXPECT_GE(n, 1) << r.dump();
}

// ------------------------------------------------------------------ max_tokens inside a call

// A call cut by max_tokens comes back as generated so far, as the stream delivers it: its name
// and the arguments written until then, under finish_reason "length" (Anthropic: a tool_use
// with what of the input parses, stop_reason "max_tokens"; Responses: an incomplete
// function_call in an incomplete response).
TEST(ToolCalls, CallCutByMaxTokensKeepsWhatWasGenerated) {
  auto backend = scripted_backend();
  const tokenizer::Tokenizer& tok = *backend->tokenizer;
  const std::vector<int32_t> script = tok.encode(kScript, false);
  int64_t cut = 0;  // through the end of the "city" parameter, before "days"
  while (cut < int64_t(script.size()) &&
         tok.decode(std::vector<int32_t>(script.begin(), script.begin() + cut)).find("Paris</｜DSML｜parameter>") ==
             std::string::npos)
    ++cut;
  ASSERT_LT(cut, int64_t(script.size()));
  Running srv(server::ServerOptions{}, backend);
  json body = kChat;
  body["max_tokens"] = cut;
  int st = 0;
  json r = post(srv, "/v1/chat/completions", body.dump(), &st);
  ASSERT_EQ(st, 200) << r.dump();
  EXPECT_EQ(r["choices"][0]["finish_reason"], "length");
  const json& m = r["choices"][0]["message"];
  EXPECT_EQ(m["content"], "Sure.");
  ASSERT_EQ(m["tool_calls"].size(), 1u) << r.dump();
  EXPECT_EQ(m["tool_calls"][0]["function"]["name"], "get_weather");
  EXPECT_EQ(m["tool_calls"][0]["function"]["arguments"], "{\"city\": \"Paris\"");
  EXPECT_FALSE(m["tool_calls"][0]["id"].get<std::string>().empty());

  body["stream"] = true;
  Sse s = stream_post(srv.port, "/v1/chat/completions", body);
  ASSERT_EQ(s.status, 200);
  std::string name, args;
  for (const json& c : s.chunks)
    if (c["choices"][0]["delta"].contains("tool_calls"))
      for (const json& t : c["choices"][0]["delta"]["tool_calls"]) {
        if (t.contains("id")) name = t["function"]["name"];
        args += t["function"]["arguments"].get<std::string>();
      }
  EXPECT_EQ(name, m["tool_calls"][0]["function"]["name"]);
  EXPECT_EQ(args, m["tool_calls"][0]["function"]["arguments"]);  // what the stream delivered
  EXPECT_EQ(s.chunks.back()["choices"][0]["finish_reason"], "length");

  json anth = {{"max_tokens", cut},
               {"thinking", {{"type", "enabled"}, {"budget_tokens", 100}}},
               {"tools", {{{"name", "get_weather"}, {"input_schema", {{"type", "object"}}}}}},
               {"messages", {{{"role", "user"}, {"content", "Weather in Paris?"}}}}};
  r = post(srv, "/v1/messages", anth.dump(), &st);
  ASSERT_EQ(st, 200) << r.dump();
  EXPECT_EQ(r["stop_reason"], "max_tokens");
  ASSERT_EQ(r["content"].size(), 3u) << r.dump();
  EXPECT_EQ(r["content"][2]["type"], "tool_use");
  EXPECT_EQ(r["content"][2]["name"], "get_weather");
  EXPECT_EQ(r["content"][2]["input"], (json{{"city", "Paris"}}));

  json resp = {{"input", "Weather in Paris?"}, {"reasoning", {{"effort", "high"}}},
               {"tools", {{{"type", "function"}, {"name", "get_weather"}, {"parameters", {{"type", "object"}}}}}},
               {"max_output_tokens", cut}, {"store", false}};
  r = post(srv, "/v1/responses", resp.dump(), &st);
  ASSERT_EQ(st, 200) << r.dump();
  EXPECT_EQ(r["status"], "incomplete");
  json call;
  for (const json& item : r["output"])
    if (item["type"] == "function_call") call = item;
  ASSERT_TRUE(call.is_object()) << r.dump();
  EXPECT_EQ(call["name"], "get_weather");
  EXPECT_EQ(call["arguments"], "{\"city\": \"Paris\"");
  EXPECT_EQ(call["status"], "incomplete");
}

// What of a cut call's arguments parses (the Anthropic input): the output parser's unfinished
// objects at the points a cut can leave them.
TEST(ToolCalls, CutArgumentsParseAsFarAsTheyGo) {
  auto args_of = [](const std::string& text) {
    const chat::ParsedOutput out = chat::parse_output(chat::ChatFamily::V4, text, false);
    return out.cut_tool_calls.empty() ? std::string("<none>") : out.cut_tool_calls[0].arguments;
  };
  const std::string invoke = "\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n";
  EXPECT_EQ(args_of(invoke), "{");
  EXPECT_EQ(args_of(invoke + "<｜DSML｜parameter name=\"a\" string=\"true\">x \"y"), "{\"a\": \"x \\\"y");
  EXPECT_EQ(args_of(invoke + "<｜DSML｜parameter name=\"a\" string=\"false\">[1, 2"), "{\"a\": [1, 2");
  // Cut inside the closing tag: its start is no text of the value.
  EXPECT_EQ(args_of(invoke + "<｜DSML｜parameter name=\"a\" string=\"true\">abc</｜DS"), "{\"a\": \"abc");
  EXPECT_EQ(args_of(invoke + "<｜DSML｜parameter name=\"a\" string=\"true\">abc<"), "{\"a\": \"abc");
  EXPECT_EQ(args_of(invoke + "<｜DSML｜parameter name=\"a\" string=\"false\">1</｜DSML｜parameter>\n<｜DSML｜par"),
            "{\"a\": 1");
  // A complete call is no cut one; a call that failed otherwise is neither.
  EXPECT_EQ(args_of(invoke + "</｜DSML｜invoke>\n</｜DSML｜tool_calls>"), "<none>");
  EXPECT_EQ(args_of(invoke + "<｜DSML｜parameter name=\"a\" string=\"false\">nope</｜DSML｜parameter>\n"), "<none>");
}

// An Anthropic tool_use cut anywhere by max_tokens: its input is what of the arguments parses,
// a string value cut short, an array with its complete elements (or more), never a 500 or a
// dropped block.
TEST(ToolCalls, AnthropicCutInputIsWhatParses) {
  const char* script =
      "\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n"
      "<｜DSML｜parameter name=\"note\" string=\"true\">a \"quoted\" long note about things</｜DSML｜parameter>\n"
      "<｜DSML｜parameter name=\"xs\" string=\"false\">[1, 22, 333, {\"k\": \"v\"}]</｜DSML｜parameter>\n"
      "</｜DSML｜invoke>\n</｜DSML｜tool_calls>";
  auto backend = scripted_backend(script);
  const int64_t n = int64_t(backend->tokenizer->encode(script, false).size());
  Running srv(server::ServerOptions{}, backend);
  const std::string note = "a \"quoted\" long note about things";
  const json xs = json::parse(R"([1, 22, 333, {"k": "v"}])");
  int cut_notes = 0, cut_lists = 0;
  for (int64_t k = 1; k <= n; ++k) {
    json req = {{"max_tokens", k}, {"tools", {{{"name", "f"}, {"input_schema", {{"type", "object"}}}}}},
                {"messages", {{{"role", "user"}, {"content", "Go."}}}}};
    int st = 0;
    json r = post(srv, "/v1/messages", req.dump(), &st);
    ASSERT_EQ(st, 200) << k << " " << r.dump();
    if (k < n) EXPECT_EQ(r["stop_reason"], "max_tokens") << k;
    for (const json& b : r["content"]) {
      if (b["type"] != "tool_use") continue;
      const json& in = b["input"];
      ASSERT_TRUE(in.is_object()) << k << " " << r.dump();
      if (in.contains("note")) {
        // (Past the whole note: the start of its closing tag, whose '｜' the tiny tokenizer
        // spells in byte pieces, so that a cut inside it decodes to U+FFFD, not to markup.)
        const std::string got = in["note"];
        if (got.size() <= note.size()) EXPECT_EQ(note.substr(0, got.size()), got) << k;
        else EXPECT_EQ(got.substr(0, note.size() + 2), note + "</") << k;
        cut_notes += got.size() < note.size();
      }
      if (in.contains("xs")) {
        ASSERT_TRUE(in["xs"].is_array()) << k << " " << r.dump();
        ASSERT_LE(in["xs"].size(), xs.size()) << k;
        for (size_t i = 0; i + 1 < in["xs"].size(); ++i) EXPECT_EQ(in["xs"][i], xs[i]) << k;
        cut_lists += in["xs"] != xs;
      }
    }
  }
  EXPECT_GT(cut_notes, 0);
  EXPECT_GT(cut_lists, 0);
}
