// RopeTable::apply keeps the last table's angles per thread; the rotation must not depend on
// what was rotated before (tables, positions, inverse interleaved).
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "model/deepseek_v4/rope.h"

using namespace deepinfer::v4;

TEST(Rope, CachedAnglesEqualFreshOnes) {
  Config cfg;
  cfg.rope_dim = 64;
  cfg.rope_theta = 10000.0;
  cfg.compress_rope_theta = 160000.0;
  cfg.rope_factor = 16.0;
  cfg.rope_original_seq_len = 65536;
  const RopeTable plain = RopeTable::make(cfg, false), yarn = RopeTable::make(cfg, true);
  ASSERT_NE(plain.id, yarn.id);
  // Copies without an id take the uncached path: the referee.
  RopeTable plain_ref = plain, yarn_ref = yarn;
  plain_ref.id = yarn_ref.id = 0;

  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const int64_t n = 96;  // 32 dims without rotation, then 64 rotated
  Numerics num;
  for (int step = 0; step < 400; ++step) {
    const bool use_yarn = rng() % 2, inverse = rng() % 3 == 0;
    const int64_t pos = int64_t(rng() % 5) * 1000 + int64_t(rng() % 3);  // repeats, as heads of one token
    std::vector<float> x(n), y;
    for (auto& v : x) v = nd(rng);
    y = x;
    (use_yarn ? yarn : plain).apply(x.data(), n, pos, inverse, num);
    (use_yarn ? yarn_ref : plain_ref).apply(y.data(), n, pos, inverse, num);
    ASSERT_EQ(0, std::memcmp(x.data(), y.data(), n * sizeof(float)))
        << "step " << step << " pos " << pos << (use_yarn ? " yarn" : " plain") << (inverse ? " inverse" : "");
  }
}
