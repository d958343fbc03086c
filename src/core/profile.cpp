#include "core/profile.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <vector>

namespace deepinfer::profile {

namespace {

bool env_enabled() {
  const char* v = std::getenv("DEEPINFER_PROFILE");
  return v && *v && std::strcmp(v, "0") != 0;
}

std::mutex& registry_mutex() {
  static std::mutex mu;
  return mu;
}

// A deque keeps section addresses stable as sections are added.
std::deque<Section>& registry() {
  static std::deque<Section> sections;
  return sections;
}

}  // namespace

std::atomic<bool> g_enabled{env_enabled()};
std::atomic<int64_t> g_dispatches{0};

void set_enabled(bool on) { g_enabled.store(on, std::memory_order_relaxed); }

Section* section(const char* name) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  for (Section& s : registry())
    if (std::strcmp(s.name, name) == 0) return &s;
  Section& s = registry().emplace_back();
  s.name = name;
  return &s;
}

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void reset() {
  std::lock_guard<std::mutex> lock(registry_mutex());
  for (Section& s : registry()) {
    s.ns = 0;
    s.calls = 0;
    s.dispatches = 0;
  }
}

void report(std::FILE* out, int64_t total_ns) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  std::vector<const Section*> v;
  for (const Section& s : registry())
    if (s.calls > 0) v.push_back(&s);
  std::sort(v.begin(), v.end(), [](const Section* a, const Section* b) { return a->ns > b->ns; });
  if (v.empty()) return;
  const double total = double(total_ns > 0 ? total_ns : v.front()->ns.load());
  std::fprintf(out, "%-28s %10s %9s %10s %10s %7s\n", "section", "ms", "calls", "us/call", "disp/call", "%");
  for (const Section* s : v)
    std::fprintf(out, "%-28s %10.2f %9lld %10.2f %10.2f %6.1f%%\n", s->name, double(s->ns) / 1e6, (long long)s->calls,
                 double(s->ns) / 1e3 / double(s->calls), double(s->dispatches) / double(s->calls),
                 100.0 * double(s->ns) / total);
}

}  // namespace deepinfer::profile
