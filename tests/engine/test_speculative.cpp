// Speculative decoding through the engine (EngineCore + ModelRunner on tiny-v4-c, which has an
// MTP module): greedy output and logits are those of plain decoding, alone and in a busy
// batch, with the MTP drafter, with drafts that are all accepted (the true continuation),
// with drafts rejected at chosen places, and through preemption and prefix-cache reuse; the
// KV tables stay consistent every step. Also the adaptive draft length (DraftPolicy) and the
// sampler's rejection rule (the accepted tokens follow the target distribution exactly).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>

#include "deepinfer/engine.h"
#include "engine/draft_policy.h"
#include "engine/engine_core.h"
#include "engine/model_runner.h"
#include "model/deepseek_v4/config.h"
#include "harness.h"

using namespace deepinfer;
using namespace deepinfer::engine;
using namespace deepinfer::engine::testing;

namespace {

// A shared golden set's checkpoint, or one that setup generates into models/golden (tiny-0731).
std::string model_dir(const char* set = "tiny-v4-c") {
  const std::string shared = std::string(DI_SHARED_DIR) + "/golden/" + set + "/model";
  return std::filesystem::exists(shared) ? shared : std::string(DI_GOLDEN_MODELS_DIR) + "/" + set + "/model";
}

std::vector<int32_t> prompt(int64_t n, int32_t salt) {
  std::vector<int32_t> v{0};
  for (int64_t i = 1; i < n; ++i) v.push_back(int32_t((i * 37 + salt * 101) % 1000 + 3));
  return v;
}

// The model runner, with the drafts replaced where a test says so: the continuation it is
// given (so every draft is right), with every `wrong_every`-th draft position made wrong.
class ScriptedDrafts final : public Runner {
 public:
  explicit ScriptedDrafts(std::unique_ptr<ModelRunner> inner) : inner_(std::move(inner)) {}
  std::map<int64_t, std::vector<int32_t>> oracle;  // prompt length -> full token sequence
  int64_t wrong_every = 0;                          // 0: never
  bool use_model = false;                           // draft with the MTP module instead
  int64_t calls = 0;                                // draft() calls

  int64_t vocab_size() const override { return inner_->vocab_size(); }
  void bind_kv(const kv::KvSpec& spec, int64_t n) override { inner_->bind_kv(spec, n); }
  void run(const std::vector<ScheduledChunk>& c, std::vector<float>& rows) override { inner_->run(c, rows); }
  void apply(const StateOp& op) override { inner_->apply(op); }
  int64_t max_draft_tokens() const override { return inner_->max_draft_tokens(); }
  std::vector<int32_t> draft(uint64_t seq, std::span<const int32_t> tokens, int64_t k) override {
    ++calls;
    std::vector<int32_t> model = inner_->draft(seq, tokens, k);  // keeps the drafter's state moving
    if (use_model) return model;
    std::vector<int32_t> out;
    for (const auto& [len, full] : oracle) {
      if (int64_t(full.size()) <= int64_t(tokens.size()) || !std::equal(tokens.begin(), tokens.end(), full.begin()))
        continue;
      for (int64_t i = 0; i < k && tokens.size() + size_t(i) < full.size(); ++i) {
        const size_t pos = tokens.size() + size_t(i);
        int32_t t = full[pos];
        if (wrong_every > 0 && int64_t(pos) % wrong_every == 0) t = (t + 1) % int32_t(vocab_size());
        out.push_back(t);
      }
      break;
    }
    return out;
  }
  // Each prompt's true continuation.
  void set_oracle(const std::vector<std::vector<int32_t>>& prompts, const std::vector<std::vector<int32_t>>& outputs) {
    for (size_t i = 0; i < prompts.size(); ++i) {
      std::vector<int32_t> full = prompts[i];
      full.insert(full.end(), outputs[i].begin(), outputs[i].end());
      oracle[int64_t(prompts[i].size())] = full;
    }
  }

 private:
  std::unique_ptr<ModelRunner> inner_;
};

struct SpecCore {
  std::unique_ptr<EngineCore> core;
  ScriptedDrafts* runner = nullptr;
  std::map<uint64_t, std::shared_ptr<Collector>> sinks;
  std::map<uint64_t, std::vector<std::vector<float>>> rows;
  uint64_t next_id = 1;

