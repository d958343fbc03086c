// Non-finite logits (what corrupt weights give) fail the request they belong to with a clear
// error and are counted; they never reach the sampler, and the other requests of the batch
// go on as if nothing happened.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <limits>
#include <set>

#include "../model/corrupt_checkpoint.h"
#include "deepinfer/engine.h"
#include "engine/model_runner.h"
#include "harness.h"

using namespace deepinfer;
using namespace deepinfer::engine;
using namespace deepinfer::engine::testing;

namespace {

// FakeRunner's logits, with one value of the chosen sequences' rows replaced once they have
// seen `after` tokens.
class PoisonRunner final : public Runner {
 public:
  PoisonRunner(int64_t vocab, float value, int64_t column, int64_t after)
      : inner_(vocab), value_(value), column_(column), after_(after) {}
  int64_t vocab_size() const override { return inner_.vocab_size(); }
  void bind_kv(const kv::KvSpec& spec, int64_t n_blocks) override { inner_.bind_kv(spec, n_blocks); }
  void apply(const StateOp& op) override { inner_.apply(op); }
  void run(const std::vector<ScheduledChunk>& chunks, std::vector<float>& rows) override {
    inner_.run(chunks, rows);
    int64_t row = 0;
    for (const auto& c : chunks) {
      if (!c.want_logits) continue;
      if (poisoned.count(c.seq_id) && c.pos0 + c.n_tokens >= after_) rows[size_t(row * vocab_size() + column_)] = value_;
      ++row;
    }
  }
  std::set<uint64_t> poisoned;

 private:
  FakeRunner inner_;
  float value_;
  int64_t column_, after_;
};

struct PoisonHarness {
  PoisonRunner* runner = nullptr;
  std::unique_ptr<EngineCore> core;
  std::map<uint64_t, std::shared_ptr<Collector>> sinks;

  PoisonHarness(float value, int64_t column, int64_t after) {
    EngineCoreOptions o;
    o.max_model_len = 512;
    o.scheduler.max_batch_tokens = 64;
    o.scheduler.max_running = 8;
    auto r = std::make_unique<PoisonRunner>(Harness::kVocab, value, column, after);
    runner = r.get();
    core = std::make_unique<EngineCore>(o, small_spec(), 200, std::move(r));
  }
  void submit(uint64_t id, std::vector<int32_t> prompt, SamplingParams p) {
    sinks[id] = std::make_shared<Collector>();
    core->add(id, GenerateRequest{std::move(prompt), std::move(p)}, sinks[id], Clock::now());
  }
  void run() {
    for (int n = 0; core->has_work(); ++n) {
      ASSERT_LT(n, 10000) << "engine did not drain";
      core->step();
      std::string why;
      ASSERT_TRUE(core->scheduler().check_integrity(&why)) << why;
    }
  }
};

void expect_fails_alone(float value, const char* kind) {
  // Request 2's rows turn bad once it holds 13 tokens (10 prompt + 3 generated).
  PoisonHarness h(value, 17, 13);
  h.runner->poisoned = {2};
  SamplingParams sampled;
  sampled.temperature = 1.0f;
  sampled.seed = 5;
  sampled.max_tokens = 8;
  sampled.ignore_eos = true;
  h.submit(1, ramp(10, 3), greedy(8));
  h.submit(2, ramp(10, 4), sampled);
  h.submit(3, ramp(7, 5), greedy(8));
  h.run();

  // The healthy requests run to their length and give what they give without the bad one.
  PoisonHarness clean(value, 17, 13);
  clean.submit(1, ramp(10, 3), greedy(8));
  clean.submit(3, ramp(7, 5), greedy(8));
  clean.run();
  for (uint64_t id : {1, 3}) {
    EXPECT_EQ(h.sinks[id]->reason(), FinishReason::kLength) << id;
    EXPECT_EQ(h.sinks[id]->tokens(), clean.sinks[id]->tokens()) << id;
    EXPECT_EQ(h.sinks[id]->tokens().size(), 8u);
  }

  const Collector& bad = *h.sinks[2];
  ASSERT_TRUE(bad.finished());
  EXPECT_EQ(bad.reason(), FinishReason::kError);
  const StreamEvent& last = bad.events.back();
  EXPECT_EQ(last.error.code, ErrorCode::kInternal);
  EXPECT_NE(last.error.message.find(std::string("non-finite logits (") + kind + ") at position 12"), std::string::npos)
      << last.error.message;
  EXPECT_NE(last.error.message.find("(first in the logit of token id 17)"), std::string::npos) << last.error.message;
  // The rows before the bad one were sampled; the bad one gave no token.
  EXPECT_EQ(bad.tokens().size(), 3u);
  EXPECT_TRUE(last.tokens.empty());

  const EngineStats s = h.core->stats();
  EXPECT_EQ(s.requests_failed_nonfinite, 1u);
  EXPECT_EQ(s.requests_finished_error, 1u);
  EXPECT_EQ(s.requests_finished_length, 2u);
  EXPECT_EQ(clean.core->stats().requests_failed_nonfinite, 0u);
}

}  // namespace

TEST(EngineNonFinite, NanRowFailsOnlyItsRequest) { expect_fails_alone(std::numeric_limits<float>::quiet_NaN(), "NaN"); }

