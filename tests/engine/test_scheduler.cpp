// The token-budget scheduler and the step loop over a fake runner: budget sharing, decode
// priority, chunked prefill, preemption by recompute, prefix-cache reuse, cancellation,
// stop conditions, and a property test over random workloads.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>

#include "harness.h"

using namespace deepinfer;
using namespace deepinfer::engine;
using namespace deepinfer::engine::testing;

namespace {

SchedulerOptions opts(int64_t budget, int64_t max_running, int64_t cache = 0, int64_t granularity = 0) {
  SchedulerOptions o;
  o.max_batch_tokens = budget;
  o.max_running = max_running;
  o.prefix_cache_entries = cache;
  o.prefix_cache_granularity = granularity;
  return o;
}

std::vector<int32_t> concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// The next turn of a conversation: the last prompt, its output, and two new tokens.
std::vector<int32_t> next_turn(std::vector<int32_t> prompt, const std::vector<int32_t>& output) {
  prompt.insert(prompt.end(), output.begin(), output.end());
  prompt.push_back(5);
  prompt.push_back(9);
  return prompt;
}

int64_t scheduled_tokens(const FakeRunner& r, uint64_t id) {
  for (const auto& [s, n] : r.last_step)
    if (s == id) return n;
  return 0;
}

}  // namespace

TEST(Scheduler, BudgetMustExceedMaxRunning) {
  EXPECT_THROW(Scheduler(opts(8, 8), small_spec(), 100), std::invalid_argument);
  EXPECT_NO_THROW(Scheduler(opts(9, 8), small_spec(), 100));
}

TEST(Scheduler, DecodesFirstThenChunkedPrefillShareTheBudget) {
  Harness h(10000, opts(64, 4));
  const uint64_t a = h.submit(ramp(10), greedy(20));
  h.core->step();
  EXPECT_EQ(scheduled_tokens(*h.runner, a), 10);
  const uint64_t b = h.submit(ramp(200), greedy(5));
  h.core->step();
  EXPECT_EQ(scheduled_tokens(*h.runner, a), 1);   // the decoder keeps its token
  EXPECT_EQ(scheduled_tokens(*h.runner, b), 63);  // the long prompt takes the rest
  h.core->step();
  EXPECT_EQ(scheduled_tokens(*h.runner, a), 1);
  EXPECT_EQ(scheduled_tokens(*h.runner, b), 63);
  h.run();
  EXPECT_EQ(h.sinks[a]->tokens().size(), 20u);
  EXPECT_EQ(h.sinks[b]->tokens().size(), 5u);
  EXPECT_EQ(h.sinks[a]->reason(), FinishReason::kLength);
}

