// Mean, median and 99th percentile of a sample (bench-serve's latencies, bench's repeated
// speculative ratios).
#pragma once
#include <algorithm>
#include <vector>

namespace deepinfer::cli {

struct Summary {
  double mean = 0, median = 0, p99 = 0;
};

inline Summary summarize(std::vector<double> v) {
  Summary s;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  double sum = 0;
  for (double x : v) sum += x;
  s.mean = sum / double(v.size());
  const size_t n = v.size();
  s.median = n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
  // Linear interpolation between closest ranks (numpy's default percentile).
  const double pos = 0.99 * double(n - 1);
  const size_t lo = size_t(pos);
  const size_t hi = std::min(lo + 1, n - 1);
  s.p99 = v[lo] + (v[hi] - v[lo]) * (pos - double(lo));
  return s;
}

}  // namespace deepinfer::cli
