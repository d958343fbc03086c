// Weight decoders, tables, helpers and the arithmetic every output runs (the bit contract):
// shared by the AVX-512 kernel files (gemv_avx512.cpp, gemm_avx512.cpp, activations_avx512.cpp,
// cpu_kernels_avx512.cpp) and included by *_avx512.cpp files only (it needs their ISA flags).
// Everything here sits in an unnamed namespace inside namespace avx512: each including file
// gets its own copy, with internal linkage and that file's flags, so the rule of cpu_isa.h
// holds, and the templates are instantiated in the file whose hot loops use them (inlined
// there, as when all of this was one file). The GEMV's and the tiles' decode steps are the
// decoders below, so the two paths multiply the same weights.
//
// Weight decoding (exact, table driven):
//   e4m3 -> bf16: two 128-entry byte tables (low / high byte of the bf16 magnitude) looked up
//                 with vpermi2b on the 7 magnitude bits; the sign is or-ed in; the NaN codes
//                 0x7f / 0xff map to a bf16 NaN. Byte pairs become bf16 words or fp32 dwords
//                 (natural column order) with one two-source byte permute each.
//   e2m1 -> bf16: 16-entry table looked up with vpermw straight from the 16-bit words of the
//                 codes shifted by 0 / 4 / 8 / 12, which yields the columns in FP4 lane order
//                 (see Fp4Dec); x is handed over in the same order.
//   e2m1 -> fp32: vpermps on the nibbles of each dword, one shift apart, which yields the columns
//                 in FP4 fp32 order (see Fp4Dec::f32); x is handed over in the same order.
// Products:
//   fp32 path - fp32 FMA of the prepared fp32 activations with the exact weights (code
//               times block scale).
//   bf16 path - when the activations are exact bf16 values in range (always true for
//               act-quantised activations), vdpbf16ps: bf16 x bf16 products are exact in fp32
//               and never subnormal, so only the summation order differs from fp32 FMA. FP4
//               sums each chunk of 128 columns unscaled and scales the partial sums (as the
//               reference scales its per-block sums).
#pragma once
// GCC's own intrinsic headers (_mm512_setzero_* and kin) trip these: set here, ahead of
// <immintrin.h>, for the files that include this header (each before any other that brings
// <immintrin.h>).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/avx512_common.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/fp4_multirow.h"

