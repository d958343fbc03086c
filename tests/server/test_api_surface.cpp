// What clients call beyond the basics, over the tiny model: completions echo with prompt
// logprobs (checked against `deepinfer logits`), max_tokens 0, n, best_of and a list of
// prompts (streamed and not), chat n, Anthropic count_tokens and output_config.format,
// served model names (no checkpoint path in /v1/models; serve --served-model-name aliases),
// /tokenize of chat messages.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include <csignal>
#include <netinet/in.h>
#include <sys/socket.h>
#include <thread>
#include <unistd.h>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "server/routes.h"
#include "server/server.h"
#include "server_harness.h"

using namespace deepinfer;
using json = nlohmann::json;
using namespace deepinfer::testing;

namespace {

class ApiTest : public TinyServerSuite<ApiTest> {};

std::vector<int> ids(int n, int salt) {
  std::vector<int> v{0};
  for (int i = 1; i < n; ++i) v.push_back((i * 37 + salt * 11) % 1000 + 3);
  return v;
}

// Row-wise log-softmax of the logits `deepinfer logits` writes for these tokens (same
// numerics and kernels as the server, one thread as the test server runs).
std::vector<std::vector<double>> cli_log_softmax(const std::vector<int>& toks) {
  const std::string dir = ::testing::TempDir();
  const std::string tf = dir + "/api_tokens.txt", out = dir + "/api_logits.npy";
  {
    std::ofstream f(tf);
    for (int t : toks) f << t << " ";
  }
  const std::string cmd = std::string(DI_CLI_PATH) + " logits --model " + DI_SHARED_DIR +
                          "/golden/tiny-v4-c/model --threads 1 --tokens-file " + tf + " --out " + out + " 2>/dev/null";
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::ifstream in(out, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_GT(bytes.size(), 10u);
  const size_t hlen = size_t(uint8_t(bytes[8])) | (size_t(uint8_t(bytes[9])) << 8);
  const size_t n = (bytes.size() - 10 - hlen) / sizeof(float);
  const size_t V = n / toks.size();
  std::vector<std::vector<double>> rows;
  const float* x = reinterpret_cast<const float*>(bytes.data() + 10 + hlen);
  for (size_t r = 0; r < toks.size(); ++r) {
    double m = -1e300, z = 0;
    for (size_t j = 0; j < V; ++j) m = std::max(m, double(x[r * V + j]));
    for (size_t j = 0; j < V; ++j) z += std::exp(double(x[r * V + j]) - m);
    std::vector<double> row(V);
    for (size_t j = 0; j < V; ++j) row[j] = double(x[r * V + j]) - m - std::log(z);
    rows.push_back(std::move(row));
  }
  return rows;
}

// POST /v1/messages/count_tokens through its handler (the route table lives in server.cpp).
json count_tokens(const std::shared_ptr<const server::Backend>& b, const json& body, int* status) {
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/messages/count_tokens";
  req.body = body.dump();
  httplib::Response res;
  server::handle_count_tokens(b, server::ServerOptions{}, req, res);
  *status = res.status;
  return json::parse(res.body, nullptr, false);
}

double cumulative(const json& choice) {
  double s = 0;
  for (const auto& v : choice["logprobs"]["token_logprobs"]) s += v.get<double>();
  return s;
}

}  // namespace

TEST_F(ApiTest, EchoLogprobsMaxTokensZeroAreThePromptLogSoftmax) {
  const std::vector<int> prompt = ids(40, 1);
  const auto want = cli_log_softmax(prompt);
  ASSERT_EQ(want.size(), prompt.size());
  // The lm-evaluation-harness loglikelihood request.
  json r = post_ok(srv(), "/v1/completions",
                   {{"prompt", prompt}, {"echo", true}, {"logprobs", 2}, {"max_tokens", 0}, {"temperature", 0}});
  const json& c = r["choices"][0];
  EXPECT_EQ(c["finish_reason"], "length");
  EXPECT_EQ(r["usage"]["completion_tokens"], 0);
  EXPECT_EQ(r["usage"]["prompt_tokens"], 40);
  const json& lp = c["logprobs"];
  ASSERT_EQ(lp["token_logprobs"].size(), prompt.size());
  EXPECT_TRUE(lp["token_logprobs"][0].is_null());
  EXPECT_TRUE(lp["top_logprobs"][0].is_null());
  double worst = 0;
  for (size_t i = 1; i < prompt.size(); ++i) {
    const std::vector<double>& row = want[i - 1];  // the row after token i-1 scores token i
    worst = std::max(worst, std::fabs(lp["token_logprobs"][i].get<double>() - row[size_t(prompt[i])]));
    const json& top = lp["top_logprobs"][i];
    // Two alternatives, unless both have the same text (the legacy format keys by text).
    ASSERT_TRUE(top.size() == 2u || top.size() == 1u) << top.dump();
    double best = -1e300;
    for (auto it = top.begin(); it != top.end(); ++it) best = std::max(best, it.value().get<double>());
    EXPECT_NEAR(best, *std::max_element(row.begin(), row.end()), 1e-4) << "row " << i;
  }
  EXPECT_LT(worst, 1e-4);
  // The echoed text is the prompt, and text_offset walks it.
  int st = 0;
  json d = post(srv(), "/detokenize", json{{"tokens", prompt}}.dump(), &st);
  EXPECT_EQ(c["text"], d["prompt"]);
  EXPECT_EQ(lp["text_offset"][0], 0);

  // The same scores in a request that also generates, and after a prefix-cache snapshot of
  // the same prompt exists (that request still computes every row).
  post_ok(srv(), "/v1/completions", {{"prompt", prompt}, {"max_tokens", 2}, {"temperature", 0}});
  json g = post_ok(srv(), "/v1/completions",
                   {{"prompt", prompt}, {"echo", true}, {"logprobs", 0}, {"max_tokens", 3}, {"temperature", 0}});
  const json& glp = g["choices"][0]["logprobs"]["token_logprobs"];
  ASSERT_EQ(glp.size(), prompt.size() + 3);
  for (size_t i = 1; i < prompt.size(); ++i) EXPECT_NEAR(glp[i].get<double>(), lp["token_logprobs"][i].get<double>(), 1e-6);
}

TEST_F(ApiTest, EchoTextPromptAndMaxTokensZero) {
  json plain = post_ok(srv(), "/v1/completions", {{"prompt", "Hello world"}, {"max_tokens", 5}, {"temperature", 0}});
  json echo = post_ok(srv(), "/v1/completions",
                      {{"prompt", "Hello world"}, {"max_tokens", 5}, {"temperature", 0}, {"echo", true}});
  EXPECT_EQ(echo["choices"][0]["text"], "Hello world" + plain["choices"][0]["text"].get<std::string>());
  json zero = post_ok(srv(), "/v1/completions", {{"prompt", "Hello world"}, {"max_tokens", 0}});
  EXPECT_EQ(zero["choices"][0]["text"], "");
  EXPECT_EQ(zero["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(zero["usage"]["completion_tokens"], 0);
  int st = 0;
  post(srv(), "/v1/completions", R"({"prompt": "x", "max_tokens": -1})", &st);
  EXPECT_EQ(st, 400);
  post(srv(), "/v1/chat/completions", R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": 0})", &st);
  EXPECT_EQ(st, 400);
}

TEST_F(ApiTest, PromptListAndNArePromptMajor) {
  const json p1 = ids(10, 2), p2 = ids(14, 3);
  json both = post_ok(srv(), "/v1/completions",
                      {{"prompt", {p1, p2}}, {"n", 2}, {"max_tokens", 4}, {"temperature", 0.9}, {"seed", 7},
                       {"return_token_ids", true}});
  ASSERT_EQ(both["choices"].size(), 4u);
  EXPECT_EQ(both["usage"]["prompt_tokens"], 24);
  EXPECT_EQ(both["usage"]["completion_tokens"], 16);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(both["choices"][i]["index"], i);
  // Each prompt's choices are what the prompt alone gives with the same n and seed.
  for (int k = 0; k < 2; ++k) {
    json alone = post_ok(srv(), "/v1/completions",
                         {{"prompt", k == 0 ? p1 : p2}, {"n", 2}, {"max_tokens", 4}, {"temperature", 0.9}, {"seed", 7},
                          {"return_token_ids", true}});
    ASSERT_EQ(alone["choices"].size(), 2u);
    for (int j = 0; j < 2; ++j)
      EXPECT_EQ(both["choices"][2 * k + j]["token_ids"], alone["choices"][j]["token_ids"]) << k << " " << j;
  }
  // Seeded choices differ from one another (each its own draw).
  EXPECT_NE(both["choices"][0]["token_ids"], both["choices"][1]["token_ids"]);
  // Strings in a list are prompts too.
  json texts = post_ok(srv(), "/v1/completions", {{"prompt", {"Hello", "world"}}, {"max_tokens", 2}});
  EXPECT_EQ(texts["choices"].size(), 2u);
}

TEST_F(ApiTest, BestOfKeepsTheHighestCumulativeLogprob) {
  const json body = {{"prompt", ids(12, 4)}, {"max_tokens", 5}, {"temperature", 1.0}, {"seed", 3}, {"logprobs", 0}};
  json all = body;
  all["n"] = 3;
  json three = post_ok(srv(), "/v1/completions", all);
  ASSERT_EQ(three["choices"].size(), 3u);
  std::vector<std::pair<double, std::string>> ranked;
  for (const auto& c : three["choices"]) ranked.push_back({cumulative(c), c["text"]});
  std::stable_sort(ranked.begin(), ranked.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  json best = body;
  best["n"] = 2;
  best["best_of"] = 3;
  json two = post_ok(srv(), "/v1/completions", best);
  ASSERT_EQ(two["choices"].size(), 2u);
  for (int j = 0; j < 2; ++j) {
    EXPECT_EQ(two["choices"][j]["index"], j);
    EXPECT_EQ(two["choices"][j]["text"], ranked[size_t(j)].second);
  }
  // Without logprobs asked, best_of still ranks, and none are returned.
  best.erase("logprobs");
  json quiet = post_ok(srv(), "/v1/completions", best);
  EXPECT_TRUE(quiet["choices"][0]["logprobs"].is_null());
  EXPECT_EQ(quiet["choices"][0]["text"], ranked[0].second);
  int st = 0;
  post(srv(), "/v1/completions", R"({"prompt": "x", "n": 3, "best_of": 2})", &st);
  EXPECT_EQ(st, 400);
  post(srv(), "/v1/completions", R"({"prompt": "x", "n": 1, "best_of": 2, "stream": true})", &st);
  EXPECT_EQ(st, 400);
  post(srv(), "/v1/completions", R"({"prompt": "x", "n": 0})", &st);
  EXPECT_EQ(st, 400);
  post(srv(), "/v1/completions", R"({"prompt": "x", "n": 100000})", &st);
  EXPECT_EQ(st, 400);
}

TEST_F(ApiTest, StreamingNAndPromptListMatchNonStreaming) {
  const json body = {{"prompt", {ids(9, 5), ids(11, 6)}}, {"n", 2}, {"max_tokens", 6}, {"temperature", 0.8},
                     {"seed", 21}, {"echo", true}, {"logprobs", 1}, {"stream_options", {{"include_usage", true}}}};
  json full = post_ok(srv(), "/v1/completions", body);
  json sb = body;
  sb["stream"] = true;
  Sse s = stream_post(srv().port, "/v1/completions", sb);
  ASSERT_EQ(s.status, 200) << s.body;
  EXPECT_TRUE(s.done);
  std::map<int, std::string> text;
  std::map<int, std::vector<json>> lps;
  std::map<int, std::string> finish;
  json usage;
  for (const json& c : s.chunks) {
    if (c.contains("usage") && !c["usage"].is_null()) usage = c["usage"];
    for (const json& ch : c["choices"]) {
      const int i = ch["index"];
      text[i] += ch["text"].get<std::string>();
      for (const auto& v : ch["logprobs"]["token_logprobs"]) lps[i].push_back(v);
      if (!ch["finish_reason"].is_null()) finish[i] = ch["finish_reason"];
    }
  }
  ASSERT_EQ(text.size(), 4u);
  for (int i = 0; i < 4; ++i) {
    const json& c = full["choices"][i];
    EXPECT_EQ(text[i], c["text"]) << i;
    EXPECT_EQ(finish[i], c["finish_reason"]) << i;
    ASSERT_EQ(lps[i].size(), c["logprobs"]["token_logprobs"].size()) << i;
    EXPECT_TRUE(lps[i][0].is_null());
  }
  EXPECT_EQ(usage["prompt_tokens"], full["usage"]["prompt_tokens"]);
  EXPECT_EQ(usage["completion_tokens"], full["usage"]["completion_tokens"]);
}

TEST_F(ApiTest, ChatNStreamedAndNot) {
  const json body = {{"messages", {{{"role", "user"}, {"content", "Tell me something."}}}},
                     {"n", 3}, {"max_tokens", 8}, {"temperature", 0.9}, {"seed", 5},
                     {"stream_options", {{"include_usage", true}}}};
  json full = post_ok(srv(), "/v1/chat/completions", body);
  ASSERT_EQ(full["choices"].size(), 3u);
  int64_t completion = 0;
  std::set<std::string> distinct;
  for (int j = 0; j < 3; ++j) {
    EXPECT_EQ(full["choices"][j]["index"], j);
    distinct.insert(full["choices"][j]["message"]["content"].get<std::string>());
  }
  EXPECT_GT(distinct.size(), 1u);
  completion = full["usage"]["completion_tokens"];
  EXPECT_EQ(completion, 24);
  json sb = body;
  sb["stream"] = true;
  Sse s = stream_post(srv().port, "/v1/chat/completions", sb);
  ASSERT_EQ(s.status, 200) << s.body;
  std::map<int, std::string> content;
  std::map<int, int> roles;
  json usage;
  for (const json& c : s.chunks) {
    if (c.contains("usage") && !c["usage"].is_null()) usage = c["usage"];
    for (const json& ch : c["choices"]) {
      const int j = ch["index"];
      if (ch["delta"].contains("role")) ++roles[j];
      if (ch["delta"].contains("content")) content[j] += ch["delta"]["content"].get<std::string>();
    }
  }
  for (int j = 0; j < 3; ++j) {
    EXPECT_EQ(roles[j], 1);
    EXPECT_EQ(content[j], full["choices"][j]["message"]["content"]) << j;
  }
  EXPECT_EQ(usage["completion_tokens"], 24);
  EXPECT_EQ(usage["prompt_tokens"], full["usage"]["prompt_tokens"]);
}

TEST_F(ApiTest, TokenizeMessagesCountsWhatChatRuns) {
  const json tools = json::parse(R"([{"type": "function", "function": {"name": "get_weather",
      "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}])");
  for (bool thinking : {false, true}) {
    json body = {{"messages", {{{"role", "system"}, {"content", "Be brief."}}, {{"role", "user"}, {"content", "Weather?"}}}},
                 {"tools", tools}, {"chat_template_kwargs", {{"thinking", thinking}}}};
    json t = post_ok(srv(), "/tokenize", body);
    json cb = body;
    cb["max_tokens"] = 1;
    json c = post_ok(srv(), "/v1/chat/completions", cb);
    EXPECT_EQ(t["count"], c["usage"]["prompt_tokens"]) << thinking;
    EXPECT_EQ(t["tokens"].size(), t["count"].get<size_t>());
    json strs = body;
    strs["return_token_strs"] = true;
    json ts = post_ok(srv(), "/tokenize", strs);
    EXPECT_EQ(ts["token_strs"].size(), t["tokens"].size());
  }
  json plain = post_ok(srv(), "/tokenize", {{"messages", {{{"role", "user"}, {"content", "Weather?"}}}}});
  json withtools = post_ok(srv(), "/tokenize", {{"messages", {{{"role", "user"}, {"content", "Weather?"}}}}, {"tools", tools}});
  EXPECT_GT(withtools["count"].get<int>(), plain["count"].get<int>());
}

TEST_F(ApiTest, AnthropicCountTokensAndOutputFormat) {
  const json body = {{"model", "tiny"}, {"max_tokens", 1},
                     {"system", "Be brief."},
                     {"messages", {{{"role", "user"}, {"content", "Hi there"}}}}};
  int st = 0;
  json cnt = count_tokens(backend_, body, &st);
  EXPECT_EQ(st, 200) << cnt.dump();
  json msg = post_ok(srv(), "/v1/messages", body);
  EXPECT_EQ(cnt["input_tokens"], msg["usage"]["input_tokens"]);
  json nomax = body;
  nomax.erase("max_tokens");
  EXPECT_EQ(count_tokens(backend_, nomax, &st)["input_tokens"], cnt["input_tokens"]);
  json err = count_tokens(backend_, json{{"messages", json::array()}}, &st);
  EXPECT_EQ(st, 400);
  EXPECT_EQ(err["type"], "error");
  err = count_tokens(backend_, json{{"model", "other"}, {"messages", {{{"role", "user"}, {"content", "x"}}}}}, &st);
  EXPECT_EQ(st, 404);

  const json schema = json::parse(R"({"type": "object", "properties": {"n": {"type": "integer"}},
                                      "required": ["n"], "additionalProperties": false})");
  json fmt = body;
  fmt["max_tokens"] = 400;
  fmt["output_config"] = {{"format", {{"type", "json_schema"}, {"schema", schema}}}};
  json with = count_tokens(backend_, fmt, &st);
  EXPECT_GT(with["input_tokens"].get<int>(), cnt["input_tokens"].get<int>());  // the format is in the prompt
  for (int seed = 0; seed < 2; ++seed) {
    fmt["temperature"] = 1.0;
    json r = post_ok(srv(), "/v1/messages", fmt);
    ASSERT_EQ(r["stop_reason"], "end_turn") << r.dump();
    std::string text;
    for (const auto& b : r["content"])
      if (b["type"] == "text") text += b["text"].get<std::string>();
    const json j = json::parse(text, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << text;
    EXPECT_TRUE(j.is_object() && j.size() == 1 && j["n"].is_number_integer()) << text;
  }
  json badfmt = body;
  badfmt["output_config"] = {{"format", {{"type", "regex"}}}};
  err = post(srv(), "/v1/messages", badfmt.dump(), &st);
  EXPECT_EQ(st, 400);
  EXPECT_EQ(err["type"], "error");
}

// /v1/models shows served names, never the checkpoint's directory ("root" was its absolute
// path). Aliases (serve --served-model-name NAME ALIAS...) are listed after the name and
// accepted in "model" and GET /v1/models/{id}; answers report the name; any other model is a
// 404 that names the served ones.
TEST_F(ApiTest, ServedModelNamesAndAliases) {
  auto c = srv().client();
  const json one = json::parse(c.Get("/v1/models")->body);
  ASSERT_EQ(one["data"].size(), 1u);
  EXPECT_EQ(one["data"][0]["id"], "tiny");
  EXPECT_EQ(one["data"][0]["root"], "tiny");
  EXPECT_EQ(one.dump().find('/'), std::string::npos) << one.dump();  // no path anywhere
  EXPECT_EQ(json::parse(c.Get("/v1/models/tiny")->body)["root"], "tiny");

  auto named = std::make_shared<server::Backend>(*backend_);
  named->model_aliases = {"deepseek-chat", "gpt-4o-mini"};
  Running aliased(server::ServerOptions{}, named);
  auto a = aliased.client();
  const json list = json::parse(a.Get("/v1/models")->body);
  std::vector<std::string> ids;
  for (const json& m : list["data"]) {
    ids.push_back(m["id"]);
    EXPECT_EQ(m["root"], "tiny");
  }
  EXPECT_EQ(ids, (std::vector<std::string>{"tiny", "deepseek-chat", "gpt-4o-mini"}));
  auto got = a.Get("/v1/models/gpt-4o-mini");
  ASSERT_EQ(got->status, 200);
  EXPECT_EQ(json::parse(got->body)["id"], "gpt-4o-mini");
  got = a.Get("/v1/models/gpt-4o");
  ASSERT_EQ(got->status, 404);
  const std::string missing = json::parse(got->body)["error"]["message"];
  EXPECT_NE(missing.find("`gpt-4o`"), std::string::npos) << missing;
  EXPECT_NE(missing.find("`tiny`, `deepseek-chat`, `gpt-4o-mini`"), std::string::npos) << missing;

  const json chat = {{"model", "deepseek-chat"}, {"messages", {{{"role", "user"}, {"content", "Hi"}}}}, {"max_tokens", 2}};
  json r = post_ok(aliased, "/v1/chat/completions", chat);
  EXPECT_EQ(r["model"], "tiny");
  json msg = {{"model", "gpt-4o-mini"}, {"messages", {{{"role", "user"}, {"content", "Hi"}}}}, {"max_tokens", 2}};
  EXPECT_EQ(post_ok(aliased, "/v1/messages", msg)["model"], "tiny");
  int st = 0;
  json other = chat;
  other["model"] = "deepseek-reasoner";
  r = post(aliased, "/v1/chat/completions", other.dump(), &st);
  EXPECT_EQ(st, 404);
  EXPECT_EQ(r["error"]["param"], "model");
  const std::string why = r["error"]["message"];
  EXPECT_NE(why.find("`deepseek-reasoner` does not exist"), std::string::npos) << why;
  EXPECT_NE(why.find("`tiny`, `deepseek-chat`, `gpt-4o-mini`"), std::string::npos) << why;
  // The first server knows no aliases.
  r = post(srv(), "/v1/chat/completions", chat.dump(), &st);
  EXPECT_EQ(st, 404) << r.dump();
}

namespace {

int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  int port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0)
    port = ntohs(a.sin_port);
  ::close(fd);
  return port;
}

// `deepinfer serve` on the tiny model with these extra arguments: GET /v1/models once it is
// ready (null when it never was).
json served_models(const std::string& model_arg, const std::string& extra) {
  const int port = free_port();
  const std::string dir = ::testing::TempDir();
  const std::string log = dir + "/serve_names_" + std::to_string(port) + ".log", pidf = log + ".pid";
  const std::string cmd = std::string(DI_CLI_PATH) + " serve --model " + model_arg + " --threads 1 --kv-memory 64M --port " +
                          std::to_string(port) + " --no-webui --shutdown-timeout 0 " + extra + " > " + log +
                          " 2>&1 & echo $! > " + pidf;
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  long pid = 0;
  std::ifstream(pidf) >> pid;
  httplib::Client c("127.0.0.1", port);
  c.set_connection_timeout(1, 0);
  json out;
  for (int i = 0; i < 300 && out.is_null() && pid > 0 && ::kill(pid_t(pid), 0) == 0; ++i) {  // (until it exits)
    if (auto h = c.Get("/health"); h && h->status == 200) out = json::parse(c.Get("/v1/models")->body);
    else std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  if (pid > 0) ::kill(pid_t(pid), SIGTERM);
  if (out.is_null()) {
    std::ifstream in(log);
    ADD_FAILURE() << "serve never got ready: " << std::string(std::istreambuf_iterator<char>(in), {});
  }
  return out;
}

std::vector<std::string> ids_of(const json& models) {
  std::vector<std::string> ids;
  if (models.contains("data"))
    for (const json& m : models["data"]) ids.push_back(m["id"]);
  return ids;
}

}  // namespace

// The serve command line: by default the checkpoint directory's own name (a trailing '/' or a
// relative path included), vLLM's `--served-model-name NAME ALIAS...` for more names.
TEST(ServeNames, DefaultNameAndAliasesFromTheCommandLine) {
  const std::string model = std::string(DI_SHARED_DIR) + "/golden/tiny-v4-c/model";
  const json plain = served_models(model + "/", "");
  EXPECT_EQ(ids_of(plain), (std::vector<std::string>{"model"})) << plain.dump();
  EXPECT_EQ(plain.dump().find('/'), std::string::npos) << plain.dump();
  const json aliased = served_models(model, "--served-model-name tiny-a tiny-b tiny-c --metrics-without-key");
  EXPECT_EQ(ids_of(aliased), (std::vector<std::string>{"tiny-a", "tiny-b", "tiny-c"})) << aliased.dump();
  const json joined = served_models(model, "--served-model-name=tiny-a tiny-b");
  EXPECT_EQ(ids_of(joined), (std::vector<std::string>{"tiny-a", "tiny-b"})) << joined.dump();
}
