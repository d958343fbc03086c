// AVX2 + FMA + F16C kernels, compiled with those ISA flags and called only after the
// dispatcher's CPU check. See cpu_isa.h for the rules of this file (no templates or inline
// functions shared with other files, no static initialisers that run code). Everything here
// is in namespace avx2, where the shared algorithms are instantiated over this ISA's vectors
// of 8 (avx2_ops_impl.h's Vec8): cpu_kernels_isa_impl.h's (act-quant, SwiGLU, the mixes, the
// indexer's score combination), lane8_kernels_impl.h's (the prefill microkernel, the indexer's
// dots, the double dot product, FP4 fp32 order: the NEON kernels run them too) and
// isa_common_impl.h's (the prefill tile loop). This file holds the weight decoders and GEMV.
//
// Weight decoding:
//   e4m3 byte b -> fp32 bits sign | (b & 0x7f) << 20 = e4m3 * 2^-120 exactly (the e4m3
//                  subnormals land on fp32 subnormals), made by shifts and a mask on 4 codes
//                  per 32-bit lane: each 32 columns decode as four vectors, vector j holding
//                  columns j, j + 4, ..., j + 28 (FP8 fp32 order, fp8_f32_order). The NaN
//                  codes (0x7f / 0xff) would decode as numbers: a per-row flag catches them
//                  and that row's outputs become NaN (exactly what a NaN weight gives); the
//                  model's row_check memo lets rows known clean skip the test. One- and
//                  two-row GEMVs put the block scale on x where that is exact
//                  (Fp8Dec::x_scalable).
//   e2m1 nibble -> a code times its power-of-two block scale is a bf16 value: two byte
//                  lookups (vpshufb, tables per scale byte) give its two bytes; each 32 columns
//                  decode as four vectors of the even / odd columns of their halves (FP4 fp32
//                  order, fp4_f32_order).
// All products are fp32 FMA on the exact weights (code times block scale). Decode (M <= 8)
// fuses decode and dot products; prefill decodes fp32 tiles and runs a 3 x 4 microkernel;
// both run the same per-output operation sequence (see "arithmetic" below).
// GCC 12's AVX-512 headers build vectors from _mm512_undefined_*(), which -Wall reports as
// uninitialised once inlined here: a false positive of the compiler's own headers.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/cpu_isa.h"

namespace deepinfer::kernels::cpu {

namespace {
namespace avx2 {

// Hot per-chunk helpers must inline into the loops (they pass vectors around).
#define DI_INLINE inline __attribute__((always_inline))

// The shared algorithms and their vector operations (see the head of each; cpu_isa.h: every
// copy is this file's own, compiled with its flags).
#include "kernels/cpu/avx2_ops_impl.h"
#include "kernels/cpu/isa_common_impl.h"
using Ops = BufferedParts<Vec8>;
#include "kernels/cpu/cpu_kernels_isa_impl.h"
#include "kernels/cpu/lane8_kernels_impl.h"

// Block scales as broadcastable floats: e8m0(b) * 2^120 (e8m0(b) = 2^(b - 127); 255 is NaN)
// for the FP8 decoder, whose codes come out times 2^-120 (the driver hands this file FP8
// scale bytes <= 134 only, where that factor is a finite float).
struct ScaleTable {
  float v[256];
};
constexpr ScaleTable make_scale_table(int extra_exp) {
  ScaleTable t{};
  for (int b = 0; b < 256; ++b) {
    const int e = b + extra_exp;
    const uint32_t bits = b == 255 ? 0x7fc00000u : b == 0 && extra_exp == 0 ? 0x00400000u : e >= 255 ? 0x7f800000u : uint32_t(e) << 23;
    t.v[b] = __builtin_bit_cast(float, bits);
  }
  return t;
}
constexpr ScaleTable kE8m0x2p120 = make_scale_table(120);
DI_INLINE __m256 scale_vec(const ScaleTable& t, uint8_t b) { return _mm256_broadcast_ss(&t.v[b]); }

// Lanes i < n all ones.
inline __m256i lane_mask(int64_t n) {
  const int c = n < 0 ? 0 : n > 8 ? 8 : int(n);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(c), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// The GEMV streams groups of contiguous weight rows; rows are often short (1-2 KB for the
// experts), too short for the hardware's stream detection to get ahead within a row, so
// each group prefetches the group kAheadGroups further on, a few lines per chunk (prefetches
// past the matrix's end are harmless: they never fault).
constexpr int64_t kAheadGroups = 2;
DI_INLINE void prefetch_line(const void* p) { _mm_prefetch(static_cast<const char*>(p), _MM_HINT_T0); }

// ------------------------------------------------------------------------------ arithmetic
// Every output y[m, n] is one fixed sequence of operations that depends only on activation
// row m and weight row n (decode and prefill paths, any M, any thread split give the same
// bits): acc = 0; for each 8-column vector j over [0, Kp): acc = fma(x_j, w_j, acc);
// y = hsum(acc), with w the exact weights (code times block scale), zero beyond K.

// ------------------------------------------------------------------------------ decoders
// f32() yields the exact weights of columns [k, k + nv) of a weight row (0 < nv <= CH,
// zeros beyond) as NF vectors of 8, given scale(row, k): the block scale factor of that
// chunk. Where kSharedScale, the rows of one scale block share it (FP8's square blocks), so a
// group of rows inside one block computes it once. row_nan() rescans a row for NaN codes
// (FP8) after a group's shared NaN flag went up.

// The plain formats: no block scales, no NaN codes.
struct Unscaled {
  static constexpr bool kSharedScale = true;
  static constexpr bool kXScale = false, kNanMemo = false;
  DI_INLINE const void* scale_bytes(int64_t) const { return nullptr; }
  template <class R>
  DI_INLINE __m256 scale(const R&, int64_t) const {
    return _mm256_setzero_ps();
  }
  DI_INLINE bool same_scale(int64_t, int64_t) const { return true; }
  template <class R>
  DI_INLINE bool row_nan(const R&) const {
    return false;
  }
};

struct F32Dec : Unscaled {
  static constexpr int CH = 16, NF = 2;
  struct Row {
    const float* p;
  };
  const LinearCall* c;
  explicit F32Dec(const LinearCall& call) : c(&call) {}
  DI_INLINE Row row(int64_t n) const { return {reinterpret_cast<const float*>(c->W->data) + n * c->K}; }
  DI_INLINE const void* bytes(int64_t n) const { return c->W->data + n * c->K * 4; }
  DI_INLINE int64_t row_bytes() const { return c->K * 4; }
  DI_INLINE void f32(const Row& r, int64_t k, int64_t nv, __m256, __m256* w, __m256i&) const {
    if (nv == CH) {
      w[0] = _mm256_loadu_ps(r.p + k);
      w[1] = _mm256_loadu_ps(r.p + k + 8);
    } else {
      w[0] = _mm256_maskload_ps(r.p + k, lane_mask(nv));
      w[1] = _mm256_maskload_ps(r.p + k + 8, lane_mask(nv - 8));
    }
  }
};

struct Bf16Dec : Unscaled {
  static constexpr int CH = 16, NF = 2;
  struct Row {
    const uint8_t* p;
  };
  const LinearCall* c;
  explicit Bf16Dec(const LinearCall& call) : c(&call) {}
  DI_INLINE Row row(int64_t n) const { return {c->W->data + n * c->K * 2}; }
  DI_INLINE const void* bytes(int64_t n) const { return c->W->data + n * c->K * 2; }
  DI_INLINE int64_t row_bytes() const { return c->K * 2; }
  DI_INLINE void f32(const Row& r, int64_t k, int64_t nv, __m256, __m256* w, __m256i&) const {
    alignas(32) uint8_t buf[128];
    const uint8_t* p = nv == CH ? r.p + 2 * k : staged(r.p + 2 * k, 2 * nv, buf);
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16));
    w[0] = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(a), 16));
    w[1] = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(b), 16));
  }
};

