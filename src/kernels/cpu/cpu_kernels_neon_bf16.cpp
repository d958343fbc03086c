// aarch64 kernels with the BF16 extension (BFMLALB / BFMLALT; Armv8.6, optional from Armv8.2):
// the bf16-mode products of neon_bf16_kernels(). Compiled with -march=armv8.2-a+bf16 and called
// only after the dispatcher's HWCAP2_BF16 check; everything else of that kernel table is
// cpu_kernels_neon.cpp's (neon_kernels.h). See cpu_isa.h for the rules of this file.
//
// bf16 mode (activation row exact bf16 in range, weight row in range: LinearCall::use_bf16)
// gives every output the bits of the AVX-512 kernels' bf16 mode (cpu_kernels_avx512.cpp,
// "arithmetic"): 16 lanes (four NEON registers, lane 4g + i in lane i of register g), and for
// each 32-column vector j over [0, Kp), lane i takes
//   acc_i = fma(x[32j + 2i + 1], w[32j + 2i + 1], acc_i);  acc_i = fma(x[32j + 2i], w[32j + 2i], acc_i)
// which is what vdpbf16ps does (the odd column's product first, each rounded like an FMA):
// BFMLALT then BFMLALB, each a fused multiply-add of the widened bf16 values with one IEEE
// rounding. FP4: each kFp4Chunk columns in FP4 lane order sum into a fresh `part` over their
// four vectors, then acc = fma(part, 2^(s - 127), acc) with lane i's scale block i / 4 (one
// per register). y = the AVX-512 kernels' reduce4 lane sum, (G0 + G2) + (G1 + G3) with
// Gg = (l0 + l2) + (l1 + l3) over register g's lanes.
// BFDOT is not used: it rounds the pair's sum to odd before adding it (and the sum to odd
// again), so it gives other bits than two FMAs whenever a sum is inexact.
// Weight rows outside the exact range (FP8 / FP4 scale bytes outside [96, 149], BF16 values
// that are neither 0 nor of magnitude in [2^-40, 2^40]) take the fp32 mode for every
// activation row, as on AVX-512; the fp32 mode is cpu_kernels_neon.cpp's (the AVX-512 bits).
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

// The lane groups, bit helpers and the prefill tile loop (see the head of each; cpu_isa.h:
// every copy is this file's own, compiled with its flags).
#include "kernels/cpu/neon_ops_impl.h"
#include "kernels/cpu/isa_common_impl.h"

// Scale bytes whose power of two keeps every nonzero code times the scale (codes in [2^-9,
// 448]) inside the exact-product range [2^-40, 2^40] (the AVX-512 kernels' kScaleLo / kScaleHi).
constexpr int kScaleLo = 127 - 31, kScaleHi = 127 + 22;

// ------------------------------------------------------------------------------ tables

// bf16 bits of |e4m3| for the 7 magnitude bits m (127: NaN).
constexpr uint16_t e4m3_mag_to_bf16(int m) {
  if (m == 127) return 0x7fc0;
  const int e = m >> 3, man = m & 7;
  if (e > 0) return uint16_t((e + 120) << 7 | man << 4);  // (1 + man / 8) * 2^(e - 7)
  if (man == 0) return 0;
  int top = 2;  // subnormal man * 2^-9: normalise on its top bit
  while (!(man >> top & 1)) --top;
  return uint16_t((top - 9 + 127) << 7 | ((man - (1 << top)) << (7 - top)));
}
static_assert(e4m3_mag_to_bf16(0x7e) == 0x43e0 && e4m3_mag_to_bf16(1) == 0x3b00 && e4m3_mag_to_bf16(7) == 0x3c60 &&
                  e4m3_mag_to_bf16(0x38) == 0x3f80,
              "e4m3: 448, 2^-9, 7 * 2^-9, 1");

struct Tables {
  alignas(16) uint8_t e4m3_lo[128];  // low byte of bf16(|e4m3(m)|)
  alignas(16) uint8_t e4m3_hi[128];  // high byte, sign excluded
  alignas(16) uint8_t e2m1_lo[16];   // bf16(e2m1(code)), low and high bytes
  alignas(16) uint8_t e2m1_hi[16];
};
constexpr Tables make_tables() {
  Tables t{};
  for (int m = 0; m < 128; ++m) {
    t.e4m3_lo[m] = uint8_t(e4m3_mag_to_bf16(m) & 0xff);
    t.e4m3_hi[m] = uint8_t(e4m3_mag_to_bf16(m) >> 8);
  }
  constexpr uint16_t mag[8] = {0x0000, 0x3f00, 0x3f80, 0x3fc0, 0x4000, 0x4040, 0x4080, 0x40c0};  // 0 .. 6
  for (int code = 0; code < 16; ++code) {
    const uint16_t w = uint16_t(mag[code & 7] | ((code & 8) ? 0x8000 : 0));
    t.e2m1_lo[code] = uint8_t(w & 0xff);
    t.e2m1_hi[code] = uint8_t(w >> 8);
  }
  return t;
}
constexpr Tables kT = make_tables();

