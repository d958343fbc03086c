// aarch64 Advanced SIMD kernels (neon_kernels(), and everything of neon_bf16_kernels() but its
// bf16-mode products: neon_kernels.h). Compiled for the base architecture only: NEON is part
// of every aarch64 CPU Linux runs on. See cpu_isa.h for the rules of this file (no templates
// or inline functions shared with other files, no static initialisers that run code). The
// algorithms every ISA shares (act-quant, SwiGLU, the hyper-connection mixes, the indexer's
// score combination) are cpu_kernels_isa_impl.h's, instantiated below over vectors of 4.
//
// Arithmetic: the fp32 products run the x86 kernels' operation sequences lane for lane, so
// every output has the bits an x86 machine gives (tests/kernels/test_cross_isa_bits.cpp):
//   neon_kernels(): the AVX2 kernels' (cpu_kernels_avx2.cpp)
//     acc = 0 (8 lanes: an AVX2 ymm register as two NEON registers, lanes 0-3 and 4-7);
//     for each 8-column vector j over [0, Kp): acc = fma(x_j, w_j, acc);
//     y = ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7)) (AVX2's hsum),
//     columns in the AVX2 kernels' orders (natural for F32 / BF16; FP8 fp32 order, FP4 fp32
//     order: the driver rearranges x with fp8_f32_order / fp4_f32_order alike). FP8 rows
//     holding a NaN code give NaN (the quiet NaN 0x7fc00000), and FP8 scale bytes above 134
//     send the call to the Scalar path, both as on AVX2.
//   neon_bf16_kernels()' fp32 mode: the AVX-512 kernels' fp32 mode (cpu_kernels_avx512.cpp)
//     16 lanes (four registers, register g lanes 4g .. 4g + 3) over 16-column vectors, columns
//     natural for F32 / FP8, in BF16 pair order and in the AVX-512 FP4 fp32 order; y = its
//     reduce4 lane sum (G0 + G2) + (G1 + G3), Gg = (l0 + l2) + (l1 + l3) of register g.
// w the exact weights (code times block scale, rounded once where the product is subnormal),
// zero beyond K. The same operation sequence runs for any M (a tile of weight rows is decoded
// once into the thread's scratch, then a register-blocked kernel runs every activation row
// over it), any thread split and any batch.
#include <arm_neon.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/neon_kernels.h"

namespace deepinfer::kernels::cpu {

namespace {

#define DI_INLINE inline __attribute__((always_inline))

inline float f32_of(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}
inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
inline int64_t round_up(int64_t a, int64_t b) { return (a + b - 1) / b * b; }

constexpr uint32_t kQuietNan = 0x7fc00000u;

// ------------------------------------------------------------------------------ FP4 tables

// fp32 bits of e2m1 code `code` times 2^(b - 127) (b = 255: a NaN with the code's sign), as
// an fp32 multiplication gives it: subnormal products exact (a code has at most two significant
// bits), overflow to inf. Every such value is a bf16 value (its low 16 bits are zero).
constexpr uint32_t e2m1_times_e8m0_bits(int code, int b) {
  const uint32_t sign = (code & 8) ? 0x80000000u : 0u;
  const int mag = code & 7;
  if (b == 255) return sign | kQuietNan;
  if (mag == 0) return sign;
  // magnitude = m2 * 2^e2 with m2 in {2, 3}: 0.5 1 1.5 2 3 4 6 for mag 1..7
  const int m2 = (mag >= 2 && (mag & 1)) ? 3 : 2;
  const int e2 = mag == 1 ? -2 : mag / 2 - 2;
  const int e = e2 + 1 + b - 127;  // the value is (m2 / 2) * 2^e, m2 / 2 in {1, 1.5}
  if (e > 127) return sign | 0x7f800000u;
  if (e >= -126) return sign | uint32_t(e + 127) << 23 | (m2 == 3 ? 0x00400000u : 0u);
  return sign | uint32_t(m2) << (e2 + b + 22);  // subnormal: m2 * 2^(e2 + b - 127) in units of 2^-149
}
static_assert(e2m1_times_e8m0_bits(1, 0) == 0x00200000u && e2m1_times_e8m0_bits(15, 127) == 0xc0c00000u &&
                  e2m1_times_e8m0_bits(7, 254) == 0x7f800000u && e2m1_times_e8m0_bits(3, 127) == 0x3fc00000u &&
                  e2m1_times_e8m0_bits(5, 0) == 0x00c00000u && e2m1_times_e8m0_bits(2, 254) == 0x7f000000u,
              "FP4 table: 0.5 * 2^-127, -6, 6 * 2^127 (inf), 1.5, 3 * 2^-127, 2^127");

// For each scale byte: the low bytes of the 16 codes' values' top halves, then their high bytes
// (byte-table lookups by the 4-bit code rebuild the bf16 word, i.e. the fp32 value).
struct Fp4Tables {
  alignas(16) uint8_t v[256][32];
};
constexpr Fp4Tables make_fp4_tables() {
  Fp4Tables t{};
  for (int b = 0; b < 256; ++b)
    for (int code = 0; code < 16; ++code) {
      const uint32_t bits = e2m1_times_e8m0_bits(code, b);
      t.v[b][code] = uint8_t(bits >> 16);
      t.v[b][16 + code] = uint8_t(bits >> 24);
    }
  return t;
}
constexpr Fp4Tables kFp4Tables = make_fp4_tables();

// ------------------------------------------------------------------------------ weight rows
// Each decoder writes weight row n as Kp fp32 values in the order the prepared x has for its
// format (zeros beyond K) and returns whether the row holds a NaN code (FP8; its outputs are
// then NaN whatever the values written).

bool decode_f32_row(const LinearCall& c, int64_t n, float* dst) {
  std::memcpy(dst, c.W->data + n * c.K * 4, size_t(c.K) * sizeof(float));
  std::memset(dst + c.K, 0, size_t(c.xs - c.K) * sizeof(float));
  return false;
}

bool decode_bf16_row(const LinearCall& c, int64_t n, float* dst) {
  const uint8_t* p = c.W->data + n * c.K * 2;
  int64_t k = 0;
  for (; k + 8 <= c.K; k += 8) {
    const uint16x8_t w = vreinterpretq_u16_u8(vld1q_u8(p + 2 * k));
    vst1q_f32(dst + k, vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(w), 16)));
    vst1q_f32(dst + k + 4, vreinterpretq_f32_u32(vshll_high_n_u16(w, 16)));
  }
  for (; k < c.K; ++k) {
    uint16_t h;
    std::memcpy(&h, p + 2 * k, 2);
    dst[k] = f32_of(uint32_t(h) << 16);
  }
  std::memset(dst + c.K, 0, size_t(c.xs - c.K) * sizeof(float));
  return false;
}

