// AVX-512 sink attention (see attention_cpu.h). The algorithm is attention_isa_impl.h's,
// instantiated in this file's own namespace; only the score dot product is this file's.
// Compiled with AVX-512 flags; no inline functions or templates shared with other files
// (cpu_isa.h explains why).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // GCC 12 on _mm512_setzero_ps
#endif
#include <immintrin.h>
#include <math.h>

#include <cstdint>

#include "kernels/cpu/attention_cpu.h"

namespace deepinfer::kernels::cpu {

namespace {
namespace avx512 {

#define DI_ISA_INLINE inline __attribute__((always_inline))

struct Ops {
  using F = __m512;
  static constexpr int64_t kLanes = 16;
  static DI_ISA_INLINE F zero() { return _mm512_setzero_ps(); }
  static DI_ISA_INLINE F set1(float f) { return _mm512_set1_ps(f); }
  static DI_ISA_INLINE F load(const float* p) { return _mm512_loadu_ps(p); }
  static DI_ISA_INLINE void store(float* p, F v) { _mm512_storeu_ps(p, v); }
  static DI_ISA_INLINE F fmadd(F a, F b, F c) { return _mm512_fmadd_ps(a, b, c); }
  static DI_ISA_INLINE F div(F a, F b) { return _mm512_div_ps(a, b); }
  // Two accumulators over 32 columns, one over a last 16.
  static DI_ISA_INLINE float score_dot(const float* q, const float* k, int64_t dim) {
    __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
    int64_t c = 0;
    for (; c + 32 <= dim; c += 32) {
      a0 = _mm512_fmadd_ps(_mm512_loadu_ps(q + c), _mm512_loadu_ps(k + c), a0);
      a1 = _mm512_fmadd_ps(_mm512_loadu_ps(q + c + 16), _mm512_loadu_ps(k + c + 16), a1);
    }
    for (; c < dim; c += 16) a0 = _mm512_fmadd_ps(_mm512_loadu_ps(q + c), _mm512_loadu_ps(k + c), a0);
    return _mm512_reduce_add_ps(_mm512_add_ps(a0, a1));
  }
  // score_dot of four keys, each in its own order, their eight chains side by side (one key's
  // two chains wait on the FMA latency).
  static DI_ISA_INLINE void score_dot4(const float* q, const float* const* k, int64_t dim, float* out) {
    __m512 a0[4], a1[4];
    for (int j = 0; j < 4; ++j) a0[j] = a1[j] = _mm512_setzero_ps();
    int64_t c = 0;
    for (; c + 32 <= dim; c += 32) {
      const __m512 q0 = _mm512_loadu_ps(q + c), q1 = _mm512_loadu_ps(q + c + 16);
      for (int j = 0; j < 4; ++j) {
        a0[j] = _mm512_fmadd_ps(q0, _mm512_loadu_ps(k[j] + c), a0[j]);
        a1[j] = _mm512_fmadd_ps(q1, _mm512_loadu_ps(k[j] + c + 16), a1[j]);
      }
    }
    for (; c < dim; c += 16) {
      const __m512 q0 = _mm512_loadu_ps(q + c);
      for (int j = 0; j < 4; ++j) a0[j] = _mm512_fmadd_ps(q0, _mm512_loadu_ps(k[j] + c), a0[j]);
    }
    for (int j = 0; j < 4; ++j) out[j] = _mm512_reduce_add_ps(_mm512_add_ps(a0[j], a1[j]));
  }
};

#include "kernels/cpu/attention_isa_impl.h"

}  // namespace avx512
}  // namespace

void sink_attention_avx512(const float* q, const float* const* keys, int64_t n_keys, int64_t dim, float scale,
                           float sink, bool round_probs, float* out) {
  avx512::sink_attention_one<avx512::Ops>(q, keys, n_keys, dim, scale, sink, round_probs, out);
}

void sink_attention_heads_avx512(const float* q, int64_t n_heads, const float* const* keys, int64_t n_keys,
                                 int64_t dim, float scale, const float* sinks, bool round_probs, float* out) {
  avx512::sink_attention_heads<avx512::Ops>(q, n_heads, keys, n_keys, dim, scale, sinks, round_probs, out);
}

}  // namespace deepinfer::kernels::cpu