// Two long prompts that arrive together are prefilled one after the other (the first answers
// a step earlier); short prompts still join the step; 0 lifts the limit.
TEST(Scheduler, LongPromptsArePrefilledOneAtATime) {
  auto options = [](int64_t max_long) {
    SchedulerOptions o = opts(512, 8);
    o.max_long_partial_prefills = max_long;
    o.long_prefill_token_threshold = 64;
    return o;
  };
  {
    Harness h(10000, options(1));
    const uint64_t a = h.submit(ramp(200), greedy(4));
    const uint64_t b = h.submit(ramp(150), greedy(4));
    const uint64_t c = h.submit(ramp(20), greedy(4));  // short, but behind b: FCFS
    h.core->step();
    EXPECT_EQ(scheduled_tokens(*h.runner, a), 200);
    EXPECT_EQ(scheduled_tokens(*h.runner, b), 0);
    EXPECT_EQ(scheduled_tokens(*h.runner, c), 0);
    EXPECT_EQ(h.sinks[a]->tokens().size(), 1u);  // a's first token after one step
    h.core->step();
    EXPECT_EQ(scheduled_tokens(*h.runner, a), 1);
    EXPECT_EQ(scheduled_tokens(*h.runner, b), 150);
    EXPECT_EQ(scheduled_tokens(*h.runner, c), 20);  // a short prompt joins the long one
    h.run();
    for (uint64_t id : {a, b, c}) EXPECT_EQ(h.sinks[id]->tokens().size(), 4u);
  }
  {
    // A long prompt chunked over steps keeps the next long one out until its last chunk.
    SchedulerOptions o = options(1);
    o.max_batch_tokens = 128;
    Harness h(10000, o);
    const uint64_t a = h.submit(ramp(200), greedy(2));
    const uint64_t b = h.submit(ramp(100), greedy(2));
    h.core->step();
    EXPECT_EQ(scheduled_tokens(*h.runner, a), 128);
    EXPECT_EQ(scheduled_tokens(*h.runner, b), 0);
    h.core->step();
    EXPECT_EQ(scheduled_tokens(*h.runner, a), 72);  // a's last 72 tokens: still long
    EXPECT_EQ(scheduled_tokens(*h.runner, b), 0);
    h.core->step();
    EXPECT_EQ(scheduled_tokens(*h.runner, a), 1);
    EXPECT_EQ(scheduled_tokens(*h.runner, b), 100);
    h.run();
  }
  {
    Harness h(10000, options(0));
    const uint64_t a = h.submit(ramp(200), greedy(4));
    const uint64_t b = h.submit(ramp(150), greedy(4));
    h.core->step();
    EXPECT_EQ(scheduled_tokens(*h.runner, a), 200);
    EXPECT_EQ(scheduled_tokens(*h.runner, b), 150);
    h.run();
  }
  {
    // What counts is what is left after a prefix hit: the next turn of a cached conversation
    // (200 tokens, 197 of them cached) joins a long prompt's step.
    SchedulerOptions o = options(1);
    o.prefix_cache_entries = 4;
    Harness h(10000, o);
    const uint64_t a = h.submit(ramp(190), greedy(8));
    h.run();
    const std::vector<int32_t> turn2 = next_turn(ramp(190), h.sinks[a]->tokens());
    const uint64_t l = h.submit(ramp(300, 3), greedy(2));
    const uint64_t b = h.submit(turn2, greedy(2));
    h.core->step();
    EXPECT_EQ(scheduled_tokens(*h.runner, l), 300);
    EXPECT_EQ(scheduled_tokens(*h.runner, b), int64_t(turn2.size()) - 197);
    h.run();
  }
  SchedulerOptions bad = options(-1);
  EXPECT_THROW(Scheduler(bad, small_spec(), 100), std::invalid_argument);
}

TEST(Scheduler, ChunkingDoesNotChangeTheOutput) {
  std::vector<int32_t> want;
  for (int64_t budget : {8, 33, 1000}) {
    Harness h(10000, opts(budget, 4));
    const uint64_t id = h.submit(ramp(150), greedy(12));
    h.run();
    if (want.empty()) want = h.sinks[id]->tokens();
    EXPECT_EQ(h.sinks[id]->tokens(), want) << "budget " << budget;
  }
}

TEST(Scheduler, PreemptionRecomputesAndGivesTheSameTokens) {
  // Reference: plenty of memory.
  std::map<int, std::vector<int32_t>> want;
  SamplingParams sampled;
  sampled.temperature = 0.8f;
  sampled.seed = 1234;
  sampled.max_tokens = 40;
  sampled.ignore_eos = true;
  auto workload = [&](Harness& h) {
    std::vector<uint64_t> ids;
    for (int i = 0; i < 6; ++i) ids.push_back(h.submit(ramp(30 + 20 * i, int32_t(i + 2)), i % 2 ? sampled : greedy(40)));
    return ids;
  };
  {
    Harness h(100000, opts(64, 8));
    auto ids = workload(h);
    h.run();
    for (int i = 0; i < 6; ++i) want[i] = h.sinks[ids[size_t(i)]]->tokens();
    EXPECT_EQ(h.core->stats().preemptions_total, 0u);
  }
  // Tight: two sequences fit when admitted, not when grown, so the newest is preempted.
  const kv::KvSpec s = small_spec();
  Harness h(2 * s.fixed_blocks + 6, opts(64, 8), 700);
  auto ids = workload(h);
  h.run();
  EXPECT_GT(h.core->stats().preemptions_total, 0u);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(h.sinks[ids[size_t(i)]]->tokens(), want[i]) << "request " << i;
  EXPECT_EQ(h.core->scheduler().kv().used_blocks(), 0);
}

TEST(Scheduler, PrefixCacheServesAnExtendingPrompt) {
  Harness h(10000, opts(64, 4, 4));
  const uint64_t a = h.submit(ramp(40), greedy(8));
  h.run();
  const std::vector<int32_t> turn2 = next_turn(ramp(40), h.sinks[a]->tokens());
  const uint64_t b = h.submit(turn2, greedy(6));
  h.core->step();
  // 40 prompt + 7 fed outputs came from the snapshot; only the rest is computed.
  EXPECT_EQ(scheduled_tokens(*h.runner, b), int64_t(turn2.size()) - 47);
  h.run();
  const EngineStats st = h.core->stats();
  EXPECT_EQ(st.prefix_cache_hits, 1u);
  EXPECT_EQ(st.prefix_cache_hit_tokens, 47u);
  EXPECT_EQ(h.sinks[b]->events.back().usage.cached_tokens, 47);
  // Same tokens as without the cache.
  Harness cold(10000, opts(64, 4, 0));
  const uint64_t c = cold.submit(turn2, greedy(6));
  cold.run();
  EXPECT_EQ(h.sinks[b]->tokens(), cold.sinks[c]->tokens());
}

