// AVX2 + FMA + F16C kernels, compiled with those ISA flags and called only after the
// dispatcher's CPU check. See cpu_isa.h for the rules of this file (no templates or inline
// functions shared with other files, no static initialisers that run code). The algorithms
// both ISAs share are cpu_kernels_isa_impl.h's, instantiated over vectors of 8 in namespace
// avx2 below ("shared algorithms"); this file holds its vector operations and the tuned loops.
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

// Hot per-chunk helpers must inline into the loops (they pass vectors around).
#define DI_INLINE inline __attribute__((always_inline))

inline float f32_of(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}
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

// FP4 weights under a scale byte b, as byte tables for _mm256_shuffle_epi8. A code times
// e8m0(b) is exact and has at most two significant bits (a power of two times 0.5 ... 6), so
// its fp32 bits end in 16 zero bits: it is a bf16 value, and its top two bytes, looked up by
// the 4-bit code, rebuild it. Row b holds the low bytes of the 16 codes' bf16, then their high
// bytes. As _mm256_mul_ps would give: 2^-128 stays a subnormal, 6 * 2^127 is inf, a NaN scale
// (255) gives the quiet NaN with the code's sign.
struct Fp4Tables {
  alignas(32) uint8_t v[256][32];
};
constexpr uint32_t fp4_scaled_bits(int code, int b) {
  const uint32_t sign = code & 8 ? 0x80000000u : 0u;
  const int i = code & 7;
  if (b == 255) return sign | 0x7fc00000u;
  if (i == 0) return sign;
  // Magnitude i is 0.5 for i = 1, else (1 or 1.5) * 2^(i / 2 - 1): mantissa 1 + half / 2 times
  // 2^e, e the unbiased exponent of the product.
  const int e = (i == 1 ? -1 : i / 2 - 1) + (b - 127);
  const uint32_t half = (i >= 2 && (i & 1)) ? 1u : 0u;
  if (e > 127) return sign | 0x7f800000u;
  if (e >= -126) return sign | uint32_t(e + 127) << 23 | half << 22;
  return sign | (2u + half) << (e - 1 + 149);  // subnormal: (2 + half) * 2^(e - 1), in units of 2^-149
}
constexpr Fp4Tables make_fp4_tables() {
  Fp4Tables t{};
  for (int b = 0; b < 256; ++b)
    for (int code = 0; code < 16; ++code) {
      const uint32_t bits = fp4_scaled_bits(code, b);
      t.v[b][code] = uint8_t(bits >> 16);
      t.v[b][16 + code] = uint8_t(bits >> 24);
    }
  return t;
}
constexpr Fp4Tables kFp4Tables = make_fp4_tables();
static_assert(fp4_scaled_bits(1, 0) == 0x00200000u && fp4_scaled_bits(15, 127) == 0xc0c00000u &&
                  fp4_scaled_bits(7, 254) == 0x7f800000u && fp4_scaled_bits(3, 127) == 0x3fc00000u,
              "FP4 table: 0.5 * 2^-127, -6, 6 * 2^127 (inf), 1.5");

inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
inline int64_t round_up(int64_t a, int64_t b) { return (a + b - 1) / b * b; }