// FP8 in FP8 fp32 order (each 32 columns: position 8v + l holds column 4l + v): the chunk's 32
// bytes as eight 32-bit lanes, byte v of lane l shifted to the top, an arithmetic shift by 4
// puts the code's exponent and mantissa under fp32's (bits 26-20) and the mask keeps the sign:
// the code times 2^-120, exactly (e4m3 subnormals become fp32 subnormals). Times the block
// scale's 2^(b - 7) (finite: the driver sends scale bytes above 134 to Scalar) that is the
// weight, rounded once as code * 2^(b - 127) is.
template <int V>
DI_INLINE float32x4_t fp8_codes(uint32x4_t lanes) {
  const int32x4_t top = vreinterpretq_s32_u32(vshlq_n_u32(lanes, 24 - 8 * V));
  return vreinterpretq_f32_u32(vandq_u32(vreinterpretq_u32_s32(vshrq_n_s32(top, 4)), vdupq_n_u32(0x87f00000u)));
}

bool decode_fp8_row(const LinearCall& c, int64_t n, float* dst) {
  const WeightMatrix& W = *c.W;
  const int64_t K = c.K, B = W.block;
  const uint8_t* p = W.data + n * K;
  const uint8_t* s = W.scale + (n / B) * W.scale_cols;
  const uint8x16_t top_bit = vdupq_n_u8(0x80), all = vdupq_n_u8(0xff);
  uint8x16_t nan = vdupq_n_u8(0);
  int64_t k = 0;
  for (; k < K; k += 32) {
    alignas(16) uint8_t buf[32];
    const uint8_t* src = p + k;
    if (K - k < 32) {
      std::memset(buf, 0, sizeof buf);
      std::memcpy(buf, src, size_t(K - k));
      src = buf;
    }
    const uint8x16_t b0 = vld1q_u8(src), b1 = vld1q_u8(src + 16);
    nan = vorrq_u8(nan, vceqq_u8(vorrq_u8(b0, top_bit), all));  // 0x7f / 0xff: NaN codes
    nan = vorrq_u8(nan, vceqq_u8(vorrq_u8(b1, top_bit), all));
    const float32x4_t f = vdupq_n_f32(f32_of(uint32_t(s[k / B] + 120) << 23));
    const uint32x4_t lo = vreinterpretq_u32_u8(b0), hi = vreinterpretq_u32_u8(b1);
    float* d = dst + k;
    vst1q_f32(d + 0, vmulq_f32(fp8_codes<0>(lo), f));
    vst1q_f32(d + 4, vmulq_f32(fp8_codes<0>(hi), f));
    vst1q_f32(d + 8, vmulq_f32(fp8_codes<1>(lo), f));
    vst1q_f32(d + 12, vmulq_f32(fp8_codes<1>(hi), f));
    vst1q_f32(d + 16, vmulq_f32(fp8_codes<2>(lo), f));
    vst1q_f32(d + 20, vmulq_f32(fp8_codes<2>(hi), f));
    vst1q_f32(d + 24, vmulq_f32(fp8_codes<3>(lo), f));
    vst1q_f32(d + 28, vmulq_f32(fp8_codes<3>(hi), f));
  }
  std::memset(dst + k, 0, size_t(c.xs - k) * sizeof(float));
  return vmaxvq_u8(nan) != 0;
}

// FP4 in FP4 fp32 order (each 16 columns: their 8 even ones, then their 8 odd ones): a chunk of
// 32 columns is 16 bytes, the low nibbles the even columns, the high nibbles the odd ones; the
// scale byte's tables give each code's value as its two top bytes (K is a multiple of 32).
DI_INLINE void fp4_words_to_f32(uint8x16_t lo_bytes, uint8x16_t hi_bytes, float* d_first, float* d_second) {
  const uint16x8_t a = vreinterpretq_u16_u8(vzip1q_u8(lo_bytes, hi_bytes));  // codes 0-7
  const uint16x8_t b = vreinterpretq_u16_u8(vzip2q_u8(lo_bytes, hi_bytes));  // codes 8-15
  vst1q_f32(d_first, vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(a), 16)));
  vst1q_f32(d_first + 4, vreinterpretq_f32_u32(vshll_high_n_u16(a, 16)));
  vst1q_f32(d_second, vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(b), 16)));
  vst1q_f32(d_second + 4, vreinterpretq_f32_u32(vshll_high_n_u16(b, 16)));
}

bool decode_fp4_row(const LinearCall& c, int64_t n, float* dst) {
  const WeightMatrix& W = *c.W;
  const int64_t K = c.K;
  const uint8_t* p = W.data + n * (K / 2);
  const uint8_t* s = W.scale + n * W.scale_cols;
  const uint8x16_t low4 = vdupq_n_u8(0x0f);
  for (int64_t k = 0; k < K; k += 32) {
    const uint8x16_t b = vld1q_u8(p + k / 2);
    const uint8_t* tab = kFp4Tables.v[s[k / 32]];
    const uint8x16_t tlo = vld1q_u8(tab), thi = vld1q_u8(tab + 16);
    const uint8x16_t even = vandq_u8(b, low4), odd = vshrq_n_u8(b, 4);
    // even codes 0-7: columns 0, 2, .., 14 (positions 0-7); 8-15: columns 16, .., 30 (16-23)
    fp4_words_to_f32(vqtbl1q_u8(tlo, even), vqtbl1q_u8(thi, even), dst + k, dst + k + 16);
    fp4_words_to_f32(vqtbl1q_u8(tlo, odd), vqtbl1q_u8(thi, odd), dst + k + 8, dst + k + 24);
  }
  std::memset(dst + K, 0, size_t(c.xs - K) * sizeof(float));
  return false;
}

// ------------------------------------------------------------------------------ products

// AVX2's hsum of the 8 lanes (lo: lanes 0-3, hi: 4-7).
DI_INLINE float sum8(float32x4_t lo, float32x4_t hi) {
  const float32x4_t s = vaddq_f32(lo, hi);                             // l0+l4 l1+l5 l2+l6 l3+l7
  const float32x2_t t = vadd_f32(vget_low_f32(s), vget_high_f32(s));  // s0+s2 s1+s3
  return vget_lane_f32(t, 0) + vget_lane_f32(t, 1);
}

constexpr int kMR = 3, kNR = 4;
constexpr int64_t kMaxTileRows = 64;

// MR activation rows (stride xs) times NR decoded weight rows (stride ws) over Kp columns:
// every output one 8-lane FMA chain over the columns in order (24 accumulator registers).
template <int MR, int NR>
void micro_f32(const float* x, int64_t xs, const float* w, int64_t ws, int64_t Kp, float* out) {
  float32x4_t acc[MR][NR][2];
  for (int m = 0; m < MR; ++m)
    for (int r = 0; r < NR; ++r) acc[m][r][0] = acc[m][r][1] = vdupq_n_f32(0.0f);
  for (int64_t k = 0; k < Kp; k += 8)
    for (int q = 0; q < 2; ++q) {
      float32x4_t xv[MR];
      for (int m = 0; m < MR; ++m) xv[m] = vld1q_f32(x + m * xs + k + 4 * q);
      for (int r = 0; r < NR; ++r) {
        const float32x4_t wv = vld1q_f32(w + r * ws + k + 4 * q);
        for (int m = 0; m < MR; ++m) acc[m][r][q] = vfmaq_f32(acc[m][r][q], xv[m], wv);
      }
    }
  for (int m = 0; m < MR; ++m)
    for (int r = 0; r < NR; ++r) out[m * NR + r] = sum8(acc[m][r][0], acc[m][r][1]);
}

