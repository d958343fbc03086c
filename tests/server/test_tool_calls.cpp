// Chat output through the HTTP routes with a scripted "model": the engine runs a runner
// that emits a fixed text (reasoning, </think>, content, a DSML tool call, EOS), so the
// reasoning split, tool-call parsing and streaming deltas of /v1/chat/completions and
// /v1/messages are checked end to end with the tiny model's tokenizer.
#include <gtest/gtest.h>

#include <map>

#include "engine/engine_impl.h"
#include "server/server.h"
#include "server_harness.h"
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

std::shared_ptr<const server::Backend> scripted_backend() {
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
                                  std::make_unique<ScriptedRunner>(info.vocab_size, tok->encode(kScript, false)));
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
