// Number formats of the DeepSeek-V4 checkpoints and of the reference's quantise points
// (MODEL.md section 3). Every conversion here is exact or round-to-nearest-even, so the
// scalar kernels built on it reproduce the reference bit for bit.
#pragma once
#include <cstdint>
#include <cstring>

namespace deepinfer {

inline float f32_from_bits(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}
inline uint32_t f32_bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

// bf16 -> fp32 is exact: the upper 16 bits of an fp32.
inline float bf16_to_f32(uint16_t h) { return f32_from_bits(uint32_t(h) << 16); }

// fp32 -> bf16, round to nearest even (PyTorch semantics); NaN stays a quiet NaN.
inline uint16_t f32_to_bf16(float f) {
  uint32_t b = f32_bits(f);
  if ((b & 0x7fffffffu) > 0x7f800000u) return uint16_t((b >> 16) | 0x40);
  uint32_t lsb = (b >> 16) & 1u;
  b += 0x7fffu + lsb;
  return uint16_t(b >> 16);
}

// Round an fp32 value to the nearest bf16 value, returned as fp32.
inline float round_bf16(float f) { return bf16_to_f32(f32_to_bf16(f)); }

// fp8 e4m3fn byte -> value (bytes 0x7f / 0xff are NaN; no infinities).
float e4m3_to_f32(uint8_t b);
// Nearest e4m3 value (ties to even, subnormals included); |x| beyond 448 saturates to 448.
float e4m3_round(float x);

// fp4 e2m1 nibble (low 4 bits) -> value; code 8 is -0.
float e2m1_to_f32(uint8_t nibble);
// Nearest e2m1 value of {0, .5, 1, 1.5, 2, 3, 4, 6} (with sign), ties to the even code;
// |x| beyond 6 saturates to 6.
float e2m1_round(float x);

// ue8m0 (F8_E8M0) scale byte -> 2^(b-127); 0xff is NaN.
float e8m0_to_f32(uint8_t b);

// The reference's power-of-two scale: 2^ceil(log2 t) by exponent-bit inspection
// (k = exponent - 127 + (mantissa != 0)). t must be a positive normal fp32.
float pow2_ceil_scale(float t);

}  // namespace deepinfer