// A prompt that shares only a part of an earlier one (a system prompt, tool definitions, then
// something else) hits the earlier prompt's checkpoint at the last multiple of the
// granularity inside the shared part, and gives what a cold run gives.
TEST(Scheduler, PrefixCheckpointsServeAPromptThatDiverges) {
  Harness h(10000, opts(100, 4, 16, 32));
  const std::vector<int32_t> system = ramp(75);
  const uint64_t a = h.submit(concat(system, ramp(50, 4)), greedy(4));
  // Prefill chunks end at the checkpoints: 32, 64, 96, then the rest of the prompt.
  std::vector<int64_t> chunks;
  while (!h.sinks[a]->finished()) {
    h.core->step();
    h.check();
    chunks.push_back(scheduled_tokens(*h.runner, a));
  }
  ASSERT_EQ(chunks.size(), 7u) << ::testing::PrintToString(chunks) << h.sinks[a]->events.back().error.message;
  EXPECT_EQ(chunks[0], 32);
  EXPECT_EQ(chunks[1], 32);
  EXPECT_EQ(chunks[2], 32);
  EXPECT_EQ(chunks[3], 29);
  EXPECT_EQ(h.core->stats().prefix_cache_checkpoints, 3u);  // 32, 64, 96
  EXPECT_EQ(h.runner->checkpoints, 3);
  const std::vector<int32_t> b_prompt = concat(system, ramp(20, 3));
  const uint64_t b = h.submit(b_prompt, greedy(6));
  h.core->step();
  EXPECT_EQ(scheduled_tokens(*h.runner, b), int64_t(b_prompt.size()) - 64);
  h.run();
  EXPECT_EQ(h.sinks[b]->events.back().usage.cached_tokens, 64);
  // A prompt the same as the first up to its checkpoint at 96 and then longer.
  const uint64_t c = h.submit(concat(concat(system, ramp(50, 4)), ramp(3, 1)), greedy(2));
  h.run();
  EXPECT_GE(h.sinks[c]->events.back().usage.cached_tokens, 96);

  Harness cold(10000, opts(100, 4, 0));
  const uint64_t cb = cold.submit(b_prompt, greedy(6));
  cold.run();
  EXPECT_EQ(h.sinks[b]->tokens(), cold.sinks[cb]->tokens());
  // The same prompt computed from scratch (prompt logprobs need every row): its checkpoints
  // are found cached, not duplicated.
  SamplingParams with_rows = greedy(4);
  with_rows.prompt_logprobs = 0;
  const uint64_t a2 = h.submit(concat(system, ramp(50, 4)), with_rows);
  h.run();
  EXPECT_EQ(h.sinks[a2]->tokens(), h.sinks[a]->tokens());
  EXPECT_EQ(h.core->scheduler().counters().checkpoints_skipped, 3u);
  EXPECT_EQ(h.core->stats().prefix_cache_checkpoints, 3u);
}

// The chat case: the server marks where the assistant's answer begins; the next turn renders
// that answer differently (reasoning dropped) but hits up to the mark.
TEST(Scheduler, CachePointServesTheNextTurn) {
  Harness h(10000, opts(64, 4, 8));
  const std::vector<int32_t> turn1 = ramp(45);
  const uint64_t a = h.submit(turn1, greedy(5), {43});
  h.run();
  EXPECT_EQ(h.core->stats().prefix_cache_checkpoints, 1u);
  std::vector<int32_t> turn2(turn1.begin(), turn1.begin() + 43);
  for (int32_t t : {7, 7, 8, 9, 10, 11}) turn2.push_back(t);  // the answer as history, a new question
  const uint64_t b = h.submit(turn2, greedy(3), {int64_t(turn2.size()) - 1});
  h.core->step();
  EXPECT_EQ(scheduled_tokens(*h.runner, b), 5);  // from the hit at 43 to its own cache point
  h.run();
  EXPECT_EQ(h.sinks[b]->events.back().usage.cached_tokens, 43);
  EXPECT_EQ(h.sinks[a]->events.back().usage.cached_tokens, 0);
  // Cache points outside the prompt are ignored, not an error.
  const uint64_t c = h.submit(ramp(10, 5), greedy(2), {0, 10, 99, -3});
  h.run();
  EXPECT_EQ(h.sinks[c]->reason(), FinishReason::kLength);
}

