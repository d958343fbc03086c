// Streaming text output: an incremental detokenizer that only releases complete UTF-8
// characters, and a stop-string matcher that finds stop strings spanning token boundaries
// and holds back text that could still turn into one.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace deepinfer::tokenizer {

// Feed ids one at a time (or in batches); every call returns the text that became
// complete. The output is always valid UTF-8: an ill-formed byte sequence becomes U+FFFD
// (per maximal subpart), and flush() turns a truncated trailing character into one
// U+FFFD. So the concatenation of all push() results and flush() equals
// utf8_lossy(tokenizer.decode(all ids)), which is what tokenizers' decode() returns.
class IncrementalDetokenizer {
 public:
  explicit IncrementalDetokenizer(Tokenizer tokenizer, bool skip_special_tokens = false);

  std::string push(int32_t id);
  std::string push(std::span<const int32_t> ids);
  std::string flush();
  void reset() { pending_.clear(); }
  std::size_t pending_bytes() const { return pending_.size(); }

 private:
  std::string drain(bool final);
  Tokenizer tokenizer_;
  bool skip_special_;
  std::string pending_;  // bytes of an incomplete trailing character (at most 3)
};

// Watches a text stream for any of a set of stop strings (non-empty ones; empty strings
// are ignored). push() returns the text that is safe to emit: everything except a suffix
// that is a proper prefix of some stop string. When a stop string completes, the text
// before it is returned with stopped = true and everything after is discarded. If several
// stop strings complete, the one that ends first wins (then the longest), which is what a
// stream can decide without look-ahead. The stop string itself is not emitted.
class StopStringMatcher {
 public:
  explicit StopStringMatcher(std::vector<std::string> stop_strings);

  struct Result {
    std::string text;
    bool stopped = false;
    int stop_index = -1;  // index into the constructor's list
  };
  Result push(std::string_view text);
  // End of stream without a stop: returns the held-back text.
  std::string flush();
  bool stopped() const { return stopped_; }
  std::size_t held_bytes() const { return held_.size(); }
  void reset() {
    held_.clear();
    stopped_ = false;
  }

 private:
  std::vector<std::string> stops_;
  std::vector<int> stop_index_;
  std::string held_;
  bool stopped_ = false;
};

// Convenience: ids in, stop-checked text out.
class StreamingDecoder {
 public:
  StreamingDecoder(Tokenizer tokenizer, std::vector<std::string> stop_strings, bool skip_special_tokens = false)
      : detok_(std::move(tokenizer), skip_special_tokens), stop_(std::move(stop_strings)) {}

  StopStringMatcher::Result push(int32_t id);
  // End of generation: releases whatever is pending (unless a stop string was hit).
  StopStringMatcher::Result finish();
  bool stopped() const { return stop_.stopped(); }

 private:
  IncrementalDetokenizer detok_;
  StopStringMatcher stop_;
};

}  // namespace deepinfer::tokenizer
