// Number formats of the DeepSeek-V4 checkpoints and of the reference's quantise points
// (docs/model/formats.md). Every conversion here is exact or round-to-nearest-even, so the
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

namespace detail {
// Exact decode tables built at compile time: a lookup is what every weight decode in a hot
// loop needs. (std::ldexp is not constexpr in C++20, hence the explicit power loop.)
constexpr float pow2(int e) {
  float r = 1.0f;
  for (; e > 0; --e) r *= 2.0f;
  for (; e < 0; ++e) r *= 0.5f;
  return r;
}
struct DecodeTables {
  float e4m3[256] = {}, e8m0[256] = {}, e2m1[16] = {};
  constexpr DecodeTables() {
    constexpr float kMag[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
    for (int b = 0; b < 256; ++b) {
      const int exp = (b >> 3) & 0xf, man = b & 7;
      float mag = exp == 0 ? float(man) * pow2(-9) : (1.0f + float(man) / 8.0f) * pow2(exp - 7);
      if (exp == 0xf && man == 7) mag = __builtin_nanf("");
      e4m3[b] = (b & 0x80) ? -mag : mag;
      e8m0[b] = b == 0xff ? __builtin_nanf("") : pow2(b - 127);
    }
    for (int n = 0; n < 16; ++n) e2m1[n] = (n & 8) ? -kMag[n & 7] : kMag[n & 7];
  }
};
inline constexpr DecodeTables kDecode{};
}  // namespace detail

// fp8 e4m3fn byte -> value (bytes 0x7f / 0xff are NaN; no infinities).
inline float e4m3_to_f32(uint8_t b) { return detail::kDecode.e4m3[b]; }
// The same from the bit fields at run time (tests check the table against it).
float e4m3_decode_bits(uint8_t b);
// Nearest e4m3 value (ties to even, subnormals included); |x| beyond 448 saturates to 448.
float e4m3_round(float x);

// fp4 e2m1 nibble (low 4 bits) -> value; code 8 is -0.
inline float e2m1_to_f32(uint8_t nibble) { return detail::kDecode.e2m1[nibble & 0xf]; }
// Nearest e2m1 value of {0, .5, 1, 1.5, 2, 3, 4, 6} (with sign), ties to the even code;
// |x| beyond 6 saturates to 6.
float e2m1_round(float x);

// ue8m0 (F8_E8M0) scale byte -> 2^(b-127); 0xff is NaN.
inline float e8m0_to_f32(uint8_t b) { return detail::kDecode.e8m0[b]; }

// The reference's power-of-two scale: 2^ceil(log2 t) by exponent-bit inspection
// (k = exponent - 127 + (mantissa != 0)). t must be a positive normal fp32.
float pow2_ceil_scale(float t);

}  // namespace deepinfer
