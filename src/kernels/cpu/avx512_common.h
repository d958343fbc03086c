// Small AVX-512 helpers shared by the *_avx512.cpp kernel files (only they include this: it
// needs their ISA flags). Each helper's arithmetic is part of the kernels' bit contract (the
// lane-sum tree of reduce4 above all), so there is exactly one copy of it.
#pragma once
#include <immintrin.h>

#include <cstdint>

#include "kernels/cpu/cpu_isa.h"

namespace deepinfer::kernels::cpu::avx512 {

#define DI_AVX512_INLINE inline __attribute__((always_inline))

inline uint32_t mask32(int64_t n) { return n >= 32 ? ~0u : n <= 0 ? 0u : (1u << n) - 1; }

// bf16 lanes that are nonzero and outside [2^-40, 2^40] (NaN, inf, subnormal included).
DI_AVX512_INLINE __mmask32 b16_out_of_range(__m512i w) {
  const __m512i mag = _mm512_and_si512(w, _mm512_set1_epi16(0x7fff));
  const __m512i lo = _mm512_set1_epi16(short(kBf16RangeLoBits >> 16));
  const __m512i span = _mm512_set1_epi16(short((kBf16RangeHiBits - kBf16RangeLoBits) >> 16));
  return _mm512_mask_cmpgt_epu16_mask(_mm512_test_epi16_mask(mag, mag), _mm512_sub_epi16(mag, lo), span);
}

// Horizontal sums of four vectors: {sum a, sum b, sum c, sum d}; lane i of the result
// depends only on its own vector.
DI_AVX512_INLINE __m128 reduce4(__m512 a, __m512 b, __m512 c, __m512 d) {
  const __m512 ab = _mm512_add_ps(_mm512_unpacklo_ps(a, b), _mm512_unpackhi_ps(a, b));  // a b a b per 128
  const __m512 cd = _mm512_add_ps(_mm512_unpacklo_ps(c, d), _mm512_unpackhi_ps(c, d));
  const __m512 abcd = _mm512_add_ps(_mm512_shuffle_ps(ab, cd, 0x44), _mm512_shuffle_ps(ab, cd, 0xee));  // a b c d
  const __m256 h = _mm256_add_ps(_mm512_castps512_ps256(abcd), _mm512_extractf32x8_ps(abcd, 1));
  return _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
}

// Writes the first n (<= 4) sums of four accumulators to dst.
inline void store_sums(float* dst, __m128 sums, int64_t n) {
  if (n >= 4) {
    _mm_storeu_ps(dst, sums);
  } else {
    alignas(16) float tmp[4];
    _mm_store_ps(tmp, sums);
    for (int64_t i = 0; i < n; ++i) dst[i] = tmp[i];
  }
}

#undef DI_AVX512_INLINE

}  // namespace deepinfer::kernels::cpu::avx512
