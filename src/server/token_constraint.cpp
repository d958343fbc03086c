#include "server/token_constraint.h"

#include <algorithm>
#include <numeric>

#include "core/log.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer::server {

// ------------------------------------------------------------------ token index

namespace {

// Fills a trie from token ids already in byte order.
void fill_trie(TokenTrie& t, const std::vector<int32_t>& ids, const tokenizer::Tokenizer& tok,
               const std::vector<uint32_t>& offset_of) {
  std::string_view prev;
  for (int32_t id : ids) {
    const std::string& b = tok.token_bytes(id);
    size_t l = 0;
    while (l < prev.size() && l < b.size() && prev[l] == b[l]) ++l;
    t.ids.push_back(id);
    t.offset.push_back(offset_of[size_t(id)]);
    t.length.push_back(uint16_t(b.size()));
    t.lcp.push_back(uint16_t(l));
    t.added.push_back(tok.is_added_token(id) ? 1 : 0);
    prev = b;  // (tok.token_bytes returns a stable reference)
  }
  // Backwards: next[d] is the first later entry whose common prefix with its predecessor is
  // at most d bytes, i.e. the first that leaves the subtree of the current d + 1 bytes.
  const size_t n = t.ids.size();
  size_t max_len = 0;
  for (uint16_t l : t.length) max_len = std::max<size_t>(max_len, l);
  std::vector<uint32_t> next(max_len + 1, uint32_t(n));
  std::vector<uint32_t> count(n);
  for (size_t i = 0; i < n; ++i) count[i] = t.length[i] > t.lcp[i] ? uint32_t(t.length[i] - t.lcp[i]) : 0;
  t.skip_off.resize(n);
  uint32_t total = 0;
  for (size_t i = 0; i < n; ++i) t.skip_off[i] = total, total += count[i];
  t.skip.resize(total);
  for (size_t i = n; i-- > 0;) {
    for (uint32_t k = 0; k < count[i]; ++k) t.skip[t.skip_off[i] + k] = next[t.lcp[i] + k];
    for (size_t d = t.lcp[i]; d <= max_len; ++d) next[d] = uint32_t(i);
  }
}

bool complete_utf8(std::string_view b) {
  uint8_t need = 0, lo = 0x80, hi = 0xBF;
  for (char c : b)
    if (!utf8_step(uint8_t(c), need, lo, hi)) return false;
  return need == 0;
}

bool json_string_chars(std::string_view b) {
  for (char c : b)
    if (uint8_t(c) < 0x20 || c == '"' || c == '\\') return false;
  return complete_utf8(b) && !contains_marker(b);
}

bool dsml_text_chars(std::string_view b) {
  for (char c : b)
    if (c == '<' || (uint8_t(c) < 0x20 && c != '\t' && c != '\n' && c != '\r')) return false;
  return complete_utf8(b);
}

}  // namespace

std::shared_ptr<const TokenIndex> TokenIndex::build(const tokenizer::Tokenizer& tok) {
  auto ix = std::make_shared<TokenIndex>();
  const int32_t n = tok.vocab_size();
  ix->entry_of.assign(size_t(n), -1);
  std::vector<int32_t> ids;
  for (int32_t id = 0; id < n; ++id)
    if (!tok.is_special(id) && !tok.token_bytes(id).empty() && tok.token_bytes(id).size() < 65536) ids.push_back(id);
  std::sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) {
    const std::string &x = tok.token_bytes(a), &y = tok.token_bytes(b);
    return x != y ? x < y : a < b;
  });
  std::vector<uint32_t> offset_of(size_t(n), 0);
  for (int32_t id : ids) {
    offset_of[size_t(id)] = uint32_t(ix->bytes.size());
    ix->bytes += tok.token_bytes(id);
    ix->max_length = std::max(ix->max_length, tok.token_bytes(id).size());
  }
  fill_trie(ix->all, ids, tok, offset_of);
  for (size_t e = 0; e < ids.size(); ++e) ix->entry_of[size_t(ids[e])] = int32_t(e);
  for (int k = 0; k < kClasses; ++k) {
    ix->class_bits[k].assign(size_t((n + 63) / 64), 0);
    std::vector<int32_t> rest;
    for (int32_t id : ids) {
      const std::string& b = tok.token_bytes(id);
      const bool in = !tok.is_added_token(id) && (k == 0 ? json_string_chars(b) : dsml_text_chars(b));
      if (in) ix->class_bits[k][size_t(id) / 64] |= uint64_t(1) << (id % 64);
      else rest.push_back(id);
    }
    fill_trie(ix->rest[k], rest, tok, offset_of);
  }
  return ix;
}