// Smallest nonzero and largest finite |x| over activation rows [0, M) of a call, as float bits
// (their order is the values' order); lo is the bits of +inf when every value is 0, inf or NaN.
// The last chunk's columns past K need not be at its end (FP8 fp32 order): the whole stride is
// read, its padding being zeros.
void x_abs_range(const LinearCall& c, int64_t M, int32_t& lo_bits, int32_t& hi_bits) {
  const __m256i abs = _mm256_set1_epi32(0x7fffffff), inf = _mm256_set1_epi32(0x7f800000);
  __m256i lo = _mm256_set1_epi32(0x7f800000), hi = _mm256_setzero_si256();
  for (int64_t m = 0; m < M; ++m)
    for (int64_t k = 0; k < c.xs; k += 8) {
      const __m256i a = _mm256_and_si256(_mm256_castps_si256(_mm256_loadu_ps(c.xf + m * c.xs + k)), abs);
      const __m256i finite = _mm256_cmpgt_epi32(inf, a);
      const __m256i zero = _mm256_cmpeq_epi32(a, _mm256_setzero_si256());
      hi = _mm256_max_epi32(hi, _mm256_and_si256(a, finite));
      lo = _mm256_min_epi32(lo, _mm256_blendv_epi8(inf, a, _mm256_andnot_si256(zero, finite)));
    }
  alignas(32) int32_t l[8], h[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(l), lo);
  _mm256_store_si256(reinterpret_cast<__m256i*>(h), hi);
  lo_bits = l[0];
  hi_bits = h[0];
  for (int i = 1; i < 8; ++i) {
    lo_bits = l[i] < lo_bits ? l[i] : lo_bits;
    hi_bits = h[i] > hi_bits ? h[i] : hi_bits;
  }
}