// Lanes i < n all ones.
inline __m256i lane_mask(int64_t n) {
  const int c = n < 0 ? 0 : n > 8 ? 8 : int(n);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(c), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

inline float hmax(__m256 v) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Bytes [p, p + nbytes) into a zeroed 128-byte buffer (partial chunks).
inline const uint8_t* staged(const uint8_t* p, int64_t nbytes, uint8_t* buf) {
  std::memset(buf, 0, 128);
  std::memcpy(buf, p, size_t(nbytes));
  return buf;
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
    for (int m = 0; m < MR; ++m) c.y[m * c.N + n + r] = has_nan ? f32_of(0x7fc00000u) : hsum(acc[m][r]);
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
    for (int m = 0; m < MR; ++m) c.y[(m0 + m) * c.N + n + r] = has_nan ? f32_of(0x7fc00000u) : hsum(acc[m][r]);
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

// Exact fp32 weights of row n (a row with a NaN code: all NaN, as its outputs), zero to Kp.
template <class D>
void decode_row_f32(const LinearCall& c, const D& d, int64_t n, float* dst, int64_t Kp) {
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
  const int64_t Kc = (K + D::CH - 1) / D::CH * D::CH;
  if (any_nan(nan))
    for (int64_t k = 0; k < Kc; ++k) dst[k] = f32_of(0x7fc00000u);
  for (int64_t k = Kc; k < Kp; ++k) dst[k] = 0.0f;
}

template <int MR, int NR>
void micro_f32(const float* x, int64_t xs, const float* w, int64_t ws, int64_t Kp, float* out) {
  __m256 acc[MR][NR];
  for (int m = 0; m < MR; ++m)
    for (int r = 0; r < NR; ++r) acc[m][r] = _mm256_setzero_ps();
  for (int64_t k = 0; k < Kp; k += 8) {
    __m256 xv[MR];
    for (int m = 0; m < MR; ++m) xv[m] = _mm256_loadu_ps(x + m * xs + k);
    for (int r = 0; r < NR; ++r) {
      const __m256 wv = _mm256_loadu_ps(w + r * ws + k);
      for (int m = 0; m < MR; ++m) acc[m][r] = _mm256_fmadd_ps(xv[m], wv, acc[m][r]);
    }
  }
  for (int m = 0; m < MR; ++m)
    for (int r = 0; r < NR; ++r) out[m * NR + r] = hsum(acc[m][r]);
}

int64_t tile_rows(int64_t Kp) {
  int64_t nt = (int64_t(256) * 1024 / (Kp * 4)) / kNR * kNR;
  return nt < kNR ? kNR : nt > 48 ? 48 : nt;
}

template <class D>
void gemm_rows(const LinearCall& c, const D& d, int64_t n0, int64_t n1, void* scratch) {
  const int64_t Kp = c.xs, NT = tile_rows(Kp), N = c.N, M = c.M;
  float* tile = static_cast<float*>(scratch);
  alignas(32) float out[kMR * kNR];
  for (int64_t nt0 = n0; nt0 < n1; nt0 += NT) {
    const int64_t rows = min64(NT, n1 - nt0), rows_p = round_up(rows, kNR);
    for (int64_t r = 0; r < rows; ++r) decode_row_f32(c, d, nt0 + r, tile + r * Kp, Kp);
    std::memset(tile + rows * Kp, 0, size_t(rows_p - rows) * Kp * sizeof(float));
    for (int64_t m0 = 0; m0 < M; m0 += kMR) {
      const int64_t mv = min64(kMR, M - m0);
      for (int64_t r0 = 0; r0 < rows_p; r0 += kNR) {
        static_assert(kMR == 3, "row-count dispatch below");
        if (mv == 3)
          micro_f32<3, kNR>(c.xf + m0 * c.xs, c.xs, tile + r0 * Kp, Kp, Kp, out);
        else if (mv == 2)
          micro_f32<2, kNR>(c.xf + m0 * c.xs, c.xs, tile + r0 * Kp, Kp, Kp, out);
        else
          micro_f32<1, kNR>(c.xf + m0 * c.xs, c.xs, tile + r0 * Kp, Kp, Kp, out);
        const int64_t rv = min64(kNR, rows - r0);
        for (int64_t m = 0; m < mv; ++m)
          for (int64_t r = 0; r < rv; ++r) c.y[(m0 + m) * N + nt0 + r0 + r] = out[m * kNR + r];
      }
    }
  }
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

// ------------------------------------------------------------------------------ activations

void prep_float(const float* x, int64_t K, int64_t m0, int64_t m1, int64_t xs, float* xf, uint16_t*,
                uint8_t* bf16_ok) {
  for (int64_t m = m0; m < m1; ++m) {
    const float* src = x + m * K;
    float* df = xf + m * xs;
    int64_t k = 0;
    for (; k + 8 <= K; k += 8) _mm256_storeu_ps(df + k, _mm256_loadu_ps(src + k));
    for (; k < xs; k += 8) _mm256_storeu_ps(df + k, _mm256_maskload_ps(src + k, lane_mask(K - k)));
    bf16_ok[m] = 0;  // no bf16 kernels here
  }
}

// Rows [m0, m1) of xf (stride xs, a multiple of 32) into FP4 fp32 order, in place: each 16
// columns become their 8 even ones, then their 8 odd ones (the vectors Fp4Dec decodes).
void fp4_f32_order(float* xf, int64_t m0, int64_t m1, int64_t xs) {
  const __m256i split = _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7);
  for (int64_t m = m0; m < m1; ++m)
    for (int64_t k = 0; k < xs; k += 16) {
      float* p = xf + m * xs + k;
      const __m256 a = _mm256_permutevar8x32_ps(_mm256_loadu_ps(p), split);      // evens, odds of 0-7
      const __m256 b = _mm256_permutevar8x32_ps(_mm256_loadu_ps(p + 8), split);  // of 8-15
      _mm256_storeu_ps(p, _mm256_permute2f128_ps(a, b, 0x20));
      _mm256_storeu_ps(p + 8, _mm256_permute2f128_ps(a, b, 0x31));
    }
}

// FP8 fp32 order (Fp8Dec::codes): each 32 columns c become [c0 c4 .. c28, c1 c5 .. c29, c2 ..,
// c3 .. c31]: a transpose of the chunk seen as 8 rows of 4.
void fp8_f32_order(float* xf, int64_t m0, int64_t m1, int64_t xs) {
  for (int64_t m = m0; m < m1; ++m)
    for (int64_t k = 0; k < xs; k += 32) {
      float* p = xf + m * xs + k;
      float t[32];
      for (int j = 0; j < 4; ++j)
        for (int i = 0; i < 8; ++i) t[8 * j + i] = p[4 * i + j];
      std::memcpy(p, t, sizeof t);
    }
}

// ------------------------------------------------------------------------------ shared algorithms
// act-quant, swiglu, the hyper-connection mixes and the indexer's score combination are
// cpu_kernels_isa_impl.h's templates, instantiated here over vectors of 8 in this file's own
// namespace (cpu_isa.h: no code shared with other files). Bit for bit with their referees
// (swiglu: within a unit of exp). A partial vector runs the same code on a zero-padded copy.

namespace avx2 {

struct Ops {
  using F = __m256;
  using I = __m256i;
  using D = __m256d;
  static constexpr int64_t kLanes = 8;
  static constexpr bool kBf16 = false;  // no bf16 kernels here

  static DI_INLINE F zero() { return _mm256_setzero_ps(); }
  static DI_INLINE F set1(float f) { return _mm256_set1_ps(f); }
  static DI_INLINE F load(const float* p) { return _mm256_loadu_ps(p); }
  static DI_INLINE void store(float* p, F v) { _mm256_storeu_ps(p, v); }
  static DI_INLINE F add(F a, F b) { return _mm256_add_ps(a, b); }
  static DI_INLINE F sub(F a, F b) { return _mm256_sub_ps(a, b); }
  static DI_INLINE F mul(F a, F b) { return _mm256_mul_ps(a, b); }
  static DI_INLINE F fmadd(F a, F b, F c) { return _mm256_fmadd_ps(a, b, c); }
  static DI_INLINE F min(F a, F b) { return _mm256_min_ps(a, b); }
  static DI_INLINE F max(F a, F b) { return _mm256_max_ps(a, b); }
  static DI_INLINE F abs(F v) { return _mm256_and_ps(v, _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff))); }
  static DI_INLINE float hmax(F v) { return cpu::hmax(v); }
  static DI_INLINE float first(F v) { return _mm256_cvtss_f32(v); }

  static DI_INLINE I bits(F v) { return _mm256_castps_si256(v); }
  static DI_INLINE F from_bits(I v) { return _mm256_castsi256_ps(v); }
  static DI_INLINE I set1_i(int v) { return _mm256_set1_epi32(v); }
  static DI_INLINE I and_i(I a, I b) { return _mm256_and_si256(a, b); }
  static DI_INLINE I or_i(I a, I b) { return _mm256_or_si256(a, b); }
  static DI_INLINE I andnot_i(I a, I b) { return _mm256_andnot_si256(a, b); }
  static DI_INLINE I add_i32(I a, I b) { return _mm256_add_epi32(a, b); }
  static DI_INLINE I max_i32(I a, I b) { return _mm256_max_epi32(a, b); }
  template <int N>
  static DI_INLINE I shr_i32(I v) { return _mm256_srli_epi32(v, N); }
  template <int N>
  static DI_INLINE I shl_i32(I v) { return _mm256_slli_epi32(v, N); }
  static DI_INLINE I where_nan(F h, I a, I b) {
    return _mm256_castps_si256(
        _mm256_blendv_ps(_mm256_castsi256_ps(b), _mm256_castsi256_ps(a), _mm256_cmp_ps(h, h, _CMP_UNORD_Q)));
  }

  static DI_INLINE D zero_d() { return _mm256_setzero_pd(); }
  static DI_INLINE D set1_d(double v) { return _mm256_set1_pd(v); }
  static DI_INLINE D add_d(D a, D b) { return _mm256_add_pd(a, b); }
  static DI_INLINE D sub_d(D a, D b) { return _mm256_sub_pd(a, b); }
  static DI_INLINE D mul_d(D a, D b) { return _mm256_mul_pd(a, b); }
  static DI_INLINE D div_d(D a, D b) { return _mm256_div_pd(a, b); }
  static DI_INLINE D min_d(D a, D b) { return _mm256_min_pd(a, b); }
  static DI_INLINE D max_d(D a, D b) { return _mm256_max_pd(a, b); }
  static DI_INLINE D fmadd_d(D a, D b, D c) { return _mm256_fmadd_pd(a, b, c); }
  static DI_INLINE D fnmadd_d(D a, D b, D c) { return _mm256_fnmadd_pd(a, b, c); }
  static DI_INLINE D round_d(D v) { return _mm256_round_pd(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  static DI_INLINE void store_d(double* p, D v) { _mm256_store_pd(p, v); }
  // 2^n for integral doubles n in [-1022, 1023].
  static DI_INLINE D pow2(D n) {
    const D magic = _mm256_set1_pd(6755399441055744.0);  // 1.5 * 2^52: n lands in the low bits
    const I i = _mm256_sub_epi64(_mm256_castpd_si256(_mm256_add_pd(n, magic)), _mm256_castpd_si256(magic));
    return _mm256_castsi256_pd(_mm256_slli_epi64(_mm256_add_epi64(i, _mm256_set1_epi64x(1023)), 52));
  }
  // No vscalefpd: 2^n in two halves, each a normal power of two, so the first product is exact
  // and the second rounds once, with gradual underflow like a single scaling. A NaN n gives
  // halves of garbage bits, but p is NaN already.
  static DI_INLINE D times_pow2_d(D p, D n) {
    const D n1 = _mm256_floor_pd(_mm256_mul_pd(n, _mm256_set1_pd(0.5)));
    return _mm256_mul_pd(_mm256_mul_pd(p, pow2(n1)), pow2(_mm256_sub_pd(n, n1)));
  }
  static DI_INLINE void widen(F v, D& lo, D& hi) {
    lo = _mm256_cvtps_pd(_mm256_castps256_ps128(v));
    hi = _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1));
  }
  static DI_INLINE F narrow(D lo, D hi) {
    return _mm256_insertf128_ps(_mm256_castps128_ps256(_mm256_cvtpd_ps(lo)), _mm256_cvtpd_ps(hi), 1);
  }

  using Part = int64_t;  // lanes in use, 1..8
  template <class Body>
  static DI_INLINE void for_parts(int64_t n, Body&& body) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) body(i, 8);
    if (i < n) body(i, n - i);
  }
  static DI_INLINE F load_part(const float* p, Part nv) {
    if (nv == 8) return _mm256_loadu_ps(p);
    alignas(32) float buf[8] = {};
    std::memcpy(buf, p, size_t(nv) * sizeof(float));
    return _mm256_load_ps(buf);
  }
  static DI_INLINE void store_part(float* p, Part nv, F v) {
    if (nv == 8) return _mm256_storeu_ps(p, v);
    alignas(32) float buf[8];
    _mm256_store_ps(buf, v);
    std::memcpy(p, buf, size_t(nv) * sizeof(float));
  }
  static DI_INLINE F load_narrowed(const double* p, Part nv) {
    alignas(32) double buf[8];
    if (nv < 8) {
      for (int64_t t = 0; t < 8; ++t) buf[t] = t < nv ? p[t] : 0.0;
      p = buf;
    }
    return narrow(_mm256_loadu_pd(p), _mm256_loadu_pd(p + 4));
  }
};

