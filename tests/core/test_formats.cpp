// Number formats against hand-computed vectors (docs/model/formats.md): ties to even,
// exponent boundaries, subnormals, saturation, NaN encodings.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "core/formats.h"

using namespace deepinfer;

TEST(Bf16, RoundsToNearestEven) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  // 1 + 2^-8 is exactly half way between 1 and 1 + 2^-7: ties to even (1.0).
  EXPECT_EQ(round_bf16(1.0f + std::ldexp(1.0f, -8)), 1.0f);
  // 1 + 3*2^-8 is half way between 1+2^-7 (odd) and 1+2^-6 (even): goes up.
  EXPECT_EQ(round_bf16(1.0f + 3 * std::ldexp(1.0f, -8)), 1.0f + std::ldexp(1.0f, -6));
  // Just above the half way point rounds up.
  EXPECT_EQ(round_bf16(1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20)), 1.0f + std::ldexp(1.0f, -7));
  EXPECT_TRUE(std::isnan(round_bf16(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_EQ(bf16_to_f32(0xc000), -2.0f);
}

TEST(E4m3, DecodesEveryCode) {
  EXPECT_EQ(e4m3_to_f32(0x00), 0.0f);
  EXPECT_EQ(e4m3_to_f32(0x01), std::ldexp(1.0f, -9));  // smallest subnormal
  EXPECT_EQ(e4m3_to_f32(0x07), 7 * std::ldexp(1.0f, -9));
  EXPECT_EQ(e4m3_to_f32(0x08), std::ldexp(1.0f, -6));  // smallest normal
  EXPECT_EQ(e4m3_to_f32(0x38), 1.0f);
  EXPECT_EQ(e4m3_to_f32(0x7e), 448.0f);
  EXPECT_EQ(e4m3_to_f32(0xfe), -448.0f);
  EXPECT_TRUE(std::isnan(e4m3_to_f32(0x7f)));
  EXPECT_TRUE(std::isnan(e4m3_to_f32(0xff)));
  // The compile-time table agrees with the bit-field decode on every byte.
  for (int b = 0; b < 256; ++b) {
    float t = e4m3_to_f32(uint8_t(b)), d = e4m3_decode_bits(uint8_t(b));
    if (std::isnan(d)) EXPECT_TRUE(std::isnan(t)) << b;
    else EXPECT_EQ(f32_bits(t), f32_bits(d)) << b;
  }
  // Every finite code round-trips through e4m3_round.
  for (int b = 0; b < 256; ++b) {
    if ((b & 0x7f) == 0x7f) continue;
    float v = e4m3_to_f32(uint8_t(b));
    EXPECT_EQ(e4m3_round(v), v) << b;
  }
}

TEST(E4m3, RoundsTiesToEvenAndSaturates) {
  EXPECT_EQ(e4m3_round(1.0625f), 1.0f);     // half way 1 .. 1.125 -> even mantissa 000
  EXPECT_EQ(e4m3_round(1.1875f), 1.25f);    // half way 1.125 .. 1.25 -> even 010
  EXPECT_EQ(e4m3_round(1.07f), 1.125f);
  EXPECT_EQ(e4m3_round(-1.0625f), -1.0f);
  EXPECT_EQ(e4m3_round(std::ldexp(1.0f, -10)), 0.0f);               // half the smallest subnormal -> 0
  EXPECT_EQ(e4m3_round(3 * std::ldexp(1.0f, -10)), std::ldexp(2.0f, -9));  // 1.5 ulp -> 2 (even)
  EXPECT_EQ(e4m3_round(1.9375f), 2.0f);     // rounds up across a binade
  EXPECT_EQ(e4m3_round(440.0f), 448.0f);
  EXPECT_EQ(e4m3_round(1000.0f), 448.0f);
  EXPECT_EQ(e4m3_round(-1000.0f), -448.0f);
}

TEST(E2m1, DecodesAndRoundsTiesToEvenCode) {
  const float table[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
  for (int c = 0; c < 8; ++c) {
    EXPECT_EQ(e2m1_to_f32(uint8_t(c)), table[c]);
    EXPECT_EQ(e2m1_to_f32(uint8_t(c | 8)), -table[c]);
  }
  EXPECT_EQ(e2m1_round(0.25f), 0.0f);
  EXPECT_EQ(e2m1_round(0.75f), 1.0f);
  EXPECT_EQ(e2m1_round(1.25f), 1.0f);
  EXPECT_EQ(e2m1_round(1.75f), 2.0f);
  EXPECT_EQ(e2m1_round(2.5f), 2.0f);
  EXPECT_EQ(e2m1_round(3.5f), 4.0f);
  EXPECT_EQ(e2m1_round(5.0f), 4.0f);
  EXPECT_EQ(e2m1_round(-5.0f), -4.0f);
  EXPECT_EQ(e2m1_round(5.01f), 6.0f);
  EXPECT_EQ(e2m1_round(0.26f), 0.5f);
  EXPECT_EQ(e2m1_round(7.0f), 6.0f);
}

TEST(E8m0, PowersOfTwo) {
  EXPECT_EQ(e8m0_to_f32(127), 1.0f);
  EXPECT_EQ(e8m0_to_f32(0), std::ldexp(1.0f, -127));
  EXPECT_EQ(e8m0_to_f32(130), 8.0f);
  EXPECT_TRUE(std::isnan(e8m0_to_f32(0xff)));
}

TEST(Pow2CeilScale, ExactPowersStayAndOthersRoundUp) {
  EXPECT_EQ(pow2_ceil_scale(1.0f), 1.0f);  // exponent boundary: mantissa zero -> no bump
  EXPECT_EQ(pow2_ceil_scale(0.25f), 0.25f);
  EXPECT_EQ(pow2_ceil_scale(std::nextafter(1.0f, 2.0f)), 2.0f);
  EXPECT_EQ(pow2_ceil_scale(3.0f), 4.0f);
  EXPECT_EQ(pow2_ceil_scale(448.0f / 448.0f), 1.0f);
}
