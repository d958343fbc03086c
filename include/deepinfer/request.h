// A generation request and the events streamed back for it.
#pragma once
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "deepinfer/sampling_params.h"
#include "deepinfer/status.h"

namespace deepinfer {

// Lets one reader wait on several requests at once (n > 1 choices, a list of prompts):
// every event delivered to a request submitted with this waiter (Engine::submit) also
// wakes wait().
class StreamWaiter {
 public:
  void notify();
  // True once notify() was called since the previous wait() returned; false on timeout.
  bool wait(std::chrono::milliseconds timeout);

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool pending_ = false;
};

struct GenerateRequest {
  std::vector<int32_t> prompt;  // token ids, BOS included if wanted
  SamplingParams params;
  // Prompt lengths (1 .. prompt.size()-1) after which the prefix cache should keep a
  // checkpoint, besides every multiple of its granularity: where the next request is likely
  // to diverge (the server passes the start of the assistant's answer, so the next chat
  // turn, which re-renders that answer without its reasoning, hits up to there).
  std::vector<int64_t> cache_points;
};

enum class FinishReason { kNone, kStop, kLength, kAbort, kError };
const char* finish_reason_name(FinishReason r);  // "stop", "length", "abort", "error", ""

struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0.0f;  // -inf for a token masked by top_k / top_p / min_p
};

struct GeneratedToken {
  int32_t token = 0;
  float logprob = 0.0f;              // valid when logprobs were requested
  std::vector<TokenLogprob> top;     // the `logprobs` most likely alternatives, best first
  bool is_stop_token = false;        // EOS or a stop_token_ids hit: counted, not shown as text
};

struct Usage {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  int64_t cached_tokens = 0;  // prompt tokens served from the prefix cache
  // Speculative decoding: draft tokens verified, and those accepted (part of completion_tokens).
  int64_t draft_tokens = 0;
  int64_t accepted_draft_tokens = 0;
};

// One event per engine step in which something happened to the request. The last event
// has finished == true; after it the stream delivers nothing more.
struct StreamEvent {
  std::vector<GeneratedToken> tokens;
  // prompt_logprobs requests: prompt tokens 1, 2, ... with their logprobs, in order over the
  // events (token 0 has none); all of them come before the first generated token.
  std::vector<GeneratedToken> prompt_logprobs;
  bool finished = false;
  FinishReason finish_reason = FinishReason::kNone;
  std::string stop_string;  // the stop string that ended generation, if any
  int32_t stop_token = -1;  // the stop token id that ended generation, if any
  Status error;             // set when finish_reason == kError
  Usage usage;              // cumulative, valid on every event
};

}  // namespace deepinfer
