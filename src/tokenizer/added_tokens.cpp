#include "tokenizer/added_tokens.h"

#include <algorithm>
#include <map>

#include "tokenizer/unicode.h"

namespace deepinfer::tokenizer {

namespace {

// Code point that ends just before byte offset `end` of valid UTF-8 text (end > 0).
char32_t char_before(std::string_view s, std::size_t end, std::size_t& start) {
  start = end - 1;
  while (start > 0 && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
  std::size_t len;
  char32_t cp = 0xFFFD;
  utf8_step(reinterpret_cast<const unsigned char*>(s.data()) + start, end - start, len, cp);
  return cp;
}

char32_t char_at(std::string_view s, std::size_t pos, std::size_t& len) {
  char32_t cp = 0xFFFD;
  if (utf8_step(reinterpret_cast<const unsigned char*>(s.data()) + pos, s.size() - pos, len, cp) != Utf8Step::kValid) {
    len = 1;
  }
  return cp;
}

}  // namespace

AddedTokenMatcher::AddedTokenMatcher(const std::vector<AddedToken>* tokens, const std::vector<std::size_t>& which)
    : tokens_(tokens) {
  // Build a pointer trie first, then flatten it with sorted edges.
  struct Build {
    int32_t token = -1;
    std::map<unsigned char, uint32_t> kids;
  };
  std::vector<Build> b(1);
  for (std::size_t t : which) {
    const std::string& c = (*tokens)[t].content;
    if (c.empty()) continue;
    uint32_t node = 0;
    for (unsigned char ch : c) {
      auto it = b[node].kids.find(ch);
      if (it == b[node].kids.end()) {
        b.push_back(Build{});
        const uint32_t child = static_cast<uint32_t>(b.size() - 1);
        b[node].kids.emplace(ch, child);
        node = child;
      } else {
        node = it->second;
      }
    }
    b[node].token = static_cast<int32_t>(t);  // a duplicate content keeps the later token
    first_byte_[static_cast<unsigned char>(c[0])] = true;
  }
  nodes_.resize(b.size());
  for (std::size_t i = 0; i < b.size(); ++i) {
    nodes_[i].token = b[i].token;
    nodes_[i].edge_begin = static_cast<uint32_t>(edges_.size());
    for (const auto& [ch, child] : b[i].kids) edges_.push_back(Edge{ch, child});
    nodes_[i].edge_end = static_cast<uint32_t>(edges_.size());
  }
}

void AddedTokenMatcher::split(std::string_view text, std::size_t base, bool skip_special,
                              std::vector<TextSpan>& out) const {
  const std::size_t n = text.size();
  std::size_t start_offset = 0;
  std::size_t i = 0;
  while (i < n && !empty()) {
    if (!first_byte_[static_cast<unsigned char>(text[i])]) {
      ++i;
      continue;
    }
    // Longest token starting at i.
    uint32_t node = 0;
    int32_t best = -1;
    std::size_t best_end = 0;
    for (std::size_t j = i; j < n; ++j) {
      const unsigned char ch = static_cast<unsigned char>(text[j]);
      const Edge* eb = edges_.data() + nodes_[node].edge_begin;
      const Edge* ee = edges_.data() + nodes_[node].edge_end;
      const Edge* e = std::lower_bound(eb, ee, ch, [](const Edge& x, unsigned char v) { return x.byte < v; });
      if (e == ee || e->byte != ch) break;
      node = e->child;
      if (nodes_[node].token >= 0) {
        best = nodes_[node].token;
        best_end = j + 1;
      }
    }
    if (best < 0) {
      ++i;
      continue;
    }
    const std::size_t mstart = i;
    const std::size_t mend = best_end;
    i = best_end;  // matches never overlap, even when this one is dropped below
    const AddedToken& tok = (*tokens_)[static_cast<std::size_t>(best)];
    if (skip_special && tok.special) continue;
    if (tok.single_word) {
      std::size_t tmp;
      const bool start_space = mstart == 0 || !is_rust_word(char_before(text, mstart, tmp));
      const bool stop_space = mend == n || !is_rust_word(char_at(text, mend, tmp));
      if (!start_space || !stop_space) continue;
    }
    std::size_t start = mstart, stop = mend;
    if (tok.lstrip) {
      std::size_t p = start;
      while (p > 0) {
        std::size_t cs;
        const char32_t c = char_before(text, p, cs);
        if (!is_white_space(c)) break;
        p = cs;
      }
      start = std::max(p, start_offset);
    }
    if (tok.rstrip) {
      while (stop < n) {
        std::size_t len;
        const char32_t c = char_at(text, stop, len);
        if (!is_white_space(c)) break;
        stop += len;
      }
    }
    // Only a token that starts with white space can overlap the previous token's rstrip;
    // tokenizers would emit overlapping spans there, this keeps the spans disjoint.
    if (stop <= start_offset) continue;
    if (start < start_offset) start = start_offset;
    if (start_offset < start) out.push_back(TextSpan{base + start_offset, base + start, -1});
    out.push_back(TextSpan{base + start, base + stop, best});
    start_offset = stop;
  }
  if (start_offset < n) out.push_back(TextSpan{base + start_offset, base + n, -1});
}

}  // namespace deepinfer::tokenizer
