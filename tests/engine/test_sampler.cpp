// The sampler: seeded reproducibility, the min_p / top_k / top_p masks, penalties, logit
// bias, and logprobs that are a proper log-distribution of what was sampled from.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>
#include <set>

#include "engine/sampler.h"

using namespace deepinfer;
using namespace deepinfer::engine;

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// log of a probability vector: logits whose softmax is exactly p.
std::vector<float> logits_of(const std::vector<double>& p) {
  std::vector<float> x;
  for (double v : p) x.push_back(float(std::log(v)));
  return x;
}

SamplingParams sampled(float t = 1.0f) {
  SamplingParams p;
  p.temperature = t;
  p.logprobs = 5;
  return p;
}

std::set<int32_t> support(Sampler& s, const std::vector<float>& x, const SamplingParams& p, int draws = 2000) {
  Rng rng(99);
  PenaltyState h;
  std::set<int32_t> seen;
  for (int i = 0; i < draws; ++i) seen.insert(s.sample(x.data(), p, h, rng).token);
  return seen;
}

}  // namespace

TEST(Sampler, SeededDrawsRepeatAndSeedsDiffer) {
  std::vector<float> x(257);
  for (size_t i = 0; i < x.size(); ++i) x[i] = float(std::sin(double(i) * 0.37)) * 3.0f;
  Sampler s(257);
  PenaltyState h;
  auto run = [&](uint64_t seed) {
    Rng rng(seed);
    std::vector<int32_t> out;
    for (int i = 0; i < 64; ++i) out.push_back(s.sample(x.data(), sampled(), h, rng).token);
    return out;
  };
  EXPECT_EQ(run(42), run(42));
  EXPECT_NE(run(42), run(43));
}

TEST(Sampler, GreedyIsArgmaxWithTiesToLowestId) {
  Sampler s(6);
  std::vector<float> x{0.5f, 2.0f, -1.0f, 2.0f, 1.0f, NAN};
  SamplingParams p;
  p.temperature = 0.0f;
  Rng rng(1);
  PenaltyState h;
  EXPECT_EQ(s.sample(x.data(), p, h, rng).token, 1);
}

TEST(Sampler, FrequenciesFollowTheDistribution) {
  const std::vector<double> p{0.5, 0.25, 0.125, 0.125};
  const auto x = logits_of(p);
  Sampler s(4);
  Rng rng(5);
  PenaltyState h;
  std::map<int32_t, int> count;
  const int n = 40000;
  for (int i = 0; i < n; ++i) ++count[s.sample(x.data(), sampled(), h, rng).token];
  for (int t = 0; t < 4; ++t) EXPECT_NEAR(double(count[t]) / n, p[size_t(t)], 0.01) << t;
}

TEST(Sampler, TopKTopPMinPMasks) {
  const std::vector<double> p{0.05, 0.4, 0.3, 0.15, 0.1};
  const auto x = logits_of(p);
  Sampler s(5);
  SamplingParams k2 = sampled();
  k2.top_k = 2;
  EXPECT_EQ(support(s, x, k2), (std::set<int32_t>{1, 2}));
  SamplingParams p70 = sampled();
  p70.top_p = 0.69f;  // 0.4 + 0.3 reaches 0.69
  EXPECT_EQ(support(s, x, p70), (std::set<int32_t>{1, 2}));
  SamplingParams p71 = sampled();
  p71.top_p = 0.71f;
  EXPECT_EQ(support(s, x, p71), (std::set<int32_t>{1, 2, 3}));
  SamplingParams m = sampled();
  m.min_p = 0.3f;  // keeps p >= 0.12
  EXPECT_EQ(support(s, x, m), (std::set<int32_t>{1, 2, 3}));
  SamplingParams k1 = sampled(0.7f);
  k1.top_k = 1;
  EXPECT_EQ(support(s, x, k1), (std::set<int32_t>{1}));
  // Masked tokens get -inf logprobs; what is left is renormalised.
  Rng rng(3);
  PenaltyState h;
  SampleResult r = s.sample(x.data(), p70, h, rng);
  const auto lp = s.last_logprobs();
  EXPECT_EQ(lp[0], kNegInf);
  EXPECT_EQ(lp[3], kNegInf);
  EXPECT_NEAR(std::exp(lp[1]), 0.4 / 0.7, 1e-6);
  EXPECT_FLOAT_EQ(r.logprob, lp[size_t(r.token)]);
}

