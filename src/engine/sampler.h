// Token sampling for one logits row of one request (order of operations and the logprob
// definition: include/deepinfer/sampling_params.h). Deterministic given the row, the
// parameters, the history and the request's RNG: batch composition never enters, so a
// seeded request gives the same tokens alone or in a busy batch.
#pragma once
#include <cstdint>
#include <random>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "deepinfer/request.h"
#include "deepinfer/sampling_params.h"

namespace deepinfer::engine {

// The request's RNG: std::mt19937_64 is fully specified by the standard, so a seed gives
// the same stream on every platform. One draw per sampled (non-greedy) token.
using Rng = std::mt19937_64;
double rng_uniform(Rng& rng);  // [0, 1), 53 random bits

// What the penalties need to know about a request's history.
struct PenaltyState {
  std::unordered_set<int32_t> prompt_tokens;      // for repetition_penalty only
  std::unordered_map<int32_t, int32_t> output_counts;
  void add_output(int32_t token) { ++output_counts[token]; }
};

struct SampleResult {
  int32_t token = 0;
  float logprob = 0.0f;
  std::vector<TokenLogprob> top;
};

// The raw logprob of `token` under one logits row (log-softmax, nothing applied) and the
// n_top most likely tokens, best first (ties to the lower id). NaN logits count as -inf.
// `scratch` is reused between calls.
GeneratedToken raw_logprob(const float* logits, int64_t vocab, int32_t token, int32_t n_top,
                           std::vector<int32_t>& scratch);

// Index of the first NaN / Inf in row[0..n), or -1: a logits row that must not become a
// token (corrupt weights). The engine checks every row it samples or scores with it, the CLI
// the rows it prints or scores.
int64_t first_nonfinite(const float* row, int64_t n);

class Sampler {
 public:
  explicit Sampler(int64_t vocab_size);
  int64_t vocab_size() const { return vocab_; }

  // Samples one token from `logits` [vocab]. Logprobs are filled when params.logprobs >= 0.
  // Speculative decoding: `draft` (>= 0) is a token a drafter proposed with certainty (a greedy
  // draft); *accepted says whether the token is it. The token is the one sampling without a
  // draft gives (same draw): it follows the processed distribution exactly and is the draft
  // with the draft's probability, as rejection sampling against a one-point draft distribution.
  SampleResult sample(const float* logits, const SamplingParams& params, const PenaltyState& history, Rng& rng,
                      int32_t draft = -1, bool* accepted = nullptr);

  // The processed logprobs (log-softmax of what the last sample() drew from; masked tokens
  // -inf) over the whole vocabulary. For tests and diagnostics.
  std::vector<float> last_logprobs() const;

 private:
  // Step 0: -inf for the tokens p.constraint forbids. Returns the lowest allowed id, or -1
  // when nothing is masked.
  int32_t apply_constraint(const SamplingParams& p);
  void apply_bias_and_penalties(const SamplingParams& p, const PenaltyState& h);
  void apply_filters(const SamplingParams& p);
  int32_t draw(Rng& rng) const;
  double log_normalizer() const;

  int64_t vocab_;
  std::vector<float> x_;        // processed logits of the current row (-inf = masked)
  std::vector<int32_t> order_;  // scratch index list
  std::vector<float> values_;   // scratch values
  std::vector<uint64_t> mask_;  // constraint bitmask, one bit per token
};

}  // namespace deepinfer::engine
