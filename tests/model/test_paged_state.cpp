// Compressed entries in pages (state.h): where they live changes no number. The block size
// (awkward ones included: 1 token, sizes that split ratio-128 groups over several pages)
// gives bit-identical logits and entries; a fork shares full pages, copies the partly
// filled one, and leaves its source intact; a page the owner did not reserve is a
// std::logic_error, not an out-of-bounds write. The fixed part (rings, compressor state) lives
// in pages too: rows never straddle a page, an engine sequence holds nothing outside its
// arena pages, and a fork copies the fixed pages into its own. CompressorState::entries walks
// the pages to entry()'s addresses.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <iterator>
#include <limits>
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
      // The page walk of entries() gives entry()'s addresses (whole pages and a partial one).
      for (const CompressorState* z : {&x, &y}) {
        std::vector<const float*> rows(size_t(z->n_entries()));
        z->entries(z->n_entries(), rows.data());
        for (int64_t w = 0; w < z->n_entries(); ++w) ASSERT_EQ(rows[w], z->entry(w)) << "layer " << l << " entry " << w;
      }
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
  const PageLayout layout = page_layout(c, 64);
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
  const PageLayout layout = page_layout(c, 64);
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
  const PageLayout layout = page_layout(c, 16);
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
  EXPECT_THROW(page_layout(c, 0), std::invalid_argument);
  PageArena small(64, 1);
  if (layout.page_bytes > 64) {
    EXPECT_THROW(SequenceState::create(c, layout, small), std::invalid_argument);
  }
}

// ---- the fixed part (window rings, compressor kv/score) in pages

namespace {

Config layout_config(int64_t window, int64_t head_dim, int64_t index_head_dim, const std::vector<int64_t>& ratios) {
  Config c;
  c.window = window;
  c.head_dim = head_dim;
  c.index_head_dim = index_head_dim;
  c.compress_ratios = ratios;
  c.n_mtp_layers = ratios.size() > 1 ? 1 : 0;
  c.n_layers = int64_t(ratios.size()) - c.n_mtp_layers;
  return c;
}

// Every fixed buffer of every layer state: its rows, with the shape the model uses.
std::vector<std::pair<const FixedRows*, std::pair<int64_t, int64_t>>> fixed_buffers(const Config& c, const PageLayout& p) {
  std::vector<std::pair<const FixedRows*, std::pair<int64_t, int64_t>>> out;
  for (int64_t l = 0; l < c.n_layers + c.n_mtp_layers; ++l) {
    const PageLayout::LayerRows& r = p.fixed[size_t(l)];
    const int64_t ratio = c.ratio(l), coff = ratio == 4 ? 2 : 1;
    out.push_back({&r.ring, {c.window, c.head_dim}});
    for (const FixedRows* f : {&r.main_kv, &r.main_score})
      out.push_back({f, {ratio ? coff * ratio : 0, ratio ? coff * c.head_dim : 0}});
    for (const FixedRows* f : {&r.index_kv, &r.index_score})
      out.push_back({f, {ratio == 4 ? 8 : 0, ratio == 4 ? 2 * c.index_head_dim : 0}});
  }
  return out;
}

// True if [p, p + n) lies inside one of the pages `ids` of `src` (within its first page_bytes).
bool in_pages(const float* p, int64_t n, const PageSource& src, const std::vector<int32_t>& ids, int64_t page_bytes) {
  for (int32_t id : ids) {
    const float* base = reinterpret_cast<const float*>(src.page(id));
    if (p >= base && p + n <= base + page_bytes / int64_t(sizeof(float))) return true;
  }
  return false;
}

}  // namespace