inline bool scales_in_range(const uint8_t* s, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    if (s[i] < kScaleLo || s[i] > kScaleHi) return false;
  return true;
}

// ------------------------------------------------------------------------------ weight rows
// Each decoder writes weight row n as Kp bf16 words in the order the call's xb has (natural;
// FP4: lane order, bare codes, with the row's block scales as floats into sf) and returns
// whether the row can take bf16 mode. A row that cannot is zeroed; its outputs come from the
// fp32 mode.

// BF16: the words as stored; every one 0 or of magnitude in [2^-40, 2^40].
bool decode_bf16_row(const LinearCall& c, int64_t n, uint16_t* dst, float*) {
  const int64_t K = c.K, Kp = c.xs;
  std::memcpy(dst, c.W->data + n * K * 2, size_t(K) * 2);
  std::memset(dst + K, 0, size_t(Kp - K) * 2);
  const uint16x8_t mag = vdupq_n_u16(0x7fff), lo = vdupq_n_u16(uint16_t(kBf16RangeLoBits >> 16));
  const uint16x8_t span = vdupq_n_u16(uint16_t((kBf16RangeHiBits - kBf16RangeLoBits) >> 16));
  uint16x8_t bad = vdupq_n_u16(0);
  for (int64_t k = 0; k < Kp; k += 8) {
    const uint16x8_t a = vandq_u16(vld1q_u16(dst + k), mag);
    bad = vorrq_u16(bad, vandq_u16(vtstq_u16(a, a), vcgtq_u16(vsubq_u16(a, lo), span)));
  }
  if (vmaxvq_u16(bad) == 0) return true;
  std::memset(dst, 0, size_t(Kp) * 2);
  return false;
}

// FP8: each code's bf16 (two 128-entry byte tables, as vqtbl4 lookups of 64 each; the sign
// or-ed in) with the block scale added to the exponent of every nonzero, non-NaN word: the
// exact weight (the scale bytes are within [kScaleLo, kScaleHi]).
bool decode_fp8_row(const LinearCall& c, int64_t n, uint16_t* dst, float*) {
  const WeightMatrix& W = *c.W;
  const int64_t K = c.K, Kp = c.xs, B = W.block;
  const uint8_t* p = W.data + n * K;
  const uint8_t* s = W.scale + (n / B) * W.scale_cols;
  if (!scales_in_range(s, (K + B - 1) / B)) {
    std::memset(dst, 0, size_t(Kp) * 2);
    return false;
  }
  const uint8x16x4_t lo0 = vld1q_u8_x4(kT.e4m3_lo), lo1 = vld1q_u8_x4(kT.e4m3_lo + 64);
  const uint8x16x4_t hi0 = vld1q_u8_x4(kT.e4m3_hi), hi1 = vld1q_u8_x4(kT.e4m3_hi + 64);
  const uint8x16_t low7 = vdupq_n_u8(0x7f), sixty_four = vdupq_n_u8(64), sign = vdupq_n_u8(0x80);
  const uint16x8_t mag = vdupq_n_u16(0x7fff), nan_word = vdupq_n_u16(0x7fc0);
  int64_t k = 0;
  for (; k < K; k += 32) {  // B is a multiple of 32: a chunk lies in one scale block
    alignas(16) uint8_t buf[32];
    const uint8_t* src = K - k < 32 ? staged(p + k, K - k, buf) : p + k;
    const uint16x8_t add = vdupq_n_u16(uint16_t((s[k / B] - 127) * 128));
    for (int h = 0; h < 2; ++h) {
      const uint8x16_t b = vld1q_u8(src + 16 * h);
      const uint8x16_t m = vandq_u8(b, low7), m64 = vsubq_u8(m, sixty_four);  // m64 wraps out of range below 64
      const uint8x16_t lo = vorrq_u8(vqtbl4q_u8(lo0, m), vqtbl4q_u8(lo1, m64));
      const uint8x16_t hi = vorrq_u8(vorrq_u8(vqtbl4q_u8(hi0, m), vqtbl4q_u8(hi1, m64)), vandq_u8(b, sign));
      for (int z = 0; z < 2; ++z) {
        const uint16x8_t w = vreinterpretq_u16_u8(z == 0 ? vzip1q_u8(lo, hi) : vzip2q_u8(lo, hi));
        const uint16x8_t a = vandq_u16(w, mag);
        const uint16x8_t live = vandq_u16(vtstq_u16(a, a), vmvnq_u16(vceqq_u16(a, nan_word)));
        vst1q_u16(dst + k + 16 * h + 8 * z, vaddq_u16(w, vandq_u16(live, add)));
      }
    }
  }
  std::memset(dst + k, 0, size_t(Kp - k) * 2);
  return true;
}

