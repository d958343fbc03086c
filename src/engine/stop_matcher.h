// Stop strings over the bytes of the generated tokens. A stop string may span any number
// of tokens; only the last (longest stop - 1) bytes are kept between pushes, so the cost
// per token does not grow with the output. The server's incremental detokenizer runs the
// same test on the same bytes to decide what text to show (tokenizer/detokenizer.h).
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace deepinfer::engine {

class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops);
  bool empty() const { return stops_.empty(); }
  // Appends the bytes of one token. Returns the index of the stop string completed by them
  // (the one ending first, then the longest), or -1.
  int push(std::string_view bytes);
  const std::string& stop(int index) const { return stops_[size_t(index)]; }

 private:
  std::vector<std::string> stops_;
  size_t keep_ = 0;   // longest stop - 1
  std::string tail_;  // the last keep_ bytes pushed so far
};

}  // namespace deepinfer::engine
