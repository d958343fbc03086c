// deepinfer bench-serve --url http://127.0.0.1:8000 [--concurrency 8] [--num-prompts 64]
//                       [--input-len 128] [--output-len 64] [--seed 0] [--api-key K] [--json] [--detailed]
//                       [--range-ratio R] [--workload random|agent] [--turns 10] [--tool-result-len 200]
// Online serving benchmark in the manner of `vllm bench serve` with the random dataset:
// random token-id prompts sent to /v1/completions with streaming, ignore_eos and greedy
// sampling, at most `concurrency` in flight. Reports request and token throughput and
// TTFT, TPOT (per request: (latency - TTFT) / (output tokens - 1)), ITL (time between
// streamed chunks carrying tokens) and end-to-end latency: mean, median, p99. With --range-ratio R
// each request's prompt and output lengths are drawn uniformly from [len * (1 - R), len * (1 + R)]
// (vLLM's --random-range-ratio), so a mix of long and short requests shares the server.
// Any OpenAI-compatible server can be measured: where chunks carry no token ids (llama-server,
// vLLM without return_token_ids), a chunk with text counts as one token, and the output
// token count comes from the final usage (stream_options.include_usage) when the server
// sends it, else from those chunks.
//
// --workload agent: sessions of --turns chat requests like an agent loop's: a fixed system
// prompt with tool definitions (about --input-len tokens), then per turn the whole history
// again plus the previous turn's tool call and its result (about --tool-result-len tokens). It
// reports TTFT and cached prompt tokens per turn (the prefix cache at work).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <mutex>
#include <random>
#include <thread>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "args.h"
#include "command.h"
#include "summary.h"

namespace deepinfer::cli {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

struct Outcome {
  bool ok = false;
  std::string error;
  double start = 0;  // seconds after the benchmark began
  double ttft = 0, latency = 0;
  int64_t output_tokens = 0, prompt_tokens = 0, cached_tokens = 0;
  std::vector<double> itl;
};

double secs(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// One streaming request; SSE events are parsed as they arrive.
Outcome run_one(const std::string& url, const httplib::Headers& headers, const json& body,
               const char* path = "/v1/completions") {
  Outcome o;
  httplib::Client cli(url);
  cli.set_read_timeout(600, 0);
  cli.set_write_timeout(60, 0);
  httplib::Request req;
  req.method = "POST";
  req.path = path;
  req.headers = headers;
  req.set_header("Content-Type", "application/json");
  req.body = body.dump();
  std::string buf;
  bool done = false;
  int64_t counted = 0, usage_output = -1;
  const Clock::time_point t0 = Clock::now();
  Clock::time_point last = t0;
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    buf.append(data, n);
    size_t end;
    while ((end = buf.find("\n\n")) != std::string::npos) {
      const std::string event = buf.substr(0, end);
      buf.erase(0, end + 2);
      if (event.rfind("data: ", 0) != 0) continue;  // keep-alive comments
      const std::string payload = event.substr(6);
      if (payload == "[DONE]") {
        done = true;
        continue;
      }
      json j = json::parse(payload, nullptr, false);
      if (j.is_discarded()) continue;
      if (j.contains("error")) {
        o.error = j["error"].value("message", "error");
        continue;
      }
      if (j.contains("usage") && j["usage"].is_object()) {
        const json& u = j["usage"];
        if (u.contains("completion_tokens") && u["completion_tokens"].is_number_integer())
          usage_output = u["completion_tokens"].get<int64_t>();
        if (u.contains("prompt_tokens") && u["prompt_tokens"].is_number_integer())
          o.prompt_tokens = u["prompt_tokens"].get<int64_t>();
        if (u.contains("prompt_tokens_details") && u["prompt_tokens_details"].is_object())
          o.cached_tokens = u["prompt_tokens_details"].value("cached_tokens", int64_t(0));
      }
      if (!j.contains("choices") || !j["choices"].is_array() || j["choices"].empty()) continue;
      const json& choice = j["choices"][0];
      int64_t n_tokens = 0;
      if (choice.contains("token_ids") && choice["token_ids"].is_array()) {
        n_tokens = int64_t(choice["token_ids"].size());
      } else if (choice.contains("text") && choice["text"].is_string() && !choice["text"].get<std::string>().empty()) {
        n_tokens = 1;  // no ids: one chunk, one token (as vllm bench serve counts)
      } else if (choice.contains("delta") && choice["delta"].is_object()) {  // chat: any content counts
        const json& d = choice["delta"];
        for (const char* k : {"content", "reasoning_content"})
          if (d.contains(k) && d[k].is_string() && !d[k].get<std::string>().empty()) n_tokens = 1;
        if (d.contains("tool_calls")) n_tokens = 1;
      }
      if (n_tokens == 0) continue;
      counted += n_tokens;
      const Clock::time_point now = Clock::now();
      if (o.ttft == 0) o.ttft = secs(now - t0);
      else o.itl.push_back(secs(now - last));
      last = now;
    }
    return true;
  };
  auto res = cli.send(req);
  o.latency = secs(Clock::now() - t0);
  o.output_tokens = usage_output >= 0 ? usage_output : counted;
  if (!res) o.error = "connection failed: " + httplib::to_string(res.error());
  else if (res->status != 200 && o.error.empty()) o.error = "HTTP " + std::to_string(res->status) + ": " + res->body;
  if (o.prompt_tokens == 0 && body.contains("prompt") && body["prompt"].is_array())
    o.prompt_tokens = int64_t(body["prompt"].size());
  o.ok = o.error.empty() && done && o.ttft > 0;
  if (!o.ok && o.error.empty()) o.error = "stream ended early";
  return o;
}

json fetch_model(const std::string& url, const httplib::Headers& headers) {
  httplib::Client cli(url);
  cli.set_read_timeout(30, 0);
  auto res = cli.Get("/v1/models", headers);
  if (!res) throw std::runtime_error("cannot reach " + url + ": " + httplib::to_string(res.error()));
  if (res->status != 200) throw std::runtime_error("GET /v1/models: HTTP " + std::to_string(res->status) + " " + res->body);
  json j = json::parse(res->body, nullptr, false);
  if (j.is_discarded() || !j.contains("data") || j["data"].empty()) throw std::runtime_error("GET /v1/models: no model");
  return j["data"][0];
}

struct Load {
  std::string url;
  httplib::Headers headers;
  long concurrency = 8, n = 64, in_len = 128, out_len = 64;
  double range_ratio = 0.0;  // lengths drawn from [len * (1 - r), len * (1 + r)]
  int64_t vocab = 0;  // 0: the server's vocab_size, else 32000
  json extra = json::object();  // --extra-body: merged into every random-workload request
};

// --extra-body: a JSON object given inline or as @FILE.
json extra_body_arg(const std::string& value) {
  std::string text = value;
  if (!value.empty() && value[0] == '@') {
    std::ifstream f(value.substr(1), std::ios::binary);
    if (!f) throw ArgError("--extra-body: cannot read " + value.substr(1));
    text.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  }
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) throw ArgError("--extra-body must be a JSON object (or @FILE holding one)");
  return j;
}

