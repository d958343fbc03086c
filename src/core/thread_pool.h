// A fixed pool of worker threads owned by whoever runs the model (engine, CLI, bench) and
// passed explicitly to the kernels. No thread is created per call: the decode loop issues
// thousands of small parallel regions per token, so workers spin briefly on an epoch
// counter before sleeping, and the calling thread takes a share of the work itself.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace deepinfer {

class ThreadPool {
 public:
  // n_threads counts the caller: 1 means everything runs inline on the calling thread.
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }

  // Calls fn(begin, end, share) over [0, n) split into contiguous ranges, one per thread
  // (share t is thread t's), with range edges on multiples of `grain`. Returns when every
  // range is done. Each range is run once, with its share's index, normally by its thread;
  // a worker that has not started its share a short while after the caller finished its own
  // (descheduled by another process, asleep) has it run by the caller instead, so a busy
  // core delays a region by that while, not by a scheduler time slice.
  // Not reentrant: fn must not call run() on the same pool.
  void run(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t, int)>& fn);

  // fn(t, t + 1, t) on every thread t of the pool itself, at once (never taken over: for
  // per-thread state such as thread-local scratch, or measuring every core).
  void run_on_each_thread(const std::function<void(int64_t, int64_t, int)>& fn);

  // Tests: while held, workers do not start new regions (as if descheduled).
  void hold_workers_for_test(bool hold) { hold_.store(hold); }

  // As run(), for streaming work on cores that do not run at the same speed (a VM's other
  // tenants, a busy sibling): each thread's share is cut into `pieces` ranges (edges on
  // `grain`) that it takes from the front, in order, so it still streams through memory;
  // a thread whose share is done takes ranges from the back of the others' shares. fn may
  // be called several times per thread; every index is covered exactly once.
  void run_balanced(int64_t n, int64_t grain, int pieces, const std::function<void(int64_t, int64_t, int)>& fn);

  // Parallel regions started so far (run / run_balanced calls with work): with more than one
  // thread each is a fork and a join barrier, the cost bench reports per token and per layer.
  uint64_t dispatches() const { return dispatches_.load(std::memory_order_relaxed); }

  // Threads to use when none is requested: the machine's hardware threads.
  static int default_threads();

  // Memory the caller's coming parallel regions will read. Idle workers prefetch it, a chunk
  // at a time between looks for work (into their cache, which spills into the shared
  // last-level cache), whenever the caller runs serial code, until it is all done or the
  // next hint replaces it. Only addresses are prefetched, never dereferenced, so any range
  // is safe to pass.
  struct MemRange {
    const void* p = nullptr;
    size_t bytes = 0;
  };
  static constexpr int kMaxHintRanges = 16;
  void prefetch_hint(const MemRange* ranges, int n);
  // Chunks of the current hint no worker has taken yet (for tests).
  uint64_t hint_chunks_left() const;

 private:
  void worker_loop(int index);
  void run_share(int index);
  void run_piece(int t, int by, bool from_back, bool late);
  bool prefetch_some();
  enum class Claim { kOwner, kAnyone, kOnlyOwner };
  void start_job(int64_t n, int64_t grain, int pieces, Claim who, const std::function<void(int64_t, int64_t, int)>& fn);
  // Thread t's share as grain indices [g0, g1), cut into pieces of `piece` grains.
  struct Share {
    int64_t g0, g1, piece;
  };
  Share share_of(int t) const;
  bool claim(int t, int by, bool from_back, bool late, int64_t& begin, int64_t& end, int& fn_index);

  int n_threads_;
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::atomic<uint64_t> epoch_{0};
  std::atomic<uint64_t> dispatches_{0};
  std::atomic<uint64_t> remaining_{0};  // pieces of the current job not finished yet
  std::atomic<bool> hold_{false};
  std::atomic<bool> stop_{false};
  // The current job, valid while remaining_ > 0; read only after a claim (so a worker that
  // wakes late never reads the fields of a job being written).
  const std::function<void(int64_t, int64_t, int)>* job_ = nullptr;
  int64_t job_n_ = 0, job_grain_ = 1;
  int job_pieces_ = 1;  // pieces per share (1: run's static shares)
  // Per thread: the next piece from the front (low 32 bits) and one past the last piece not
  // yet taken from the back (bits 32-61), and who may take them (bits 62-63: Claim), own
  // cache line each.
  struct alignas(64) Cursor {
    std::atomic<uint64_t> v{0};
  };
  std::vector<Cursor> cursors_;
  std::vector<uint64_t> piece_counts_;  // start_job's scratch (the caller's only)
  // The prefetch hint: ranges, their prefix sums in chunks, and the next chunk to take
  // (high 16 bits: the hint's generation, so a stale claim fails; low 48: the chunk).
  struct HintRange {
    std::atomic<uintptr_t> p{0};
    std::atomic<uint64_t> first_chunk{0}, chunks{0};
  };
  HintRange hint_[kMaxHintRanges];
  std::atomic<int> hint_ranges_{0};
  std::atomic<uint64_t> hint_next_{0};
  std::atomic<uint64_t> hint_total_{0};
  std::atomic<uint64_t> hint_gen_{0};
};

// Serial fallback so kernels can take a nullable pool.
inline void parallel_for(ThreadPool* pool, int64_t n, int64_t grain,
                         const std::function<void(int64_t, int64_t, int)>& fn) {
  if (!pool || pool->size() <= 1 || n <= grain) {
    if (n > 0) fn(0, n, 0);
    return;
  }
  pool->run(n, grain, fn);
}

// run_balanced through a nullable pool.
inline void parallel_for_balanced(ThreadPool* pool, int64_t n, int64_t grain, int pieces,
                                  const std::function<void(int64_t, int64_t, int)>& fn) {
  if (!pool || pool->size() <= 1 || n <= grain) {
    if (n > 0) fn(0, n, 0);
    return;
  }
  pool->run_balanced(n, grain, pieces, fn);
}

}  // namespace deepinfer
