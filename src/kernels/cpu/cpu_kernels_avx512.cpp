// AVX-512 kernels (F/BW/VL/DQ + BF16 + VBMI), compiled with those ISA flags and called only
// after the dispatcher's CPU check. See cpu_isa.h for the rules of this file (no templates or
// inline functions shared with other files, no static initialisers that run code). The
// algorithms both ISAs share are cpu_kernels_isa_impl.h's, instantiated over vectors of 16 in
// namespace avx512 below ("shared algorithms"); this file holds its vector operations and
// the tuned loops.
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
// Decode (M <= 8) fuses the decode with the dot products, several weight rows at a time (FP4 in
// bf16 mode over 3-16 rows: fp4_multirow_avx512.cpp; BF16, the output head:
// bf16_gemv_avx512.cpp; the same sequence for every output).
// Prefill decodes a tile of weight rows once into L2 and runs a 6 x 4 register-blocked fp32
// FMA microkernel over all activation rows, K in L1-sized blocks with the vector partial sums
// carried between blocks. In bf16 mode the tile is decoded to bf16 (straight from the codes,
// the block scale added to the exponent; FP4: the same for the vdpbf16ps tiles, the bare codes
// and each chunk's scales for the FMA tiles), then
// either multiplied with vdpbf16ps as it is, or widened into dot-product order with x alike
// and multiplied with FMAs, which give the instruction's bits (see bf16_to_dp). Which is
// faster depends on the CPU (dp_tiles_are_faster, measured once): on the Intel cores this was
// tuned on vdpbf16ps issued at half the rate of two FMAs (1.9 G/s against 7.5 G/s FMAs on one
// core); AMD Zen 4 issues one a cycle like an FMA, so it does twice the multiply-adds
// (bench_kernels, 1 thread, CPU time, act-quant FP8 2048 x 2048 M = 32: 3.9 -> 2.2 ms; FP4
// 1024 x 2048 M = 32: 2.0 -> 1.2 ms; M = 128 13.3 -> 7.6 and 7.5 -> 4.6 ms). The vdpbf16ps
// tiles run weight-stationary over all of K with every accumulator in registers (micro_dp,
// micro_parts_dp): four tile rows sit in L1 while x streams past; 1.15-1.3x over the 6 x 4
// kernel whose accumulators went through memory per K block (FP4: per chunk).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <type_traits>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <time.h>

#include "kernels/cpu/avx512_common.h"
#include "kernels/cpu/bf16_gemv.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/fp4_multirow.h"

