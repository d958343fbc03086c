// Serving semantics of issue 27 on the tiny model: Anthropic usage counts cache reads apart,
// echo text_offset counts characters, GET /v1/responses/{id}/input_items, unguessable ids,
// and requests cut short by a shutdown are told so (503, or an error event and the end).
#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <regex>
#include <set>
#include <thread>

#include "server/common.h"
#include "server_harness.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer::testing {
namespace {

class Semantics : public TinyServerSuite<Semantics> {
 protected:
  json get(const std::string& path, int* status) {
    auto res = srv().client().Get(path.c_str());
    *status = res ? res->status : -1;
    return res ? json::parse(res->body, nullptr, false) : json();
  }
};

// ------------------------------------------------------------------ Anthropic usage

// Anthropic's input_tokens leaves out the prompt tokens read from the cache, which
// cache_read_input_tokens reports: the two add up to the prompt, streamed or not.
TEST_F(Semantics, AnthropicInputTokensExcludeCacheReads) {
  const json req = {{"max_tokens", 4},
                    {"temperature", 0},
                    {"system", "You answer in one line."},
                    {"messages", {{{"role", "user"}, {"content", "Tell me about the weather on the coast in spring."}}}}};
  const int64_t prompt = post_ok(srv(), "/v1/messages/count_tokens", req)["input_tokens"].get<int64_t>();
  ASSERT_GT(prompt, 10);
  post_ok(srv(), "/v1/messages", req);  // leaves the prompt in the prefix cache
  const json again = post_ok(srv(), "/v1/messages", req);
  const json& u = again["usage"];
  EXPECT_GT(u["cache_read_input_tokens"].get<int64_t>(), 0) << u.dump();
  EXPECT_EQ(u["input_tokens"].get<int64_t>() + u["cache_read_input_tokens"].get<int64_t>(), prompt) << u.dump();
  EXPECT_EQ(u["output_tokens"], 4);

  json s = req;
  s["stream"] = true;
  const Sse ev = stream_post(srv().port, "/v1/messages", s);
  ASSERT_EQ(ev.status, 200) << ev.body;
  ASSERT_GE(ev.chunks.size(), 3u);
  const json& start = ev.chunks.front();
  ASSERT_EQ(start["type"], "message_start");
  const json& su = start["message"]["usage"];
  EXPECT_GT(su["cache_read_input_tokens"].get<int64_t>(), 0) << su.dump();
  EXPECT_EQ(su["input_tokens"].get<int64_t>() + su["cache_read_input_tokens"].get<int64_t>(), prompt) << su.dump();
  EXPECT_EQ(su["output_tokens"], 0);
  const json& delta = ev.chunks[ev.chunks.size() - 2];
  ASSERT_EQ(delta["type"], "message_delta");
  const json& du = delta["usage"];
  EXPECT_EQ(du["input_tokens"].get<int64_t>() + du["cache_read_input_tokens"].get<int64_t>(), prompt) << du.dump();
  EXPECT_EQ(du["output_tokens"], 4);
}

// ------------------------------------------------------------------ echo text_offset

// Code points of s[0, n).
int64_t chars_before(const std::string& s, size_t n) {
  int64_t c = 0;
  for (size_t i = 0; i < n && i < s.size(); ++i) c += (uint8_t(s[i]) & 0xC0) != 0x80;
  return c;
}

// text_offset[i] is where token i starts in "text", in characters (code points, as OpenAI and
// vLLM count them): a multibyte character counts once, with the token holding its first byte;
// the BOS put before a text prompt is not in the text and moves nothing.
TEST_F(Semantics, EchoTextOffsetCountsCharacters) {
  const std::string prompt = "Où est la café? Ünïcödé ☃ and 😀 — done";
  const json r = post_ok(srv(), "/v1/completions", {{"prompt", prompt},
                                             {"echo", true},
                                             {"logprobs", 1},
                                             {"max_tokens", 6},
                                             {"temperature", 0},
                                             {"return_token_ids", true}});
  const json& c = r["choices"][0];
  const std::string text = c["text"].get<std::string>();
  ASSERT_EQ(text.rfind(prompt, 0), 0u) << text;
  std::vector<int32_t> ids = c["prompt_token_ids"].get<std::vector<int32_t>>();
  const std::vector<int32_t> generated = c["token_ids"].get<std::vector<int32_t>>();
  ASSERT_EQ(ids[0], backend_->engine->info().bos_token_id);
  ids.insert(ids.end(), generated.begin(), generated.end());
  const json& offsets = c["logprobs"]["text_offset"];
  ASSERT_EQ(offsets.size(), ids.size());
  // The text is the token bytes after the BOS (the tiny model's sampled tokens are plain text).
  std::string bytes;
  EXPECT_EQ(offsets[0], 0);
  for (size_t i = 1; i < ids.size(); ++i) {
    EXPECT_EQ(offsets[i].get<int64_t>(), chars_before(bytes, bytes.size())) << "token " << i << " of " << r.dump();
    bytes += backend_->tokenizer->token_bytes(ids[i]);
  }
  ASSERT_EQ(bytes, text);
  EXPECT_EQ(offsets[1], 0);  // the BOS moved nothing
  EXPECT_LT(chars_before(text, text.size()), int64_t(text.size()));  // (the prompt has multibyte characters)

  // Streamed: the same offsets.
  json s = {{"prompt", prompt}, {"echo", true}, {"logprobs", 1}, {"max_tokens", 6}, {"temperature", 0}, {"stream", true}};
  const Sse ev = stream_post(srv().port, "/v1/completions", s);
  ASSERT_EQ(ev.status, 200) << ev.body;
  json streamed = json::array();
  for (const json& chunk : ev.chunks)
    if (!chunk["choices"].empty() && chunk["choices"][0]["logprobs"].is_object())
      for (const json& o : chunk["choices"][0]["logprobs"]["text_offset"]) streamed.push_back(o);
  EXPECT_EQ(streamed, offsets);
}

// ------------------------------------------------------------------ Responses input_items

TEST_F(Semantics, ResponseInputItemsList) {
  const json input = json::array({
      {{"role", "user"}, {"content", "First"}},
      {{"type", "message"}, {"role", "assistant"}, {"content", {{{"type", "output_text"}, {"text", "Answer"}}}}},
      {{"type", "function_call"}, {"call_id", "call_1"}, {"name", "ping"}, {"arguments", "{}"}},
      {{"type", "function_call_output"}, {"call_id", "call_1"}, {"output", "pong"}},
      {{"role", "user"}, {"content", "Last"}},
  });
  const json resp = post_ok(srv(), "/v1/responses", {{"input", input}, {"max_output_tokens", 2}, {"temperature", 0}});
  const std::string base = "/v1/responses/" + resp["id"].get<std::string>() + "/input_items";
  int st = 0;
  const json all = get(base, &st);
  ASSERT_EQ(st, 200) << all.dump();
  EXPECT_EQ(all["object"], "list");
  ASSERT_EQ(all["data"].size(), 5u) << all.dump();
  EXPECT_FALSE(all["has_more"].get<bool>());
  // Newest first by default.
  const json& d = all["data"];
  EXPECT_EQ(d[0]["type"], "message");
  EXPECT_EQ(d[0]["role"], "user");
  EXPECT_EQ(d[0]["content"], json::array({{{"type", "input_text"}, {"text", "Last"}}}));
  EXPECT_EQ(d[1]["type"], "function_call_output");
  EXPECT_EQ(d[1]["output"], "pong");
  EXPECT_EQ(d[2]["type"], "function_call");
  EXPECT_EQ(d[2]["name"], "ping");
  EXPECT_EQ(d[3]["role"], "assistant");
  EXPECT_EQ(d[3]["content"][0]["text"], "Answer");
  EXPECT_EQ(d[4]["content"][0]["text"], "First");
  std::set<std::string> ids;
  for (const json& item : d) {
    ASSERT_TRUE(item["id"].is_string()) << item.dump();
    ids.insert(item["id"].get<std::string>());
  }
  EXPECT_EQ(ids.size(), 5u);
  EXPECT_EQ(all["first_id"], d[0]["id"]);
  EXPECT_EQ(all["last_id"], d[4]["id"]);

  // Oldest first, and pages.
  const json asc = get(base + "?order=asc", &st);
  ASSERT_EQ(st, 200);
  for (size_t i = 0; i < 5; ++i) EXPECT_EQ(asc["data"][i], d[4 - i]);
  const json page1 = get(base + "?limit=2", &st);
  ASSERT_EQ(st, 200);
  ASSERT_EQ(page1["data"].size(), 2u);
  EXPECT_TRUE(page1["has_more"].get<bool>());
  EXPECT_EQ(page1["last_id"], d[1]["id"]);
  const json page2 = get(base + "?limit=2&after=" + page1["last_id"].get<std::string>(), &st);
  ASSERT_EQ(st, 200);
  ASSERT_EQ(page2["data"].size(), 2u);
  EXPECT_EQ(page2["first_id"], d[2]["id"]);
  EXPECT_TRUE(page2["has_more"].get<bool>());
  const json page3 = get(base + "?limit=2&after=" + page2["last_id"].get<std::string>(), &st);
  ASSERT_EQ(page3["data"].size(), 1u);
  EXPECT_FALSE(page3["has_more"].get<bool>());
  const json before = get(base + "?before=" + d[2]["id"].get<std::string>(), &st);
  ASSERT_EQ(before["data"].size(), 2u);
  EXPECT_EQ(before["last_id"], d[1]["id"]);

  // A string input is one user message.
  const json plain = post_ok(srv(), "/v1/responses", {{"input", "Just this"}, {"max_output_tokens", 1}});
  const json one = get("/v1/responses/" + plain["id"].get<std::string>() + "/input_items", &st);
  ASSERT_EQ(st, 200);
  ASSERT_EQ(one["data"].size(), 1u);
  EXPECT_EQ(one["data"][0]["role"], "user");
  EXPECT_EQ(one["data"][0]["content"], json::array({{{"type", "input_text"}, {"text", "Just this"}}}));

  // Unknown and unstored responses: 404; a bad limit or order: 400.
  json e = get("/v1/responses/resp_nope/input_items", &st);
  EXPECT_EQ(st, 404);
  EXPECT_EQ(e["error"]["code"], "not_found") << e.dump();
  const json unstored = post_ok(srv(), "/v1/responses", {{"input", "x"}, {"max_output_tokens", 1}, {"store", false}});
  get("/v1/responses/" + unstored["id"].get<std::string>() + "/input_items", &st);
  EXPECT_EQ(st, 404);
  for (const char* q : {"?limit=0", "?limit=101", "?limit=x", "?order=up"}) {
    get(base + q, &st);
    EXPECT_EQ(st, 400) << q;
  }
  // The response itself is still there.
  EXPECT_EQ(get("/v1/responses/" + resp["id"].get<std::string>(), &st)["id"], resp["id"]);
  EXPECT_EQ(st, 200);
}

// ------------------------------------------------------------------ ids

// Ids come from the OS's random source: 128 bits, lowercase hex, never repeated, in every
// thread (a generator seeded with 32 bits per thread would give 2^32 sequences at most).
TEST_F(Semantics, IdsAreLongRandomAndDistinct) {
  const std::regex shape("resp_[0-9a-f]{32}");
  std::set<std::string> seen;
  std::mutex mu;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] {
      std::vector<std::string> mine;
      for (int i = 0; i < 5000; ++i) mine.push_back(server::random_id("resp_"));
      std::lock_guard<std::mutex> lk(mu);
      seen.insert(mine.begin(), mine.end());
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(seen.size(), 20000u);
  for (const std::string& id : seen) ASSERT_TRUE(std::regex_match(id, shape)) << id;
  // Bits spread: every hex digit at every position in 20000 ids.
  for (size_t pos = 5; pos < 37; ++pos) {
    std::set<char> digits;
    for (const std::string& id : seen) digits.insert(id[pos]);
    EXPECT_EQ(digits.size(), 16u) << pos;
  }
  const json r = post_ok(srv(), "/v1/responses", {{"input", "x"}, {"max_output_tokens", 1}});
  EXPECT_TRUE(std::regex_match(r["id"].get<std::string>(), shape)) << r["id"];
  EXPECT_TRUE(std::regex_match(r["output"][0]["id"].get<std::string>(), std::regex("msg_[0-9a-f]{32}")));
}

// ------------------------------------------------------------------ shutdown

// Requests still running when a shutdown's grace runs out are told why: a non-streaming
// request gets a JSON 503 (code "unavailable"); a stream gets an error event and then its
// normal end ([DONE] for OpenAI routes; Anthropic and Responses end with their error event).
TEST_F(Semantics, RequestsCutByShutdownAreTold) {
  auto own = std::make_unique<Running>(server::ServerOptions{}, backend_);
  const int port = own->port;
  // Greedy (the Anthropic and Responses routes take no ignore_eos; a sampled random model
  // might end early).
  const json long_completion = {{"prompt", "In the beginning"}, {"max_tokens", 3000}, {"ignore_eos", true},
                                {"temperature", 0}};
  const json long_chat = {{"messages", {{{"role", "user"}, {"content", "Go on."}}}}, {"max_tokens", 3000},
                          {"ignore_eos", true}, {"temperature", 0}};
  int plain_status = 0, anthropic_status = 0;
  json plain, anthropic;
  Sse completions, chat, messages, responses;
  std::vector<std::thread> clients;
  clients.emplace_back([&] {
    httplib::Client c("127.0.0.1", port);
    c.set_read_timeout(client_timeout_seconds(), 0);
    auto res = c.Post("/v1/completions", long_completion.dump(), "application/json");
    plain_status = res ? res->status : -1;
    if (res) plain = json::parse(res->body, nullptr, false);
  });
  clients.emplace_back([&] {
    httplib::Client c("127.0.0.1", port);
    c.set_read_timeout(client_timeout_seconds(), 0);
    json body = {{"max_tokens", 3000}, {"temperature", 0}, {"messages", {{{"role", "user"}, {"content", "Go on."}}}}};
    auto res = c.Post("/v1/messages", body.dump(), "application/json");
    anthropic_status = res ? res->status : -1;
    if (res) anthropic = json::parse(res->body, nullptr, false);
  });
  clients.emplace_back([&] {
    json b = long_completion;
    b["stream"] = true;
    completions = stream_post(port, "/v1/completions", b);
  });
  clients.emplace_back([&] {
    json b = long_chat;
    b["stream"] = true;
    chat = stream_post(port, "/v1/chat/completions", b);
  });
  clients.emplace_back([&] {
    messages = stream_post(port, "/v1/messages",
                           {{"max_tokens", 3000}, {"temperature", 0}, {"stream", true},
                            {"messages", {{{"role", "user"}, {"content", "Go on."}}}}});
  });
  clients.emplace_back([&] {
    responses = stream_post(port, "/v1/responses",
                            {{"input", "Go on."}, {"max_output_tokens", 3000}, {"temperature", 0}, {"stream", true}});
  });
  // Once all six run (and have made some tokens), stop with no grace.
  const uint64_t tokens_before = backend_->engine->stats().generation_tokens_total;
  for (int i = 0; i < 1000; ++i) {
    const EngineStats s = backend_->engine->stats();
    if (s.requests_running >= 6 && s.generation_tokens_total > tokens_before + 60) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_GE(backend_->engine->stats().requests_running, 6);
  own->srv->shutdown(std::chrono::milliseconds(0));
  for (auto& t : clients) t.join();
  own.reset();

  EXPECT_EQ(plain_status, 503) << plain.dump();
  EXPECT_EQ(plain["error"]["code"], "unavailable") << plain.dump();
  EXPECT_EQ(anthropic_status, 503) << anthropic.dump();
  EXPECT_EQ(anthropic["type"], "error") << anthropic.dump();
  EXPECT_EQ(anthropic["error"]["type"], "service_unavailable_error") << anthropic.dump();
  for (const Sse* s : {&completions, &chat}) {
    ASSERT_EQ(s->status, 200) << s->body;
    ASSERT_FALSE(s->chunks.empty());
    EXPECT_EQ(s->chunks.back()["error"]["code"], "unavailable") << s->chunks.back().dump();
    EXPECT_TRUE(s->done) << "no [DONE] after the error";
  }
  ASSERT_EQ(messages.status, 200) << messages.body;
  ASSERT_FALSE(messages.chunks.empty());
  EXPECT_EQ(messages.chunks.back()["type"], "error") << messages.chunks.back().dump();
  EXPECT_EQ(messages.chunks.back()["error"]["type"], "service_unavailable_error");
  ASSERT_EQ(responses.status, 200) << responses.body;
  ASSERT_FALSE(responses.chunks.empty());
  EXPECT_EQ(responses.chunks.back()["type"], "response.failed") << responses.chunks.back().dump();
  EXPECT_EQ(responses.chunks.back()["response"]["error"]["code"], "unavailable");
  // Nothing is left running.
  for (int i = 0; i < 500 && backend_->engine->stats().requests_running > 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(backend_->engine->stats().requests_running, 0);
}

}  // namespace
}  // namespace deepinfer::testing