  // set: tiny-v4-c drafts with its MTP module, tiny-v41-a with its DSpark stages.
  SpecCore(int64_t drafts, int64_t budget = 512, int64_t n_blocks = 4000, int64_t cache = 0, const char* numerics = "reference",
           const char* kernels = "cpu", const char* set = "tiny-v4-c", bool adaptive = false) {
    auto mr = std::make_unique<ModelRunner>(v4::Model::load(model_dir(set)), 1, numerics, kernels);
    if (drafts > 0) mr->enable_drafting(mr->model().drafter() == v4::Model::Drafter::kDspark ? "dspark" : "mtp");
    const kv::KvSpec spec = kv::KvSpec::make(kv_layout_of(mr->model().config()), 64);
    auto owned = std::make_unique<ScriptedDrafts>(std::move(mr));
    runner = owned.get();
    EngineCoreOptions o;
    o.max_model_len = 1024;
    o.eos_token_id = 1;
    o.scheduler.max_batch_tokens = budget;
    o.scheduler.max_running = 8;
    o.scheduler.prefix_cache_entries = cache;
    o.num_draft_tokens = drafts;
    o.adaptive_drafts = adaptive;
    o.measure_draft_costs = false;  // draft lengths from acceptance alone: the tests count drafts
    core = std::make_unique<EngineCore>(o, spec, n_blocks, std::move(owned));
    core->on_logits = [this](uint64_t id, int64_t, const float* row) { rows[id].emplace_back(row, row + 1024); };
  }
  uint64_t submit(std::vector<int32_t> p, SamplingParams sp) {
    const uint64_t id = next_id++;
    sinks[id] = std::make_shared<Collector>();
    core->add(id, GenerateRequest{std::move(p), sp, {}}, sinks[id], Clock::now());
    return id;
  }
  void run() {
    int64_t steps = 0;
    while (core->has_work()) {
      ASSERT_LT(steps++, 100000);
      core->step();
      std::string why;
      ASSERT_TRUE(core->scheduler().check_integrity(&why)) << why;
    }
  }
};

SamplingParams greedy_n(int64_t n) {
  SamplingParams p = greedy(n);
  p.ignore_eos = true;
  return p;
}

// Plain decoding of these prompts, one request each: tokens and logits rows.
struct Plain {
  std::vector<std::vector<int32_t>> tokens;
  std::vector<std::vector<std::vector<float>>> rows;
};
Plain plain_run(const std::vector<std::vector<int32_t>>& prompts, int64_t n, const char* numerics = "reference",
                const char* kernels = "cpu", const char* set = "tiny-v4-c", bool adaptive = false) {
  SpecCore c(0, 512, 4000, 0, numerics, kernels, set);
  std::vector<uint64_t> ids;
  for (const auto& p : prompts) ids.push_back(c.submit(p, greedy_n(n)));
  c.run();
  Plain out;
  for (uint64_t id : ids) {
    out.tokens.push_back(c.sinks[id]->tokens());
    out.rows.push_back(c.rows[id]);
  }
  return out;
}

// Each request's tokens are plain decoding's, its logits bit-identical with ref kernels and
// within 1e-5 with cpu kernels.
void expect_plain_outputs(SpecCore& c, const std::vector<uint64_t>& ids, const Plain& plain, const std::string& kernels) {
  for (size_t i = 0; i < ids.size(); ++i) {
    EXPECT_EQ(c.sinks[ids[i]]->tokens(), plain.tokens[i]);
    if (kernels == "ref")
      EXPECT_EQ(max_abs_diff(c.rows[ids[i]], plain.rows[i]), 0.0f);
    else
      EXPECT_LE(max_abs_diff(c.rows[ids[i]], plain.rows[i]), 1e-5f);
  }
}

}  // namespace

// Drafts from the MTP module (random weights: mostly rejected), fixed at 3 per step, and from
// the true continuation with every 4th / 2nd / no position wrong: the same greedy tokens and
// logits as plain decoding, for prompts alone and together in one batch.
TEST(Speculative, GreedyOutputIsPlainDecodingWhateverTheDrafts) {
  const std::vector<std::vector<int32_t>> prompts = {prompt(40, 1), prompt(9, 2), prompt(71, 3)};
  const int64_t n = 30;
  struct Case {
    const char* kernels;
    int64_t wrong, k;
  };
  const Case cases[] = {{"cpu", -1, 3}, {"cpu", 0, 3}, {"cpu", 2, 3}, {"cpu", 4, 1}, {"cpu", 4, 7}, {"ref", 4, 3}};
  for (const char* kn : {"cpu", "ref"}) {
    const Plain plain = plain_run(prompts, n, "reference", kn);
    for (const Case& cs : cases) {
      if (std::string(cs.kernels) != kn) continue;
      const int64_t wrong = cs.wrong, k = cs.k;
      {
        SCOPED_TRACE(std::string(kn) + " wrong_every " + std::to_string(wrong) + " k " + std::to_string(k));
        SpecCore c(k, 512, 4000, 0, "reference", kn);
        c.runner->use_model = wrong < 0;
        c.runner->wrong_every = std::max<int64_t>(wrong, 0);
        c.runner->set_oracle(prompts, plain.tokens);
        std::vector<uint64_t> ids;
        for (const auto& p : prompts) ids.push_back(c.submit(p, greedy_n(n)));
        c.run();
        const EngineStats s = c.core->stats();
        EXPECT_GT(s.spec_verify_steps, 0u);
        if (wrong == 0) {
          EXPECT_EQ(s.spec_accepted_tokens, s.spec_draft_tokens);
        }
        if (wrong > 0) {
          EXPECT_GT(s.spec_accepted_tokens, 0u);
          EXPECT_LT(s.spec_accepted_tokens, s.spec_draft_tokens);
        }
        expect_plain_outputs(c, ids, plain, kn);
        for (size_t i = 0; i < ids.size(); ++i) {
          const Usage u = c.sinks[ids[i]]->events.back().usage;
          EXPECT_EQ(u.completion_tokens, n);
          EXPECT_LE(u.accepted_draft_tokens, u.draft_tokens);
        }
        if (wrong == 0) {  // every step verifies k drafts and keeps them all: fewer forwards
          EXPECT_LT(s.steps_total, uint64_t(n));
        }
      }
    }
  }
}

