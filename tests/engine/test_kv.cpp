// KV accounting: per-layer-kind sizes from a config, the block pool, block tables and the
// prefix-cache index.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <type_traits>

#include "core/page_arena.h"
#include "engine/model_runner.h"
#include "kv/block_pool.h"
#include "kv/kv_manager.h"
#include "kv/kv_spec.h"
#include "kv/prefix_cache.h"

using namespace deepinfer::kv;
using deepinfer::GrowingPageSource;
using deepinfer::PageArena;

namespace {

// tiny-v4-c: window 16, head_dim 128, index_head_dim 128, ratios 0 4 128 4 0 128 + MTP 0.
KvLayout tiny_layout() {
  KvLayout l;
  l.window_tokens = 16;
  l.head_dim = 128;
  l.index_head_dim = 128;
  l.layer_ratios = {0, 4, 128, 4, 0, 128, 0};
  return l;
}

}  // namespace

TEST(KvSpec, TinyModelBytesByLayerKind) {
  const KvSpec s = KvSpec::make(tiny_layout(), 64);
  EXPECT_EQ(s.n_layers, 7);
  EXPECT_EQ(s.n_c4_layers, 2);
  EXPECT_EQ(s.n_c128_layers, 2);
  EXPECT_EQ(s.window_ring_bytes, 7 * 16 * 128 * 4);
  // ratio 4: kv + score of [8, 256] for the main and the indexer compressor; ratio 128: [128, 128].
  EXPECT_EQ(s.compressor_state_bytes, 2 * (2 * 8 * 256 * 2) * 4 + 2 * (2 * 128 * 128) * 4);
  EXPECT_EQ(s.c4_row_bytes, (128 + 128) * 4);
  EXPECT_EQ(s.c128_row_bytes, 128 * 4);
  // 64 tokens: 16 ratio-4 groups in 2 layers, one ratio-128 row (the entry whose last token
  // falls in the block, if any) in 2 layers.
  EXPECT_EQ(s.block_bytes, 16 * 2 * 1024 + 1 * 2 * 512);
  EXPECT_EQ(KvSpec::make(tiny_layout(), 256).block_bytes, 64 * 2 * 1024 + 2 * 2 * 512);
  EXPECT_EQ(s.fixed_blocks, (s.fixed_bytes() + s.block_bytes - 1) / s.block_bytes);
}

TEST(KvSpec, BlocksAlwaysCoverTheRealState) {
  for (int64_t bt : {4, 16, 64, 128, 256}) {
    const KvSpec s = KvSpec::make(tiny_layout(), bt);
    for (int64_t n = 0; n < 3000; n += 1 + n / 50)
      EXPECT_GE(s.blocks_for(n) * s.block_bytes, s.fixed_bytes() + s.entry_bytes(n)) << "block " << bt << " n " << n;
    EXPECT_EQ(s.blocks_for(s.max_tokens_in(s.fixed_blocks + 100)), s.fixed_blocks + 100);
    EXPECT_EQ(s.max_tokens_in(s.fixed_blocks), 0);
  }
  EXPECT_THROW(KvSpec::make(tiny_layout(), 6), std::invalid_argument);
  KvLayout bad = tiny_layout();
  bad.layer_ratios.push_back(8);
  EXPECT_THROW(KvSpec::make(bad, 64), std::invalid_argument);
}

TEST(BlockPool, AllocateReleaseRetain) {
  BlockPool pool(10);
  std::vector<BlockId> a, b;
  ASSERT_TRUE(pool.allocate(4, a));
  ASSERT_TRUE(pool.allocate(6, b));
  EXPECT_EQ(pool.free_count(), 0);
  std::vector<BlockId> c;
  EXPECT_FALSE(pool.allocate(1, c));
  EXPECT_TRUE(c.empty());
  pool.retain(a);
  pool.release(a);
  EXPECT_EQ(pool.free_count(), 0);  // still referenced once
  pool.release(a);
  EXPECT_EQ(pool.free_count(), 4);
  EXPECT_THROW(pool.release(a), std::logic_error);
  std::string why;
  EXPECT_TRUE(pool.check(&why)) << why;
}

