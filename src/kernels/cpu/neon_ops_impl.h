// The NEON vector operations over which the shared algorithms are instantiated on aarch64:
//   Vec4    vectors of 4 floats (float32x4_t): cpu_kernels_isa_impl.h's algorithms (with
//           isa_common_impl.h's BufferedParts; min / max follow the x86 instructions' rules, a
//           NaN in either operand giving the second; 2^n in two halves as the AVX2 kernels
//           do) and attention_isa_impl.h's tiles;
//   Lane8   vectors of 8 as pairs of them (lanes 0-3, 4-7: an AVX2 ymm register): the AVX2
//           kernels' arithmetic lane for lane, for lane8_kernels_impl.h's algorithms and the
//           AVX-512-order attention score;
// and the AVX-512 kernels' 16 lanes as four independent groups of 4 (lane_groups), for the
// fp32 and bf16 modes that reproduce their bits. Included by cpu_kernels_neon.cpp,
// cpu_kernels_neon_bf16.cpp and attention_neon.cpp inside their own namespace neon (within an
// unnamed namespace) after <arm_neon.h>, <cstring> and <cstdint>: the copies are compiled with
// that file's flags and have internal linkage (the rule of cpu_isa.h). Hence no include guard
// and no includes here.

#ifndef DI_ISA_INLINE
#define DI_ISA_INLINE inline __attribute__((always_inline))
#endif

struct Vec4 {
  using F = float32x4_t;
  using I = int32x4_t;
  using D = float64x2_t;
  static constexpr int64_t kLanes = 4;
  static constexpr bool kBf16 = false;

  static DI_ISA_INLINE F zero() { return vdupq_n_f32(0.0f); }
  static DI_ISA_INLINE F set1(float f) { return vdupq_n_f32(f); }
  static DI_ISA_INLINE F load(const float* p) { return vld1q_f32(p); }
  static DI_ISA_INLINE void store(float* p, F v) { vst1q_f32(p, v); }
  static DI_ISA_INLINE F add(F a, F b) { return vaddq_f32(a, b); }
  static DI_ISA_INLINE F sub(F a, F b) { return vsubq_f32(a, b); }
  static DI_ISA_INLINE F mul(F a, F b) { return vmulq_f32(a, b); }
  static DI_ISA_INLINE F div(F a, F b) { return vdivq_f32(a, b); }
  static DI_ISA_INLINE F fmadd(F a, F b, F c) { return vfmaq_f32(c, a, b); }
  static DI_ISA_INLINE F min(F a, F b) { return vbslq_f32(vcltq_f32(a, b), a, b); }
  static DI_ISA_INLINE F max(F a, F b) { return vbslq_f32(vcgtq_f32(a, b), a, b); }
  static DI_ISA_INLINE F abs(F v) { return vabsq_f32(v); }
  static DI_ISA_INLINE float hmax(F v) { return vmaxvq_f32(v); }  // of amax lanes: never NaN
  static DI_ISA_INLINE float first(F v) { return vgetq_lane_f32(v, 0); }

  static DI_ISA_INLINE I bits(F v) { return vreinterpretq_s32_f32(v); }
  static DI_ISA_INLINE F from_bits(I v) { return vreinterpretq_f32_s32(v); }
  static DI_ISA_INLINE I set1_i(int v) { return vdupq_n_s32(v); }
  static DI_ISA_INLINE I and_i(I a, I b) { return vandq_s32(a, b); }
  static DI_ISA_INLINE I or_i(I a, I b) { return vorrq_s32(a, b); }
  static DI_ISA_INLINE I andnot_i(I a, I b) { return vbicq_s32(b, a); }
  static DI_ISA_INLINE I add_i32(I a, I b) { return vaddq_s32(a, b); }
  static DI_ISA_INLINE I max_i32(I a, I b) { return vmaxq_s32(a, b); }
  template <int N>
  static DI_ISA_INLINE I shr_i32(I v) {
    return vreinterpretq_s32_u32(vshrq_n_u32(vreinterpretq_u32_s32(v), N));
  }
  template <int N>
  static DI_ISA_INLINE I shl_i32(I v) {
    return vshlq_n_s32(v, N);
  }
  static DI_ISA_INLINE I where_nan(F h, I a, I b) { return vbslq_s32(vmvnq_u32(vceqq_f32(h, h)), a, b); }

