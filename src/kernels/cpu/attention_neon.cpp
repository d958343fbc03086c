// NEON sink attention (see attention_cpu.h): the AVX-512 kernel in vectors of 4, bit for bit
// the same results (its score sums emulated lane for lane), so aarch64 and x86 machines select
// the same keys. The algorithm is attention_isa_impl.h's, instantiated in this file's own
// namespace; only the score dot product is this file's. No inline functions or templates
// shared with other files (cpu_isa.h explains why).
#include <arm_neon.h>
#include <math.h>

#include <cstdint>

#include "kernels/cpu/attention_cpu.h"

namespace deepinfer::kernels::cpu {

namespace {
namespace neon {

#define DI_ISA_INLINE inline __attribute__((always_inline))

// The AVX-512 kernel's score: two 16-lane accumulators a (columns c .. c + 15 of every 32) and
// b (c + 16 .. c + 31; a dim that ends on 16 more columns feeds a alone), here four registers
// each (register r: lanes 4r .. 4r + 3). Its reduction: s = a + b, then its upper 8 lanes added
// to its lower 8, then AVX2's 8-lane sum ((t0 + t4) + (t2 + t6)) + ((t1 + t5) + (t3 + t7)).
DI_ISA_INLINE float score_dot_one(const float* q, const float* k, int64_t dim) {
  float32x4_t a[4], b[4];
  for (int r = 0; r < 4; ++r) a[r] = b[r] = vdupq_n_f32(0.0f);
  int64_t c = 0;
  for (; c + 32 <= dim; c += 32)
    for (int r = 0; r < 4; ++r) {
      a[r] = vfmaq_f32(a[r], vld1q_f32(q + c + 4 * r), vld1q_f32(k + c + 4 * r));
      b[r] = vfmaq_f32(b[r], vld1q_f32(q + c + 16 + 4 * r), vld1q_f32(k + c + 16 + 4 * r));
    }
  for (; c < dim; c += 16)
    for (int r = 0; r < 4; ++r) a[r] = vfmaq_f32(a[r], vld1q_f32(q + c + 4 * r), vld1q_f32(k + c + 4 * r));
  // t lanes 0-3: s lanes 8-11 + s lanes 0-3; t lanes 4-7: s lanes 12-15 + s lanes 4-7
  const float32x4_t t_lo = vaddq_f32(vaddq_f32(a[2], b[2]), vaddq_f32(a[0], b[0]));
  const float32x4_t t_hi = vaddq_f32(vaddq_f32(a[3], b[3]), vaddq_f32(a[1], b[1]));
  const float32x4_t u = vaddq_f32(t_lo, t_hi);                          // t0+t4 t1+t5 t2+t6 t3+t7
  const float32x2_t v = vadd_f32(vget_low_f32(u), vget_high_f32(u));  // u0+u2 u1+u3
  return vget_lane_f32(v, 0) + vget_lane_f32(v, 1);
}

struct Ops {
  using F = float32x4_t;
  static constexpr int64_t kLanes = 4;
  static DI_ISA_INLINE F zero() { return vdupq_n_f32(0.0f); }
  static DI_ISA_INLINE F set1(float f) { return vdupq_n_f32(f); }
  static DI_ISA_INLINE F load(const float* p) { return vld1q_f32(p); }
  static DI_ISA_INLINE void store(float* p, F v) { vst1q_f32(p, v); }
  static DI_ISA_INLINE F fmadd(F a, F b, F c) { return vfmaq_f32(c, a, b); }
  static DI_ISA_INLINE F div(F a, F b) { return vdivq_f32(a, b); }
  static DI_ISA_INLINE float score_dot(const float* q, const float* k, int64_t dim) { return score_dot_one(q, k, dim); }
  static DI_ISA_INLINE void score_dot4(const float* q, const float* const* k, int64_t dim, float* out) {
    for (int j = 0; j < 4; ++j) out[j] = score_dot_one(q, k[j], dim);
  }
};

#include "kernels/cpu/attention_isa_impl.h"

}  // namespace neon
}  // namespace

void sink_attention_neon(const float* q, const float* const* keys, int64_t n_keys, int64_t dim, float scale,
                         float sink, bool round_probs, float* out) {
  neon::sink_attention_one<neon::Ops>(q, keys, n_keys, dim, scale, sink, round_probs, out);
}

void sink_attention_heads_neon(const float* q, int64_t n_heads, const float* const* keys, int64_t n_keys,
                               int64_t dim, float scale, const float* sinks, bool round_probs, float* out) {
  neon::sink_attention_heads<neon::Ops>(q, n_heads, keys, n_keys, dim, scale, sinks, round_probs, out);
}

}  // namespace deepinfer::kernels::cpu
