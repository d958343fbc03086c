// AVX2 sink attention (see attention_cpu.h): the AVX-512 kernel in vectors of 8, bit for bit
// the same results (its sums emulated lane for lane), so both machines select the same keys.
// The algorithm is attention_isa_impl.h's, instantiated in this file's own namespace; only
// the score dot product is this file's. Compiled with AVX2 flags; no inline functions or
// templates shared with other files (cpu_isa.h explains why).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>
#include <math.h>

#include <cstdint>

#include "kernels/cpu/attention_cpu.h"

namespace deepinfer::kernels::cpu {

namespace {
namespace avx2 {

#define DI_ISA_INLINE inline __attribute__((always_inline))

DI_ISA_INLINE float hsum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

struct Ops {
  using F = __m256;
  static constexpr int64_t kLanes = 8;
  static DI_ISA_INLINE F zero() { return _mm256_setzero_ps(); }
  static DI_ISA_INLINE F set1(float f) { return _mm256_set1_ps(f); }
  static DI_ISA_INLINE F load(const float* p) { return _mm256_loadu_ps(p); }
  static DI_ISA_INLINE void store(float* p, F v) { _mm256_storeu_ps(p, v); }
  static DI_ISA_INLINE F fmadd(F a, F b, F c) { return _mm256_fmadd_ps(a, b, c); }
  static DI_ISA_INLINE F div(F a, F b) { return _mm256_div_ps(a, b); }
  // The AVX-512 kernel's sums lane for lane: its two 16-lane accumulators over 32 columns are
  // g0 g1 and g2 g3 here, and its reduction adds the upper 8 lanes to the lower 8 first, then
  // as hsum8 does.
  static DI_ISA_INLINE float score_dot(const float* q, const float* k, int64_t dim) {
    __m256 g[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    int64_t c = 0;
    for (; c + 32 <= dim; c += 32)
      for (int v = 0; v < 4; ++v) g[v] = _mm256_fmadd_ps(_mm256_loadu_ps(q + c + 8 * v), _mm256_loadu_ps(k + c + 8 * v), g[v]);
    for (; c < dim; c += 16)
      for (int v = 0; v < 2; ++v) g[v] = _mm256_fmadd_ps(_mm256_loadu_ps(q + c + 8 * v), _mm256_loadu_ps(k + c + 8 * v), g[v]);
    return hsum8(_mm256_add_ps(_mm256_add_ps(g[1], g[3]), _mm256_add_ps(g[0], g[2])));
  }
  // Four keys' score_dot (sixteen ymm accumulators would not leave room for the operands).
  static DI_ISA_INLINE void score_dot4(const float* q, const float* const* k, int64_t dim, float* out) {
    for (int j = 0; j < 4; ++j) out[j] = score_dot(q, k[j], dim);
  }
};

#include "kernels/cpu/attention_isa_impl.h"

}  // namespace avx2
}  // namespace

void sink_attention_avx2(const float* q, const float* const* keys, int64_t n_keys, int64_t dim, float scale,
                         float sink, bool round_probs, float* out) {
  avx2::sink_attention_one<avx2::Ops>(q, keys, n_keys, dim, scale, sink, round_probs, out);
}

void sink_attention_heads_avx2(const float* q, int64_t n_heads, const float* const* keys, int64_t n_keys,
                               int64_t dim, float scale, const float* sinks, bool round_probs, float* out) {
  avx2::sink_attention_heads<avx2::Ops>(q, n_heads, keys, n_keys, dim, scale, sinks, round_probs, out);
}

}  // namespace deepinfer::kernels::cpu