// Weight rows per tile: ~96 KiB of decoded rows (L2), a multiple of kNR.
int64_t tile_rows(int64_t Kp) {
  const int64_t nt = (int64_t(96) * 1024 / (Kp * 4)) / kNR * kNR;
  return nt < kNR ? kNR : nt > kMaxTileRows ? kMaxTileRows : nt;
}

size_t f32_scratch_bytes(const LinearCall& c) { return size_t(tile_rows(c.xs) * c.xs) * sizeof(float); }

// A kernel of MR activation rows (stride xs) times kNR decoded weight rows (stride ws).
using MicroFn = void (*)(const float* x, int64_t xs, const float* w, int64_t ws, int64_t Kp, float* out);

// Weight rows [n0, n1) a tile at a time: Decode each row into the tile, then the kernel of
// 3 / 2 / 1 activation rows (Micro3 / Micro2 / Micro1) over every activation row.
template <bool (*Decode)(const LinearCall&, int64_t, float*), MicroFn Micro3, MicroFn Micro2, MicroFn Micro1>
void f32_rows_tiles(const LinearCall& c, int64_t n0, int64_t n1, void* scratch) {
  const int64_t Kp = c.xs, NT = tile_rows(Kp), N = c.N, M = c.M;
  float* tile = static_cast<float*>(scratch);
  bool nan_row[kMaxTileRows];
  alignas(16) float out[kMR * kNR];
  for (int64_t nt0 = n0; nt0 < n1; nt0 += NT) {
    const int64_t rows = min64(NT, n1 - nt0), rows_p = round_up(rows, kNR);
    for (int64_t r = 0; r < rows; ++r) nan_row[r] = Decode(c, nt0 + r, tile + r * Kp);
    std::memset(tile + rows * Kp, 0, size_t((rows_p - rows) * Kp) * sizeof(float));
    for (int64_t m0 = 0; m0 < M; m0 += kMR) {
      const int64_t mv = min64(kMR, M - m0);
      const float* x = c.xf + m0 * c.xs;
      for (int64_t r0 = 0; r0 < rows_p; r0 += kNR) {
        static_assert(kMR == 3, "row-count dispatch below");
        (mv == 3 ? Micro3 : mv == 2 ? Micro2 : Micro1)(x, c.xs, tile + r0 * Kp, Kp, Kp, out);
        const int64_t rv = min64(kNR, rows - r0);
        for (int64_t m = 0; m < mv; ++m)
          for (int64_t r = 0; r < rv; ++r)
            c.y[(m0 + m) * N + nt0 + r0 + r] = nan_row[r0 + r] ? f32_of(kQuietNan) : out[m * kNR + r];
      }
    }
  }
}

template <bool (*Decode)(const LinearCall&, int64_t, float*)>
void f32_rows_avx2(const LinearCall& c, int64_t n0, int64_t n1, void* scratch) {
  f32_rows_tiles<Decode, micro_f32<3, kNR>, micro_f32<2, kNR>, micro_f32<1, kNR>>(c, n0, n1, scratch);
}

// neon_kernels()' products: the AVX2 arithmetic.
void f32_rows(const LinearCall& c, int64_t n0, int64_t n1, void* scratch) {
  switch (c.W->format) {
    case WeightFormat::F32: return f32_rows_avx2<decode_f32_row>(c, n0, n1, scratch);
    case WeightFormat::BF16: return f32_rows_avx2<decode_bf16_row>(c, n0, n1, scratch);
    case WeightFormat::FP8_BLOCK: return f32_rows_avx2<decode_fp8_row>(c, n0, n1, scratch);
    case WeightFormat::FP4_BLOCK: return f32_rows_avx2<decode_fp4_row>(c, n0, n1, scratch);
  }
}

// ------------------------------------------------------------------------------ AVX-512 fp32 mode
// neon_bf16_kernels()' fp32 mode: the decoders write the AVX-512 kernels' column orders.

// BF16 in pair order: each 32 columns, their 16 even ones, then their 16 odd ones.
bool decode_bf16_row_pairs(const LinearCall& c, int64_t n, float* dst) {
  const int64_t K = c.K;
  const uint8_t* p = c.W->data + n * K * 2;
  int64_t k = 0;
  for (; k < K; k += 32) {
    alignas(16) uint16_t buf[32] = {};
    std::memcpy(buf, p + 2 * k, size_t(min64(32, K - k)) * 2);
    for (int h = 0; h < 2; ++h) {  // columns 16h .. 16h + 15: their evens to 8h.., odds to 16 + 8h..
      const uint16x8x2_t eo = vld2q_u16(buf + 16 * h);
      for (int o = 0; o < 2; ++o) {
        float* d = dst + k + 16 * o + 8 * h;
        vst1q_f32(d, vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(eo.val[o]), 16)));
        vst1q_f32(d + 4, vreinterpretq_f32_u32(vshll_high_n_u16(eo.val[o], 16)));
      }
    }
  }
  std::memset(dst + k, 0, size_t(c.xs - k) * sizeof(float));
  return false;
}

// e8m0 byte as the AVX-512 kernels' table has it: 2^(b - 127) (b = 0: the subnormal 2^-127),
// 255 a NaN.
inline float e8m0_f32(uint8_t b) { return f32_of(b == 0 ? 0x00400000u : b == 255 ? kQuietNan : uint32_t(b) << 23); }

// FP8 in natural order: each byte in a lane of its own, shifted to the top, then the exponent /
// mantissa trick of fp8_codes (code * 2^-120) times 2^120, exact: the code itself; the NaN codes
// made NaN; times the block's e8m0 scale, rounded once (as the AVX-512 kernels multiply).
DI_INLINE float32x4_t fp8_code_values(uint32x4_t b) {
  const int32x4_t top = vreinterpretq_s32_u32(vshlq_n_u32(b, 24));
  const float32x4_t v = vreinterpretq_f32_u32(vandq_u32(vreinterpretq_u32_s32(vshrq_n_s32(top, 4)), vdupq_n_u32(0x87f00000u)));
  const float32x4_t code = vmulq_f32(v, vdupq_n_f32(0x1p120f));
  const uint32x4_t nan = vceqq_u32(vandq_u32(b, vdupq_n_u32(0x7f)), vdupq_n_u32(0x7f));
  return vbslq_f32(nan, vreinterpretq_f32_u32(vorrq_u32(vdupq_n_u32(kQuietNan), vshlq_n_u32(vshrq_n_u32(b, 7), 31))), code);
}

