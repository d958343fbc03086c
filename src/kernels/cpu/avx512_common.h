// Small AVX-512 helpers shared by the *_avx512.cpp kernel files (only they include this: it
// needs their ISA flags). Each helper's arithmetic is part of the kernels' bit contract (the
// lane-sum tree of reduce4 above all), so there is exactly one copy of it.
#pragma once
#include <immintrin.h>

#include <cstdint>

#include "kernels/cpu/cpu_isa.h"

namespace deepinfer::kernels::cpu::avx512 {

#define DI_AVX512_INLINE inline __attribute__((always_inline))

inline uint64_t mask64(int64_t n) { return n >= 64 ? ~0ull : n <= 0 ? 0ull : (1ull << n) - 1; }
inline uint32_t mask32(int64_t n) { return n >= 32 ? ~0u : n <= 0 ? 0u : (1u << n) - 1; }
inline uint16_t mask16(int64_t n) { return n >= 16 ? uint16_t(0xffff) : n <= 0 ? uint16_t(0) : uint16_t((1u << n) - 1); }
inline __m512i load_i(const void* p) { return _mm512_loadu_si512(p); }

// Whether every byte of s[0, n) lies in [lo, hi] (a row's scale bytes against the range that
// keeps its products exact).
inline bool bytes_within(const uint8_t* s, int64_t n, int lo, int hi) {
  for (int64_t i = 0; i < n; i += 64) {
    const __m512i b = _mm512_maskz_loadu_epi8(mask64(n - i), s + i);
    const __mmask64 bad = _mm512_cmplt_epu8_mask(b, _mm512_set1_epi8(char(lo))) |
                          _mm512_cmpgt_epu8_mask(b, _mm512_set1_epi8(char(hi)));
    if (bad & mask64(n - i)) return false;
  }
  return true;
}

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

// The end of a GEMV group of MR activation rows times NRW weight rows from n: each accumulator's
// lane sum (reduce4, four weight rows at a time) into y[m * N + n + r]; returns the rows (bit r)
// whose bad mask is set (a CHECK decoder found them out of range: their outputs are invalid).
template <int MR, int NRW>
DI_AVX512_INLINE uint32_t finish_group(const __m512 (&acc)[MR][NRW], const __mmask32 (&bad)[NRW], float* y,
                                       int64_t N, int64_t n) {
  const __m512 z = _mm512_setzero_ps();
  for (int m = 0; m < MR; ++m)
    for (int r0 = 0; r0 < NRW; r0 += 4)
      store_sums(y + m * N + n + r0,
                 reduce4(acc[m][r0], r0 + 1 < NRW ? acc[m][r0 + 1] : z, r0 + 2 < NRW ? acc[m][r0 + 2] : z,
                         r0 + 3 < NRW ? acc[m][r0 + 3] : z),
                 NRW - r0);
  uint32_t bad_rows = 0;
  for (int r = 0; r < NRW; ++r)
    if (bad[r]) bad_rows |= 1u << r;
  return bad_rows;
}

#undef DI_AVX512_INLINE

}  // namespace deepinfer::kernels::cpu::avx512