struct Fp8Dec {
  static constexpr int CH = 32, NF = 4;
  static constexpr bool kSharedScale = true;
  // kXScale: a one-row GEMV may put the block scale on x instead (x_scalable()); kNanMemo:
  // W.row_check, where present, records the rows seen free of NaN codes (1) or not (2), and
  // the GEMV skips the per-chunk NaN test on rows known clean.
  static constexpr bool kXScale = true, kNanMemo = true;
  struct Row {
    const uint8_t* p;
    const uint8_t* s;
  };
  const LinearCall* c;
  int64_t B;
  int bshift;  // log2(B) when B is a power of two (always, in practice), else -1
  explicit Fp8Dec(const LinearCall& call)
      : c(&call), B(call.W->block), bshift((B & (B - 1)) == 0 ? __builtin_ctzll(uint64_t(B)) : -1) {}
  DI_INLINE Row row(int64_t n) const {
    const WeightMatrix& W = *c->W;
    return {W.data + n * c->K, W.scale + (n / W.block) * W.scale_cols};
  }
  DI_INLINE const void* bytes(int64_t n) const { return c->W->data + n * c->K; }
  DI_INLINE int64_t row_bytes() const { return c->K; }
  DI_INLINE const void* scale_bytes(int64_t) const { return nullptr; }  // one line per 128 rows
  // Rows n0 and n1 lie in one scale block.
  DI_INLINE bool same_scale(int64_t n0, int64_t n1) const { return n0 / B == n1 / B; }
  // B is a multiple of 32: a chunk lies in one scale block. codes() yields code * 2^-120,
  // so the factor is the scale times 2^120 (finite for the bytes <= 134 this path takes; the
  // driver sends larger scales to Scalar).
  DI_INLINE __m256 scale(const Row& r, int64_t k) const {
    return scale_vec(kE8m0x2p120, r.s[bshift >= 0 ? k >> bshift : k / B]);
  }
  DI_INLINE bool row_nan(const Row& r) const {
    for (int64_t k = 0; k < c->K; ++k)
      if ((r.p[k] & 0x7f) == 0x7f) return true;
    return false;
  }
  // The codes times 2^-120 (exact), without the block scale, in FP8 fp32 order: byte j of
  // each 32-bit lane shifted to the top (sign in bit 31), then an arithmetic shift by 4 puts
  // exponent and mantissa under fp32's (bits 26-20) and the mask clears the sign's copies and
  // the neighbours' bits. Nans: nan collects 0xff bytes where a code is a NaN (0x7f / 0xff);
  // without, the row is known free of them.
  template <bool Nans = true>
  DI_INLINE void codes(const Row& r, int64_t k, int64_t nv, __m256* w, __m256i& nan) const {
    alignas(32) uint8_t buf[128];
    const uint8_t* p = nv == CH ? r.p + k : staged(r.p + k, nv, buf);
    const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    if constexpr (Nans)
      nan = _mm256_or_si256(nan, _mm256_cmpeq_epi8(_mm256_or_si256(b, _mm256_set1_epi8(char(0x80))),
                                                   _mm256_set1_epi8(char(0xff))));
    const __m256i m = _mm256_set1_epi32(int(0x87f00000u));
    w[0] = _mm256_castsi256_ps(_mm256_and_si256(_mm256_srai_epi32(_mm256_slli_epi32(b, 24), 4), m));
    w[1] = _mm256_castsi256_ps(_mm256_and_si256(_mm256_srai_epi32(_mm256_slli_epi32(b, 16), 4), m));
    w[2] = _mm256_castsi256_ps(_mm256_and_si256(_mm256_srai_epi32(_mm256_slli_epi32(b, 8), 4), m));
    w[3] = _mm256_castsi256_ps(_mm256_and_si256(_mm256_srai_epi32(b, 4), m));
  }
  template <bool Nans = true>
  DI_INLINE void f32(const Row& r, int64_t k, int64_t nv, __m256 f, __m256* w, __m256i& nan) const {
    codes<Nans>(r, k, nv, w, nan);
    for (int v = 0; v < 4; ++v) w[v] = _mm256_mul_ps(w[v], f);
  }
  // Whether x * f, f = 2^(b - 7) the factor of any scale byte b of rows [n0, n1), is exact
  // (a normal float, or x is 0, inf or NaN) for every value of activation rows [0, M): then
  // (x * f) * code' is the exact product x * (code' * f) that the weights give (code' * f is
  // exact too: b >= 10 keeps every nonzero weight normal), so an FMA on either gives the same
  // bits, and a group of rows sharing a scale block multiplies x once per chunk instead of
  // every row's weights. x * f is normal iff 2^(-119-b) <= |x| < 2^(135-b).
  bool x_scalable(int64_t n0, int64_t n1, int64_t M) const {
    const WeightMatrix& W = *c->W;
    int bmin = 255, bmax = 0;
    for (int64_t rb = n0 / B; rb <= (n1 - 1) / B; ++rb)
      for (int64_t j = 0; j < (c->K + B - 1) / B; ++j) {
        const int b = W.scale[rb * W.scale_cols + j];
        bmin = b < bmin ? b : bmin;
        bmax = b > bmax ? b : bmax;
      }
    if (bmin < 10 || bmax > 134) return false;
    int32_t lmin, hmax;
    if (c->x_range && M == c->M) {
      lmin = int32_t(c->x_abs_lo);
      hmax = int32_t(c->x_abs_hi);
    } else {
      x_abs_range(*c, M, lmin, hmax);
    }
    // Thresholds as float bits: 2^e is (e + 127) << 23 for normal e; past the float range
    // the test holds for every finite x.
    const int e_lo = -119 - bmin, e_hi = 135 - bmax;  // e_lo in [-253, -129], e_hi in [1, 125]
    const bool lo_ok = lmin == 0x7f800000 || e_lo < -149 ||
                       (e_lo < -126 ? lmin >= (1 << (e_lo + 149)) : lmin >= ((e_lo + 127) << 23));
    const bool hi_ok = e_hi > 127 || hmax < ((e_hi + 127) << 23);
    return lo_ok && hi_ok;
  }
};

