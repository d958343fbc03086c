// Reading request bodies: typed field access that names the offending field, and the
// sampling fields shared by /v1/completions and /v1/chat/completions (vLLM's spellings).
// Wrong types and out-of-range values throw ApiError (400); unknown fields are ignored,
// as OpenAI clients send extras.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "deepinfer/sampling_params.h"

namespace deepinfer::server {

using json = nlohmann::json;
using ordered_json = nlohmann::ordered_json;  // chat::Json, the form the chat encoders take

// A request body is parsed once, through parse_json_bounded (core/json_limits.h: every
// client JSON text is held to its size and depth limits), into the type its route needs:
// the routes that render a chat prompt take it key-ordered (tool schemas are rendered in the
// client's order), the others plain. The readers below take either. A body that is not a
// JSON object is kInvalidJson.
json parse_body(const std::string& body);
ordered_json parse_body_ordered(const std::string& body);
// Bodies parsed so far by the two above (a test checks each request parses its body once).
uint64_t bodies_parsed();

// Missing or null -> nullopt; present with the wrong type -> ApiError naming `key`.
// J: json or ordered_json.
template <class J>
std::optional<double> get_number(const J& o, const char* key);
template <class J>
std::optional<int64_t> get_int(const J& o, const char* key);
template <class J>
std::optional<bool> get_bool(const J& o, const char* key);
template <class J>
std::optional<std::string> get_string(const J& o, const char* key);
template <class J>
const J* get_object(const J& o, const char* key);
template <class J>
const J* get_array(const J& o, const char* key);

enum class Api { kCompletions, kChat };

struct RequestOptions {
  SamplingParams sampling;
  bool stream = false;
  bool include_usage = false;       // stream_options.include_usage
  bool skip_special_tokens = true;
  int64_t n = 1;        // choices per prompt
  int64_t best_of = 1;  // completions: samples drawn per prompt, the n best (cumulative logprob) kept
  bool echo = false;    // completions: the prompt (and its logprobs) before each choice
};

// Most samples one request may ask for (prompts x best_of), so one request cannot queue
// unbounded work.
constexpr int64_t kMaxSamplesPerRequest = 128;

// The sampling and streaming fields. Defaults: completions max_tokens 16 (OpenAI / vLLM),
// chat max_tokens unlimited (up to the context). Completions accept max_tokens 0 (the
// prompt is scored, nothing generated), echo and best_of; chat needs max_tokens >= 1.
template <class J>
RequestOptions parse_request_options(const J& body, Api api);

}  // namespace deepinfer::server