TEST(KvManager, ReserveFreeTransferKeepIntegrity) {
  const KvSpec s = KvSpec::make(tiny_layout(), 64);
  KvManager kv(s, s.fixed_blocks * 3 + 10);
  ASSERT_TRUE(kv.reserve(1, 100));
  EXPECT_EQ(kv.held(1), s.blocks_for(100));
  ASSERT_TRUE(kv.reserve(1, 50));  // never shrinks
  EXPECT_EQ(kv.held(1), s.blocks_for(100));
  ASSERT_TRUE(kv.reserve(2, 1));
  const int64_t free_before = kv.free_blocks();
  EXPECT_FALSE(kv.reserve(3, 100000));
  EXPECT_EQ(kv.free_blocks(), free_before);
  EXPECT_EQ(kv.held(3), 0);
  kv.transfer(1, 99);
  EXPECT_EQ(kv.held(1), 0);
  EXPECT_EQ(kv.held(99), s.blocks_for(100));
  EXPECT_THROW(kv.transfer(2, 99), std::logic_error);
  std::string why;
  EXPECT_TRUE(kv.check_integrity(&why)) << why;
  kv.free(99);
  kv.free(2);
  kv.free(12345);
  EXPECT_EQ(kv.used_blocks(), 0);
  EXPECT_TRUE(kv.check_integrity(&why)) << why;
}

TEST(KvManager, RandomOperationsKeepFreePlusUsedEqualTotal) {
  const KvSpec s = KvSpec::make(tiny_layout(), 16);
  KvManager kv(s, 200);
  std::mt19937 rng(7);
  std::vector<int64_t> len(8, 0);
  for (int it = 0; it < 5000; ++it) {
    const uint64_t o = rng() % 8;
    switch (rng() % 4) {
      case 0:
      case 1: {
        const int64_t want = len[o] + int64_t(rng() % 40);
        if (kv.reserve(o, want)) len[o] = want;
        break;
      }
      case 2:
        kv.free(o);
        len[o] = 0;
        break;
      case 3: {
        const uint64_t to = 100 + rng() % 4;
        if (kv.held(to) == 0) kv.transfer(o, to);
        kv.free(to);
        len[o] = 0;
        break;
      }
    }
    std::string why;
    ASSERT_TRUE(kv.check_integrity(&why)) << why;
    ASSERT_EQ(kv.free_blocks() + kv.used_blocks(), kv.total_blocks());
    for (uint64_t k = 0; k < 8; ++k) {
      if (kv.held(k)) {
        ASSERT_EQ(kv.held(k), s.blocks_for(len[k]));
      }
    }
  }
}

TEST(PrefixCache, LongestStrictPrefixAndLru) {
  PrefixCache c(2);
  EXPECT_TRUE(c.insert(1, {1, 2, 3}).empty());
  EXPECT_TRUE(c.insert(2, {1, 2, 3, 4, 5}).empty());
  auto hit = c.lookup({1, 2, 3, 4, 5, 6});
  ASSERT_TRUE(hit);
  EXPECT_EQ(hit->snapshot_id, 2u);
  EXPECT_EQ(hit->n_tokens, 5);
  hit = c.lookup({1, 2, 3, 4, 5});  // equal, not an extension: the shorter one serves
  ASSERT_TRUE(hit);
  EXPECT_EQ(hit->snapshot_id, 1u);
  EXPECT_FALSE(c.lookup({1, 2}));
  EXPECT_FALSE(c.lookup({9, 2, 3, 4}));
  auto ev = c.insert(3, {7, 7});
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0], 1u);  // least recently inserted
  EXPECT_TRUE(c.erase(2));
  EXPECT_FALSE(c.erase(2));
  EXPECT_EQ(c.size(), 1);
  PrefixCache off(0);
  EXPECT_EQ(off.insert(5, {1}), std::vector<uint64_t>{5});
}

TEST(PageArena, AlignedDistinctBoundedPages) {
  PageArena a(192, 5);
  EXPECT_EQ(a.bytes(), 5 * 192);
  EXPECT_EQ(a.grow(), -1);  // ids come from the block pool, never from the arena
  for (int32_t id = 0; id < 5; ++id) {
    EXPECT_EQ(reinterpret_cast<uintptr_t>(a.page(id)) % 64, 0u);
    if (id) {
      EXPECT_EQ(a.page(id) - a.page(id - 1), 192);
    }
  }
  EXPECT_THROW(a.page(5), std::out_of_range);
  EXPECT_THROW(a.page(-1), std::out_of_range);
  EXPECT_THROW(PageArena(100, 2), std::invalid_argument);  // not a multiple of 64
  EXPECT_EQ(PageArena(64, 0).bytes(), 0);

  GrowingPageSource g(128);
  EXPECT_EQ(g.bytes(), 0);
  EXPECT_THROW(g.page(0), std::out_of_range);
  EXPECT_EQ(g.grow(), 0);
  EXPECT_EQ(g.grow(), 1);
  EXPECT_EQ(g.bytes(), 256);
  std::byte* p0 = g.page(0);
  for (int i = 0; i < 100; ++i) g.grow();
  EXPECT_EQ(g.page(0), p0);  // pages never move
  EXPECT_EQ(reinterpret_cast<uintptr_t>(g.page(77)) % 64, 0u);
}