// Random prompts, drawn up front so the timed loop only sends.
std::vector<json> make_bodies(const Load& l, const json& model, uint64_t seed) {
  // Servers other than ours do not report the vocabulary size: --vocab-size, else 32000.
  const int64_t vocab = l.vocab > 0 ? l.vocab : model.value("vocab_size", int64_t(32000));
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int64_t> tok(std::min<int64_t>(100, vocab / 10), vocab - 1);
  auto length = [&](long len) {
    const long lo = std::max(1L, long(std::lround(double(len) * (1.0 - l.range_ratio))));
    const long hi = std::max(lo, long(std::lround(double(len) * (1.0 + l.range_ratio))));
    return std::uniform_int_distribution<long>(lo, hi)(rng);
  };
  std::vector<json> bodies;
  for (long i = 0; i < l.n; ++i) {
    const long in_len = l.range_ratio > 0 ? length(l.in_len) : l.in_len;
    const long out_len = l.range_ratio > 0 ? length(l.out_len) : l.out_len;
    std::vector<int64_t> ids(static_cast<size_t>(in_len));
    for (auto& t : ids) t = tok(rng);
    json body{{"model", model["id"]}, {"prompt", ids}, {"max_tokens", out_len}, {"temperature", 0.0},
              {"ignore_eos", true}, {"stream", true}, {"return_token_ids", true},
              {"stream_options", {{"include_usage", true}}}};
    body.update(l.extra);
    bodies.push_back(std::move(body));
  }
  return bodies;
}

