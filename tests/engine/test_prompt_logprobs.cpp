// Prompt logprobs (every prompt row through the head) and prompt-only requests
// (max_tokens 0) in the step loop over the fake runner.
#include <gtest/gtest.h>

#include <cmath>

#include "harness.h"

using namespace deepinfer;
using namespace deepinfer::engine;
using namespace deepinfer::engine::testing;

namespace {

SchedulerOptions opts(int64_t budget, int64_t cache) {
  SchedulerOptions o;
  o.max_batch_tokens = budget;
  o.max_running = 4;
  o.prefix_cache_entries = cache;
  return o;
}

// log-softmax of the fake runner's row after `history`, computed here independently.
std::vector<double> log_softmax_after(const FakeRunner& r, const std::vector<int32_t>& history) {
  std::vector<float> row(size_t(r.vocab_));
  r.fill_row(history, row.data());
  double m = -1e300, z = 0.0;
  for (float v : row) m = std::max(m, double(v));
  for (float v : row) z += std::exp(double(v) - m);
  std::vector<double> out;
  for (float v : row) out.push_back(double(v) - m - std::log(z));
  return out;
}

std::vector<GeneratedToken> prompt_lps(const Collector& c) {
  std::vector<GeneratedToken> out;
  for (const auto& e : c.events)
    for (const auto& t : e.prompt_logprobs) out.push_back(t);
  return out;
}

void expect_rows_match(const Harness& h, const std::vector<int32_t>& prompt, const std::vector<GeneratedToken>& got,
                       int n_top) {
  ASSERT_EQ(got.size(), prompt.size() - 1);
  for (size_t p = 1; p < prompt.size(); ++p) {
    const std::vector<double> lp = log_softmax_after(*h.runner, {prompt.begin(), prompt.begin() + long(p)});
    const GeneratedToken& g = got[p - 1];
    EXPECT_EQ(g.token, prompt[p]);
    EXPECT_NEAR(g.logprob, lp[size_t(prompt[p])], 1e-5) << "position " << p;
    ASSERT_EQ(int(g.top.size()), n_top);
    for (int k = 0; k < n_top; ++k) {
      EXPECT_NEAR(g.top[size_t(k)].logprob, lp[size_t(g.top[size_t(k)].token)], 1e-5);
      if (k > 0) {
      EXPECT_GE(g.top[size_t(k - 1)].logprob, g.top[size_t(k)].logprob);
    }
    }
    // The best alternative is the row's maximum.
    if (n_top > 0) {
      EXPECT_NEAR(g.top[0].logprob, *std::max_element(lp.begin(), lp.end()), 1e-5);
    }
  }
}

}  // namespace

TEST(PromptLogprobs, EveryPromptRowOverChunkedPrefill) {
  for (int64_t budget : {8, 33, 1000}) {
    Harness h(10000, opts(budget, 0));
    const std::vector<int32_t> prompt = ramp(100);
    SamplingParams p = greedy(0);
    p.prompt_logprobs = 3;
    const uint64_t id = h.submit(prompt, p);
    h.run();
    const Collector& c = *h.sinks[id];
    EXPECT_EQ(c.reason(), FinishReason::kLength);
    EXPECT_TRUE(c.tokens().empty());
    EXPECT_EQ(c.events.back().usage.completion_tokens, 0);
    EXPECT_EQ(c.events.back().usage.prompt_tokens, 100);
    expect_rows_match(h, prompt, prompt_lps(c), 3);
  }
}

TEST(PromptLogprobs, ThenGenerationIsUnchanged) {
  Harness plain(10000, opts(16, 0)), scored(10000, opts(16, 0));
  const std::vector<int32_t> prompt = ramp(40);
  const uint64_t a = plain.submit(prompt, greedy(10));
  SamplingParams p = greedy(10);
  p.prompt_logprobs = 0;
  const uint64_t b = scored.submit(prompt, p);
  plain.run();
  scored.run();
  EXPECT_EQ(plain.sinks[a]->tokens(), scored.sinks[b]->tokens());
  EXPECT_EQ(plain.runner->all_rows_chunks, 0);
  EXPECT_GT(scored.runner->all_rows_chunks, 0);
  expect_rows_match(scored, prompt, prompt_lps(*scored.sinks[b]), 0);
  // Every prompt logprob arrives before the first generated token.
  bool seen_token = false;
  for (const auto& e : scored.sinks[b]->events) {
    if (seen_token) {
      EXPECT_TRUE(e.prompt_logprobs.empty());
    }
    seen_token = seen_token || !e.tokens.empty();
  }
}

TEST(PromptLogprobs, NotServedFromThePrefixCache) {
  Harness h(10000, opts(64, 4));
  const std::vector<int32_t> prompt = ramp(80);
  std::vector<int32_t> shorter(prompt.begin(), prompt.begin() + 60);
  h.submit(shorter, greedy(1));
  h.run();
  const uint64_t hits = h.core->stats().prefix_cache_hits;
  SamplingParams p = greedy(0);
  p.prompt_logprobs = 1;
  const uint64_t id = h.submit(prompt, p);
  h.run();
  EXPECT_EQ(h.core->stats().prefix_cache_hits, hits);
  expect_rows_match(h, prompt, prompt_lps(*h.sinks[id]), 1);
  // A plain request after the same prefix still resumes the snapshot.
  h.submit(prompt, greedy(1));
  h.run();
  EXPECT_GT(h.core->stats().prefix_cache_hits, hits);
}

TEST(PromptLogprobs, MaxTokensZeroRunsThePromptOnly) {
  Harness h(10000, opts(64, 0));
  const uint64_t id = h.submit(ramp(20), greedy(0));
  h.run();
  EXPECT_EQ(h.sinks[id]->reason(), FinishReason::kLength);
  EXPECT_TRUE(h.sinks[id]->tokens().empty());
  EXPECT_TRUE(prompt_lps(*h.sinks[id]).empty());
  EXPECT_EQ(h.runner->tokens_run, 20);
}
