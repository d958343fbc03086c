// `deepinfer bench-serve` against servers that send no token ids in their chunks (as
// llama-server and vLLM without return_token_ids): a small in-process fake OpenAI server
// streams text chunks, with or without a final usage chunk, and the benchmark must count
// the tokens (from usage when sent, else one per text chunk) instead of failing.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
#include <atomic>

#include <httplib.h>
#include <nlohmann/json.hpp>

using json = nlohmann::json;

namespace {

struct FakeServer {
  httplib::Server srv;
  std::thread thread;
  int port = 0;
  std::atomic<int> with_bias{0};  // requests whose body carried logit_bias {"5": -100}
  // usage: send the final usage chunk when asked (include_usage); tokens_per_chunk: how many
  // tokens each text chunk stands for (usage then tells the truth, the chunks cannot).
  FakeServer(bool usage, int tokens_per_chunk) {
    srv.Get("/v1/models", [](const httplib::Request&, httplib::Response& res) {
      res.set_content(R"({"object": "list", "data": [{"id": "fake", "object": "model"}]})", "application/json");
    });
    srv.Post("/v1/completions", [this, usage, tokens_per_chunk](const httplib::Request& req, httplib::Response& res) {
      const json body = json::parse(req.body);
      if (body.contains("logit_bias") && body["logit_bias"].value("5", 0.0) == -100.0) ++with_bias;
      const int max_tokens = body.value("max_tokens", 16);
      const bool include = body.contains("stream_options") && body["stream_options"].value("include_usage", false);
      const int prompt = int(body["prompt"].size());
      res.set_chunked_content_provider("text/event-stream", [=](size_t, httplib::DataSink& sink) {
        for (int i = 0; i < max_tokens; i += tokens_per_chunk) {
          const json c = {{"id", "x"}, {"object", "text_completion"},
                          {"choices", {{{"index", 0}, {"text", std::string(size_t(tokens_per_chunk), 'a')},
                                        {"finish_reason", nullptr}}}}};
          const std::string ev = "data: " + c.dump() + "\n\n";
          if (!sink.write(ev.data(), ev.size())) return false;
        }
        if (usage && include) {
          const json u = {{"choices", json::array()},
                          {"usage", {{"prompt_tokens", prompt}, {"completion_tokens", max_tokens}}}};
          const std::string ev = "data: " + u.dump() + "\n\n";
          sink.write(ev.data(), ev.size());
        }
        const std::string done = "data: [DONE]\n\n";
        sink.write(done.data(), done.size());
        sink.done();
        return true;
      });
    });
    port = srv.bind_to_any_port("127.0.0.1");
    thread = std::thread([this] { srv.listen_after_bind(); });
    for (int i = 0; i < 400 && !srv.is_running(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ~FakeServer() {
    srv.stop();
    thread.join();
  }
};

json bench(int port, int n, int out_len, const std::string& extra = "") {
  const std::string cmd = std::string(DI_CLI_PATH) + " bench-serve --url http://127.0.0.1:" + std::to_string(port) +
                          " --concurrency 2 --num-prompts " + std::to_string(n) + " --input-len 8 --output-len " +
                          std::to_string(out_len) + " --json " + extra + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  char buf[4096];
  size_t k;
  while ((k = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, k);
  pclose(p);
  const size_t brace = out.find('{');
  json j = json::parse(brace == std::string::npos ? std::string() : out.substr(brace), nullptr, false);
  EXPECT_FALSE(j.is_discarded()) << out;
  return j;
}

}  // namespace

TEST(BenchServe, CountsChunksWhenNoTokenIdsOrUsage) {
  FakeServer fake(false, 1);
  const json r = bench(fake.port, 5, 12);
  ASSERT_TRUE(r.is_object());
  EXPECT_EQ(r["successful_requests"], 5) << r.dump();
  EXPECT_EQ(r["failed_requests"], 0) << r.dump();
  EXPECT_EQ(r["total_output_tokens"], 5 * 12);
  EXPECT_EQ(r["total_input_tokens"], 5 * 8);
  EXPECT_GT(r["ttft_ms"]["mean"].get<double>(), 0.0);
}

TEST(BenchServe, UsageWinsOverChunkCounts) {
  FakeServer fake(true, 3);  // 4 chunks of 3 tokens each: usage says 12
  const json r = bench(fake.port, 4, 12);
  ASSERT_TRUE(r.is_object());
  EXPECT_EQ(r["successful_requests"], 4) << r.dump();
  EXPECT_EQ(r["total_output_tokens"], 4 * 12);
}

TEST(BenchServe, DetailedListsEveryRequestsTimeline) {
  FakeServer fake(true, 3);
  const json r = bench(fake.port, 5, 12, "--detailed");
  ASSERT_TRUE(r.is_object());
  ASSERT_TRUE(r.contains("requests")) << r.dump();
  ASSERT_EQ(r["requests"].size(), 5u);
  for (const json& q : r["requests"]) {
    EXPECT_TRUE(q["ok"].get<bool>()) << q.dump();
    EXPECT_EQ(q["output_tokens"], 12);
    EXPECT_GE(q["start_s"].get<double>(), 0.0);
    EXPECT_GT(q["ttft_ms"].get<double>(), 0.0);
    EXPECT_GE(q["e2el_ms"].get<double>(), q["ttft_ms"].get<double>());
  }
  EXPECT_FALSE(bench(fake.port, 2, 12).contains("requests"));  // only when asked
}

// --range-ratio 0.5 draws every request's lengths from [len / 2, len * 3 / 2] (vLLM's random range
// ratio): the requests differ, and none leaves the range.
TEST(BenchServe, RangeRatioDrawsLengthsFromTheRange) {
  FakeServer fake(true, 1);
  const json r = bench(fake.port, 20, 12, "--range-ratio 0.5 --detailed");
  ASSERT_TRUE(r.is_object());
  ASSERT_EQ(r["requests"].size(), 20u) << r.dump();
  int64_t lo = 1 << 30, hi = 0;
  for (const json& q : r["requests"]) {
    const int64_t out = q["output_tokens"].get<int64_t>();
    EXPECT_GE(out, 6);
    EXPECT_LE(out, 18);
    lo = std::min(lo, out);
    hi = std::max(hi, out);
  }
  EXPECT_LT(lo, hi);  // not every request the same length
  const int64_t in = r["total_input_tokens"].get<int64_t>();
  EXPECT_GE(in, 20 * 4);
  EXPECT_LE(in, 20 * 12);
  EXPECT_NE(in, 20 * 8);
  // A ratio of 1 could draw empty prompts: refused before any request.
  const std::string refused = std::string(DI_CLI_PATH) + " bench-serve --url http://127.0.0.1:" +
                              std::to_string(fake.port) + " --range-ratio 1 >/dev/null 2>&1";
  EXPECT_NE(std::system(refused.c_str()), 0);
}

// --extra-body merges its fields into every request (inline or from a file), as the
// llama.cpp comparison sends the same logit_bias to both servers; anything but a JSON
// object is refused before any request.
TEST(BenchServe, ExtraBodyIsMergedIntoEveryRequest) {
  FakeServer fake(true, 1);
  json r = bench(fake.port, 3, 4, "--extra-body '{\"logit_bias\": {\"5\": -100}}'");
  ASSERT_TRUE(r.is_object());
  EXPECT_EQ(r["successful_requests"], 3) << r.dump();
  EXPECT_EQ(fake.with_bias.load(), 3);
  const std::string file = ::testing::TempDir() + "extra_body.json";
  std::ofstream(file) << R"({"logit_bias": {"5": -100}, "seed": 7})";
  r = bench(fake.port, 2, 4, "--extra-body @" + file);
  EXPECT_EQ(r["successful_requests"], 2) << r.dump();
  EXPECT_EQ(fake.with_bias.load(), 5);
  for (const char* bad : {"'[1, 2]'", "'{\"a\":'", "@/nonexistent/extra.json"}) {
    const std::string cmd = std::string(DI_CLI_PATH) + " bench-serve --url http://127.0.0.1:" + std::to_string(fake.port) +
                            " --extra-body " + bad + " >/dev/null 2>&1";
    EXPECT_NE(std::system(cmd.c_str()), 0) << bad;
  }
  EXPECT_EQ(fake.with_bias.load(), 5);
}
