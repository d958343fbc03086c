// The HTTP server over the tiny model on 127.0.0.1 (ephemeral ports): completions, chat,
// streaming, tokenize, metrics, errors with the right status and shape, authentication,
// 503 while loading, a client that disconnects mid-stream, 16 concurrent streams.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "server/params.h"
#include "server/server.h"
#include "server_harness.h"

using namespace deepinfer;
using json = nlohmann::json;
using namespace deepinfer::testing;

namespace {

class ServerTest : public TinyServerSuite<ServerTest> {};

std::vector<int> ids(int n, int salt) {
  std::vector<int> v{0};
  for (int i = 1; i < n; ++i) v.push_back((i * 53 + salt * 7) % 1000 + 3);
  return v;
}

// A raw connection to 127.0.0.1:port (-1 on failure).
int raw_connect(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(uint16_t(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd >= 0 && ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) return fd;
  if (fd >= 0) ::close(fd);
  return -1;
}

// What the server sends on fd until it closes, `until` appears, or nothing comes for `quiet`.
std::string raw_read(int fd, std::chrono::milliseconds quiet, const std::string& until = "") {
  std::string got;
  char buf[4096];
  for (;;) {
    if (!until.empty() && got.find(until) != std::string::npos) break;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, int(quiet.count())) <= 0) break;
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    got.append(buf, size_t(n));
  }
  return got;
}

// Sends `request` on a new connection and returns everything the server answers (one
// response when it closes after it or stays quiet for two seconds).
std::string raw_exchange(int port, const std::string& request) {
  const int fd = raw_connect(port);
  if (fd < 0) return "no connection";
  ::send(fd, request.data(), request.size(), MSG_NOSIGNAL);
  std::string got = raw_read(fd, std::chrono::milliseconds(2000));
  ::close(fd);
  return got;
}

std::string status_line(const std::string& response) { return response.substr(0, response.find("\r\n")); }

}  // namespace

TEST_F(ServerTest, HealthModelsTokenize) {
  auto c = srv().client();
  EXPECT_EQ(c.Get("/health")->status, 200);
  auto m = json::parse(c.Get("/v1/models")->body);
  EXPECT_EQ(m["data"][0]["id"], "tiny");
  EXPECT_EQ(m["data"][0]["max_model_len"], 4096);
  int st = 0;
  json t = post(srv(), "/tokenize", R"({"prompt": "Hello world"})", &st);
  ASSERT_EQ(st, 200);
  EXPECT_EQ(t["tokens"][0], 0);  // BOS added
  json d = post(srv(), "/detokenize", json{{"tokens", json(t["tokens"]).get<std::vector<int>>()}}.dump(), &st);
  EXPECT_EQ(d["prompt"], "<｜begin▁of▁sentence｜>Hello world");
  json chat = post(srv(), "/tokenize", R"({"messages": [{"role": "user", "content": "Hi"}]})", &st);
  EXPECT_EQ(st, 200);
  EXPECT_GT(chat["count"].get<int>(), 3);
}

TEST_F(ServerTest, CompletionsTextAndIdsGreedyRepeat) {
  int st = 0;
  const std::string body = R"({"model": "tiny", "prompt": "The capital of France is", "max_tokens": 12,
                               "temperature": 0, "return_token_ids": true})";
  json a = post(srv(), "/v1/completions", body, &st);
  ASSERT_EQ(st, 200) << a.dump();
  json b = post(srv(), "/v1/completions", body, &st);
  EXPECT_EQ(a["choices"][0]["token_ids"], b["choices"][0]["token_ids"]);
  EXPECT_EQ(a["choices"][0]["text"], b["choices"][0]["text"]);
  EXPECT_EQ(a["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(a["usage"]["completion_tokens"], 12);
  EXPECT_EQ(a["object"], "text_completion");
  json c = post(srv(), "/v1/completions", json{{"prompt", ids(30, 1)}, {"max_tokens", 5}, {"temperature", 0.7},
                                               {"seed", 11}, {"logprobs", 3}}.dump(), &st);
  ASSERT_EQ(st, 200) << c.dump();
  EXPECT_EQ(c["usage"]["prompt_tokens"], 30);
  EXPECT_EQ(c["choices"][0]["logprobs"]["top_logprobs"].size(), 5u);
  json c2 = post(srv(), "/v1/completions", json{{"prompt", ids(30, 1)}, {"max_tokens", 5}, {"temperature", 0.7},
                                                {"seed", 11}, {"logprobs", 3}}.dump(), &st);
  EXPECT_EQ(c["choices"][0]["text"], c2["choices"][0]["text"]);  // seeded
}

TEST_F(ServerTest, StopStringCutsTheText) {
  int st = 0;
  json full = post(srv(), "/v1/completions",
                   json{{"prompt", ids(20, 3)}, {"max_tokens", 16}, {"temperature", 0}, {"return_token_ids", true}}.dump(),
                   &st);
  ASSERT_EQ(st, 200);
  const std::string text = full["choices"][0]["text"];
  ASSERT_GT(text.size(), 6u);
  // A stop string from the middle of the output: everything before its first occurrence.
  const std::string stop = text.substr(text.size() / 2, 2);
  json cut = post(srv(), "/v1/completions",
                  json{{"prompt", ids(20, 3)}, {"max_tokens", 16}, {"temperature", 0}, {"stop", stop}}.dump(), &st);
  ASSERT_EQ(st, 200);
  EXPECT_EQ(cut["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(cut["choices"][0]["stop_reason"], stop);
  EXPECT_EQ(cut["choices"][0]["text"], text.substr(0, text.find(stop)));
}

TEST_F(ServerTest, ChatPlainAndThinking) {
  int st = 0;
  json r = post(srv(), "/v1/chat/completions",
                R"({"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
                    "max_tokens": 8, "temperature": 0})",
                &st);
  ASSERT_EQ(st, 200) << r.dump();
  EXPECT_EQ(r["object"], "chat.completion");
  EXPECT_EQ(r["choices"][0]["message"]["role"], "assistant");
  EXPECT_TRUE(r["choices"][0]["message"]["content"].is_string());
  json t = post(srv(), "/v1/chat/completions",
                R"({"messages": [{"role": "user", "content": [{"type": "text", "text": "Hi"}]}],
                    "max_tokens": 8, "temperature": 0, "chat_template_kwargs": {"thinking": true},
                    "tools": [{"type": "function", "function": {"name": "get_weather", "parameters":
                              {"type": "object", "properties": {"city": {"type": "string"}}}}}]})",
                &st);
  ASSERT_EQ(st, 200) << t.dump();
  EXPECT_TRUE(t["choices"][0]["message"].contains("reasoning_content"));
  EXPECT_GT(t["usage"]["prompt_tokens"].get<int>(), r["usage"]["prompt_tokens"].get<int>());  // tools rendered
  json bad = post(srv(), "/v1/chat/completions", R"({"messages": []})", &st);
  EXPECT_EQ(st, 400);
  bad = post(srv(), "/v1/chat/completions", R"({"messages": [{"role": 5, "content": "x"}], "max_tokens": 2})", &st);
  EXPECT_EQ(st, 400) << bad.dump();
  EXPECT_EQ(bad["error"]["param"], "messages");
}

