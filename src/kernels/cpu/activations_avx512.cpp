// AVX-512 kernels around the products: activation rows prepared for the linear calls
// (prep_float, the row orders the weight decoders take x in), the indexer's dot products
// (double, and the exact bf16 ones with their exactness test) and dot_f64. Compiled with
// AVX-512 flags; the kernel table (cpu_kernels_avx512.cpp) points at these functions
// (avx512_kernels.h), the rest has internal linkage (cpu_isa.h). The orders are the decoders'
// (avx512_decoders.h: Fp4Dec, Bf16Dec::f32, bf16_to_dp).
#include <cstdint>

#include "kernels/cpu/avx512_decoders.h"
#include "kernels/cpu/avx512_kernels.h"
#include "kernels/cpu/cpu_isa.h"

namespace deepinfer::kernels::cpu::avx512 {

namespace {

// VecBits and the indexer's exactness test (index_key_exact, index_query_add): included here
// with internal linkage, as cpu_kernels_avx512.cpp includes it for the shared algorithms
// (none of whose templates this file instantiates).
#include "kernels/cpu/cpu_kernels_isa_impl.h"

}  // namespace

// ------------------------------------------------------------------------------ activations

void prep_float(const float* x, int64_t K, int64_t m0, int64_t m1, int64_t xs, float* xf, uint16_t* xb,
                uint8_t* bf16_ok) {
  const __m512i low16 = _mm512_set1_epi32(0xffff);
  for (int64_t m = m0; m < m1; ++m) {
    const float* src = x + m * K;
    float* df = xf + m * xs;
    uint16_t* db = xb + m * xs;
    __mmask16 ok = 0xffff;
    for (int64_t k = 0; k < xs; k += 16) {
      const __m512 v = _mm512_maskz_loadu_ps(mask16(K - k), src + k);
      const __m512i b = _mm512_castps_si512(v);
      ok &= in_range(v) & _mm512_testn_epi32_mask(b, low16);
      _mm512_storeu_ps(df + k, v);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(db + k), _mm512_cvtepi32_epi16(_mm512_srli_epi32(b, 16)));
    }
    bf16_ok[m] = ok == 0xffff;
  }
}

// ------------------------------------------------------------------------------ row orders

void fp4_lane_order(uint16_t* xb, int64_t m0, int64_t m1, int64_t xs) {
  __m512i idx[4];
  for (int v = 0; v < 4; ++v) idx[v] = load_i(kT.idx_lane[v]);
  for (int64_t m = m0; m < m1; ++m)
    for (int64_t k = 0; k < xs; k += kFp4Chunk) {
      uint16_t* p = xb + m * xs + k;
      const __m512i a = load_i(p), b = load_i(p + 32), c = load_i(p + 64), d = load_i(p + 96);
      for (int v = 0; v < 4; ++v)  // words 0-15 come from columns 0-63, words 16-31 from 64-127
        _mm512_storeu_si512(p + 32 * v, _mm512_mask_blend_epi16(0xffff0000u, _mm512_permutex2var_epi16(a, idx[v], b),
                                                                 _mm512_permutex2var_epi16(c, idx[v], d)));
    }
}

// Rows [m0, m1) of xb (stride xs, a multiple of 32) into xd in dot-product order fp32.
void bf16_dp_order(const uint16_t* xb, float* xd, int64_t m0, int64_t m1, int64_t xs) {
  for (int64_t m = m0; m < m1; ++m) row_to_dp(xb + m * xs, xd + m * xs, xs);
}

// Rows [m0, m1) of xf (stride xs, a multiple of kFp4Chunk) into FP4 fp32 order, in place:
// in each chunk, position 16j + i takes column 8i + j (see Fp4Dec::f32).
void fp4_f32_order(float* xf, int64_t m0, int64_t m1, int64_t xs) {
  alignas(64) int32_t idx[8][16];
  for (int j = 0; j < 8; ++j)
    for (int i = 0; i < 16; ++i) idx[j][i] = (8 * i + j) % 32;  // within the vector pair (8i + j) / 32
  for (int64_t m = m0; m < m1; ++m)
    for (int64_t k = 0; k < xs; k += kFp4Chunk) {
      float* p = xf + m * xs + k;
      __m512 v[8];
      for (int q = 0; q < 8; ++q) v[q] = _mm512_loadu_ps(p + 16 * q);
      for (int j = 0; j < 8; ++j) {
        // Lanes 0-3 take columns 8i + j < 32 (vectors 0, 1), lanes 4-7 columns in 32..63, ...
        const __m512i ix = _mm512_load_si512(idx[j]);
        __m512 out = _mm512_permutex2var_ps(v[0], ix, v[1]);
        out = _mm512_mask_mov_ps(out, 0x00f0, _mm512_permutex2var_ps(v[2], ix, v[3]));
        out = _mm512_mask_mov_ps(out, 0x0f00, _mm512_permutex2var_ps(v[4], ix, v[5]));
        out = _mm512_mask_mov_ps(out, 0xf000, _mm512_permutex2var_ps(v[6], ix, v[7]));
        _mm512_storeu_ps(p + 16 * j, out);
      }
    }
}

