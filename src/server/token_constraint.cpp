#include "server/token_constraint.h"

#include <algorithm>
#include <numeric>

#include "core/log.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer::server {

// ------------------------------------------------------------------ token index

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
  std::string_view prev;
  for (int32_t id : ids) {
    const std::string& b = tok.token_bytes(id);
    size_t l = 0;
    while (l < prev.size() && l < b.size() && prev[l] == b[l]) ++l;
    ix->entry_of[size_t(id)] = int32_t(ix->ids.size());
    ix->ids.push_back(id);
    ix->offset.push_back(uint32_t(ix->bytes.size()));
    ix->length.push_back(uint16_t(b.size()));
    ix->lcp.push_back(uint16_t(l));
    ix->added.push_back(tok.is_added_token(id) ? 1 : 0);
    ix->max_length = std::max(ix->max_length, b.size());
    ix->bytes += b;
    prev = b;  // (tok.token_bytes returns a stable reference)
  }
  return ix;
}

std::string_view TokenIndex::token(int32_t id) const {
  if (id < 0 || size_t(id) >= entry_of.size() || entry_of[size_t(id)] < 0) return {};
  const size_t e = size_t(entry_of[size_t(id)]);
  return std::string_view(bytes).substr(offset[e], length[e]);
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
 public:
  GrammarConstraint(ConstraintStart start, G grammar, typename G::State state, bool added_tokens)
      : index_(std::move(start.index)),
        eos_(start.eos_token_id),
        forced_(std::move(start.forced)),
        grammar_(std::move(grammar)),
        state_(state),
        added_tokens_(added_tokens),
        stack_(index_->max_length + 1) {
    phase_ = start.after_reasoning ? kReasoning : forced_.empty() ? kGrammar : kForced;
  }

  bool allowed(uint64_t* mask, int64_t vocab) override {
    auto set = [&](int32_t t) {
      if (t >= 0 && t < vocab) mask[t >> 6] |= uint64_t(1) << (t & 63);
    };
    switch (phase_) {
      case kReasoning:
      case kFree: return false;
      case kForced: set(forced_[forced_pos_]); return true;
      case kDone: set(eos_); return true;
      case kGrammar: break;
    }
    const TokenIndex& ix = *index_;
    const size_t arena = grammar_.arena_size();
    const size_t n = ix.ids.size();
    const uint8_t* bytes = reinterpret_cast<const uint8_t*>(ix.bytes.data());
    stack_[0] = state_;
    size_t ok_depth = 0;  // stack_[0..ok_depth] hold the states of the current prefix
    for (size_t i = 0; i < n; ++i) {
      const uint8_t* b = bytes + ix.offset[i];
      const size_t len = ix.length[i];
      size_t d = std::min<size_t>(ix.lcp[i], ok_depth);
      bool ok = true;
      for (; d < len; ++d) {
        stack_[d + 1] = stack_[d];
        if (!grammar_.feed(stack_[d + 1], b[d])) {
          ok = false;
          break;
        }
      }
      if (ok) {
        ok_depth = len;
        if (added_tokens_ || !ix.added[i]) set(ix.ids[i]);
        continue;
      }
      ok_depth = d;  // bytes [0, d] are refused: skip every token starting with them
      while (i + 1 < n && ix.lcp[i + 1] > d) ++i;
    }
    grammar_.truncate(arena);
    if (grammar_.complete(state_)) set(eos_);
    return true;
  }

  void accept(int32_t token) override {
    switch (phase_) {
      case kReasoning: {
        if (token == eos_) {
          phase_ = kDone;
          return;
        }
        think_tail_ += index_->token(token);
        if (think_tail_.find(kThinkEnd) != std::string::npos) {
          phase_ = forced_.empty() ? kGrammar : kForced;  // (bytes after "</think>" in the same token are not checked)
        } else if (think_tail_.size() > kThinkEnd.size()) {
          think_tail_.erase(0, think_tail_.size() - kThinkEnd.size());
        }
        return;
      }
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
  enum Phase { kReasoning, kForced, kGrammar, kDone, kFree };
  std::shared_ptr<const TokenIndex> index_;
  int32_t eos_;
  std::vector<int32_t> forced_;
  size_t forced_pos_ = 0;
  G grammar_;
  typename G::State state_;
  bool added_tokens_;
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
