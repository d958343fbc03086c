// How one request samples its tokens. Field meanings and defaults follow vLLM's
// SamplingParams (and thus the OpenAI API); validate() rejects what they reject.
//
// Order of operations on each logits row (the same as vLLM v1's sampler):
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
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "deepinfer/status.h"

namespace deepinfer {

struct SamplingParams {
  int64_t max_tokens = -1;  // -1: until the context is full
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

  Status validate(int64_t vocab_size) const;
  bool greedy() const { return temperature < 1e-5f; }
};

}  // namespace deepinfer