namespace deepinfer::kernels::cpu {

namespace {

// Hot per-chunk helpers must inline into the loops (they pass vectors around).
#define DI_INLINE inline __attribute__((always_inline))

// Shared with the other AVX-512 kernel files (avx512_common.h).
using avx512::b16_out_of_range;
using avx512::mask32;
using avx512::reduce4;
using avx512::store_sums;

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

inline uint64_t mask64(int64_t n) { return n >= 64 ? ~0ull : n <= 0 ? 0ull : (1ull << n) - 1; }
inline uint16_t mask16(int64_t n) { return n >= 16 ? uint16_t(0xffff) : n <= 0 ? uint16_t(0) : uint16_t((1u << n) - 1); }
inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
inline int64_t round_up(int64_t a, int64_t b) { return (a + b - 1) / b * b; }

inline __m512i load_i(const void* p) { return _mm512_loadu_si512(p); }

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

inline bool scales_in_range(const uint8_t* s, int64_t n) {
  for (int64_t i = 0; i < n; i += 64) {
    const __m512i b = _mm512_maskz_loadu_epi8(mask64(n - i), s + i);
    const __mmask64 bad = _mm512_cmplt_epu8_mask(b, _mm512_set1_epi8(char(kScaleLo))) |
                          _mm512_cmpgt_epu8_mask(b, _mm512_set1_epi8(char(kScaleHi)));
    if (bad & mask64(n - i)) return false;
  }
  return true;
}

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

// ------------------------------------------------------------------------------ decode (GEMV)

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
  const __m512 z = _mm512_setzero_ps();
  for (int m = 0; m < MR; ++m)
    for (int r0 = 0; r0 < NRW; r0 += 4)
      store_sums(c.y + m * c.N + n + r0,
                 reduce4(acc[m][r0], r0 + 1 < NRW ? acc[m][r0 + 1] : z, r0 + 2 < NRW ? acc[m][r0 + 2] : z,
                         r0 + 3 < NRW ? acc[m][r0 + 3] : z),
                 NRW - r0);
  uint32_t bad_rows = 0;
  for (int r = 0; r < NRW; ++r)
    if (bad[r]) bad_rows |= 1u << r;
  return bad_rows;
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

// ------------------------------------------------------------------------------ prefill (GEMM)

constexpr int kMR = 6, kNR = 4;

// Exact fp32 weights of row n, zero to Kp (the values the fp32 mode multiplies).
template <class D>
void decode_row_f32(const LinearCall& c, const D& d, int64_t n, float* dst, int64_t Kp) {
  const typename D::Row r = d.row(n);
  const int64_t K = c.K;
  // BF16 pair order and FP4 fp32 order spread a chunk's columns over all its vectors (zeros
  // beyond K): whole chunks.
  constexpr bool pairs = requires { D::F32_SPREAD; };
  for (int64_t k = 0; k < K; k += D::CH) {
    const int64_t nv = min64(D::CH, K - k);
    __m512 w[D::NF];
    d.f32(r, k, nv, w);
    for (int v = 0; v < D::NF; ++v)
      _mm512_mask_storeu_ps(dst + k + 16 * v, pairs ? __mmask16(0xffff) : mask16(nv - 16 * v), w[v]);
  }
  for (int64_t k = pairs ? round_up(K, D::CH) : K; k < Kp; ++k) dst[k] = 0.0f;
}

// Exact bf16 weights of row n, zero to Kp; false if the row is not safe (then the row is
// left for the fp32 mode).
template <class D>
bool decode_row_b16(const LinearCall& c, const D& d, int64_t n, uint16_t* dst, int64_t Kp) {
  typename D::Row r = d.row(n);
  if (!d.safe(r)) return false;
  const int64_t K = c.K;
  __mmask32 bad = 0;
  for (int64_t k = 0; k < K; k += D::CH) {
    const int64_t nv = min64(D::CH, K - k);
    __m512i w[D::NB > 0 ? D::NB : 1];
    d.b16(r, k, nv, w);
    for (int v = 0; v < D::NB; ++v) {
      if constexpr (D::CHECK) bad |= b16_out_of_range(w[v]);
      _mm512_mask_storeu_epi16(dst + k + 32 * v, mask32(nv - 32 * v), w[v]);
    }
  }
  for (int64_t k = K; k < Kp; ++k) dst[k] = 0;
  return bad == 0;
}

// Partial-sum decoders (FP4): the codes of row n in lane order, zero to Kp, and the scale
// vector of each of its Kp / CH chunks (as the GEMV uses them); false if the row is not safe.
template <class D>
bool decode_row_parts(const LinearCall& c, const D& d, int64_t n, uint16_t* dst, __m512* scales, int64_t Kp) {
  typename D::Row r = d.row(n);
  if (!d.safe(r)) return false;
  const int64_t K = c.K;
  d.prep_scales(r, static_cast<float*>(__builtin_alloca(size_t(D::scale_floats(K)) * sizeof(float))));
  for (int64_t k = 0; k < Kp; k += D::CH) {
    __m512i w[D::NB];
    if (k < K)
      d.b16_codes(r, k, min64(D::CH, K - k), w);
    else
      for (int v = 0; v < D::NB; ++v) w[v] = _mm512_setzero_si512();
    for (int v = 0; v < D::NB; ++v) _mm512_storeu_si512(dst + k + 32 * v, w[v]);
    scales[k / D::CH] = d.chunk_scales(r, k);
  }
  return true;
}

// FP4 rows for the vdpbf16ps tiles: each code times its block scale, in lane order, zero to
// Kp; false if the row is not safe. A safe row's scales keep every nonzero code * scale in
// the exact-product range (kScaleLo / kScaleHi), so adding the scale's exponent to the code's
// bf16 word (zeros left alone) is exact, and so is every dot product over these words: with x
// in that range too, the products and the sums never reach a subnormal or overflow, so each
// partial sum equals the unscaled one times its power of two, rounding for rounding. Hence
// acc + part (scaled words) has the bits of fma(part (codes), scale, acc), the sequence the
// GEMV runs, and the tile saves that multiply on the FMA ports.
bool decode_row_fp4_scaled(const LinearCall& c, const Fp4Dec& d, int64_t n, uint16_t* dst, int64_t Kp) {
  const Fp4Dec::Row r = d.row(n);
  if (!d.safe(r)) return false;
  const int64_t K = c.K;
  const __m512i blk8 = load_i(kT.idx_blk8), mag = _mm512_set1_epi16(0x7fff);
  for (int64_t k = 0; k < Kp; k += kFp4Chunk) {
    __m512i w[Fp4Dec::NB];
    if (k < K) {
      d.b16_codes(r, k, min64(kFp4Chunk, K - k), w);
      // Word j lies in block k / 32 + j / 8 of the row (blocks beyond K: zero codes).
      const int64_t nb = min64(4, (K - k) / 32);
      const __m128i sb = _mm_maskz_loadu_epi8(__mmask16((1u << nb) - 1), r.s + k / 32);
      const __m512i e = _mm512_slli_epi16(_mm512_sub_epi16(_mm512_cvtepu8_epi16(_mm256_castsi128_si256(sb)),
                                                           _mm512_set1_epi16(127)),
                                          7);
      const __m512i add = _mm512_permutexvar_epi16(blk8, e);
      for (int v = 0; v < Fp4Dec::NB; ++v)
        w[v] = _mm512_mask_add_epi16(w[v], _mm512_test_epi16_mask(w[v], mag), w[v], add);
    } else {
      for (int v = 0; v < Fp4Dec::NB; ++v) w[v] = _mm512_setzero_si512();
    }
    for (int v = 0; v < Fp4Dec::NB; ++v) _mm512_storeu_si512(dst + k + 32 * v, w[v]);
  }
  return true;
}

// The products of the FMA tile microkernels, one vector of columns at a time: fp32 FMAs (16
// columns: the fp32 mode's products, and bf16 mode's in dot-product order, see bf16_to_dp).
// The vdpbf16ps tiles (micro_dp, micro_parts_dp below) take kDotCols bf16 words a step, the
// bits of two of those FMAs.
struct FmaStep {
  using T = float;
  using V = __m512;
  static constexpr int64_t kCols = 16;
  static DI_INLINE V load(const T* p) { return _mm512_loadu_ps(p); }
  static DI_INLINE __m512 madd(__m512 acc, V x, V w) { return _mm512_fmadd_ps(x, w, acc); }
};
constexpr int64_t kDotCols = 32;

// acc[MR][NR] (vector partial sums, kept in memory between K blocks) += x[MR rows] . w[NR
// rows] over columns [k0, k1): the same per-lane sequence as one pass over K.
template <class S, int MR, int NR>
void micro(const typename S::T* x, int64_t xs, const typename S::T* w, int64_t ws, int64_t k0, int64_t k1,
           __m512* mem, bool first) {
  __m512 acc[MR][NR];
  for (int m = 0; m < MR; ++m)
    for (int r = 0; r < NR; ++r) acc[m][r] = first ? _mm512_setzero_ps() : _mm512_load_ps(mem + m * NR + r);
  for (int64_t k = k0; k < k1; k += S::kCols) {
    typename S::V xv[MR];
    for (int m = 0; m < MR; ++m) xv[m] = S::load(x + m * xs + k);
    for (int r = 0; r < NR; ++r) {
      const typename S::V wv = S::load(w + r * ws + k);
      for (int m = 0; m < MR; ++m) acc[m][r] = S::madd(acc[m][r], xv[m], wv);
    }
  }
  for (int m = 0; m < MR; ++m)
    for (int r = 0; r < NR; ++r) _mm512_store_ps(mem + m * NR + r, acc[m][r]);
}

// micro() for partial-sum decoders (FP4, kFp4Chunk columns a chunk) on codes and x in the
// GEMV's order: per chunk, part = its products from zero (= the GEMV's four bf16 dot
// products), then acc = fma(part, chunk scales, acc), the GEMV's sequence. sc: NR rows of
// per-chunk scale vectors, row stride nch.
// MR x NR partial sums fill the registers; the accumulators stay in mem (one load and store
// each per chunk, against 8 FMAs).
template <class S, int MR, int NR>
void micro_parts(const typename S::T* x, int64_t xs, const typename S::T* w, int64_t ws, const __m512* sc,
                 int64_t nch, int64_t k0, int64_t k1, __m512* mem, bool first) {
  if (first)
    for (int m = 0; m < MR; ++m)
      for (int r = 0; r < NR; ++r) mem[m * kNR + r] = _mm512_setzero_ps();
  for (int64_t k = k0; k < k1; k += kFp4Chunk) {
    __m512 part[MR][NR];
    for (int m = 0; m < MR; ++m)
      for (int r = 0; r < NR; ++r) part[m][r] = _mm512_setzero_ps();
    for (int64_t q = 0; q < kFp4Chunk; q += S::kCols) {
      typename S::V wv[NR];
      for (int r = 0; r < NR; ++r) wv[r] = S::load(w + r * ws + k + q);
      for (int m = 0; m < MR; ++m) {
        const typename S::V xv = S::load(x + m * xs + k + q);
        for (int r = 0; r < NR; ++r) part[m][r] = S::madd(part[m][r], xv, wv[r]);
      }
    }
    for (int r = 0; r < NR; ++r) {
      const __m512 s = sc[r * nch + k / kFp4Chunk];
      for (int m = 0; m < MR; ++m) mem[m * kNR + r] = _mm512_fmadd_ps(part[m][r], s, mem[m * kNR + r]);
    }
    // Keeps the accumulators in memory: the compiler otherwise carries them in registers
    // across chunks beside the 24 partial sums and spills both (FP4 M = 512: 185-196 ->
    // 188-212 GFLOP/s).
    asm volatile("" ::: "memory");
  }
}

// micro_parts() on vdpbf16ps with the accumulators in registers too: MR (<= 3) rows of x
// times four tile rows over all of K, then their sums straight to y. 3 x 4 partial sums and
// accumulators fill 24 registers, so no accumulator passes through memory per chunk (FP4
// 1024 x 2048, 1 thread: the 6 x 4 kernel with accumulators in memory ran at ~125 GFLOP/s
// against a 235 peak). w holds decode_row_fp4_scaled's words, so each chunk's partial sums
// come scaled and acc += part takes the place of micro_parts' fma with the chunk scales (the
// same bits, see there; 1 thread, hot, AMD Zen 5, FP4 M = 32 / 128: +10%).
template <int MR>
__attribute__((noinline)) void micro_parts_dp(const LinearCall& c, const uint16_t* x, const uint16_t* w, int64_t m0,
                                              int64_t n, int64_t n_rows) {
  const int64_t Kp = c.xs;
  __m512 acc[MR][kNR];
  for (int m = 0; m < MR; ++m)
    for (int r = 0; r < kNR; ++r) acc[m][r] = _mm512_setzero_ps();
  for (int64_t k = 0; k < Kp; k += kFp4Chunk) {
    __m512 part[MR][kNR];
    for (int m = 0; m < MR; ++m)
      for (int r = 0; r < kNR; ++r) part[m][r] = _mm512_setzero_ps();
    for (int64_t q = 0; q < kFp4Chunk; q += kDotCols) {
      __m512i wv[kNR];
      for (int r = 0; r < kNR; ++r) wv[r] = load_i(w + r * Kp + k + q);
      for (int m = 0; m < MR; ++m) {
        const __m512i xv = load_i(x + m * Kp + k + q);
        for (int r = 0; r < kNR; ++r) part[m][r] = dp(part[m][r], xv, wv[r]);
      }
    }
    for (int r = 0; r < kNR; ++r)
      for (int m = 0; m < MR; ++m) acc[m][r] = _mm512_add_ps(part[m][r], acc[m][r]);
  }
  for (int m = 0; m < MR; ++m)
    store_sums(c.y + (m0 + m) * c.N + n, reduce4(acc[m][0], acc[m][1], acc[m][2], acc[m][3]), n_rows);
}

// micro() on vdpbf16ps over all of K with the accumulators in registers: MR (<= 6) rows of x
// times four tile rows, then their sums straight to y.
template <int MR>
__attribute__((noinline)) void micro_dp(const LinearCall& c, const uint16_t* x, const uint16_t* w, int64_t m0,
                                        int64_t n, int64_t n_rows, const uint16_t* pf = nullptr) {
  const int64_t Kp = c.xs;
  __m512 acc[MR][kNR];
  for (int m = 0; m < MR; ++m)
    for (int r = 0; r < kNR; ++r) acc[m][r] = _mm512_setzero_ps();
  for (int64_t k = 0; k < Kp; k += kDotCols) {
    if (pf)
      for (int r = 0; r < kNR; ++r) prefetch_weights(pf + r * Kp + k);
    __m512i xv[MR];
    for (int m = 0; m < MR; ++m) xv[m] = load_i(x + m * Kp + k);
    for (int r = 0; r < kNR; ++r) {
      const __m512i wv = load_i(w + r * Kp + k);
      for (int m = 0; m < MR; ++m) acc[m][r] = dp(acc[m][r], xv[m], wv);
    }
  }
  for (int m = 0; m < MR; ++m)
    store_sums(c.y + (m0 + m) * c.N + n, reduce4(acc[m][0], acc[m][1], acc[m][2], acc[m][3]), n_rows);
}

// A tile times every row of x, weight-stationary: each group of four tile rows (16 KiB at
// K = 2048, in L1) runs over a block of activation rows: about 384 KiB of bf16 rows (a
// multiple of 6, at least 6), which stay in L2 beside the tile while every group runs over
// them (a prefill's 512 rows of 2048, 2 MiB, would otherwise stream from L3 once per
// group). f(rows [mb0, mb1), the group's first tile row r0); any blocking gives every output
// its own dot, so the same bits.
template <class F>
DI_INLINE void over_tile_groups(const LinearCall& c, int64_t rows_p, F f) {
  const int64_t Kp = c.xs, M = c.M;
  int64_t MB = int64_t(384) * 1024 / (Kp * 2) / 6 * 6;
  if (MB < 6) MB = 6;
  for (int64_t mb0 = 0; mb0 < M; mb0 += MB)
    for (int64_t r0 = 0; r0 < rows_p; r0 += kNR) f(mb0, min64(M, mb0 + MB), r0);
}

void tile_dp(const LinearCall& c, const uint16_t* tile, int64_t rows, int64_t rows_p, int64_t n_base,
             bool in_place = false) {
  const int64_t Kp = c.xs;
  over_tile_groups(c, rows_p, [&](int64_t mb0, int64_t mb1, int64_t r0) __attribute__((always_inline)) {
    const uint16_t* w = tile + r0 * Kp;
    const int64_t n = n_base + r0, n_rows = rows - r0;
    int64_t m0 = mb0;
    // Rows multiplied in place come from memory: the first pass over four of them fetches
    // the next four (into L2) while it works.
    const uint16_t* pf = in_place && mb0 == 0 && r0 + 2 * kNR <= rows_p ? w + kNR * Kp : nullptr;
    if (pf && mb1 - m0 >= 6) {
      micro_dp<6>(c, c.xb + m0 * Kp, w, m0, n, n_rows, pf);
      m0 += 6;
    }
    for (; m0 + 6 <= mb1; m0 += 6) micro_dp<6>(c, c.xb + m0 * Kp, w, m0, n, n_rows);
    switch (mb1 - m0) {
      case 5: micro_dp<5>(c, c.xb + m0 * Kp, w, m0, n, n_rows); break;
      case 4: micro_dp<4>(c, c.xb + m0 * Kp, w, m0, n, n_rows); break;
      case 3: micro_dp<3>(c, c.xb + m0 * Kp, w, m0, n, n_rows); break;
      case 2: micro_dp<2>(c, c.xb + m0 * Kp, w, m0, n, n_rows); break;
      case 1: micro_dp<1>(c, c.xb + m0 * Kp, w, m0, n, n_rows); break;
      default: break;
    }
  });
}

// The FP4 dp tile (decode_row_fp4_scaled's rows) over x three rows at a time.
void tile_parts_dp(const LinearCall& c, const uint16_t* tile, int64_t rows, int64_t rows_p, int64_t n_base) {
  const int64_t Kp = c.xs;
  over_tile_groups(c, rows_p, [&](int64_t mb0, int64_t mb1, int64_t r0) __attribute__((always_inline)) {
    const uint16_t* w = tile + r0 * Kp;
    const int64_t n = n_base + r0, n_rows = rows - r0;
    int64_t m0 = mb0;
    for (; m0 + 3 <= mb1; m0 += 3) micro_parts_dp<3>(c, c.xb + m0 * Kp, w, m0, n, n_rows);
    if (mb1 - m0 == 2) micro_parts_dp<2>(c, c.xb + m0 * Kp, w, m0, n, n_rows);
    if (mb1 - m0 == 1) micro_parts_dp<1>(c, c.xb + m0 * Kp, w, m0, n, n_rows);
  });
}

// Tile height: about 512 KiB of fp32 tile, a multiple of kNR, at most 48 rows.
constexpr int64_t kMaxTile = 48;
int64_t tile_rows(int64_t Kp) {
  int64_t nt = (int64_t(512) * 1024 / (Kp * 4)) / kNR * kNR;
  return nt < kNR ? kNR : nt > kMaxTile ? kMaxTile : nt;
}

// The fp32 tile, the accumulators, then (partial-sum tiles) each row's chunk scale vectors
// and a row of bf16 words the tile rows are decoded through.
size_t gemm_scratch(const LinearCall& c) {
  const int64_t Kp = c.xs, NT = tile_rows(Kp);
  return size_t(NT * Kp) * sizeof(float) + size_t(kMaxTile / kNR) * kMR * kNR * 64 +
         size_t(NT * (Kp / kFp4Chunk + 1)) * 64 + size_t(Kp) * sizeof(uint16_t) + 64;
}

// MR rows of x (MR <= kMR: the last, partial row group runs with its exact row count) times
// the tile (kParts: partial-sum tiles with their chunk scales sc), K in blocks of 1024
// columns (x block and accumulators stay in L1, weight rows stream from the L2-resident
// tile). Not inlined: inside its caller the compiler kept the partial-sum tiles' 24 partial
// sums worse (190 -> 133 GFLOP/s).
template <class S, bool kParts, int MR>
__attribute__((noinline)) void tile_group_k(const LinearCall& c, const typename S::T* xg, const typename S::T* tile,
                                           const __m512* sc, int64_t rows, int64_t rows_p, __m512* accs, int64_t m0,
                                           int64_t n_base) {
  constexpr int64_t kc = 1024;
  static_assert(kc % kFp4Chunk == 0, "chunks whole in a K block");
  const int64_t Kp = c.xs, nch = Kp / kFp4Chunk;
  for (int64_t k0 = 0; k0 < Kp; k0 += kc) {
    const int64_t k1 = min64(Kp, k0 + kc);
    for (int64_t r0 = 0; r0 < rows_p; r0 += kNR) {
      __m512* a = accs + (r0 / kNR) * kMR * kNR;
      if constexpr (kParts)
        micro_parts<S, MR, kNR>(xg, Kp, tile + r0 * Kp, Kp, sc + r0 * nch, nch, k0, k1, a, k0 == 0);
      else
        micro<S, MR, kNR>(xg, Kp, tile + r0 * Kp, Kp, k0, k1, a, k0 == 0);
    }
  }
  static_assert(kNR == 4, "reduce4 takes four weight rows");
  for (int64_t r0 = 0; r0 < rows_p; r0 += kNR) {
    const __m512* a = accs + (r0 / kNR) * kMR * kNR;
    for (int64_t m = 0; m < MR; ++m)
      store_sums(c.y + (m0 + m) * c.N + n_base + r0, reduce4(a[m * kNR], a[m * kNR + 1], a[m * kNR + 2], a[m * kNR + 3]),
                 rows - r0);
  }
}

template <class S, bool kParts>
void tile_group(const LinearCall& c, const typename S::T* xg, const typename S::T* tile, const __m512* sc,
                int64_t rows, int64_t rows_p, __m512* accs, int64_t m0, int64_t n_base) {
  static_assert(kMR == 6, "row-count dispatch below");
  switch (min64(kMR, c.M - m0)) {
    case 1: return tile_group_k<S, kParts, 1>(c, xg, tile, sc, rows, rows_p, accs, m0, n_base);
    case 2: return tile_group_k<S, kParts, 2>(c, xg, tile, sc, rows, rows_p, accs, m0, n_base);
    case 3: return tile_group_k<S, kParts, 3>(c, xg, tile, sc, rows, rows_p, accs, m0, n_base);
    case 4: return tile_group_k<S, kParts, 4>(c, xg, tile, sc, rows, rows_p, accs, m0, n_base);
    case 5: return tile_group_k<S, kParts, 5>(c, xg, tile, sc, rows, rows_p, accs, m0, n_base);
    default: return tile_group_k<S, kParts, 6>(c, xg, tile, sc, rows, rows_p, accs, m0, n_base);
  }
}

// kDpTiles: bf16 mode keeps the tile in bf16 and runs vdpbf16ps on it and xb (micro_b16);
// otherwise it widens both into dot-product order fp32 and runs FMAs (micro). Same bits;
// which is faster depends on the CPU (dp_tiles_are_faster).
// Whether BF16 weight rows [n, n + rows) can be the dp tile as stored: whole groups of four
// rows, no column padding (K a multiple of 32, so rows lie Kp words apart), and every row seen
// in range (row_check memo, set by the GEMV and by the tiles' decode below).
inline bool in_place_bf16_rows(const LinearCall& c, int64_t n, int64_t rows) {
  if (!c.W->row_check || rows % kNR != 0 || c.K != c.xs) return false;
  for (int64_t r = 0; r < rows; ++r)
    if (__atomic_load_n(c.W->row_check + n + r, __ATOMIC_RELAXED) != 1) return false;
  return true;
}

template <class D, bool kDpTiles>
void gemm_rows(const LinearCall& c, const D& d, int64_t n0, int64_t n1, void* scratch) {
  const int64_t Kp = c.xs, NT = tile_rows(Kp), M = c.M;
  float* tile = static_cast<float*>(scratch);
  __m512* accs = reinterpret_cast<__m512*>(tile + NT * Kp);
  const bool bf = c.use_bf16 && D::B16;
  if (bf && !kDpTiles && !c.xd) throw std::logic_error("avx512 gemm: bf16 mode without the dot-product order x");
  uint16_t* tileb = reinterpret_cast<uint16_t*>(tile);  // dp tiles: bf16 rows of Kp words
  constexpr bool parts = partial_sums<D>();
  // Partial-sum tiles keep each row's chunk scale vectors past the accumulators, then the row
  // of bf16 words each bf16-mode tile row is decoded into (see gemm_scratch).
  const int64_t nch = Kp / kFp4Chunk;
  __m512* scales = accs + (kMaxTile / kNR) * kMR * kNR;
  uint16_t* rowb = reinterpret_cast<uint16_t*>(scales + NT * nch);
  for (int64_t nt0 = n0; nt0 < n1; nt0 += NT) {
    const int64_t rows = min64(NT, n1 - nt0), rows_p = round_up(rows, kNR);
    if constexpr (kDpTiles && std::is_same_v<D, Bf16Dec>) {
      // BF16 rows already are the tile (the head: 129280 of them, 32 products per row at a
      // decode batch of 32): multiplied in place once every row was seen in range.
      if (bf && in_place_bf16_rows(c, nt0, rows)) {
        tile_dp(c, reinterpret_cast<const uint16_t*>(c.W->data) + nt0 * Kp, rows, rows, nt0, true);
        continue;
      }
    }
    uint64_t f32_rows = 0;  // bf16 mode: rows left for the fp32 mode
    if (bf) {
      // bf16 mode as FMAs (the driver's xd): each row decoded to bf16, then widened into
      // dot-product order fp32.
      for (int64_t r = 0; r < rows; ++r) {
        uint16_t* dst = kDpTiles ? tileb + r * Kp : rowb;
        bool ok;
        if constexpr (parts && kDpTiles)
          ok = decode_row_fp4_scaled(c, d, nt0 + r, dst, Kp);
        else if constexpr (parts)
          ok = decode_row_parts(c, d, nt0 + r, dst, scales + r * nch, Kp);
        else
          ok = decode_row_b16(c, d, nt0 + r, dst, Kp);
        if constexpr (std::is_same_v<D, Bf16Dec>)
          if (c.W->row_check) __atomic_store_n(c.W->row_check + nt0 + r, uint8_t(ok ? 1 : 2), __ATOMIC_RELAXED);
        if (ok) {
          if (!kDpTiles) row_to_dp(rowb, tile + r * Kp, Kp);
        } else {
          f32_rows |= uint64_t(1) << r;
          if (kDpTiles)
            std::memset(dst, 0, size_t(Kp) * sizeof(uint16_t));
          else
            std::memset(tile + r * Kp, 0, size_t(Kp) * sizeof(float));
          if constexpr (parts) std::memset(static_cast<void*>(scales + r * nch), 0, size_t(nch) * sizeof(__m512));
        }
      }
      if constexpr (parts)
        std::memset(static_cast<void*>(scales + rows * nch), 0, size_t((rows_p - rows) * nch) * sizeof(__m512));
    } else {
      for (int64_t r = 0; r < rows; ++r) decode_row_f32(c, d, nt0 + r, tile + r * Kp, Kp);
    }
    if (bf && kDpTiles) {
      std::memset(tileb + rows * Kp, 0, size_t(rows_p - rows) * Kp * sizeof(uint16_t));
      if constexpr (parts)
        tile_parts_dp(c, tileb, rows, rows_p, nt0);
      else
        tile_dp(c, tileb, rows, rows_p, nt0);
      for (int64_t r = 0; r < rows; ++r)
        if (f32_rows >> r & 1) f32_row_all_m(c, d, nt0 + r);
      continue;
    }
    std::memset(tile + rows * Kp, 0, size_t(rows_p - rows) * Kp * sizeof(float));
    const float* x = bf ? c.xd : c.xf;
    for (int64_t m0 = 0; m0 < M; m0 += kMR) {
      if (bf && parts)
        tile_group<FmaStep, true>(c, x + m0 * Kp, tile, scales, rows, rows_p, accs, m0, nt0);
      else
        tile_group<FmaStep, false>(c, x + m0 * Kp, tile, nullptr, rows, rows_p, accs, m0, nt0);
    }
    for (int64_t r = 0; r < rows; ++r)
      if (f32_rows >> r & 1) f32_row_all_m(c, d, nt0 + r);
  }
}

// ------------------------------------------------------------------------------ entry points

// Fused decode + dot up to 8 activation rows (decode batches, speculative verify chunks):
// each weight vector is decoded once for all rows. With weights prefetched into L2 this beats
// decoding a tile into L2 and running the microkernel (bench_kernels, cold weights, M = 6:
// FP8 7.0 -> 10.6 GB/s, FP4 5.5 -> 7.1, the BF16 head 16.6 -> 25.8; M = 3: 9.0 -> 15.9,
// 7.9 -> 12.4, 16.6 -> 27.8). Both paths give every row the same bits (RowInvariance).
constexpr int64_t kGemvMaxM = 8;

// FP4 in bf16 mode over kFp4MultiRowMinM..kFp4MultiRowMaxM rows: fp4_multirow_avx512.cpp, each
// code chunk decoded once for every row (the same bits); rows out of range come back here. It
// runs on vdpbf16ps, as the GEMV does, so where the FMA tiles are the faster ones (dp_tiles
// false) the calls above kGemvMaxM rows keep them.
bool fp4_multirow(const LinearCall& c, bool dp_tiles) {
  return c.W->format == WeightFormat::FP4_BLOCK && c.use_bf16 && c.M >= kFp4MultiRowMinM &&
         c.M <= (dp_tiles ? kFp4MultiRowMaxM : kGemvMaxM);
}
void fp4_f32_row(const LinearCall& c, int64_t n) { f32_row_all_m(c, Fp4Dec(c), n); }

template <class D, bool kDpTiles>
void rows_for(const LinearCall& c, int64_t n0, int64_t n1, void* scratch) {
  if constexpr (std::is_same_v<D, Fp4Dec>)
    if (fp4_multirow(c, kDpTiles)) return fp4_multirow_avx512(c, n0, n1, scratch, fp4_f32_row);
  const D d(c);
  if (c.M <= kGemvMaxM) {
    if constexpr (std::is_same_v<D, Bf16Dec>)
      return bf16_gemv_avx512(c, n0, n1);  // BF16 (the output head): its own GEMV
    else
      return gemv_rows<D>(c, d, n0, n1);
  }
  gemm_rows<D, kDpTiles>(c, d, n0, n1, scratch);
}

template <bool kDpTiles>
void rows(const LinearCall& c, int64_t n0, int64_t n1, void* scratch) {
  switch (c.W->format) {
    case WeightFormat::F32: return rows_for<F32Dec, kDpTiles>(c, n0, n1, scratch);
    case WeightFormat::BF16: return rows_for<Bf16Dec, kDpTiles>(c, n0, n1, scratch);
    case WeightFormat::FP8_BLOCK: return rows_for<Fp8Dec, kDpTiles>(c, n0, n1, scratch);
    case WeightFormat::FP4_BLOCK: return rows_for<Fp4Dec, kDpTiles>(c, n0, n1, scratch);
  }
}

// (Both kernel tables share it: enough for the tiles and for fp4_multirow_avx512.)
size_t scratch_bytes(const LinearCall& c) {
  const size_t tiles = c.M <= kGemvMaxM ? 0 : gemm_scratch(c);
  const size_t fp4 = fp4_multirow(c, true) ? fp4_multirow_scratch_avx512(c) : 0;
  return fp4 > tiles ? fp4 : tiles;
}

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

// ------------------------------------------------------------------------------ shared algorithms
// act-quant, swiglu, the hyper-connection mixes and the indexer's score combination are
// cpu_kernels_isa_impl.h's templates, instantiated here over vectors of 16 in this file's own
// namespace (cpu_isa.h: no code shared with other files). A partial vector is a lane mask.

namespace avx512 {

struct Ops {
  using F = __m512;
  using I = __m512i;
  using D = __m512d;
  static constexpr int64_t kLanes = 16;
  static constexpr bool kBf16 = true;

