// The threaded Engine's stats() against its streams: once a request's final event has been
// read, stats() counts that request, with no wait. The engine thread is held up right after
// the final event (the state op that frees the finished sequence runs slowly), so stats
// published only at the end of that step would be read stale here.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <thread>

#include "engine/engine_impl.h"
#include "harness.h"

namespace deepinfer::engine::testing {
namespace {

// FakeRunner, but freeing or saving a finished sequence's state takes `release`, and each
// step `step`: the engine thread is still inside the step that finished a request (or in the
// next one) when its client gets the final event.
class SlowRunner final : public Runner {
 public:
  SlowRunner(int64_t vocab, std::chrono::milliseconds release, std::chrono::milliseconds step)
      : inner_(vocab), release_(release), step_(step) {}
  int64_t vocab_size() const override { return inner_.vocab_size(); }
  void bind_kv(const kv::KvSpec& spec, int64_t n_blocks) override { inner_.bind_kv(spec, n_blocks); }
  void run(const std::vector<ScheduledChunk>& chunks, std::vector<float>& rows) override {
    std::this_thread::sleep_for(step_);
    inner_.run(chunks, rows);
  }
  void apply(const StateOp& op) override {
    if (op.kind == StateOp::Kind::kFree || op.kind == StateOp::Kind::kSaveSnapshot)
      std::this_thread::sleep_for(release_);
    inner_.apply(op);
  }

 private:
  FakeRunner inner_;
  std::chrono::milliseconds release_, step_;
};

std::unique_ptr<Engine> slow_engine(std::chrono::milliseconds step = std::chrono::milliseconds(0)) {
  EngineCoreOptions o;
  o.max_model_len = 256;
  o.eos_token_id = 1;
  EngineInfo info;
  info.vocab_size = Harness::kVocab;
  info.max_model_len = o.max_model_len;
  return make_engine(info, o, small_spec(), 200,
                     std::make_unique<SlowRunner>(Harness::kVocab, std::chrono::milliseconds(300), step));
}

StreamEvent final_event(RequestStream& s) {
  for (;;) {
    auto ev = s.next(std::chrono::seconds(30));
    if (!ev) {
      ADD_FAILURE() << "no event in 30 s";
      return {};
    }
    if (ev->finished) return std::move(*ev);
  }
}

SamplingParams tokens(int64_t n) {
  SamplingParams p;
  p.temperature = 0.0f;
  p.max_tokens = n;
  p.ignore_eos = true;
  return p;
}

TEST(EngineStats, CountARequestBeforeItsFinalEvent) {
  auto eng = slow_engine();
  for (int round = 1; round <= 2; ++round) {
    auto s = eng->submit(GenerateRequest{{0, 5, 6, 7}, tokens(5), {}});
    const StreamEvent last = final_event(*s);
    ASSERT_EQ(last.finish_reason, FinishReason::kLength);
    const EngineStats st = eng->stats();  // no wait
    EXPECT_EQ(st.requests_finished_length, uint64_t(round));
    EXPECT_EQ(st.generation_tokens_total, uint64_t(5 * round));
    EXPECT_EQ(st.prompt_tokens_total, uint64_t(4 * round));
    EXPECT_EQ(st.requests_running, 0);
    EXPECT_EQ(st.requests_waiting, 0);
    EXPECT_EQ(st.generation_tokens.count, uint64_t(round));
  }
}

TEST(EngineStats, CountARefusedAndACancelledRequestBeforeTheirFinalEvents) {
  auto eng = slow_engine(std::chrono::milliseconds(20));
  auto s = eng->submit(GenerateRequest{{0, 5, 6, 7}, tokens(-1), {}});  // up to the context: ~5 s
  ASSERT_TRUE(s->next(std::chrono::seconds(30)));  // running
  // Refused at admission (an empty prompt) while another request runs: counted before its
  // error event, not after the step that follows.
  auto bad = eng->submit(GenerateRequest{{}, tokens(1), {}});
  EXPECT_EQ(final_event(*bad).finish_reason, FinishReason::kError);
  EngineStats st = eng->stats();
  EXPECT_EQ(st.requests_finished_error, 1u);
  EXPECT_EQ(st.requests_running, 1);
  s->cancel();
  EXPECT_EQ(final_event(*s).finish_reason, FinishReason::kAbort);
  st = eng->stats();
  EXPECT_EQ(st.requests_finished_abort, 1u);
  EXPECT_EQ(st.requests_running, 0);
}

}  // namespace
}  // namespace deepinfer::engine::testing
