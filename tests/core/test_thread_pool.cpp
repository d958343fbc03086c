#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
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

TEST(ThreadPool, BalancedCoversEveryIndexExactlyOnceOnGrainEdges) {
  for (int threads : {1, 2, 3, 5})
    for (int pieces : {1, 3, 16}) {
      ThreadPool pool(threads);
      for (int64_t n : {1, 7, 64, 1000, 1001})
        for (int64_t grain : {1, 16}) {
          std::vector<std::atomic<int>> hits(n);
          pool.run_balanced(n, grain, pieces, [&](int64_t b, int64_t e, int t) {
            EXPECT_LT(t, threads);
            EXPECT_LT(b, e);
            if (b % grain != 0) ADD_FAILURE() << "range start " << b << " not on grain " << grain;
            for (int64_t i = b; i < e; ++i) hits[i]++;
          });
          for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << i << " threads " << threads;
        }
    }
}

// A thread held up in its first piece: the others finish their shares and take the rest of
// its share from the back, so it does only that piece; each thread walks its own pieces
// front to back.
TEST(ThreadPool, BalancedSlowThreadsShareIsTakenOver) {
  ThreadPool pool(2);
  const int64_t n = 1600;
  std::vector<int> done_by(n, -1);
  std::atomic<bool> release{false};
  std::atomic<int64_t> ranges_of_1{0};
  std::vector<int64_t> starts_of_0;
  pool.run_balanced(n, 1, 16, [&](int64_t b, int64_t e, int t) {
    if (t == 0) {
      starts_of_0.push_back(b);
      // The first piece of share 0 waits until thread 1 has taken the rest (or 10 s, so a
      // pool that never steals fails the checks below instead of hanging).
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      if (b == 0)
        while (!release.load() && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
    } else {
      ranges_of_1++;
    }
    for (int64_t i = b; i < e; ++i) done_by[i] = t;
    if (t == 1 && b == 50) release = true;  // the last piece of share 0 (pieces of 50)
  });
  EXPECT_EQ(starts_of_0, std::vector<int64_t>{0});
  for (int64_t i = 0; i < 50; ++i) EXPECT_EQ(done_by[i], 0) << i;
  for (int64_t i = 50; i < n; ++i) EXPECT_EQ(done_by[i], 1) << i;
  EXPECT_EQ(ranges_of_1.load(), 16 + 15);
}

// A prefetch hint is drained by the idle worker while the caller does serial work, is
// replaced by the next one, and never disturbs the regions (any address may be named: it
// is only prefetched). A single-thread pool ignores hints.
TEST(ThreadPool, PrefetchHintIsTakenByTheIdleWorker) {
  ThreadPool pool(2);
  std::vector<char> buf(size_t(3) << 20);
  const ThreadPool::MemRange big[] = {{buf.data(), buf.size()}, {buf.data() + 7, 100}, {nullptr, 64}};
  // A hint is for a worker spinning between the regions of a step; one that has gone to
  // sleep is not woken for it. So wake the worker with a region, then hint; retried, because
  // a loaded machine can keep the worker off a core until it falls asleep (the test then saw
  // 770 chunks never taken). The deadline only bounds a hang.
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + std::chrono::seconds(120);
  do {
    pool.run_balanced(2, 1, 1, [](int64_t, int64_t, int) {});
    pool.prefetch_hint(big, 3);
    const auto until = Clock::now() + std::chrono::milliseconds(200);
    while (pool.hint_chunks_left() > 0 && Clock::now() < until) std::this_thread::yield();
  } while (pool.hint_chunks_left() > 0 && Clock::now() < deadline);
  EXPECT_EQ(pool.hint_chunks_left(), 0u);
  // Replaced mid-way, with addresses that are not mapped, while regions run.
  const ThreadPool::MemRange odd[] = {{reinterpret_cast<const void*>(uintptr_t(4096)), size_t(1) << 20},
                                      {buf.data() + buf.size() - 1, 4096}};
  std::atomic<int64_t> sum{0};
  for (int r = 0; r < 200; ++r) {
    pool.prefetch_hint(r % 2 ? odd : big, 2);
    pool.run_balanced(1000, 1, 4, [&](int64_t b, int64_t e, int) { sum += e - b; });
  }
  EXPECT_EQ(sum.load(), 200 * 1000);
  ThreadPool one(1);
  one.prefetch_hint(big, 1);
  EXPECT_EQ(one.hint_chunks_left(), 0u);
}

// A worker that does not start its share (held here, as one descheduled by another process
// would be) does not hold the region: the caller runs its static share itself, with the
// share's index and range, once; run_balanced's pieces likewise; the held worker, released
// afterwards, finds nothing left. A region with the worker held would otherwise wait for it
// (here: for ever; the watchdog releases it after 20 s and the test then fails on who ran it).
TEST(ThreadPool, HeldWorkersShareIsRunByTheCaller) {
  ThreadPool pool(3);
  pool.run(3, 1, [](int64_t, int64_t, int) {});  // workers started and spinning
  pool.hold_workers_for_test(true);
  std::atomic<bool> finished{false};
  std::thread watchdog([&] {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (!finished.load() && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    pool.hold_workers_for_test(false);
  });
  const std::thread::id caller = std::this_thread::get_id();
  for (int round = 0; round < 3; ++round) {
    const int64_t n = 90;
    std::vector<int> share_of(n, -1);
    std::vector<std::thread::id> ran_on(n);
    int calls = 0;  // fn runs on the caller only while the workers are held
    pool.run(n, 1, [&](int64_t b, int64_t e, int t) {
      ++calls;
      for (int64_t i = b; i < e; ++i) {
        share_of[size_t(i)] = t;
        ran_on[size_t(i)] = std::this_thread::get_id();
      }
    });
    EXPECT_EQ(calls, 3);
    for (int64_t i = 0; i < n; ++i) {
      EXPECT_EQ(share_of[size_t(i)], int(i / 30)) << i;  // the static shares, with their indices
      EXPECT_EQ(ran_on[size_t(i)], caller) << i;
    }
    std::vector<int> hits(n, 0);
    pool.run_balanced(n, 1, 3, [&](int64_t b, int64_t e, int t) {
      EXPECT_EQ(t, 0);
      for (int64_t i = b; i < e; ++i) ++hits[size_t(i)];
    });
    for (int64_t i = 0; i < n; ++i) EXPECT_EQ(hits[size_t(i)], 1) << i;
  }
  finished = true;
  watchdog.join();
  // Released, the workers take their shares again.
  std::vector<std::thread::id> ran_on(3);
  pool.run_on_each_thread([&](int64_t b, int64_t, int t) {
    EXPECT_EQ(b, t);
    ran_on[size_t(t)] = std::this_thread::get_id();
  });
  EXPECT_EQ(ran_on[0], caller);
  EXPECT_NE(ran_on[1], caller);
  EXPECT_NE(ran_on[2], caller);
  EXPECT_NE(ran_on[1], ran_on[2]);
}