#include "kernels/cpu/cpu_kernels_isa_impl.h"

}  // namespace avx2
// ------------------------------------------------------------------------------ indexer dots

void index_dots(const double* qT, int64_t n_heads, int64_t dim, const float* const* keys, int64_t n_keys,
                double* out) {
  constexpr int kKeys = 2;  // keys side by side: 2 x 4 vectors of 4 heads
  for (int64_t h0 = 0; h0 < n_heads; h0 += 16) {
    const int64_t nh = n_heads - h0 < 16 ? n_heads - h0 : 16;
    for (int64_t s0 = 0; s0 < n_keys; s0 += kKeys) {
      const int64_t nk = n_keys - s0 < kKeys ? n_keys - s0 : kKeys;
      __m256d acc[kKeys][4];
      for (int j = 0; j < kKeys; ++j)
        for (int v = 0; v < 4; ++v) acc[j][v] = _mm256_setzero_pd();
      alignas(32) double qbuf[16] = {};
      for (int64_t c = 0; c < dim; ++c) {
        const double* q = qT + c * n_heads + h0;
        if (nh < 16) {  // a partial head block: lanes beyond n_heads read zeros
          for (int64_t h = 0; h < nh; ++h) qbuf[h] = q[h];
          q = qbuf;
        }
        __m256d qv[4];
        for (int v = 0; v < 4; ++v) qv[v] = _mm256_loadu_pd(q + 4 * v);
        for (int j = 0; j < kKeys; ++j) {
          const __m256d kv = _mm256_set1_pd(j < nk ? double(keys[s0 + j][c]) : 0.0);
          for (int v = 0; v < 4; ++v) acc[j][v] = _mm256_fmadd_pd(qv[v], kv, acc[j][v]);
        }
      }
      for (int64_t j = 0; j < nk; ++j) {
        alignas(32) double lanes[16];
        for (int v = 0; v < 4; ++v) _mm256_store_pd(lanes + 4 * v, acc[j][v]);
        for (int64_t h = 0; h < nh; ++h) out[(s0 + j) * n_heads + h0 + h] = lanes[h];
      }
    }
  }
}