// OpenAI's reasoning_effort names map onto the levels the V4 encoder has (high, max): each
// turns thinking on and renders like its DeepSeek level; "none" turns it off; a name no
// client sends is a 400 from the encoder.
TEST_F(ServerTest, ReasoningEffortNamesMapToTheFamilyLevels) {
  auto prompt_tokens = [&](const json& effort, int* st) {
    json body = {{"messages", {{{"role", "user"}, {"content", "Hi"}}}}, {"max_tokens", 1}, {"temperature", 0}};
    if (!effort.is_null()) body["reasoning_effort"] = effort;
    json r = post(srv(), "/v1/chat/completions", body.dump(), st);
    return *st == 200 ? r["usage"]["prompt_tokens"].get<int>() : -1;
  };
  int st = 0;
  const int off = prompt_tokens(nullptr, &st);
  const int high = prompt_tokens("high", &st);
  const int max = prompt_tokens("max", &st);
  ASSERT_EQ(st, 200);
  for (const char* e : {"minimal", "low", "medium"}) {
    EXPECT_EQ(prompt_tokens(e, &st), high) << e;
    EXPECT_EQ(st, 200) << e;
  }
  EXPECT_EQ(prompt_tokens("xhigh", &st), max);
  EXPECT_EQ(prompt_tokens("none", &st), off);
  EXPECT_EQ(prompt_tokens("extreme", &st), -1);
  EXPECT_EQ(st, 400);
}