// Awkward windows and widths, every layer mix, tiny to large blocks: every fixed row lies
// whole in one page, no two rows overlap, every buffer has its model shape, the last page is
// used, and a page's unused tail is shorter than the widest row (rows are packed).
TEST(FixedPages, RowsNeverStraddlePages) {
  const std::vector<std::vector<int64_t>> dims = {{1, 8, 8}, {3, 24, 8}, {17, 40, 24}, {16, 128, 128}, {128, 512, 128}};
  const std::vector<std::vector<int64_t>> mixes = {{0}, {4}, {128}, {0, 4, 128, 4, 0, 128, 0}, {128, 4, 4, 128, 0}};
  for (const auto& d : dims)
    for (const auto& ratios : mixes)
      for (int64_t T : {1, 3, 4, 12, 64, 129}) {
        const Config c = layout_config(d[0], d[1], d[2], ratios);
        const PageLayout p = page_layout(c, T);
        SCOPED_TRACE("window " + std::to_string(d[0]) + " head " + std::to_string(d[1]) + " index " +
                     std::to_string(d[2]) + " layers " + std::to_string(ratios.size()) + " T " + std::to_string(T));
        const int64_t pf = p.page_bytes / int64_t(sizeof(float));
        ASSERT_EQ(p.page_bytes % 64, 0);
        ASSERT_GT(p.fixed_pages, 0);
        std::vector<float> buf(size_t(p.fixed_pages * pf));
        std::vector<float*> pages;
        for (int64_t k = 0; k < p.fixed_pages; ++k) pages.push_back(buf.data() + k * pf);
        std::vector<char> used(buf.size(), 0);
        int64_t widest = 0, total = 0;
        for (const auto& [f, shape] : fixed_buffers(c, p)) {
          ASSERT_EQ(f->rows, shape.first);
          ASSERT_EQ(f->row_values, shape.second);
          widest = std::max(widest, f->row_values);
          for (int64_t i = 0; i < f->rows; ++i) {
            const int64_t at = f->row(pages.data(), i) - buf.data();
            ASSERT_GE(at, 0);
            ASSERT_LE(at + f->row_values, int64_t(buf.size()));
            ASSERT_EQ(at / pf, (at + f->row_values - 1) / pf) << "row " << i << " straddles a page";
            for (int64_t k = at; k < at + f->row_values; ++k) ASSERT_FALSE(used[size_t(k)]++) << "rows overlap";
            total += f->row_values;
          }
        }
        ASSERT_GE(pf, widest);
        EXPECT_EQ(std::count(used.begin(), used.end(), 1), total);
        for (int64_t k = 0; k < p.fixed_pages; ++k) {
          const auto first = used.begin() + k * pf, last = first + pf;
          const int64_t tail = last - (std::find(std::make_reverse_iterator(last), std::make_reverse_iterator(first), 1).base());
          EXPECT_LT(tail, k + 1 < p.fixed_pages ? widest : pf) << "page " << k << " of " << p.fixed_pages;
        }
      }
  EXPECT_THROW(page_layout(layout_config(4, 8, 8, {0}), 0), std::invalid_argument);
}

// An engine sequence's rings and compressor rows are rows of its fixed arena pages, nothing
// is held outside the arena, and the numbers equal a standalone sequence's bit for bit.
TEST(FixedPages, EngineSequenceLivesInItsArenaPages) {
  Fixture f;
  const Config& c = f.m->config();
  const PageLayout layout = page_layout(c, 16);
  const int64_t F = layout.fixed_pages, S = int64_t(f.toks.size());
  PageArena arena(layout.page_bytes, 2 * (F + (S + 15) / 16) + 2);
  std::vector<int32_t> fixed, pages;  // fixed: odd ids from the end, out of order; pages: even ids
  for (int64_t i = 0; i < F; ++i) fixed.push_back(int32_t(arena.n_pages() - 1 - 2 * i));
  for (int64_t i = 0; i < (S + 15) / 16; ++i) pages.push_back(int32_t(2 * i));
  ASSERT_EQ(arena.n_pages() % 2, 0);
  auto st = SequenceState::create(c, layout, arena, fixed);
  EXPECT_EQ(st.private_bytes(), 0);
  EXPECT_EQ(st.bytes(), F * layout.page_bytes);
  EXPECT_EQ(st.pages().fixed_ids(), fixed);
  for (const auto* group : {&st.layers, &st.mtp_layers})
    for (const LayerState& l : *group) {
      EXPECT_EQ(l.window(), c.window);
      for (int64_t s = 0; s < l.window(); ++s) ASSERT_TRUE(in_pages(l.ring_row(s), c.head_dim, arena, fixed, layout.page_bytes));
      for (const CompressorState* cs : {&l.compressor, &l.index_compressor})
        for (int64_t i = 0; i < cs->coff * cs->ratio; ++i) {
          ASSERT_TRUE(in_pages(cs->kv_row(i), cs->coff * cs->width, arena, fixed, layout.page_bytes));
          ASSERT_TRUE(in_pages(cs->score_row(i), cs->coff * cs->width, arena, fixed, layout.page_bytes));
          ASSERT_EQ(cs->kv_row(i)[0], 0.0f);
          ASSERT_EQ(cs->score_row(i)[0], -std::numeric_limits<float>::infinity());
        }
    }
  st.adopt_pages(pages);
  auto alone = SequenceState::create(c, 16);
  EXPECT_EQ(alone.private_bytes(), alone.bytes());
  EXPECT_EQ(f.feed(st, 0, S, 37), f.feed(alone, 0, S, 37));
  expect_same_entries(st, alone, c);
  EXPECT_EQ(st.bytes(), (F + int64_t(pages.size())) * layout.page_bytes);
  EXPECT_EQ(st.private_bytes(), 0);
  // reset() starts over in the same pages.
  st.reset();
  auto cold = SequenceState::create(c);
  EXPECT_EQ(f.feed(st, 0, 40, 40), f.feed(cold, 0, 40, 40));

  EXPECT_NO_THROW(st.expect_fixed_pages(fixed));
  std::vector<int32_t> other = fixed;
  std::swap(other[0], other[1]);
  EXPECT_THROW(st.expect_fixed_pages(other), std::logic_error);
  other.pop_back();
  EXPECT_THROW(st.expect_fixed_pages(other), std::logic_error);
  EXPECT_THROW(SequenceState::create(c, layout, arena, other), std::logic_error);  // one page short
  std::vector<int32_t> repeated = fixed;
  repeated[1] = repeated[0];
  EXPECT_THROW(SequenceState::create(c, layout, arena, repeated), std::logic_error);
  std::vector<int32_t> outside = fixed;
  outside[0] = int32_t(arena.n_pages());
  EXPECT_THROW(SequenceState::create(c, layout, arena, outside), std::out_of_range);
  std::vector<int32_t> onto_fixed = pages;
  onto_fixed.push_back(fixed[3]);
  EXPECT_THROW(st.adopt_pages(onto_fixed), std::logic_error);  // a token page is never a fixed page
}