// ------------------------------------------------------------------------------ exact indexer dots

// The exponents of 8 values at a time folded into running lanes (avx2::VecBits' inputs).
struct VecBitsLanes {
  __m256i bits_or = _mm256_setzero_si256();   // mantissa bits below the top one: refused
  __m256i e_max = _mm256_setzero_si256();     // top exponent (zeros have 0: no effect)
  __m256i e_min = _mm256_set1_epi32(255);     // least exponent of nonzero values
  DI_INLINE void add(__m256i b) {
    bits_or = _mm256_or_si256(bits_or, b);
    const __m256i a = _mm256_and_si256(b, _mm256_set1_epi32(0x7fffffff));
    const __m256i e = _mm256_srli_epi32(a, 23);
    e_max = _mm256_max_epu32(e_max, e);
    const __m256i zero = _mm256_cmpeq_epi32(a, _mm256_setzero_si256());
    e_min = _mm256_min_epu32(e_min, _mm256_or_si256(e, _mm256_and_si256(zero, _mm256_set1_epi32(255))));
  }
  DI_INLINE avx2::VecBits get() const {
    alignas(32) uint32_t o[8], hi[8], lo[8];
    _mm256_store_si256(reinterpret_cast<__m256i*>(o), bits_or);
    _mm256_store_si256(reinterpret_cast<__m256i*>(hi), e_max);
    _mm256_store_si256(reinterpret_cast<__m256i*>(lo), e_min);
    uint32_t all = 0, top = 0, least = 255;
    for (int i = 0; i < 8; ++i) {
      all |= o[i];
      top = hi[i] > top ? hi[i] : top;
      least = lo[i] < least ? lo[i] : least;
    }
    avx2::VecBits v;
    v.e_max = int(top);
    v.any = top > 0 || least < 255;
    if (!v.any) return v;
    v.low_min = int(least) - 1;
    v.ok = (all & 0x3fffff) == 0 && least >= 1 && top <= 254;
    return v;
  }
};