// A constraint whose mask depends on every token accepted so far: t is allowed while
// (t + the sum of the accepted tokens) % 3 != 0. Fed a draft that verification then rejects,
// its state would drift from the output and later masks would differ.
class RunningSumConstraint final : public TokenConstraint {
 public:
  std::vector<int32_t> accepted;
  bool allowed(uint64_t* mask, int64_t vocab) override {
    for (int64_t t = 0; t < vocab; ++t)
      if ((t + sum_) % 3 != 0) mask[t >> 6] |= uint64_t(1) << (t & 63);
    return true;
  }
  void accept(int32_t token) override {
    accepted.push_back(token);
    sum_ += token;
  }

 private:
  int64_t sum_ = 0;
};

// A constrained request (tool calls under tool_choice "auto" carry one from their start)
// drafts too: verification samples its positions in order through the mask of the tokens
// before it and stops at the first miss, so the constraint sees exactly the output. The same
// tokens as plain constrained decoding, with drafts that are right, wrong every 2nd position,
// or the MTP module's.
TEST(Speculative, ConstrainedRequestsDraftAndKeepPlainTokens) {
  const std::vector<int32_t> p = prompt(33, 5);
  const int64_t n = 24;
  std::vector<int32_t> plain_tokens;
  {
    SpecCore c(0);
    SamplingParams sp = greedy_n(n);
    auto con = std::make_shared<RunningSumConstraint>();
    sp.constraint = con;
    const uint64_t id = c.submit(p, sp);
    c.run();
    plain_tokens = c.sinks[id]->tokens();
    ASSERT_EQ(int64_t(plain_tokens.size()), n);
    EXPECT_EQ(con->accepted, plain_tokens);
  }
  for (int64_t wrong : {-1, 0, 2}) {
    SCOPED_TRACE("wrong_every " + std::to_string(wrong));
    SpecCore c(3);
    c.runner->use_model = wrong < 0;
    c.runner->wrong_every = std::max<int64_t>(wrong, 0);
    c.runner->set_oracle({p}, {plain_tokens});
    SamplingParams sp = greedy_n(n);
    auto con = std::make_shared<RunningSumConstraint>();
    sp.constraint = con;
    const uint64_t id = c.submit(p, sp);
    c.run();
    EXPECT_EQ(c.sinks[id]->tokens(), plain_tokens);
    EXPECT_EQ(con->accepted, plain_tokens);
    const EngineStats s = c.core->stats();
    EXPECT_GT(s.spec_draft_tokens, 0u);
    if (wrong == 0) EXPECT_EQ(s.spec_accepted_tokens, s.spec_draft_tokens);
    if (wrong > 0) EXPECT_LT(s.spec_accepted_tokens, s.spec_draft_tokens);
  }
}

// The DSpark drafters: DeepSeek-V4.1's (tiny-v41-a: blocks of 3; Engram history, ratio-2
// groups and shared top-k runtime all undone on rejection) and the V4-Flash-0731 layout's
// (tiny-0731: three stages of ordinary V4 blocks, blocks of 5, taps after layers 3-5; CSA and
// HCA compressor state undone on rejection). Their drafts, and the true continuation with
// every 2nd position wrong, give plain decoding's tokens and logits, alone and batched, in
// both numerics; ref kernels bit for bit.
TEST(Speculative, DsparkGreedyOutputIsPlainDecoding) {
  struct Set {
    const char* name;
    int64_t block;
  };
  for (const Set set : {Set{"tiny-v41-a", 3}, Set{"tiny-0731", 5}}) {
    const std::vector<std::vector<int32_t>> prompts = {prompt(33, 4), prompt(6, 5), prompt(58, 6)};
    const int64_t n = 24;
    for (const char* numerics : {"reference", "float"})
      for (const char* kn : {"cpu", "ref"}) {
        const Plain plain = plain_run(prompts, n, numerics, kn, set.name);
        for (int64_t wrong : {-1, 2, 0}) {
          SCOPED_TRACE(std::string(set.name) + " " + numerics + " " + kn + " wrong_every " + std::to_string(wrong));
          SpecCore c(set.block, 512, 4000, 0, numerics, kn, set.name);
          ASSERT_EQ(c.runner->max_draft_tokens(), set.block);
          c.runner->use_model = wrong < 0;
          c.runner->wrong_every = std::max<int64_t>(wrong, 0);
          c.runner->set_oracle(prompts, plain.tokens);
          std::vector<uint64_t> ids;
          for (const auto& p : prompts) ids.push_back(c.submit(p, greedy_n(n)));
          c.run();
          const EngineStats s = c.core->stats();
          EXPECT_GT(s.spec_verify_steps, 0u);
          if (wrong == 0) {
            EXPECT_EQ(s.spec_accepted_tokens, s.spec_draft_tokens);
          }
          expect_plain_outputs(c, ids, plain, kn);
        }
      }
  }
}