std::string_view TokenIndex::token(int32_t id) const {
  if (id < 0 || size_t(id) >= entry_of.size() || entry_of[size_t(id)] < 0) return {};
  const size_t e = size_t(entry_of[size_t(id)]);
  return std::string_view(bytes).substr(all.offset[e], all.length[e]);
}

std::shared_ptr<TokenIndexCache> make_token_index_cache() { return std::make_shared<TokenIndexCache>(); }

std::shared_ptr<const TokenIndex> TokenIndexCache::get(const tokenizer::Tokenizer& tok) {
  std::call_once(once_, [&] { index_ = TokenIndex::build(tok); });
  return index_;
}

// ------------------------------------------------------------------ the constraint

namespace {

constexpr std::string_view kThinkEnd = "</think>";

template <class G>
class GrammarConstraint final : public TokenConstraint {
  enum Phase { kReasoning, kWait, kForced, kGrammar, kDone, kFree };

 public:
  GrammarConstraint(ConstraintStart start, G grammar, typename G::State state, bool added_tokens)
      : index_(std::move(start.index)),
        eos_(start.eos_token_id),
        forced_(std::move(start.forced)),
        wait_for_(std::move(start.wait_for)),
        grammar_(std::move(grammar)),
        state_(state),
        added_tokens_(added_tokens),
        fast_(start.fast_masks),
        bytes_fed_(start.bytes_fed),
        stack_(index_->max_length + 1) {
    phase_ = start.after_reasoning ? kReasoning : after_reasoning_phase();
  }

  Phase after_reasoning_phase() const {
    return !wait_for_.empty() ? kWait : forced_.empty() ? kGrammar : kForced;
  }

  bool allowed(uint64_t* mask, int64_t vocab) override {
    auto set = [&](int32_t t) {
      if (t >= 0 && t < vocab) mask[t >> 6] |= uint64_t(1) << (t & 63);
    };
    switch (phase_) {
      case kReasoning:
      case kWait:
      case kFree: return false;
      case kForced: set(forced_[forced_pos_]); return true;
      case kDone: set(eos_); return true;
      case kGrammar: break;
    }
    const TokenIndex& ix = *index_;
    const auto arena = grammar_.arena_size();
    const int cls = fast_ ? grammar_.fast_class(state_) : -1;
    if (cls >= 0) {
      // Every token of the class is allowed here: copy its bits, walk only the others.
      const std::vector<uint64_t>& bits = ix.class_bits[cls];
      const size_t words = std::min<size_t>(bits.size(), size_t((vocab + 63) / 64));
      for (size_t w = 0; w < words; ++w) mask[w] |= bits[w];
      if (vocab % 64 && words == size_t((vocab + 63) / 64)) mask[words - 1] &= (uint64_t(1) << (vocab % 64)) - 1;
      walk_skipping(ix.rest[cls], mask, vocab);
    } else if (fast_) {
      walk_skipping(ix.all, mask, vocab);
    } else {
      walk_linear(ix.all, mask, vocab);
    }
    grammar_.truncate(arena);
    if (bytes_fed_) *bytes_fed_ += fed_;
    fed_ = 0;
    if (grammar_.complete(state_)) set(eos_);
    return true;
  }

  void set_bit(uint64_t* mask, int64_t vocab, int32_t t) const {
    if (t >= 0 && t < vocab) mask[t >> 6] |= uint64_t(1) << (t & 63);
  }

  // Feeds entry i's bytes from depth d on (stack_[0..d] hold the states of its first d
  // bytes); returns the depth of the first refused byte, or its length when all pass.
  size_t feed_entry(const TokenTrie& t, size_t i, size_t d) {
    const uint8_t* b = reinterpret_cast<const uint8_t*>(index_->bytes.data()) + t.offset[i];
    const size_t len = t.length[i];
    const size_t d0 = d;
    for (; d < len; ++d) {
      stack_[d + 1] = stack_[d];
      if (!grammar_.feed(stack_[d + 1], b[d])) {
        fed_ += d + 1 - d0;
        return d;
      }
    }
    fed_ += len - d0;
    return len;
  }

  // The walk with skip tables: a refused prefix jumps past its subtree at once.
  void walk_skipping(const TokenTrie& t, uint64_t* mask, int64_t vocab) {
    const size_t n = t.ids.size();
    stack_[0] = state_;
    size_t ok_depth = 0;
    for (size_t i = 0; i < n;) {
      const size_t d0 = std::min<size_t>(t.lcp[i], ok_depth);
      const size_t d = feed_entry(t, i, d0);
      if (d == t.length[i]) {
        ok_depth = d;
        if (added_tokens_ || !t.added[i]) set_bit(mask, vocab, t.ids[i]);
        ++i;
        continue;
      }
      ok_depth = d;
      i = t.skip[t.skip_off[i] + (d - t.lcp[i])];
    }
  }

