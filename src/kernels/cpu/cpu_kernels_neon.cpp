// aarch64 Advanced SIMD kernels (neon_kernels(), and everything of neon_bf16_kernels() but its
// bf16-mode products: neon_kernels.h). Compiled for the base architecture only: NEON is part
// of every aarch64 CPU Linux runs on. See cpu_isa.h for the rules of this file (no templates
// or inline functions shared with other files, no static initialisers that run code).
// Everything here is in namespace neon, where the shared algorithms are instantiated over
// neon_ops_impl.h's vectors: cpu_kernels_isa_impl.h's (act-quant, SwiGLU, the mixes, the
// indexer's score combination) over vectors of 4; lane8_kernels_impl.h's (the prefill
// microkernel, the indexer's dots, the double dot product, FP4 fp32 order: the AVX2 kernels'
// own code) over pairs of them; isa_common_impl.h's prefill tile loop. This file holds the
// weight decoders and the AVX-512 fp32 mode's kernels.
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
namespace neon {

#define DI_INLINE inline __attribute__((always_inline))

// The shared algorithms and their vector operations (see the head of each; cpu_isa.h: every
// copy is this file's own).
#include "kernels/cpu/neon_ops_impl.h"
#include "kernels/cpu/isa_common_impl.h"
using Ops = BufferedParts<Vec4>;
#include "kernels/cpu/cpu_kernels_isa_impl.h"
#include "kernels/cpu/lane8_kernels_impl.h"

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
    const uint8_t* src = K - k < 32 ? staged(p + k, K - k, buf) : p + k;
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

constexpr int kMR = 3, kNR = 4;

// Weight rows per tile: ~96 KiB of decoded rows (L2), a multiple of kNR.
int64_t tile_rows(int64_t Kp) { return tile_rows_for(Kp, 96 * 1024, 4, kNR, kMaxTileRows); }

size_t f32_scratch_bytes(const LinearCall& c) { return size_t(tile_rows(c.xs) * c.xs) * sizeof(float); }

// Weight rows [n0, n1) a tile at a time (f32_tiles): Decode each row into the tile, then the
// register-blocked kernel Micro over every activation row.
template <bool (*Decode)(const LinearCall&, int64_t, float*), class Micro>
void f32_rows_tiled(const LinearCall& c, int64_t n0, int64_t n1, void* scratch) {
  f32_tiles<kMR, kNR>(c, n0, n1, tile_rows(c.xs), static_cast<float*>(scratch),
                      [&](int64_t n, float* dst) { return Decode(c, n, dst); }, Micro{});
}

// neon_kernels()' products: the AVX2 arithmetic (the AVX2 kernels' own microkernel over Lane8:
// every output one 8-lane FMA chain over the columns in order, then AVX2's hsum).
using MicroAvx2 = MicroF32<Lane8, kNR>;
void f32_rows(const LinearCall& c, int64_t n0, int64_t n1, void* scratch) {
  switch (c.W->format) {
    case WeightFormat::F32: return f32_rows_tiled<decode_f32_row, MicroAvx2>(c, n0, n1, scratch);
    case WeightFormat::BF16: return f32_rows_tiled<decode_bf16_row, MicroAvx2>(c, n0, n1, scratch);
    case WeightFormat::FP8_BLOCK: return f32_rows_tiled<decode_fp8_row, MicroAvx2>(c, n0, n1, scratch);
    case WeightFormat::FP4_BLOCK: return f32_rows_tiled<decode_fp4_row, MicroAvx2>(c, n0, n1, scratch);
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

// The AVX-512 fp32 mode's kernel: MR activation rows times kNR decoded weight rows, 16 lanes
// as four independent groups (lane_groups), 12 accumulator registers a group.
template <int MR>
void micro_f32_512(const float* x, int64_t xs, const float* w, int64_t ws, int64_t Kp, float* out) {
  lane_groups<MR, kNR>(out, [&](int g, float32x4_t (&acc)[MR][kNR]) {
    for (int64_t k = 4 * g; k < Kp; k += 16) {
      float32x4_t xv[MR];
      for (int m = 0; m < MR; ++m) xv[m] = vld1q_f32(x + m * xs + k);
      for (int r = 0; r < kNR; ++r) {
        const float32x4_t wv = vld1q_f32(w + r * ws + k);
        for (int m = 0; m < MR; ++m) acc[m][r] = vfmaq_f32(acc[m][r], xv[m], wv);
      }
    }
  });
}
struct Micro512 {
  template <int MR>
  DI_INLINE void operator()(const float* x, int64_t xs, const float* w, int64_t ws, int64_t Kp, float* out) const {
    micro_f32_512<MR>(x, xs, w, ws, Kp, out);
  }
};

// neon_bf16_kernels()' fp32 mode: the AVX-512 arithmetic.
void f32_rows_512(const LinearCall& c, int64_t n0, int64_t n1, void* scratch) {
  switch (c.W->format) {
    case WeightFormat::F32: return f32_rows_tiled<decode_f32_row, Micro512>(c, n0, n1, scratch);
    case WeightFormat::BF16: return f32_rows_tiled<decode_bf16_row_pairs, Micro512>(c, n0, n1, scratch);
    case WeightFormat::FP8_BLOCK: return f32_rows_tiled<decode_fp8_row_natural, Micro512>(c, n0, n1, scratch);
    case WeightFormat::FP4_BLOCK: return f32_rows_tiled<decode_fp4_row_512, Micro512>(c, n0, n1, scratch);
  }
}

// ------------------------------------------------------------------------------ activations

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

// cpu_kernels_isa_impl.h's Ops with bf16 copies of the prepared rows (act-quant writes xb:
// neon_bf16_kernels()).
struct OpsBf16 : Ops {
  static constexpr bool kBf16 = true;
  static DI_INLINE void store_bf16_bits(uint16_t* p, I v) { vst1_u16(p, vshrn_n_u32(vreinterpretq_u32_s32(v), 16)); }
};

// ------------------------------------------------------------------------------ double dots

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
    .prep_act_quant = prep_act_quant<Ops>,
    .act_quant = act_quant<Ops>,
    .scratch_bytes = f32_scratch_bytes,
    .rows = f32_rows,
    .index_dots = index_dots<Lane8>,
    .fp4_f32_order = fp4_f32_order<Lane8>,
    .fp8_f32_order = fp8_f32_order,
    .index_query_exact = index_query_exact<Lane8>,
    .index_dots_exact = index_dots_exact<Lane8>,
    .index_combine = index_combine<Ops>,
    .hc_expand = hc_expand<Ops>,
    .hc_collapse = hc_collapse<Ops>,
    .dot_f64 = dot_f64<Lane8>,
    .swiglu = swiglu<Ops>,
    .fma_chains = fma_chains<Ops>,
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
  k.prep_act_quant = prep_act_quant<OpsBf16>;
  k.act_quant = act_quant<OpsBf16>;
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

}  // namespace neon
}  // namespace

const IsaKernels& neon_kernels() { return neon::kKernels; }
const IsaKernels& neon_bf16_base_kernels() { return neon::kBf16Base; }
void neon_bf16_f32_rows(const LinearCall& c, int64_t n0, int64_t n1, void* scratch) {
  neon::f32_rows_512(c, n0, n1, scratch);
}
size_t neon_f32_scratch_bytes(const LinearCall& c) { return neon::f32_scratch_bytes(c); }

}  // namespace deepinfer::kernels::cpu