// FP4 in lane order (each kFp4Chunk columns: word j of vector v is column 4j + v, the nibble
// at bit 4v of the chunk's 16-bit word j), bare codes; sf[b] = 2^(s_b - 127) for each block,
// zeros for the blocks of the last chunk beyond K.
bool decode_fp4_row(const LinearCall& c, int64_t n, uint16_t* dst, float* sf) {
  const WeightMatrix& W = *c.W;
  const int64_t K = c.K, Kp = c.xs, nb = K / 32;
  const uint8_t* p = W.data + n * (K / 2);
  const uint8_t* s = W.scale + n * W.scale_cols;
  if (!scales_in_range(s, nb)) {
    std::memset(dst, 0, size_t(Kp) * 2);
    return false;
  }
  for (int64_t b = 0; b < Kp / 32; ++b) sf[b] = b < nb ? f32_of(uint32_t(s[b]) << 23) : 0.0f;
  const uint8x16_t tlo = vld1q_u8(kT.e2m1_lo), thi = vld1q_u8(kT.e2m1_hi);
  const uint16x8_t low4 = vdupq_n_u16(0x0f);
  for (int64_t k = 0; k < Kp; k += kFp4Chunk) {
    alignas(16) uint8_t buf[kFp4Chunk / 2];  // the last chunk: columns beyond K are zero codes
    const uint8_t* src = K - k < kFp4Chunk ? staged(p + k / 2, (K - k) / 2, buf) : p + k / 2;
    uint16_t* d = dst + k;
    for (int g = 0; g < 4; g += 2) {  // words 8g .. 8g + 15 of each vector
      const uint16x8_t w0 = vreinterpretq_u16_u8(vld1q_u8(src + 16 * g));
      const uint16x8_t w1 = vreinterpretq_u16_u8(vld1q_u8(src + 16 * g + 16));
      for (int v = 0; v < 4; ++v) {
        const int16x8_t shift = vdupq_n_s16(int16_t(-4 * v));
        const uint8x16_t codes = vcombine_u8(vmovn_u16(vandq_u16(vshlq_u16(w0, shift), low4)),
                                             vmovn_u16(vandq_u16(vshlq_u16(w1, shift), low4)));
        const uint8x16_t lo = vqtbl1q_u8(tlo, codes), hi = vqtbl1q_u8(thi, codes);
        vst1q_u16(d + 32 * v + 8 * g, vreinterpretq_u16_u8(vzip1q_u8(lo, hi)));
        vst1q_u16(d + 32 * v + 8 * g + 8, vreinterpretq_u16_u8(vzip2q_u8(lo, hi)));
      }
    }
  }
  return true;
}

// ------------------------------------------------------------------------------ products

DI_INLINE bfloat16x8_t load_bf16(const uint16_t* p) { return vreinterpretq_bf16_u16(vld1q_u16(p)); }

// One vdpbf16ps lane group: the odd words' products, then the even ones', each fused.
DI_INLINE float32x4_t dot2(float32x4_t acc, bfloat16x8_t x, bfloat16x8_t w) {
  return vbfmlalbq_f32(vbfmlaltq_f32(acc, x, w), x, w);
}

constexpr int kMR = 3, kNR = 4;

// acc[m][r] = dot2(acc[m][r], x row m, w row r) for the 8 words at o of each row.
template <int MR, int NR>
DI_INLINE void dot2_block(float32x4_t (&acc)[MR][NR], const uint16_t* x, int64_t xs, const uint16_t* w, int64_t ws,
                          int64_t o) {
  bfloat16x8_t xv[MR];
  for (int m = 0; m < MR; ++m) xv[m] = load_bf16(x + m * xs + o);
  for (int r = 0; r < NR; ++r) {
    const bfloat16x8_t wv = load_bf16(w + r * ws + o);
    for (int m = 0; m < MR; ++m) acc[m][r] = dot2(acc[m][r], xv[m], wv);
  }
}