namespace deepinfer::kernels::cpu::avx512 {

namespace {

// Hot per-chunk helpers must inline into the loops (they pass vectors around).
#define DI_INLINE inline __attribute__((always_inline))

// ------------------------------------------------------------------------------- tables

constexpr uint16_t e4m3_mag_bf16(int m) {
  if (m == 127) return 0x7fc0;  // NaN
  const int e = m >> 3, man = m & 7;
  if (e == 0) {  // subnormal: man * 2^-9
    if (man == 0) return 0;
    const int p = man >= 4 ? 2 : man >= 2 ? 1 : 0;
    return uint16_t(((p - 9 + 127) << 7) | ((man - (1 << p)) << (7 - p)));
  }
  return uint16_t(((e + 120) << 7) | (man << 4));
}

constexpr uint16_t e2m1_bf16(int nib) {
  constexpr uint16_t mag[8] = {0x0000, 0x3f00, 0x3f80, 0x3fc0, 0x4000, 0x4040, 0x4080, 0x40c0};
  return uint16_t(mag[nib & 7] | ((nib & 8) ? 0x8000 : 0));
}

struct alignas(64) Tables {
  uint8_t e4m3_lo[128];       // low byte of bf16(|e4m3(m)|)
  uint8_t e4m3_hi[128];       // high byte (sign excluded)
  uint16_t e2m1_w[32];        // bf16(e2m1(i & 15))
  uint32_t e2m1_f[16];        // fp32 bits of e2m1(i)
  uint8_t idx_w[2][64];       // (lo, hi) bytes of columns 32h.. -> bf16 words, natural order
  uint8_t idx_f[4][64];       // (lo, hi) bytes of columns 16q.. -> high half of fp32 dwords
  uint32_t idx_blk4[16];      // FP4 chunk: lane i -> i / 4 (its scale block in a chunk)
  uint16_t idx_blk8[32];      // FP4 chunk in lane order: word j -> j / 8 (its scale block)
  uint16_t idx_lane[4][32];   // FP4 lane order: word j of vector v <- column (4j + v) mod 64
  uint32_t e8m0[256];         // fp32 bits of 2^(b - 127), NaN for 0xff
};

constexpr Tables make_tables() {
  Tables t{};
  for (int m = 0; m < 128; ++m) {
    t.e4m3_lo[m] = uint8_t(e4m3_mag_bf16(m) & 0xff);
    t.e4m3_hi[m] = uint8_t(e4m3_mag_bf16(m) >> 8);
  }
  for (int i = 0; i < 32; ++i) t.e2m1_w[i] = e2m1_bf16(i & 15);
  for (int i = 0; i < 16; ++i) t.e2m1_f[i] = uint32_t(e2m1_bf16(i)) << 16;
  for (int h = 0; h < 2; ++h)
    for (int j = 0; j < 32; ++j) {
      t.idx_w[h][2 * j] = uint8_t(32 * h + j);
      t.idx_w[h][2 * j + 1] = uint8_t(64 + 32 * h + j);
    }
  for (int q = 0; q < 4; ++q)
    for (int j = 0; j < 16; ++j) {
      t.idx_f[q][4 * j + 0] = 0;
      t.idx_f[q][4 * j + 1] = 0;
      t.idx_f[q][4 * j + 2] = uint8_t(16 * q + j);
      t.idx_f[q][4 * j + 3] = uint8_t(64 + 16 * q + j);
    }
  for (int i = 0; i < 16; ++i) t.idx_blk4[i] = uint32_t(i / 4);
  for (int j = 0; j < 32; ++j) t.idx_blk8[j] = uint16_t(j / 8);
  for (int v = 0; v < 4; ++v)
    for (int j = 0; j < 32; ++j) t.idx_lane[v][j] = uint16_t((4 * j + v) % 64);
  for (int b = 0; b < 256; ++b) t.e8m0[b] = b == 0 ? 0x00400000u : b == 255 ? 0x7fc00000u : uint32_t(b) << 23;
  return t;
}

constexpr Tables kT = make_tables();

// ------------------------------------------------------------------------------ helpers

inline float f32_of(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

// ue8m0 byte -> 2^(b-127), 0xff NaN (as e8m0_to_f32).
DI_INLINE float e8m0(uint8_t b) { return f32_of(kT.e8m0[b]); }

inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
inline int64_t round_up(int64_t a, int64_t b) { return (a + b - 1) / b * b; }


// Decode prefetches weights into L2 (T1), not non-temporally (NTA): an NTA prefetch keeps
// the L2 streamer out of the stream, so a core has only its L1 fill buffers in flight. With
// the memory slow (long latency) that capped a plain read at 6.5 GB/s per core against 16
// with T0 / T1 or none at all; large-bench decode 18.2 -> 26.6 tok/s (alternated runs).
// In a fast memory state NTA had been 0.4-1.5% ahead of T0.
DI_INLINE void prefetch_weights(const void* p) { _mm_prefetch(static_cast<const char*>(p), _MM_HINT_T1); }

// F32 decode streams weight rows one after another (contiguous): software prefetch this many
// bytes ahead. (Measured on the BF16 output head when it ran here: 1 KiB left it at 58-61
// GB/s from DRAM, 8 KiB at 70-72; BF16 now prefetches whole row groups ahead, see
// bf16_gemv_avx512.cpp.)
constexpr int kPrefetch = 8192;

// FP8 / FP4 decode prefetches whole row groups ahead: this many bytes, in whole groups of 8
// rows (FP4's M = 1 group; FP8's is 4), at least one. 8 KiB in groups of 4 left FP4's M = 1
// prefetches for rows 0-3 of its 8-row group inside that group, already being read: 32 KiB in
// groups of 8 took the routed experts' decode 3.75-3.90 -> 3.15-3.43 ms a layer (AMD EPYC Zen 4,
// 2 threads, V4-Flash-0731 shapes at 256 experts, 4 alternated rounds).
constexpr int64_t kGroupPrefetchBytes = 32768;
inline int64_t group_prefetch_rows(int64_t row_bytes) {
  const int64_t rows = (kGroupPrefetchBytes + row_bytes - 1) / row_bytes;
  return rows < 8 ? 8 : (rows + 7) / 8 * 8;
}

DI_INLINE __m512 dp(__m512 acc, __m512i a, __m512i b) {
  return _mm512_dpbf16_ps(acc, (__m512bh)a, (__m512bh)b);
}

// One 32-word vector of bf16 values as two fp32 vectors in dot-product order: the odd words
// (the high halves of the dwords), then the even ones. vdpbf16ps adds lane i's odd product,
// then its even product, each rounded like an FMA (checked on this hardware: no difference
// in 3.2 M lanes of normal values, and bf16 mode never meets subnormals), so FMAs over these
// vectors in this order give the dot product's bits.
DI_INLINE void bf16_to_dp(__m512i w, __m512* odd, __m512* even) {
  *odd = _mm512_castsi512_ps(_mm512_and_si512(w, _mm512_set1_epi32(int(0xffff0000u))));
  *even = _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
}

// n bf16 words (a multiple of 32) into dot-product order fp32.
DI_INLINE void row_to_dp(const uint16_t* src, float* dst, int64_t n) {
  for (int64_t k = 0; k < n; k += 32) {
    __m512 o, e;
    bf16_to_dp(load_i(src + k), &o, &e);
    _mm512_storeu_ps(dst + k, o);
    _mm512_storeu_ps(dst + k + 16, e);
  }
}

// Lanes that are 0 or of magnitude in [2^-40, 2^40] (rejects NaN, inf, subnormals).
inline __mmask16 in_range(__m512 v) {
  const __m512i a = _mm512_and_si512(_mm512_castps_si512(v), _mm512_set1_epi32(0x7fffffff));
  const __mmask16 zero = _mm512_cmpeq_epi32_mask(a, _mm512_setzero_si512());
  const __mmask16 mid = _mm512_cmple_epu32_mask(_mm512_sub_epi32(a, _mm512_set1_epi32(int(kBf16RangeLoBits))),
                                                _mm512_set1_epi32(int(kBf16RangeHiBits - kBf16RangeLoBits)));
  return zero | mid;
}

// ------------------------------------------------------------------------------ arithmetic
// Every output y[m, n] is one fixed sequence of operations that depends only on activation
// row m and weight row n, so the decode and prefill paths, any M and any thread split give
// the same bits (a sequence's logits do not depend on the batch it shares a step with):
//   bf16 mode (activation row exact bf16 in range, weight row with every scale in range):
//     acc = 0; for each 32-column vector j over [0, Kp): acc = vdpbf16ps(acc, x16_j, w16_j);
//     FP4: acc = 0; for each chunk c of kFp4Chunk columns (its four vectors in lane order, x
//     alike): part = 0; part = vdpbf16ps(part, x16_v, code16_v) for v = 0..3;
//     acc = fma(part, scale_c, acc) (see Fp4Dec);
//   fp32 mode: acc = 0; for each 16-column vector j over [0, Kp): acc = fma(x_j, w_j, acc);
//   y = reduce4 lane sum of acc.
// w16 / w are the exact weights (code times block scale; BF16 / F32 as stored), zero beyond K.

// Scale bytes whose power of two keeps every nonzero code * scale (codes in [2^-9, 448])
// inside the exact-product range [2^-40, 2^40].
constexpr int kScaleLo = 127 - 31, kScaleHi = 127 + 22;
static_assert(kScaleLo == kFp4SafeScaleLo && kScaleHi == kFp4SafeScaleHi, "fp4_multirow_avx512 takes the same rows");

inline bool scales_in_range(const uint8_t* s, int64_t n) { return bytes_within(s, n, kScaleLo, kScaleHi); }

// Adds a power-of-two scale (as an exponent offset) to nonzero, non-NaN bf16 codes: exact
// for scales within [kScaleLo, kScaleHi].
DI_INLINE __m512i b16_scale(__m512i w, int scale_byte) {
  const __m512i mag = _mm512_and_si512(w, _mm512_set1_epi16(0x7fff));
  const __mmask32 live =
      _mm512_mask_cmpneq_epi16_mask(_mm512_test_epi16_mask(mag, mag), mag, _mm512_set1_epi16(0x7fc0));
  return _mm512_mask_add_epi16(w, live, w, _mm512_set1_epi16(short((scale_byte - 127) * 128)));
}

// ------------------------------------------------------------------------------ decoders
// How the bf16-mode GEMV applies a power-of-two weight scale. A decoder without XSCALE adds
// it to the exponent of every nonzero weight code (b16). With XSCALE the GEMV takes the bare
// codes (b16_codes) and adds the scale to the exponent of the nonzero x words instead: the
// product (x * s) * w is the same exact fp32 value as x * (w * s) (x and w * s are in the
// exact-product range and s is within [kScaleLo, kScaleHi], so x * s stays a normal bf16),
// hence the same bits, with fewer vector ops per weight row. kShared: the rows of a group
// share their scales (FP8 block rows), so x is scaled once per chunk. (FP4 scales its chunk
// partial sums instead, see Fp4Dec.)
enum class XScale { kNone, kShared };

// For columns [k, k + nv) of a weight row (0 < nv <= CH, zeros beyond): f32() the exact fp32
// weights as NF vectors of 16; b16() the exact bf16 weights as NB vectors of 32 (only for a
// row that safe() accepts; CHECK decoders are range-checked by the caller instead).

struct F32Dec {
  static constexpr int CH = 32, NF = 2, NB = 0;
  static constexpr int GEMV_ROWS_M1 = 1;  // long rows: one sequential stream
  static constexpr bool B16 = false, CHECK = false;
  struct Row {
    const float* p;
  };
  const LinearCall* c;
  explicit F32Dec(const LinearCall& call) : c(&call) {}
  DI_INLINE Row row(int64_t n) const { return {reinterpret_cast<const float*>(c->W->data) + n * c->K}; }
  DI_INLINE bool safe(const Row&) const { return false; }
  DI_INLINE void prefetch(const Row& r, int64_t k) const { prefetch_weights(reinterpret_cast<const char*>(r.p + k) + kPrefetch); }
  DI_INLINE void f32(const Row& r, int64_t k, int64_t nv, __m512* w) const {
    if (nv == CH) {
      w[0] = _mm512_loadu_ps(r.p + k);
      w[1] = _mm512_loadu_ps(r.p + k + 16);
    } else {
      w[0] = _mm512_maskz_loadu_ps(mask16(nv), r.p + k);
      w[1] = _mm512_maskz_loadu_ps(mask16(nv - 16), r.p + k + 16);
    }
  }
  DI_INLINE void b16(const Row&, int64_t, int64_t, __m512i*) const {}
};

// Range-checks every bf16-mode chunk (CHECK decoder). The tiles decode BF16 rows with it; the
// GEMV (M <= 8) is bf16_gemv_avx512.cpp's.
struct Bf16Dec {
  static constexpr int CH = 32, NF = 2, NB = 1;
  static constexpr bool B16 = true, CHECK = true;
  // fp32 mode in pair order (see f32() and bf16_pair_order): a chunk's columns spread over
  // all its vectors.
  static constexpr bool F32_SPREAD = true;
  struct Row {
    const uint16_t* p;
  };
  const LinearCall* c;
  __m512i hi_mask;
  explicit Bf16Dec(const LinearCall& call) : c(&call), hi_mask(_mm512_set1_epi32(int(0xffff0000u))) {}
  DI_INLINE Row row(int64_t n) const { return {reinterpret_cast<const uint16_t*>(c->W->data) + n * c->K}; }
  DI_INLINE bool safe(const Row&) const { return true; }
  DI_INLINE void prefetch(const Row& r, int64_t k) const { prefetch_weights(reinterpret_cast<const char*>(r.p + k) + kPrefetch); }
  DI_INLINE __m512i raw(const Row& r, int64_t k, int64_t nv) const {
    return nv == CH ? load_i(r.p + k) : _mm512_maskz_loadu_epi16(mask32(nv), r.p + k);
  }
  // fp32 mode in pair order (bf16_pair_order): the even columns are the low words moved up,
  // the odd ones the high words masked: no shuffle port taken from the FMAs.
  DI_INLINE void f32(const Row& r, int64_t k, int64_t nv, __m512* w) const {
    const __m512i v = raw(r, k, nv);
    w[0] = _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
    w[1] = _mm512_castsi512_ps(_mm512_and_si512(v, hi_mask));
  }
  DI_INLINE void b16(const Row& r, int64_t k, int64_t nv, __m512i* w) const { w[0] = raw(r, k, nv); }
};

struct Fp8Dec {
  static constexpr int CH = 64, NF = 4, NB = 2;
  static constexpr bool B16 = true, CHECK = false;
  struct Row {
    const uint8_t* p;
    const uint8_t* s;
  };
  const LinearCall* c;
  int64_t B;
  int bshift;  // log2(B) when B is a power of two (always, in practice), else -1
  int64_t pf_bytes;  // prefetch distance: whole row groups, see group_prefetch_rows
  __m512i lo0, lo1, hi0, hi1, sign;
  explicit Fp8Dec(const LinearCall& call)
      : c(&call),
        B(call.W->block),
        bshift((B & (B - 1)) == 0 ? __builtin_ctzll(uint64_t(B)) : -1),
        pf_bytes(group_prefetch_rows(call.K) * call.K),
        lo0(load_i(kT.e4m3_lo)),
        lo1(load_i(kT.e4m3_lo + 64)),
        hi0(load_i(kT.e4m3_hi)),
        hi1(load_i(kT.e4m3_hi + 64)),
        sign(_mm512_set1_epi8(char(0x80))) {}
  DI_INLINE Row row(int64_t n) const {
    const WeightMatrix& W = *c->W;
    return {W.data + n * c->K, W.scale + (n / W.block) * W.scale_cols};
  }
  DI_INLINE bool safe(const Row& r) const { return scales_in_range(r.s, (c->K + B - 1) / B); }
  // The same spot whole row groups on (pf_bytes): a group's rows are one contiguous
  // stretch, so this runs groups ahead. (A fixed distance inside the row left each group's
  // first misses unhidden: 1 MiB matrices ran at 44 GB/s cold, now 68.)
  DI_INLINE void prefetch(const Row& r, int64_t k) const { prefetch_weights(r.p + k + pf_bytes); }
  DI_INLINE int64_t blk(int64_t k) const { return bshift >= 0 ? k >> bshift : k / B; }
  // Scale bytes of the two 32-column halves (B is a multiple of 32; a half beyond K borrows
  // the first half's scale, its weights being zero).
  DI_INLINE void scale_bytes(const Row& r, int64_t k, int& s0, int& s1) const {
    s0 = r.s[blk(k)];
    s1 = k + 32 < c->K ? r.s[blk(k + 32)] : s0;
  }
  DI_INLINE void bytes(const Row& r, int64_t k, int64_t nv, __m512i& lo, __m512i& hi) const {
    const __m512i b = nv == CH ? load_i(r.p + k) : _mm512_maskz_loadu_epi8(mask64(nv), r.p + k);
    lo = _mm512_permutex2var_epi8(lo0, b, lo1);
    hi = _mm512_permutex2var_epi8(hi0, b, hi1);
    hi = _mm512_ternarylogic_epi32(hi, b, sign, 0xf8);  // hi | (b & 0x80)
  }
  DI_INLINE void f32(const Row& r, int64_t k, int64_t nv, __m512* w) const {
    __m512i lo, hi;
    bytes(r, k, nv, lo, hi);
    int s0, s1;
    scale_bytes(r, k, s0, s1);
    const __m512 v0 = _mm512_set1_ps(e8m0(uint8_t(s0))), v1 = _mm512_set1_ps(e8m0(uint8_t(s1)));
    const __mmask64 m = 0xccccccccccccccccull;
    for (int q = 0; q < 4; ++q)
      w[q] = _mm512_mul_ps(_mm512_castsi512_ps(_mm512_maskz_permutex2var_epi8(m, lo, load_i(kT.idx_f[q]), hi)),
                           q < 2 ? v0 : v1);
  }
  DI_INLINE void b16(const Row& r, int64_t k, int64_t nv, __m512i* w) const {
    b16_codes(r, k, nv, w);
    int s0, s1;
    scale_bytes(r, k, s0, s1);
    w[0] = b16_scale(w[0], s0);
    w[1] = b16_scale(w[1], s1);
  }
  // GEMV with the scale on x (see XScale): the rows of a group that lie in one block row of
  // the scale share every scale, so x is scaled once per chunk for all of them.
  static constexpr XScale XSCALE = XScale::kShared;
  DI_INLINE bool shares_scales(int64_t n, int64_t nrw) const { return blk(n) == blk(n + nrw - 1); }
  DI_INLINE void b16_codes(const Row& r, int64_t k, int64_t nv, __m512i* w) const {
    __m512i lo, hi;
    bytes(r, k, nv, lo, hi);
    w[0] = _mm512_permutex2var_epi8(lo, load_i(kT.idx_w[0]), hi);
    w[1] = _mm512_permutex2var_epi8(lo, load_i(kT.idx_w[1]), hi);
  }
  DI_INLINE void scale_words(const Row& r, int64_t k, __m512i* add) const {
    int s0, s1;
    scale_bytes(r, k, s0, s1);
    add[0] = _mm512_set1_epi16(short((s0 - 127) * 128));
    add[1] = _mm512_set1_epi16(short((s1 - 127) * 128));
  }
};

// FP4 in bf16 mode has its own column order and arithmetic.
// Lane order (kFp4Chunk columns at a time, see fp4_lane_order): word j of vector v of a chunk
// is column 4j + v, so the four vectors come straight out of one 64-byte load with three
// shifts and four table lookups (the nibble of column 4j + v sits at bit 4v of 16-bit word
// j). The driver hands such calls x in the same order; the fp32 mode stays in natural order.
// Chunk partial sums (as the reference's per-block sums times the block scale): each chunk
// sums x . codes (exact products, no scale) over its four vectors into a fresh accumulator,
// whose lanes 4b .. 4b + 3 hold scale block b of the chunk (word j is in block j / 8); then
// acc = fma(part, 2^(s - 127) per lane, acc). The scale costs one fma per chunk and row
// instead of scaling x or the codes per vector.
struct Fp4Dec {
  static constexpr int CH = kFp4Chunk, NF = 8, NB = 4;
  static constexpr bool B16 = true, CHECK = false;
  static constexpr bool F32_SPREAD = true;  // fp32 mode in FP4 fp32 order, see f32()
  static constexpr int GEMV_ROWS_M1 = 8;     // see gemv_rows_m1
  static constexpr bool PARTIAL_SUMS = true;
  struct Row {
    const uint8_t* p;
    const uint8_t* s;
    const float* sf = nullptr;  // 2^(s - 127) of each scale block, see prep_scales
  };
  // Once per weight row: the scale of every block as a float (the buffer holds
  // round_up(K / 32, 16) floats; beyond K / 32 they are 0, times a zero partial sum).
  static int64_t scale_floats(int64_t K) { return round_up(K / 32, 16); }
  DI_INLINE void prep_scales(Row& r, float* floats) const {
    const int64_t nb = c->K / 32;
    for (int64_t i = 0; i < nb; i += 16) {
      const __m128i b = _mm_maskz_loadu_epi8(mask16(nb - i), r.s + i);
      _mm512_storeu_si512(floats + i, _mm512_slli_epi32(_mm512_cvtepu8_epi32(b), 23));
    }
    r.sf = floats;
  }
  // The chunk at k: lane i takes the scale of block k / 32 + i / 4.
  DI_INLINE __m512 chunk_scales(const Row& r, int64_t k) const {
    const __m512i four = _mm512_castsi128_si512(_mm_loadu_si128(reinterpret_cast<const __m128i*>(r.sf + k / 32)));
    return _mm512_castsi512_ps(_mm512_permutexvar_epi32(blk4, four));
  }
  const LinearCall* c;
  int64_t pf_bytes;  // prefetch distance: whole row groups, see group_prefetch_rows
  __m512i tw, blk4;
  __m512 tf;
  explicit Fp4Dec(const LinearCall& call)
      : c(&call),
        pf_bytes(group_prefetch_rows(call.K / 2) * (call.K / 2)),
        tw(load_i(kT.e2m1_w)),
        blk4(load_i(kT.idx_blk4)),
        tf(_mm512_castsi512_ps(load_i(kT.e2m1_f))) {}
  DI_INLINE Row row(int64_t n) const {
    const WeightMatrix& W = *c->W;
    return {W.data + n * (c->K / 2), W.scale + n * W.scale_cols};
  }
  DI_INLINE bool safe(const Row& r) const { return scales_in_range(r.s, c->K / 32); }
  // FP4 rows are short (1 KiB at K = 2048): a fixed distance would land in the rows the
  // group is reading already, so fetch the same spot whole row groups on (pf_bytes). One
  // chunk is one cache line of codes.
  DI_INLINE void prefetch(const Row& r, int64_t k) const {
    prefetch_weights(r.p + k / 2 + pf_bytes);
  }
  // fp32 mode in FP4 fp32 order (fp4_f32_order): lane i of vector j of a chunk is column
  // 8i + j, i.e. nibble j of dword i of the chunk's 64 bytes, so each vector is one shift and
  // one table lookup of a single load; lane i lies in scale block i / 4 for every j. (K is a
  // multiple of 32: a chunk holds whole scale blocks, those beyond K have zero codes.)
  DI_INLINE void f32(const Row& r, int64_t k, int64_t nv, __m512* w) const {
    const __m512i b = nv == CH ? load_i(r.p + k / 2) : _mm512_maskz_loadu_epi8(mask64(nv / 2), r.p + k / 2);
    const int64_t b0 = k / 32, nb = min64(4, (nv + 31) / 32);
    alignas(16) float sc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int64_t i = 0; i < nb; ++i) sc[i] = e8m0(r.s[b0 + i]);
    const __m512 s = _mm512_permutexvar_ps(blk4, _mm512_castps128_ps512(_mm_load_ps(sc)));
    w[0] = _mm512_mul_ps(_mm512_permutexvar_ps(b, tf), s);
    for (int j = 1; j < 8; ++j) w[j] = _mm512_mul_ps(_mm512_permutexvar_ps(_mm512_srli_epi32(b, 4 * j), tf), s);
  }
  // The codes of a chunk in lane order; vpermw reads the low 5 bits of each index word, and
  // the 32-entry table repeats its 16 codes, so the neighbouring nibble's bit 4 is harmless.
  DI_INLINE void b16_codes(const Row& r, int64_t k, int64_t nv, __m512i* w) const {
    const __m512i b = nv == CH ? load_i(r.p + k / 2) : _mm512_maskz_loadu_epi8(mask64(nv / 2), r.p + k / 2);
    w[0] = _mm512_permutexvar_epi16(b, tw);
    w[1] = _mm512_permutexvar_epi16(_mm512_srli_epi16(b, 4), tw);
    w[2] = _mm512_permutexvar_epi16(_mm512_srli_epi16(b, 8), tw);
    w[3] = _mm512_permutexvar_epi16(_mm512_srli_epi16(b, 12), tw);
  }
};

template <class D>
constexpr bool partial_sums() {
  if constexpr (requires { D::PARTIAL_SUMS; })
    return D::PARTIAL_SUMS;
  else
    return false;
}

}  // namespace

}  // namespace deepinfer::kernels::cpu::avx512