// Several requests after one shared prefix (a system prompt, parallel agent calls): each
// forks the snapshot - full pages shared, the partly filled one copied - and the snapshot
// stays cached for the next one. Outputs equal a cold run.
TEST(Scheduler, PrefixForksServeConcurrentExtensions) {
  Harness h(10000, opts(256, 8, 4));
  const uint64_t a = h.submit(ramp(40), greedy(8));  // snapshot: 47 tokens = 2 full pages + 15
  h.run();
  ASSERT_EQ(h.core->scheduler().prefix_cache().size(), 1);
  std::vector<int32_t> prefix = ramp(40);
  for (int32_t t : h.sinks[a]->tokens()) prefix.push_back(t);
  std::vector<std::vector<int32_t>> prompts;
  std::vector<uint64_t> ids;
  for (int i = 0; i < 3; ++i) {
    prompts.push_back(prefix);
    for (int k = 0; k <= i; ++k) prompts.back().push_back(int32_t(3 + 5 * i + k));
    ids.push_back(h.submit(prompts.back(), greedy(6)));
  }
  h.core->step();
  h.check();
  EXPECT_EQ(h.runner->forks, 3);
  const auto& kv = h.core->scheduler().kv();
  const std::vector<kv::BlockId>& first = kv.pages(ids[0]);
  ASSERT_GE(first.size(), 3u);
  EXPECT_EQ(kv.ref_count(first[0]), 4);  // the snapshot and three forks
  EXPECT_EQ(kv.ref_count(first[1]), 4);
  EXPECT_EQ(kv.ref_count(first[2]), 1);  // the partly filled page was copied
  h.run();
  const EngineStats st = h.core->stats();
  EXPECT_EQ(st.prefix_cache_hits, 3u);
  EXPECT_EQ(st.prefix_cache_hit_tokens, 3u * 47u);
  for (int i = 0; i < 3; ++i) {
    Harness cold(10000, opts(256, 8, 0));
    const uint64_t c = cold.submit(prompts[size_t(i)], greedy(6));
    cold.run();
    EXPECT_EQ(h.sinks[ids[size_t(i)]]->tokens(), cold.sinks[c]->tokens()) << i;
    EXPECT_EQ(h.sinks[ids[size_t(i)]]->events.back().usage.cached_tokens, 47);
  }
  // The first snapshot is still cached (the three finished ones joined it, LRU bound 4).
  EXPECT_EQ(h.core->scheduler().prefix_cache().size(), 4);
  h.core->drop_prefix_cache();
  h.check();
  EXPECT_EQ(kv.used_blocks(), 0);
  EXPECT_TRUE(h.runner->snaps.empty());
}

// When the pool cannot spare a fork's fresh blocks, the snapshot is moved to the request
// (the old one-hit behaviour) rather than the request waiting or evicting its own hit.
TEST(Scheduler, PrefixHitMovesTheSnapshotWhenTooTightToFork) {
  const kv::KvSpec s = small_spec();
  Harness h(s.blocks_for(64) + 1, opts(256, 8, 4), 64);
  const uint64_t a = h.submit(ramp(40), greedy(8));
  h.run();
  std::vector<int32_t> turn2 = ramp(40);
  for (int32_t t : h.sinks[a]->tokens()) turn2.push_back(t);
  turn2.push_back(9);
  const uint64_t b = h.submit(turn2, greedy(4));
  h.run();
  EXPECT_EQ(h.runner->forks, 0);
  EXPECT_EQ(h.core->stats().prefix_cache_hits, 1u);
  EXPECT_EQ(h.sinks[b]->events.back().usage.cached_tokens, 47);
  Harness cold(10000, opts(256, 8, 0));
  const uint64_t c = cold.submit(turn2, greedy(4));
  cold.run();
  EXPECT_EQ(h.sinks[b]->tokens(), cold.sinks[c]->tokens());
}