bool decode_fp8_row_natural(const LinearCall& c, int64_t n, float* dst) {
  const WeightMatrix& W = *c.W;
  const int64_t K = c.K, B = W.block;
  const uint8_t* p = W.data + n * K;
  const uint8_t* s = W.scale + (n / B) * W.scale_cols;
  for (int64_t k = 0; k < K; k += 16) {  // B is a multiple of 32: 16 columns share a scale
    alignas(16) uint8_t buf[16] = {};
    std::memcpy(buf, p + k, size_t(min64(16, K - k)));
    const uint8x16_t b = vld1q_u8(buf);
    const uint16x8_t lo = vmovl_u8(vget_low_u8(b)), hi = vmovl_high_u8(b);
    const float32x4_t f = vdupq_n_f32(e8m0_f32(s[k / B]));
    float* d = dst + k;
    vst1q_f32(d, vmulq_f32(fp8_code_values(vmovl_u16(vget_low_u16(lo))), f));
    vst1q_f32(d + 4, vmulq_f32(fp8_code_values(vmovl_high_u16(lo)), f));
    vst1q_f32(d + 8, vmulq_f32(fp8_code_values(vmovl_u16(vget_low_u16(hi))), f));
    vst1q_f32(d + 12, vmulq_f32(fp8_code_values(vmovl_high_u16(hi)), f));
  }
  std::memset(dst + K, 0, size_t(c.xs - K) * sizeof(float));
  return false;
}

// FP4 in the AVX-512 FP4 fp32 order: in each kFp4Chunk columns, position 16j + i holds column
// 8i + j. The chunk's columns are decoded in natural order first (the scale tables' values are
// the products code * 2^(s - 127) the AVX-512 kernels form), then placed.
bool decode_fp4_row_512(const LinearCall& c, int64_t n, float* dst) {
  const WeightMatrix& W = *c.W;
  const int64_t K = c.K;
  const uint8_t* p = W.data + n * (K / 2);
  const uint8_t* s = W.scale + n * W.scale_cols;
  const uint8x16_t low4 = vdupq_n_u8(0x0f);
  for (int64_t k = 0; k < c.xs; k += kFp4Chunk) {
    alignas(16) float nat[kFp4Chunk] = {};
    for (int64_t b = 0; b < 4 && k + 32 * b < K; ++b) {
      const int64_t kb = k + 32 * b;
      const uint8x16_t bytes = vld1q_u8(p + kb / 2);
      const uint8_t* tab = kFp4Tables.v[s[kb / 32]];
      const uint8x16_t tlo = vld1q_u8(tab), thi = vld1q_u8(tab + 16);
      const uint8x16_t even = vandq_u8(bytes, low4), odd = vshrq_n_u8(bytes, 4);
      const uint8x16_t el = vqtbl1q_u8(tlo, even), eh = vqtbl1q_u8(thi, even);
      const uint8x16_t ol = vqtbl1q_u8(tlo, odd), oh = vqtbl1q_u8(thi, odd);
      for (int z = 0; z < 2; ++z) {  // codes 8z .. 8z + 7: columns 16z .. 16z + 15
        const uint16x8_t ew = vreinterpretq_u16_u8(z == 0 ? vzip1q_u8(el, eh) : vzip2q_u8(el, eh));
        const uint16x8_t ow = vreinterpretq_u16_u8(z == 0 ? vzip1q_u8(ol, oh) : vzip2q_u8(ol, oh));
        const uint16x8_t w0 = vzip1q_u16(ew, ow), w1 = vzip2q_u16(ew, ow);  // natural order
        float* d = nat + 32 * b + 16 * z;
        vst1q_f32(d, vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(w0), 16)));
        vst1q_f32(d + 4, vreinterpretq_f32_u32(vshll_high_n_u16(w0, 16)));
        vst1q_f32(d + 8, vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(w1), 16)));
        vst1q_f32(d + 12, vreinterpretq_f32_u32(vshll_high_n_u16(w1, 16)));
      }
    }
    for (int j = 0; j < 8; ++j)
      for (int i = 0; i < 16; ++i) dst[k + 16 * j + i] = nat[8 * i + j];
  }
  return false;
}

// (l0 + l2) + (l1 + l3) of one register: its group's share of the AVX-512 reduce4.
DI_INLINE float group_sum(float32x4_t v) {
  const float32x2_t t = vadd_f32(vget_low_f32(v), vget_high_f32(v));
  return vget_lane_f32(t, 0) + vget_lane_f32(t, 1);
}

// MR activation rows times NR decoded weight rows, 16 lanes: the four lane groups are
// independent, so each runs over all of Kp on its own (12 accumulator registers), then the
// AVX-512 reduce4 tree combines the groups' sums.
template <int MR, int NR>
void micro_f32_512(const float* x, int64_t xs, const float* w, int64_t ws, int64_t Kp, float* out) {
  float sums[MR][NR][4];
  for (int g = 0; g < 4; ++g) {
    float32x4_t acc[MR][NR];
    for (int m = 0; m < MR; ++m)
      for (int r = 0; r < NR; ++r) acc[m][r] = vdupq_n_f32(0.0f);
    for (int64_t k = 4 * g; k < Kp; k += 16) {
      float32x4_t xv[MR];
      for (int m = 0; m < MR; ++m) xv[m] = vld1q_f32(x + m * xs + k);
      for (int r = 0; r < NR; ++r) {
        const float32x4_t wv = vld1q_f32(w + r * ws + k);
        for (int m = 0; m < MR; ++m) acc[m][r] = vfmaq_f32(acc[m][r], xv[m], wv);
      }
    }
    for (int m = 0; m < MR; ++m)
      for (int r = 0; r < NR; ++r) sums[m][r][g] = group_sum(acc[m][r]);
  }
  for (int m = 0; m < MR; ++m)
    for (int r = 0; r < NR; ++r) out[m * NR + r] = (sums[m][r][0] + sums[m][r][2]) + (sums[m][r][1] + sums[m][r][3]);
}

template <bool (*Decode)(const LinearCall&, int64_t, float*)>
void f32_rows_avx512(const LinearCall& c, int64_t n0, int64_t n1, void* scratch) {
  f32_rows_tiles<Decode, micro_f32_512<3, kNR>, micro_f32_512<2, kNR>, micro_f32_512<1, kNR>>(c, n0, n1, scratch);
}

// neon_bf16_kernels()' fp32 mode: the AVX-512 arithmetic.
void f32_rows_512(const LinearCall& c, int64_t n0, int64_t n1, void* scratch) {
  switch (c.W->format) {
    case WeightFormat::F32: return f32_rows_avx512<decode_f32_row>(c, n0, n1, scratch);
    case WeightFormat::BF16: return f32_rows_avx512<decode_bf16_row_pairs>(c, n0, n1, scratch);
    case WeightFormat::FP8_BLOCK: return f32_rows_avx512<decode_fp8_row_natural>(c, n0, n1, scratch);
    case WeightFormat::FP4_BLOCK: return f32_rows_avx512<decode_fp4_row_512>(c, n0, n1, scratch);
  }
}

