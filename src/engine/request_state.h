// The engine's view of one request while it lives: its tokens, how many of them the
// sequence state already holds, sampling state and timing. Owned by EngineCore; the
// scheduler holds plain pointers.
#pragma once
#include <chrono>
#include <cstdint>
#include <future>
#include <memory>
#include <vector>

#include "deepinfer/request.h"
#include "engine/draft_policy.h"
#include "engine/sampler.h"
#include "engine/stop_matcher.h"

namespace deepinfer::engine {

using Clock = std::chrono::steady_clock;

// Where a request's events go (the public RequestStream, or a test collector).
class EventSink {
 public:
  virtual ~EventSink() = default;
  virtual void push(StreamEvent&& event) = 0;
};

enum class Phase { kWaiting, kRunning, kFinished };

struct Request {
  uint64_t id = 0;
  uint64_t arrival = 0;          // submission order: FCFS key, and "newest" for preemption
  std::vector<int32_t> tokens;   // prompt then generated tokens
  int64_t n_prompt = 0;
  int64_t max_new_tokens = 0;    // after clamping to the context
  SamplingParams params;
  Phase phase = Phase::kWaiting;

  // Tokens whose attention state the runner holds for this sequence. The next chunk starts
  // here; a preempted request drops back to 0 and recomputes (prompt + output so far).
  int64_t num_computed = 0;
  int64_t num_cached = 0;        // prompt tokens that came from a prefix-cache snapshot
  bool prefix_checked = false;   // looked up once per admission
  // The disk cache, once per admission too: the snapshot of the first disk_read_tokens tokens
  // being read off the scheduler thread (the request waits at the head of the queue, running
  // requests go on), then disk_checked.
  std::future<std::shared_ptr<const std::vector<char>>> disk_read;
  int64_t disk_read_tokens = 0;
  bool disk_checked = false;
  std::vector<int64_t> cache_points;      // from the request (sorted, unique, inside the prompt)
  std::vector<int64_t> checkpoints_due;   // this admission's prefix-cache checkpoints still to take, ascending
  int64_t n_preemptions = 0;
  int64_t next_prompt_logprob = 1;  // prompt_logprobs: the next prompt position to report (kept over preemption)

  // Speculative decoding: the drafts to verify after the pending token (the last of tokens),
  // and the verify chunk itself (the pending token, then the drafts).
  std::unique_ptr<DraftPolicy> draft_policy;  // null: this request does not speculate
  std::vector<int32_t> drafts;
  std::vector<int32_t> verify_tokens;
  int64_t drafted = 0, accepted = 0;  // drafts verified and accepted, over the request

  Rng rng;
  PenaltyState penalties;
  std::unique_ptr<StopMatcher> stop;
  std::shared_ptr<EventSink> sink;

  Clock::time_point t_arrival, t_scheduled, t_first_token, t_last_token;
  bool scheduled_once = false;

  int64_t num_tokens() const { return int64_t(tokens.size()); }
  int64_t num_output() const { return num_tokens() - n_prompt; }
  int64_t remaining() const { return num_tokens() - num_computed; }
};

}  // namespace deepinfer::engine
