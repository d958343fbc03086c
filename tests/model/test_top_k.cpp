// The indexer's top-k selection (top_k.h) against a plain partial sort with the comparator it
// promises (larger score first, ties to the lower index, -0 == +0): many ties, one value
// everywhere, both zeros, infinities, subnormals, scores within one binade (the radix passes
// reach the low bytes), NaN (the comparator path), k from 1 to n.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "model/deepseek_v4/top_k.h"

using deepinfer::v4::select_top_k;

namespace {

std::vector<int64_t> want_top_k(const std::vector<float>& s, int64_t k) {
  std::vector<int64_t> idx(s.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(),
                    [&](int64_t x, int64_t y) { return s[x] != s[y] ? s[x] > s[y] : x < y; });
  idx.resize(size_t(k));
  return idx;
}

std::vector<int64_t> got_top_k(const std::vector<float>& s, int64_t k) {
  std::vector<int64_t> order(s.size()), spare(s.size()), out(size_t(k), -1);
  select_top_k(s, k, order, spare, out.data());
  return out;
}

}  // namespace

TEST(IndexerTopK, EqualsPartialSortOnAwkwardScores) {
  std::mt19937 rng(3);
  const float inf = std::numeric_limits<float>::infinity();
  using Gen = float (*)(std::mt19937&);
  const Gen gens[] = {
      [](std::mt19937& r) { return std::normal_distribution<float>(0.0f, 1.0f)(r); },
      [](std::mt19937& r) { return float(std::uniform_int_distribution<int>(-3, 3)(r)) * 0.5f; },  // ties
      [](std::mt19937& r) { return 1.0f + std::ldexp(float(r() % 4096), -23); },  // one binade, low bits
      [](std::mt19937& r) { return 7.0f + 0.0f * float(r()); },                   // one value
      [](std::mt19937& r) {
        const float pick[] = {0.0f, -0.0f, 1e-42f, -1e-42f, std::numeric_limits<float>::infinity(),
                              -std::numeric_limits<float>::infinity(), 1.0f, -1.0f};
        return pick[r() % 8];
      },
  };
  for (int64_t n : {1, 2, 7, 64, 513, 2048, 8191}) {
    for (const Gen g : gens) {
      std::vector<float> s(static_cast<size_t>(n));
      for (auto& v : s) v = g(rng);
      for (int64_t k : {int64_t(1), std::min<int64_t>(n, 3), n / 2 + 1, std::min<int64_t>(n, 512), n}) {
        if (k < 1) continue;
        ASSERT_EQ(got_top_k(s, k), want_top_k(s, k)) << "n " << n << " k " << k;
      }
    }
  }
  // A NaN among the scores: the comparator's order (a NaN compares unequal and not greater).
  std::vector<float> s(300);
  for (auto& v : s) v = std::normal_distribution<float>(0.0f, 1.0f)(rng);
  s[17] = std::numeric_limits<float>::quiet_NaN();
  s[40] = inf;
  EXPECT_EQ(got_top_k(s, 9)[0], 40);
  EXPECT_EQ(got_top_k(s, 9).size(), 9u);
}
