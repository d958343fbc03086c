// `deepinfer bench`: what it measures of the machine outside the engine (memory bandwidth by a
// triad, the cost of an empty dispatch, the peak resident set) and the KV bytes of the model that
// its roofline counts. The measurements against the engine: cmd_bench.cpp; the report:
// bench_report.h.
#pragma once
#include <cstdint>

#include "core/thread_pool.h"
#include "model/deepseek_v4/config.h"

namespace deepinfer::cli {

// The cost of one empty parallel region on the pool (the caller's and the workers' hand-off
// and the join), the median of a few rounds of many.
double barrier_seconds(ThreadPool& pool);

// Best-of-5 triad a = b + s*c over arrays far larger than the caches; counts 3 streams. GB/s.
double triad_bandwidth_gb_s(ThreadPool* pool);

// Peak resident set since start or the last reset_peak_rss(): VmHWM of /proc/self/status.
int64_t peak_rss_bytes();

// Starts the peak over from the current resident set (Linux: "5" to /proc/self/clear_refs),
// so the triad's 384 MB of arrays do not count as the model's memory. False if it cannot.
bool reset_peak_rss();

// KV bytes a decode step at position p reads (window ring + visible compressed entries),
// as DeepInfer stores them (fp32).
int64_t kv_bytes_per_token(const v4::Config& c, int64_t p);

// KV bytes a sequence of n tokens holds by the KV spec (fp32 rows, no page rounding): per
// layer its window ring, its compressed entries and the indexer keys of the layers that own
// them. Excludes the MTP rings.
double kv_spec_bytes(const v4::Config& c, int64_t n);

}  // namespace deepinfer::cli