  // The reference walk: refused subtrees are passed over entry by entry.
  void walk_linear(const TokenTrie& t, uint64_t* mask, int64_t vocab) {
    const size_t n = t.ids.size();
    stack_[0] = state_;
    size_t ok_depth = 0;
    for (size_t i = 0; i < n; ++i) {
      const size_t d = feed_entry(t, i, std::min<size_t>(t.lcp[i], ok_depth));
      if (d == t.length[i]) {
        ok_depth = d;
        if (added_tokens_ || !t.added[i]) set_bit(mask, vocab, t.ids[i]);
        continue;
      }
      ok_depth = d;
      while (i + 1 < n && t.lcp[i + 1] > d) ++i;
    }
  }

  // kWait with think_tail_ holding the latest output: once it contains wait_for_, the grammar
  // takes what follows it.
  void wait_for_text() {
    const size_t at = think_tail_.find(wait_for_);
    if (at == std::string::npos) {
      if (think_tail_.size() > wait_for_.size()) think_tail_.erase(0, think_tail_.size() - wait_for_.size());
      return;
    }
    phase_ = kGrammar;
    for (size_t i = at + wait_for_.size(); i < think_tail_.size(); ++i)
      if (!grammar_.feed(state_, uint8_t(think_tail_[i]))) {
        log_warn("constrained decoding: the text after the trigger does not fit the grammar; constraint dropped");
        phase_ = kFree;
        break;
      }
    think_tail_.clear();
  }

  void accept(int32_t token) override {
    switch (phase_) {
      case kReasoning: {
        if (token == eos_) {
          phase_ = kDone;
          return;
        }
        think_tail_ += index_->token(token);
        const size_t at = think_tail_.find(kThinkEnd);
        if (!wait_for_.empty()) {
          // The output parser ends the reasoning at a tool-call block too: hold that one as well.
          if (const size_t w = think_tail_.find(wait_for_); w != std::string::npos && w < at) {
            phase_ = kWait;
            wait_for_text();
            return;
          }
        }
        if (at != std::string::npos) {
          // (bytes after "</think>" in the same token are not checked, but may start wait_for)
          phase_ = after_reasoning_phase();
          think_tail_.erase(0, at + kThinkEnd.size());
          if (phase_ == kWait) wait_for_text();
        } else if (const size_t keep = std::max(kThinkEnd.size(), wait_for_.size()); think_tail_.size() > keep) {
          think_tail_.erase(0, think_tail_.size() - keep);
        }
        return;
      }
      case kWait:
        if (token == eos_) {
          phase_ = kDone;
          return;
        }
        think_tail_ += index_->token(token);
        wait_for_text();
        return;
      case kForced:
        if (++forced_pos_ == forced_.size()) phase_ = kGrammar;
        return;
      case kGrammar: {
        if (token == eos_) {
          phase_ = kDone;
          return;
        }
        for (char c : index_->token(token))
          if (!grammar_.feed(state_, uint8_t(c))) {
            // Cannot happen for a token the mask allowed; stop constraining rather than fail.
            log_warn("constrained decoding: token %d does not fit the grammar; constraint dropped", token);
            phase_ = kFree;
            return;
          }
        return;
      }
      case kDone:
      case kFree: return;
    }
  }

 private:
  std::shared_ptr<const TokenIndex> index_;
  int32_t eos_;
  std::vector<int32_t> forced_;
  size_t forced_pos_ = 0;
  std::string wait_for_;
  G grammar_;
  typename G::State state_;
  bool added_tokens_;
  bool fast_;
  uint64_t* bytes_fed_;
  uint64_t fed_ = 0;
  Phase phase_;
  std::string think_tail_;
  std::vector<typename G::State> stack_;
};

}  // namespace

std::shared_ptr<TokenConstraint> make_json_constraint(ConstraintStart start, JsonGrammar grammar, int32_t root_schema) {
  const JsonState s = grammar.start(root_schema);
  return std::make_shared<GrammarConstraint<JsonGrammar>>(std::move(start), std::move(grammar), s, false);
}

std::shared_ptr<TokenConstraint> make_tool_constraint(ConstraintStart start, ToolGrammar grammar, int named_tool) {
  const ToolState s = grammar.start(named_tool);
  return std::make_shared<GrammarConstraint<ToolGrammar>>(std::move(start), std::move(grammar), s, true);
}

}  // namespace deepinfer::server
