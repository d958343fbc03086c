// `deepinfer bench`: the machine's memory bandwidth, dispatch cost and peak RSS, and the KV
// bytes the roofline counts (bench_machine.h).
#include "bench_machine.h"

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <stdexcept>
#include <vector>

#include "model/deepseek_v4/release.h"

namespace deepinfer::cli {

using Clock = std::chrono::steady_clock;

double barrier_seconds(ThreadPool& pool) {
  if (pool.size() <= 1) return 0.0;
  std::vector<double> rounds;
  for (int round = 0; round < 5; ++round) {
    const int n = 2000;
    const Clock::time_point t0 = Clock::now();
    for (int i = 0; i < n; ++i) pool.run(pool.size(), 1, [](int64_t, int64_t, int) {});
    rounds.push_back(std::chrono::duration<double>(Clock::now() - t0).count() / n);
  }
  std::sort(rounds.begin(), rounds.end());
  return rounds[rounds.size() / 2];
}

double triad_bandwidth_gb_s(ThreadPool* pool) {
  const int64_t n = int64_t(1) << 25;  // 32 Mi floats = 128 MiB per array
  std::vector<float> a(n), b(n, 1.0f), c(n, 2.0f);
  const float s = 3.0f;
  auto pass = [&] {
    parallel_for(pool, n, 1 << 16, [&](int64_t i0, int64_t i1, int) {
      for (int64_t i = i0; i < i1; ++i) a[i] = b[i] + s * c[i];
    });
  };
  pass();  // first touch
  double best = 1e30;
  for (int r = 0; r < 5; ++r) {
    auto t0 = Clock::now();
    pass();
    best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
  }
  if (a[n / 2] != 7.0f) throw std::runtime_error("triad check failed");
  return 3.0 * double(n) * sizeof(float) / best / 1e9;
}

int64_t peak_rss_bytes() {
  if (std::FILE* f = std::fopen("/proc/self/status", "r")) {
    char line[256];
    long long kb = -1;
    while (std::fgets(line, sizeof line, f))
      if (std::sscanf(line, "VmHWM: %lld kB", &kb) == 1) break;
    std::fclose(f);
    if (kb >= 0) return int64_t(kb) * 1024;
  }
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  return int64_t(ru.ru_maxrss) * 1024;
}

bool reset_peak_rss() {
  std::FILE* f = std::fopen("/proc/self/clear_refs", "w");
  if (!f) return false;
  const bool ok = std::fputs("5", f) >= 0;
  return std::fclose(f) == 0 && ok;
}

int64_t kv_bytes_per_token(const v4::Config& c, int64_t p) {
  int64_t bytes = 0;
  for (int64_t l = 0; l < c.n_layers; ++l) {
    bytes += std::min(p + 1, c.window) * c.head_dim * 4;
    const int64_t r = c.ratio(l);
    if (v4::release_rules(c).shared_attention_runtime) {  // shared caches: a top-k of entries; index sources score keys (candidates only when restricted)
      if (r == 0) continue;
      const int64_t n = (p + 1) / r;
      bytes += std::min(c.index_topk, n) * c.head_dim * 4;
      if (c.is_index_source(l))
        bytes += (c.uses_candidates(l) ? std::min(n, c.candidate_topk_blocks * c.candidate_block_size) : n) *
                 c.index_head_dim * 4;
    } else if (r == 4) {
      bytes += std::min(c.index_topk, (p + 1) / 4) * c.head_dim * 4 + ((p + 1) / 4) * c.index_head_dim * 4;
    } else if (r != 0) {
      bytes += ((p + 1) / r) * c.head_dim * 4;
    }
  }
  return bytes;
}

double kv_spec_bytes(const v4::Config& c, int64_t n) {
  double bytes = 0;
  for (int64_t l = 0; l < c.n_layers; ++l) {
    bytes += double(std::min(n, c.window) * c.head_dim * 4);
    const int64_t r = c.ratio(l);
    if (r == 0) continue;
    if (c.owns_compressor(l)) bytes += double((n / r) * c.head_dim * 4);
    if (c.owns_index_keys(l)) bytes += double((n / r) * c.index_head_dim * 4);
  }
  return bytes;
}

}  // namespace deepinfer::cli
