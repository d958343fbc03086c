#include <gtest/gtest.h>

#include <atomic>
#include <vector>

#include "core/thread_pool.h"

using namespace deepinfer;

TEST(ThreadPool, CoversEveryIndexExactlyOnceOnGrainEdges) {
  for (int threads : {1, 2, 3, 5}) {
    ThreadPool pool(threads);
    for (int64_t n : {1, 7, 64, 1000, 1001}) {
      for (int64_t grain : {1, 16}) {
        std::vector<std::atomic<int>> hits(n);
        pool.run(n, grain, [&](int64_t b, int64_t e, int t) {
          EXPECT_LT(t, threads);
          if (b % grain != 0) ADD_FAILURE() << "range start " << b << " not on grain " << grain;
          for (int64_t i = b; i < e; ++i) hits[i]++;
        });
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << i;
      }
    }
  }
}

TEST(ThreadPool, ManySmallRegionsInARow) {
  ThreadPool pool(2);
  std::atomic<int64_t> sum{0};
  for (int r = 0; r < 20000; ++r) pool.run(2, 1, [&](int64_t b, int64_t e, int) { sum += e - b; });
  EXPECT_EQ(sum.load(), 40000);
}