struct Fp4Dec {
  static constexpr int CH = 32, NF = 4;
  static constexpr bool kSharedScale = false;
  static constexpr bool kXScale = false, kNanMemo = false;
  struct Row {
    const uint8_t* p;
    const uint8_t* s;
  };
  const LinearCall* c;
  explicit Fp4Dec(const LinearCall& call) : c(&call) {}
  DI_INLINE Row row(int64_t n) const {
    const WeightMatrix& W = *c->W;
    return {W.data + n * (c->K / 2), W.scale + n * W.scale_cols};
  }
  DI_INLINE const void* bytes(int64_t n) const { return c->W->data + n * (c->K / 2); }
  DI_INLINE int64_t row_bytes() const { return c->K / 2; }
  DI_INLINE const void* scale_bytes(int64_t n) const { return c->W->scale + n * c->W->scale_cols; }
  DI_INLINE bool same_scale(int64_t n0, int64_t n1) const { return n0 == n1; }
  // K is a multiple of 32 here: a chunk is one whole scale block, whose byte tables f32()
  // looks up itself (no scale vector).
  DI_INLINE __m256 scale(const Row&, int64_t) const { return _mm256_setzero_ps(); }
  DI_INLINE bool row_nan(const Row&) const { return false; }
  // The chunk's 16 bytes become its 32 codes, one per byte, in the order that puts columns
  // 0, 2, ..., 14 in vector 0, 1, 3, ..., 15 in vector 1, then the same of 16-31 in vectors
  // 2 and 3 (FP4 fp32 order) once the bytes are interleaved below: one byte shuffle spreads
  // them (half 0 takes bytes 0-3 and 8-11 twice, half 1 bytes 4-7 and 12-15), a variable
  // shift picks the low nibble of each first copy and the high nibble of each second. The
  // scale's tables turn the codes into the low and high bytes of each weight's bf16;
  // interleaving those bytes, then putting each 16-bit value above 16 zero bits, gives the
  // fp32 weights.
  DI_INLINE void f32(const Row& r, int64_t k, int64_t, __m256, __m256* w, __m256i&) const {
    const __m256i bytes = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(r.p + k / 2)));
    const __m256i spread = _mm256_shuffle_epi8(
        bytes, _mm256_setr_epi8(0, 1, 2, 3, 0, 1, 2, 3, 8, 9, 10, 11, 8, 9, 10, 11, 4, 5, 6, 7, 4, 5, 6, 7, 12, 13, 14, 15,
                                12, 13, 14, 15));
    const __m256i codes =
        _mm256_and_si256(_mm256_srlv_epi32(spread, _mm256_setr_epi32(0, 4, 0, 4, 0, 4, 0, 4)), _mm256_set1_epi8(0x0f));
    const uint8_t* tab = kFp4Tables.v[r.s[k / 32]];
    const __m256i lo_tab = _mm256_broadcastsi128_si256(_mm_load_si128(reinterpret_cast<const __m128i*>(tab)));
    const __m256i hi_tab = _mm256_broadcastsi128_si256(_mm_load_si128(reinterpret_cast<const __m128i*>(tab + 16)));
    const __m256i lo = _mm256_shuffle_epi8(lo_tab, codes), hi = _mm256_shuffle_epi8(hi_tab, codes);
    const __m256i h0 = _mm256_unpacklo_epi8(lo, hi), h1 = _mm256_unpackhi_epi8(lo, hi);  // bf16 of columns 0-15, 16-31
    const __m256i z = _mm256_setzero_si256();
    w[0] = _mm256_castsi256_ps(_mm256_unpacklo_epi16(z, h0));
    w[1] = _mm256_castsi256_ps(_mm256_unpackhi_epi16(z, h0));
    w[2] = _mm256_castsi256_ps(_mm256_unpacklo_epi16(z, h1));
    w[3] = _mm256_castsi256_ps(_mm256_unpackhi_epi16(z, h1));
  }
};

DI_INLINE __m256 load_x(const LinearCall& c, int64_t m, int64_t k) { return _mm256_loadu_ps(c.xf + m * c.xs + k); }

// NaN-code accumulator of a row (FP8: bytes 0xff after or-ing the sign bit).
DI_INLINE bool any_nan(__m256i nan) { return !_mm256_testz_si256(nan, nan); }

// ------------------------------------------------------------------------------ decode (GEMV)

// A row's chunk at k as bare codes (D::kXScale: the block scale is on x), zeros when nv <= 0.
template <class D, bool Nans>
DI_INLINE void chunk_codes(const D& d, const typename D::Row& row, int64_t k, int64_t nv, __m256* w, __m256i& nan) {
  if (nv > 0) {
    d.template codes<Nans>(row, k, nv, w, nan);
  } else {
    for (int v = 0; v < D::NF; ++v) w[v] = _mm256_setzero_ps();
  }
}

// The exact weights of a row's chunk at k (nv columns; zeros when nv <= 0, past K) into w,
// given the group's shared scale s where D::kSharedScale. Nans: collect NaN codes in nan.
template <class D, bool Nans>
DI_INLINE void chunk_weights(const D& d, const typename D::Row& row, int64_t k, int64_t nv, __m256 s, __m256* w,
                             __m256i& nan) {
  if (nv <= 0) {
    for (int v = 0; v < D::NF; ++v) w[v] = _mm256_setzero_ps();
    return;
  }
  if (!D::kSharedScale) s = d.scale(row, k);
  if constexpr (Nans)
    d.f32(row, k, nv, s, w, nan);
  else
    d.template f32<false>(row, k, nv, s, w, nan);
}