// ------------------------------------------------------------------------------ activations

void prep_float(const float* x, int64_t K, int64_t m0, int64_t m1, int64_t xs, float* xf, uint16_t*,
                uint8_t* bf16_ok) {
  for (int64_t m = m0; m < m1; ++m) {
    std::memcpy(xf + m * xs, x + m * K, size_t(K) * sizeof(float));
    std::memset(xf + m * xs + K, 0, size_t(xs - K) * sizeof(float));
    bf16_ok[m] = 0;  // no bf16 kernels here
  }
}

// As avx512_kernels()' prep_float: xb the top halves of the values; a row qualifies for bf16
// mode when every value is exactly a bf16 and 0 or of magnitude in [2^-40, 2^40].
void prep_float_bf16(const float* x, int64_t K, int64_t m0, int64_t m1, int64_t xs, float* xf, uint16_t* xb,
                     uint8_t* bf16_ok) {
  const uint32x4_t mag = vdupq_n_u32(0x7fffffffu), low16 = vdupq_n_u32(0xffffu);
  const uint32x4_t lo = vdupq_n_u32(kBf16RangeLoBits), span = vdupq_n_u32(kBf16RangeHiBits - kBf16RangeLoBits);
  for (int64_t m = m0; m < m1; ++m) {
    float* df = xf + m * xs;
    uint16_t* db = xb + m * xs;
    std::memcpy(df, x + m * K, size_t(K) * sizeof(float));
    std::memset(df + K, 0, size_t(xs - K) * sizeof(float));
    uint32x4_t bad = vdupq_n_u32(0);
    for (int64_t k = 0; k < xs; k += 4) {
      const uint32x4_t b = vreinterpretq_u32_f32(vld1q_f32(df + k));
      const uint32x4_t a = vandq_u32(b, mag);
      // nonzero and outside [lo, hi] (unsigned: below lo wraps above the span), or low bits set
      const uint32x4_t out = vandq_u32(vtstq_u32(a, a), vcgtq_u32(vsubq_u32(a, lo), span));
      bad = vorrq_u32(bad, vorrq_u32(out, vtstq_u32(b, low16)));
      vst1_u16(db + k, vshrn_n_u32(b, 16));
    }
    bf16_ok[m] = vmaxvq_u32(bad) == 0;
  }
}

// Rows [m0, m1) of xf (stride a multiple of 32) into FP4 fp32 order, in place: each 16
// columns become their 8 even ones, then their 8 odd ones.
void fp4_f32_order(float* xf, int64_t m0, int64_t m1, int64_t xs) {
  for (int64_t m = m0; m < m1; ++m)
    for (int64_t k = 0; k < xs; k += 16) {
      float* p = xf + m * xs + k;
      const float32x4_t a = vld1q_f32(p), b = vld1q_f32(p + 4), c = vld1q_f32(p + 8), d = vld1q_f32(p + 12);
      vst1q_f32(p, vuzp1q_f32(a, b));
      vst1q_f32(p + 4, vuzp1q_f32(c, d));
      vst1q_f32(p + 8, vuzp2q_f32(a, b));
      vst1q_f32(p + 12, vuzp2q_f32(c, d));
    }
}

// FP8 fp32 order: each 32 columns, position 8v + l takes column 4l + v (a transpose of the
// chunk seen as 8 rows of 4).
void fp8_f32_order(float* xf, int64_t m0, int64_t m1, int64_t xs) {
  for (int64_t m = m0; m < m1; ++m)
    for (int64_t k = 0; k < xs; k += 32) {
      float* p = xf + m * xs + k;
      float t[32];
      for (int v = 0; v < 4; ++v)
        for (int l = 0; l < 8; ++l) t[8 * v + l] = p[4 * l + v];
      std::memcpy(p, t, sizeof t);
    }
}

// Rows [m0, m1) of xb (stride a multiple of kFp4Chunk) into FP4 lane order, in place: in each
// chunk, word j of vector v (32 words each) takes column 4j + v: a four-way de-interleave.
void fp4_lane_order(uint16_t* xb, int64_t m0, int64_t m1, int64_t xs) {
  for (int64_t m = m0; m < m1; ++m)
    for (int64_t k = 0; k < xs; k += kFp4Chunk) {
      uint16_t* p = xb + m * xs + k;
      alignas(16) uint16_t t[kFp4Chunk];
      for (int g = 0; g < 4; ++g) {  // columns 32g .. 32g + 31: words 8g .. 8g + 7 of each vector
        const uint16x8x4_t q = vld4q_u16(p + 32 * g);
        for (int v = 0; v < 4; ++v) vst1q_u16(t + 32 * v + 8 * g, q.val[v]);
      }
      std::memcpy(p, t, sizeof t);
    }
}

// neon_bf16_kernels()' fp32-mode orders (the AVX-512 kernels'). BF16 pair order: each 32
// columns become their 16 even ones, then their 16 odd ones.
void bf16_pair_order(float* xf, int64_t m0, int64_t m1, int64_t xs) {
  for (int64_t m = m0; m < m1; ++m)
    for (int64_t k = 0; k < xs; k += 32) {
      float* p = xf + m * xs + k;
      float32x4x2_t q[4];
      for (int i = 0; i < 4; ++i) q[i] = vld2q_f32(p + 8 * i);  // evens / odds of columns 8i ..
      for (int i = 0; i < 4; ++i) {
        vst1q_f32(p + 4 * i, q[i].val[0]);
        vst1q_f32(p + 16 + 4 * i, q[i].val[1]);
      }
    }
}

// The AVX-512 FP4 fp32 order: in each kFp4Chunk columns, position 16j + i takes column 8i + j.
void fp4_f32_order_512(float* xf, int64_t m0, int64_t m1, int64_t xs) {
  for (int64_t m = m0; m < m1; ++m)
    for (int64_t k = 0; k < xs; k += kFp4Chunk) {
      float* p = xf + m * xs + k;
      float t[kFp4Chunk];
      for (int j = 0; j < 8; ++j)
        for (int i = 0; i < 16; ++i) t[16 * j + i] = p[8 * i + j];
      std::memcpy(p, t, sizeof t);
    }
}

// ------------------------------------------------------------------------------ shared algorithms
// cpu_kernels_isa_impl.h over NEON vectors of 4 (its min / max are the x86 instructions' rules,
// a NaN in either operand giving the second; 2^n in two halves as the AVX2 file does).

namespace neon {

struct Ops {
  using F = float32x4_t;
  using I = int32x4_t;
  using D = float64x2_t;
  static constexpr int64_t kLanes = 4;
  static constexpr bool kBf16 = false;

