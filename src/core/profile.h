// Opt-in wall-clock profile of the forward pass by named section, for finding where a
// decode step's time goes (DEEPINFER_PROFILE=1, or profile::set_enabled). A section's time
// is inclusive and taken on the thread that opens it (the step thread: parallel regions
// count as the time the step waited for them). Disabled, a section costs one branch.
#pragma once
#include <atomic>
#include <cstdint>
#include <cstdio>

namespace deepinfer::profile {

struct Section {
  const char* name;
  std::atomic<int64_t> ns{0};
  std::atomic<int64_t> calls{0};
  std::atomic<int64_t> dispatches{0};  // thread-pool parallel regions started inside it
};

// Parallel regions started by any ThreadPool (counted always: one relaxed add per region, next
// to a fork and a join), so that sections can say how many barriers they cost.
extern std::atomic<int64_t> g_dispatches;
inline void count_dispatch() { g_dispatches.fetch_add(1, std::memory_order_relaxed); }
inline int64_t dispatches_now() { return g_dispatches.load(std::memory_order_relaxed); }

// Set once from DEEPINFER_PROFILE at start-up; set_enabled overrides it.
extern std::atomic<bool> g_enabled;
inline bool enabled() { return g_enabled.load(std::memory_order_relaxed); }
void set_enabled(bool on);

// The section of this name (a string literal), made on first use; never freed.
Section* section(const char* name);
int64_t now_ns();
// Zeroes every section (e.g. after warm-up or between measured phases).
void reset();
// Sections by total time: ms in all, calls, us per call, thread-pool dispatches per call, % of
// `total_ns` (0: of the largest).
void report(std::FILE* out, int64_t total_ns = 0);

class Scope {
 public:
  explicit Scope(Section* s)
      : s_(enabled() ? s : nullptr), t0_(s_ ? now_ns() : 0), d0_(s_ ? dispatches_now() : 0) {}
  ~Scope() {
    if (!s_) return;
    s_->ns.fetch_add(now_ns() - t0_, std::memory_order_relaxed);
    s_->calls.fetch_add(1, std::memory_order_relaxed);
    s_->dispatches.fetch_add(dispatches_now() - d0_, std::memory_order_relaxed);
  }
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  Section* s_;
  int64_t t0_;
  int64_t d0_;
};

// A section timer that moves along a function's phases: start(a) ... start(b) ... stop();
// the destructor stops the running one.
class Phase {
 public:
  Phase() = default;
  ~Phase() { stop(); }
  Phase(const Phase&) = delete;
  Phase& operator=(const Phase&) = delete;
  void start(Section* s) {
    stop();
    if (!enabled()) return;
    s_ = s;
    t0_ = now_ns();
    d0_ = dispatches_now();
  }
  void stop() {
    if (!s_) return;
    s_->ns.fetch_add(now_ns() - t0_, std::memory_order_relaxed);
    s_->calls.fetch_add(1, std::memory_order_relaxed);
    s_->dispatches.fetch_add(dispatches_now() - d0_, std::memory_order_relaxed);
    s_ = nullptr;
  }

 private:
  Section* s_ = nullptr;
  int64_t t0_ = 0;
  int64_t d0_ = 0;
};

}  // namespace deepinfer::profile

#define DI_PROFILE_CAT2(a, b) a##b
#define DI_PROFILE_CAT(a, b) DI_PROFILE_CAT2(a, b)
// Times the rest of the enclosing block as section `name`.
#define DI_PROFILE(name)                                                                                    \
  static ::deepinfer::profile::Section* const DI_PROFILE_CAT(di_profile_section_, __LINE__) =                \
      ::deepinfer::profile::section(name);                                                                  \
  ::deepinfer::profile::Scope DI_PROFILE_CAT(di_profile_scope_, __LINE__)(DI_PROFILE_CAT(di_profile_section_, __LINE__))
// The Section* of `name`, looked up once per call site.
#define DI_PROFILE_SECTION(name)                                                                      \
  ([]() {                                                                                             \
    static ::deepinfer::profile::Section* const di_profile_section = ::deepinfer::profile::section(name); \
    return di_profile_section;                                                                        \
  }())