// A fork gets its own copy of the fixed pages: the fork and its source, advanced with other
// tokens side by side in one batch, each equal their standalone runs.
TEST(FixedPages, ForkCopiesTheFixedPagesAndStaysIndependent) {
  Fixture f;
  const Config& c = f.m->config();
  const PageLayout layout = page_layout(c, 64);
  const int64_t F = layout.fixed_pages, P = 150, S = int64_t(f.toks.size());
  PageArena arena(layout.page_bytes, 2 * F + 16);
  int32_t next = 0;
  auto fresh = [&](int64_t n) {
    std::vector<int32_t> ids;
    for (int64_t i = 0; i < n; ++i) ids.push_back(next++);
    return ids;
  };
  const std::vector<int32_t> fixed_a = fresh(F), fixed_b = fresh(F);
  std::vector<int32_t> pages_a = fresh(3);  // two full pages and a partial one after P tokens
  auto snap = SequenceState::create(c, layout, arena, fixed_a);
  snap.adopt_pages(pages_a);
  f.feed(snap, 0, P, P);

  std::vector<int32_t> pages_b = {pages_a[0], pages_a[1]};
  for (int32_t id : fresh(1)) pages_b.push_back(id);
  // Fresh fixed pages only: not the source's, not a page of either table, no repeats.
  std::vector<int32_t> bad = fixed_b;
  bad[0] = fixed_a[0];
  EXPECT_THROW(snap.fork(pages_b, bad), std::logic_error);
  bad[0] = pages_a[0];
  EXPECT_THROW(snap.fork(pages_b, bad), std::logic_error);
  bad[0] = pages_b[2];
  EXPECT_THROW(snap.fork(pages_b, bad), std::logic_error);
  bad.pop_back();
  EXPECT_THROW(snap.fork(pages_b, bad), std::logic_error);

  auto fork = snap.fork(pages_b, fixed_b);
  EXPECT_EQ(fork.private_bytes(), 0);
  EXPECT_EQ(fork.pages().fixed_ids(), fixed_b);
  for (int64_t i = 0; i < F; ++i)
    ASSERT_EQ(std::memcmp(arena.page(fixed_b[size_t(i)]), arena.page(fixed_a[size_t(i)]), size_t(layout.page_bytes)), 0);

  std::vector<int32_t> other = f.toks;
  for (size_t i = size_t(P); i < other.size(); ++i) other[i] = int32_t((other[i] * 5 + 3) % f.V());
  auto solo_a = SequenceState::create(c), solo_b = SequenceState::create(c);
  f.feed(solo_a, 0, P, P);
  f.feed(solo_b, 0, P, P);
  const auto want_a = f.feed(solo_a, P, S, 64, &other);
  const auto want_b = f.feed(solo_b, P, S, 64);

  for (int32_t id : fresh(2)) pages_a.push_back(id);
  for (int32_t id : fresh(2)) pages_b.push_back(id);
  snap.adopt_pages(pages_a);
  fork.adopt_pages(pages_b);
  std::vector<float> got_a((S - P) * f.V()), got_b((S - P) * f.V());
  for (int64_t i = P; i < S; i += 64) {
    const int64_t n = std::min<int64_t>(64, S - i);
    f.m->forward_batch({SequenceChunk{other.data() + i, n, &snap, got_a.data() + (i - P) * f.V(), true},
                        SequenceChunk{f.toks.data() + i, n, &fork, got_b.data() + (i - P) * f.V(), true}},
                       f.num);
  }
  EXPECT_EQ(got_a, want_a);
  EXPECT_EQ(got_b, want_b);
  expect_same_entries(snap, solo_a, c);
  expect_same_entries(fork, solo_b, c);
}