  static DI_INLINE F zero() { return vdupq_n_f32(0.0f); }
  static DI_INLINE F set1(float f) { return vdupq_n_f32(f); }
  static DI_INLINE F load(const float* p) { return vld1q_f32(p); }
  static DI_INLINE void store(float* p, F v) { vst1q_f32(p, v); }
  static DI_INLINE F add(F a, F b) { return vaddq_f32(a, b); }
  static DI_INLINE F sub(F a, F b) { return vsubq_f32(a, b); }
  static DI_INLINE F mul(F a, F b) { return vmulq_f32(a, b); }
  static DI_INLINE F fmadd(F a, F b, F c) { return vfmaq_f32(c, a, b); }
  static DI_INLINE F min(F a, F b) { return vbslq_f32(vcltq_f32(a, b), a, b); }
  static DI_INLINE F max(F a, F b) { return vbslq_f32(vcgtq_f32(a, b), a, b); }
  static DI_INLINE F abs(F v) { return vabsq_f32(v); }
  static DI_INLINE float hmax(F v) { return vmaxvq_f32(v); }  // of amax lanes: never NaN
  static DI_INLINE float first(F v) { return vgetq_lane_f32(v, 0); }

  static DI_INLINE I bits(F v) { return vreinterpretq_s32_f32(v); }
  static DI_INLINE F from_bits(I v) { return vreinterpretq_f32_s32(v); }
  static DI_INLINE I set1_i(int v) { return vdupq_n_s32(v); }
  static DI_INLINE I and_i(I a, I b) { return vandq_s32(a, b); }
  static DI_INLINE I or_i(I a, I b) { return vorrq_s32(a, b); }
  static DI_INLINE I andnot_i(I a, I b) { return vbicq_s32(b, a); }
  static DI_INLINE I add_i32(I a, I b) { return vaddq_s32(a, b); }
  static DI_INLINE I max_i32(I a, I b) { return vmaxq_s32(a, b); }
  template <int N>
  static DI_INLINE I shr_i32(I v) {
    return vreinterpretq_s32_u32(vshrq_n_u32(vreinterpretq_u32_s32(v), N));
  }
  template <int N>
  static DI_INLINE I shl_i32(I v) {
    return vshlq_n_s32(v, N);
  }
  static DI_INLINE I where_nan(F h, I a, I b) { return vbslq_s32(vmvnq_u32(vceqq_f32(h, h)), a, b); }

  static DI_INLINE D zero_d() { return vdupq_n_f64(0.0); }
  static DI_INLINE D set1_d(double v) { return vdupq_n_f64(v); }
  static DI_INLINE D add_d(D a, D b) { return vaddq_f64(a, b); }
  static DI_INLINE D sub_d(D a, D b) { return vsubq_f64(a, b); }
  static DI_INLINE D mul_d(D a, D b) { return vmulq_f64(a, b); }
  static DI_INLINE D div_d(D a, D b) { return vdivq_f64(a, b); }
  static DI_INLINE D min_d(D a, D b) { return vbslq_f64(vcltq_f64(a, b), a, b); }
  static DI_INLINE D max_d(D a, D b) { return vbslq_f64(vcgtq_f64(a, b), a, b); }
  static DI_INLINE D fmadd_d(D a, D b, D c) { return vfmaq_f64(c, a, b); }
  static DI_INLINE D fnmadd_d(D a, D b, D c) { return vfmsq_f64(c, a, b); }
  static DI_INLINE D round_d(D v) { return vrndnq_f64(v); }
  static DI_INLINE void store_d(double* p, D v) { vst1q_f64(p, v); }
  // 2^n for integral doubles n in [-1022, 1023].
  static DI_INLINE D pow2(D n) {
    return vreinterpretq_f64_s64(vshlq_n_s64(vaddq_s64(vcvtq_s64_f64(n), vdupq_n_s64(1023)), 52));
  }
  // p * 2^n in two normal halves: the first product exact, the second rounding once (gradual
  // underflow, inf on overflow), as one scaling would.
  static DI_INLINE D times_pow2_d(D p, D n) {
    const D n1 = vrndmq_f64(vmulq_f64(n, vdupq_n_f64(0.5)));
    return vmulq_f64(vmulq_f64(p, pow2(n1)), pow2(vsubq_f64(n, n1)));
  }
  static DI_INLINE void widen(F v, D& lo, D& hi) {
    lo = vcvt_f64_f32(vget_low_f32(v));
    hi = vcvt_high_f64_f32(v);
  }
  static DI_INLINE F narrow(D lo, D hi) { return vcvt_high_f32_f64(vcvt_f32_f64(lo), hi); }

  using Part = int64_t;  // lanes in use, 1..4
  template <class Body>
  static DI_INLINE void for_parts(int64_t n, Body&& body) {
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) body(i, 4);
    if (i < n) body(i, n - i);
  }
  static DI_INLINE F load_part(const float* p, Part nv) {
    if (nv == 4) return vld1q_f32(p);
    alignas(16) float buf[4] = {};
    std::memcpy(buf, p, size_t(nv) * sizeof(float));
    return vld1q_f32(buf);
  }
  static DI_INLINE void store_part(float* p, Part nv, F v) {
    if (nv == 4) return vst1q_f32(p, v);
    alignas(16) float buf[4];
    vst1q_f32(buf, v);
    std::memcpy(p, buf, size_t(nv) * sizeof(float));
  }
  static DI_INLINE F load_narrowed(const double* p, Part nv) {
    alignas(16) double buf[4] = {};
    if (nv < 4) {
      for (int64_t t = 0; t < nv; ++t) buf[t] = p[t];
      p = buf;
    }
    return narrow(vld1q_f64(p), vld1q_f64(p + 2));
  }
};

// The same with bf16 copies of the prepared rows (act-quant writes xb: neon_bf16_kernels()).
struct OpsBf16 : Ops {
  static constexpr bool kBf16 = true;
  static DI_INLINE void store_bf16_bits(uint16_t* p, I v) { vst1_u16(p, vshrn_n_u32(vreinterpretq_u32_s32(v), 16)); }
};

#include "kernels/cpu/cpu_kernels_isa_impl.h"

}  // namespace neon

// ------------------------------------------------------------------------------ indexer dots