  static DI_INLINE F zero() { return _mm512_setzero_ps(); }
  static DI_INLINE F set1(float f) { return _mm512_set1_ps(f); }
  static DI_INLINE F load(const float* p) { return _mm512_loadu_ps(p); }
  static DI_INLINE void store(float* p, F v) { _mm512_storeu_ps(p, v); }
  static DI_INLINE F add(F a, F b) { return _mm512_add_ps(a, b); }
  static DI_INLINE F sub(F a, F b) { return _mm512_sub_ps(a, b); }
  static DI_INLINE F mul(F a, F b) { return _mm512_mul_ps(a, b); }
  static DI_INLINE F fmadd(F a, F b, F c) { return _mm512_fmadd_ps(a, b, c); }
  static DI_INLINE F min(F a, F b) { return _mm512_min_ps(a, b); }
  static DI_INLINE F max(F a, F b) { return _mm512_max_ps(a, b); }
  static DI_INLINE F abs(F v) {
    return _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(v), _mm512_set1_epi32(0x7fffffff)));
  }
  static DI_INLINE float hmax(F v) { return _mm512_reduce_max_ps(v); }
  static DI_INLINE float first(F v) { return _mm512_cvtss_f32(v); }

  static DI_INLINE I bits(F v) { return _mm512_castps_si512(v); }
  static DI_INLINE F from_bits(I v) { return _mm512_castsi512_ps(v); }
  static DI_INLINE I set1_i(int v) { return _mm512_set1_epi32(v); }
  static DI_INLINE I and_i(I a, I b) { return _mm512_and_si512(a, b); }
  static DI_INLINE I or_i(I a, I b) { return _mm512_or_si512(a, b); }
  static DI_INLINE I andnot_i(I a, I b) { return _mm512_andnot_si512(a, b); }
  static DI_INLINE I add_i32(I a, I b) { return _mm512_add_epi32(a, b); }
  static DI_INLINE I max_i32(I a, I b) { return _mm512_max_epi32(a, b); }
  template <int N>
  static DI_INLINE I shr_i32(I v) { return _mm512_srli_epi32(v, N); }
  template <int N>
  static DI_INLINE I shl_i32(I v) { return _mm512_slli_epi32(v, N); }
  static DI_INLINE I where_nan(F h, I a, I b) {
    return _mm512_mask_mov_epi32(b, _mm512_cmp_ps_mask(h, h, _CMP_UNORD_Q), a);
  }
  static DI_INLINE void store_bf16_bits(uint16_t* p, I v) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm512_cvtepi32_epi16(_mm512_srli_epi32(v, 16)));
  }

  static DI_INLINE D zero_d() { return _mm512_setzero_pd(); }
  static DI_INLINE D set1_d(double v) { return _mm512_set1_pd(v); }
  static DI_INLINE D add_d(D a, D b) { return _mm512_add_pd(a, b); }
  static DI_INLINE D sub_d(D a, D b) { return _mm512_sub_pd(a, b); }
  static DI_INLINE D mul_d(D a, D b) { return _mm512_mul_pd(a, b); }
  static DI_INLINE D div_d(D a, D b) { return _mm512_div_pd(a, b); }
  static DI_INLINE D min_d(D a, D b) { return _mm512_min_pd(a, b); }
  static DI_INLINE D max_d(D a, D b) { return _mm512_max_pd(a, b); }
  static DI_INLINE D fmadd_d(D a, D b, D c) { return _mm512_fmadd_pd(a, b, c); }
  static DI_INLINE D fnmadd_d(D a, D b, D c) { return _mm512_fnmadd_pd(a, b, c); }
  static DI_INLINE D round_d(D v) { return _mm512_roundscale_pd(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  static DI_INLINE void store_d(double* p, D v) { _mm512_store_pd(p, v); }
  static DI_INLINE D times_pow2_d(D p, D n) { return _mm512_scalef_pd(p, n); }  // vscalefpd
  static DI_INLINE void widen(F v, D& lo, D& hi) {
    lo = _mm512_cvtps_pd(_mm512_castps512_ps256(v));
    hi = _mm512_cvtps_pd(_mm512_extractf32x8_ps(v, 1));
  }
  static DI_INLINE F narrow(D lo, D hi) {
    return _mm512_insertf32x8(_mm512_castps256_ps512(_mm512_cvtpd_ps(lo)), _mm512_cvtpd_ps(hi), 1);
  }

  using Part = __mmask16;  // the lanes in use
  template <class Body>
  static DI_INLINE void for_parts(int64_t n, Body&& body) {
    for (int64_t i = 0; i < n; i += 16) body(i, mask16(n - i));
  }
  static DI_INLINE F load_part(const float* p, Part m) { return _mm512_maskz_loadu_ps(m, p); }
  static DI_INLINE void store_part(float* p, Part m, F v) { _mm512_mask_storeu_ps(p, m, v); }
  static DI_INLINE F load_narrowed(const double* p, Part m) {
    return narrow(_mm512_maskz_loadu_pd(__mmask8(m), p), _mm512_maskz_loadu_pd(__mmask8(m >> 8), p + 8));
  }
};

#include "kernels/cpu/cpu_kernels_isa_impl.h"

}  // namespace avx512
// Rows [m0, m1) of xb (stride xs, a multiple of kFp4Chunk) into FP4 lane order, in place.
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
  DI_INLINE avx512::VecBits get() const {
    avx512::VecBits v;
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
    avx512::index_query_add(*info, lanes.get());
  }
  info->data = pairs;
  info->heads_pad = heads_pad;
  info->vectors = vectors;
}