// Speculation with a KV pool so small that requests are preempted and recompute, and with the
// prefix cache on (finished sequences, whose last chunk was a verify, become snapshots that
// later requests fork): still plain decoding's tokens.
TEST(Speculative, PreemptionAndPrefixReuseKeepPlainTokens) {
  // tiny-v4-c drafts with MTP, tiny-0731 with its DSpark stages (the V4 refresh layout).
  for (const char* set : {"tiny-v4-c", "tiny-0731"}) {
    SCOPED_TRACE(set);
    std::vector<std::vector<int32_t>> prompts;
    for (int i = 0; i < 4; ++i) prompts.push_back(prompt(50 + 4 * i, i + 10));
    const int64_t n = 40;
    const Plain plain = plain_run(prompts, n, "reference", "cpu", set);
    const v4::Config cfg = v4::load_config(model_dir(set) + "/config.json");
    const int64_t fixed = kv::KvSpec::make(kv_layout_of(cfg), 64).fixed_blocks;
    SpecCore c(3, 128, 2 * fixed + 2, 2, "reference", "cpu", set);  // two admitted, not both grown past 64 tokens
    c.runner->wrong_every = 3;
    c.runner->set_oracle(prompts, plain.tokens);
    std::vector<uint64_t> ids;
    for (const auto& p : prompts) ids.push_back(c.submit(p, greedy_n(n)));
    c.run();
    EXPECT_GT(c.core->stats().preemptions_total, 0u);
    for (size_t i = 0; i < ids.size(); ++i) EXPECT_EQ(c.sinks[ids[i]]->tokens(), plain.tokens[i]);

    // A follow-up that extends a finished sequence (its last chunk a verify with rejections)
    // hits its snapshot and matches a cold run.
    SpecCore roomy(3, 512, 4000, 16, "reference", "cpu", set);
    roomy.runner->wrong_every = 3;
    std::vector<int32_t> full = prompts[0];
    full.insert(full.end(), plain.tokens[0].begin(), plain.tokens[0].end());
    roomy.runner->oracle[int64_t(prompts[0].size())] = full;
    roomy.submit(prompts[0], greedy_n(n));
    roomy.run();
    std::vector<int32_t> follow = full;
    follow.push_back(7);
    const Plain cold = plain_run({follow}, 12, "reference", "cpu", set);
    const uint64_t f = roomy.submit(follow, greedy_n(12));
    roomy.run();
    EXPECT_EQ(roomy.sinks[f]->tokens(), cold.tokens[0]);
    EXPECT_GT(roomy.core->stats().prefix_cache_hits, 0u);
  }
}

// Sampled requests speculate too: a seeded request gives the tokens plain decoding gives
// (whatever was drafted, so whatever other requests taught the draft policy), stops at
// max_tokens exactly, and stop tokens inside accepted drafts end it there.
TEST(Speculative, SampledAndStoppedRequests) {
  const auto p = prompt(30, 9);
  const Plain plain = plain_run({p}, 20);
  SamplingParams sp;
  sp.temperature = 0.8f;
  sp.top_k = 20;
  sp.seed = 11;
  sp.max_tokens = 17;
  sp.ignore_eos = true;
  SpecCore off(0);
  const uint64_t off_id = off.submit(p, sp);
  off.run();
  const std::vector<int32_t> want = off.sinks[off_id]->tokens();
  ASSERT_EQ(want.size(), 17u);
  for (int rep = 0; rep < 3; ++rep) {
    SpecCore c(3);
    if (rep == 0) c.runner->use_model = true;
    else {  // drafts that are the true sampled continuation, or wrong every 2nd / 3rd position
      c.runner->set_oracle({p}, {want});
      c.runner->wrong_every = rep + 1;
    }
    const uint64_t id = c.submit(p, sp);
    c.run();
    EXPECT_EQ(c.sinks[id]->tokens(), want) << "rep " << rep;
    if (rep > 0) {
      EXPECT_GT(c.core->stats().spec_accepted_tokens, 0u);
    }
  }
  // Greedy with the 6th generated token as a stop token: every draft right, yet the output
  // ends at that token.
  SpecCore c(5);
  std::vector<int32_t> full = p;
  full.insert(full.end(), plain.tokens[0].begin(), plain.tokens[0].end());
  c.runner->oracle[int64_t(p.size())] = full;
  SamplingParams g = greedy_n(20);
  g.stop_token_ids = {plain.tokens[0][5]};
  const uint64_t id = c.submit(p, g);
  c.run();
  const auto got = c.sinks[id]->tokens();
  const auto stop_at = std::find(plain.tokens[0].begin(), plain.tokens[0].end(), plain.tokens[0][5]) - plain.tokens[0].begin();
  EXPECT_EQ(got, std::vector<int32_t>(plain.tokens[0].begin(), plain.tokens[0].begin() + stop_at + 1));
}