// MR activation rows (xb, stride xs) times NR decoded rows (stride Kp) over Kp columns, 16
// lanes as four independent groups (lane_groups: 12 accumulator registers a group). FP4
// (Parts): per chunk a fresh part, then acc = fma(part, the group's block scale, acc).
template <bool Parts, int MR, int NR>
void micro_bf16(const uint16_t* x, int64_t xs, const uint16_t* w, const float* sf, int64_t nsf, int64_t Kp,
                float* out) {
  lane_groups<MR, NR>(out, [&](int g, float32x4_t (&acc)[MR][NR]) {
    if constexpr (Parts) {
      for (int64_t k = 0; k < Kp; k += kFp4Chunk) {
        float32x4_t part[MR][NR];
        for (int m = 0; m < MR; ++m)
          for (int r = 0; r < NR; ++r) part[m][r] = vdupq_n_f32(0.0f);
        for (int v = 0; v < 4; ++v) dot2_block(part, x, xs, w, Kp, k + 32 * v + 8 * g);
        for (int r = 0; r < NR; ++r) {
          const float32x4_t scale = vdupq_n_f32(sf[r * nsf + k / 32 + g]);
          for (int m = 0; m < MR; ++m) acc[m][r] = vfmaq_f32(acc[m][r], part[m][r], scale);
        }
      }
    } else {
      for (int64_t k = 8 * g; k < Kp; k += 32) dot2_block(acc, x, xs, w, Kp, k);
    }
  });
}

// Weight rows per tile: ~64 KiB of bf16 words, a multiple of kNR.
int64_t tile_rows(int64_t Kp) { return tile_rows_for(Kp, 64 * 1024, 2, kNR, kMaxTileRows); }

// The thread's scratch: the bf16 tile, FP4's scale floats, then what the fp32 mode takes for
// the rows handed back to it.
size_t bf16_tile_bytes(const LinearCall& c) {
  const int64_t nt = tile_rows(c.xs);
  return size_t(nt * c.xs) * 2 + size_t(nt * (c.xs / 32)) * sizeof(float);
}

size_t scratch_bytes(const LinearCall& c) {
  const size_t f32 = neon_f32_scratch_bytes(c);
  return c.use_bf16 ? round_up(int64_t(bf16_tile_bytes(c)), 64) + f32 : f32;
}

// Weight rows [n0, n1) a tile at a time: Decode each into the tile (the rows it hands back go
// to the fp32 mode), micro_bf16 over every activation row (tile_blocks).
template <bool (*Decode)(const LinearCall&, int64_t, uint16_t*, float*), bool Parts>
void bf16_rows_for(const LinearCall& c, int64_t n0, int64_t n1, void* scratch) {
  const int64_t Kp = c.xs, NT = tile_rows(Kp), nsf = Kp / 32;
  uint16_t* tile = static_cast<uint16_t*>(scratch);
  float* sf = reinterpret_cast<float*>(tile + NT * Kp);
  void* f32_scratch = static_cast<char*>(scratch) + round_up(int64_t(bf16_tile_bytes(c)), 64);
  bool ok[kMaxTileRows];
  for (int64_t nt0 = n0; nt0 < n1; nt0 += NT) {
    const int64_t rows = min64(NT, n1 - nt0), pad = round_up(rows, kNR) - rows;
    for (int64_t r = 0; r < rows; ++r) ok[r] = Decode(c, nt0 + r, tile + r * Kp, sf + r * nsf);
    std::memset(tile + rows * Kp, 0, size_t(pad * Kp) * 2);
    std::memset(sf + rows * nsf, 0, size_t(pad * nsf) * sizeof(float));
    auto kernel = [&]<int R>(int64_t m0, int64_t r0, float* out) {
      micro_bf16<Parts, R, kNR>(c.xb + m0 * Kp, Kp, tile + r0 * Kp, sf + r0 * nsf, nsf, Kp, out);
    };
    tile_blocks<kMR, kNR>(c.M, rows, kernel, [&](int64_t m, int64_t r, float v) {
      if (ok[r]) c.y[m * c.N + nt0 + r] = v;
    });
    for (int64_t r = 0; r < rows; ++r)
      if (!ok[r]) neon_bf16_f32_rows(c, nt0 + r, nt0 + r + 1, f32_scratch);
  }
}

