#include <cmath>
#include <limits>
#include <vector>

#include "kernels/kernels.h"

namespace deepinfer::kernels {

void sink_attention_ref(const float* q, const float* const* keys, int64_t n_keys, int64_t dim,
                        float scale, float sink, bool round_probs, float* out) {
  constexpr int64_t kTile = 64;
  const float neg_inf = -std::numeric_limits<float>::infinity();
  std::vector<float> acc(dim, 0.0f), score(kTile), prob(kTile);
  std::vector<double> tile_sum(dim);
  float m = neg_inf, den = 0.0f;
  for (int64_t t0 = 0; t0 < n_keys; t0 += kTile) {
    const int64_t t1 = std::min(n_keys, t0 + kTile);
    float tile_max = neg_inf;
    for (int64_t j = t0; j < t1; ++j) {
      if (!keys[j]) continue;
      double d = 0.0;
      for (int64_t c = 0; c < dim; ++c) d += double(q[c]) * double(keys[j][c]);
      score[j - t0] = float(d) * scale;
      tile_max = std::max(tile_max, score[j - t0]);
    }
    if (tile_max == neg_inf) continue;  // no valid key: the running state is unchanged
    const float m_new = std::max(m, tile_max);
    const float alpha = m == neg_inf ? 0.0f : float(std::exp(double(m) - double(m_new)));
    double psum = 0.0;
    for (int64_t c = 0; c < dim; ++c) tile_sum[c] = 0.0;
    for (int64_t j = t0; j < t1; ++j) {
      if (!keys[j]) continue;
      float p = float(std::exp(double(score[j - t0]) - double(m_new)));
      psum += p;
      float pv = round_probs ? round_bf16(p) : p;
      for (int64_t c = 0; c < dim; ++c) tile_sum[c] += double(pv) * double(keys[j][c]);
    }
    den = den * alpha + float(psum);
    for (int64_t c = 0; c < dim; ++c) acc[c] = acc[c] * alpha + float(tile_sum[c]);
    m = m_new;
  }
  if (m == neg_inf) {  // no valid key at all: only the sink, whose value is zero
    for (int64_t c = 0; c < dim; ++c) out[c] = 0.0f;
    return;
  }
  den = den + float(std::exp(double(sink) - double(m)));
  for (int64_t c = 0; c < dim; ++c) out[c] = acc[c] / den;
}

}  // namespace deepinfer::kernels