// Every head against two keys at a time, 8 heads in four double vectors: each dot the in-order
// double sum (an FMA of two floats' exact product is the referee's multiply, then add).
void index_dots(const double* qT, int64_t n_heads, int64_t dim, const float* const* keys, int64_t n_keys,
                double* out) {
  constexpr int kKeys = 2;
  for (int64_t h0 = 0; h0 < n_heads; h0 += 8) {
    const int64_t nh = min64(8, n_heads - h0);
    for (int64_t s0 = 0; s0 < n_keys; s0 += kKeys) {
      const int64_t nk = min64(kKeys, n_keys - s0);
      float64x2_t acc[kKeys][4];
      for (int j = 0; j < kKeys; ++j)
        for (int v = 0; v < 4; ++v) acc[j][v] = vdupq_n_f64(0.0);
      alignas(16) double qbuf[8] = {};
      for (int64_t c = 0; c < dim; ++c) {
        const double* q = qT + c * n_heads + h0;
        if (nh < 8) {  // a partial head block: lanes beyond n_heads read zeros
          for (int64_t h = 0; h < nh; ++h) qbuf[h] = q[h];
          q = qbuf;
        }
        float64x2_t qv[4];
        for (int v = 0; v < 4; ++v) qv[v] = vld1q_f64(q + 2 * v);
        for (int j = 0; j < kKeys; ++j) {
          const float64x2_t kv = vdupq_n_f64(j < nk ? double(keys[s0 + j][c]) : 0.0);
          for (int v = 0; v < 4; ++v) acc[j][v] = vfmaq_f64(acc[j][v], qv[v], kv);
        }
      }
      for (int64_t j = 0; j < nk; ++j) {
        alignas(16) double lanes[8];
        for (int v = 0; v < 4; ++v) vst1q_f64(lanes + 2 * v, acc[j][v]);
        for (int64_t h = 0; h < nh; ++h) out[(s0 + j) * n_heads + h0 + h] = lanes[h];
      }
    }
  }
}

// ------------------------------------------------------------------------------ exact indexer dots

// What IndexQueryExact needs of one vector (a query head or a key): the bits below each value's
// top two significant bits (refused when set), its top exponent and its least nonzero one.
struct VecBitsAcc {
  uint32_t bits_or = 0, e_max = 0, e_min = 255;
  void add(const float* v, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
      uint32_t b;
      std::memcpy(&b, &v[i], 4);
      bits_or |= b;
      const uint32_t a = b & 0x7fffffffu;
      if (a == 0) continue;
      const uint32_t e = a >> 23;
      e_max = e > e_max ? e : e_max;
      e_min = e < e_min ? e : e_min;
    }
  }
  neon::VecBits get() const {
    neon::VecBits v;
    v.e_max = int(e_max);
    v.any = e_max > 0 || e_min < 255;
    if (!v.any) return v;
    v.low_min = int(e_min) - 1;
    v.ok = (bits_or & 0x3fffff) == 0 && e_min >= 1 && e_max <= 254;
    return v;
  }
};

// The heads transposed as fp32, [dim, heads_pad] with heads_pad a multiple of 8.
void index_query_exact(const float* q, int64_t n_heads, int64_t dim, uint32_t* data, IndexQueryExact* info) {
  *info = IndexQueryExact{};
  if (dim > kIndexExactMaxDim || n_heads <= 0 || dim <= 0) return;
  const int64_t heads_pad = round_up(n_heads, 8);
  float* qT = reinterpret_cast<float*>(data);
  info->ok = true;
  for (int64_t h = 0; h < heads_pad; ++h) {
    if (h >= n_heads) {
      for (int64_t c = 0; c < dim; ++c) qT[c * heads_pad + h] = 0.0f;
      continue;
    }
    VecBitsAcc acc;
    acc.add(q + h * dim, dim);
    for (int64_t c = 0; c < dim; ++c) qT[c * heads_pad + h] = q[h * dim + c];
    neon::index_query_add(*info, acc.get());
  }
  info->data = data;
  info->heads_pad = heads_pad;
  info->vectors = 2;
}

// Every head against four keys at a time in fp32 FMAs (8 heads in two vectors per key): exact
// sums for the keys index_key_exact accepts, so their order is free.
void index_dots_exact(const IndexQueryExact& q, int64_t n_heads, int64_t dim, const float* const* keys,
                      int64_t n_keys, double* out, uint8_t* exact) {
  if (!q.data || dim > kIndexExactMaxDim) {
    for (int64_t s = 0; s < n_keys; ++s) exact[s] = 0;
    return;
  }
  constexpr int kKeys = 4;
  const int lg = neon::ceil_log2(dim);
  const float* qT = reinterpret_cast<const float*>(q.data);
  static const float zeros[kIndexExactMaxDim] = {};
  for (int64_t s0 = 0; s0 < n_keys; s0 += kKeys) {
    const int64_t nk = min64(kKeys, n_keys - s0);
    const float* k[kKeys];
    for (int j = 0; j < kKeys; ++j) {
      k[j] = j < nk ? keys[s0 + j] : zeros;
      if (j >= nk) continue;
      VecBitsAcc acc;
      acc.add(k[j], dim);
      exact[s0 + j] = uint8_t(neon::index_key_exact(q, acc.get(), lg));
    }
    for (int64_t h0 = 0; h0 < n_heads; h0 += 8) {
      float32x4_t acc[kKeys][2];
      for (int j = 0; j < kKeys; ++j) acc[j][0] = acc[j][1] = vdupq_n_f32(0.0f);
      const float* qc = qT + h0;
      for (int64_t c = 0; c < dim; ++c, qc += q.heads_pad) {
        const float32x4_t q0 = vld1q_f32(qc), q1 = vld1q_f32(qc + 4);
        for (int j = 0; j < kKeys; ++j) {
          const float32x4_t kv = vdupq_n_f32(k[j][c]);
          acc[j][0] = vfmaq_f32(acc[j][0], q0, kv);
          acc[j][1] = vfmaq_f32(acc[j][1], q1, kv);
        }
      }
      const int64_t nh = min64(8, n_heads - h0);
      for (int64_t j = 0; j < nk; ++j) {
        alignas(16) float lanes[8];
        vst1q_f32(lanes, acc[j][0]);
        vst1q_f32(lanes + 4, acc[j][1]);
        for (int64_t h = 0; h < nh; ++h) out[(s0 + j) * n_heads + h0 + h] = double(lanes[h]);
      }
    }
  }
}

// sum a[i] * b[i] in double, as the AVX2 kernel sums it: 4 accumulators of 4 lanes (here pairs
// of 2) over 16 columns a step, then (acc0 + acc1) + (acc2 + acc3), the lanes as (l0 + l1) +
// (l2 + l3), and a scalar tail in order.
double dot_f64(const float* a, const float* b, int64_t n) {
  float64x2_t acc[4][2];
  for (int u = 0; u < 4; ++u) acc[u][0] = acc[u][1] = vdupq_n_f64(0.0);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int u = 0; u < 4; ++u)
      for (int h = 0; h < 2; ++h) {
        const float64x2_t x = vcvt_f64_f32(vld1_f32(a + i + 4 * u + 2 * h));
        const float64x2_t y = vcvt_f64_f32(vld1_f32(b + i + 4 * u + 2 * h));
        acc[u][h] = vfmaq_f64(acc[u][h], x, y);
      }
  const float64x2_t s0 = vaddq_f64(vaddq_f64(acc[0][0], acc[1][0]), vaddq_f64(acc[2][0], acc[3][0]));
  const float64x2_t s1 = vaddq_f64(vaddq_f64(acc[0][1], acc[1][1]), vaddq_f64(acc[2][1], acc[3][1]));
  double total = (vgetq_lane_f64(s0, 0) + vgetq_lane_f64(s0, 1)) + (vgetq_lane_f64(s1, 0) + vgetq_lane_f64(s1, 1));
  for (; i < n; ++i) total += double(a[i]) * double(b[i]);
  return total;
}