TEST(Scheduler, CancelWaitingAndRunning) {
  Harness h(10000, opts(16, 2));
  const uint64_t a = h.submit(ramp(100), greedy(50));
  const uint64_t b = h.submit(ramp(10), greedy(50));
  const uint64_t c = h.submit(ramp(10), greedy(50));
  h.core->step();
  h.core->step();
  h.core->abort(a);  // running (mid-prefill)
  h.core->abort(c);  // waiting
  h.core->abort(777);
  h.check();
  EXPECT_EQ(h.sinks[a]->reason(), FinishReason::kAbort);
  EXPECT_EQ(h.sinks[c]->reason(), FinishReason::kAbort);
  h.run();
  EXPECT_EQ(h.sinks[b]->reason(), FinishReason::kLength);
  EXPECT_TRUE(h.runner->seqs.empty());
}

TEST(Scheduler, StopConditions) {
  Harness probe(10000, opts(64, 4));
  const uint64_t p = probe.submit(ramp(12), greedy(10));
  probe.run();
  const std::vector<int32_t> out = probe.sinks[p]->tokens();
  ASSERT_EQ(out.size(), 10u);

  Harness h(10000, opts(64, 4));
  SamplingParams stop_tok = greedy(10);
  stop_tok.stop_token_ids = {out[3]};
  SamplingParams stop_str = greedy(10);
  stop_str.stop = {"<" + std::to_string(out[4]) + "><" + std::to_string(out[5]) + ">"};  // spans two tokens
  SamplingParams eos = greedy(10);
  eos.ignore_eos = false;
  const uint64_t a = h.submit(ramp(12), stop_tok);
  const uint64_t b = h.submit(ramp(12), stop_str);
  Harness he(10000, opts(64, 4), 2048, out[2]);  // EOS = the third output token
  const uint64_t c = he.submit(ramp(12), eos);
  h.run();
  he.run();
  auto first = [&](size_t n) { return std::vector<int32_t>(out.begin(), out.begin() + long(n)); };
  EXPECT_EQ(h.sinks[a]->tokens(), first(4));
  EXPECT_EQ(h.sinks[a]->events.back().stop_token, out[3]);
  EXPECT_TRUE(h.sinks[a]->events.back().tokens.back().is_stop_token);
  EXPECT_EQ(h.sinks[b]->tokens(), first(6));
  EXPECT_EQ(h.sinks[b]->events.back().stop_string, stop_str.stop[0]);
  EXPECT_EQ(he.sinks[c]->tokens(), first(3));
  EXPECT_EQ(he.sinks[c]->reason(), FinishReason::kStop);
}

TEST(Scheduler, ValidationErrorsAreEventsNotCrashes) {
  Harness h(10000, opts(64, 4), 100);
  EXPECT_EQ(h.core->add(1, GenerateRequest{{}, greedy(1)}, std::make_shared<Collector>(), Clock::now()).code,
            ErrorCode::kInvalidRequest);
  EXPECT_EQ(h.core->add(2, GenerateRequest{ramp(100), greedy(1)}, std::make_shared<Collector>(), Clock::now()).code,
            ErrorCode::kContextLengthExceeded);
  EXPECT_EQ(h.core->add(3, GenerateRequest{ramp(50), greedy(60)}, std::make_shared<Collector>(), Clock::now()).code,
            ErrorCode::kContextLengthExceeded);
  EXPECT_EQ(h.core->add(4, GenerateRequest{{1, 64}, greedy(1)}, std::make_shared<Collector>(), Clock::now()).code,
            ErrorCode::kInvalidRequest);
  SamplingParams p = greedy(1);
  p.top_p = 1.5f;
  auto sink = std::make_shared<Collector>();
  EXPECT_EQ(h.core->add(5, GenerateRequest{{1, 2}, p}, sink, Clock::now()).param, "top_p");
  ASSERT_TRUE(sink->finished());
  EXPECT_EQ(sink->reason(), FinishReason::kError);
  EXPECT_FALSE(h.core->has_work());
  // No max_tokens: generation stops at the context length.
  SamplingParams open = greedy(1);
  open.max_tokens = -1;
  const uint64_t id = h.submit(ramp(90), open);
  h.run();
  EXPECT_EQ(h.sinks[id]->tokens().size(), 10u);
  EXPECT_EQ(h.sinks[id]->reason(), FinishReason::kLength);
}

