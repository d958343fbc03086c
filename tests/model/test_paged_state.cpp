// Compressed entries in pages (state.h): where they live changes no number. The block size
// (awkward ones included: 1 token, sizes that split ratio-128 groups over several pages)
// gives bit-identical logits and entries; a fork shares full pages, copies the partly
// filled one, and leaves its source intact; a page the owner did not reserve is a
// std::logic_error, not an out-of-bounds write.
#include <gtest/gtest.h>

#include <cstring>
#include <stdexcept>

#include "golden.h"
#include "model/deepseek_v4/model.h"

using namespace deepinfer;
using namespace deepinfer::v4;

namespace {

struct Fixture {
  std::unique_ptr<Model> m = Model::load(golden::dir("tiny-v4-c") + "/model");
  ThreadPool pool{2};
  std::unique_ptr<kernels::Backend> cpu = kernels::make_cpu_backend(&pool);
  Numerics num;
  std::vector<int32_t> toks = golden::sequence("tiny-v4-c", "seq300");
  Fixture() {
    num.mode = NumericsMode::Reference;
    num.backend = cpu.get();
  }
  int64_t V() const { return m->config().vocab_size; }

  // Logits of tokens[from, to) fed in chunks of `chunk` into st.
  std::vector<float> feed(SequenceState& st, int64_t from, int64_t to, int64_t chunk,
                          const std::vector<int32_t>* tokens = nullptr) const {
    const std::vector<int32_t>& t = tokens ? *tokens : toks;
    std::vector<float> out((to - from) * V());
    for (int64_t i = from; i < to; i += chunk) {
      const int64_t n = std::min(chunk, to - i);
      m->forward(t.data() + i, n, st, num, out.data() + (i - from) * V());
    }
    return out;
  }
};

// Every entry of every compressor of a and b, bit for bit.
void expect_same_entries(const SequenceState& a, const SequenceState& b, const Config& c) {
  ASSERT_EQ(a.layers.size(), b.layers.size());
  for (size_t l = 0; l < a.layers.size(); ++l)
    for (auto part : {&LayerState::compressor, &LayerState::index_compressor}) {
      const CompressorState& x = a.layers[l].*part;
      const CompressorState& y = b.layers[l].*part;
      ASSERT_EQ(x.n_entries(), y.n_entries()) << "layer " << l;
      for (int64_t w = 0; w < x.n_entries(); ++w)
        ASSERT_EQ(std::memcmp(x.entry(w), y.entry(w), size_t(x.width) * sizeof(float)), 0) << "layer " << l << " entry " << w;
    }
  (void)c;
}

}  // namespace

TEST(PagedState, BlockSizeChangesNothing) {
  Fixture f;
  const Config& c = f.m->config();
  const int64_t S = int64_t(f.toks.size());
  ASSERT_GE(S, 300);
  auto base = SequenceState::create(c);
  const auto want = f.feed(base, 0, S, 37);
  EXPECT_EQ(base.layers[2].compressor.n_entries(), S / 128);
  EXPECT_EQ(base.pages().size(), (S + SequenceState::kDefaultBlockTokens - 1) / SequenceState::kDefaultBlockTokens);
  // 1 token per page; odd sizes; sizes below 128, so ratio-128 groups span several pages;
  // one just above 128; one page for the whole sequence.
  for (int64_t T : {1, 3, 12, 100, 128, 129, 1000}) {
    SCOPED_TRACE("block_tokens " + std::to_string(T));
    auto st = SequenceState::create(c, T);
    EXPECT_EQ(f.feed(st, 0, S, 37), want);
    expect_same_entries(st, base, c);
    EXPECT_EQ(st.pages().size(), (S + T - 1) / T);
    EXPECT_EQ(st.pages().block_tokens(), T);
  }
}

TEST(PagedState, OneTokenSequences) {
  Fixture f;
  const Config& c = f.m->config();
  const PageLayout layout = PageLayout::make(c, 64);
  PageArena arena(layout.page_bytes, 4);
  auto alone = SequenceState::create(c);
  const auto want = f.feed(alone, 0, 1, 1);
  EXPECT_EQ(alone.pages().size(), 0);  // no entry yet: a standalone sequence grows no page
  const int64_t fixed = alone.bytes();
  EXPECT_GT(fixed, 0);

  auto paged = SequenceState::create(c, layout, arena);
  const int32_t ids[] = {2};
  paged.adopt_pages(ids);
  EXPECT_EQ(f.feed(paged, 0, 1, 1), want);
  EXPECT_EQ(paged.bytes(), fixed + layout.page_bytes);
  // A fork after one token copies the partly filled page.
  const int32_t fork_ids[] = {3};
  auto forked = paged.fork(fork_ids);
  EXPECT_EQ(f.feed(forked, 1, 40, 39), f.feed(alone, 1, 40, 39));
}

