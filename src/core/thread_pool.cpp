#include "core/thread_pool.h"

#include <algorithm>
#include <chrono>

#include "core/profile.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define DI_CPU_RELAX() _mm_pause()
#define DI_PREFETCH(p) _mm_prefetch(static_cast<const char*>(p), _MM_HINT_T0)
#elif defined(__aarch64__)
#define DI_CPU_RELAX() __asm__ __volatile__("yield" ::: "memory")  // the spin-wait hint
#define DI_PREFETCH(p) __builtin_prefetch(p)
#else
#define DI_CPU_RELAX() std::this_thread::yield()
#define DI_PREFETCH(p) __builtin_prefetch(p)
#endif

namespace deepinfer {

namespace {
// How long an idle worker keeps polling before it yields its core each time, and before it
// sleeps on the condition variable.
constexpr std::chrono::microseconds kSpinYieldAfter{50};
constexpr std::chrono::microseconds kSpinSleepAfter{2000};
// How long into a region the caller waits for a worker to begin its static share before it
// runs that share itself (ThreadPool::run).
constexpr std::chrono::microseconds kStealAfter{30};
}  // namespace

ThreadPool::ThreadPool(int n_threads)
    : n_threads_(std::max(1, n_threads)),
      cursors_(size_t(std::max(1, n_threads))),
      piece_counts_(size_t(std::max(1, n_threads))) {
  for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_.store(true);
    epoch_.fetch_add(1);
  }
  cv_.notify_all();
  for (auto& t : workers_) t.join();
}

int ThreadPool::default_threads() {
  unsigned n = std::thread::hardware_concurrency();
  return n ? int(n) : 1;
}

ThreadPool::Share ThreadPool::share_of(int t) const {
  const int64_t n_grains = (job_n_ + job_grain_ - 1) / job_grain_;
  const int64_t g0 = n_grains * t / n_threads_, g1 = n_grains * (t + 1) / n_threads_;
  const int64_t pieces = std::max(1, job_pieces_);
  return {g0, g1, std::max<int64_t>(1, (g1 - g0 + pieces - 1) / pieces)};
}

namespace {
inline uint64_t pack(uint64_t front, uint64_t back, uint64_t who) { return front | back << 32 | who << 62; }
constexpr uint64_t kBackMask = (uint64_t(1) << 30) - 1;
}  // namespace

// The next piece from the front (or the back) of share t for thread `by`, as an index range
// and the index fn gets; false when none is left or `by` may not take it. Static shares
// (Claim::kOwner) go to their thread, or to the caller when `late`; balanced pieces
// (kAnyone) to any thread; kOnlyOwner to their thread alone.
bool ThreadPool::claim(int t, int by, bool from_back, bool late, int64_t& begin, int64_t& end, int& fn_index) {
  std::atomic<uint64_t>& c = cursors_[size_t(t)].v;
  uint64_t v = c.load(std::memory_order_acquire);
  for (;;) {
    const uint64_t front = v & 0xffffffffu, back = (v >> 32) & kBackMask, who = v >> 62;
    if (front >= back) return false;
    if (by != t && (who == uint64_t(Claim::kOnlyOwner) || (who == uint64_t(Claim::kOwner) && !late))) return false;
    const uint64_t piece = from_back ? back - 1 : front;
    const uint64_t next = from_back ? pack(front, back - 1, who) : pack(front + 1, back, who);
    if (c.compare_exchange_weak(v, next, std::memory_order_acq_rel, std::memory_order_acquire)) {
      // The job's fields only now: while a piece is claimed and not done the caller waits, so
      // they are this job's (the cursor's release store came after them).
      const Share s = share_of(t);
      begin = std::min(job_n_, (s.g0 + int64_t(piece) * s.piece) * job_grain_);
      end = std::min(job_n_, std::min(s.g1, s.g0 + int64_t(piece + 1) * s.piece) * job_grain_);
      fn_index = who == uint64_t(Claim::kAnyone) ? by : t;
      return true;
    }
  }
}

