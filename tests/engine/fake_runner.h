// A runner without a model: each sequence's "state" is the list of tokens it has processed,
// kept in a simulated KV arena - page b of its table holds the tokens of positions
// [b*T, (b+1)*T) - and its logits are a pure function of the tokens read back from there.
// So a sequence rebuilt by recompute or resumed from a snapshot gives the same logits only
// if its pages really hold the right tokens. The runner also checks what the real model
// would silently get wrong: chunk positions, pages covering every token before it is
// written, nobody writing a page another table holds (shared pages are read-only), forks
// copying partly filled pages, and page contents surviving other sequences' traffic.
// Fixed blocks stand for the rings and compressor state: every step rewrites them with a
// digest of the sequence's tokens and first checks they still hold the previous one, so a
// fixed block that changes under a sequence, is held by another table, or is not copied by a
// fork is caught too.
#pragma once
#include <cstdint>
#include <map>
#include <algorithm>
#include <set>
#include <stdexcept>
#include <string>
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

  void bind_kv(const kv::KvSpec& spec, int64_t n_blocks) override {
    block_tokens = spec.block_tokens;
    fixed_blocks = spec.fixed_blocks;
    n_pages = n_blocks;
    pages.clear();
  }

  struct Seq {
    std::vector<int32_t> tokens;  // what the pages must hold, in order
    std::vector<int32_t> table;   // page ids
    std::vector<int32_t> fixed;   // fixed block ids: each holds digest(tokens) in its first slot
  };

  void run(const std::vector<ScheduledChunk>& chunks, std::vector<float>& rows) override {
    ++steps;
    last_step.clear();
    std::set<uint64_t> seen;
    int64_t n_want = 0;
    for (const auto& c : chunks) n_want += c.all_rows ? c.n_tokens : c.want_logits;
    rows.assign(size_t(n_want * vocab_), 0.0f);
    int64_t row = 0;
    for (const auto& c : chunks) {
      if (!seen.insert(c.seq_id).second) throw std::logic_error("sequence scheduled twice in one step");
      Seq& st = seqs[c.seq_id];
      if (int64_t(st.tokens.size()) != c.pos0) throw std::logic_error("chunk position does not match the state");
      if (st.fixed.empty()) {
        st.fixed.assign(c.fixed.begin(), c.fixed.end());
        if (int64_t(st.fixed.size()) != fixed_blocks) throw std::logic_error("wrong number of fixed blocks");
        for (int32_t id : st.fixed)
          if (held_by_other(id, &st)) throw std::logic_error("fixed block " + std::to_string(id) + " held by another table");
        stamp(st);
      }
      if (!std::equal(st.fixed.begin(), st.fixed.end(), c.fixed.begin(), c.fixed.end()))
        throw std::logic_error("fixed blocks changed under a sequence");
      for (int32_t id : st.fixed)
        if (page(id)[0] != digest(st.tokens)) throw std::logic_error("fixed block contents lost");
      if (c.pages.size() < st.table.size() || !std::equal(st.table.begin(), st.table.end(), c.pages.begin()))
        throw std::logic_error("pages changed under a sequence");
      st.table.assign(c.pages.begin(), c.pages.end());
      if (int64_t(st.table.size()) * block_tokens < c.pos0 + c.n_tokens) throw std::logic_error("chunk past its pages");
      for (int64_t t = 0; t < c.n_tokens; ++t) write(c.seq_id, st, c.pos0 + t, c.tokens[t]);
      st.tokens.insert(st.tokens.end(), c.tokens, c.tokens + c.n_tokens);
      stamp(st);
      last_step.push_back({c.seq_id, c.n_tokens});
      tokens_run += c.n_tokens;
      if (c.all_rows) {  // rows before the last: the history up to each token
        ++all_rows_chunks;
        for (int64_t t = 0; t + 1 < c.n_tokens; ++t)
          fill_row(std::vector<int32_t>(st.tokens.begin(), st.tokens.begin() + c.pos0 + t + 1), rows.data() + row++ * vocab_);
      }
      if (c.want_logits || c.all_rows) fill_row(read(st), rows.data() + row++ * vocab_);
    }
  }

  void apply(const StateOp& op) override {
    switch (op.kind) {
      case StateOp::Kind::kFree: seqs.erase(op.seq); break;
      case StateOp::Kind::kSaveSnapshot: snaps[op.snap] = seqs.at(op.seq); seqs.erase(op.seq); break;
      case StateOp::Kind::kRestoreSnapshot: seqs[op.seq] = snaps.at(op.snap); snaps.erase(op.snap); break;
      case StateOp::Kind::kForkSnapshot:
        seqs[op.seq] = fork(snaps.at(op.snap), op);
        ++forks;
        break;
      case StateOp::Kind::kDropSnapshot: snaps.erase(op.snap); break;
      case StateOp::Kind::kCheckpoint:
        snaps[op.snap] = fork(seqs.at(op.seq), op);
        ++checkpoints;
        break;
      case StateOp::Kind::kLoadSnapshot:
      case StateOp::Kind::kUndo:
        // Disk-cache loads and speculative undo need a real state: the tests that reach them
        // run the model runner. Loud here, so a test cannot pass on an ignored op.
        throw std::logic_error("FakeRunner: state op not modelled (disk-cache load or speculative undo)");
    }
  }

  // Logits depend on every token of the history (a stand-in for attention).
  void fill_row(const std::vector<int32_t>& st, float* row) const {
    uint64_t h = 1469598103934665603ull;
    for (int32_t t : st) h = mix(h, uint64_t(t));
    for (int64_t j = 0; j < vocab_; ++j) row[j] = float(mix(h, uint64_t(j)) % 10007) / 1000.0f;
  }

  int64_t vocab_;
  int64_t steps = 0, tokens_run = 0, forks = 0, all_rows_chunks = 0, checkpoints = 0;
  int64_t block_tokens = 0, fixed_blocks = 0, n_pages = 0;
  std::map<uint64_t, Seq> seqs, snaps;
  std::map<int32_t, std::vector<int32_t>> pages;  // the arena: page id -> its block_tokens slots
  std::vector<std::pair<uint64_t, int64_t>> last_step;

 private:
  std::vector<int32_t>& page(int32_t id) {
    if (id < 0 || id >= n_pages) throw std::logic_error("page id " + std::to_string(id) + " outside the arena");
    auto& p = pages[id];
    if (p.empty()) p.assign(size_t(block_tokens), -1);
    return p;
  }

  bool held_by_other(int32_t id, const Seq* self) const {
    for (const auto* m : {&seqs, &snaps})
      for (const auto& [k, s] : *m)
        if (&s != self && (std::find(s.table.begin(), s.table.end(), id) != s.table.end() ||
                           std::find(s.fixed.begin(), s.fixed.end(), id) != s.fixed.end()))
          return true;
    return false;
  }

  static int32_t digest(const std::vector<int32_t>& tokens) {
    uint64_t h = 7;
    for (int32_t t : tokens) h = mix(h, uint64_t(t));
    return int32_t(h >> 33);
  }
  // Rewrites the fixed blocks, as a step rewrites rings and compressor state.
  void stamp(const Seq& st) {
    for (int32_t id : st.fixed) page(id)[0] = digest(st.tokens);
  }

  void write(uint64_t seq, const Seq& st, int64_t p, int32_t token) {
    const int32_t id = st.table[size_t(p / block_tokens)];
    if (p % block_tokens == 0 || p == int64_t(st.tokens.size())) {  // once per page and chunk
      if (held_by_other(id, &st))
        throw std::logic_error("sequence " + std::to_string(seq) + " writes page " + std::to_string(id) +
                               " that another table holds");
    }
    page(id)[size_t(p % block_tokens)] = token;
  }

  std::vector<int32_t> read(const Seq& st) {
    std::vector<int32_t> out;
    for (size_t p = 0; p < st.tokens.size(); ++p) out.push_back(page(st.table[p / size_t(block_tokens)])[p % size_t(block_tokens)]);
    if (out != st.tokens) throw std::logic_error("KV page contents lost");
    return out;
  }

  // A copy of src in the pages and fixed blocks of op.
  Seq fork(const Seq& src, const StateOp& op) {
    Seq s{src.tokens, op.pages, op.fixed};
    if (int64_t(s.fixed.size()) != fixed_blocks) throw std::logic_error("fork: wrong number of fixed blocks");
    for (size_t i = 0; i < s.fixed.size(); ++i) {
      if (held_by_other(s.fixed[i], nullptr) || std::count(s.table.begin(), s.table.end(), s.fixed[i]))
        throw std::logic_error("fork: fixed block " + std::to_string(s.fixed[i]) + " is not fresh");
      page(s.fixed[i]) = page(src.fixed[i]);
    }
    const size_t used = (src.tokens.size() + size_t(block_tokens) - 1) / size_t(block_tokens);
    if (s.table.size() < used) throw std::logic_error("fork: too few pages");
    for (size_t i = 0; i < used; ++i) {
      if (s.table[i] == src.table[i]) {
        if ((i + 1) * size_t(block_tokens) > src.tokens.size()) throw std::logic_error("fork shares a partial page");
      } else {
        page(s.table[i]) = page(src.table[i]);
      }
    }
    return s;
  }
};

}  // namespace deepinfer::engine::testing