// XS (one activation row, D::kXScale): the group's shared block scale goes onto x, once per
// chunk, and the weights stay bare codes (see Fp8Dec::x_scalable: the same exact products).
// Pre (D::kXScale): x arrives with the block scales already on it (gemv_prescaled), the weights
// stay bare codes. Nans = false: the rows are known free of NaN codes (D::kNanMemo). Returns
// the rows that hold a NaN code (bit r for row n + r; their outputs are NaN).
template <class D, int MR, int NRW, bool XS = false, bool Nans = true, bool Pre = false>
uint32_t gemv_group(const LinearCall& c, const D& d, int64_t n) {
  static_assert(!XS || (MR == 1 && D::kXScale && D::kSharedScale));
  static_assert(!Pre || (!XS && D::kXScale && D::kSharedScale));
  constexpr int NV = D::NF;
  typename D::Row row[NRW];
  for (int r = 0; r < NRW; ++r) row[r] = d.row(n + r);
  __m256 acc[MR][NRW];
  for (int m = 0; m < MR; ++m)
    for (int r = 0; r < NRW; ++r) acc[m][r] = _mm256_setzero_ps();
  const int64_t K = c.K, Kp = c.xs;
  __m256i nan = _mm256_setzero_si256();  // the group's: rows are rescanned when it is set
  auto step = [&](int64_t k, int64_t nv) __attribute__((always_inline)) {
    __m256 s = D::kSharedScale && nv > 0 ? d.scale(row[0], k) : _mm256_setzero_ps();
    if constexpr (XS) {
      __m256 xv[NV];
      for (int v = 0; v < NV; ++v) xv[v] = nv > 0 ? _mm256_mul_ps(load_x(c, 0, k + 8 * v), s) : load_x(c, 0, k + 8 * v);
      for (int r = 0; r < NRW; ++r) {
        __m256 w[NV];
        chunk_codes<D, Nans>(d, row[r], k, nv, w, nan);
        for (int v = 0; v < NV; ++v) acc[0][r] = _mm256_fmadd_ps(xv[v], w[v], acc[0][r]);
      }
      return;
    }
    for (int r = 0; r < NRW; ++r) {
      __m256 w[NV];
      if constexpr (Pre)
        chunk_codes<D, Nans>(d, row[r], k, nv, w, nan);
      else
        chunk_weights<D, Nans>(d, row[r], k, nv, s, w, nan);
      for (int v = 0; v < NV; ++v)
        for (int m = 0; m < MR; ++m) acc[m][r] = _mm256_fmadd_ps(load_x(c, m, k + 8 * v), w[v], acc[m][r]);
    }
  };
  const char* ahead = static_cast<const char*>(d.bytes(n + kAheadGroups * NRW));
  const int64_t ahead_bytes = NRW * d.row_bytes(), chunks = (K + D::CH - 1) / D::CH;
  const int64_t lines = (ahead_bytes / 64 + chunks - 1) / chunks;  // per chunk
  if (const void* sc = d.scale_bytes(n + kAheadGroups * NRW))
    for (int64_t b = 0; b < NRW * (K / 32); b += 64) prefetch_line(static_cast<const char*>(sc) + b);
  int64_t k = 0;
  for (; k + D::CH <= K; k += D::CH) {
    for (int64_t i = 0; i < lines; ++i) prefetch_line(ahead + ((k / D::CH) * lines + i) * 64);
    step(k, D::CH);
  }
  for (; k < Kp; k += D::CH) step(k, K - k < D::CH ? K - k : D::CH);
  const bool any = Nans && any_nan(nan);
  uint32_t nan_rows = 0;
  for (int r = 0; r < NRW; ++r) {
    const bool has_nan = any && d.row_nan(row[r]);
    nan_rows |= uint32_t(has_nan) << r;
    for (int m = 0; m < MR; ++m) c.y[m * c.N + n + r] = has_nan ? f32_of(0x7fc00000u) : Ops::hsum(acc[m][r]);
  }
  return nan_rows;
}

// Rows [n0, n1) in groups of NRW, handed to group.template operator()<R, Nans>(n) (R rows
// from n; returns the rows holding a NaN code as a bitmask): a group whose rows do not share
// their scales (an FP8 block edge inside it) goes row by row. With a NaN memo (D::kNanMemo
// and W.row_check), groups of rows all seen clean skip the NaN test (Nans = false); the
// others record what they find.
template <class D, int NRW, class G>
DI_INLINE void for_row_groups(const LinearCall& c, const D& d, int64_t n0, int64_t n1, G&& group) {
  uint8_t* memo = D::kNanMemo ? c.W->row_check : nullptr;
  auto run = [&]<int R>(int64_t n) {
    if constexpr (D::kNanMemo) {
      if (memo) {
        bool clean = true;
        for (int r = 0; r < R; ++r) clean = clean && __atomic_load_n(memo + n + r, __ATOMIC_RELAXED) == 1;
        if (clean) return (void)group.template operator()<R, false>(n);
        const uint32_t nan_rows = group.template operator()<R, true>(n);
        for (int r = 0; r < R; ++r) __atomic_store_n(memo + n + r, uint8_t(nan_rows >> r & 1 ? 2 : 1), __ATOMIC_RELAXED);
        return;
      }
    }
    group.template operator()<R, true>(n);
  };
  int64_t n = n0;
  for (; n + NRW <= n1; n += NRW) {
    if (!D::kSharedScale || d.same_scale(n, n + NRW - 1)) {
      run.template operator()<NRW>(n);
    } else {
      for (int r = 0; r < NRW; ++r) run.template operator()<1>(n + r);
    }
  }
  for (; n < n1; ++n) run.template operator()<1>(n);
}

