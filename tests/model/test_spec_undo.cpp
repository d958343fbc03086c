// Speculative decoding at the model level. Undo: a chunk of n tokens followed by undo(keep)
// leaves a state that continues exactly like one that only ever saw the first `keep` tokens
// (window rings, compressor pending groups and entries, index keys, Engram history), at
// starting positions on and around every group and page edge. MTP drafting: the first draft
// is the MTP module's greedy token over the unseen positions, and the chained drafts leave
// the module's ring as it was.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>

#include "core/thread_pool.h"
#include "golden.h"
#include "kernels/backend.h"
#include "model/deepseek_v4/model.h"

using namespace deepinfer;
using namespace deepinfer::v4;

namespace {

std::vector<int32_t> tokens_from(int64_t n, int32_t salt, int64_t vocab) {
  std::vector<int32_t> v;
  for (int64_t i = 0; i < n; ++i) v.push_back(int32_t((i * 131 + salt * 977 + 7) % (vocab - 3) + 3));
  return v;
}

// Continues st with `more` (one decode step, then a chunk of the rest) and returns all logits.
std::vector<float> continue_with(const Model& m, SequenceState& st, const std::vector<int32_t>& more, const Numerics& num) {
  const int64_t V = m.config().vocab_size;
  std::vector<float> out(more.size() * size_t(V));
  m.forward(more.data(), 1, st, num, out.data());
  m.forward_batch({SequenceChunk{more.data() + 1, int64_t(more.size()) - 1, &st, out.data() + V, true}}, num);
  return out;
}

void undo_equals_never_seen(const std::string& model_dir, std::initializer_list<int64_t> starts) {
  auto m = Model::load(model_dir);
  const Config& c = m->config();
  const int64_t max_n = std::min<int64_t>(kMinRingRows, c.window);
  ThreadPool pool(1);
  auto cpu = kernels::make_cpu_backend(&pool);  // batch-invariant: chunking changes no bit
  for (NumericsMode mode : {NumericsMode::Reference, NumericsMode::Float}) {
    Numerics num;
    num.mode = mode;
    num.backend = cpu.get();
    for (int64_t p0 : starts) {
      const auto prefix = tokens_from(p0, 1, c.vocab_size);
      const auto chunk = tokens_from(max_n, 2, c.vocab_size);
      const auto more = tokens_from(9, 3, c.vocab_size);
      for (int64_t n : {int64_t(2), max_n}) {
        for (int64_t keep : {int64_t(0), int64_t(1), n - 1}) {
          SCOPED_TRACE(std::string(numerics_name(mode)) + " p0 " + std::to_string(p0) + " n " + std::to_string(n) +
                       " keep " + std::to_string(keep));
          SequenceState a = m->new_sequence(), b = m->new_sequence();
          if (p0 > 0) {
            m->forward(prefix.data(), p0, a, num, nullptr);
            m->forward(prefix.data(), p0, b, num, nullptr);
          }
          SequenceState::Undo u;
          a.save_undo(false, a.n_past, n, &u);
          m->forward(chunk.data(), n, a, num, nullptr);
          a.undo(u, keep);
          if (keep > 0) m->forward(chunk.data(), keep, b, num, nullptr);
          ASSERT_EQ(a.counters(), b.counters());
          for (int64_t k = 0; k < a.engram_history_size(); ++k) ASSERT_EQ(a.engram_history(k), b.engram_history(k));
          const auto la = continue_with(*m, a, more, num), lb = continue_with(*m, b, more, num);
          ASSERT_EQ(0, std::memcmp(la.data(), lb.data(), la.size() * sizeof(float)));
        }
      }
    }
  }
}

}  // namespace

// tiny-v4-c: ratio 4 (pending pairs of groups, indexer keys) and ratio 128 layers, window 16;
// starts around the ratio-4 groups, the 64-token pages and the first ratio-128 entry.
TEST(SpecUndo, V4ChunkThenUndoEqualsNeverSeen) {
  undo_equals_never_seen(golden::dir("tiny-v4-c") + "/model", {0, 5, 62, 126});
}

// V4.1: ratio-2 and ratio-1 KV sources, shared index keys, the Engram history.
TEST(SpecUndo, V41ChunkThenUndoEqualsNeverSeen) {
  undo_equals_never_seen(golden::dir("tiny-v41-a") + "/model", {0, 6, 63});
}

// An undo longer than a ring would have to restore rows the chunk overwrote twice: refused.
TEST(SpecUndo, ChunkLongerThanTheRingsIsRefused) {
  auto m = Model::load(golden::dir("tiny-v4-c") + "/model");
  SequenceState st = m->new_sequence();
  SequenceState::Undo u;
  EXPECT_THROW(st.save_undo(false, 0, kMinRingRows + 1, &u), std::logic_error);
  st.save_undo(false, 0, 2, &u);
  EXPECT_THROW(st.undo(u, 3), std::logic_error);
}

TEST(MtpDraft, FirstDraftIsTheModuleArgmaxAndChainingLeavesItsRing) {
  auto m = Model::load(golden::dir("tiny-v4-c") + "/model");
  const Config& c = m->config();
  const int64_t V = c.vocab_size, width = c.hc_mult * c.dim;
  Numerics num;
  const auto toks = tokens_from(14, 5, V);  // shorter than the window: every position is kept
  const int64_t n = int64_t(toks.size()) - 1;  // the state holds n tokens, the last is pending
  for (int64_t k : {1, 3, 7}) {
    SCOPED_TRACE("k " + std::to_string(k));
    SequenceState st = m->new_sequence();
    std::vector<float> streams;
    m->forward(toks.data(), n, st, num, nullptr, &streams);
    DrafterState ds;
    ds.keep(streams.data(), 0, n, width, c.window);
    const auto drafts = m->draft_mtp(st, ds, toks, k, num);
    ASSERT_EQ(int64_t(drafts.size()), k);
    // The reference: the module over all n positions at once, last row.
    SequenceState ref = m->new_sequence();
    std::vector<float> logits(size_t(n * V));
    m->forward_mtp(0, streams.data(), toks.data() + 1, n, 0, ref, num, logits.data());
    const float* last = logits.data() + (n - 1) * V;
    EXPECT_EQ(drafts[0], int32_t(std::max_element(last, last + V) - last));
    for (int32_t d : drafts) EXPECT_TRUE(d >= 0 && d < V);
    // The chained positions were undone: the next step's module output over position n
    // equals that of a state that never drafted past n - 1.
    std::vector<float> s2;
    const int32_t next = drafts[0];
    m->forward(&toks[size_t(n)], 1, st, num, nullptr, &s2);
    std::vector<float> a(static_cast<size_t>(V)), b(static_cast<size_t>(V));
    m->forward_mtp(0, s2.data(), &next, 1, n, st, num, a.data());
    m->forward_mtp(0, s2.data(), &next, 1, n, ref, num, b.data());
    EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float)));
  }
}