// One vector of n values (a query head or a key) folded into lanes; lanes of columns beyond n
// read zeros.
DI_INLINE void vec_bits(const float* v, int64_t n, VecBitsLanes& lanes) {
  int64_t c = 0;
  for (; c + 8 <= n; c += 8) lanes.add(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(v + c)));
  if (c < n) {
    alignas(32) float tail[8] = {};
    for (int64_t i = c; i < n; ++i) tail[i - c] = v[i];
    lanes.add(_mm256_load_si256(reinterpret_cast<const __m256i*>(tail)));
  }
}

// Heads in groups of 16 (two vectors of 8 lanes): data [dim, heads_pad] as fp32.
void index_query_exact(const float* q, int64_t n_heads, int64_t dim, uint32_t* data, IndexQueryExact* info) {
  *info = IndexQueryExact{};
  if (dim > kIndexExactMaxDim || n_heads <= 0 || dim <= 0) return;
  const int64_t heads_pad = (n_heads + 15) / 16 * 16;
  float* qT = reinterpret_cast<float*>(data);
  info->ok = true;
  for (int64_t h = 0; h < heads_pad; ++h) {
    if (h >= n_heads) {
      for (int64_t c = 0; c < dim; ++c) qT[c * heads_pad + h] = 0.0f;
      continue;
    }
    VecBitsLanes lanes;
    vec_bits(q + h * dim, dim, lanes);
    for (int64_t c = 0; c < dim; ++c) qT[c * heads_pad + h] = q[h * dim + c];
    avx2::index_query_add(*info, lanes.get());
  }
  info->data = data;
  info->heads_pad = heads_pad;
  info->vectors = 2;
}

