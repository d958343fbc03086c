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

// Parses a body that must be a JSON object (kInvalidJson otherwise), within the limits every
// client JSON text is held to (core/json_limits.h).
json parse_body(const std::string& body);
// The same body as key-ordered JSON, the form the chat encoders take.
nlohmann::ordered_json parse_body_ordered(const std::string& body);

// Missing or null -> nullopt; present with the wrong type -> ApiError naming `key`.
std::optional<double> get_number(const json& o, const char* key);
std::optional<int64_t> get_int(const json& o, const char* key);
std::optional<bool> get_bool(const json& o, const char* key);
std::optional<std::string> get_string(const json& o, const char* key);
const json* get_object(const json& o, const char* key);
const json* get_array(const json& o, const char* key);

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
RequestOptions parse_request_options(const json& body, Api api);

}  // namespace deepinfer::server
