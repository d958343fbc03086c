#include "core/formats.h"

#include <cmath>
#include <limits>

namespace deepinfer {

float e4m3_decode_bits(uint8_t b) {
  const int sign = b >> 7;
  const int exp = (b >> 3) & 0xf;
  const int man = b & 0x7;
  if (exp == 0xf && man == 0x7) return std::numeric_limits<float>::quiet_NaN();
  float mag = exp == 0 ? std::ldexp(float(man), -9) : std::ldexp(1.0f + man / 8.0f, exp - 7);
  return sign ? -mag : mag;
}

// Rounds |x| onto a grid whose spacing is 2^(floor(log2|x|) - mant_bits), never finer
// than min_quantum. Division and multiplication by the power-of-two quantum are exact,
// and nearbyint rounds ties to even, which lands ties on the even code.
static float round_to_grid(float x, int mant_bits, float min_quantum) {
  float a = std::fabs(x);
  if (a == 0.0f || std::isnan(a)) return x;
  int e;
  std::frexp(a, &e);  // a = f * 2^e with f in [0.5, 1)  =>  floor(log2 a) = e - 1
  float quantum = std::ldexp(1.0f, e - 1 - mant_bits);
  if (quantum < min_quantum) quantum = min_quantum;
  float r = std::nearbyint(a / quantum) * quantum;
  return std::copysign(r, x);
}

float e4m3_round(float x) {
  if (std::isnan(x)) return x;
  if (std::fabs(x) >= 448.0f) return std::copysign(448.0f, x);
  float r = round_to_grid(x, 3, std::ldexp(1.0f, -9));
  if (std::fabs(r) > 448.0f) r = std::copysign(448.0f, x);
  return r;
}


float e2m1_round(float x) {
  if (std::isnan(x)) return x;
  if (std::fabs(x) >= 6.0f) return std::copysign(6.0f, x);
  float r = round_to_grid(x, 1, 0.5f);
  if (std::fabs(r) > 6.0f) r = std::copysign(6.0f, x);
  return r;
}


float pow2_ceil_scale(float t) {
  uint32_t bits = f32_bits(t);
  int e = int((bits >> 23) & 0xff);
  uint32_t m = bits & 0x7fffffu;
  int k = e - 127 + (m != 0 ? 1 : 0);
  return std::ldexp(1.0f, k);
}

}  // namespace deepinfer
