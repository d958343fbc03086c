// A runner without a model: each sequence's "state" is the exact list of tokens it has
// processed, and its logits are a pure function of that list. So a sequence rebuilt by
// recompute or resumed from a snapshot gives the same logits only if its state really
// holds the right tokens - the fake runner checks positions and contents the way the real
// model would silently get them wrong.
#pragma once
#include <cstdint>
#include <map>
#include <set>
#include <stdexcept>
#include <vector>

#include "engine/runner.h"

namespace deepinfer::engine::testing {

inline uint64_t mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  return h * 0xff51afd7ed558ccdull;
}

class FakeRunner final : public Runner {
 public:
  explicit FakeRunner(int64_t vocab) : vocab_(vocab) {}

  int64_t vocab_size() const override { return vocab_; }

  void run(const std::vector<ScheduledChunk>& chunks, std::vector<float>& rows) override {
    ++steps;
    last_step.clear();
    std::set<uint64_t> seen;
    int64_t n_want = 0;
    for (const auto& c : chunks) n_want += c.want_logits;
    rows.assign(size_t(n_want * vocab_), 0.0f);
    int64_t row = 0;
    for (const auto& c : chunks) {
      if (!seen.insert(c.seq_id).second) throw std::logic_error("sequence scheduled twice in one step");
      std::vector<int32_t>& st = seqs[c.seq_id];
      if (int64_t(st.size()) != c.pos0) throw std::logic_error("chunk position does not match the state");
      st.insert(st.end(), c.tokens, c.tokens + c.n_tokens);
      last_step.push_back({c.seq_id, c.n_tokens});
      tokens_run += c.n_tokens;
      if (c.want_logits) fill_row(st, rows.data() + row++ * vocab_);
    }
  }

  void apply(const StateOp& op) override {
    switch (op.kind) {
      case StateOp::Kind::kFree: seqs.erase(op.seq); break;
      case StateOp::Kind::kSaveSnapshot: snaps[op.snap] = seqs.at(op.seq); seqs.erase(op.seq); break;
      case StateOp::Kind::kRestoreSnapshot: seqs[op.seq] = snaps.at(op.snap); snaps.erase(op.snap); break;
      case StateOp::Kind::kDropSnapshot: snaps.erase(op.snap); break;
    }
  }

  // Logits depend on every token of the history (a stand-in for attention).
  void fill_row(const std::vector<int32_t>& st, float* row) const {
    uint64_t h = 1469598103934665603ull;
    for (int32_t t : st) h = mix(h, uint64_t(t));
    for (int64_t j = 0; j < vocab_; ++j) row[j] = float(mix(h, uint64_t(j)) % 10007) / 1000.0f;
  }

  int64_t vocab_;
  int64_t steps = 0, tokens_run = 0;
  std::map<uint64_t, std::vector<int32_t>> seqs, snaps;
  std::vector<std::pair<uint64_t, int64_t>> last_step;
};

}  // namespace deepinfer::engine::testing