  static DI_ISA_INLINE D zero_d() { return vdupq_n_f64(0.0); }
  static DI_ISA_INLINE D set1_d(double v) { return vdupq_n_f64(v); }
  static DI_ISA_INLINE D add_d(D a, D b) { return vaddq_f64(a, b); }
  static DI_ISA_INLINE D sub_d(D a, D b) { return vsubq_f64(a, b); }
  static DI_ISA_INLINE D mul_d(D a, D b) { return vmulq_f64(a, b); }
  static DI_ISA_INLINE D div_d(D a, D b) { return vdivq_f64(a, b); }
  static DI_ISA_INLINE D min_d(D a, D b) { return vbslq_f64(vcltq_f64(a, b), a, b); }
  static DI_ISA_INLINE D max_d(D a, D b) { return vbslq_f64(vcgtq_f64(a, b), a, b); }
  static DI_ISA_INLINE D fmadd_d(D a, D b, D c) { return vfmaq_f64(c, a, b); }
  static DI_ISA_INLINE D fnmadd_d(D a, D b, D c) { return vfmsq_f64(c, a, b); }
  static DI_ISA_INLINE D round_d(D v) { return vrndnq_f64(v); }
  static DI_ISA_INLINE D load_d(const double* p) { return vld1q_f64(p); }
  static DI_ISA_INLINE void store_d(double* p, D v) { vst1q_f64(p, v); }
  // 2^n for integral doubles n in [-1022, 1023].
  static DI_ISA_INLINE D pow2(D n) {
    return vreinterpretq_f64_s64(vshlq_n_s64(vaddq_s64(vcvtq_s64_f64(n), vdupq_n_s64(1023)), 52));
  }
  // p * 2^n in two normal halves: the first product exact, the second rounding once (gradual
  // underflow, inf on overflow), as one scaling would.
  static DI_ISA_INLINE D times_pow2_d(D p, D n) {
    const D n1 = vrndmq_f64(vmulq_f64(n, vdupq_n_f64(0.5)));
    return vmulq_f64(vmulq_f64(p, pow2(n1)), pow2(vsubq_f64(n, n1)));
  }
  static DI_ISA_INLINE void widen(F v, D& lo, D& hi) {
    lo = vcvt_f64_f32(vget_low_f32(v));
    hi = vcvt_high_f64_f32(v);
  }
  static DI_ISA_INLINE F narrow(D lo, D hi) { return vcvt_high_f32_f64(vcvt_f32_f64(lo), hi); }
};

// Pairs of NEON registers as the 8-float vectors of lane8_kernels_impl.h (its list of
// operations); every lane's arithmetic is the AVX2 instruction's (vfmaq fused as vfmadd).
struct Lane8 {
  struct F {
    float32x4_t lo, hi;
  };
  struct I {
    int32x4_t lo, hi;
  };
  struct D {
    float64x2_t lo, hi;
  };
  static constexpr int64_t kLanes = 8;

  static DI_ISA_INLINE F zero() { return {vdupq_n_f32(0.0f), vdupq_n_f32(0.0f)}; }
  static DI_ISA_INLINE F set1(float f) { return {vdupq_n_f32(f), vdupq_n_f32(f)}; }
  static DI_ISA_INLINE F load(const float* p) { return {vld1q_f32(p), vld1q_f32(p + 4)}; }
  static DI_ISA_INLINE void store(float* p, F v) {
    vst1q_f32(p, v.lo);
    vst1q_f32(p + 4, v.hi);
  }
  static DI_ISA_INLINE F add(F a, F b) { return {vaddq_f32(a.lo, b.lo), vaddq_f32(a.hi, b.hi)}; }
  static DI_ISA_INLINE F fmadd(F a, F b, F c) { return {vfmaq_f32(c.lo, a.lo, b.lo), vfmaq_f32(c.hi, a.hi, b.hi)}; }
  // AVX2's hsum: s = lanes 0-3 + lanes 4-7, then (s0 + s2) + (s1 + s3).
  static DI_ISA_INLINE float hsum(F v) {
    const float32x4_t s = vaddq_f32(v.lo, v.hi);
    const float32x2_t t = vadd_f32(vget_low_f32(s), vget_high_f32(s));
    return vget_lane_f32(t, 0) + vget_lane_f32(t, 1);
  }
  static DI_ISA_INLINE void deinterleave(F a, F b, F& even, F& odd) {
    even = {vuzp1q_f32(a.lo, a.hi), vuzp1q_f32(b.lo, b.hi)};
    odd = {vuzp2q_f32(a.lo, a.hi), vuzp2q_f32(b.lo, b.hi)};
  }
  static DI_ISA_INLINE void prefetch(const void* p) { __builtin_prefetch(p); }

