#include "core/json_limits.h"

#include <algorithm>
#include <vector>

namespace deepinfer {

size_t json_nesting_depth(std::string_view text, size_t stop_at) {
  size_t depth = 0, deepest = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
      if (deepest > stop_at) return deepest;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return deepest;
}

JsonObjectKeys json_object_keys(std::string_view text, size_t max_depth) {
  JsonObjectKeys out;
  // Per open container up to max_depth: its members so far, or kArray.
  constexpr size_t kArray = SIZE_MAX;
  std::vector<size_t> open;
  size_t depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth <= max_depth) open.push_back(c == '{' ? 0 : kArray);
    } else if ((c == ']' || c == '}') && depth > 0) {
      if (depth-- <= max_depth) open.pop_back();
    } else if (c == ':' && depth > 0 && depth <= max_depth && open.back() != kArray) {
      out.pairs += open.back();  // the new key against each one before it
      out.most = std::max(out.most, ++open.back());
    }
  }
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
