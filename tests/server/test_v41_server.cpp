// The HTTP server over the tiny DeepSeek-V4.1 model (shared/golden/tiny-v41-a): greedy
// completions reproduce the official reference's continuations, chat renders with the V4.1
// encoder picked from the checkpoint, concurrent streams stay consistent, and a prompt that
// holds the image placeholder is a 400 naming it.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "../model/golden.h"
#include "server/server.h"
#include "server_harness.h"

using namespace deepinfer;
using json = nlohmann::json;
using namespace deepinfer::testing;

namespace {

std::string v41_dir() { return golden::dir("tiny-v41-a") + "/model"; }

std::shared_ptr<const server::Backend> v41_backend(const std::string& dir) {
  EngineOptions eo;
  eo.model_dir = dir;
  eo.threads = 1;
  eo.num_kv_blocks = 600;
  eo.max_model_len = 2048;
  return server::load_backend(eo, "tiny-v41");
}

}  // namespace

TEST(V41Server, CompletionsChatAndStreams) {
  auto backend = v41_backend(v41_dir());
  EXPECT_EQ(backend->chat_family, "v41");
  Running srv(server::ServerOptions{}, backend);
  int st = 0;
  // Token ids in, greedy out: the reference's own continuation of seq7 (reference/seq7.gen.i32).
  auto tokens = golden::sequence("tiny-v41-a", "seq7");
  auto want = golden::raw<int32_t>(golden::dir("tiny-v41-a") + "/reference/seq7.gen.i32");
  json r = post(srv, "/v1/completions",
                json{{"prompt", tokens}, {"max_tokens", 12}, {"temperature", 0}, {"return_token_ids", true}}.dump(), &st);
  ASSERT_EQ(st, 200) << r.dump();
  EXPECT_EQ(r["choices"][0]["token_ids"].get<std::vector<int32_t>>(),
            std::vector<int32_t>(want.begin(), want.begin() + 12));

  // Chat: the V4.1 encoder renders the turn (the same tokens /tokenize reports).
  const json messages = {{{"role", "system"}, {"content", "Be brief."}}, {{"role", "user"}, {"content", "Hi"}}};
  json t = post(srv, "/tokenize", json{{"messages", messages}}.dump(), &st);
  ASSERT_EQ(st, 200) << t.dump();
  json c = post(srv, "/v1/chat/completions", json{{"messages", messages}, {"max_tokens", 6}, {"temperature", 0}}.dump(), &st);
  ASSERT_EQ(st, 200) << c.dump();
  EXPECT_EQ(c["usage"]["prompt_tokens"], t["count"]);
  EXPECT_EQ(c["choices"][0]["message"]["role"], "assistant");

  // Four concurrent seeded streams: each equals the same request alone.
  auto body = [&](int salt) {
    std::vector<int> p{0};
    for (int i = 1; i < 25 + 9 * salt; ++i) p.push_back((i * 31 + salt * 17) % 1000 + 3);
    return json{{"prompt", p}, {"max_tokens", 10}, {"temperature", 0.8}, {"seed", 5 + salt}, {"stream", true}};
  };
  std::vector<std::string> alone(4), together(4);
  auto text_of = [](const Sse& s) {
    std::string out;
    for (const json& ch : s.chunks) out += ch["choices"][0]["text"].get<std::string>();
    return out;
  };
  for (int i = 0; i < 4; ++i) alone[size_t(i)] = text_of(stream_post(srv.port, "/v1/completions", body(i)));
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i)
    threads.emplace_back([&, i] { together[size_t(i)] = text_of(stream_post(srv.port, "/v1/completions", body(i))); });
  for (auto& th : threads) th.join();
  EXPECT_EQ(alone, together);
  for (const auto& s : alone) EXPECT_FALSE(s.empty());
}

TEST(V41Server, ImagePlaceholderIsABadRequest) {
  // The same checkpoint with the image placeholder at id 1000 (the release's is 129264).
  const std::string dir = ::testing::TempDir() + "/v41_server_image";
  std::filesystem::create_directories(dir);
  for (const auto& e : std::filesystem::directory_iterator(v41_dir()))
    if (e.is_regular_file())
      std::filesystem::copy_file(e.path(), dir + "/" + e.path().filename().string(),
                                 std::filesystem::copy_options::overwrite_existing);
  std::ifstream in(v41_dir() + "/config.json");
  json cfg = json::parse(in);
  cfg["image_token_id"] = 1000;
  std::filesystem::permissions(dir + "/config.json", std::filesystem::perms::owner_write,
                               std::filesystem::perm_options::add);
  std::ofstream(dir + "/config.json") << cfg.dump();
  {
    Running srv(server::ServerOptions{}, v41_backend(dir));
    int st = 0;
    json r = post(srv, "/v1/completions", json{{"prompt", {0, 17, 1000, 18}}, {"max_tokens", 4}}.dump(), &st);
    EXPECT_EQ(st, 400) << r.dump();
    EXPECT_NE(r["error"]["message"].get<std::string>().find("image token id 1000"), std::string::npos) << r.dump();
    Sse s = stream_post(srv.port, "/v1/completions", json{{"prompt", {0, 1000}}, {"max_tokens", 4}, {"stream", true}});
    EXPECT_EQ(s.status, 400) << s.body;
    r = post(srv, "/v1/completions", json{{"prompt", {0, 17, 18}}, {"max_tokens", 2}}.dump(), &st);
    EXPECT_EQ(st, 200) << r.dump();  // other prompts are served
  }
  std::filesystem::remove_all(dir);
}