TEST(PagedState, ForkSharesFullPagesAndCopiesThePartialOne) {
  Fixture f;
  const Config& c = f.m->config();
  const PageLayout layout = PageLayout::make(c, 64);
  PageArena arena(layout.page_bytes, 16);
  const int64_t P = 150;  // two full pages and a partial one
  auto snap = SequenceState::create(c, layout, arena);
  const std::vector<int32_t> snap_ids = {0, 1, 2};
  snap.adopt_pages(snap_ids);
  f.feed(snap, 0, P, P);
  std::vector<std::byte> before(size_t(3 * layout.page_bytes));
  std::memcpy(before.data(), arena.page(0), before.size());

  // Two continuations of the same prefix: the sequence itself, and one with other tokens.
  std::vector<int32_t> other = f.toks;
  for (size_t i = size_t(P); i < other.size(); ++i) other[i] = int32_t((other[i] * 7 + 11) % f.V());
  const int64_t S = int64_t(f.toks.size());
  auto solo_b = SequenceState::create(c);
  auto solo_c = SequenceState::create(c);
  f.feed(solo_b, 0, P, P);
  f.feed(solo_c, 0, P, P);
  const auto want_b = f.feed(solo_b, P, S, 64);
  const auto want_c = f.feed(solo_c, P, S, 64, &other);

  std::vector<int32_t> ids_b = {0, 1, 3}, ids_c = {0, 1, 4};
  auto b = snap.fork(ids_b);
  auto cs = snap.fork(ids_c);
  EXPECT_EQ(b.n_past, P);
  EXPECT_EQ(std::memcmp(arena.page(3), arena.page(2), size_t(layout.page_bytes)), 0);
  for (int32_t id : {5, 6}) ids_b.push_back(id);
  for (int32_t id : {7, 8}) ids_c.push_back(id);
  b.adopt_pages(ids_b);
  cs.adopt_pages(ids_c);
  // Both forks advance together in one batch, chunk by chunk, as the engine runs them.
  std::vector<float> got_b((S - P) * f.V()), got_c((S - P) * f.V());
  for (int64_t i = P; i < S; i += 64) {
    const int64_t n = std::min<int64_t>(64, S - i);
    f.m->forward_batch({SequenceChunk{f.toks.data() + i, n, &b, got_b.data() + (i - P) * f.V(), true},
                        SequenceChunk{other.data() + i, n, &cs, got_c.data() + (i - P) * f.V(), true}},
                       f.num);
  }
  EXPECT_EQ(got_b, want_b);
  EXPECT_EQ(got_c, want_c);
  expect_same_entries(b, solo_b, c);
  expect_same_entries(cs, solo_c, c);
  // The snapshot's pages are untouched, and it serves another fork just as well.
  EXPECT_EQ(std::memcmp(before.data(), arena.page(0), before.size()), 0);
  const std::vector<int32_t> ids_d = {0, 1, 9, 10, 11};
  auto d = snap.fork(ids_d);
  EXPECT_EQ(f.feed(d, P, S, 64), want_b);

  // Sharing the partly filled page, or copying onto a page the source holds, is refused.
  const std::vector<int32_t> shares_partial = {0, 1, 2}, aliases = {0, 1, 0};
  EXPECT_THROW(snap.fork(shares_partial), std::logic_error);
  EXPECT_THROW(snap.fork(aliases), std::logic_error);
  EXPECT_THROW(SequenceState::create(c).fork(ids_d), std::logic_error);  // standalone pages are private
}

TEST(PagedState, MissingOrChangedPagesAreLogicErrors) {
  Fixture f;
  const Config& c = f.m->config();
  const PageLayout layout = PageLayout::make(c, 16);
  PageArena arena(layout.page_bytes, 4);
  auto st = SequenceState::create(c, layout, arena);
  const std::vector<int32_t> one = {1};
  st.adopt_pages(one);
  f.feed(st, 0, 16, 16);
  // Tokens 16.. need a second page that was never adopted.
  EXPECT_THROW(f.feed(st, 16, 20, 4), std::logic_error);
  const std::vector<int32_t> changed = {2, 3};
  EXPECT_THROW(st.adopt_pages(changed), std::logic_error);
  const std::vector<int32_t> outside = {1, 4};
  EXPECT_THROW(st.adopt_pages(outside), std::out_of_range);
  EXPECT_THROW(PageLayout::make(c, 0), std::invalid_argument);
  PageArena small(64, 1);
  if (layout.page_bytes > 64) EXPECT_THROW(SequenceState::create(c, layout, small), std::invalid_argument);
}