// MR activation rows with the block scales put on x (Fp8Dec::x_scalable holds for all of
// them): per block of B weight rows, x times each column block's scale factor goes into the
// thread's scratch once, and the rows' weights stay bare codes, so no chunk multiplies weights
// by their scale (the same exact products, so the same bits as the scaled path).
template <class D, int MR, int NRW>
void gemv_prescaled(const LinearCall& c, const D& d, int64_t n0, int64_t n1, void* scratch) {
  LinearCall cp = c;
  float* xp = static_cast<float*>(scratch);
  cp.xf = xp;
  auto group = [&]<int R, bool Nans>(int64_t n) { return gemv_group<D, MR, R, false, Nans, true>(cp, d, n); };
  const int64_t B = c.W->block;
  for (int64_t a = n0; a < n1;) {
    const int64_t b = min64(n1, (a / B + 1) * B);  // the rows of a's scale block
    const typename D::Row r = d.row(a);
    // x is zero past K, and so is x' (f is finite); in FP8 fp32 order the last chunk's columns
    // past K are not at its end, so every position takes its chunk's scale.
    for (int64_t k = 0; k < c.xs; k += 8) {
      const __m256 f = d.scale(r, k);
      for (int m = 0; m < MR; ++m) _mm256_storeu_ps(xp + m * c.xs + k, _mm256_mul_ps(load_x(c, m, k), f));
    }
    for_row_groups<D, NRW>(c, d, a, b, group);
    a = b;
  }
}

// Groups of NRW weight rows (for_row_groups). MB > 0: more activation rows than fit the
// registers (or whose x rows overflow L1 when re-read for every weight row): each group runs
// for activation rows [0, MA), then for [MA, MA + MB) while its weights are still in cache.
// Every output's operations are the same either way.
template <class D, int MA, int NRW, int MB = 0>
void gemv_range(const LinearCall& c, const D& d, int64_t n0, int64_t n1, void* scratch) {
  if constexpr (D::kXScale && MA == 2 && MB == 0)
    if (scratch && d.x_scalable(n0, n1, MA)) return gemv_prescaled<D, MA, NRW>(c, d, n0, n1, scratch);
  LinearCall hi = c;
  hi.xf = c.xf + MA * c.xs;
  hi.y = c.y + MA * c.N;
  bool xs = false;
  if constexpr (D::kXScale && MA == 1 && MB == 0) xs = d.x_scalable(n0, n1, 1);
  auto group = [&]<int R, bool Nans>(int64_t n) {  // the rows holding a NaN code, as gemv_group
    uint32_t nan_rows;
    if constexpr (D::kXScale && MA == 1 && MB == 0)
      nan_rows = xs ? gemv_group<D, MA, R, true, Nans>(c, d, n) : gemv_group<D, MA, R, false, Nans>(c, d, n);
    else
      nan_rows = gemv_group<D, MA, R, false, Nans>(c, d, n);
    if constexpr (MB > 0) gemv_group<D, MB, R, false, Nans>(hi, d, n);  // same rows, same answer
    return nan_rows;
  };
  for_row_groups<D, NRW>(c, d, n0, n1, group);
}

template <class D>
void gemv_rows(const LinearCall& c, const D& d, int64_t n0, int64_t n1, void* scratch) {
  // Each accumulator is one FMA chain: at least ~6 chains in flight, and accumulators plus
  // one row's decoded weights within the 16 ymm registers.
  switch (c.M) {
    case 1: return gemv_range<D, 1, 4>(c, d, n0, n1, scratch);
    case 2: return gemv_range<D, 2, 4>(c, d, n0, n1, scratch);
    case 3: return gemv_range<D, 3, 2>(c, d, n0, n1, scratch);
    case 4: return gemv_range<D, 4, 2>(c, d, n0, n1, scratch);
    // Five or more x rows overflow L1 at K = 2048 (each weight row re-reads all of them):
    // groups of 2-3 weight rows share one pass over x; 7-8 rows run as two blocks of x rows
    // per group of weight rows (the registers hold no more accumulators).
    case 5: return gemv_range<D, 5, 2>(c, d, n0, n1, scratch);
    case 6: return gemv_range<D, 6, 3>(c, d, n0, n1, scratch);
    case 7: return gemv_range<D, 4, 2, 3>(c, d, n0, n1, scratch);
    default: return gemv_range<D, 4, 2, 4>(c, d, n0, n1, scratch);
  }
}

// ------------------------------------------------------------------------------ decode, 3-8 rows
// From three activation rows on, gemv_range holds one x pointer per row and, left to
// itself, the compiler keeps a chunk's x vectors in registers across the group's weight
// rows, spilling accumulators whose FMA chains then wait on the stack. Here each thread first
// copies x into its scratch interleaved (8-column vector j of rows 0..M-1 side by side), so
// one pointer with constant offsets reaches every row and each FMA reads its x from L1/L2.
// Each output is the same FMA chain as in gemv_group (same bits).
inline size_t interleaved_scratch_bytes(int64_t M, int64_t Kp) { return size_t(M * Kp) * sizeof(float); }