// index_dots_exact for heads in groups of NV vectors of 16; keys side by side for 12-16
// independent dot-product chains (a core issues two a cycle, each some cycles long).
template <int NV>
void index_dots_exact_nv(const IndexQueryExact& q, int64_t n_heads, int64_t dim, const float* const* keys,
                        int64_t n_keys, double* out, uint8_t* exact) {
  constexpr int kKeys = NV == 1 ? 16 : NV == 2 ? 8 : 4;
  const int64_t np = (dim + 1) / 2;
  const int lg = avx512::ceil_log2(dim);
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
      const avx512::VecBits k = lanes.get();
      exact[s0 + j] = uint8_t(avx512::index_key_exact(q, k, lg));
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

// IsaKernels::bf16_dot_chains: chain j starts at x0 + j / 1024 in every lane and adds
// 0.5 * 2^-10 twice a step (one vdpbf16ps: a pair of exact products).
double bf16_dot_chains(int64_t iters, float x0, int64_t* macs) {
  const __m512i half = _mm512_set1_epi16(0x3f00), tiny = _mm512_set1_epi16(0x3a80);  // bf16 0.5, 2^-10
  __m512 a[kFmaChains];
  for (int j = 0; j < kFmaChains; ++j) a[j] = _mm512_set1_ps(x0 + float(j) / 1024.0f);
  for (int64_t i = 0; i < iters; ++i)
    for (int j = 0; j < kFmaChains; ++j) a[j] = dp(a[j], half, tiny);
  double total = 0;
  alignas(64) float lanes[16];
  for (int j = 0; j < kFmaChains; ++j) {
    _mm512_store_ps(lanes, a[j]);
    for (int l = 0; l < 16; ++l) total += double(lanes[l]);
  }
  *macs = iters * kFmaChains * 32;
  return total;
}

constexpr IsaKernels kKernels = {
    .name = "avx512",
    .bf16 = true,
    .k_align = 64,
    .m_align = kMR,
    .gemv_max_m = kGemvMaxM,
    .act_align = 16,
    .fp8_max_scale = 255,
    .gemv_grain = 8,
    .plain_m1_rowwise = true,
    .gemm_grain = kNR,
    .prep_float = prep_float,
    .prep_act_quant = avx512::prep_act_quant<avx512::Ops>,
    .act_quant = avx512::act_quant<avx512::Ops>,
    .scratch_bytes = scratch_bytes,
    .rows = rows<false>,
    .index_dots = index_dots,
    .fp4_lane_order = fp4_lane_order,
    .bf16_pair_order = bf16_pair_order,
    .fp4_f32_order = fp4_f32_order,
    .bf16_dp_order = bf16_dp_order,
    .index_query_exact = index_query_exact,
    .index_dots_exact = index_dots_exact,
    .index_combine = avx512::index_combine<avx512::Ops>,
    .hc_expand = avx512::hc_expand<avx512::Ops>,
    .hc_collapse = avx512::hc_collapse<avx512::Ops>,
    .dot_f64 = dot_f64,
    .dot_f64_4 = dot_f64_4,
    .swiglu = avx512::swiglu<avx512::Ops>,
    .fma_chains = avx512::fma_chains<avx512::Ops>,
    .bf16_dot_chains = bf16_dot_chains,
};

// The same without bf16 mode (fp32 mode for every row), for a CPU whose vdpbf16ps does not
// round like two FMAs: the tiled products could not give the GEMV's bits in bf16 mode.
constexpr IsaKernels without_bf16(IsaKernels k) {
  k.bf16 = false;
  k.bf16_dp_order = nullptr;
  return k;
}
constexpr IsaKernels kKernelsNoBf16 = without_bf16(kKernels);

// bf16 mode's tiles on vdpbf16ps, and no xd: the GEMV of 3-8 rows runs vdpbf16ps too.
constexpr IsaKernels with_dp_tiles(IsaKernels k) {
  k.rows = rows<true>;
  k.bf16_dp_order = nullptr;
  return k;
}
constexpr IsaKernels kKernelsDpTiles = with_dp_tiles(kKernels);

// Thread CPU seconds of `f` (best of three runs: an interruption only adds time).
template <class F>
double best_cpu_seconds(F f) {
  double best = 1e30;
  for (int i = 0; i < 3; ++i) {
    timespec t0, t1;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t0);
    f();
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t1);
    const double seconds = double(t1.tv_sec - t0.tv_sec) + 1e-9 * double(t1.tv_nsec - t0.tv_nsec);
    best = seconds < best ? seconds : best;
  }
  return best;
}