// Rows [m0, m1) of xf (stride xs, a multiple of 32) into BF16 pair order, in place: each 32
// columns become the 16 even ones, then the 16 odd ones.
void bf16_pair_order(float* xf, int64_t m0, int64_t m1, int64_t xs) {
  alignas(64) int32_t even[16], odd[16];
  for (int j = 0; j < 16; ++j) {
    even[j] = 2 * j;
    odd[j] = 2 * j + 1;
  }
  const __m512i ie = _mm512_load_si512(even), io = _mm512_load_si512(odd);
  for (int64_t m = m0; m < m1; ++m)
    for (int64_t k = 0; k < xs; k += 32) {
      float* p = xf + m * xs + k;
      const __m512 a = _mm512_loadu_ps(p), b = _mm512_loadu_ps(p + 16);
      _mm512_storeu_ps(p, _mm512_permutex2var_ps(a, ie, b));
      _mm512_storeu_ps(p + 16, _mm512_permutex2var_ps(a, io, b));
    }
}

// ------------------------------------------------------------------------------ indexer dots

void index_dots(const double* qT, int64_t n_heads, int64_t dim, const float* const* keys, int64_t n_keys,
                double* out) {
  constexpr int kKeys = 8;     // keys side by side: 16 independent FMA chains
  constexpr int64_t kCols = 128;  // key columns widened to double at a time
  alignas(64) double kd[kKeys][kCols];
  for (int64_t h0 = 0; h0 < n_heads; h0 += 16) {  // 16 heads: two vectors of 8 lanes
    const int64_t nh = min64(16, n_heads - h0);
    const __mmask8 m0 = __mmask8(mask16(nh)), m1 = __mmask8(mask16(nh - 8));
    for (int64_t s0 = 0; s0 < n_keys; s0 += kKeys) {
      const int64_t nk = min64(kKeys, n_keys - s0);
      __m512d acc[kKeys][2];
      for (int j = 0; j < kKeys; ++j) acc[j][0] = acc[j][1] = _mm512_setzero_pd();
      for (int64_t c0 = 0; c0 < dim; c0 += kCols) {
        const int64_t cn = min64(kCols, dim - c0);
        for (int j = 0; j < kKeys; ++j)
          for (int64_t c = 0; c < cn; c += 8) {
            const __m256 f = j < nk ? _mm256_maskz_loadu_ps(__mmask8(mask16(cn - c)), keys[s0 + j] + c0 + c)
                                    : _mm256_setzero_ps();
            _mm512_store_pd(&kd[j][c], _mm512_cvtps_pd(f));
          }
        for (int64_t c = 0; c < cn; ++c) {
          const double* q = qT + (c0 + c) * n_heads + h0;
          const __m512d q0 = _mm512_maskz_loadu_pd(m0, q), q1 = _mm512_maskz_loadu_pd(m1, q + 8);
          for (int j = 0; j < kKeys; ++j) {
            const __m512d kv = _mm512_set1_pd(kd[j][c]);
            acc[j][0] = _mm512_fmadd_pd(q0, kv, acc[j][0]);
            acc[j][1] = _mm512_fmadd_pd(q1, kv, acc[j][1]);
          }
        }
      }
      for (int j = 0; j < kKeys; ++j)  // constant trip count: acc stays in registers
        if (j < nk) {
          _mm512_mask_storeu_pd(out + (s0 + j) * n_heads + h0, m0, acc[j][0]);
          _mm512_mask_storeu_pd(out + (s0 + j) * n_heads + h0 + 8, m1, acc[j][1]);
        }
    }
  }
}