// Rows [n, n + NRW) for activation rows [m0, m0 + MR) of the call's MT, x interleaved in xi.
// Returns the rows holding a NaN code (as gemv_group). Whole chunks run in a loop of their
// own (no staging test per chunk); prefetch as gemv_group.
template <class D, int MT, int MR, int NRW, bool Nans>
uint32_t interleaved_group(const LinearCall& c, const D& d, int64_t n, int m0, const float* xi, bool prefetch) {
  constexpr int NV = D::NF;
  typename D::Row row[NRW];
  for (int r = 0; r < NRW; ++r) row[r] = d.row(n + r);
  __m256 acc[MR][NRW];
  for (int m = 0; m < MR; ++m)
    for (int r = 0; r < NRW; ++r) acc[m][r] = _mm256_setzero_ps();
  __m256i nan = _mm256_setzero_si256();
  const int64_t K = c.K, Kp = c.xs;
  // px: x of the chunk at k, rows [m0, m0 + MR).
  auto step = [&](int64_t k, int64_t nv, const float* px) __attribute__((always_inline)) {
    __m256 s = D::kSharedScale && nv > 0 ? d.scale(row[0], k) : _mm256_setzero_ps();
    for (int r = 0; r < NRW; ++r) {
      __m256 w[NV];
      chunk_weights<D, Nans>(d, row[r], k, nv, s, w, nan);
      for (int v = 0; v < NV; ++v)
        for (int m = 0; m < MR; ++m) acc[m][r] = _mm256_fmadd_ps(_mm256_load_ps(px + (v * MT + m) * 8), w[v], acc[m][r]);
    }
  };
  const int64_t chunks = (K + D::CH - 1) / D::CH, kf = K / D::CH * D::CH;
  const char* ahead = static_cast<const char*>(d.bytes(n + kAheadGroups * NRW));
  const int64_t lines = prefetch ? (NRW * d.row_bytes() / 64 + chunks - 1) / chunks : 0;
  if (prefetch)
    if (const void* sc = d.scale_bytes(n + kAheadGroups * NRW))
      for (int64_t b = 0; b < NRW * (K / 32); b += 64) prefetch_line(static_cast<const char*>(sc) + b);
  const float* px = xi + m0 * 8;
  int64_t k = 0;
  for (; k < kf; k += D::CH, px += D::CH * MT) {
    for (int64_t i = 0; i < lines; ++i, ahead += 64) prefetch_line(ahead);
    step(k, D::CH, px);
  }
  for (; k < Kp; k += D::CH, px += D::CH * MT) step(k, K - k < D::CH ? K - k : D::CH, px);  // tail: <= 0 past K
  const bool any = Nans && any_nan(nan);
  uint32_t nan_rows = 0;
  for (int r = 0; r < NRW; ++r) {
    const bool has_nan = any && d.row_nan(row[r]);
    nan_rows |= uint32_t(has_nan) << r;
    for (int m = 0; m < MR; ++m) c.y[(m0 + m) * c.N + n + r] = has_nan ? f32_of(0x7fc00000u) : Ops::hsum(acc[m][r]);
  }
  return nan_rows;
}

// MT activation rows as one or two passes over each group's weights (rows [0, MR), then
// [MR, MT) while the weights are in cache); groups as gemv_range (for_row_groups).
template <class D, int MT, int MR, int NRW>
void gemv_interleaved(const LinearCall& c, const D& d, int64_t n0, int64_t n1, void* scratch) {
  static_assert(MR <= MT && MT <= 2 * MR);
  const int64_t Kp = c.xs;
  float* xi = static_cast<float*>(scratch);
  for (int64_t j = 0; j < Kp / 8; ++j)
    for (int m = 0; m < MT; ++m) _mm256_store_ps(xi + (j * MT + m) * 8, load_x(c, m, 8 * j));
  auto group = [&]<int R, bool Nans>(int64_t n) {
    const uint32_t nan_rows = interleaved_group<D, MT, MR, R, Nans>(c, d, n, 0, xi, true);
    if constexpr (MT > MR) interleaved_group<D, MT, MT - MR, R, Nans>(c, d, n, MR, xi, false);
    return nan_rows;
  };
  for_row_groups<D, NRW>(c, d, n0, n1, group);
}

// The interleaved path where it measured at least as fast as gemv_range (2 threads, weights
// streamed from memory, K = 2048; bench_kernels' BF16 head: M = 6 +42%, 8 +7%, 3-4 on par;
// FP8 2048 x 2048: M = 4-8 +4-22%): BF16 / F32 at 3, 4, 6 and 8 rows, FP8 at 4 to 8. FP4's
// costly decode is better shared by gemv_range's wider row groups; at the other row counts
// the splits tried were slower. Returns false where gemv_range is the one.
template <class D>
bool gemv_interleaved_rows(const LinearCall& c, const D& d, int64_t n0, int64_t n1, void* scratch) {
  if constexpr (D::NF == 2) {  // F32 / BF16: two weight vectors per chunk, next to no decoding
    switch (c.M) {
      case 3: return gemv_interleaved<D, 3, 3, 4>(c, d, n0, n1, scratch), true;
      case 4: return gemv_interleaved<D, 4, 4, 3>(c, d, n0, n1, scratch), true;
      case 6: return gemv_interleaved<D, 6, 6, 2>(c, d, n0, n1, scratch), true;
      case 8: return gemv_interleaved<D, 8, 4, 3>(c, d, n0, n1, scratch), true;
    }
  } else if constexpr (D::kXScale) {  // FP8: four decoded vectors and their temporaries
    switch (c.M) {
      case 4: return gemv_interleaved<D, 4, 4, 2>(c, d, n0, n1, scratch), true;
      case 5: return gemv_interleaved<D, 5, 5, 1>(c, d, n0, n1, scratch), true;
      case 6: return gemv_interleaved<D, 6, 6, 1>(c, d, n0, n1, scratch), true;
      case 7: return gemv_interleaved<D, 7, 7, 1>(c, d, n0, n1, scratch), true;
      case 8: return gemv_interleaved<D, 8, 8, 1>(c, d, n0, n1, scratch), true;
    }
  }
  return false;
}