TEST(EngineNonFinite, InfRowFailsOnlyItsRequest) { expect_fails_alone(-std::numeric_limits<float>::infinity(), "Inf"); }

// A bad value in the last column (the scan's tail) and on the first row of a prompt.
TEST(EngineNonFinite, FirstRowAndLastColumnAreChecked) {
  PoisonHarness h(std::numeric_limits<float>::infinity(), Harness::kVocab - 1, 0);
  h.runner->poisoned = {7};
  h.submit(7, ramp(5, 2), greedy(4));
  h.run();
  ASSERT_TRUE(h.sinks[7]->finished());
  EXPECT_EQ(h.sinks[7]->reason(), FinishReason::kError);
  EXPECT_TRUE(h.sinks[7]->tokens().empty());
  EXPECT_NE(h.sinks[7]->events.back().error.message.find("(Inf) at position 4"), std::string::npos)
      << h.sinks[7]->events.back().error.message;
  EXPECT_EQ(h.core->stats().requests_failed_nonfinite, 1u);
}

// The real tiny model with a NaN in token 500's embedding row: a request that holds token 500
// fails at the first row after it, while a request in the same batch steps runs on and gives
// exactly what it gives with the clean checkpoint. The same copy is refused at load with
// verify_weights.
namespace {

namespace fs = std::filesystem;

std::string tiny_dir() { return std::string(DI_SHARED_DIR) + "/golden/tiny-v4-c/model"; }

struct TempCopy {
  fs::path dir = fs::temp_directory_path() / ("di_nonfinite_" + std::to_string(::getpid()));
  TempCopy() {
    fs::remove_all(dir);
    // bf16 0x7fc0 (quiet NaN) at embed.weight[500, 3].
    deepinfer::testing::write_corrupt_copy(tiny_dir(), dir, "embed.weight", 500 * 256 + 3, std::string("\xc0\x7f", 2));
  }
  ~TempCopy() { fs::remove_all(dir); }
};

std::vector<std::vector<int32_t>> run_two(const std::string& dir, const std::vector<int32_t>& a,
                                          const std::vector<int32_t>& b, std::vector<StreamEvent>* last,
                                          EngineStats* stats) {
  auto runner = std::make_unique<ModelRunner>(v4::Model::load(dir), 1, "reference", "cpu");
  const kv::KvSpec spec = kv::KvSpec::make(kv_layout_of(runner->model().config()), 64);
  EngineCoreOptions o;
  o.max_model_len = 512;
  o.scheduler.max_batch_tokens = 64;
  o.scheduler.max_running = 4;
  EngineCore core(o, spec, 400, std::move(runner));
  auto sa = std::make_shared<Collector>(), sb = std::make_shared<Collector>();
  core.add(1, GenerateRequest{a, greedy(6)}, sa, Clock::now());
  core.add(2, GenerateRequest{b, greedy(6)}, sb, Clock::now());
  for (int n = 0; core.has_work(); ++n) {
    if (n > 1000) break;
    core.step();
  }
  last->assign({sa->events.back(), sb->events.back()});
  *stats = core.stats();
  return {sa->tokens(), sb->tokens()};
}

}  // namespace

TEST(EngineNonFinite, CorruptEmbeddingFailsOnlyTheRequestThatReadsIt) {
  TempCopy bad;
  const std::vector<int32_t> healthy{0, 11, 12, 13, 14, 15, 16, 17};
  const std::vector<int32_t> poisoned{0, 21, 22, 500, 23, 24};
  std::vector<StreamEvent> last_bad, last_clean;
  EngineStats st_bad, st_clean;
  const auto got = run_two(bad.dir.string(), healthy, poisoned, &last_bad, &st_bad);
  const auto want = run_two(tiny_dir(), healthy, poisoned, &last_clean, &st_clean);

  EXPECT_EQ(last_bad[0].finish_reason, FinishReason::kLength);
  EXPECT_EQ(got[0], want[0]);
  EXPECT_EQ(got[0].size(), 6u);

  EXPECT_EQ(last_bad[1].finish_reason, FinishReason::kError);
  EXPECT_EQ(last_bad[1].error.code, ErrorCode::kInternal);
  EXPECT_NE(last_bad[1].error.message.find("non-finite logits (NaN) at position 5"), std::string::npos)
      << last_bad[1].error.message;
  EXPECT_TRUE(got[1].empty());
  EXPECT_EQ(st_bad.requests_failed_nonfinite, 1u);
  EXPECT_EQ(last_clean[1].finish_reason, FinishReason::kLength);
  EXPECT_EQ(st_clean.requests_failed_nonfinite, 0u);
}

TEST(EngineNonFinite, VerifyWeightsRefusesTheCorruptCheckpointAtLoad) {
  TempCopy bad;
  EngineOptions o;
  o.model_dir = bad.dir.string();
  o.threads = 1;
  o.num_kv_blocks = 200;
  o.verify_weights = true;
  std::string err;
  try {
    Engine::create(o);
  } catch (const std::exception& e) {
    err = e.what();
  }
  EXPECT_NE(err.find("tensor 'embed.weight' (BF16 [1024, 256]) holds NaN at element [500, 3] (code 0x7fc0)"),
            std::string::npos)
      << err;
  o.model_dir = tiny_dir();
  EXPECT_NO_THROW(Engine::create(o));
}