// The engine refuses more drafts than the runner can take back.
TEST(Speculative, TooManyDraftsIsAnErrorAtStart) {
  EXPECT_THROW(SpecCore(v4::kMinRingRows), std::invalid_argument);
}

// Adaptive length: with drafts never accepted the policy drafts on a vanishing share of the
// steps; always accepted, it drafts the most it may; in between, something in between.
TEST(DraftPolicy, FollowsAcceptance) {
  auto simulate = [](double accept_prob, double draft_cost, int64_t steps, int64_t* drafted_steps, int64_t* drafted) {
    DraftPolicy p(5, 0, draft_cost, 0.1);
    uint64_t x = 12345;
    *drafted_steps = *drafted = 0;
    for (int64_t s = 0; s < steps; ++s) {
      const int64_t k = p.next();
      if (k == 0) continue;
      ++*drafted_steps;
      *drafted += k;
      int64_t a = 0;
      while (a < k) {
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
        if (double(x >> 11) * 0x1.0p-53 >= accept_prob) break;
        ++a;
      }
      p.observe(k, a);
    }
  };
  int64_t ds = 0, d = 0;
  simulate(0.0, 0.7, 2000, &ds, &d);
  // Cost of useless drafting: each draft step costs about (0.7 + 0.1) steps per draft.
  EXPECT_LE(double(d) * 0.8, 0.02 * 2000) << ds << " draft steps, " << d << " drafts";
  simulate(1.0, 0.05, 200, &ds, &d);
  EXPECT_GE(d, 5 * 190);
  simulate(0.7, 0.05, 2000, &ds, &d);
  EXPECT_GT(ds, 1900);
  EXPECT_LT(d, 5 * 2000);
}

// Slow start: a fresh request drafts one token, and doubles its length only after a verify step
// that took every draft, so a drafter that is wrong from the start costs one draft, not five.
TEST(DraftPolicy, SlowStartDoublesOnFullAcceptance) {
  DraftPolicy p(5, 0, 0.0, 0.05, 0.2);
  std::vector<int64_t> ks;
  for (int i = 0; i < 5; ++i) {
    ks.push_back(p.next());
    p.observe(ks.back(), ks.back());
  }
  EXPECT_EQ(ks, (std::vector<int64_t>{1, 2, 4, 5, 5}));
  // A DSpark-like cost (one forward per drafting step) and drafts never taken: two one-token
  // drafts, then nothing until the first probe (without the slow start: 5 drafts, then 3).
  DraftPolicy wrong(5, 0, 0.0, 0.05, 0.4);
  std::vector<int64_t> wrong_ks;
  for (int i = 0; i < 8; ++i) {
    wrong_ks.push_back(wrong.next());
    wrong.observe(wrong_ks.back(), 0);
  }
  EXPECT_EQ(wrong_ks, (std::vector<int64_t>{1, 1, 0, 0, 0, 0, 0, 0}));
  EXPECT_EQ(DraftPolicy(5, 5, 0.0, 0.05, 1.1).next(), 5);  // a fixed length is not ramped
}

// The meter turns seconds into plain-step units once it has seen plain steps and a draft; the
// policy then probes as rarely as the measured cost asks (a drafting step measured at 3 plain
// steps waits ceil(3.05 / 0.02) = 153 steps, where the estimate of 0.5 said 28).
TEST(DraftPolicy, MeasuredCostsReplaceTheEstimates) {
  DraftCostMeter m;
  EXPECT_EQ(m.step_cost(0.5), 0.5);
  m.plain_step(0.010);
  m.plain_step(0.010);
  m.draft_call(5, 0.030);
  EXPECT_FALSE(m.measured());  // three plain steps first
  m.plain_step(0.010);
  ASSERT_TRUE(m.measured());
  EXPECT_NEAR(m.step_cost(0.5), 3.0, 1e-9);
  EXPECT_NEAR(m.draft_cost(0.5), 0.6, 1e-9);
  DraftPolicy p(5, 0, 0.0, 0.05, 0.5);
  EXPECT_EQ(p.first_backoff(), 28);
  apply_measured_costs(p, m, 0.0, 0.5);
  EXPECT_EQ(p.first_backoff(), 153);
  DraftPolicy mtp(3, 0, 0.2, 0.05);
  apply_measured_costs(mtp, m, 0.2, 0.0);  // per draft: 0.6 + 0.05 verify
  EXPECT_EQ(mtp.first_backoff(), 33);
}