// ------------------------------------------------------------------------------ prefill (GEMM)

constexpr int kMR = 3, kNR = 4;

// Exact fp32 weights of row n, zero to c.xs; returns whether the row holds a NaN code (its
// outputs are then NaN, as in the GEMV).
template <class D>
bool decode_row_f32(const LinearCall& c, const D& d, int64_t n, float* dst) {
  const typename D::Row r = d.row(n);
  const int64_t K = c.K;
  __m256i nan = _mm256_setzero_si256();
  for (int64_t k = 0; k < K; k += D::CH) {
    const int64_t nv = min64(D::CH, K - k);
    __m256 w[D::NF];
    d.f32(r, k, nv, d.scale(r, k), w, nan);
    // A partial chunk decodes its missing columns as zeros and is stored whole (Kp, a multiple
    // of 32, has room): in the FP4 / FP8 fp32 orders its columns past K are not at its end.
    for (int v = 0; v < D::NF; ++v) _mm256_storeu_ps(dst + k + 8 * v, w[v]);
  }
  for (int64_t k = round_up(K, D::CH); k < c.xs; ++k) dst[k] = 0.0f;
  return any_nan(nan);
}

// Tiles of ~256 KiB of decoded rows (L2), micro_f32's 3 x 4 blocks over them.
int64_t tile_rows(int64_t Kp) { return tile_rows_for(Kp, 256 * 1024, 4, kNR, 48); }

template <class D>
void gemm_rows(const LinearCall& c, const D& d, int64_t n0, int64_t n1, void* scratch) {
  f32_tiles<kMR, kNR>(c, n0, n1, tile_rows(c.xs), static_cast<float*>(scratch),
                      [&](int64_t n, float* dst) { return decode_row_f32(c, d, n, dst); }, MicroF32<Ops, kNR>{});
}

// ------------------------------------------------------------------------------ entry points

constexpr int64_t kGemvMaxM = 8;

template <class D>
void rows_for(const LinearCall& c, int64_t n0, int64_t n1, void* scratch) {
  const D d(c);
  if (c.M <= kGemvMaxM) {
    if (!gemv_interleaved_rows(c, d, n0, n1, scratch)) gemv_rows<D>(c, d, n0, n1, scratch);
    return;
  }
  gemm_rows<D>(c, d, n0, n1, scratch);
}

void rows(const LinearCall& c, int64_t n0, int64_t n1, void* scratch) {
  switch (c.W->format) {
    case WeightFormat::F32: return rows_for<F32Dec>(c, n0, n1, scratch);
    case WeightFormat::BF16: return rows_for<Bf16Dec>(c, n0, n1, scratch);
    case WeightFormat::FP8_BLOCK: return rows_for<Fp8Dec>(c, n0, n1, scratch);
    case WeightFormat::FP4_BLOCK: return rows_for<Fp4Dec>(c, n0, n1, scratch);
  }
}

// The FP8 paths that put block scales on x (one or two rows: Fp8Dec::x_scalable) check x's
// range against each row range's scales; the range itself is found once per call here.
void call_setup(LinearCall& c) {
  if (c.W->format != WeightFormat::FP8_BLOCK || c.M > 2) return;
  int32_t lo, hi;
  x_abs_range(c, c.M, lo, hi);
  c.x_abs_lo = uint32_t(lo);
  c.x_abs_hi = uint32_t(hi);
  c.x_range = true;
}

size_t scratch_bytes(const LinearCall& c) {
  if (c.M <= 1) return 0;
  if (c.M == 2) return size_t(2 * c.xs) * sizeof(float);  // FP8's prescaled x (gemv_prescaled)
  return c.M <= kGemvMaxM ? interleaved_scratch_bytes(c.M, c.xs) : size_t(tile_rows(c.xs) * c.xs) * sizeof(float);
}

constexpr IsaKernels kKernels = {
    .name = "avx2",
    .bf16 = false,
    .k_align = 32,
    .m_align = kMR,
    .gemv_max_m = kGemvMaxM,
    .act_align = 8,
    .fp8_max_scale = 134,
    .gemv_grain = 8,
    .plain_m1_rowwise = false,
    .gemm_grain = kNR,
    .prep_float = prep_float,
    .prep_act_quant = prep_act_quant<Ops>,
    .act_quant = act_quant<Ops>,
    .scratch_bytes = scratch_bytes,
    .rows = rows,
    .index_dots = index_dots<Ops>,
    .fp4_f32_order = fp4_f32_order<Ops>,
    .fp8_f32_order = fp8_f32_order,
    .index_query_exact = index_query_exact<Ops>,
    .index_dots_exact = index_dots_exact<Ops>,
    .index_combine = index_combine<Ops>,
    .hc_expand = hc_expand<Ops>,
    .hc_collapse = hc_collapse<Ops>,
    .dot_f64 = dot_f64<Ops>,
    .swiglu = swiglu<Ops>,
    .call_setup = call_setup,
    .fma_chains = fma_chains<Ops>,
};

}  // namespace avx2
}  // namespace

const IsaKernels& avx2_kernels() { return avx2::kKernels; }

}  // namespace deepinfer::kernels::cpu