// The numbers `vllm bench serve` reports, from the per-request outcomes.
json report(const Load& l, const std::vector<Outcome>& outcomes, double duration) {
  std::vector<double> ttft, tpot, itl, e2e;
  int64_t ok = 0, out_tokens = 0, in_tokens = 0;
  std::string first_error;
  for (const Outcome& o : outcomes) {
    if (!o.ok) {
      if (first_error.empty()) first_error = o.error;
      continue;
    }
    ++ok;
    out_tokens += o.output_tokens;
    in_tokens += o.prompt_tokens;
    ttft.push_back(o.ttft * 1e3);
    e2e.push_back(o.latency * 1e3);
    if (o.output_tokens > 1) tpot.push_back((o.latency - o.ttft) / double(o.output_tokens - 1) * 1e3);
    for (double x : o.itl) itl.push_back(x * 1e3);
  }
  json r = {{"successful_requests", ok},
            {"failed_requests", l.n - ok},
            {"duration_s", duration},
            {"concurrency", l.concurrency},
            {"input_len", l.in_len},
            {"output_len", l.out_len},
            {"range_ratio", l.range_ratio},
            {"total_input_tokens", in_tokens},
            {"total_output_tokens", out_tokens},
            {"request_throughput", double(ok) / duration},
            {"output_throughput", double(out_tokens) / duration},
            {"total_token_throughput", double(in_tokens + out_tokens) / duration}};
  for (const auto& [name, v] : {std::pair<const char*, std::vector<double>*>{"ttft_ms", &ttft}, {"tpot_ms", &tpot},
                                {"itl_ms", &itl}, {"e2el_ms", &e2e}}) {
    const Summary s = summarize(*v);
    r[name] = {{"mean", s.mean}, {"median", s.median}, {"p99", s.p99}};
  }
  if (!first_error.empty()) r["first_error"] = first_error;
  return r;
}

void print_table(const json& r) {
  auto line = [](const char* label, double v, int decimals) { std::printf("%-40s %10.*f\n", label, decimals, v); };
  std::printf("============ Serving Benchmark Result ============\n");
  line("Successful requests:", r["successful_requests"].get<double>(), 0);
  line("Failed requests:", r["failed_requests"].get<double>(), 0);
  line("Maximum request concurrency:", r["concurrency"].get<double>(), 0);
  line("Benchmark duration (s):", r["duration_s"].get<double>(), 2);
  line("Total input tokens:", r["total_input_tokens"].get<double>(), 0);
  line("Total generated tokens:", r["total_output_tokens"].get<double>(), 0);
  line("Request throughput (req/s):", r["request_throughput"].get<double>(), 2);
  line("Output token throughput (tok/s):", r["output_throughput"].get<double>(), 2);
  line("Total token throughput (tok/s):", r["total_token_throughput"].get<double>(), 2);
  const char* sections[][3] = {{"Time to First Token", "ttft_ms", "TTFT"},
                               {"Time per Output Token (excl. 1st token)", "tpot_ms", "TPOT"},
                               {"Inter-token Latency", "itl_ms", "ITL"},
                               {"End-to-end Latency", "e2el_ms", "E2EL"}};
  for (const auto& s : sections) {
    std::printf("---------------%s----------------\n", s[0]);
    const json& v = r[s[1]];
    line(("Mean " + std::string(s[2]) + " (ms):").c_str(), v["mean"].get<double>(), 2);
    line(("Median " + std::string(s[2]) + " (ms):").c_str(), v["median"].get<double>(), 2);
    line(("P99 " + std::string(s[2]) + " (ms):").c_str(), v["p99"].get<double>(), 2);
  }
  std::printf("==================================================\n");
  if (r.contains("first_error")) std::printf("first error: %s\n", r["first_error"].get<std::string>().c_str());
}

// Words for the synthetic agent text (tokenizer-agnostic: the server counts the tokens).
std::string words(std::mt19937_64& rng, long n_words) {
  static const char* kWords[] = {"file", "build", "error", "line", "test", "value", "return", "module", "config",
                                 "server", "request", "cache", "thread", "output", "input", "parse", "token", "path",
                                 "update", "check", "result", "function", "memory", "index", "layer", "batch"};
  std::string s;
  for (long i = 0; i < n_words; ++i) {
    if (i) s += (i % 12 == 0) ? ".\n" : " ";
    s += kWords[rng() % (sizeof kWords / sizeof kWords[0])];
  }
  return s;
}