namespace {

// The exponents of 16 values at a time folded into running lanes.
struct VecBitsLanes {
  __m512i bits_or = _mm512_setzero_si512();   // mantissa bits below the top one: refused
  __m512i e_max = _mm512_setzero_si512();     // top exponent of nonzero values
  __m512i e_min = _mm512_set1_epi32(255);     // the least (0: subnormal)
  DI_INLINE void add(__m512i b) {
    bits_or = _mm512_or_si512(bits_or, b);
    const __m512i a = _mm512_and_si512(b, _mm512_set1_epi32(0x7fffffff));
    const __mmask16 nz = _mm512_test_epi32_mask(a, a);
    const __m512i e = _mm512_srli_epi32(a, 23);
    e_max = _mm512_mask_max_epu32(e_max, nz, e_max, e);
    e_min = _mm512_mask_min_epu32(e_min, nz, e_min, e);
  }
  DI_INLINE VecBits get() const {
    VecBits v;
    v.e_max = int(_mm512_reduce_max_epu32(e_max));
    const int least = int(_mm512_reduce_min_epu32(e_min));
    v.any = v.e_max > 0 || least < 255;
    if (!v.any) return v;  // all zeros (or -0s)
    v.low_min = least - 1;
    v.ok = (_mm512_reduce_or_epi32(bits_or) & 0x3fffff) == 0 && least >= 1 && v.e_max <= 254;
    return v;
  }
};

// One key's 32 columns c0.. as bf16 pairs (exact for the values VecBits accepts), their
// exponents folded into `bits`.
DI_INLINE void key_pairs32(const float* key, int64_t c0, int64_t dim, uint32_t* pairs, VecBitsLanes& bits) {
  const __m512i b0 = _mm512_maskz_loadu_epi32(mask16(dim - c0), key + c0);
  const __m512i b1 = _mm512_maskz_loadu_epi32(mask16(dim - c0 - 16), key + c0 + 16);
  bits.add(b0);
  bits.add(b1);
  const __m512i w = (__m512i)_mm512_cvtne2ps_pbh(_mm512_castsi512_ps(b1), _mm512_castsi512_ps(b0));
  _mm512_storeu_si512(pairs + c0 / 2, w);
}

}  // namespace

void index_query_exact(const float* q, int64_t n_heads, int64_t dim, uint32_t* pairs, IndexQueryExact* info) {
  *info = IndexQueryExact{};
  if (dim > kIndexExactMaxDim || n_heads <= 0 || dim <= 0) return;
  const int64_t np = (dim + 1) / 2;
  const int64_t groups = (n_heads + 63) / 64;
  const int vectors = int(min64(4, (n_heads + 15) / 16));
  const int64_t heads_pad = groups > 1 ? groups * 64 : 16 * vectors;
  alignas(64) uint32_t row[kIndexExactMaxDim / 2 + 16];
  info->ok = true;
  for (int64_t h = 0; h < heads_pad; ++h) {
    if (h >= n_heads) {
      for (int64_t i = 0; i < np; ++i) pairs[i * heads_pad + h] = 0;
      continue;
    }
    VecBitsLanes lanes;
    for (int64_t c = 0; c < dim; c += 32) key_pairs32(q + h * dim, c, dim, row, lanes);
    for (int64_t i = 0; i < np; ++i) pairs[i * heads_pad + h] = row[i];
    index_query_add(*info, lanes.get());
  }
  info->data = pairs;
  info->heads_pad = heads_pad;
  info->vectors = vectors;
}

namespace {

// index_dots_exact for heads in groups of NV vectors of 16; keys side by side for 12-16
// independent dot-product chains (a core issues two a cycle, each some cycles long).
template <int NV>
void index_dots_exact_nv(const IndexQueryExact& q, int64_t n_heads, int64_t dim, const float* const* keys,
                        int64_t n_keys, double* out, uint8_t* exact) {
  constexpr int kKeys = NV == 1 ? 16 : NV == 2 ? 8 : 4;
  const int64_t np = (dim + 1) / 2;
  const int lg = ceil_log2(dim);
  alignas(64) uint32_t kb[kKeys][kIndexExactMaxDim / 2 + 16];
  for (int64_t s0 = 0; s0 < n_keys; s0 += kKeys) {
    const int64_t nk = min64(kKeys, n_keys - s0);
    // The next group's rows, while this one computes: a decode step finds the keys out of
    // cache, in short runs (a page's keys) the hardware prefetchers barely start on.
    for (int64_t j = s0 + kKeys; j < min64(s0 + 2 * kKeys, n_keys); ++j)
      for (int64_t c = 0; c < dim; c += 16) _mm_prefetch(reinterpret_cast<const char*>(keys[j] + c), _MM_HINT_T0);
    for (int j = 0; j < kKeys; ++j) {
      if (j >= nk) {
        for (int64_t i = 0; i < np; ++i) kb[j][i] = 0;
        continue;
      }
      VecBitsLanes lanes;
      for (int64_t c = 0; c < dim; c += 32) key_pairs32(keys[s0 + j], c, dim, kb[j], lanes);
      const VecBits k = lanes.get();
      exact[s0 + j] = uint8_t(index_key_exact(q, k, lg));
    }
    for (int64_t h0 = 0; h0 < q.heads_pad; h0 += 16 * NV) {
      __m512 acc[kKeys][NV];
      for (int j = 0; j < kKeys; ++j)
        for (int v = 0; v < NV; ++v) acc[j][v] = _mm512_setzero_ps();
      const uint32_t* qp = q.data + h0;
      for (int64_t i = 0; i < np; ++i, qp += q.heads_pad) {
        __m512i qv[NV];
        for (int v = 0; v < NV; ++v) qv[v] = _mm512_loadu_si512(qp + 16 * v);
        for (int j = 0; j < kKeys; ++j) {
          const __m512i kv = _mm512_set1_epi32(int(kb[j][i]));
          for (int v = 0; v < NV; ++v) acc[j][v] = dp(acc[j][v], qv[v], kv);
        }
      }
      for (int j = 0; j < kKeys; ++j)  // constant trip count: acc stays in registers
        if (j < nk)
          for (int v = 0; v < NV; ++v) {
            const int64_t h = h0 + 16 * v;
            double* o = out + (s0 + j) * n_heads + h;
            _mm512_mask_storeu_pd(o, __mmask8(mask16(n_heads - h)), _mm512_cvtps_pd(_mm512_castps512_ps256(acc[j][v])));
            _mm512_mask_storeu_pd(o + 8, __mmask8(mask16(n_heads - h - 8)),
                                  _mm512_cvtps_pd(_mm512_extractf32x8_ps(acc[j][v], 1)));
          }
    }
  }
}

}  // namespace

