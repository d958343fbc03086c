// KV accounting: per-layer-kind sizes from a config, the block pool, block tables and the
// prefix-cache index.
#include <gtest/gtest.h>

#include <random>

#include "kv/block_pool.h"
#include "kv/kv_manager.h"
#include "kv/kv_spec.h"
#include "kv/prefix_cache.h"

using namespace deepinfer::kv;

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
  // 64 tokens: 16 ratio-4 groups in 2 layers, half a ratio-128 entry in 2 layers.
  EXPECT_EQ(s.block_bytes, 16 * 2 * 1024 + 64 * 2 * 512 / 128);
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