// Agent sessions: each runs its turns in order; sessions run `concurrency` at a time.
int run_agent(const Load& l, const json& model, long turns, long tool_len, uint64_t seed, bool as_json) {
  std::mt19937_64 rng(seed);
  const json tools = json::array(
      {{{"type", "function"},
        {"function",
         {{"name", "run_shell"},
          {"description", "Run a shell command in the repository and return its output. " + words(rng, 20)},
          {"parameters",
           {{"type", "object"},
            {"properties", {{"cmd", {{"type", "string"}, {"description", "the command line"}}}}},
            {"required", {"cmd"}}}}}}}});
  // About 1.3 tokens per word on BPE vocabularies; the tools add their own.
  const std::string system = "You are a coding agent. " + words(rng, std::max<long>(1, l.in_len * 3 / 4));
  std::vector<std::vector<Outcome>> per_turn(size_t(turns), std::vector<Outcome>(size_t(l.n)));
  std::vector<std::vector<std::string>> results(size_t(l.n));
  for (auto& r : results)
    for (long t = 0; t < turns; ++t) r.push_back(words(rng, std::max<long>(1, tool_len * 3 / 4)));
  std::atomic<long> next{0};
  std::vector<std::thread> workers;
  for (long w = 0; w < std::min(l.concurrency, l.n); ++w)
    workers.emplace_back([&] {
      for (long s; (s = next.fetch_add(1)) < l.n;) {
        json messages = json::array({{{"role", "system"}, {"content", system}},
                                     {{"role", "user"}, {"content", "Fix the failing test in session " + std::to_string(s)}}});
        for (long t = 0; t < turns; ++t) {
          const json body = {{"model", model["id"]}, {"messages", messages}, {"tools", tools},
                             {"max_tokens", l.out_len}, {"temperature", 0.0}, {"stream", true},
                             {"stream_options", {{"include_usage", true}}}};
          per_turn[size_t(t)][size_t(s)] = run_one(l.url, l.headers, body, "/v1/chat/completions");
          const std::string id = "call_" + std::to_string(s) + "_" + std::to_string(t);
          messages.push_back({{"role", "assistant"},
                              {"content", ""},
                              {"tool_calls",
                               {{{"id", id},
                                 {"type", "function"},
                                 {"function", {{"name", "run_shell"},
                                               {"arguments", json{{"cmd", "make test step " + std::to_string(t)}}.dump()}}}}}}});
          messages.push_back({{"role", "tool"}, {"tool_call_id", id}, {"content", results[size_t(s)][size_t(t)]}});
        }
      }
    });
  for (auto& t : workers) t.join();
  json rows = json::array();
  int64_t failed = 0;
  std::string first_error;
  for (long t = 0; t < turns; ++t) {
    std::vector<double> ttft;
    double prompt = 0, cached = 0;
    for (const Outcome& o : per_turn[size_t(t)]) {
      if (!o.ok) {
        ++failed;
        if (first_error.empty()) first_error = o.error;
        continue;
      }
      ttft.push_back(o.ttft * 1e3);
      prompt += double(o.prompt_tokens);
      cached += double(o.cached_tokens);
    }
    const Summary s = summarize(ttft);
    const double n = std::max<double>(1, double(ttft.size()));
    rows.push_back({{"turn", t + 1}, {"ttft_ms", {{"mean", s.mean}, {"median", s.median}, {"p99", s.p99}}},
                    {"prompt_tokens_mean", prompt / n}, {"cached_tokens_mean", cached / n}});
  }
  const json r = {{"workload", "agent"}, {"sessions", l.n}, {"turns", turns}, {"concurrency", l.concurrency},
                  {"failed_requests", failed}, {"per_turn", rows},
                  {"ttft_last_over_first", rows.back()["ttft_ms"]["mean"].get<double>() /
                                               std::max(1e-9, rows.front()["ttft_ms"]["mean"].get<double>())}};
  if (as_json) {
    std::printf("%s\n", r.dump(2).c_str());
  } else {
    std::printf("============ Agent Workload (%ld sessions x %ld turns, concurrency %ld) ============\n", l.n, turns,
                l.concurrency);
    std::printf("%5s %14s %14s %14s %14s\n", "turn", "mean TTFT ms", "median ms", "prompt tok", "cached tok");
    for (const json& row : rows)
      std::printf("%5ld %14.2f %14.2f %14.0f %14.0f\n", row["turn"].get<long>(), row["ttft_ms"]["mean"].get<double>(),
                  row["ttft_ms"]["median"].get<double>(), row["prompt_tokens_mean"].get<double>(),
                  row["cached_tokens_mean"].get<double>());
    std::printf("TTFT of the last turn / the first: %.2f\n", r["ttft_last_over_first"].get<double>());
    if (!first_error.empty()) std::printf("first error: %s\n", first_error.c_str());
  }
  return failed == 0 ? 0 : 1;
}

