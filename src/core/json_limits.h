// The one way text from outside the process becomes a JSON value: a request body, JSON carried
// inside one of its strings (tool-call arguments), or what the Python package is handed.
//
// nlohmann's parser itself is iterative, but copying, dumping, comparing and destroying a value
// all recurse once per nesting level, so an unbounded nesting (200 KB of '[' is 100k levels)
// overflows a thread's stack long after the parse succeeded. The depth is therefore measured
// by a linear scan before anything is built, and every caller gets the same limits.
//
// The key-ordered type (ordered_json, which the chat encoders need) finds a key by walking the
// object's keys, so building an object of n keys costs n^2 / 2 comparisons: 40k keys in one
// 430 KB object took 1.7 s, and a 16 MiB body could hold a worker for hours. The same scan
// counts every object's keys: at most max_object_keys in one object, and at most
// max_key_pairs (the sum over objects of n (n - 1) / 2, about 0.1 s of comparisons) in all.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace deepinfer {

struct JsonLimits {
  size_t max_depth = 64;                   // arrays / objects inside each other
  size_t max_bytes = size_t(64) << 20;     // the text itself
  size_t max_object_keys = 4096;           // members of one object
  uint64_t max_key_pairs = uint64_t(1) << 26;  // sum over objects of n (n - 1) / 2
};

// The largest object (members) and the sum over objects of n (n - 1) / 2, by a linear scan that
// respects strings (the text need not be valid JSON; a member is counted at its ':'). Objects
// nested deeper than `max_depth` are not counted (the depth limit refuses such text anyway).
struct JsonObjectKeys {
  size_t most = 0;
  uint64_t pairs = 0;
};
JsonObjectKeys json_object_keys(std::string_view text, size_t max_depth = 64);

// Deepest nesting of arrays and objects in a JSON text, by a linear scan that respects strings
// (the text need not be valid JSON). Stops counting once past `stop_at`.
size_t json_nesting_depth(std::string_view text, size_t stop_at = SIZE_MAX);

// Why `text` may not be parsed under `limits` ("" when it may): too long, nested too deep, or
// objects with too many keys.
std::string json_limit_violation(std::string_view text, const JsonLimits& limits = {});

// Parses `text` as JsonT (nlohmann::json or ordered_json) within `limits`. nullopt when it is
// too big, too deep, has too many keys or is not JSON; `why` (if given) then says which.
template <class JsonT>
std::optional<JsonT> parse_json_bounded(std::string_view text, std::string* why = nullptr,
                                        const JsonLimits& limits = {}) {
  std::string violation = json_limit_violation(text, limits);
  if (violation.empty()) {
    JsonT j = JsonT::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
    if (!j.is_discarded()) return j;
    violation = "not valid JSON";
  }
  if (why) *why = std::move(violation);
  return std::nullopt;
}

}  // namespace deepinfer