// Every head against four keys at a time in fp32 FMAs (8 chains: 2 head vectors x 4 keys),
// for the keys index_key_exact accepts.
void index_dots_exact(const IndexQueryExact& q, int64_t n_heads, int64_t dim, const float* const* keys,
                      int64_t n_keys, double* out, uint8_t* exact) {
  if (!q.data || dim > kIndexExactMaxDim) {
    for (int64_t s = 0; s < n_keys; ++s) exact[s] = 0;
    return;
  }
  constexpr int kKeys = 4;
  const int lg = avx2::ceil_log2(dim);
  const float* qT = reinterpret_cast<const float*>(q.data);
  static const float zeros[kIndexExactMaxDim] = {};
  for (int64_t s0 = 0; s0 < n_keys; s0 += kKeys) {
    const int64_t nk = min64(kKeys, n_keys - s0);
    // The next group's rows, while this one computes (a decode step finds them out of cache).
    for (int64_t j = s0 + kKeys; j < min64(s0 + 2 * kKeys, n_keys); ++j)
      for (int64_t c = 0; c < dim; c += 16) _mm_prefetch(reinterpret_cast<const char*>(keys[j] + c), _MM_HINT_T0);
    const float* k[kKeys];
    for (int j = 0; j < kKeys; ++j) {
      k[j] = j < nk ? keys[s0 + j] : zeros;
      if (j >= nk) continue;
      VecBitsLanes lanes;
      vec_bits(k[j], dim, lanes);
      exact[s0 + j] = uint8_t(avx2::index_key_exact(q, lanes.get(), lg));
    }
    for (int64_t h0 = 0; h0 < n_heads; h0 += 16) {
      __m256 acc[kKeys][2];
      for (int j = 0; j < kKeys; ++j) acc[j][0] = acc[j][1] = _mm256_setzero_ps();
      const float* qc = qT + h0;
      for (int64_t c = 0; c < dim; ++c, qc += q.heads_pad) {
        const __m256 q0 = _mm256_loadu_ps(qc), q1 = _mm256_loadu_ps(qc + 8);
        for (int j = 0; j < kKeys; ++j) {
          const __m256 kv = _mm256_broadcast_ss(k[j] + c);
          acc[j][0] = _mm256_fmadd_ps(q0, kv, acc[j][0]);
          acc[j][1] = _mm256_fmadd_ps(q1, kv, acc[j][1]);
        }
      }
      const int64_t nh = min64(16, n_heads - h0);
      for (int64_t j = 0; j < nk; ++j) {
        alignas(32) float lanes[16];
        _mm256_store_ps(lanes, acc[j][0]);
        _mm256_store_ps(lanes + 8, acc[j][1]);
        for (int64_t h = 0; h < nh; ++h) out[(s0 + j) * n_heads + h0 + h] = double(lanes[h]);
      }
    }
  }
}