TEST_F(ServerTest, StreamingMatchesNonStreaming) {
  json body = {{"prompt", ids(25, 4)}, {"max_tokens", 10}, {"temperature", 0}, {"return_token_ids", true}};
  int st = 0;
  json whole = post(srv(), "/v1/completions", body.dump(), &st);
  body["stream"] = true;
  body["stream_options"] = {{"include_usage", true}};
  Sse s = stream_post(srv().port, "/v1/completions", body);
  ASSERT_EQ(s.status, 200);
  EXPECT_TRUE(s.done);
  std::string text;
  std::vector<int> toks;
  for (const json& c : s.chunks)
    if (!c["choices"].empty()) {
      text += c["choices"][0]["text"].get<std::string>();
      for (int t : c["choices"][0]["token_ids"]) toks.push_back(t);
    }
  EXPECT_EQ(text, whole["choices"][0]["text"]);
  EXPECT_EQ(json(toks), whole["choices"][0]["token_ids"]);
  ASSERT_GE(s.chunks.size(), 2u);
  EXPECT_EQ(s.chunks[s.chunks.size() - 2]["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(s.chunks.back()["usage"]["completion_tokens"], 10);

  Sse chat = stream_post(srv().port, "/v1/chat/completions",
                         json{{"messages", {{{"role", "user"}, {"content", "Hello"}}}}, {"max_tokens", 6},
                              {"temperature", 0}, {"stream", true}});
  ASSERT_EQ(chat.status, 200);
  EXPECT_TRUE(chat.done);
  ASSERT_GE(chat.chunks.size(), 2u);
  EXPECT_EQ(chat.chunks[0]["choices"][0]["delta"]["role"], "assistant");
  EXPECT_EQ(chat.chunks.back()["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(chat.chunks.back()["object"], "chat.completion.chunk");
}

TEST_F(ServerTest, ErrorsHaveStatusAndShape) {
  int st = 0;
  auto check = [&](const std::string& body, int want, const std::string& code, const std::string& param = "") {
    json e = post(srv(), "/v1/completions", body, &st);
    EXPECT_EQ(st, want) << body;
    ASSERT_TRUE(e.is_object() && e.contains("error")) << body;
    EXPECT_EQ(e["error"]["code"], code) << body;
    EXPECT_TRUE(e["error"]["message"].is_string());
    if (!param.empty()) {
      EXPECT_EQ(e["error"]["param"], param) << body;
    }
  };
  check("{not json", 400, "invalid_json");
  check("[1, 2]", 400, "invalid_json");
  check(R"({"prompt": "x", "max_tokens": "ten"})", 400, "invalid_request", "max_tokens");
  check(R"({"prompt": "x", "max_tokens": -3})", 400, "invalid_request", "max_tokens");
  check(R"({"prompt": "x", "top_p": 1.5})", 400, "invalid_request", "top_p");
  check(R"({"prompt": "x", "temperature": "hot"})", 400, "invalid_request", "temperature");
  check(R"({"prompt": "x", "stop": 5})", 400, "invalid_request", "stop");
  check(R"({"prompt": [1, 99999]})", 400, "invalid_request", "prompt");
  check(R"({"prompt": "x", "n": 0})", 400, "invalid_request", "n");
  check(R"({"prompt": "x", "n": 2, "best_of": 1})", 400, "invalid_request", "best_of");
  check(R"({})", 400, "invalid_request", "prompt");
  check(json{{"prompt", ids(5000, 1)}}.dump(), 400, "context_length_exceeded");
  check(json{{"prompt", ids(100, 1)}, {"max_tokens", 4000}}.dump(), 400, "context_length_exceeded", "max_tokens");
  check(json{{"prompt", ids(100, 1)}, {"max_tokens", INT64_MAX}}.dump(), 400, "context_length_exceeded", "max_tokens");
  check(R"({"prompt": "x", "model": "gpt-4"})", 404, "not_found", "model");
  // Over the body limit (1 MiB here): 413 before anything is parsed.
  check(json{{"prompt", std::string(2 << 20, 'a')}}.dump(), 413, "payload_too_large");
  auto c = srv().client();
  auto r = c.Get("/v1/nothing");
  EXPECT_EQ(r->status, 404);
  EXPECT_EQ(json::parse(r->body)["error"]["code"], "not_found");
  // A bad request before the stream starts is a plain JSON error, not an SSE body.
  Sse s = stream_post(srv().port, "/v1/completions", json{{"prompt", "x"}, {"top_p", 2}, {"stream", true}});
  EXPECT_EQ(s.status, 400);
  EXPECT_EQ(json::parse(s.body)["error"]["param"], "top_p");
  EXPECT_EQ(c.Get("/health")->status, 200);  // still serving
}

TEST_F(ServerTest, ApiKeyAndLoading) {
  server::ServerOptions so;
  so.api_key = "sekrit";
  Running keyed(so, backend_);
  int st = 0;
  post(keyed, "/v1/completions", R"({"prompt": "x", "max_tokens": 1})", &st);
  EXPECT_EQ(st, 401);
  post(keyed, "/v1/completions", R"({"prompt": "x", "max_tokens": 1})", &st, {{"Authorization", "Bearer wrong"}});
  EXPECT_EQ(st, 401);
  post(keyed, "/v1/completions", R"({"prompt": "x", "max_tokens": 1})", &st, {{"Authorization", "Bearer sekrit"}});
  EXPECT_EQ(st, 200);
  EXPECT_EQ(keyed.client().Get("/health")->status, 200);
  // The tokenizer routes and /metrics sit behind the key too (a flag opens /metrics).
  post(keyed, "/tokenize", R"({"prompt": "x"})", &st);
  EXPECT_EQ(st, 401);
  post(keyed, "/detokenize", R"({"tokens": [0]})", &st);
  EXPECT_EQ(st, 401);
  post(keyed, "/tokenize", R"({"prompt": "x"})", &st, {{"x-api-key", "sekrit"}});
  EXPECT_EQ(st, 200);
  EXPECT_EQ(keyed.client().Get("/metrics")->status, 401);
  EXPECT_EQ(keyed.client().Get("/metrics", {{"Authorization", "Bearer sekrit"}})->status, 200);
  so.metrics_without_key = true;
  Running scraped(so, backend_);
  EXPECT_EQ(scraped.client().Get("/metrics")->status, 200);
  post(scraped, "/tokenize", R"({"prompt": "x"})", &st);
  EXPECT_EQ(st, 401);

  Running loading(server::ServerOptions{}, nullptr);
  auto c = loading.client();
  EXPECT_EQ(c.Get("/health")->status, 503);
  post(loading, "/v1/completions", R"({"prompt": "x"})", &st);
  EXPECT_EQ(st, 503);
}

// What a web page can make a browser send: a foreign Origin is refused before any work (even a
// request CORS would call "simple"), and a POST body must say it is JSON.
TEST_F(ServerTest, ForeignOriginsAndNonJsonBodiesAreRefused) {
  auto c = srv().client();
  const std::string body = R"({"prompt": "x", "max_tokens": 1})";
  auto r = c.Post("/v1/completions", {{"Origin", "http://evil.example"}}, body, "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 403);
  EXPECT_NE(json::parse(r->body)["error"]["message"].get<std::string>().find("evil.example"), std::string::npos);
  r = c.Post("/tokenize", {{"Origin", "null"}}, R"({"prompt": "x"})", "application/json");
  EXPECT_EQ(r->status, 403);
  r = c.Get("/v1/models", {{"Origin", "http://evil.example"}});
  EXPECT_EQ(r->status, 403);
  // The server's own origin (the chat page) is fine.
  const std::string self = "http://127.0.0.1:" + std::to_string(srv().port);
  r = c.Post("/v1/completions", {{"Origin", self}}, body, "application/json");
  EXPECT_EQ(r->status, 200) << r->body;
  // DNS rebinding: a page of evil.example whose name now resolves to 127.0.0.1 is "same origin"
  // by its headers, but a loopback server is never reached under that name.
  const std::string port = std::to_string(srv().port);
  r = c.Post("/v1/completions", {{"Origin", "http://evil.example:" + port}, {"Host", "evil.example:" + port}}, body,
             "application/json");
  EXPECT_EQ(r->status, 403);
  r = c.Post("/v1/completions", {{"Origin", "http://localhost:" + port}, {"Host", "localhost:" + port}}, body,
             "application/json");
  EXPECT_EQ(r->status, 200) << r->body;

  for (const char* type : {"text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x"}) {
    r = c.Post("/v1/completions", body, type);
    EXPECT_EQ(r->status, 415) << type;
  }
  r = c.Post("/v1/chat/completions", R"({"messages": [{"role": "user", "content": "hi"}]})", "text/plain;charset=UTF-8");
  EXPECT_EQ(r->status, 415);
  r = c.Post("/v1/completions", body, "Application/JSON; charset=utf-8");
  EXPECT_EQ(r->status, 200) << r->body;
  // A body with no Content-Type at all (a fetch of a Blob) is refused as well.
  httplib::Request raw;
  raw.method = "POST";
  raw.path = "/v1/completions";
  raw.body = body;
  auto none = c.send(raw);
  ASSERT_TRUE(none);
  EXPECT_EQ(none->status, 415);
  EXPECT_EQ(c.Get("/health")->status, 200);
}

// DNS rebinding: a page of evil.example, its name re-pointed at 127.0.0.1, is same-origin with
// the server by the browser's rules, so Origin checks never see it; reads (GET /v1/models,
// /metrics) do not even carry an Origin. A loopback server answers only loopback Host names.
TEST_F(ServerTest, LoopbackServerAnswersOnlyLoopbackHostNames) {
  auto c = srv().client();
  const std::string port = std::to_string(srv().port);
  auto host_refusals = [&] {
    const std::string m = c.Get("/metrics")->body;
    const std::string row = "deepinfer_requests_rejected_total{model_name=\"tiny\",reason=\"host_not_allowed\"} ";
    const size_t at = m.find(row);
    return at == std::string::npos ? -1L : std::stol(m.substr(at + row.size()));
  };
  const long before = host_refusals();
  EXPECT_GE(before, 0);
  const std::string chat = R"({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1})";
  for (const std::string& host :
       std::vector<std::string>{"evil.example:" + port, "evil.example", "127.evil.example:" + port, "localhost.evil.example"}) {
    const httplib::Headers h = {{"Host", host}};
    auto r = c.Get("/v1/models", h);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 403) << host;
    EXPECT_NE(r->body.find("--allowed-hosts"), std::string::npos) << r->body;
    EXPECT_EQ(c.Get("/metrics", h)->status, 403) << host;
    EXPECT_EQ(c.Post("/v1/chat/completions", h, chat, "application/json")->status, 403) << host;
    EXPECT_EQ(c.Get("/health", h)->status, 200) << host;  // left open: it says only "up"
  }
  EXPECT_EQ(host_refusals(), before + 12);
  for (const std::string& host : std::vector<std::string>{"127.0.0.1:" + port, "127.0.0.1", "localhost:" + port, "LocalHost",
                                                          "localhost.", "[::1]:" + port, "127.1.2.3"}) {
    EXPECT_EQ(c.Get("/v1/models", {{"Host", host}})->status, 200) << host;
    EXPECT_EQ(c.Post("/v1/chat/completions", {{"Host", host}}, chat, "application/json")->status, 200) << host;
  }
  // HTTP/1.0 without a Host is fine (no browser sends that); two Host headers are a 400.
  EXPECT_EQ(status_line(raw_exchange(srv().port, "GET /v1/models HTTP/1.0\r\n\r\n")), "HTTP/1.1 200 OK");
  EXPECT_EQ(status_line(raw_exchange(srv().port, "GET /v1/models HTTP/1.1\r\nHost: localhost\r\nHost: evil.example\r\n"
                                                 "Connection: close\r\n\r\n")),
            "HTTP/1.1 400 Bad Request");

  // --allowed-hosts: a reverse proxy's public name (any port), or "*".
  server::ServerOptions so;
  so.allowed_hosts = {"Proxy.Example"};
  Running proxied(so, backend_);
  auto p = proxied.client();
  EXPECT_EQ(p.Get("/v1/models", {{"Host", "proxy.example"}})->status, 200);
  EXPECT_EQ(p.Get("/v1/models", {{"Host", "proxy.example:443"}})->status, 200);
  // The page it serves posts with its own origin: same origin under an allowed name.
  EXPECT_EQ(p.Post("/v1/chat/completions", {{"Host", "proxy.example"}, {"Origin", "https://proxy.example"}}, chat,
                   "application/json")->status,
            200);
  EXPECT_EQ(p.Get("/v1/models", {{"Host", "evil.example"}})->status, 403);
  EXPECT_EQ(p.Get("/v1/models", {{"Host", "localhost"}})->status, 200);
  so.allowed_hosts = {"*"};
  Running any(so, backend_);
  EXPECT_EQ(any.client().Get("/v1/models", {{"Host", "evil.example"}})->status, 200);

  // On a non-loopback address nothing is checked unless --allowed-hosts is given.
  for (const bool listed : {false, true}) {
    server::ServerOptions wide;
    wide.host = "0.0.0.0";
    wide.port = 0;
    if (listed) wide.allowed_hosts = {"api.example"};
    server::Server s(wide);
    const int wide_port = s.bind();
    s.set_backend(backend_);
    std::thread loop([&] { s.listen(); });
    httplib::Client wc("127.0.0.1", wide_port);
    wc.set_read_timeout(client_timeout_seconds(), 0);
    auto r = wc.Get("/v1/models", {{"Host", "evil.example"}});
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, listed ? 403 : 200);
    EXPECT_EQ(wc.Get("/v1/models", {{"Host", "api.example"}})->status, 200);
    s.stop();
    loop.join();
  }
}

// Expect: 100-continue: a head that would be refused (no key, a foreign Host or Origin, no
// such route, a body that is not JSON, over the size limit) gets its final status at once,
// never a 100 that invites the upload; only a head that passes hears 100 Continue.
TEST_F(ServerTest, ExpectContinueIsAnsweredOnlyAfterTheChecks) {
  server::ServerOptions so;
  so.api_key = "sekrit";
  so.max_body_bytes = 8 << 20;
  Running keyed(so, backend_);
  auto head = [](const std::string& path, const std::string& extra, size_t length) {
    return "POST " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\n" + extra + "Content-Length: " + std::to_string(length) +
           "\r\nExpect: 100-continue\r\n\r\n";
  };
  const std::string key = "Authorization: Bearer sekrit\r\n", json_type = "Content-Type: application/json\r\n";
  struct Case {
    std::string request, want;
  };
  const std::vector<Case> cases = {
      {head("/v1/completions", json_type, 5 << 20), "HTTP/1.1 401 Unauthorized"},
      {head("/v1/completions", json_type + "Authorization: Bearer wrong\r\n", 5 << 20), "HTTP/1.1 401 Unauthorized"},
      {head("/tokenize", json_type, 1000), "HTTP/1.1 401 Unauthorized"},
      {head("/v1/completions", json_type + key + "Origin: http://evil.example\r\n", 5 << 20), "HTTP/1.1 403 Forbidden"},
      {"POST /v1/completions HTTP/1.1\r\nHost: evil.example\r\n" + json_type + key +
           "Content-Length: 5000000\r\nExpect: 100-continue\r\n\r\n",
       "HTTP/1.1 403 Forbidden"},
      {head("/v1/nothing", json_type + key, 1000), "HTTP/1.1 404 Not Found"},
      {head("/v1/models", json_type + key, 1000), "HTTP/1.1 405 Method Not Allowed"},
      {head("/v1/completions", "Content-Type: text/plain\r\n" + key, 1000), "HTTP/1.1 415 Unsupported Media Type"},
      {head("/v1/completions", json_type + key, 9 << 20), "HTTP/1.1 413 Content Too Large"},
      {"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n" + json_type + "Transfer-Encoding: chunked\r\n"
       "Expect: 100-continue\r\n\r\n",
       "HTTP/1.1 401 Unauthorized"},
  };
  for (const Case& k : cases) {
    const int fd = raw_connect(keyed.port);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::send(fd, k.request.data(), k.request.size(), MSG_NOSIGNAL), ssize_t(k.request.size()));
    // The refusal comes at once and the connection closes; a server that sent 100 waits for the body.
    const std::string got = raw_read(fd, std::chrono::milliseconds(3000));
    ::close(fd);
    EXPECT_EQ(status_line(got), k.want) << k.request;
    EXPECT_EQ(got.find("100 Continue"), std::string::npos) << k.request;
    EXPECT_NE(got.find("Connection: close"), std::string::npos) << got;
  }
  // A head that passes is invited, and its body then answered.
  const std::string body = R"({"prompt": "x", "max_tokens": 1})";
  const int fd = raw_connect(keyed.port);
  ASSERT_GE(fd, 0);
  const std::string h = head("/v1/completions", json_type + key + "Connection: close\r\n", body.size());
  ASSERT_EQ(::send(fd, h.data(), h.size(), MSG_NOSIGNAL), ssize_t(h.size()));
  EXPECT_EQ(raw_read(fd, std::chrono::milliseconds(5000), "\r\n\r\n"), "HTTP/1.1 100 Continue\r\n\r\n");
  ASSERT_EQ(::send(fd, body.data(), body.size(), MSG_NOSIGNAL), ssize_t(body.size()));
  const std::string answer = raw_read(fd, std::chrono::milliseconds(client_timeout_seconds() * 1000));
  ::close(fd);
  EXPECT_EQ(status_line(answer), "HTTP/1.1 200 OK") << answer;
  EXPECT_EQ(keyed.client().Get("/health")->status, 200);
}

// Every status the server sends has its own reason phrase (the 415 once said "Status").
TEST_F(ServerTest, StatusLinesHaveTheirReasonPhrases) {
  const std::string body = R"({"prompt": "x", "max_tokens": 1})";
  auto post_as = [&](const std::string& path, const std::string& type) {
    return status_line(raw_exchange(srv().port, "POST " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: " + type +
                                                    "\r\nContent-Length: " + std::to_string(body.size()) +
                                                    "\r\nConnection: close\r\n\r\n" + body));
  };
  EXPECT_EQ(post_as("/v1/completions", "text/plain"), "HTTP/1.1 415 Unsupported Media Type");
  EXPECT_EQ(post_as("/v1/completions", "application/json"), "HTTP/1.1 200 OK");
  EXPECT_EQ(post_as("/v1/models", "application/json"), "HTTP/1.1 405 Method Not Allowed");
  EXPECT_EQ(post_as("/v1/nothing", "application/json"), "HTTP/1.1 404 Not Found");
  EXPECT_EQ(status_line(raw_exchange(srv().port, "GET /v1/models HTTP/1.1\r\nHost: evil.example\r\nConnection: close\r\n\r\n")),
            "HTTP/1.1 403 Forbidden");
}

TEST_F(ServerTest, HeadAnswersLikeGetWithoutABody) {
  auto c = srv().client();
  auto h = c.Head("/health");
  ASSERT_TRUE(h);
  EXPECT_EQ(h->status, 200);
  auto m = c.Head("/v1/models");
  ASSERT_TRUE(m);
  EXPECT_EQ(m->status, 200);
  EXPECT_TRUE(m->body.empty());
  const auto get = c.Get("/v1/models");
  EXPECT_EQ(m->get_header_value("Content-Length"), std::to_string(get->body.size()));
  auto wrong = c.Head("/v1/completions");
  EXPECT_EQ(wrong->status, 405);
  EXPECT_EQ(c.Get("/health")->status, 200);  // the connection's framing survived a body-less answer
}

TEST_F(ServerTest, PrefixCacheHitOverHttp) {
  int st = 0;
  const std::vector<int> p = ids(40, 9);
  json a = post(srv(), "/v1/completions",
                json{{"prompt", p}, {"max_tokens", 8}, {"temperature", 0}, {"return_token_ids", true}}.dump(), &st);
  ASSERT_EQ(st, 200);
  std::vector<int> turn2 = p;
  for (int t : a["choices"][0]["token_ids"]) turn2.push_back(t);
  turn2.push_back(17);
  json b = post(srv(), "/v1/completions", json{{"prompt", turn2}, {"max_tokens", 4}, {"temperature", 0}}.dump(), &st);
  ASSERT_EQ(st, 200);
  EXPECT_EQ(b["usage"]["prompt_tokens_details"]["cached_tokens"], 47);
  const std::string m = srv().client().Get("/metrics")->body;
  EXPECT_NE(m.find("deepinfer_prefix_cache_hits_total{model_name=\"tiny\"}"), std::string::npos);
  EXPECT_NE(m.find("deepinfer_time_to_first_token_seconds_bucket"), std::string::npos);
  EXPECT_NE(m.find("deepinfer_inter_token_latency_seconds_count"), std::string::npos);
  EXPECT_NE(m.find("deepinfer_requests_waiting"), std::string::npos);
  EXPECT_NE(m.find("deepinfer_kv_cache_usage_ratio"), std::string::npos);
}

TEST_F(ServerTest, ClientDisconnectCancelsTheRequest) {
  const EngineStats before = backend_->engine->stats();
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(uint16_t(srv().port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  const std::string body =
      json{{"prompt", ids(10, 5)}, {"max_tokens", 4000}, {"ignore_eos", true}, {"stream", true}}.dump();
  const std::string req = "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                          "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
  ASSERT_EQ(::send(fd, req.data(), req.size(), 0), ssize_t(req.size()));
  std::string got;
  char buf[4096];
  while (got.find("data: ") == std::string::npos || std::count(got.begin(), got.end(), '\n') < 12) {
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    ASSERT_GT(n, 0);
    got.append(buf, size_t(n));
  }
  ::close(fd);  // mid-stream
  EngineStats after;
  for (int i = 0; i < 500; ++i) {
    after = backend_->engine->stats();
    if (after.requests_finished_abort > before.requests_finished_abort && after.requests_running == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(after.requests_finished_abort, before.requests_finished_abort + 1);
  EXPECT_EQ(after.requests_running, 0);
  EXPECT_LT(after.generation_tokens_total - before.generation_tokens_total, 4000u);
  EXPECT_EQ(srv().client().Get("/health")->status, 200);
}

TEST_F(ServerTest, SixteenConcurrentStreams) {
  std::vector<std::thread> clients;
  std::vector<Sse> results(16);
  for (int i = 0; i < 16; ++i)
    clients.emplace_back([&, i] {
      results[size_t(i)] = stream_post(srv().port, i % 2 ? "/v1/completions" : "/v1/chat/completions",
                                       i % 2 ? json{{"prompt", ids(20 + i, i)}, {"max_tokens", 24}, {"ignore_eos", true},
                                                    {"stream", true}, {"stream_options", {{"include_usage", true}}}}
                                             : json{{"messages", {{{"role", "user"}, {"content", "Hi " + std::to_string(i)}}}},
                                                    {"max_tokens", 24}, {"ignore_eos", true}, {"stream", true},
                                                    {"stream_options", {{"include_usage", true}}}});
    });
  for (auto& t : clients) t.join();
  for (int i = 0; i < 16; ++i) {
    const Sse& s = results[size_t(i)];
    ASSERT_EQ(s.status, 200) << i << ": " << s.body;
    EXPECT_TRUE(s.done) << i;
    EXPECT_EQ(s.chunks.back()["usage"]["completion_tokens"], 24) << i;
  }
  // Every request ended, and the engine counts a request before its final event: no wait.
  const EngineStats st = backend_->engine->stats();
  EXPECT_EQ(st.requests_running + st.requests_waiting, 0);
}

// A burst of clients that connect while the accept thread is not running (busy cores) must
// queue in the kernel, not get resets: the backlog is raised past httplib's built-in 5.
TEST_F(ServerTest, ConnectBurstBeforeAcceptIsQueued) {
  server::ServerOptions so;
  so.host = "127.0.0.1";
  so.port = 0;
  server::Server s(so);
  const int port = s.bind();  // listening, but nothing accepts yet
  s.set_backend(backend_);
  constexpr int kClients = 100;
  std::vector<int> fds;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(uint16_t(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  int connected = 0;
  for (int i = 0; i < kClients; ++i) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    ASSERT_GE(fd, 0);
    fds.push_back(fd);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) {
      ++connected;
      continue;
    }
    ASSERT_EQ(errno, EINPROGRESS);
    pollfd p{fd, POLLOUT, 0};
    int err = 0;
    socklen_t len = sizeof err;
    if (::poll(&p, 1, 200) == 1 && ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == 0) ++connected;
  }
  EXPECT_EQ(connected, kClients) << "the kernel dropped connects: listen backlog too small";
  std::thread loop([&] { s.listen(); });
  const std::string req = "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
  int ok = 0;
  for (int fd : fds) {
    const int flags = ::fcntl(fd, F_GETFL);
    ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
    timeval tv{10, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    if (::send(fd, req.data(), req.size(), MSG_NOSIGNAL) != ssize_t(req.size())) continue;
    char buf[256];
    const ssize_t n = ::recv(fd, buf, sizeof buf - 1, 0);
    if (n > 0 && std::string(buf, size_t(n)).rfind("HTTP/1.1 200", 0) == 0) ++ok;
  }
  for (int fd : fds) ::close(fd);
  s.stop();
  loop.join();
  EXPECT_EQ(ok, kClients);
}

TEST_F(ServerTest, KeepAliveCommentsWhileWaiting) {
  server::ServerOptions so;
  so.sse_keepalive = std::chrono::milliseconds(1);
  Running fast(so, backend_);
  Sse s = stream_post(fast.port, "/v1/completions",
                      json{{"prompt", ids(1500, 2)}, {"max_tokens", 2}, {"stream", true}});
  ASSERT_EQ(s.status, 200);
  EXPECT_TRUE(s.done);
  EXPECT_GT(s.keepalives, 0);
}

TEST_F(ServerTest, AnthropicMessages) {
  int st = 0;
  const json req = {{"model", "tiny"},
                    {"max_tokens", 6},
                    {"system", "Be brief."},
                    {"temperature", 0},
                    {"tools", {{{"name", "get_weather"}, {"input_schema", {{"type", "object"}}}}}},
                    {"messages",
                     {{{"role", "user"}, {"content", "Weather in Paris?"}},
                      {{"role", "assistant"},
                       {"content", {{{"type", "tool_use"}, {"id", "toolu_1"}, {"name", "get_weather"},
                                     {"input", {{"city", "Paris"}}}}}}},
                      {{"role", "user"},
                       {"content", {{{"type", "tool_result"}, {"tool_use_id", "toolu_1"}, {"content", "sunny"}}}}}}}};
  json r = post(srv(), "/v1/messages", req.dump(), &st);
  ASSERT_EQ(st, 200) << r.dump();
  EXPECT_EQ(r["type"], "message");
  EXPECT_EQ(r["role"], "assistant");
  EXPECT_EQ(r["stop_reason"], "max_tokens");
  EXPECT_EQ(r["usage"]["output_tokens"], 6);
  json s = req;
  s["stream"] = true;
  Sse ev = stream_post(srv().port, "/v1/messages", s);
  ASSERT_EQ(ev.status, 200);
  ASSERT_GE(ev.chunks.size(), 2u);
  EXPECT_EQ(ev.chunks.front()["type"], "message_start");
  EXPECT_EQ(ev.chunks.back()["type"], "message_stop");
  EXPECT_EQ(ev.chunks[ev.chunks.size() - 2]["delta"]["stop_reason"], "max_tokens");
  json e = post(srv(), "/v1/messages", R"({"messages": [{"role": "user", "content": "x"}]})", &st);
  EXPECT_EQ(st, 400);
  EXPECT_EQ(e["type"], "error");
  EXPECT_EQ(e["error"]["type"], "invalid_request_error");
}

// Each request's body is parsed once (through the bounded parser), whatever its route needs
// of it: the chat routes used to parse it a second time as key-ordered JSON, and Responses
// turned its chat body into text and parsed that again.
TEST_F(ServerTest, EveryBodyIsParsedOnce) {
  const json tools = {{{"type", "function"},
                       {"function", {{"name", "f"}, {"parameters", {{"type", "object"}, {"properties", json::object()}}}}}}};
  const json msgs = {{{"role", "user"}, {"content", "Hi"}}};
  const json chat = {{"messages", msgs}, {"max_tokens", 2}, {"tools", tools}, {"temperature", 0}};
  const json anthropic = {{"max_tokens", 2}, {"messages", msgs}, {"tools", {{{"name", "f"}, {"input_schema", {{"type", "object"}}}}}}};
  const json responses = {{"input", "Hi"}, {"max_output_tokens", 2}, {"instructions", "Be brief."},
                          {"tools", {{{"type", "function"}, {"name", "f"}, {"parameters", {{"type", "object"}}}}}}};
  struct Case {
    const char* path;
    json body;
  };
  const std::vector<Case> cases = {{"/v1/chat/completions", chat},
                                   {"/v1/messages", anthropic},
                                   {"/v1/messages/count_tokens", anthropic},
                                   {"/v1/responses", responses},
                                   {"/tokenize", {{"messages", msgs}}},
                                   {"/tokenize", {{"prompt", "Hi"}}},
                                   {"/v1/completions", {{"prompt", "Hi"}, {"max_tokens", 2}}}};
  for (const Case& c : cases) {
    for (bool stream : {false, true}) {
      if (stream && (c.path == std::string("/tokenize") || c.path == std::string("/v1/messages/count_tokens"))) continue;
      json body = c.body;
      if (stream) body["stream"] = true;
      const uint64_t before = server::bodies_parsed();
      int st = 0;
      if (stream) {
        const Sse s = stream_post(srv().port, c.path, body);
        st = s.status;
        EXPECT_TRUE(s.done || c.path != std::string("/v1/chat/completions")) << c.path;
      } else {
        post(srv(), c.path, body.dump(), &st);
      }
      EXPECT_EQ(st, 200) << c.path << (stream ? " (stream)" : "");
      EXPECT_EQ(server::bodies_parsed() - before, 1u) << c.path << (stream ? " (stream)" : "");
    }
  }
}

// The SDKs' models.retrieve (OpenAI and Anthropic): GET /v1/models/{id}, percent-decoded.
TEST_F(ServerTest, RetrieveModel) {
  auto c = srv().client();
  auto r = c.Get("/v1/models/tiny");
  ASSERT_EQ(r->status, 200);
  const json m = json::parse(r->body);
  const json listed = json::parse(c.Get("/v1/models")->body)["data"][0];
  EXPECT_EQ(m["id"], "tiny");
  EXPECT_EQ(m["object"], "model");
  EXPECT_EQ(m["max_model_len"], listed["max_model_len"]);
  EXPECT_EQ(c.Get("/v1/models/ti%6Ey")->status, 200);
  for (const char* other : {"/v1/models/tin", "/v1/models/tiny/x", "/v1/models/deepseek-ai%2Ftiny"}) {
    r = c.Get(other);
    ASSERT_EQ(r->status, 404) << other;
    const json e = json::parse(r->body);
    EXPECT_EQ(e["error"]["type"], "not_found_error") << other;
    EXPECT_EQ(e["error"]["param"], "model") << other;
  }
}

// Anthropic thinking {"type": "adaptive"} (ThinkingConfigAdaptive of the SDK: the model decides) is thinking
// mode, as "enabled" is; "disabled" is not.
TEST_F(ServerTest, AnthropicAdaptiveThinking) {
  auto first_block = [&](const char* type) {
    json req = {{"max_tokens", 6}, {"temperature", 0}, {"messages", {{{"role", "user"}, {"content", "Hi"}}}}};
    req["thinking"] = {{"type", type}};
    if (std::string(type) == "enabled") req["thinking"]["budget_tokens"] = 1024;
    int st = 0;
    json r = post(srv(), "/v1/messages", req.dump(), &st);
    EXPECT_EQ(st, 200) << r.dump();
    return r["content"][0];
  };
  const json enabled = first_block("enabled"), adaptive = first_block("adaptive");
  EXPECT_EQ(enabled["type"], "thinking");
  EXPECT_EQ(adaptive, enabled);
  EXPECT_EQ(first_block("disabled")["type"], "text");
}

// tiny-v4-c has an MTP module, so the server speculates by default: usage reports the drafts
// where OpenAI's predicted outputs do, and /metrics counts them.
TEST_F(ServerTest, SpeculativeDecodingIsReported) {
  // A fresh engine: the suite's shared one has learned from earlier tests that the tiny model's
  // random drafts are useless, and would (rightly) start this request without drafting.
  EngineOptions eo;
  eo.model_dir = std::string(DI_SHARED_DIR) + "/golden/tiny-v4-c/model";
  eo.threads = 1;
  eo.num_kv_blocks = 3000;
  eo.max_model_len = 4096;
  const auto backend = server::load_backend(eo, "tiny");
  Running fresh(server::ServerOptions{}, backend);
  int st = 0;
  json a = post(fresh, "/v1/completions",
                json{{"prompt", ids(30, 4)}, {"max_tokens", 12}, {"temperature", 0}, {"ignore_eos", true}}.dump(), &st);
  ASSERT_EQ(st, 200);
  const json& d = a["usage"]["completion_tokens_details"];
  const int64_t accepted = d["accepted_prediction_tokens"], rejected = d["rejected_prediction_tokens"];
  EXPECT_GE(rejected, 0);
  EXPECT_GT(accepted + rejected, 0);  // a fresh request drafts from its first decode step
  // Each step emits one token of its own besides the drafts it accepted (the first comes from
  // the prefill), so fewer than 12 of the 12 tokens can be accepted drafts.
  EXPECT_LT(accepted, 12);
  EXPECT_EQ(a["usage"]["completion_tokens"], 12);
  // The engine counts a request before its final event: the answer's end is enough.
  ASSERT_EQ(backend->engine->stats().requests_finished_length, 1u);
  // The only request of this engine: /metrics counts exactly the drafts its usage reports.
  const std::string m = fresh.client().Get("/metrics")->body;
  auto counter = [&](const std::string& name) {
    const std::string row = name + "{model_name=\"tiny\"} ";
    const size_t at = m.find(row);
    return at == std::string::npos ? int64_t(-1) : int64_t(std::stoll(m.substr(at + row.size())));
  };
  EXPECT_EQ(counter("deepinfer_spec_decode_num_draft_tokens_total"), accepted + rejected) << m;
  EXPECT_EQ(counter("deepinfer_spec_decode_num_accepted_tokens_total"), accepted) << m;
  for (const char* name : {"deepinfer_spec_decode_acceptance_rate", "deepinfer_spec_decode_accepted_per_step_bucket"})
    EXPECT_NE(m.find(name), std::string::npos) << name;
}
