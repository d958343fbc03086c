#include "kernels/cpu/attention_cpu.h"

#include <cmath>
#include <limits>
#include <vector>

#include "core/formats.h"

namespace deepinfer::kernels::cpu {

void sink_attention_fast(const float* q, const float* const* keys, int64_t n_keys, int64_t dim, float scale,
                         float sink, bool round_probs, float* out) {
  constexpr int64_t kTile = 64;
  const float neg_inf = -std::numeric_limits<float>::infinity();
  // A tile's weighted sum of values: on the stack for head sizes up to 1024 (the model's
  // threads call this, and a first call on a thread must not allocate), else on the heap.
  constexpr int64_t kStackDim = 1024;
  float stack_sum[kStackDim];
  std::vector<float> heap_sum(dim > kStackDim ? size_t(dim) : 0);
  float* tile_sum = dim > kStackDim ? heap_sum.data() : stack_sum;
  float score[kTile];
  for (int64_t c = 0; c < dim; ++c) out[c] = 0.0f;
  float m = neg_inf, den = 0.0f;
  for (int64_t t0 = 0; t0 < n_keys; t0 += kTile) {
    const int64_t t1 = n_keys < t0 + kTile ? n_keys : t0 + kTile;
    float tile_max = neg_inf;
    for (int64_t j = t0; j < t1; ++j) {
      if (!keys[j]) continue;
      float part[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      int64_t c = 0;
      for (; c + 8 <= dim; c += 8)
        for (int i = 0; i < 8; ++i) part[i] += q[c + i] * keys[j][c + i];
      float d = ((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7]));
      for (; c < dim; ++c) d += q[c] * keys[j][c];
      score[j - t0] = d * scale;
      if (score[j - t0] > tile_max) tile_max = score[j - t0];
    }
    if (tile_max == neg_inf) continue;
    const float m_new = m > tile_max ? m : tile_max;
    const float alpha = m == neg_inf ? 0.0f : std::exp(m - m_new);
    float psum = 0.0f;
    for (int64_t c = 0; c < dim; ++c) tile_sum[c] = 0.0f;
    for (int64_t j = t0; j < t1; ++j) {
      if (!keys[j]) continue;
      const float p = std::exp(score[j - t0] - m_new);
      psum += p;
      const float pv = round_probs ? round_bf16(p) : p;
      for (int64_t c = 0; c < dim; ++c) tile_sum[c] += pv * keys[j][c];
    }
    den = den * alpha + psum;
    for (int64_t c = 0; c < dim; ++c) out[c] = out[c] * alpha + tile_sum[c];
    m = m_new;
  }
  if (m == neg_inf) return;  // no valid key: only the sink, whose value is zero
  den = den + std::exp(sink - m);
  for (int64_t c = 0; c < dim; ++c) out[c] = out[c] / den;
}

}  // namespace deepinfer::kernels::cpu