void rows(const LinearCall& c, int64_t n0, int64_t n1, void* scratch) {
  if (!c.use_bf16) return neon_bf16_f32_rows(c, n0, n1, scratch);
  switch (c.W->format) {
    case WeightFormat::F32: return neon_bf16_f32_rows(c, n0, n1, scratch);  // never bf16 mode
    case WeightFormat::BF16: return bf16_rows_for<decode_bf16_row, false>(c, n0, n1, scratch);
    case WeightFormat::FP8_BLOCK: return bf16_rows_for<decode_fp8_row, false>(c, n0, n1, scratch);
    case WeightFormat::FP4_BLOCK: return bf16_rows_for<decode_fp4_row, true>(c, n0, n1, scratch);
  }
}

// IsaKernels::bf16_dot_chains: chain j starts at x0 + j / 1024 in every lane and adds
// 0.5 * 2^-10 twice a step (BFMLALT + BFMLALB: the pair of one vdpbf16ps lane).
double bf16_dot_chains(int64_t iters, float x0, int64_t* macs) {
  // bf16 0.5 and 2^-10 as opaque registers: GCC 12 would fold the constant bf16 vectors into
  // an FP16 immediate move (fmov .8h), which is another instruction set and another value.
  uint16x8_t half_bits = vdupq_n_u16(0x3f00), tiny_bits = vdupq_n_u16(0x3a80);
  __asm__("" : "+w"(half_bits), "+w"(tiny_bits));
  const bfloat16x8_t half = vreinterpretq_bf16_u16(half_bits), tiny = vreinterpretq_bf16_u16(tiny_bits);
  float32x4_t a[kFmaChains];
  for (int j = 0; j < kFmaChains; ++j) a[j] = vdupq_n_f32(x0 + float(j) / 1024.0f);
  for (int64_t i = 0; i < iters; ++i)
    for (int j = 0; j < kFmaChains; ++j) a[j] = dot2(a[j], half, tiny);
  double total = 0;
  alignas(16) float lanes[4];
  for (int j = 0; j < kFmaChains; ++j) {
    vst1q_f32(lanes, a[j]);
    for (int l = 0; l < 4; ++l) total += double(lanes[l]);
  }
  *macs = iters * kFmaChains * 8;
  return total;
}

// Whether BFMLALT then BFMLALB give fma(even, fma(odd, acc)) on this CPU (fused, nearest-even,
// no flushing of normal results), over normal values of mixed magnitudes (a fixed
// pseudo-random set): bf16 mode's bits rest on it.
bool bfmlal_is_two_fmas() {
  uint32_t state = 2024;
  auto next = [&state] {
    state = state * 1664525u + 1013904223u;
    return state;
  };
  auto value = [&](bool bf16) {  // sign, exponent in [2^-20, 2^20), random mantissa
    uint32_t b = (next() & 0x807fffffu) | (uint32_t(127 - 20 + int(next() % 40)) << 23);
    if (bf16) b &= 0xffff0000u;
    return b;
  };
  for (int round = 0; round < 256; ++round) {
    alignas(16) uint32_t acc[4];
    alignas(16) uint16_t a[8], b[8];
    for (int i = 0; i < 4; ++i) acc[i] = value(false);
    for (int i = 0; i < 8; ++i) {
      a[i] = uint16_t(value(true) >> 16);
      b[i] = uint16_t(value(true) >> 16);
    }
    alignas(16) float got[4];
    vst1q_f32(got, dot2(vreinterpretq_f32_u32(vld1q_u32(acc)), load_bf16(a), load_bf16(b)));
    for (int i = 0; i < 4; ++i) {
      auto f = [](uint16_t h) { return f32_of(uint32_t(h) << 16); };
      const float want =
          __builtin_fmaf(f(a[2 * i]), f(b[2 * i]), __builtin_fmaf(f(a[2 * i + 1]), f(b[2 * i + 1]), f32_of(acc[i])));
      if (std::memcmp(&want, &got[i], 4) != 0) return false;
    }
  }
  return true;
}

IsaKernels make_kernels() {
  IsaKernels k = neon_bf16_base_kernels();
  if (!bfmlal_is_two_fmas()) {
    k.bf16 = false;  // fp32 mode for every row: the products could not give bf16 mode's bits
    return k;
  }
  k.rows = rows;
  k.scratch_bytes = scratch_bytes;
  k.bf16_dot_chains = bf16_dot_chains;
  return k;
}

}  // namespace neon
}  // namespace

const IsaKernels& neon_bf16_kernels() {
  static const IsaKernels k = neon::make_kernels();
  return k;
}

}  // namespace deepinfer::kernels::cpu