// Random submissions, cancellations and memory pressure. After every step: KV integrity
// (free + used == total, tables match computed tokens), ordering, and the oldest running
// request was scheduled (nobody starves). At the end every request has finished.
// The fake runner keeps every token in its simulated pages and throws if a page is written
// while another table holds it or loses its contents, so this also checks the page tables.
// At the end, dropping the snapshots returns the pool to fully free.
TEST(Scheduler, PropertyRandomWorkloads) {
  uint64_t hits = 0, preemptions = 0;
  int64_t forks = 0, checkpoints = 0;
  for (uint32_t seed = 1; seed <= 12; ++seed) {
    std::mt19937 rng(seed);
    const int64_t T = seed % 3 == 0 ? 4 : seed % 3 == 1 ? 16 : 20;
    const kv::KvSpec s = small_spec(T);
    const int64_t max_len = 400;
    const int64_t n_blocks = s.blocks_for(max_len) + int64_t(rng() % 60) * 16 / T;
    // Checkpoints every few blocks, or only at the requests' cache points.
    const int64_t granularity = T * int64_t(rng() % 4);
    SchedulerOptions so = opts(24 + int64_t(rng() % 100), 1 + int64_t(rng() % 8), int64_t(rng() % 8), granularity);
    // Long prefills one or two at a time, or unlimited (from the seed: the draws stay as they were).
    so.max_long_partial_prefills = int64_t(seed % 3);
    so.long_prefill_token_threshold = 8 + 16 * int64_t(seed % 4);
    Harness h(n_blocks, so, max_len, 1, T);
    std::vector<uint64_t> live;
    std::map<uint64_t, std::vector<int32_t>> prompts;
    std::vector<std::vector<int32_t>> finished_tokens;  // prompt + output of finished requests
    int submitted = 0;
    for (int it = 0; it < 400 || h.core->has_work(); ++it) {
      ASSERT_LT(it, 20000) << "seed " << seed << ": no progress";
      if (it < 400 && rng() % 3 == 0) {
        std::vector<int32_t> prompt;
        if (!finished_tokens.empty() && rng() % 2) prompt = finished_tokens[rng() % finished_tokens.size()];
        const int64_t extra = 1 + int64_t(rng() % 120);
        for (int64_t i = 0; i < extra; ++i) prompt.push_back(int32_t(rng() % Harness::kVocab));
        SamplingParams p = greedy(1 + int64_t(rng() % 40));
        if (int64_t(prompt.size()) + p.max_tokens > max_len) prompt.erase(prompt.begin(), prompt.end() - extra);
        if (rng() % 2) {
          p.temperature = 1.0f;
          p.seed = rng();
        }
        std::vector<int64_t> points;
        if (rng() % 2) points.push_back(int64_t(rng() % prompt.size()));
        const uint64_t id = h.submit(prompt, p, points);
        prompts[id] = prompt;
        live.push_back(id);
        ++submitted;
      }
      if (!live.empty() && rng() % 17 == 0) h.core->abort(live[rng() % live.size()]);
      const auto& running = h.core->scheduler().running();
      const uint64_t oldest = running.empty() ? 0 : running.front()->id;
      h.core->step();
      if (oldest) {
        ASSERT_GT(scheduled_tokens(*h.runner, oldest), 0) << "seed " << seed << ": oldest request starved";
      }
      h.check();
      for (auto i = live.begin(); i != live.end();) {
        if (h.sinks[*i]->finished()) {
          std::vector<int32_t> all = prompts[*i];
          for (int32_t t : h.sinks[*i]->tokens()) all.push_back(t);
          finished_tokens.push_back(all);
          i = live.erase(i);
        } else {
          ++i;
        }
      }
    }
    for (const auto& [id, sink] : h.sinks) {
      ASSERT_TRUE(sink->finished()) << "seed " << seed << " request " << id;
      EXPECT_NE(sink->reason(), FinishReason::kError);
    }
    EXPECT_EQ(h.core->scheduler().kv().used_blocks(), h.core->scheduler().cached_blocks());
    EXPECT_EQ(int64_t(h.runner->seqs.size()), 0);
    EXPECT_EQ(int64_t(h.runner->snaps.size()), h.core->scheduler().prefix_cache().size());
    EXPECT_GT(submitted, 50);
    hits += h.core->stats().prefix_cache_hits;
    preemptions += h.core->stats().preemptions_total;
    forks += h.runner->forks;
    checkpoints += h.runner->checkpoints;
    h.core->drop_prefix_cache();
    h.check();
    EXPECT_EQ(h.core->scheduler().kv().free_blocks(), n_blocks);
    EXPECT_TRUE(h.runner->snaps.empty());
  }
  EXPECT_GT(hits, 0u);
  EXPECT_GT(forks, 0);
  EXPECT_GT(checkpoints, 0);
  EXPECT_GT(preemptions, 0u);
}