int run(const std::vector<std::string>& argv) {
  Args args(argv, {"--url", "--concurrency", "--num-prompts", "--input-len", "--output-len", "--seed", "--api-key",
             "--vocab-size", "--range-ratio", "--workload", "--turns", "--tool-result-len", "--extra-body"},
            {"--json", "--detailed"});
  Load l;
  l.url = args.get_or("--url", "http://127.0.0.1:8000");
  l.concurrency = args.get_int("--concurrency", 8);
  l.n = args.get_int("--num-prompts", 64);
  l.in_len = args.get_int("--input-len", 128);
  l.out_len = args.get_int("--output-len", 64);
  if (l.concurrency < 1 || l.n < 1 || l.in_len < 1 || l.out_len < 1)
    throw ArgError("--concurrency, --num-prompts, --input-len and --output-len must be at least 1");
  l.range_ratio = args.get_double("--range-ratio", 0.0);
  if (!(l.range_ratio >= 0.0 && l.range_ratio < 1.0)) throw ArgError("--range-ratio must be in [0, 1)");
  if (auto k = args.get("--api-key")) l.headers.emplace("Authorization", "Bearer " + *k);
  l.vocab = args.get_int("--vocab-size", 0);
  if (l.vocab < 0 || l.vocab == 1) throw ArgError("--vocab-size must be at least 2");
  if (auto e = args.get("--extra-body")) l.extra = extra_body_arg(*e);
  const std::string workload = args.get_or("--workload", "random");
  if (workload == "agent") {
    const long turns = args.get_int("--turns", 10), tool_len = args.get_int("--tool-result-len", 200);
    if (turns < 1 || tool_len < 1) throw ArgError("--turns and --tool-result-len must be at least 1");
    return run_agent(l, fetch_model(l.url, l.headers), turns, tool_len, uint64_t(args.get_int("--seed", 0)),
                     args.has("--json"));
  }
  if (workload != "random") throw ArgError("--workload must be random or agent");
  const std::vector<json> bodies = make_bodies(l, fetch_model(l.url, l.headers), uint64_t(args.get_int("--seed", 0)));

  std::vector<Outcome> outcomes(static_cast<size_t>(l.n));
  std::atomic<long> next{0};
  const Clock::time_point t0 = Clock::now();
  std::vector<std::thread> workers;
  for (long w = 0; w < std::min(l.concurrency, l.n); ++w)
    workers.emplace_back([&] {
      for (long i; (i = next.fetch_add(1)) < l.n;) {
        const double start = secs(Clock::now() - t0);
        outcomes[size_t(i)] = run_one(l.url, l.headers, bodies[size_t(i)]);
        outcomes[size_t(i)].start = start;
      }
    });
  for (auto& t : workers) t.join();
  json r = report(l, outcomes, secs(Clock::now() - t0));
  // Each request's timeline, in the order sent (where scheduling shows: who waited for whom).
  if (args.has("--detailed")) {
    json reqs = json::array();
    for (const Outcome& o : outcomes)
      reqs.push_back({{"ok", o.ok}, {"start_s", o.start}, {"ttft_ms", o.ttft * 1e3}, {"e2el_ms", o.latency * 1e3},
                      {"output_tokens", o.output_tokens}});
    r["requests"] = reqs;
  }
  if (args.has("--json")) std::printf("%s\n", r.dump(2).c_str());
  else print_table(r);
  return r["failed_requests"].get<int64_t>() == 0 ? 0 : 1;
}

CommandRegistration reg("bench-serve", "online serving benchmark against a running server", run,
                        "usage: deepinfer bench-serve [options]\n\n"
                        "  --url URL                    the server (default http://127.0.0.1:8000)\n"
                        "  --concurrency N              requests in flight (default 8)\n"
                        "  --num-prompts N              requests in all (default 64)\n"
                        "  --input-len N                prompt tokens per request (default 128)\n"
                        "  --output-len N               generated tokens per request (default 64)\n"
                        "  --range-ratio R              draw each request's lengths from [len*(1-R), len*(1+R)]\n"
                        "                               (default 0: every request the same)\n"
                        "  --seed N                     seed of the random prompts (default 0)\n"
                        "  --extra-body JSON|@FILE      fields merged into every request of the random workload\n"
                        "                               (e.g. the same logit_bias for two servers compared)\n"
                        "  --detailed                   also each request's start, TTFT and latency (JSON)\n"
                        "  --api-key KEY                sent as a Bearer token\n"
                        "  --vocab-size N               prompt ids are drawn below N (default: the server's\n"
                        "                               vocab_size from /v1/models, else 32000)\n"
                        "  --workload random|agent      random token prompts (default), or agent sessions:\n"
                        "                               a system prompt with tools, then --turns chat turns each\n"
                        "                               adding a tool call and its result (TTFT per turn)\n"
                        "  --turns N                    agent: turns per session (default 10)\n"
                        "  --tool-result-len N          agent: about N tokens per tool result (default 200)\n"
                        "  --json                       JSON report instead of the table\n");

}  // namespace
}  // namespace deepinfer::cli