// A useless probe costs at most ~2% of the steps it waited for: a cheap drafter probes after
// 16 steps, a costly one (an MTP draft that reads the whole head: ~0.8 plain steps per drafted
// and verified token) after 40, so over a 64-token bench it probes once, not twice (it drafted
// at steps 16 and 49 before).
TEST(DraftPolicy, CostlyDraftersProbeLessOften) {
  auto drafts_in = [](double draft_cost, int64_t steps, std::vector<int64_t>* at) {
    DraftPolicy p(5, 0, draft_cost, 0.16);
    int64_t drafted = 0;
    for (int64_t s = 0; s < steps; ++s) {
      const int64_t k = p.next();
      if (k == 0) continue;
      drafted += k;
      at->push_back(s);
      p.observe(k, 0);  // never accepted
    }
    return drafted;
  };
  std::vector<int64_t> cheap_at, costly_at;
  // The cheap one drafts one token at a time (slow start) while the optimistic prior says so
  // (steps 0-3), then probes after cool-downs of 16 and 32 steps; the costly one never pays at
  // the prior, and probes at 40.
  EXPECT_EQ(drafts_in(0.05, 64, &cheap_at), 6);
  EXPECT_EQ(cheap_at, (std::vector<int64_t>{0, 1, 2, 3, 20, 53}));
  EXPECT_EQ(drafts_in(0.63, 64, &costly_at), 1);
  EXPECT_EQ(costly_at, (std::vector<int64_t>{40}));
  EXPECT_EQ(DraftPolicy(5, 0, 0.63, 0.16).first_backoff(), 40);  // ceil(0.79 / 0.02)
  EXPECT_EQ(DraftPolicy(5, 0, 0.05, 0.16).first_backoff(), 16);
  EXPECT_EQ(DraftPolicy(5, 0, 100.0, 0.16).first_backoff(), 256);  // capped
  // Over a long run the useless drafter's probes stay under 2% of the steps' cost.
  costly_at.clear();
  EXPECT_LE(double(drafts_in(0.63, 2000, &costly_at)) * 0.79, 0.02 * 2000);
}

// Under a drafter that is always wrong, the first request learns it by drafting; the next
// ones start from the engine's history and draft only on their probes.
TEST(Speculative, LaterRequestsStartFromTheEnginesAcceptance) {
  SpecCore c(3, 512, 4000, 0, "reference", "cpu", "tiny-v4-c", /*adaptive=*/true);
  std::vector<std::vector<int32_t>> prompts, outputs;
  for (int32_t salt = 0; salt < 3; ++salt) {
    prompts.push_back(prompt(12 + 3 * salt, salt));  // the oracle is keyed by prompt length
    SpecCore plain(0);
    const uint64_t id = plain.submit(prompts.back(), greedy(40));
    plain.run();
    outputs.push_back(plain.sinks[id]->tokens());
  }
  c.runner->set_oracle(prompts, outputs);
  c.runner->wrong_every = 1;  // every draft wrong
  std::vector<uint64_t> drafted;
  for (size_t i = 0; i < prompts.size(); ++i) {
    const uint64_t before = c.core->stats().spec_draft_tokens;
    const uint64_t id = c.submit(prompts[i], greedy(40));
    c.run();
    EXPECT_EQ(c.sinks[id]->tokens(), outputs[i]);
    drafted.push_back(c.core->stats().spec_draft_tokens - before);
  }
  EXPECT_GE(drafted[0], 2u);  // the default prior: drafts until the rejections say otherwise
  EXPECT_LE(drafted[1], 1u);  // only the probes (one draft each, every 16+ steps)
  EXPECT_LE(drafted[2], 1u);
  EXPECT_LT(drafted[1], drafted[0]);
}