void ThreadPool::run_piece(int t, int by, bool from_back, bool late) {
  int64_t begin, end;
  int fn_index;
  while (claim(t, by, from_back, late, begin, end, fn_index)) {
    if (begin < end) (*job_)(begin, end, fn_index);
    remaining_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

void ThreadPool::run_share(int index) {
  run_piece(index, index, false, false);
  // Then help with the others' balanced pieces, nearest first (a static job's shares are
  // their threads' own: not worth the look at every other cursor).
  if ((cursors_[size_t(index)].v.load(std::memory_order_acquire) >> 62) != uint64_t(Claim::kAnyone)) return;
  for (int k = 1; k < n_threads_; ++k) run_piece((index + k) % n_threads_, index, true, false);
}

void ThreadPool::run(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t, int)>& fn) {
  if (n <= 0) return;
  dispatches_.fetch_add(1, std::memory_order_relaxed);
  profile::count_dispatch();
  start_job(n, grain, 1, Claim::kOwner, fn);
}

void ThreadPool::run_on_each_thread(const std::function<void(int64_t, int64_t, int)>& fn) {
  dispatches_.fetch_add(1, std::memory_order_relaxed);
  profile::count_dispatch();
  start_job(n_threads_, 1, 1, Claim::kOnlyOwner, fn);
}

void ThreadPool::run_balanced(int64_t n, int64_t grain, int pieces,
                              const std::function<void(int64_t, int64_t, int)>& fn) {
  if (n <= 0) return;
  dispatches_.fetch_add(1, std::memory_order_relaxed);
  profile::count_dispatch();
  if (n_threads_ == 1) {
    fn(0, n, 0);
    return;
  }
  start_job(n, grain, std::max(1, pieces), Claim::kAnyone, fn);
}

namespace {
constexpr uint64_t kHintChunk = 4096;  // bytes a worker prefetches between looks at the epoch
constexpr uint64_t kHintChunkMask = (uint64_t(1) << 48) - 1;
}  // namespace

void ThreadPool::prefetch_hint(const MemRange* ranges, int n) {
  if (n_threads_ <= 1) return;
  n = std::min(n, kMaxHintRanges);
  // Stop claims on the old hint first, then publish the new ranges and open the new one.
  const uint64_t gen = (hint_gen_.fetch_add(1, std::memory_order_relaxed) + 1) & 0xffff;
  hint_next_.store(gen << 48 | kHintChunkMask, std::memory_order_release);
  uint64_t total = 0;
  int k = 0;
  for (int i = 0; i < n; ++i) {
    if (!ranges[i].p || ranges[i].bytes == 0) continue;
    const uintptr_t begin = reinterpret_cast<uintptr_t>(ranges[i].p) & ~uintptr_t(63);
    const uint64_t chunks = (reinterpret_cast<uintptr_t>(ranges[i].p) + ranges[i].bytes - begin + kHintChunk - 1) / kHintChunk;
    hint_[k].p.store(begin, std::memory_order_relaxed);
    hint_[k].first_chunk.store(total, std::memory_order_relaxed);
    hint_[k].chunks.store(chunks, std::memory_order_relaxed);
    total += chunks;
    ++k;
  }
  hint_ranges_.store(k, std::memory_order_relaxed);
  hint_total_.store(total, std::memory_order_relaxed);
  hint_next_.store(gen << 48, std::memory_order_release);
}

uint64_t ThreadPool::hint_chunks_left() const {
  const uint64_t chunk = hint_next_.load(std::memory_order_acquire) & kHintChunkMask;
  const uint64_t total = hint_total_.load(std::memory_order_relaxed);
  return chunk >= total ? 0 : total - chunk;
}

// Takes one chunk of the hint and prefetches it; false when there is none left.
bool ThreadPool::prefetch_some() {
  uint64_t v = hint_next_.load(std::memory_order_acquire);
  for (;;) {
    const uint64_t chunk = v & kHintChunkMask;
    if (chunk >= hint_total_.load(std::memory_order_relaxed)) return false;
    if (hint_next_.compare_exchange_weak(v, v + 1, std::memory_order_acq_rel)) break;
  }
  const uint64_t chunk = v & kHintChunkMask;
  const int n = hint_ranges_.load(std::memory_order_relaxed);
  for (int i = 0; i < n; ++i) {
    const uint64_t first = hint_[i].first_chunk.load(std::memory_order_relaxed);
    if (chunk < first || chunk >= first + hint_[i].chunks.load(std::memory_order_relaxed)) continue;
    // A hint replaced meanwhile may give a wrong address here: it is only prefetched.
    const char* p = reinterpret_cast<const char*>(hint_[i].p.load(std::memory_order_relaxed) + (chunk - first) * kHintChunk);
    for (uint64_t b = 0; b < kHintChunk; b += 64) DI_PREFETCH(p + b);
    break;
  }
  return true;
}

void ThreadPool::start_job(int64_t n, int64_t grain, int pieces, Claim who,
                           const std::function<void(int64_t, int64_t, int)>& fn) {
  job_ = &fn;
  job_n_ = n;
  job_grain_ = std::max<int64_t>(1, grain);
  job_pieces_ = pieces;
  uint64_t total = 0;
  std::vector<uint64_t>& counts = piece_counts_;  // sized at construction: a region allocates nothing
  for (int t = 0; t < n_threads_; ++t) {
    const Share s = share_of(t);
    counts[size_t(t)] = uint64_t((s.g1 - s.g0 + s.piece - 1) / s.piece);
    total += counts[size_t(t)];
  }
  remaining_.store(total, std::memory_order_relaxed);
  for (int t = 0; t < n_threads_; ++t)  // after the fields: a claim reads them
    cursors_[size_t(t)].v.store(pack(0, counts[size_t(t)], uint64_t(who)), std::memory_order_release);
  {
    std::lock_guard<std::mutex> lk(mu_);
    epoch_.fetch_add(1, std::memory_order_release);
  }
  cv_.notify_all();
  run_share(0);
  // Wait for the pieces in flight. Spin briefly, then yield: on an oversubscribed machine
  // (tests in parallel, other processes) a descheduled worker must get the core back. A
  // static share its worker has not begun kStealAfter into the region is run here instead:
  // a spinning worker takes its share within a microsecond, so such a worker is descheduled
  // or asleep, and waiting for it would cost a time slice of the scheduler.
  const std::chrono::steady_clock::time_point t0 = std::chrono::steady_clock::now();
  bool late = false;
  for (int spin = 0; remaining_.load(std::memory_order_acquire) != 0; ++spin) {
    if (who == Claim::kOwner && (spin & 63) == 63) {
      late = late || std::chrono::steady_clock::now() - t0 > kStealAfter;
      if (late) {
        for (int t = 1; t < n_threads_; ++t) run_piece(t, 0, true, true);
        continue;
      }
    }
    if (spin < 4000) DI_CPU_RELAX();
    else std::this_thread::yield();
  }
  job_ = nullptr;
}

void ThreadPool::worker_loop(int index) {
  using Clock = std::chrono::steady_clock;
  uint64_t seen = 0;
  for (;;) {
    // Wait for the next region without sleeping for a while: between two regions of a
    // decode step the caller runs serial code (norms, routing, attention bookkeeping) for
    // tens to hundreds of microseconds, and a worker woken through the condition variable
    // starts its share that much later, so the caller waits for it at every region.
    // Pure pause first, then pause + yield so an oversubscribed machine (tests in parallel)
    // still gets the core back, then sleep.
    uint64_t e = epoch_.load(std::memory_order_acquire);
    const Clock::time_point t0 = Clock::now();
    for (int spin = 0; e == seen; ++spin) {
      if (prefetch_some()) {  // the caller is in serial code: pull in what comes next
        e = epoch_.load(std::memory_order_acquire);
        spin = 0;
        continue;
      }
      DI_CPU_RELAX();
      e = epoch_.load(std::memory_order_acquire);
      if ((spin & 63) != 63 || e != seen) continue;
      const auto waited = Clock::now() - t0;
      if (waited > kSpinSleepAfter) break;
      if (waited > kSpinYieldAfter) std::this_thread::yield();
    }
    if (e == seen) {
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait(lk, [&] { return epoch_.load(std::memory_order_acquire) != seen; });
      e = epoch_.load(std::memory_order_acquire);
    }
    seen = e;
    if (stop_.load()) return;
    while (hold_.load(std::memory_order_relaxed) && !stop_.load()) std::this_thread::yield();
    run_share(index);
  }
}

}  // namespace deepinfer