  static DI_ISA_INLINE I bits(F v) { return {vreinterpretq_s32_f32(v.lo), vreinterpretq_s32_f32(v.hi)}; }
  static DI_ISA_INLINE I set1_i(int v) { return {vdupq_n_s32(v), vdupq_n_s32(v)}; }
  static DI_ISA_INLINE I and_i(I a, I b) { return {vandq_s32(a.lo, b.lo), vandq_s32(a.hi, b.hi)}; }
  static DI_ISA_INLINE I or_i(I a, I b) { return {vorrq_s32(a.lo, b.lo), vorrq_s32(a.hi, b.hi)}; }
  static DI_ISA_INLINE I max_i32(I a, I b) { return {vmaxq_s32(a.lo, b.lo), vmaxq_s32(a.hi, b.hi)}; }
  static DI_ISA_INLINE I min_i32(I a, I b) { return {vminq_s32(a.lo, b.lo), vminq_s32(a.hi, b.hi)}; }
  static DI_ISA_INLINE I eq_i32(I a, I b) {
    return {vreinterpretq_s32_u32(vceqq_s32(a.lo, b.lo)), vreinterpretq_s32_u32(vceqq_s32(a.hi, b.hi))};
  }
  static DI_ISA_INLINE void store_i(int32_t* p, I v) {
    vst1q_s32(p, v.lo);
    vst1q_s32(p + 4, v.hi);
  }
  template <int N>
  static DI_ISA_INLINE I shr_i32(I v) {
    return {vreinterpretq_s32_u32(vshrq_n_u32(vreinterpretq_u32_s32(v.lo), N)),
            vreinterpretq_s32_u32(vshrq_n_u32(vreinterpretq_u32_s32(v.hi), N))};
  }

  static DI_ISA_INLINE D zero_d() { return {vdupq_n_f64(0.0), vdupq_n_f64(0.0)}; }
  static DI_ISA_INLINE D set1_d(double v) { return {vdupq_n_f64(v), vdupq_n_f64(v)}; }
  static DI_ISA_INLINE D load_d(const double* p) { return {vld1q_f64(p), vld1q_f64(p + 2)}; }
  static DI_ISA_INLINE void store_d(double* p, D v) {
    vst1q_f64(p, v.lo);
    vst1q_f64(p + 2, v.hi);
  }
  static DI_ISA_INLINE D widen4_d(const float* p) { return {vcvt_f64_f32(vld1_f32(p)), vcvt_f64_f32(vld1_f32(p + 2))}; }
  static DI_ISA_INLINE D add_d(D a, D b) { return {vaddq_f64(a.lo, b.lo), vaddq_f64(a.hi, b.hi)}; }
  static DI_ISA_INLINE D fmadd_d(D a, D b, D c) { return {vfmaq_f64(c.lo, a.lo, b.lo), vfmaq_f64(c.hi, a.hi, b.hi)}; }
  static DI_ISA_INLINE double sum_d(D v) {
    return (vgetq_lane_f64(v.lo, 0) + vgetq_lane_f64(v.lo, 1)) + (vgetq_lane_f64(v.hi, 0) + vgetq_lane_f64(v.hi, 1));
  }
};

// ------------------------------------------------------------------------------ AVX-512 lane groups

// (l0 + l2) + (l1 + l3) of one register: its group's share of the AVX-512 kernels' reduce4.
DI_ISA_INLINE float group_sum(float32x4_t v) {
  const float32x2_t t = vadd_f32(vget_low_f32(v), vget_high_f32(v));
  return vget_lane_f32(t, 0) + vget_lane_f32(t, 1);
}

// MR x NR outputs of 16 lanes (register g: lanes 4g .. 4g + 3). The four lane groups are
// independent, so each runs over all of K on its own: chains(g, acc) runs group g's chains
// into acc[MR][NR] (zeroed here); then out[m * NR + r] = the AVX-512 kernels' reduce4 lane sum,
// (G0 + G2) + (G1 + G3) with Gg = group_sum of group g.
template <int MR, int NR, class Chains>
DI_ISA_INLINE void lane_groups(float* out, Chains&& chains) {
  float sums[MR][NR][4];
  for (int g = 0; g < 4; ++g) {
    float32x4_t acc[MR][NR];
    for (int m = 0; m < MR; ++m)
      for (int r = 0; r < NR; ++r) acc[m][r] = vdupq_n_f32(0.0f);
    chains(g, acc);
    for (int m = 0; m < MR; ++m)
      for (int r = 0; r < NR; ++r) sums[m][r][g] = group_sum(acc[m][r]);
  }
  for (int m = 0; m < MR; ++m)
    for (int r = 0; r < NR; ++r) out[m * NR + r] = (sums[m][r][0] + sums[m][r][2]) + (sums[m][r][1] + sums[m][r][3]);
}