// One page layout: the model's sequence state (state.h) lives in the KV layer's PageLayout,
// and the spec's block size and fixed block count are that layout's page size and count.
static_assert(std::is_same_v<deepinfer::v4::PageLayout, PageLayout>, "the model's page layout is the KV layer's");

// Pages hold the growing rows of T tokens for every block size and layer mix.
TEST(KvSpec, BlockBytesHoldTheGrowingRows) {
  deepinfer::v4::Config c;
  c.window = 16;
  c.head_dim = 128;
  c.index_head_dim = 64;
  for (const auto& ratios : std::vector<std::vector<int64_t>>{
           {0, 4, 128, 4, 0, 128, 0}, {4}, {128, 128}, {0, 0}, {4, 0, 4, 128, 4}}) {
    c.compress_ratios = ratios;
    c.n_layers = int64_t(ratios.size()) - (ratios.size() > 1 ? 1 : 0);
    c.n_mtp_layers = int64_t(ratios.size()) - c.n_layers;
    for (int64_t T : {4, 8, 12, 20, 64, 100, 128, 132, 256, 1000}) {
      const KvSpec s = KvSpec::make(deepinfer::engine::kv_layout_of(c), T);
      EXPECT_EQ(s.block_bytes, s.pages.page_bytes) << "block " << T << " layers " << ratios.size();
      EXPECT_EQ(s.fixed_blocks, s.pages.fixed_pages);
      EXPECT_EQ(s.pages.page_bytes, deepinfer::v4::page_layout(c, T).page_bytes);
      EXPECT_EQ(s.block_bytes % 64, 0);
      EXPECT_GE(s.blocks_for(1000) * s.block_bytes, s.fixed_bytes() + s.entry_bytes(1000));
    }
  }
}

// The fixed part (rings, compressor state) is laid out in whole rows, for awkward windows and
// widths too: pages at least one row wide, and nothing lost but page tails shorter than a row
// (and the last page's rest).
TEST(KvSpec, FixedBlocksPackWholeRows) {
  deepinfer::v4::Config c;
  for (const auto& d : std::vector<std::vector<int64_t>>{{1, 8, 8}, {3, 24, 8}, {17, 40, 24}, {16, 128, 64}, {128, 512, 128}})
    for (const auto& ratios : std::vector<std::vector<int64_t>>{{0, 4, 128, 4, 0, 128, 0}, {4}, {128, 128}, {0, 0}, {4, 0, 4, 128, 4}})
      for (int64_t T : {4, 8, 12, 20, 64, 100, 128, 132, 256, 1000}) {
        c.window = d[0];
        c.head_dim = d[1];
        c.index_head_dim = d[2];
        c.compress_ratios = ratios;
        c.n_layers = int64_t(ratios.size()) - (ratios.size() > 1 ? 1 : 0);
        c.n_mtp_layers = int64_t(ratios.size()) - c.n_layers;
        const KvSpec s = KvSpec::make(deepinfer::engine::kv_layout_of(c), T);
        SCOPED_TRACE("window " + std::to_string(d[0]) + " head " + std::to_string(d[1]) + " layers " +
                     std::to_string(ratios.size()) + " T " + std::to_string(T));
        EXPECT_EQ(s.fixed_blocks, s.pages.fixed_pages);
        EXPECT_GE(s.block_bytes, s.fixed_row_bytes);
        EXPECT_GE(s.fixed_blocks * s.block_bytes, s.fixed_bytes());
        EXPECT_LT(s.fixed_blocks * s.block_bytes - s.fixed_bytes(), (s.fixed_blocks - 1) * s.fixed_row_bytes + s.block_bytes);
      }
}

