// How one request samples its tokens. Field meanings and defaults follow vLLM's
// SamplingParams (and thus the OpenAI API); validate() rejects what they reject.
//
// Order of operations on each logits row (the same as vLLM v1's sampler):
//   0. a constraint (structured output, forced tool calls) masks the tokens it forbids
//      (-inf), as vLLM applies its grammar bitmask before sampling;
//   1. logit_bias is added;
//   2. repetition_penalty (prompt and output tokens: positive logits divided, negative
//      multiplied), then frequency_penalty * count and presence_penalty * (count > 0)
//      subtracted (output tokens only);
//   3. temperature < 1e-5: greedy argmax (ties to the lowest id), filters ignored;
//      otherwise divide by temperature, then min_p, top_k, top_p masks, then one draw
//      from the request's own RNG.
// Logprobs are vLLM's "processed_logprobs": the log-softmax of the logits the token was
// actually drawn from, i.e. after steps 1-3, with tokens masked by min_p / top_k / top_p at
// -inf. For greedy requests that is the log-softmax after steps 1-2.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "deepinfer/status.h"

namespace deepinfer {

// A rule on which tokens one request may produce next. The engine calls allowed() before
// each token of the request is sampled and accept() with the token chosen, in that order,
// on the engine thread; one object serves one request (it holds that request's state).
class TokenConstraint {
 public:
  virtual ~TokenConstraint() = default;
  // Sets bit t of `mask` (mask[t / 64] >> (t % 64) & 1) for every token t < vocab_size that
  // may come next; `mask` has (vocab_size + 63) / 64 words, zeroed by the caller. Returns
  // false when every token is allowed at this point (no mask is applied then).
  virtual bool allowed(uint64_t* mask, int64_t vocab_size) = 0;
  virtual void accept(int32_t token) = 0;
};

struct SamplingParams {
  int64_t max_tokens = -1;  // -1: until the context is full; 0: run the prompt only (prompt_logprobs)
  float temperature = 1.0f;  // 0: greedy
  float top_p = 1.0f;        // (0, 1]
  int32_t top_k = 0;         // 0 or -1: off
  float min_p = 0.0f;        // [0, 1]
  float presence_penalty = 0.0f;    // [-2, 2]
  float frequency_penalty = 0.0f;   // [-2, 2]
  float repetition_penalty = 1.0f;  // > 0; 1 = off
  std::vector<std::pair<int32_t, float>> logit_bias;  // token id -> added value, [-100, 100]
  std::optional<uint64_t> seed;     // unset: a fresh random seed per request
  std::vector<std::string> stop;    // stop strings (not included in the output)
  std::vector<int32_t> stop_token_ids;
  bool ignore_eos = false;
  int32_t logprobs = -1;  // -1: none; N >= 0: the sampled token's logprob and N alternatives (N <= 20)
  // -1: none; N >= 0: every prompt token after the first gets its logprob under the model
  // (the raw log-softmax of the logits row before it, no sampling steps applied) and the N
  // most likely alternatives (N <= 20), as vLLM's prompt_logprobs. Such a request computes
  // the logits of every prompt row and never resumes from a prefix-cache snapshot.
  int32_t prompt_logprobs = -1;
  std::shared_ptr<TokenConstraint> constraint;  // null: none (the server builds these)

  Status validate(int64_t vocab_size) const;
  bool greedy() const { return temperature < 1e-5f; }
};

}  // namespace deepinfer
