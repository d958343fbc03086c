#include "tokenizer/detokenizer.h"

#include <algorithm>

#include "tokenizer/unicode.h"

namespace deepinfer::tokenizer {

IncrementalDetokenizer::IncrementalDetokenizer(Tokenizer tokenizer, bool skip_special_tokens)
    : tokenizer_(std::move(tokenizer)), skip_special_(skip_special_tokens) {}

std::string IncrementalDetokenizer::drain(bool final) {
  std::string out;
  const auto* p = reinterpret_cast<const unsigned char*>(pending_.data());
  const std::size_t n = pending_.size();
  std::size_t i = 0;
  while (i < n) {
    std::size_t len;
    char32_t cp;
    const Utf8Step st = utf8_step(p + i, n - i, len, cp);
    if (st == Utf8Step::kIncomplete && !final) break;  // wait for the rest of the character
    if (st == Utf8Step::kValid) {
      out.append(pending_, i, len);
    } else {
      out.append("\xEF\xBF\xBD");
    }
    i += len;
  }
  pending_.erase(0, i);
  return out;
}

std::string IncrementalDetokenizer::push(int32_t id) {
  if (skip_special_ && tokenizer_.is_special(id)) return std::string();
  pending_ += tokenizer_.token_bytes(id);
  return drain(false);
}

std::string IncrementalDetokenizer::push(std::span<const int32_t> ids) {
  for (int32_t id : ids) {
    if (skip_special_ && tokenizer_.is_special(id)) continue;
    pending_ += tokenizer_.token_bytes(id);
  }
  return drain(false);
}

std::string IncrementalDetokenizer::flush() { return drain(true); }

StopStringMatcher::StopStringMatcher(std::vector<std::string> stop_strings) {
  for (std::size_t i = 0; i < stop_strings.size(); ++i) {
    if (stop_strings[i].empty()) continue;
    stops_.push_back(std::move(stop_strings[i]));
    stop_index_.push_back(static_cast<int>(i));
  }
}

StopStringMatcher::Result StopStringMatcher::push(std::string_view text) {
  Result r;
  if (stopped_) {
    r.stopped = true;
    return r;
  }
  held_.append(text);
  // Earliest-ending occurrence of any stop string (ties: the longest, i.e. earliest start).
  // Everything before held_ was already checked, and held_ starts no later than any
  // occurrence that could end in the new text.
  std::size_t best_end = std::string::npos, best_start = 0;
  int best = -1;
  for (std::size_t k = 0; k < stops_.size(); ++k) {
    const std::size_t pos = held_.find(stops_[k]);
    if (pos == std::string::npos) continue;
    const std::size_t end = pos + stops_[k].size();
    if (best < 0 || end < best_end || (end == best_end && pos < best_start)) {
      best = static_cast<int>(k);
      best_end = end;
      best_start = pos;
    }
  }
  if (best >= 0) {
    r.text = held_.substr(0, best_start);
    r.stopped = true;
    r.stop_index = stop_index_[static_cast<std::size_t>(best)];
    stopped_ = true;
    held_.clear();
    return r;
  }
  // Hold back the longest suffix that is a proper prefix of some stop string.
  std::size_t hold = 0;
  for (const std::string& s : stops_) {
    const std::size_t max_k = std::min(s.size() - 1, held_.size());
    for (std::size_t k = max_k; k > hold; --k) {
      if (held_.compare(held_.size() - k, k, s, 0, k) == 0) {
        hold = k;
        break;
      }
    }
  }
  r.text = held_.substr(0, held_.size() - hold);
  held_.erase(0, held_.size() - hold);
  return r;
}

std::string StopStringMatcher::flush() {
  if (stopped_) return std::string();
  std::string out;
  out.swap(held_);
  return out;
}

StopStringMatcher::Result StreamingDecoder::push(int32_t id) {
  if (stop_.stopped()) {
    StopStringMatcher::Result r;
    r.stopped = true;
    return r;
  }
  return stop_.push(detok_.push(id));
}

StopStringMatcher::Result StreamingDecoder::finish() {
  StopStringMatcher::Result r;
  if (stop_.stopped()) {
    r.stopped = true;
    return r;
  }
  r = stop_.push(detok_.flush());
  if (!r.stopped) r.text += stop_.flush();
  return r;
}

}  // namespace deepinfer::tokenizer