// Whether vdpbf16ps does its 32 multiply-adds in clearly less time than two FMAs do (AMD Zen 4:
// one instruction a cycle, like an FMA, so twice the rate; some Intel cores: half an FMA's
// rate, the same multiply-adds), timed on ~1 ms of each (the chains the peaks are measured with).
bool dp_tiles_are_faster() {
  constexpr int64_t kSteps = int64_t(1) << 15;
  volatile double sink = 0;
  int64_t macs = 0;
  const double fma = best_cpu_seconds([&] { sink = sink + avx512::fma_chains<avx512::Ops>(kSteps, 1.0f, &macs); });
  const double dot = best_cpu_seconds([&] { sink = sink + bf16_dot_chains(kSteps, 1.0f, &macs); });
  // One vdpbf16ps stands for two FMAs: faster when it takes under 0.8 of their time.
  return dot < 0.8 * 2.0 * fma;
}

// Whether vdpbf16ps gives fma(even, fma(odd, acc)) on this CPU, over normal values of mixed
// magnitudes (a fixed pseudo-random set; 2048 lanes).
bool bf16_dot_is_two_fmas() {
  uint32_t state = 12345;
  auto next = [&state] {
    state = state * 1664525u + 1013904223u;
    return state;
  };
  // A normal fp32 with a random mantissa, sign and exponent in [2^-20, 2^20), as bf16 or not.
  auto value = [&](bool bf16) {
    uint32_t b = (next() & 0x807fffffu) | (uint32_t(127 - 20 + int(next() % 40)) << 23);
    if (bf16) b &= 0xffff0000u;
    return f32_of(b);
  };
  for (int round = 0; round < 128; ++round) {
    alignas(64) float acc[16], out[16];
    alignas(64) uint16_t a[32], b[32];
    for (int i = 0; i < 16; ++i) acc[i] = value(false);
    for (int i = 0; i < 32; ++i) {
      const float fa = value(true), fb = value(true);
      uint32_t ua, ub;
      std::memcpy(&ua, &fa, 4);
      std::memcpy(&ub, &fb, 4);
      a[i] = uint16_t(ua >> 16);
      b[i] = uint16_t(ub >> 16);
    }
    _mm512_store_ps(out, dp(_mm512_load_ps(acc), load_i(a), load_i(b)));
    for (int i = 0; i < 16; ++i) {
      auto f = [](uint16_t h) { return f32_of(uint32_t(h) << 16); };
      const float want = __builtin_fmaf(f(a[2 * i]), f(b[2 * i]), __builtin_fmaf(f(a[2 * i + 1]), f(b[2 * i + 1]), acc[i]));
      if (std::memcmp(&want, &out[i], 4) != 0) return false;
    }
  }
  return true;
}

}  // namespace

const IsaKernels& avx512_kernels() {
  static const bool two_fmas = bf16_dot_is_two_fmas();
  static const bool dp_tiles = two_fmas && dp_tiles_are_faster();
  return !two_fmas ? kKernelsNoBf16 : dp_tiles ? kKernelsDpTiles : kKernels;
}

const IsaKernels& avx512_kernels_with_tiles(bool dp_tiles) {
  static const bool two_fmas = bf16_dot_is_two_fmas();
  return !two_fmas ? kKernelsNoBf16 : dp_tiles ? kKernelsDpTiles : kKernels;
}

}  // namespace deepinfer::kernels::cpu