// The AVX-512 kernels' double dots (neon_bf16_kernels()): 4 accumulators of 8 lanes (here
// four registers of 2) over 32 columns a step, then 8 a step into the first, (acc0 + acc1) +
// (acc2 + acc3), the lanes summed as GCC's _mm512_reduce_add_pd does: ((l0 + l4) + (l2 + l6))
// + ((l1 + l5) + (l3 + l7)), and a scalar tail in order.
DI_INLINE void widen8(const float* p, float64x2_t* d) {
  for (int h = 0; h < 4; ++h) d[h] = vcvt_f64_f32(vld1_f32(p + 2 * h));
}
DI_INLINE double reduce8(const float64x2_t* v) {
  const float64x2_t t = vaddq_f64(vaddq_f64(v[0], v[2]), vaddq_f64(v[1], v[3]));
  return vgetq_lane_f64(t, 0) + vgetq_lane_f64(t, 1);
}
DI_INLINE double sum_accs(const float64x2_t (*acc)[4]) {
  float64x2_t s[4];
  for (int h = 0; h < 4; ++h) s[h] = vaddq_f64(vaddq_f64(acc[0][h], acc[1][h]), vaddq_f64(acc[2][h], acc[3][h]));
  return reduce8(s);
}

double dot_f64_512(const float* a, const float* b, int64_t n) {
  float64x2_t acc[4][4];
  for (int u = 0; u < 4; ++u)
    for (int h = 0; h < 4; ++h) acc[u][h] = vdupq_n_f64(0.0);
  float64x2_t x[4], y[4];
  int64_t i = 0;
  for (; i + 32 <= n; i += 32)
    for (int u = 0; u < 4; ++u) {
      widen8(a + i + 8 * u, x);
      widen8(b + i + 8 * u, y);
      for (int h = 0; h < 4; ++h) acc[u][h] = vfmaq_f64(acc[u][h], x[h], y[h]);
    }
  for (; i + 8 <= n; i += 8) {
    widen8(a + i, x);
    widen8(b + i, y);
    for (int h = 0; h < 4; ++h) acc[0][h] = vfmaq_f64(acc[0][h], x[h], y[h]);
  }
  double total = sum_accs(acc);
  for (; i < n; ++i) total += double(a[i]) * double(b[i]);
  return total;
}

// dot_f64_512 of a against four rows of b, bit for bit.
void dot_f64_4_512(const float* a, const float* b, int64_t ldb, int64_t n, double* out) {
  float64x2_t acc[4][4][4];
  for (int r = 0; r < 4; ++r)
    for (int u = 0; u < 4; ++u)
      for (int h = 0; h < 4; ++h) acc[r][u][h] = vdupq_n_f64(0.0);
  float64x2_t x[4], y[4];
  int64_t i = 0;
  for (; i + 32 <= n; i += 32)
    for (int u = 0; u < 4; ++u) {
      widen8(a + i + 8 * u, x);
      for (int r = 0; r < 4; ++r) {
        widen8(b + r * ldb + i + 8 * u, y);
        for (int h = 0; h < 4; ++h) acc[r][u][h] = vfmaq_f64(acc[r][u][h], x[h], y[h]);
      }
    }
  for (; i + 8 <= n; i += 8) {
    widen8(a + i, x);
    for (int r = 0; r < 4; ++r) {
      widen8(b + r * ldb + i, y);
      for (int h = 0; h < 4; ++h) acc[r][0][h] = vfmaq_f64(acc[r][0][h], x[h], y[h]);
    }
  }
  for (int r = 0; r < 4; ++r) {
    double total = sum_accs(acc[r]);
    for (int64_t j = i; j < n; ++j) total += double(a[j]) * double(b[r * ldb + j]);
    out[r] = total;
  }
}

constexpr IsaKernels kKernels = {
    .name = "neon",
    .bf16 = false,
    .k_align = 32,
    .m_align = 1,
    .gemv_max_m = 8,
    .act_align = 8,
    .fp8_max_scale = 134,
    .gemv_grain = kNR,
    .plain_m1_rowwise = false,
    .gemm_grain = kNR,
    .prep_float = prep_float,
    .prep_act_quant = neon::prep_act_quant<neon::Ops>,
    .act_quant = neon::act_quant<neon::Ops>,
    .scratch_bytes = f32_scratch_bytes,
    .rows = f32_rows,
    .index_dots = index_dots,
    .fp4_f32_order = fp4_f32_order,
    .fp8_f32_order = fp8_f32_order,
    .index_query_exact = index_query_exact,
    .index_dots_exact = index_dots_exact,
    .index_combine = neon::index_combine<neon::Ops>,
    .hc_expand = neon::hc_expand<neon::Ops>,
    .hc_collapse = neon::hc_collapse<neon::Ops>,
    .dot_f64 = dot_f64,
    .swiglu = neon::swiglu<neon::Ops>,
    .fma_chains = neon::fma_chains<neon::Ops>,
};

// neon_bf16_kernels() but its bf16-mode products (neon_kernels.h): bf16 copies of the rows and
// their bf16 checks, FP4 lane order, and the AVX-512 kernels' fp32 mode (its column orders,
// its double dots) and limits (act blocks in multiples of 16, every FP8 scale byte).
constexpr IsaKernels with_bf16_prep(IsaKernels k) {
  k.name = "neon-bf16";
  k.bf16 = true;
  k.k_align = 64;
  k.act_align = 16;
  k.fp8_max_scale = 255;
  k.prep_float = prep_float_bf16;
  k.prep_act_quant = neon::prep_act_quant<neon::OpsBf16>;
  k.act_quant = neon::act_quant<neon::OpsBf16>;
  k.rows = f32_rows_512;
  k.fp4_lane_order = fp4_lane_order;
  k.bf16_pair_order = bf16_pair_order;
  k.fp4_f32_order = fp4_f32_order_512;
  k.fp8_f32_order = nullptr;
  k.dot_f64 = dot_f64_512;
  k.dot_f64_4 = dot_f64_4_512;
  return k;
}
constexpr IsaKernels kBf16Base = with_bf16_prep(kKernels);

}  // namespace

const IsaKernels& neon_kernels() { return kKernels; }
const IsaKernels& neon_bf16_base_kernels() { return kBf16Base; }
void neon_bf16_f32_rows(const LinearCall& c, int64_t n0, int64_t n1, void* scratch) { f32_rows_512(c, n0, n1, scratch); }
size_t neon_f32_scratch_bytes(const LinearCall& c) { return f32_scratch_bytes(c); }

}  // namespace deepinfer::kernels::cpu
