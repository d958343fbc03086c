// The AVX2 vector operations (vectors of 8 floats, __m256) over which the shared algorithms are
// instantiated: cpu_kernels_isa_impl.h's (with isa_common_impl.h's BufferedParts) and
// lane8_kernels_impl.h's (cpu_kernels_avx2.cpp), attention_isa_impl.h's (attention_avx2.cpp).
// Each of those files includes this one inside its own namespace avx2 (within an unnamed
// namespace) after <immintrin.h> and <cstdint>: the copies are compiled with that file's AVX2
// flags and have internal linkage (the rule of cpu_isa.h). Hence no include guard and no
// includes here. The operations are those the template headers list (each lane one IEEE
// operation, FMA fused).

#ifndef DI_ISA_INLINE
#define DI_ISA_INLINE inline __attribute__((always_inline))
#endif

struct Vec8 {
  using F = __m256;
  using I = __m256i;
  using D = __m256d;
  static constexpr int64_t kLanes = 8;
  static constexpr bool kBf16 = false;  // no bf16 kernels here

  static DI_ISA_INLINE F zero() { return _mm256_setzero_ps(); }
  static DI_ISA_INLINE F set1(float f) { return _mm256_set1_ps(f); }
  static DI_ISA_INLINE F load(const float* p) { return _mm256_loadu_ps(p); }
  static DI_ISA_INLINE void store(float* p, F v) { _mm256_storeu_ps(p, v); }
  static DI_ISA_INLINE F add(F a, F b) { return _mm256_add_ps(a, b); }
  static DI_ISA_INLINE F sub(F a, F b) { return _mm256_sub_ps(a, b); }
  static DI_ISA_INLINE F mul(F a, F b) { return _mm256_mul_ps(a, b); }
  static DI_ISA_INLINE F div(F a, F b) { return _mm256_div_ps(a, b); }
  static DI_ISA_INLINE F fmadd(F a, F b, F c) { return _mm256_fmadd_ps(a, b, c); }
  static DI_ISA_INLINE F min(F a, F b) { return _mm256_min_ps(a, b); }
  static DI_ISA_INLINE F max(F a, F b) { return _mm256_max_ps(a, b); }
  static DI_ISA_INLINE F abs(F v) { return _mm256_and_ps(v, _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff))); }
  // ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7)): the lane sum every AVX2 output ends with.
  static DI_ISA_INLINE float hsum(F v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
  static DI_ISA_INLINE float hmax(F v) {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
  static DI_ISA_INLINE float first(F v) { return _mm256_cvtss_f32(v); }
  static DI_ISA_INLINE void deinterleave(F a, F b, F& even, F& odd) {
    const __m256i split = _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7);
    a = _mm256_permutevar8x32_ps(a, split);  // evens, odds of a
    b = _mm256_permutevar8x32_ps(b, split);
    even = _mm256_permute2f128_ps(a, b, 0x20);
    odd = _mm256_permute2f128_ps(a, b, 0x31);
  }
  static DI_ISA_INLINE void prefetch(const void* p) { _mm_prefetch(static_cast<const char*>(p), _MM_HINT_T0); }

  static DI_ISA_INLINE I bits(F v) { return _mm256_castps_si256(v); }
  static DI_ISA_INLINE F from_bits(I v) { return _mm256_castsi256_ps(v); }
  static DI_ISA_INLINE I set1_i(int v) { return _mm256_set1_epi32(v); }
  static DI_ISA_INLINE I and_i(I a, I b) { return _mm256_and_si256(a, b); }
  static DI_ISA_INLINE I or_i(I a, I b) { return _mm256_or_si256(a, b); }
  static DI_ISA_INLINE I andnot_i(I a, I b) { return _mm256_andnot_si256(a, b); }
  static DI_ISA_INLINE I add_i32(I a, I b) { return _mm256_add_epi32(a, b); }
  static DI_ISA_INLINE I max_i32(I a, I b) { return _mm256_max_epi32(a, b); }
  static DI_ISA_INLINE I min_i32(I a, I b) { return _mm256_min_epi32(a, b); }
  static DI_ISA_INLINE I eq_i32(I a, I b) { return _mm256_cmpeq_epi32(a, b); }
  static DI_ISA_INLINE void store_i(int32_t* p, I v) { _mm256_store_si256(reinterpret_cast<__m256i*>(p), v); }
  template <int N>
  static DI_ISA_INLINE I shr_i32(I v) { return _mm256_srli_epi32(v, N); }
  template <int N>
  static DI_ISA_INLINE I shl_i32(I v) { return _mm256_slli_epi32(v, N); }
  static DI_ISA_INLINE I where_nan(F h, I a, I b) {
    return _mm256_castps_si256(
        _mm256_blendv_ps(_mm256_castsi256_ps(b), _mm256_castsi256_ps(a), _mm256_cmp_ps(h, h, _CMP_UNORD_Q)));
  }

  static DI_ISA_INLINE D zero_d() { return _mm256_setzero_pd(); }
  static DI_ISA_INLINE D set1_d(double v) { return _mm256_set1_pd(v); }
  static DI_ISA_INLINE D load_d(const double* p) { return _mm256_loadu_pd(p); }
  static DI_ISA_INLINE D widen4_d(const float* p) { return _mm256_cvtps_pd(_mm_loadu_ps(p)); }
  static DI_ISA_INLINE D add_d(D a, D b) { return _mm256_add_pd(a, b); }
  static DI_ISA_INLINE D sub_d(D a, D b) { return _mm256_sub_pd(a, b); }
  static DI_ISA_INLINE D mul_d(D a, D b) { return _mm256_mul_pd(a, b); }
  static DI_ISA_INLINE D div_d(D a, D b) { return _mm256_div_pd(a, b); }
  static DI_ISA_INLINE D min_d(D a, D b) { return _mm256_min_pd(a, b); }
  static DI_ISA_INLINE D max_d(D a, D b) { return _mm256_max_pd(a, b); }
  static DI_ISA_INLINE D fmadd_d(D a, D b, D c) { return _mm256_fmadd_pd(a, b, c); }
  static DI_ISA_INLINE D fnmadd_d(D a, D b, D c) { return _mm256_fnmadd_pd(a, b, c); }
  static DI_ISA_INLINE D round_d(D v) { return _mm256_round_pd(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  static DI_ISA_INLINE void store_d(double* p, D v) { _mm256_store_pd(p, v); }
  static DI_ISA_INLINE double sum_d(D v) {
    alignas(32) double l[4];
    _mm256_store_pd(l, v);
    return (l[0] + l[1]) + (l[2] + l[3]);
  }
  // 2^n for integral doubles n in [-1022, 1023].
  static DI_ISA_INLINE D pow2(D n) {
    const D magic = _mm256_set1_pd(6755399441055744.0);  // 1.5 * 2^52: n lands in the low bits
    const I i = _mm256_sub_epi64(_mm256_castpd_si256(_mm256_add_pd(n, magic)), _mm256_castpd_si256(magic));
    return _mm256_castsi256_pd(_mm256_slli_epi64(_mm256_add_epi64(i, _mm256_set1_epi64x(1023)), 52));
  }
  // No vscalefpd: 2^n in two halves, each a normal power of two, so the first product is exact
  // and the second rounds once, with gradual underflow like a single scaling. A NaN n gives
  // halves of garbage bits, but p is NaN already.
  static DI_ISA_INLINE D times_pow2_d(D p, D n) {
    const D n1 = _mm256_floor_pd(_mm256_mul_pd(n, _mm256_set1_pd(0.5)));
    return _mm256_mul_pd(_mm256_mul_pd(p, pow2(n1)), pow2(_mm256_sub_pd(n, n1)));
  }
  static DI_ISA_INLINE void widen(F v, D& lo, D& hi) {
    lo = _mm256_cvtps_pd(_mm256_castps256_ps128(v));
    hi = _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1));
  }
  static DI_ISA_INLINE F narrow(D lo, D hi) {
    return _mm256_insertf128_ps(_mm256_castps128_ps256(_mm256_cvtpd_ps(lo)), _mm256_cvtpd_ps(hi), 1);
  }
};
