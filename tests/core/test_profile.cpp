// The opt-in section profiler: sections count only while enabled, Phase moves between
// sections, reset zeroes them, and a site's Section is shared by name.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <thread>

#include "core/profile.h"
#include "core/thread_pool.h"

using namespace deepinfer;

namespace {

void sleep_ms(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

void timed_site(int ms) {
  DI_PROFILE("test.site");
  sleep_ms(ms);
}

}  // namespace

TEST(Profile, SectionsCountOnlyWhileEnabled) {
  profile::Section* site = profile::section("test.site");
  EXPECT_EQ(site, profile::section("test.site"));  // one Section per name
  profile::set_enabled(false);
  profile::reset();
  timed_site(1);
  EXPECT_EQ(site->calls.load(), 0);
  EXPECT_EQ(site->ns.load(), 0);

  profile::set_enabled(true);
  timed_site(5);
  timed_site(5);
  EXPECT_EQ(site->calls.load(), 2);
  EXPECT_GE(site->ns.load(), 10'000'000);

  profile::reset();
  EXPECT_EQ(site->calls.load(), 0);
  profile::set_enabled(false);
}

TEST(Profile, PhaseMovesBetweenSections) {
  profile::set_enabled(true);
  profile::reset();
  profile::Section* a = profile::section("test.phase_a");
  profile::Section* b = profile::section("test.phase_b");
  {
    profile::Phase phase;
    phase.start(a);
    sleep_ms(20);
    phase.start(b);  // stops a
    sleep_ms(2);
    phase.stop();
    const int64_t b_ns = b->ns.load();
    sleep_ms(2);  // time passes (sleep_for waits at least this long): nothing counts it
    EXPECT_EQ(b->ns.load(), b_ns);  // a stopped phase counts nowhere
  }
  EXPECT_EQ(a->calls.load(), 1);
  EXPECT_EQ(b->calls.load(), 1);
  EXPECT_GE(a->ns.load(), 20'000'000);
  EXPECT_GE(b->ns.load(), 2'000'000);
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  profile::report(f);
  std::rewind(f);
  char buf[4096] = {};
  const size_t got = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  const std::string text(buf, got);
  EXPECT_NE(text.find("test.phase_a"), std::string::npos);
  EXPECT_NE(text.find("test.phase_b"), std::string::npos);
  // Sorted by time: judged against the times measured, not against the 20 ms and 2 ms slept
  // (a busy machine may stretch b's 2 ms past a's 20 ms).
  EXPECT_EQ(text.find("test.phase_a") < text.find("test.phase_b"), a->ns.load() >= b->ns.load());
  profile::set_enabled(false);
}

// Sections count the thread-pool parallel regions started inside them (nested sections both),
// and the pool counts its own: a region with work is one dispatch, on one thread too; an empty
// one is none.
TEST(Profile, SectionsCountDispatches) {
  profile::set_enabled(true);
  profile::reset();
  profile::Section* outer = profile::section("test.dispatch_outer");
  profile::Section* inner = profile::section("test.dispatch_inner");
  ThreadPool pool(2), single(1);
  const uint64_t pool0 = pool.dispatches();
  {
    profile::Scope o(outer);
    pool.run(8, 1, [](int64_t, int64_t, int) {});
    {
      profile::Scope i(inner);
      pool.run_balanced(8, 1, 2, [](int64_t, int64_t, int) {});
      single.run(4, 1, [](int64_t, int64_t, int) {});
      single.run_balanced(4, 1, 2, [](int64_t, int64_t, int) {});
      pool.run(0, 1, [](int64_t, int64_t, int) {});  // no work: no region
    }
  }
  EXPECT_EQ(pool.dispatches() - pool0, 2u);
  EXPECT_EQ(single.dispatches(), 2u);
  EXPECT_EQ(outer->dispatches.load(), 4);
  EXPECT_EQ(inner->dispatches.load(), 3);
  profile::reset();
  EXPECT_EQ(outer->dispatches.load(), 0);
  profile::set_enabled(false);
}
