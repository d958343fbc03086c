#include "core/json_limits.h"

#include <algorithm>
#include <vector>

namespace deepinfer {

namespace {

// Calls on(c) for every bracket, brace and colon of `text` outside strings, in order, until it
// returns false.
template <class On>
void for_each_structural(std::string_view text, On&& on) {
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{' || c == ']' || c == '}' || c == ':') {
      if (!on(c)) return;
    }
  }
}

}  // namespace

size_t json_nesting_depth(std::string_view text, size_t stop_at) {
  size_t depth = 0, deepest = 0;
  for_each_structural(text, [&](char c) {
    if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
      return deepest <= stop_at;
    }
    if (c != ':' && depth > 0) --depth;  // unbalanced closers do not go negative
    return true;
  });
  return deepest;
}

JsonObjectKeys json_object_keys(std::string_view text, size_t max_depth) {
  JsonObjectKeys out;
  // Per open container up to max_depth: its members so far, or kArray.
  constexpr size_t kArray = SIZE_MAX;
  std::vector<size_t> open;
  size_t depth = 0;
  for_each_structural(text, [&](char c) {
    if (c == '[' || c == '{') {
      if (++depth <= max_depth) open.push_back(c == '{' ? 0 : kArray);
    } else if (c != ':') {
      if (depth > 0 && depth-- <= max_depth) open.pop_back();
    } else if (depth > 0 && depth <= max_depth && open.back() != kArray) {
      out.pairs += open.back();  // the new key against each one before it
      out.most = std::max(out.most, ++open.back());
    }
    return true;
  });
  return out;
}

std::string json_limit_violation(std::string_view text, const JsonLimits& limits) {
  if (text.size() > limits.max_bytes)
    return "longer than " + std::to_string(limits.max_bytes) + " bytes";
  if (json_nesting_depth(text, limits.max_depth) > limits.max_depth)
    return "nested deeper than " + std::to_string(limits.max_depth) + " levels of arrays / objects";
  const JsonObjectKeys keys = json_object_keys(text, limits.max_depth);
  if (keys.most > limits.max_object_keys)
    return "an object with more than " + std::to_string(limits.max_object_keys) + " keys";
  if (keys.pairs > limits.max_key_pairs)
    return "too many keys in its objects (the sum over objects of n (n - 1) / 2 is over " +
           std::to_string(limits.max_key_pairs) + ")";
  return "";
}

}  // namespace deepinfer
