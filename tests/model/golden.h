// Reading the shared golden sets (../shared/golden/<name>/): sequences.json and raw f32/i32
// logit files (README of each set: row i = logits after tokens 0..i).
#pragma once
#include <cstdint>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace golden {

inline std::string dir(const std::string& name) { return std::string(DI_SHARED_DIR) + "/golden/" + name; }

inline std::vector<int32_t> sequence(const std::string& name, const std::string& seq) {
  std::ifstream in(dir(name) + "/sequences.json");
  auto j = nlohmann::json::parse(in);
  return j.at(seq).get<std::vector<int32_t>>();
}

template <typename T>
std::vector<T> raw(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return {};
  size_t n = size_t(in.tellg()) / sizeof(T);
  std::vector<T> v(n);
  in.seekg(0);
  in.read(reinterpret_cast<char*>(v.data()), std::streamsize(n * sizeof(T)));
  return v;
}

// Per-row statistics of a against b ([rows, cols]).
struct RowStats {
  std::vector<double> max_abs, rel;  // max |d| and max |d| / std(b row)
  std::vector<bool> argmax_equal;
};

inline RowStats compare(const std::vector<float>& a, const std::vector<float>& b, int64_t cols) {
  RowStats s;
  const int64_t rows = int64_t(b.size()) / cols;
  for (int64_t r = 0; r < rows; ++r) {
    double mx = 0, mean = 0, var = 0;
    int64_t am = 0, bm = 0;
    for (int64_t c = 0; c < cols; ++c) mean += b[r * cols + c];
    mean /= double(cols);
    for (int64_t c = 0; c < cols; ++c) {
      double x = a[r * cols + c], y = b[r * cols + c];
      mx = std::max(mx, std::abs(x - y));
      var += (y - mean) * (y - mean);
      if (a[r * cols + c] > a[r * cols + am]) am = c;
      if (b[r * cols + c] > b[r * cols + bm]) bm = c;
    }
    s.max_abs.push_back(mx);
    s.rel.push_back(mx / std::sqrt(var / double(cols)));
    s.argmax_equal.push_back(am == bm);
  }
  return s;
}

}  // namespace golden
