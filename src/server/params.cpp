#include "server/params.h"

#include <algorithm>
#include <atomic>
#include <climits>
#include <cmath>
#include <cstdlib>

#include "server/errors.h"
#include "core/json_limits.h"

namespace deepinfer::server {

namespace {

[[noreturn]] void wrong_type(const char* key, const char* what) {
  throw ApiError(ErrorCode::kInvalidRequest, std::string("'") + key + "' must be " + what, key);
}

template <class J>
const J* field(const J& o, const char* key) {
  auto it = o.find(key);
  if (it == o.end() || it->is_null()) return nullptr;
  return &*it;
}

template <class J>
float get_float(const J& o, const char* key, float fallback) {
  auto v = get_number(o, key);
  return v ? float(*v) : fallback;
}

template <class J>
void parse_stop(const J& body, SamplingParams& p) {
  const J* s = field(body, "stop");
  if (!s) return;
  if (s->is_string()) {
    p.stop.push_back(s->template get<std::string>());
    return;
  }
  if (!s->is_array()) wrong_type("stop", "a string or an array of strings");
  for (const auto& v : *s) {
    if (!v.is_string()) wrong_type("stop", "a string or an array of strings");
    p.stop.push_back(v.template get<std::string>());
  }
}

template <class J>
void parse_logit_bias(const J& body, SamplingParams& p) {
  const J* b = get_object(body, "logit_bias");
  if (!b) return;
  for (auto it = b->begin(); it != b->end(); ++it) {
    char* end = nullptr;
    const long id = std::strtol(it.key().c_str(), &end, 10);
    if (it.key().empty() || *end != '\0' || id < 0 || id > INT32_MAX)
      throw ApiError(ErrorCode::kInvalidRequest, "logit_bias keys must be token ids, got '" + it.key() + "'",
                     "logit_bias");
    if (!it.value().is_number()) wrong_type("logit_bias", "an object of token id -> number");
    p.logit_bias.emplace_back(int32_t(id), it.value().template get<float>());
  }
}

template <class J>
void parse_logprobs(const J& body, Api api, SamplingParams& p) {
  if (api == Api::kCompletions) {
    if (auto n = get_int(body, "logprobs")) {
      if (*n < 0 || *n > 20) throw ApiError(ErrorCode::kInvalidRequest, "logprobs must be between 0 and 20", "logprobs");
      p.logprobs = int32_t(*n);
    }
    return;
  }
  const bool on = get_bool(body, "logprobs").value_or(false);
  const auto top = get_int(body, "top_logprobs");
  if (top && (*top < 0 || *top > 20))
    throw ApiError(ErrorCode::kInvalidRequest, "top_logprobs must be between 0 and 20", "top_logprobs");
  if (top && !on) throw ApiError(ErrorCode::kInvalidRequest, "top_logprobs needs logprobs: true", "top_logprobs");
  if (on) p.logprobs = int32_t(top.value_or(0));
}

template <class J>
void reject_unsupported(const J& body, Api api) {
  if (api == Api::kCompletions) {
    if (get_string(body, "suffix")) throw ApiError(ErrorCode::kInvalidRequest, "suffix is not supported", "suffix");
  } else if (auto b = get_int(body, "best_of"); b && *b != 1) {
    throw ApiError(ErrorCode::kInvalidRequest, "best_of is only supported by /v1/completions", "best_of");
  }
}

template <class J>
void parse_choices(const J& body, Api api, RequestOptions& r) {
  const auto n = get_int(body, "n");
  if (n && (*n < 1 || *n > kMaxSamplesPerRequest))
    throw ApiError(ErrorCode::kInvalidRequest, "n must be between 1 and " + std::to_string(kMaxSamplesPerRequest), "n");
  r.n = n.value_or(1);
  r.best_of = r.n;
  if (api != Api::kCompletions) return;
  if (auto b = get_int(body, "best_of")) {
    if (*b < r.n || *b > kMaxSamplesPerRequest)
      throw ApiError(ErrorCode::kInvalidRequest,
                     "best_of must be at least n (" + std::to_string(r.n) + ") and at most " +
                         std::to_string(kMaxSamplesPerRequest),
                     "best_of");
    r.best_of = *b;
  }
  r.echo = get_bool(body, "echo").value_or(false);
}

}  // namespace

namespace {

std::atomic<uint64_t> n_parsed{0};

template <class JsonT>
JsonT parse_object_body(const std::string& body) {
  n_parsed.fetch_add(1, std::memory_order_relaxed);
  std::string why;
  std::optional<JsonT> parsed = parse_json_bounded<JsonT>(body, &why);
  if (!parsed) throw ApiError(ErrorCode::kInvalidJson, "the request body is " + why);
  JsonT j = std::move(*parsed);
  if (!j.is_object()) throw ApiError(ErrorCode::kInvalidJson, "the request body must be a JSON object");
  return j;
}

}  // namespace

json parse_body(const std::string& body) { return parse_object_body<json>(body); }

ordered_json parse_body_ordered(const std::string& body) { return parse_object_body<ordered_json>(body); }

uint64_t bodies_parsed() { return n_parsed.load(std::memory_order_relaxed); }

template <class J>
std::optional<double> get_number(const J& o, const char* key) {
  const J* v = field(o, key);
  if (!v) return std::nullopt;
  if (!v->is_number()) wrong_type(key, "a number");
  const double d = v->template get<double>();
  if (!std::isfinite(d)) wrong_type(key, "a finite number");
  return d;
}

template <class J>
std::optional<int64_t> get_int(const J& o, const char* key) {
  const J* v = field(o, key);
  if (!v) return std::nullopt;
  if (v->is_number_integer()) return v->template get<int64_t>();
  // 16.0 is an integer too, as Python's int() validation sees it; 16.5 is not.
  if (v->is_number_float()) {
    const double d = v->template get<double>();
    if (std::floor(d) == d && std::fabs(d) < 9e15) return int64_t(d);
  }
  wrong_type(key, "an integer");
}

template <class J>
std::optional<bool> get_bool(const J& o, const char* key) {
  const J* v = field(o, key);
  if (!v) return std::nullopt;
  if (!v->is_boolean()) wrong_type(key, "a boolean");
  return v->template get<bool>();
}

template <class J>
std::optional<std::string> get_string(const J& o, const char* key) {
  const J* v = field(o, key);
  if (!v) return std::nullopt;
  if (!v->is_string()) wrong_type(key, "a string");
  return v->template get<std::string>();
}

template <class J>
const J* get_object(const J& o, const char* key) {
  const J* v = field(o, key);
  if (v && !v->is_object()) wrong_type(key, "an object");
  return v;
}

template <class J>
const J* get_array(const J& o, const char* key) {
  const J* v = field(o, key);
  if (v && !v->is_array()) wrong_type(key, "an array");
  return v;
}

template <class J>
RequestOptions parse_request_options(const J& body, Api api) {
  reject_unsupported(body, api);
  RequestOptions r;
  SamplingParams& p = r.sampling;
  std::optional<int64_t> max_tokens = get_int(body, "max_tokens");
  if (api == Api::kChat)
    if (auto m = get_int(body, "max_completion_tokens")) max_tokens = m;
  const int64_t min_tokens = api == Api::kCompletions ? 0 : 1;
  if (max_tokens && *max_tokens < min_tokens)
    throw ApiError(ErrorCode::kInvalidRequest,
                   "max_tokens must be at least " + std::to_string(min_tokens) + ", got " + std::to_string(*max_tokens),
                   "max_tokens");
  p.max_tokens = max_tokens.value_or(api == Api::kCompletions ? 16 : -1);
  p.temperature = get_float(body, "temperature", 1.0f);
  p.top_p = get_float(body, "top_p", 1.0f);
  if (auto k = get_int(body, "top_k")) p.top_k = int32_t(std::clamp<int64_t>(*k, -2, INT32_MAX));
  p.min_p = get_float(body, "min_p", 0.0f);
  p.presence_penalty = get_float(body, "presence_penalty", 0.0f);
  p.frequency_penalty = get_float(body, "frequency_penalty", 0.0f);
  p.repetition_penalty = get_float(body, "repetition_penalty", 1.0f);
  if (auto s = get_int(body, "seed")) p.seed = uint64_t(*s);
  p.ignore_eos = get_bool(body, "ignore_eos").value_or(false);
  parse_stop(body, p);
  if (const J* ids = get_array(body, "stop_token_ids"))
    for (const auto& v : *ids) {
      if (!v.is_number_integer()) wrong_type("stop_token_ids", "an array of token ids");
      p.stop_token_ids.push_back(int32_t(std::clamp<int64_t>(v.template get<int64_t>(), -1, INT32_MAX)));
    }
  parse_logit_bias(body, p);
  parse_logprobs(body, api, p);
  r.stream = get_bool(body, "stream").value_or(false);
  if (const J* so = get_object(body, "stream_options")) r.include_usage = get_bool(*so, "include_usage").value_or(false);
  r.skip_special_tokens = get_bool(body, "skip_special_tokens").value_or(true);
  parse_choices(body, api, r);
  return r;
}

#define DI_BODY_READERS(J)                                                        \
  template std::optional<double> get_number<J>(const J&, const char*);           \
  template std::optional<int64_t> get_int<J>(const J&, const char*);             \
  template std::optional<bool> get_bool<J>(const J&, const char*);               \
  template std::optional<std::string> get_string<J>(const J&, const char*);      \
  template const J* get_object<J>(const J&, const char*);                        \
  template const J* get_array<J>(const J&, const char*);                         \
  template RequestOptions parse_request_options<J>(const J&, Api);
DI_BODY_READERS(json)
DI_BODY_READERS(ordered_json)
#undef DI_BODY_READERS

}  // namespace deepinfer::server