TEST(Sampler, LogprobsAreALogDistributionAfterTemperature) {
  std::vector<float> x(1000);
  for (size_t i = 0; i < x.size(); ++i) x[i] = float(std::cos(double(i) * 1.3)) * 4.0f;
  Sampler s(1000);
  PenaltyState h;
  for (float t : {0.0f, 0.5f, 1.0f, 2.0f}) {
    SamplingParams p = sampled(t);
    p.top_p = t == 2.0f ? 0.9f : 1.0f;
    Rng rng(11);
    SampleResult r = s.sample(x.data(), p, h, rng);
    const auto lp = s.last_logprobs();
    double sum = 0.0;
    for (float v : lp) sum += std::exp(double(v));
    EXPECT_NEAR(sum, 1.0, 1e-5) << "temperature " << t;
    EXPECT_FLOAT_EQ(r.logprob, lp[size_t(r.token)]);
    ASSERT_EQ(r.top.size(), 5u);
    for (size_t i = 1; i < r.top.size(); ++i) EXPECT_GE(r.top[i - 1].logprob, r.top[i].logprob);
    EXPECT_FLOAT_EQ(r.top[0].logprob, *std::max_element(lp.begin(), lp.end()));
    if (t > 0.0f && p.top_p == 1.0f) {
      // The log-softmax of logits / t, where nothing is masked.
      const int32_t best = r.top[0].token;
      double z = 0.0;
      for (float v : x) z += std::exp(double(v) / t - double(x[size_t(best)]) / t);
      EXPECT_NEAR(r.top[0].logprob, -std::log(z), 1e-4);
    }
  }
}

TEST(Sampler, PenaltiesAndBias) {
  Sampler s(4);
  std::vector<float> x{2.0f, 1.0f, -1.0f, 0.5f};
  SamplingParams p;
  p.temperature = 0.0f;
  p.logprobs = 0;
  Rng rng(1);
  PenaltyState h;
  h.prompt_tokens = {2};
  h.output_counts = {{0, 3}, {1, 1}};
  p.frequency_penalty = 0.5f;  // token 0: 2 - 1.5 = 0.5; token 1: 1 - 0.5 = 0.5
  p.presence_penalty = 0.25f;  // token 0: 0.25; token 1: 0.25
  s.sample(x.data(), p, h, rng);
  auto lp = s.last_logprobs();
  EXPECT_NEAR(lp[0] - lp[3], 0.25f - 0.5f, 1e-6);
  EXPECT_NEAR(lp[1] - lp[3], 0.25f - 0.5f, 1e-6);
  EXPECT_NEAR(lp[2] - lp[3], -1.0f - 0.5f, 1e-6);  // prompt tokens are not frequency-penalised
  SamplingParams r = p;
  r.frequency_penalty = r.presence_penalty = 0.0f;
  r.repetition_penalty = 2.0f;  // positive logits halved, negative doubled (prompt and output)
  s.sample(x.data(), r, h, rng);
  lp = s.last_logprobs();
  EXPECT_NEAR(lp[0] - lp[3], 1.0f - 0.5f, 1e-6);
  EXPECT_NEAR(lp[1] - lp[3], 0.5f - 0.5f, 1e-6);
  EXPECT_NEAR(lp[2] - lp[3], -2.0f - 0.5f, 1e-6);
  SamplingParams b;
  b.temperature = 0.0f;
  b.logit_bias = {{2, 100.0f}};
  EXPECT_EQ(s.sample(x.data(), b, PenaltyState{}, rng).token, 2);
}

TEST(SamplingParams, Validation) {
  SamplingParams p;
  EXPECT_TRUE(p.validate(10).ok());
  auto bad = [](auto mutate) {
    SamplingParams q;
    mutate(q);
    return q.validate(10).param;
  };
  EXPECT_EQ(bad([](SamplingParams& q) { q.max_tokens = -2; }), "max_tokens");
  EXPECT_EQ(bad([](SamplingParams& q) { q.prompt_logprobs = 21; }), "prompt_logprobs");
  EXPECT_EQ(bad([](SamplingParams& q) { q.prompt_logprobs = -2; }), "prompt_logprobs");
  EXPECT_EQ(bad([](SamplingParams& q) { q.max_tokens = -5; }), "max_tokens");
  EXPECT_EQ(bad([](SamplingParams& q) { q.top_p = 1.01f; }), "top_p");
  EXPECT_EQ(bad([](SamplingParams& q) { q.top_p = 0.0f; }), "top_p");
  EXPECT_EQ(bad([](SamplingParams& q) { q.temperature = -1.0f; }), "temperature");
  EXPECT_EQ(bad([](SamplingParams& q) { q.top_k = -2; }), "top_k");
  EXPECT_EQ(bad([](SamplingParams& q) { q.min_p = 2.0f; }), "min_p");
  EXPECT_EQ(bad([](SamplingParams& q) { q.presence_penalty = 3.0f; }), "presence_penalty");
  EXPECT_EQ(bad([](SamplingParams& q) { q.repetition_penalty = 0.0f; }), "repetition_penalty");
  EXPECT_EQ(bad([](SamplingParams& q) { q.logit_bias = {{10, 1.0f}}; }), "logit_bias");
  EXPECT_EQ(bad([](SamplingParams& q) { q.logit_bias = {{1, 101.0f}}; }), "logit_bias");
  EXPECT_EQ(bad([](SamplingParams& q) { q.stop_token_ids = {-1}; }), "stop_token_ids");
  EXPECT_EQ(bad([](SamplingParams& q) { q.logprobs = 21; }), "logprobs");
}
