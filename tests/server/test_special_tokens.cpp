// Chat and Anthropic messages hide special tokens by default (vLLM's default): a scripted
// "model" emits text with special tokens (pad, BOS) between its words, and no raw token text
// may reach a message, streamed or not; skip_special_tokens: false shows them again.
#include <gtest/gtest.h>

#include <map>

#include "engine/engine_impl.h"
#include "server/server.h"
#include "server_harness.h"
#include "tokenizer/tokenizer.h"

using namespace deepinfer;
using namespace deepinfer::testing;

namespace {

// Emits script[k] as the k-th token of every request, then EOS (id 1).
class ScriptRunner final : public engine::Runner {
 public:
  ScriptRunner(int64_t vocab, std::vector<int32_t> script) : vocab_(vocab), script_(std::move(script)) {}
  int64_t vocab_size() const override { return vocab_; }
  void run(const std::vector<engine::ScheduledChunk>& chunks, std::vector<float>& rows) override {
    int64_t n = 0;
    for (const auto& c : chunks) n += c.all_rows ? c.n_tokens : c.want_logits;
    rows.assign(size_t(n * vocab_), 0.0f);
    float* row = rows.data();
    for (const auto& c : chunks) {
      const int64_t n_rows = c.all_rows ? c.n_tokens : c.want_logits;
      if (c.want_logits) {  // the chunk's last row is the one sampled
        const size_t k = size_t(emitted_[c.seq_id]++);
        row[(n_rows - 1) * vocab_ + (k < script_.size() ? script_[k] : 1)] = 50.0f;
      }
      row += n_rows * vocab_;
    }
  }
  void apply(const engine::StateOp& op) override {
    if (op.kind == engine::StateOp::Kind::kFree || op.kind == engine::StateOp::Kind::kSaveSnapshot) emitted_.erase(op.seq);
  }

 private:
  int64_t vocab_;
  std::vector<int32_t> script_;
  std::map<uint64_t, int64_t> emitted_;
};

std::shared_ptr<const server::Backend> scripted(std::vector<int32_t>* script_out) {
  const std::string dir = std::string(DI_SHARED_DIR) + "/golden/tiny-v4-c/model";
  auto tok = std::make_shared<const tokenizer::Tokenizer>(tokenizer::Tokenizer::from_file(dir));
  // "Hello", pad, " world", BOS: both ids are special tokens of the tiny tokenizer.
  std::vector<int32_t> script = tok->encode("Hello", false);
  EXPECT_TRUE(tok->is_special(2) && tok->is_special(0));
  script.push_back(2);
  for (int32_t t : tok->encode(" world", false)) script.push_back(t);
  script.push_back(0);
  *script_out = script;
  kv::KvLayout layout;
  layout.window_tokens = 4;
  layout.head_dim = 8;
  layout.index_head_dim = 8;
  layout.layer_ratios = {0, 4, 128};
  EngineInfo info;
  info.vocab_size = tok->vocab_size();
  info.max_model_len = 4096;
  engine::EngineCoreOptions o;
  o.max_model_len = 4096;
  o.eos_token_id = 1;
  o.token_text = [tok](int32_t id) { return tok->is_special(id) ? std::string() : tok->token_bytes(id); };
  auto b = std::make_shared<server::Backend>();
  b->engine = engine::make_engine(info, o, kv::KvSpec::make(layout, 16), 10000,
                                  std::make_unique<ScriptRunner>(info.vocab_size, script));
  b->tokenizer = tok;
  b->chat_family = "v4";
  b->model_id = "scripted";
  return b;
}

class SpecialTokens : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    backend_ = scripted(&script_);
    server_ = new Running(server::ServerOptions{}, backend_);
  }
  static void TearDownTestSuite() {
    delete server_;
    backend_.reset();
  }
  static inline std::shared_ptr<const server::Backend> backend_;
  static inline Running* server_ = nullptr;
  static inline std::vector<int32_t> script_;
};

const json kUser = {{"messages", {{{"role", "user"}, {"content", "Hi"}}}}};

}  // namespace

TEST_F(SpecialTokens, ChatAndMessagesHideThemByDefault) {
  const std::string pad = backend_->tokenizer->token_bytes(2), bos = backend_->tokenizer->token_bytes(0);
  ASSERT_FALSE(pad.empty());
  for (bool stream : {false, true}) {
    json body = kUser;
    body["stream"] = stream;
    std::string content;
    if (stream) {
      Sse s = stream_post(server_->port, "/v1/chat/completions", body);
      ASSERT_EQ(s.status, 200) << s.body;
      for (const json& c : s.chunks)
        for (const json& ch : c["choices"])
          if (ch["delta"].contains("content")) content += ch["delta"]["content"].get<std::string>();
    } else {
      int st = 0;
      json r = post(*server_, "/v1/chat/completions", body.dump(), &st);
      ASSERT_EQ(st, 200) << r.dump();
      content = r["choices"][0]["message"]["content"];
    }
    EXPECT_EQ(content, "Hello world") << stream;
  }
  // Asked for, they show.
  int st = 0;
  json raw = post(*server_, "/v1/chat/completions", json{{"messages", kUser["messages"]}, {"skip_special_tokens", false}}.dump(),
                  &st);
  ASSERT_EQ(st, 200);
  EXPECT_EQ(raw["choices"][0]["message"]["content"], "Hello" + pad + " world" + bos);

  // Anthropic messages, streamed and not.
  json m = {{"max_tokens", 50}, {"messages", kUser["messages"]}};
  json r = post(*server_, "/v1/messages", m.dump(), &st);
  ASSERT_EQ(st, 200) << r.dump();
  std::string text;
  for (const auto& b : r["content"])
    if (b["type"] == "text") text += b["text"].get<std::string>();
  EXPECT_EQ(text, "Hello world");
  m["stream"] = true;
  Sse s = stream_post(server_->port, "/v1/messages", m);
  ASSERT_EQ(s.status, 200) << s.body;
  std::string streamed;
  for (const json& e : s.chunks)
    if (e.value("type", "") == "content_block_delta" && e["delta"].value("type", "") == "text_delta")
      streamed += e["delta"]["text"].get<std::string>();
  EXPECT_EQ(streamed, "Hello world");
}
