// AVX2 sink attention (see attention_cpu.h): the AVX-512 kernel in vectors of 8, bit for bit
// the same results (its sums emulated lane for lane), so both machines select the same keys.
// Compiled with AVX2 flags; no shared inline functions or library templates (cpu_isa.h
// explains why).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
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

#define DI_ATTN_INLINE inline __attribute__((always_inline))

DI_ATTN_INLINE float hsum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

constexpr int64_t kTile = 64;

// One head's running state over the tiles (the online softmax of sink_attention_ref).
struct HeadState {
  float m, den;
};

DI_ATTN_INLINE void head_begin(HeadState& st, int64_t dim, float* out) {
  st.m = -__builtin_inff();
  st.den = 0.0f;
  for (int64_t c = 0; c < dim; c += 8) _mm256_storeu_ps(out + c, _mm256_setzero_ps());
}

// Tile [t0, t1) of the keys for one head.
DI_ATTN_INLINE void head_tile(HeadState& st, const float* q, const float* const* keys, int64_t t0, int64_t t1,
                              int64_t dim, float scale, bool round_probs, float* out) {
  const float neg_inf = -__builtin_inff();
  float score[kTile];
  float tile_max = neg_inf;
  for (int64_t j = t0; j < t1; ++j) {
    if (!keys[j]) continue;
    // The AVX-512 kernel's sums lane for lane: its two 16-lane accumulators over 32 columns
    // are g0 g1 and g2 g3 here, and its reduction adds the upper 8 lanes to the lower 8
    // first, then as hsum8 does.
    const float* k = keys[j];
    __m256 g[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    int64_t c = 0;
    for (; c + 32 <= dim; c += 32)
      for (int v = 0; v < 4; ++v) g[v] = _mm256_fmadd_ps(_mm256_loadu_ps(q + c + 8 * v), _mm256_loadu_ps(k + c + 8 * v), g[v]);
    for (; c < dim; c += 16)
      for (int v = 0; v < 2; ++v) g[v] = _mm256_fmadd_ps(_mm256_loadu_ps(q + c + 8 * v), _mm256_loadu_ps(k + c + 8 * v), g[v]);
    const float d = hsum8(_mm256_add_ps(_mm256_add_ps(g[1], g[3]), _mm256_add_ps(g[0], g[2])));
    score[j - t0] = d * scale;
    if (score[j - t0] > tile_max) tile_max = score[j - t0];
  }
  if (tile_max == neg_inf) return;
  const float m_new = st.m > tile_max ? st.m : tile_max;
  const float alpha = st.m == neg_inf ? 0.0f : expf(st.m - m_new);
  float psum = 0.0f;
  float prob[kTile];  // of the valid keys, in order
  const float* vkey[kTile];
  int64_t nv = 0;
  for (int64_t j = t0; j < t1; ++j) {
    if (!keys[j]) continue;
    const float p = expf(score[j - t0] - m_new);
    psum += p;
    prob[nv] = round_probs ? round_bf16_local(p) : p;
    vkey[nv++] = keys[j];
  }
  st.den = st.den * alpha + psum;
  // out = out * alpha + sum_j p_j v_j: per column the tile sum starts at 0 and takes the keys
  // in order, as in the referee; 64 columns at a time stay in registers across the keys.
  const __m256 va = _mm256_set1_ps(alpha);
  int64_t c0 = 0;
  for (; c0 + 64 <= dim; c0 += 64) {
    __m256 acc[8];
    for (int v = 0; v < 8; ++v) acc[v] = _mm256_setzero_ps();
    for (int64_t i = 0; i < nv; ++i) {
      const __m256 pv = _mm256_set1_ps(prob[i]);
      for (int v = 0; v < 8; ++v) acc[v] = _mm256_fmadd_ps(pv, _mm256_loadu_ps(vkey[i] + c0 + 8 * v), acc[v]);
    }
    for (int v = 0; v < 8; ++v)
      _mm256_storeu_ps(out + c0 + 8 * v, _mm256_fmadd_ps(_mm256_loadu_ps(out + c0 + 8 * v), va, acc[v]));
  }
  for (int64_t c = c0; c < dim; c += 8) {  // dim not a multiple of 64: the rest, a vector at a time
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < nv; ++i) acc = _mm256_fmadd_ps(_mm256_set1_ps(prob[i]), _mm256_loadu_ps(vkey[i] + c), acc);
    _mm256_storeu_ps(out + c, _mm256_fmadd_ps(_mm256_loadu_ps(out + c), va, acc));
  }
  st.m = m_new;
}

DI_ATTN_INLINE void head_end(const HeadState& st, int64_t dim, float sink, float* out) {
  if (st.m == -__builtin_inff()) return;
  const float den = st.den + expf(sink - st.m);
  const __m256 vd = _mm256_set1_ps(den);
  for (int64_t c = 0; c < dim; c += 8) _mm256_storeu_ps(out + c, _mm256_div_ps(_mm256_loadu_ps(out + c), vd));
}

}  // namespace

void sink_attention_avx2(const float* q, const float* const* keys, int64_t n_keys, int64_t dim, float scale,
                           float sink, bool round_probs, float* out) {
  HeadState st;
  head_begin(st, dim, out);
  for (int64_t t0 = 0; t0 < n_keys; t0 += kTile)
    head_tile(st, q, keys, t0, n_keys < t0 + kTile ? n_keys : t0 + kTile, dim, scale, round_probs, out);
  head_end(st, dim, sink, out);
}

void sink_attention_heads_avx2(const float* q, int64_t n_heads, const float* const* keys, int64_t n_keys,
                                 int64_t dim, float scale, const float* sinks, bool round_probs, float* out) {
  constexpr int64_t kGroup = 16;  // heads whose state is carried across the tiles together
  for (int64_t h0 = 0; h0 < n_heads; h0 += kGroup) {
    const int64_t h1 = n_heads < h0 + kGroup ? n_heads : h0 + kGroup;
    HeadState st[kGroup];
    for (int64_t h = h0; h < h1; ++h) head_begin(st[h - h0], dim, out + h * dim);
    for (int64_t t0 = 0; t0 < n_keys; t0 += kTile) {
      const int64_t t1 = n_keys < t0 + kTile ? n_keys : t0 + kTile;
      for (int64_t h = h0; h < h1; ++h)
        head_tile(st[h - h0], q + h * dim, keys, t0, t1, dim, scale, round_probs, out + h * dim);
    }
    for (int64_t h = h0; h < h1; ++h) head_end(st[h - h0], dim, sinks[h], out + h * dim);
  }
}

}  // namespace deepinfer::kernels::cpu
