// One engine step, single-threaded: schedule -> run -> sample -> emit. The public Engine
// drives it from its thread; tests drive it directly with a fake runner.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "deepinfer/engine.h"
#include "engine/draft_policy.h"
#include "engine/request_state.h"
#include "engine/runner.h"
#include "engine/sampler.h"
#include "engine/scheduler.h"

namespace deepinfer::engine {

struct EngineCoreOptions {
  int64_t max_model_len = 0;
  int32_t eos_token_id = 1;
  // DeepSeek-V4.1's image placeholder id (-1: none): only the text path is served, so a
  // prompt holding it is an invalid request.
  int32_t image_token_id = -1;
  SchedulerOptions scheduler;
  std::function<std::string(int32_t)> token_text;  // for stop strings; may be empty
  std::shared_ptr<kv::DiskCache> disk_cache;       // prefix-cache snapshots on disk; may be null
  // Speculative decoding: the most drafts a request verifies per step (0: off; the runner
  // must draft, Runner::max_draft_tokens). Adaptive: each request's DraftPolicy picks 0..this
  // from its acceptance, with these costs per draft token in decode steps; not adaptive:
  // always this many (tests, benchmarks).
  int64_t num_draft_tokens = 0;
  bool adaptive_drafts = true;
  double draft_cost = 0.0, verify_cost = 0.0, draft_step_cost = 0.0;
  // Replace the byte-count cost estimates by the costs measured while running (off: the
  // estimates stand, so draft lengths depend only on acceptance: tests that count drafts).
  bool measure_draft_costs = true;
};

class EngineCore {
 public:
  EngineCore(const EngineCoreOptions& options, const kv::KvSpec& spec, int64_t n_blocks, std::unique_ptr<Runner> runner);

  // Thread-safe (reads only the immutable options).
  Status validate(const GenerateRequest& req) const;
  // Queues a request. An invalid one gets its error event at once and is not queued.
  Status add(uint64_t id, GenerateRequest req, std::shared_ptr<EventSink> sink, Clock::time_point arrival);
  // Cancels a queued or running request (final event: kAbort). Unknown ids are ignored.
  void abort(uint64_t id);
  // Fails every live request (engine shutting down).
  void abort_all(const std::string& why);
  // Drops every prefix-cache snapshot (their KV blocks return to the pool unless a running
  // sequence shares them).
  void drop_prefix_cache();

  bool has_work() const { return scheduler_.has_work(); }
  // One scheduler step. Returns the number of tokens run through the model. With nothing to
  // run while a disk-cache read is in flight, it waits up to 10 ms for that read first.
  int64_t step();

  const Scheduler& scheduler() const { return scheduler_; }
  const EngineCoreOptions& options() const { return opt_; }
  // Counters and histograms; gauges (running, waiting, KV) filled from the current state.
  EngineStats stats() const;

  // Test hook: called with every logits row before sampling (request id, position of the
  // token it predicts, row [vocab]).
  std::function<void(uint64_t, int64_t, const float*)> on_logits;
  // Called right before a request's final event goes to its sink, when stats() already
  // counts that request (its finish reason, tokens, drafts, running / waiting without it).
  // The threaded Engine publishes its stats copy here, so whoever saw a request end reads
  // stats that include it.
  std::function<void()> before_final_event;

  // Benchmarks' hooks (`bench --speculative` times plain and drafted decoding, and the verify
  // path's bounds, on one engine; tests). Requests added from now on draft up to
  // num_draft_tokens per step (0: not at all, as on an engine without drafting; at most
  // options().num_draft_tokens), chosen by their policy (adaptive) or always that many; and
  // what the engine learnt from earlier drafts (the acceptance new requests start from, the
  // measured cost of a draft) starts over, so that each variant a benchmark times starts as
  // on a fresh engine. std::invalid_argument outside 0 .. options().num_draft_tokens.
  void set_drafting(int64_t num_draft_tokens, bool adaptive);
  // When set, the drafts a request verifies next are what this returns (at most k are used)
  // instead of the runner's, given the request id, its tokens (the pending one last), the
  // draft count its policy chose and the runner's drafter, which runs (and is timed for the
  // draft-cost meter) only if called.
  using Drafter = std::function<std::vector<int32_t>(int64_t k)>;
  std::function<std::vector<int32_t>(uint64_t, std::span<const int32_t>, int64_t, const Drafter&)> replace_drafts;

 private:
  void apply_state_ops();
  bool sample_next(Request& r, const float* row, StreamEvent& ev, int32_t draft = -1, bool* accepted = nullptr);
  // A verify chunk's rows: accepts drafts while they match what sampling gives, then the
  // sampled token; undoes the rest. Returns whether r finished (it is then gone).
  bool accept_drafts(Request& r, const ScheduledChunk& c, const float* rows, StreamEvent& ev);
  void draft_next(Request& r);
  bool speculates(const Request& r) const;
  void finish(Request& r, FinishReason reason, StreamEvent ev, const Status& error = {});
  // Hands a final event over, after before_final_event.
  void push_final(EventSink& sink, StreamEvent&& ev);
  Usage usage_of(const Request& r) const;
  void fail_scheduled(const std::vector<ScheduledRequest>& sched, const std::string& what);

  EngineCoreOptions opt_;
  int64_t new_request_drafts_ = 0;  // set_drafting: what requests added from now on draft
  bool new_request_adaptive_ = true;
  Scheduler scheduler_;
  std::unique_ptr<Runner> runner_;
  Sampler sampler_;
  std::unordered_map<uint64_t, std::unique_ptr<Request>> requests_;
  uint64_t next_arrival_ = 0;
  std::vector<float> logits_;
  std::vector<ScheduledChunk> chunks_;
  std::vector<uint64_t> step_ids_;  // the requests of the current step
  std::vector<int32_t> scratch_;
  EngineStats stats_;
  AcceptanceHistory acceptance_history_;  // the prior of new requests' draft policies
  DraftCostMeter draft_meter_;            // what a draft costs here, in plain decode steps
};

}  // namespace deepinfer::engine
