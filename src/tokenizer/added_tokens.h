// Added-token (special token) matching as Hugging Face `tokenizers` does it before
// pre-tokenization: leftmost-longest, non-overlapping occurrences of the token contents
// (aho-corasick MatchKind::LeftmostLongest), then the per-token flags single_word, lstrip
// and rstrip are applied (AddedVocabulary::find_matches).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace deepinfer::tokenizer {

struct AddedToken {
  int32_t id = 0;
  std::string content;
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = false;
  bool special = false;
};

// A span of the input: either an added token (token >= 0, index into the token list given
// to AddedTokenMatcher) or text still to be tokenized (token < 0).
struct TextSpan {
  std::size_t begin, end;  // byte offsets
  int32_t token;
};

class AddedTokenMatcher {
 public:
  AddedTokenMatcher() = default;
  // `tokens` must outlive the matcher; entries with empty content never match.
  explicit AddedTokenMatcher(const std::vector<AddedToken>* tokens, const std::vector<std::size_t>& which);

  bool empty() const { return nodes_.size() <= 1; }

  // Splits `text` (valid UTF-8) into spans, appending them to `out` with offsets shifted
  // by `base`. Tokens with special == true are ignored when skip_special is set (what
  // tokenizers does with encode_special_tokens = true).
  void split(std::string_view text, std::size_t base, bool skip_special, std::vector<TextSpan>& out) const;

 private:
  struct Node {
    int32_t token = -1;  // index into *tokens_ of a token ending here
    uint32_t edge_begin = 0, edge_end = 0;
  };
  struct Edge {
    unsigned char byte;
    uint32_t child;
  };
  const std::vector<AddedToken>* tokens_ = nullptr;
  std::vector<Node> nodes_;
  std::vector<Edge> edges_;
  bool first_byte_[256] = {};
};

}  // namespace deepinfer::tokenizer
