#include "engine/stop_matcher.h"

#include <algorithm>

namespace deepinfer::engine {

StopMatcher::StopMatcher(std::vector<std::string> stops) {
  for (auto& s : stops)
    if (!s.empty()) stops_.push_back(std::move(s));
  for (const auto& s : stops_) keep_ = std::max(keep_, s.size() - 1);
}

int StopMatcher::push(std::string_view bytes) {
  if (stops_.empty() || bytes.empty()) return -1;
  const size_t old = tail_.size();
  tail_.append(bytes);
  int best = -1;
  size_t best_end = std::string::npos;
  for (size_t i = 0; i < stops_.size(); ++i) {
    const std::string& s = stops_[i];
    // Only matches that end inside the new bytes are new; start the search accordingly.
    const size_t from = old >= s.size() - 1 ? old - (s.size() - 1) : 0;
    const size_t at = tail_.find(s, from);
    if (at == std::string::npos) continue;
    const size_t end = at + s.size();
    if (best < 0 || end < best_end || (end == best_end && s.size() > stops_[size_t(best)].size())) {
      best = int(i);
      best_end = end;
    }
  }
  if (tail_.size() > keep_) tail_.erase(0, tail_.size() - keep_);
  return best;
}

}  // namespace deepinfer::engine
