// AVX-512 sink attention (see attention_cpu.h). Compiled with AVX-512 flags; no shared
// inline functions or library templates (cpu_isa.h explains why).
#include <immintrin.h>
#include <math.h>

#include <cstdint>

#include "kernels/cpu/attention_cpu.h"

namespace deepinfer::kernels::cpu {

namespace {

// Round-to-nearest-even fp32 -> bf16 value (finite inputs: probabilities in [0, 1]).
float round_bf16_local(float f) {
  uint32_t b;
  __builtin_memcpy(&b, &f, 4);
  b += 0x7fffu + ((b >> 16) & 1u);
  b &= 0xffff0000u;
  float r;
  __builtin_memcpy(&r, &b, 4);
  return r;
}

}  // namespace

void sink_attention_avx512(const float* q, const float* const* keys, int64_t n_keys, int64_t dim, float scale,
                           float sink, bool round_probs, float* out) {
  constexpr int64_t kTile = 64;
  const float neg_inf = -__builtin_inff();
  float score[kTile];
  alignas(64) float tile_buf[1024];
  float* tile_sum = tile_buf;  // dim <= 1024 (head_dim 512 in every release)
  for (int64_t c = 0; c < dim; c += 16) _mm512_storeu_ps(out + c, _mm512_setzero_ps());
  float m = neg_inf, den = 0.0f;
  for (int64_t t0 = 0; t0 < n_keys; t0 += kTile) {
    const int64_t t1 = n_keys < t0 + kTile ? n_keys : t0 + kTile;
    float tile_max = neg_inf;
    for (int64_t j = t0; j < t1; ++j) {
      if (!keys[j]) continue;
      __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
      int64_t c = 0;
      for (; c + 32 <= dim; c += 32) {
        a0 = _mm512_fmadd_ps(_mm512_loadu_ps(q + c), _mm512_loadu_ps(keys[j] + c), a0);
        a1 = _mm512_fmadd_ps(_mm512_loadu_ps(q + c + 16), _mm512_loadu_ps(keys[j] + c + 16), a1);
      }
      for (; c < dim; c += 16) a0 = _mm512_fmadd_ps(_mm512_loadu_ps(q + c), _mm512_loadu_ps(keys[j] + c), a0);
      const float d = _mm512_reduce_add_ps(_mm512_add_ps(a0, a1));
      score[j - t0] = d * scale;
      if (score[j - t0] > tile_max) tile_max = score[j - t0];
    }
    if (tile_max == neg_inf) continue;
    const float m_new = m > tile_max ? m : tile_max;
    const float alpha = m == neg_inf ? 0.0f : expf(m - m_new);
    float psum = 0.0f;
    for (int64_t c = 0; c < dim; c += 16) _mm512_store_ps(tile_sum + c, _mm512_setzero_ps());
    for (int64_t j = t0; j < t1; ++j) {
      if (!keys[j]) continue;
      const float p = expf(score[j - t0] - m_new);
      psum += p;
      const __m512 pv = _mm512_set1_ps(round_probs ? round_bf16_local(p) : p);
      for (int64_t c = 0; c < dim; c += 16)
        _mm512_store_ps(tile_sum + c, _mm512_fmadd_ps(pv, _mm512_loadu_ps(keys[j] + c), _mm512_load_ps(tile_sum + c)));
    }
    den = den * alpha + psum;
    const __m512 va = _mm512_set1_ps(alpha);
    for (int64_t c = 0; c < dim; c += 16)
      _mm512_storeu_ps(out + c, _mm512_fmadd_ps(_mm512_loadu_ps(out + c), va, _mm512_load_ps(tile_sum + c)));
    m = m_new;
  }
  if (m == neg_inf) return;
  den = den + expf(sink - m);
  const __m512 vd = _mm512_set1_ps(den);
  for (int64_t c = 0; c < dim; c += 16) _mm512_storeu_ps(out + c, _mm512_div_ps(_mm512_loadu_ps(out + c), vd));
}

}  // namespace deepinfer::kernels::cpu