void index_dots_exact(const IndexQueryExact& q, int64_t n_heads, int64_t dim, const float* const* keys, int64_t n_keys,
                     double* out, uint8_t* exact) {
  if (!q.data || dim > kIndexExactMaxDim) {
    for (int64_t s = 0; s < n_keys; ++s) exact[s] = 0;
    return;
  }
  switch (q.vectors) {
    case 1: return index_dots_exact_nv<1>(q, n_heads, dim, keys, n_keys, out, exact);
    case 2: return index_dots_exact_nv<2>(q, n_heads, dim, keys, n_keys, out, exact);
    case 3: return index_dots_exact_nv<3>(q, n_heads, dim, keys, n_keys, out, exact);
    default: return index_dots_exact_nv<4>(q, n_heads, dim, keys, n_keys, out, exact);
  }
}

// ------------------------------------------------------------------------------ dot_f64

// sum a[i] * b[i] in double: 8 lanes x 4 accumulators of exact products (fp32 x fp32 fits a
// double), then the lanes and a scalar tail.
double dot_f64(const float* a, const float* b, int64_t n) {
  __m512d acc[4] = {_mm512_setzero_pd(), _mm512_setzero_pd(), _mm512_setzero_pd(), _mm512_setzero_pd()};
  int64_t i = 0;
  for (; i + 32 <= n; i += 32)
    for (int u = 0; u < 4; ++u) {
      const __m512d x = _mm512_cvtps_pd(_mm256_loadu_ps(a + i + 8 * u));
      const __m512d y = _mm512_cvtps_pd(_mm256_loadu_ps(b + i + 8 * u));
      acc[u] = _mm512_fmadd_pd(x, y, acc[u]);
    }
  for (; i + 8 <= n; i += 8)
    acc[0] = _mm512_fmadd_pd(_mm512_cvtps_pd(_mm256_loadu_ps(a + i)), _mm512_cvtps_pd(_mm256_loadu_ps(b + i)), acc[0]);
  double total = _mm512_reduce_add_pd(_mm512_add_pd(_mm512_add_pd(acc[0], acc[1]), _mm512_add_pd(acc[2], acc[3])));
  for (; i < n; ++i) total += double(a[i]) * double(b[i]);
  return total;
}

void dot_f64_4(const float* a, const float* b, int64_t ldb, int64_t n, double* out) {
  __m512d acc[4][4];
  for (int r = 0; r < 4; ++r)
    for (int u = 0; u < 4; ++u) acc[r][u] = _mm512_setzero_pd();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32)
    for (int u = 0; u < 4; ++u) {
      const __m512d x = _mm512_cvtps_pd(_mm256_loadu_ps(a + i + 8 * u));
      for (int r = 0; r < 4; ++r)
        acc[r][u] = _mm512_fmadd_pd(x, _mm512_cvtps_pd(_mm256_loadu_ps(b + r * ldb + i + 8 * u)), acc[r][u]);
    }
  for (; i + 8 <= n; i += 8) {
    const __m512d x = _mm512_cvtps_pd(_mm256_loadu_ps(a + i));
    for (int r = 0; r < 4; ++r)
      acc[r][0] = _mm512_fmadd_pd(x, _mm512_cvtps_pd(_mm256_loadu_ps(b + r * ldb + i)), acc[r][0]);
  }
  for (int r = 0; r < 4; ++r) {
    double total =
        _mm512_reduce_add_pd(_mm512_add_pd(_mm512_add_pd(acc[r][0], acc[r][1]), _mm512_add_pd(acc[r][2], acc[r][3])));
    for (int64_t j = i; j < n; ++j) total += double(a[j]) * double(b[r * ldb + j]);
    out[r] = total;
  }
}

}  // namespace deepinfer::kernels::cpu::avx512