// DeepSeek-V4.1 (docs/model/v41.md §8): only the KV sources grow (entry + index key per group) and
// keep a pending group (ratio > 1); every layer has its ring; the Engram history is one fixed
// row per sequence; for every block size, window and with or without Engram.
TEST(KvSpec, V41SharedSources) {
  deepinfer::v4::Config c = deepinfer::v4::load_config(std::string(DI_SHARED_DIR) + "/golden/tiny-v41-a/model/config.json");
  ASSERT_TRUE(c.v41());
  for (bool engram : {true, false})
    for (int64_t window : {1, 3, 16, 128})
      for (int64_t T : {4, 8, 12, 20, 64, 100, 132, 1000}) {
        deepinfer::v4::Config v = c;
        v.window = window;
        if (!engram) v.engram_layer_ids.clear();
        const KvSpec s = KvSpec::make(deepinfer::engine::kv_layout_of(v), T);
        SCOPED_TRACE("engram " + std::to_string(engram) + " window " + std::to_string(window) + " T " + std::to_string(T));
        EXPECT_EQ(s.n_sources, 2);
        EXPECT_EQ(s.pages.sequence_row.rows, engram ? 1 : 0);
        EXPECT_GE(s.fixed_blocks * s.block_bytes, s.fixed_bytes());
        EXPECT_GE(s.blocks_for(1000) * s.block_bytes, s.fixed_bytes() + s.entry_bytes(1000));
        // Two sources of head_dim 128 + index keys 128: ratio 2 (T/2 groups) and ratio 1 (T).
        EXPECT_EQ(s.entry_bytes(T), (T / 2 + T) * 256 * 4);
      }
  // 10 rings of 16 x 128, one pending ratio-2 ring (kv + score) and the Engram history of 2,
  // both rounded up to kMinRingRows positions (so a speculative chunk of 8 can be undone).
  const KvSpec s = KvSpec::make(deepinfer::engine::kv_layout_of(c), 64);
  EXPECT_EQ(s.window_ring_bytes, 10 * 16 * 128 * 4);
  EXPECT_EQ(kMinRingRows, 8);
  EXPECT_EQ(s.compressor_state_bytes, (2 * 8 * 128 + 8) * 4);
}

// DeepSeek-V4-Flash (docs/model/config.md §1: 43 layers + 1 MTP, window 128, head_dim 512, index_head_dim
// 128, ratios [0,0] + [4,128] x 20 + [4] + [0]): about 23.7 MB of fixed state per sequence,
// 27 pages of 64 tokens, as few as whole pages allow.
TEST(KvSpec, V4FlashFixedPart) {
  KvLayout l;
  l.window_tokens = 128;
  l.head_dim = 512;
  l.index_head_dim = 128;
  l.layer_ratios = {0, 0};
  for (int i = 0; i < 20; ++i) l.layer_ratios.insert(l.layer_ratios.end(), {4, 128});
  l.layer_ratios.insert(l.layer_ratios.end(), {4, 0});
  const KvSpec s = KvSpec::make(l, 64);
  EXPECT_EQ(s.window_ring_bytes, 44 * 128 * 512 * 4);
  EXPECT_EQ(s.compressor_state_bytes, 21 * (2 * 8 * 1024 + 2 * 8 * 256) * 4 + 20 * (2 * 128 * 512) * 4);
  EXPECT_EQ(s.fixed_bytes(), 23740416);
  EXPECT_EQ(s.block_bytes, 16 * 21 * (512 + 128) * 4 + 20 * 512 * 4);
  EXPECT_EQ(s.fixed_row_bytes, 2 * 512 * 4);
  EXPECT_EQ(s.fixed_blocks, (s.fixed_bytes() + s.block_bytes - 1) / s.block_bytes);
  EXPECT_EQ(s.fixed_blocks, 27);
}

