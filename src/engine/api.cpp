// The small value types of the public API (include/deepinfer/*.h).
#include <cmath>

#include "deepinfer/engine.h"
#include "deepinfer/request.h"
#include "deepinfer/sampling_params.h"
#include "deepinfer/status.h"

namespace deepinfer {

const char* error_code_name(ErrorCode code) {
  switch (code) {
    case ErrorCode::kOk: return "ok";
    case ErrorCode::kInvalidJson: return "invalid_json";
    case ErrorCode::kInvalidRequest: return "invalid_request";
    case ErrorCode::kContextLengthExceeded: return "context_length_exceeded";
    case ErrorCode::kPayloadTooLarge: return "payload_too_large";
    case ErrorCode::kUnauthorized: return "unauthorized";
    case ErrorCode::kNotFound: return "not_found";
    case ErrorCode::kUnavailable: return "unavailable";
    case ErrorCode::kCancelled: return "cancelled";
    case ErrorCode::kInternal: return "internal";
  }
  return "unknown";
}

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kAbort: return "abort";
    case FinishReason::kError: return "error";
    case FinishReason::kNone: return "";
  }
  return "";
}

namespace {
Status bad(const std::string& param, const std::string& msg) {
  return Status::error(ErrorCode::kInvalidRequest, msg, param);
}
bool finite(float v) { return std::isfinite(v); }
}  // namespace

Status SamplingParams::validate(int64_t vocab_size) const {
  if (max_tokens < -1) return bad("max_tokens", "max_tokens must be at least 0, got " + std::to_string(max_tokens));
  if (!finite(temperature) || temperature < 0.0f)
    return bad("temperature", "temperature must be a finite number >= 0");
  if (!finite(top_p) || top_p <= 0.0f || top_p > 1.0f) return bad("top_p", "top_p must be in (0, 1]");
  if (top_k < -1) return bad("top_k", "top_k must be -1 (disabled), 0 (disabled) or at least 1");
  if (!finite(min_p) || min_p < 0.0f || min_p > 1.0f) return bad("min_p", "min_p must be in [0, 1]");
  if (!finite(presence_penalty) || presence_penalty < -2.0f || presence_penalty > 2.0f)
    return bad("presence_penalty", "presence_penalty must be in [-2, 2]");
  if (!finite(frequency_penalty) || frequency_penalty < -2.0f || frequency_penalty > 2.0f)
    return bad("frequency_penalty", "frequency_penalty must be in [-2, 2]");
  if (!finite(repetition_penalty) || repetition_penalty <= 0.0f)
    return bad("repetition_penalty", "repetition_penalty must be a finite number > 0");
  for (const auto& [tok, b] : logit_bias) {
    if (tok < 0 || tok >= vocab_size)
      return bad("logit_bias", "logit_bias token id " + std::to_string(tok) + " is outside the vocabulary");
    if (!finite(b) || b < -100.0f || b > 100.0f) return bad("logit_bias", "logit_bias values must be in [-100, 100]");
  }
  for (int32_t tok : stop_token_ids)
    if (tok < 0 || tok >= vocab_size)
      return bad("stop_token_ids", "stop token id " + std::to_string(tok) + " is outside the vocabulary");
  if (logprobs < -1 || logprobs > 20) return bad("logprobs", "logprobs must be between 0 and 20");
  if (prompt_logprobs < -1 || prompt_logprobs > 20)
    return bad("prompt_logprobs", "prompt_logprobs must be between 0 and 20");
  return {};
}

void StreamWaiter::notify() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    pending_ = true;
  }
  cv_.notify_all();
}

bool StreamWaiter::wait(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lk(mu_);
  const bool got = cv_.wait_for(lk, timeout, [&] { return pending_; });
  pending_ = false;
  return got;
}

void Histogram::observe(double v) {
  size_t i = 0;
  while (i < bounds.size() && v > bounds[i]) ++i;
  ++counts[i];
  sum += v;
  ++count;
}

Histogram Histogram::small_counts() {
  Histogram h;
  for (int i = 0; i <= 8; ++i) h.bounds.push_back(double(i));
  h.counts.assign(h.bounds.size() + 1, 0);
  return h;
}

Histogram Histogram::token_counts() {
  Histogram h;
  for (double decade = 1; decade <= 1e6; decade *= 10)
    for (double m : {1.0, 2.0, 5.0})
      if (m * decade <= 1e6) h.bounds.push_back(m * decade);
  h.counts.assign(h.bounds.size() + 1, 0);
  return h;
}

Histogram Histogram::latency_seconds() {
  Histogram h;
  h.bounds = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0, 60.0};
  h.counts.assign(h.bounds.size() + 1, 0);
  return h;
}

}  // namespace deepinfer
