// EngineCore over a FakeRunner, driven step by step from the test thread.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/engine_core.h"
#include "fake_runner.h"

namespace deepinfer::engine::testing {

struct Collector final : EventSink {
  std::vector<StreamEvent> events;
  void push(StreamEvent&& e) override { events.push_back(std::move(e)); }
  bool finished() const { return !events.empty() && events.back().finished; }
  FinishReason reason() const { return finished() ? events.back().finish_reason : FinishReason::kNone; }
  std::vector<int32_t> tokens() const {
    std::vector<int32_t> out;
    for (const auto& e : events)
      for (const auto& t : e.tokens) out.push_back(t.token);
    return out;
  }
};

// A small layout with every layer kind: window 4, head 8, indexer 8, ratios 0 / 4 / 128.
inline kv::KvSpec small_spec(int64_t block_tokens = 16) {
  kv::KvLayout l;
  l.window_tokens = 4;
  l.head_dim = 8;
  l.index_head_dim = 8;
  l.layer_ratios = {0, 4, 128};
  return kv::KvSpec::make(l, block_tokens);
}

struct Harness {
  static constexpr int64_t kVocab = 64;
  FakeRunner* runner = nullptr;
  std::unique_ptr<EngineCore> core;
  std::map<uint64_t, std::shared_ptr<Collector>> sinks;
  uint64_t next_id = 1;

  Harness(int64_t n_blocks, SchedulerOptions so, int64_t max_model_len = 2048, int32_t eos = 1,
          int64_t block_tokens = 16) {
    EngineCoreOptions o;
    o.max_model_len = max_model_len;
    o.eos_token_id = eos;
    o.scheduler = so;
    o.token_text = [](int32_t t) { return "<" + std::to_string(t) + ">"; };
    auto r = std::make_unique<FakeRunner>(kVocab);
    runner = r.get();
    core = std::make_unique<EngineCore>(o, small_spec(block_tokens), n_blocks, std::move(r));
  }

  uint64_t submit(std::vector<int32_t> prompt, SamplingParams p, std::vector<int64_t> cache_points = {}) {
    const uint64_t id = next_id++;
    sinks[id] = std::make_shared<Collector>();
    core->add(id, GenerateRequest{std::move(prompt), std::move(p), std::move(cache_points)}, sinks[id], Clock::now());
    return id;
  }

  void check() const {
    std::string why;
    ASSERT_TRUE(core->scheduler().check_integrity(&why)) << why;
  }

  // Steps until nothing is left; fails the test if that takes more than max_steps.
  void run(int64_t max_steps = 100000) {
    int64_t n = 0;
    while (core->has_work()) {
      ASSERT_LT(n++, max_steps) << "engine did not drain";
      core->step();
      check();
    }
  }
};

// Largest difference between two runs' logits rows (expects as many rows).
inline float max_abs_diff(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b) {
  EXPECT_EQ(a.size(), b.size());
  float m = 0.0f;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i)
    for (size_t j = 0; j < a[i].size(); ++j) m = std::max(m, std::fabs(a[i][j] - b[i][j]));
  return m;
}

inline SamplingParams greedy(int64_t max_tokens) {
  SamplingParams p;
  p.temperature = 0.0f;
  p.max_tokens = max_tokens;
  p.ignore_eos = true;
  return p;
}

inline std::vector<int32_t> ramp(int64_t n, int32_t start = 2) {
  std::vector<int32_t> v;
  for (int64_t i = 0; i < n; ++i) v.push_back(int32_t(start + i * 7 % 60));
  return v;
}

}  // namespace deepinfer::engine::testing