// The benchmarks' hooks on one engine that drafts with the MTP module: requests added after
// set_drafting(0) do not draft; replace_drafts runs the drafter and makes every draft wrong,
// or gives every draft right (the drafter never runs); the greedy tokens stay plain decoding's.
// set_drafting also starts what the engine learnt over: after a run of wrong drafts the next
// request starts from the engine's acceptance (~0) and hardly drafts, but after set_drafting
// wrong drafts go exactly as on the fresh engine.
TEST(Speculative, BenchHooksSwitchAndReplaceDrafts) {
  const std::vector<int32_t> p = prompt(21, 5);
  const int64_t n = 24;
  const Plain plain = plain_run({p}, n);
  const std::vector<int32_t>& oracle = plain.tokens[0];
  SpecCore c(3, 512, 4000, 0, "reference", "cpu", "tiny-v4-c", /*adaptive=*/true);
  c.runner->use_model = true;
  struct Counts {
    uint64_t drafted, accepted, steps;
    int64_t calls;
  };
  auto run_one = [&](const char* what) {
    SCOPED_TRACE(what);
    const EngineStats before = c.core->stats();
    const int64_t calls = c.runner->calls;
    const uint64_t id = c.submit(p, greedy_n(n));
    c.run();
    EXPECT_EQ(c.sinks[id]->tokens(), oracle);
    const EngineStats after = c.core->stats();
    return Counts{after.spec_draft_tokens - before.spec_draft_tokens,
                  after.spec_accepted_tokens - before.spec_accepted_tokens, after.steps_total - before.steps_total,
                  c.runner->calls - calls};
  };
  c.core->set_drafting(0, true);
  const Counts none = run_one("no drafting");
  EXPECT_EQ(none.drafted, 0u);
  EXPECT_EQ(none.calls, 0);
  EXPECT_EQ(none.steps, uint64_t(n));  // the prompt in one step, then one token per step

  const size_t P = p.size();
  c.core->set_drafting(3, true);
  c.core->replace_drafts = [&](uint64_t, std::span<const int32_t> tokens, int64_t k, const EngineCore::Drafter& drafter) {
    std::vector<int32_t> d = drafter(k);
    const size_t done = tokens.size() - P;
    for (size_t i = 0; i < d.size(); ++i) d[i] = (oracle[done + i] + 1) % 1024;
    return d;
  };
  const Counts wrong = run_one("every draft wrong");
  EXPECT_GT(wrong.drafted, 2u);
  EXPECT_EQ(wrong.accepted, 0u);
  EXPECT_GT(wrong.calls, 0);
  // The next request starts from the engine's acceptance (~0 now) and hardly drafts; after
  // set_drafting it starts from the default again.
  EXPECT_LE(run_one("every draft wrong, the engine's acceptance learnt").drafted, 1u);
  c.core->set_drafting(3, true);
  const Counts again = run_one("every draft wrong, after set_drafting");
  EXPECT_EQ(again.drafted, wrong.drafted);
  EXPECT_EQ(again.calls, wrong.calls);

  c.core->set_drafting(2, false);
  c.core->replace_drafts = [&](uint64_t, std::span<const int32_t> tokens, int64_t k, const EngineCore::Drafter&) {
    const size_t done = tokens.size() - P;
    return std::vector<int32_t>(oracle.begin() + std::ptrdiff_t(done),
                                oracle.begin() + std::ptrdiff_t(std::min(oracle.size(), done + size_t(k))));
  };
  const Counts right = run_one("every draft right");
  EXPECT_GT(right.drafted, 0u);
  EXPECT_EQ(right.accepted, right.drafted);
  EXPECT_EQ(right.calls, 0);                               // the drafter never ran
  EXPECT_LE(right.steps, uint64_t(1 + (n - 1 + 2) / 3));  // three tokens per verify step

  c.core->replace_drafts = nullptr;
  EXPECT_THROW(c.core->set_drafting(4, true), std::invalid_argument);
  EXPECT_THROW(c.core->set_drafting(-1, true), std::invalid_argument);
}

namespace {

// The processed distribution of one logits row, written from the documented order of
// operations (include/deepinfer/sampling_params.h) in double precision and without any of the
// sampler's code, so that a bug in the sampler's filters or penalties cannot hide here:
// logit_bias; repetition_penalty on prompt and output tokens; frequency and presence penalties
// on output tokens; temperature; then min_p (p_i < min_p * p_max dropped), top_k (ties with the
// k-th value kept), top_p (the smallest most-likely prefix reaching top_p), each on what the
// previous step left.
std::vector<double> expected_distribution(const std::vector<float>& logits, const SamplingParams& sp,
                                          const std::vector<int32_t>& prompt_tokens,
                                          const std::map<int32_t, int32_t>& output_counts) {
  const size_t n = logits.size();
  std::vector<double> x(logits.begin(), logits.end());
  for (const auto& [t, b] : sp.logit_bias) x[size_t(t)] += b;
  std::vector<bool> seen(n, false);
  for (int32_t t : prompt_tokens) seen[size_t(t)] = true;
  for (const auto& [t, c] : output_counts) seen[size_t(t)] = true;
  for (size_t t = 0; t < n; ++t)
    if (seen[t]) x[t] = x[t] > 0 ? x[t] / sp.repetition_penalty : x[t] * sp.repetition_penalty;
  for (const auto& [t, c] : output_counts) x[size_t(t)] -= sp.frequency_penalty * c + (c > 0 ? sp.presence_penalty : 0.0);
  for (double& v : x) v /= sp.temperature;
  std::vector<bool> kept(n, true);
  // Probabilities over the tokens still kept.
  auto probs = [&] {
    std::vector<double> p(n, 0.0);
    double z = 0.0;
    for (size_t t = 0; t < n; ++t)
      if (kept[t]) z += (p[t] = std::exp(x[t]));
    for (double& v : p) v /= z;
    return p;
  };
  if (sp.min_p > 0) {
    const std::vector<double> p = probs();
    const double p_max = *std::max_element(p.begin(), p.end());
    for (size_t t = 0; t < n; ++t)
      if (p[t] < sp.min_p * p_max) kept[t] = false;
  }
  if (sp.top_k > 0) {
    std::vector<double> vals;
    for (size_t t = 0; t < n; ++t)
      if (kept[t]) vals.push_back(x[t]);
    std::sort(vals.rbegin(), vals.rend());
    if (vals.size() > size_t(sp.top_k))
      for (size_t t = 0; t < n; ++t)
        if (x[t] < vals[size_t(sp.top_k) - 1]) kept[t] = false;
  }
  if (sp.top_p < 1) {
    const std::vector<double> p = probs();
    std::vector<size_t> ranked;
    for (size_t t = 0; t < n; ++t)
      if (kept[t]) ranked.push_back(t);
    std::stable_sort(ranked.begin(), ranked.end(), [&](size_t a, size_t b) { return p[a] > p[b]; });
    double mass = 0.0;
    size_t r = 0;
    while (r < ranked.size() && mass < sp.top_p) mass += p[ranked[r++]];
    for (; r < ranked.size(); ++r) kept[ranked[r]] = false;
  }
  return probs();
}

// Upper 1e-6 quantiles of chi-square with 1..11 degrees of freedom: with fixed seeds the test
// is deterministic, and were the seeds or the draw order changed, a correct sampler would
// still fail one of its 24 comparisons with a probability of about 2.4e-5.
constexpr double kChi2Quantile1e6[] = {0, 23.93, 27.63, 30.66, 33.38, 35.89, 38.26, 40.52, 42.70, 44.81, 46.86, 48.87};

}  // namespace