TEST(KvManager, ForkSharesFullPagesAndCountsReferences) {
  const KvSpec s = KvSpec::make(tiny_layout(), 16);
  const int64_t F = s.fixed_blocks;
  KvManager kv(s, 3 * F + 20);
  ASSERT_TRUE(kv.reserve(1, 40));  // pages: 2 full + 1 partial
  const std::vector<BlockId> src = kv.pages(1);
  ASSERT_EQ(src.size(), 3u);
  EXPECT_EQ(kv.fork_cost(40), F + 1);
  EXPECT_EQ(kv.fork_cost(32), F);
  ASSERT_TRUE(kv.fork(1, 2, 40));
  ASSERT_TRUE(kv.fork(1, 3, 40));
  const std::vector<BlockId> a = kv.pages(2), b = kv.pages(3);
  EXPECT_EQ(a[0], src[0]);
  EXPECT_EQ(a[1], src[1]);
  EXPECT_NE(a[2], src[2]);
  EXPECT_NE(a[2], b[2]);
  EXPECT_EQ(kv.ref_count(src[0]), 3);
  EXPECT_EQ(kv.ref_count(src[2]), 1);
  EXPECT_EQ(kv.held(2), s.blocks_for(40));
  EXPECT_EQ(kv.used_blocks(), 3 * F + 5);  // 3 fixed parts, 2 shared pages, 3 last pages
  std::string why;
  EXPECT_TRUE(kv.check_integrity(&why)) << why;
  // Freeing the source frees only what nobody else holds.
  EXPECT_EQ(kv.freeable({1}), F + 1);
  EXPECT_EQ(kv.freeable({1, 2, 3}), kv.used_blocks());
  kv.free(1);
  EXPECT_EQ(kv.ref_count(src[0]), 2);
  ASSERT_TRUE(kv.reserve(2, 100));
  EXPECT_EQ(kv.pages(2)[1], src[1]);
  EXPECT_TRUE(kv.check_integrity(&why)) << why;
  // A fork that does not fit changes nothing.
  const int64_t free_before = kv.free_blocks();
  ASSERT_TRUE(kv.reserve(9, s.max_tokens_in(free_before) - 16));
  EXPECT_LT(kv.free_blocks(), F + 1);
  EXPECT_FALSE(kv.fork(3, 4, 40));
  EXPECT_EQ(kv.held(4), 0);
  EXPECT_THROW(kv.fork(3, 2, 40), std::logic_error);    // onto an owner holding blocks
  EXPECT_THROW(kv.fork(3, 5, 4000), std::logic_error);  // past the source's pages
  for (OwnerId o : kv.owners()) kv.free(o);
  EXPECT_EQ(kv.used_blocks(), 0);
  EXPECT_TRUE(kv.check_integrity(&why)) << why;
}

// Random reserve / fork / transfer / free: references always equal the tables holding a
// block, freeable() predicts exactly what a free returns, and the pool ends fully free.
TEST(KvManager, RandomForksKeepReferencesExact) {
  for (int64_t T : {4, 16, 20}) {
    const KvSpec s = KvSpec::make(tiny_layout(), T);
    KvManager kv(s, 300);
    std::mt19937 rng{uint32_t(T)};
    std::map<OwnerId, int64_t> len;  // tokens of each live owner
    for (int it = 0; it < 4000; ++it) {
      const OwnerId o = 1 + rng() % 10;
      switch (rng() % 5) {
        case 0:
        case 1: {
          const int64_t want = len[o] + 1 + int64_t(rng() % 50);
          if (kv.reserve(o, want)) len[o] = want;
          break;
        }
        case 2: {
          const OwnerId to = 1 + rng() % 10;
          if (len[o] > 0 && kv.held(to) == 0 && to != o) {
            const int64_t n = 1 + int64_t(rng() % uint64_t(len[o]));  // any prefix of the source
            if (kv.fork(o, to, n)) len[to] = n;
          }
          break;
        }
        case 3: {
          const OwnerId to = 1 + rng() % 10;
          if (kv.held(to) == 0 && len[o] > 0 && kv.pages(o).size() == size_t(s.pages_for(len[o]))) {
            kv.transfer(o, to);
            len[to] = len[o];
            len[o] = 0;
          }
          break;
        }
        case 4: {
          const int64_t before = kv.free_blocks(), predicted = kv.freeable({o});
          kv.free(o);
          len[o] = 0;
          ASSERT_EQ(kv.free_blocks() - before, predicted);
          break;
        }
      }
      std::string why;
      ASSERT_TRUE(kv.check_integrity(&why)) << why;
      for (const auto& [k, n] : len)
        if (kv.held(k)) {
          ASSERT_GE(kv.held(k), s.blocks_for(n));
        }
    }
    std::vector<OwnerId> all = kv.owners();
    EXPECT_EQ(kv.freeable(all), kv.used_blocks());
    for (OwnerId k : all) kv.free(k);
    EXPECT_EQ(kv.free_blocks(), kv.total_blocks());
  }
}

TEST(PrefixCache, TouchKeepsAHitSnapshotAndOldestSkipsIt) {
  PrefixCache c(3);
  c.insert(1, {1});
  c.insert(2, {2});
  c.insert(3, {3});
  EXPECT_EQ(c.oldest(), 1u);
  EXPECT_EQ(c.oldest(1), 2u);
  c.touch(1);
  EXPECT_EQ(c.oldest(), 2u);
  EXPECT_EQ(c.ids(), (std::vector<uint64_t>{2, 3, 1}));
  ASSERT_NE(c.tokens(3), nullptr);
  EXPECT_EQ(*c.tokens(3), std::vector<int32_t>{3});
  EXPECT_EQ(c.tokens(9), nullptr);
  PrefixCache one(1);
  one.insert(5, {5});
  EXPECT_FALSE(one.oldest(5));
}