// sum a[i] * b[i] in double: 4 lanes x 4 accumulators of exact products, then the lanes and
// a scalar tail.
double dot_f64(const float* a, const float* b, int64_t n) {
  __m256d acc[4] = {_mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd()};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int u = 0; u < 4; ++u) {
      const __m256d x = _mm256_cvtps_pd(_mm_loadu_ps(a + i + 4 * u));
      const __m256d y = _mm256_cvtps_pd(_mm_loadu_ps(b + i + 4 * u));
      acc[u] = _mm256_fmadd_pd(x, y, acc[u]);
    }
  const __m256d sum = _mm256_add_pd(_mm256_add_pd(acc[0], acc[1]), _mm256_add_pd(acc[2], acc[3]));
  alignas(32) double lanes[4];
  _mm256_store_pd(lanes, sum);
  double total = (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
  for (; i < n; ++i) total += double(a[i]) * double(b[i]);
  return total;
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
    .prep_act_quant = avx2::prep_act_quant<avx2::Ops>,
    .act_quant = avx2::act_quant<avx2::Ops>,
    .scratch_bytes = scratch_bytes,
    .rows = rows,
    .index_dots = index_dots,
    .fp4_f32_order = fp4_f32_order,
    .fp8_f32_order = fp8_f32_order,
    .index_query_exact = index_query_exact,
    .index_dots_exact = index_dots_exact,
    .index_combine = avx2::index_combine<avx2::Ops>,
    .hc_expand = avx2::hc_expand<avx2::Ops>,
    .hc_collapse = avx2::hc_collapse<avx2::Ops>,
    .dot_f64 = dot_f64,
    .swiglu = avx2::swiglu<avx2::Ops>,
    .call_setup = call_setup,
    .fma_chains = avx2::fma_chains<avx2::Ops>,
};

}  // namespace

const IsaKernels& avx2_kernels() { return kKernels; }

}  // namespace deepinfer::kernels::cpu