// Rejection against a one-point draft: over many seeded draws the tokens follow the processed
// distribution (penalties, bias, temperature, min-p, top-k, top-p), computed independently of
// the sampler, whatever the draft, and `accepted` says exactly whether the token is the draft.
// The cases put tokens near each filter's edge: top_p cuts just past a token whose mass
// decides it, min_p at T 1.3 drops -1.0 but not -0.5 (a threshold taken before temperature
// would drop both), top_k 5 keeps a tie at the 5th value.
TEST(SpeculativeSampler, AcceptedTokensFollowTheTargetDistribution) {
  const int64_t V = 12;
  const std::vector<float> logits = {2.0f, 1.5f, 1.4f, 0.3f, -0.2f, -1.0f, 0.9f, -3.0f, 1.1f, 0.0f, -0.5f, 0.9f};
  const std::vector<int32_t> prompt_tokens = {0, 5, 9};
  const std::map<int32_t, int32_t> output_counts = {{1, 2}, {3, 1}, {9, 1}};
  struct Case {
    float temperature, top_p, min_p;
    int32_t top_k;
    bool penalties;
  };
  const Case cases[] = {{1.0f, 1.0f, 0.0f, 0, false}, {0.7f, 0.9f, 0.0f, 5, false}, {1.3f, 1.0f, 0.1f, 0, false},
                        {0.8f, 0.6f, 0.0f, 0, false}, {1.0f, 1.0f, 0.0f, 5, false}, {0.9f, 0.95f, 0.05f, 0, true}};
  for (const Case& cs : cases) {
    SamplingParams sp;
    sp.temperature = cs.temperature;
    sp.top_p = cs.top_p;
    sp.min_p = cs.min_p;
    sp.top_k = cs.top_k;
    PenaltyState h;
    if (cs.penalties) {
      sp.repetition_penalty = 1.3f;
      sp.frequency_penalty = 0.4f;
      sp.presence_penalty = 0.3f;
      sp.logit_bias = {{7, 3.5f}, {2, -0.25f}};
      h.prompt_tokens.insert(prompt_tokens.begin(), prompt_tokens.end());
      for (const auto& [t, c] : output_counts) h.output_counts[t] = c;
    }
    const std::vector<double> want =
        expected_distribution(logits, sp, cs.penalties ? prompt_tokens : std::vector<int32_t>{},
                              cs.penalties ? output_counts : std::map<int32_t, int32_t>{});
    Sampler s(V);
    for (int32_t draft : {0, 2, 3, 11}) {
      SCOPED_TRACE("T " + std::to_string(cs.temperature) + " top_p " + std::to_string(cs.top_p) + " min_p " +
                   std::to_string(cs.min_p) + " top_k " + std::to_string(cs.top_k) + " penalties " +
                   std::to_string(cs.penalties) + " draft " + std::to_string(draft));
      Rng rng(99 + uint64_t(draft));
      const int64_t N = 100000;
      std::vector<int64_t> count(V, 0);
      for (int64_t i = 0; i < N; ++i) {
        bool acc = false;
        const SampleResult r = s.sample(logits.data(), sp, h, rng, draft, &acc);
        ASSERT_EQ(acc, r.token == draft);
        ++count[size_t(r.token)];
      }
      // Chi-square over the tokens the distribution allows; none elsewhere.
      double chi2 = 0.0;
      int64_t dof = -1;
      for (int64_t t = 0; t < V; ++t) {
        const double p = want[size_t(t)];
        if (p == 0.0) {
          EXPECT_EQ(count[size_t(t)], 0) << "token " << t;
          continue;
        }
        const double e = p * double(N);
        chi2 += (double(count[size_t(t)]) - e) * (double(count[size_t(t)]) - e) / e;
        ++dof;
      }
      ASSERT_GE(dof, 1);
      EXPECT_LT(chi2, kChi2Quantile1e6[dof]) << "dof " << dof;
    }
  }
}
