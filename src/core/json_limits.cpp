#include "core/json_limits.h"

#include <algorithm>

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

std::string json_limit_violation(std::string_view text, const JsonLimits& limits) {
  if (text.size() > limits.max_bytes)
    return "longer than " + std::to_string(limits.max_bytes) + " bytes";
  if (json_nesting_depth(text, limits.max_depth) > limits.max_depth)
    return "nested deeper than " + std::to_string(limits.max_depth) + " levels of arrays / objects";
  return "";
}

}  // namespace deepinfer
