// AVX-512 decode path (M <= 8 activation rows: decode, decode batches, speculative verify):
// the GEMV for F32, FP8 and FP4 weights, and the fp32-mode rows every path falls back to.
// Compiled with AVX-512 flags; the decoders and the arithmetic are avx512_decoders.h's, so
// every output has the bits of the tiles' and fp4_multirow_avx512's (RowInvariance); the
// exported entry points are avx512_kernels.h's, the rules cpu_isa.h's.
//
// Decode (M <= 8) fuses the decode with the dot products, several weight rows at a time (FP4 in
// bf16 mode over 3-16 rows: fp4_multirow_avx512.cpp; BF16, the output head:
// bf16_gemv_avx512.cpp; the same sequence for every output).
#include <cstdint>

#include "kernels/cpu/avx512_decoders.h"
#include "kernels/cpu/avx512_kernels.h"
#include "kernels/cpu/bf16_gemv.h"

namespace deepinfer::kernels::cpu::avx512 {

namespace {

template <bool BF>
struct Vec;
template <>
struct Vec<false> {
  using T = __m512;
  static constexpr int W = 16;
  static DI_INLINE T load(const LinearCall& c, int64_t m, int64_t k) { return _mm512_loadu_ps(c.xf + m * c.xs + k); }
  static DI_INLINE T zero() { return _mm512_setzero_ps(); }
  static DI_INLINE __m512 madd(__m512 acc, T x, T w) { return _mm512_fmadd_ps(x, w, acc); }
};
template <>
struct Vec<true> {
  using T = __m512i;
  static constexpr int W = 32;
  static DI_INLINE T load(const LinearCall& c, int64_t m, int64_t k) { return load_i(c.xb + m * c.xs + k); }
  static DI_INLINE T zero() { return _mm512_setzero_si512(); }
  static DI_INLINE __m512 madd(__m512 acc, T x, T w) { return dp(acc, x, w); }
};

template <class D>
constexpr XScale xscale_of() {
  if constexpr (requires { D::XSCALE; })
    return D::XSCALE;
  else
    return XScale::kNone;
}

// MR activation rows times NRW weight rows starting at n, fused decode + dot. Returns the
// rows (bit r) a CHECK decoder found out of range in bf16 mode; their outputs are invalid.
// XS != kNone (bf16 mode only): the weight scales go onto x, see XScale.
template <class D, bool BF, int MR, int NRW, XScale XS = XScale::kNone>
uint32_t gemv_group(const LinearCall& c, const D& d, int64_t n) {
  static_assert(XS == XScale::kNone || (BF && !D::CHECK && XS == XScale::kShared));
  using V = Vec<BF>;
  using T = typename V::T;
  constexpr int NV = BF ? D::NB : D::NF;
  constexpr bool parts = BF && partial_sums<D>();
  typename D::Row row[NRW];
  for (int r = 0; r < NRW; ++r) row[r] = d.row(n + r);
  if constexpr (parts) {
    const int64_t nf = D::scale_floats(c.K);
    float* floats = static_cast<float*>(__builtin_alloca(size_t(NRW * nf) * sizeof(float)));
    for (int r = 0; r < NRW; ++r) d.prep_scales(row[r], floats + r * nf);
  }
  __m512 acc[MR][NRW];
  for (int m = 0; m < MR; ++m)
    for (int r = 0; r < NRW; ++r) acc[m][r] = _mm512_setzero_ps();
  __mmask32 bad[NRW] = {};
  const int64_t K = c.K, Kp = c.xs;
  // Up to 16 x vectors stay in registers for the chunk; more rows load theirs where they
  // are used (from L1: every weight vector meets MR of them).
  // (Not where they would crowd the accumulators and weight vectors out of the 32 registers.)
  constexpr bool keep_x = MR * NV <= 16 && (NRW <= 2 || MR * NV + MR * NRW + NV <= 30);
  static_assert(keep_x || XS == XScale::kNone);
  // bf16 mode over 3+ rows (not FP4's partial sums): each decoded bf16 weight vector is widened
  // once into dot-product order and meets every row's xd in FMAs, the bits of vdpbf16ps (see
  // bf16_to_dp), which issues at half the rate (hot, 1 thread, FP8 2048 x 2048: M = 3 9.3 ->
  // 10.2 GB/s, M = 4 7.7 -> 9.0, M = 6 5.5 -> 7.0; at M = 2 the widening costs more than it
  // saves, 12.8 -> 11.5; FP4 was not faster).
  // Only where the driver made xd: with vdpbf16ps as fast as an FMA (dp tiles) it does not,
  // and the rows meet the bf16 words directly (Zen 4, hot, 1 thread, FP8 2048 x 2048, CPU
  // time: M = 3 0.467 -> 0.347 ms, M = 4 0.53 -> 0.38, M = 6 0.69 -> 0.47, M = 8 1.05 -> 0.67).
  constexpr bool widen = BF && MR >= 3 && !partial_sums<D>();
  static_assert(!widen || XS == XScale::kNone);
  bool widened = false;
  // Every chunk of K (whole chunks with the weights' prefetch, then the tail) through step.
  auto sweep = [&](auto& step) __attribute__((always_inline)) {
    int64_t k = 0;
    for (; k + D::CH <= K; k += D::CH) {
      for (int r = 0; r < NRW; ++r) d.prefetch(row[r], k);
      step(k, D::CH);
    }
    for (; k < Kp; k += D::CH) step(k, K - k < D::CH ? K - k : D::CH);
  };
  if constexpr (widen) {
    if (c.xd) {
    widened = true;
    auto step = [&](int64_t k, int64_t nv) __attribute__((always_inline)) {
      __m512i w[NRW][NV];
      for (int r = 0; r < NRW; ++r) {
        if (nv <= 0) {
          for (int v = 0; v < NV; ++v) w[r][v] = _mm512_setzero_si512();
        } else {
          d.b16(row[r], k, nv, w[r]);
          if constexpr (D::CHECK)
            for (int v = 0; v < NV; ++v) bad[r] |= b16_out_of_range(w[r][v]);
        }
      }
      for (int v = 0; v < NV; ++v) {
        __m512 wo[NRW], we[NRW];
        for (int r = 0; r < NRW; ++r) bf16_to_dp(w[r][v], &wo[r], &we[r]);
        for (int m = 0; m < MR; ++m) {
          const __m512 o = _mm512_loadu_ps(c.xd + m * Kp + k + 32 * v);
          for (int r = 0; r < NRW; ++r) acc[m][r] = _mm512_fmadd_ps(o, wo[r], acc[m][r]);
        }
        for (int m = 0; m < MR; ++m) {
          const __m512 e = _mm512_loadu_ps(c.xd + m * Kp + k + 32 * v + 16);
          for (int r = 0; r < NRW; ++r) acc[m][r] = _mm512_fmadd_ps(e, we[r], acc[m][r]);
        }
      }
    };
    sweep(step);
    }
  }
  if (!widened) {
    auto step = [&](int64_t k, int64_t nv) __attribute__((always_inline)) {
      T xv[keep_x ? MR : 1][NV];
      if constexpr (keep_x)
        for (int m = 0; m < MR; ++m)
          for (int v = 0; v < NV; ++v) xv[m][v] = V::load(c, m, k + v * V::W);
      auto x = [&](int m, int v) __attribute__((always_inline)) {
        if constexpr (keep_x)
          return xv[m][v];
        else
          return V::load(c, m, k + v * V::W);
      };
      // The bare codes of row r's chunk (zero beyond K), for the paths that scale elsewhere.
      auto codes = [&](int r, T* w) __attribute__((always_inline)) {
        if constexpr (requires { d.b16_codes(row[r], k, nv, w); }) {
          if (nv <= 0)
            for (int v = 0; v < NV; ++v) w[v] = V::zero();
          else
            d.b16_codes(row[r], k, nv, w);
        }
      };
      if constexpr (parts) {
        for (int r = 0; r < NRW; ++r) {
          T w[NV];
          codes(r, w);
          const __m512 sv = d.chunk_scales(row[r], k);
          for (int m = 0; m < MR; ++m) {
            __m512 part = _mm512_setzero_ps();
            for (int v = 0; v < NV; ++v) part = V::madd(part, x(m, v), w[v]);
            acc[m][r] = _mm512_fmadd_ps(part, sv, acc[m][r]);
          }
        }
      } else if constexpr (XS == XScale::kShared) {
        // Beyond K (nv <= 0) the weights are zero and x is left unscaled, as without XS.
        const __m512i mag = _mm512_set1_epi16(0x7fff);
        if (nv > 0) {
          __m512i add[NV];
          d.scale_words(row[0], k, add);
          for (int m = 0; m < MR; ++m)
            for (int v = 0; v < NV; ++v)
              xv[m][v] = _mm512_mask_add_epi16(xv[m][v], _mm512_test_epi16_mask(xv[m][v], mag), xv[m][v], add[v]);
        }
        for (int r = 0; r < NRW; ++r) {
          T w[NV];
          codes(r, w);
          for (int v = 0; v < NV; ++v)
            for (int m = 0; m < MR; ++m) acc[m][r] = V::madd(acc[m][r], xv[m][v], w[v]);
        }
      } else {
        for (int r = 0; r < NRW; ++r) {
          T w[NV];
          if (nv <= 0) {
            for (int v = 0; v < NV; ++v) w[v] = V::zero();
          } else if constexpr (BF) {
            d.b16(row[r], k, nv, w);
            if constexpr (D::CHECK)
              for (int v = 0; v < NV; ++v) bad[r] |= b16_out_of_range(w[v]);
          } else {
            d.f32(row[r], k, nv, w);
          }
          for (int v = 0; v < NV; ++v)
            for (int m = 0; m < MR; ++m) acc[m][r] = V::madd(acc[m][r], x(m, v), w[v]);
        }
      }
    };
    sweep(step);
  }
  return finish_group<MR, NRW>(acc, bad, c.y, c.N, n);
}

// fp32-mode outputs of weight row n for every activation row (any M).
template <class D>
void f32_row_all_m(const LinearCall& c, const D& d, int64_t n) {
  for (int64_t m0 = 0; m0 < c.M; m0 += 4) {
    LinearCall s = c;
    s.xf += m0 * c.xs;
    s.y += m0 * c.N;
    switch (min64(4, c.M - m0)) {
      case 1: gemv_group<D, false, 1, 1>(s, d, n); break;
      case 2: gemv_group<D, false, 2, 1>(s, d, n); break;
      case 3: gemv_group<D, false, 3, 1>(s, d, n); break;
      default: gemv_group<D, false, 4, 1>(s, d, n); break;
    }
  }
}

template <class D, int MR, int NRW>
void gemv_range(const LinearCall& c, const D& d, int64_t n0, int64_t n1) {
  const bool bf = c.use_bf16 && D::B16;
  int64_t n = n0;
  while (n < n1) {
    const int64_t nr = n + NRW <= n1 ? NRW : 1;
    bool safe = bf;
    for (int64_t r = 0; r < nr && safe; ++r) safe = d.safe(d.row(n + r));
    if (nr == NRW && safe) {
      uint32_t bad = 0;
      // (x scaled per chunk: up to 2 rows; more widen the weights instead, see gemv_group.)
      constexpr XScale xs = MR <= 2 ? xscale_of<D>() : XScale::kNone;
      if constexpr (xs == XScale::kShared) {
        if (d.shares_scales(n, NRW))
          gemv_group<D, true, MR, NRW, xs>(c, d, n);
        else
          gemv_group<D, true, MR, NRW>(c, d, n);
      } else if constexpr (D::B16) {
        bad = gemv_group<D, true, MR, NRW>(c, d, n);
      }
      for (int r = 0; r < NRW; ++r)
        if (bad >> r & 1) gemv_group<D, false, MR, 1>(c, d, n + r);
    } else if (nr == NRW && !bf) {
      gemv_group<D, false, MR, NRW>(c, d, n);
    } else {
      for (int64_t r = 0; r < nr; ++r) {
        uint32_t bad = 1;
        if constexpr (D::B16)
          if (bf && d.safe(d.row(n + r))) bad = gemv_group<D, true, MR, 1>(c, d, n + r);
        if (bad) gemv_group<D, false, MR, 1>(c, d, n + r);
      }
    }
    n += nr;
  }
}

// Weight rows side by side at M = 1. FP8 takes 4: on a matrix read from DRAM (the
// benchmark's cold set well beyond L3) 4 streams read faster than 8 (FP8 2048x2048 63 ->
// 74-78 GB/s, measured with non-temporal prefetches). FP4 takes 8: its fp32 mode is a chain
// of eight dependent FMAs per chunk and row, and 8 chains run 14% faster than 4 (1 thread,
// hot; cold and bf16 mode unchanged).
template <class D>
constexpr int gemv_rows_m1() {
  if constexpr (requires { D::GEMV_ROWS_M1; })
    return D::GEMV_ROWS_M1;
  else
    return 4;
}

// FP4's partial sums at 2-4 rows take four weight rows at a time: twice the independent
// dot-product chains, which a core issuing two vdpbf16ps a cycle needs (AMD Zen 5, 1 thread,
// hot, FP4 1024 x 2048: M = 3 282 -> 311 GFLOP/s, M = 2 and 4 +1-3%; 5-8 rows were no faster).
template <class D>
constexpr int gemv_rows_few() {
  return partial_sums<D>() ? 4 : 2;
}

template <class D>
void gemv_rows(const LinearCall& c, const D& d, int64_t n0, int64_t n1) {
  switch (c.M) {
    case 1: return gemv_range<D, 1, gemv_rows_m1<D>()>(c, d, n0, n1);
    case 2: return gemv_range<D, 2, 4>(c, d, n0, n1);
    case 3: return gemv_range<D, 3, gemv_rows_few<D>()>(c, d, n0, n1);
    case 4: return gemv_range<D, 4, gemv_rows_few<D>()>(c, d, n0, n1);
    case 5: return gemv_range<D, 5, 2>(c, d, n0, n1);
    case 6: return gemv_range<D, 6, 2>(c, d, n0, n1);
    case 7: return gemv_range<D, 7, 2>(c, d, n0, n1);
    default: return gemv_range<D, 8, 2>(c, d, n0, n1);
  }
}

}  // namespace

void gemv(const LinearCall& c, int64_t n0, int64_t n1) {
  switch (c.W->format) {
    case WeightFormat::F32: return gemv_rows<F32Dec>(c, F32Dec(c), n0, n1);
    case WeightFormat::BF16: return bf16_gemv_avx512(c, n0, n1);  // BF16 (the output head): its own GEMV
    case WeightFormat::FP8_BLOCK: return gemv_rows<Fp8Dec>(c, Fp8Dec(c), n0, n1);
    case WeightFormat::FP4_BLOCK: return gemv_rows<Fp4Dec>(c, Fp4Dec(c), n0, n1);
  }
}

// (A row at a time: rare rows, each M x K products, so the call and the decoder's setup are
// nothing beside them.)
void gemv_f32_row(const LinearCall& c, int64_t n) {
  switch (c.W->format) {
    case WeightFormat::F32: return f32_row_all_m(c, F32Dec(c), n);
    case WeightFormat::BF16: return f32_row_all_m(c, Bf16Dec(c), n);
    case WeightFormat::FP8_BLOCK: return f32_row_all_m(c, Fp8Dec(c), n);
    case WeightFormat::FP4_BLOCK: return f32_row_all_m(c, Fp4Dec(c), n);
  }
}

}  // namespace deepinfer::kernels::cpu::avx512
