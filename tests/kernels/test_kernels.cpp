// Scalar kernels against independent plain computations over awkward shapes.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "kernels/kernels.h"
#include "random_weight.h"

using namespace deepinfer;
using namespace deepinfer::kernels;

namespace {

using kernel_test::OwnedWeight;

OwnedWeight make_weight(WeightFormat f, int64_t rows, int64_t cols, std::mt19937& rng) {
  return kernel_test::random_weight(f, rows, cols, rng, 0.1f, 120, 130);
}

std::vector<float> random_bf16(int64_t n, std::mt19937& rng, float sd = 1.0f) {
  std::normal_distribution<float> nd(0.0f, sd);
  std::vector<float> x(n);
  for (auto& v : x) v = round_bf16(nd(rng));
  return x;
}

}  // namespace

TEST(LinearF32, MatchesElementwiseDecode) {
  std::mt19937 rng(1);
  for (auto f : {WeightFormat::BF16, WeightFormat::FP8_BLOCK, WeightFormat::FP4_BLOCK})
    for (int64_t M : {1, 3, 17})
      for (int64_t N : {1, 17, 31, 257})
        for (int64_t K : {128, 256}) {
          OwnedWeight o = make_weight(f, N, K, rng);
          auto x = random_bf16(M * K, rng);
          std::vector<float> y(M * N + 1, -7.0f);  // guard element after the output
          linear_f32_ref(x.data(), M, o.w, y.data());
          for (int64_t m = 0; m < M; ++m)
            for (int64_t n = 0; n < N; ++n) {
              double acc = 0;
              for (int64_t k = 0; k < K; ++k) acc += double(x[m * K + k]) * weight_at(o.w, n, k);
              ASSERT_EQ(y[m * N + n], float(acc));
            }
          EXPECT_EQ(y[M * N], -7.0f);
        }
}

TEST(ActQuant, BlockScalesAndRounding) {
  // A block whose amax/448 is exactly a power of two keeps that scale (no bump).
  std::vector<float> x(64, 0.0f);
  x[0] = 448.0f;
  x[1] = 1.0625f;  // tie between e4m3 1.0 and 1.125 -> 1.0
  x[2] = -3.3f;
  std::vector<float> q(64), s(1);
  act_quant_ref(x.data(), 64, 64, q.data(), s.data());
  EXPECT_EQ(s[0], 1.0f);
  EXPECT_EQ(x[0], 448.0f);
  EXPECT_EQ(x[1], 1.0f);
  EXPECT_EQ(x[2], -3.25f);
  // All-zero block: the amax floor 1e-4 gives scale 2^-22 and zeros stay zero.
  std::vector<float> z(128, 0.0f), sz(2);
  act_quant_ref(z.data(), 128, 64, nullptr, sz.data());
  EXPECT_EQ(sz[0], std::ldexp(1.0f, -22));
  for (float v : z) EXPECT_EQ(v, 0.0f);
  // Blocks are independent: a big value in block 1 does not coarsen block 0.
  std::vector<float> y = {0.1f, 0.2f, 1000.0f, 1.0f};
  act_quant_ref(y.data(), 4, 2);
  EXPECT_NEAR(y[0], 0.1f, 0.1f / 16);
  EXPECT_EQ(y[2], 1024.0f);  // 1000 / 4 = 250 -> e4m3 256 -> 1024
}

TEST(LinearActQuant, MatchesExplicitQuantisedProduct) {
  std::mt19937 rng(2);
  for (auto f : {WeightFormat::FP8_BLOCK, WeightFormat::FP4_BLOCK})
    for (int64_t M : {1, 17})
      for (int64_t N : {1, 31, 257})
        for (int64_t K : {128, 384}) {
          OwnedWeight o = make_weight(f, N, K, rng);
          auto x = random_bf16(M * K, rng, 3.0f);
          std::vector<float> y(M * N);
          linear_act_quant_ref(x.data(), M, o.w, 128, y.data());
          for (int64_t m = 0; m < M; ++m) {
            // QDQ'd activations times exactly decoded weights equals the block-scaled sum.
            std::vector<float> xq(x.begin() + m * K, x.begin() + (m + 1) * K);
            act_quant_ref(xq.data(), K, 128);
            for (int64_t n = 0; n < N; ++n) {
              double acc = 0;
              for (int64_t k = 0; k < K; ++k) acc += double(xq[k]) * weight_at(o.w, n, k);
              ASSERT_EQ(y[m * N + n], float(acc)) << m << " " << n;
            }
          }
        }
}

TEST(Fp4Qdq, PowerOfTwoScaleAndTies) {
  std::vector<float> x(32, 0.0f);
  x[0] = 6.0f;   // amax 6 -> scale 1
  x[1] = 2.5f;   // tie -> 2
  x[2] = 0.25f;  // tie -> 0
  x[3] = -5.0f;  // tie -> -4
  x[4] = 0.3f;   // -> 0.5
  fp4_qdq_pow2_ref(x.data(), 32, 32);
  EXPECT_EQ(x[0], 6.0f);
  EXPECT_EQ(x[1], 2.0f);
  EXPECT_EQ(x[2], 0.0f);
  EXPECT_EQ(x[3], -4.0f);
  EXPECT_EQ(x[4], 0.5f);
  std::vector<float> y(32, 0.0f);
  y[0] = 7.0f;  // amax 7 -> 7/6 -> scale 2; 7/2 = 3.5 -> 4 -> 8
  fp4_qdq_pow2_ref(y.data(), 32, 32);
  EXPECT_EQ(y[0], 8.0f);
}

// V4.1 compressed KV (docs/model/formats.md §4.2, e4m3 variant): the scale is e4m3(amax / 6), not a power
// of two, so x / s is a rounded fp32 quotient; e2m1 ties go to the even code.
TEST(Fp4Qdq, E4m3ScaleBlocksAndTies) {
  std::vector<float> x(16, 0.0f);
  x[0] = 2.5f;    // amax 2.5: 2.5 / 6 = 0.41666 -> e4m3 0.40625 (13/32); 2.5 / s = 6.15 -> clamp 6
  x[1] = 0.3f;    // 0.3 / 0.40625 = 0.738 -> 0.5
  x[2] = -1.0f;   // -2.46 -> -2
  x[3] = 0.609375f;  // exactly 1.5 * s -> 1.5 (a grid value)
  x[4] = 0.5078125f;  // exactly 1.25 * s: a tie -> the even code, 1.0
  fp4_qdq_e4m3_ref(x.data(), 16, 16);
  const float s = 0.40625f;
  EXPECT_EQ(x[0], 6.0f * s);
  EXPECT_EQ(x[1], 0.5f * s);
  EXPECT_EQ(x[2], -2.0f * s);
  EXPECT_EQ(x[3], 1.5f * s);
  EXPECT_EQ(x[4], 1.0f * s);
  for (int i = 5; i < 16; ++i) EXPECT_EQ(x[i], 0.0f);
  // All-zero block: the amax floor 6 * 2^-9 keeps the scale at the smallest e4m3 value.
  std::vector<float> z(32, 0.0f);
  z[16] = 1e-3f;  // second block: 1e-3 / 2^-9 = 0.512 -> 0.5 -> 2^-10
  fp4_qdq_e4m3_ref(z.data(), 32, 16);
  for (int i = 0; i < 16; ++i) EXPECT_EQ(z[i], 0.0f);
  EXPECT_EQ(z[16], std::ldexp(1.0f, -10));
  // Against a plain evaluation of the rule over random blocks of both signs and scales.
  std::mt19937 rng(5);
  for (float sd : {1e-3f, 0.1f, 1.0f, 30.0f}) {
    auto v = random_bf16(160, rng, sd), w = v;
    fp4_qdq_e4m3_ref(w.data(), 160, 16);
    for (int b = 0; b < 10; ++b) {
      float amax = 6.0f * std::ldexp(1.0f, -9);
      for (int i = 0; i < 16; ++i) amax = std::max(amax, std::fabs(v[b * 16 + i]));
      const float sc = e4m3_round(amax / 6.0f);
      for (int i = 0; i < 16; ++i) {
        const float q = std::min(6.0f, std::max(-6.0f, v[b * 16 + i] / sc));
        // nearest grid value, ties to the even code (grid index even)
        const float grid[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
        int best = 0;
        for (int g = 1; g < 8; ++g) {
          const float d = std::fabs(std::fabs(q) - grid[g]), db = std::fabs(std::fabs(q) - grid[best]);
          if (d < db || (d == db && g % 2 == 0)) best = g;
        }
        ASSERT_EQ(w[b * 16 + i], round_bf16(std::copysign(grid[best], q) * sc)) << sd << " " << b << " " << i;
      }
    }
  }
}

// BlockSum::kF32 (V4.1 canonical): each K block's exact dot is rounded to fp32 and the blocks
// are summed in fp32 in order; kExact rounds the whole sum once.
TEST(LinearActQuant, F32BlockSumsRoundEachBlock) {
  std::mt19937 rng(6);
  for (auto f : {WeightFormat::FP8_BLOCK, WeightFormat::FP4_BLOCK})
    for (int64_t K : {32, 96, 256}) {
      OwnedWeight o = kernel_test::random_weight(f, 33, K, rng, 0.1f, 120, 130, 32);
      auto x = random_bf16(3 * K, rng, 3.0f);
      std::vector<float> y(3 * 33), exact(3 * 33);
      linear_act_quant_ref(x.data(), 3, o.w, 32, y.data(), BlockSum::kF32);
      linear_act_quant_ref(x.data(), 3, o.w, 32, exact.data(), BlockSum::kExact);
      int differ = 0;
      for (int64_t m = 0; m < 3; ++m) {
        std::vector<float> xq(x.begin() + m * K, x.begin() + (m + 1) * K);
        act_quant_ref(xq.data(), K, 32);
        for (int64_t n = 0; n < 33; ++n) {
          float acc = 0.0f;
          for (int64_t k0 = 0; k0 < K; k0 += 32) {
            double part = 0;
            for (int64_t k = k0; k < k0 + 32; ++k) part += double(xq[k]) * weight_at(o.w, n, k);
            acc += float(part);
          }
          ASSERT_EQ(y[m * 33 + n], acc) << K << " " << m << " " << n;
          differ += y[m * 33 + n] != exact[m * 33 + n];
        }
      }
      if (K == 256) {
        EXPECT_GT(differ, 0) << "the two rules should differ somewhere with 8 blocks";
      }
    }
}

TEST(Hadamard, MatchesSylvesterMatrix) {
  std::mt19937 rng(3);
  for (int64_t n : {1, 2, 8, 64, 128}) {
    auto x = random_bf16(n, rng);
    auto h = x;
    hadamard_ref(h.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      double acc = 0;
      for (int64_t j = 0; j < n; ++j) acc += (__builtin_popcountll(i & j) & 1 ? -1.0 : 1.0) * x[j];
      EXPECT_EQ(h[i], float(acc));
    }
  }
}

TEST(SinkAttention, MatchesPlainSoftmaxWithSink) {
  std::mt19937 rng(4);
  for (int64_t n : {1, 17, 64, 65, 257})
    for (int64_t dim : {16, 128}) {
      auto q = random_bf16(dim, rng, 0.5f);
      auto kv = random_bf16(n * dim, rng, 0.5f);
      std::vector<const float*> keys(n);
      std::uniform_int_distribution<int> coin(0, 4);
      for (int64_t j = 0; j < n; ++j) keys[j] = (j > 0 && coin(rng) == 0) ? nullptr : &kv[j * dim];
      const float scale = 1.0f / std::sqrt(float(dim)), sink = 0.3f;
      std::vector<float> out(dim + 1, -9.0f);
      sink_attention_ref(q.data(), keys.data(), n, dim, scale, sink, false, out.data());
      std::vector<double> s;
      double m = sink;
      for (int64_t j = 0; j < n; ++j) {
        if (!keys[j]) continue;
        double d = 0;
        for (int64_t c = 0; c < dim; ++c) d += double(q[c]) * keys[j][c];
        s.push_back(d * scale);
        m = std::max(m, s.back());
      }
      double den = std::exp(sink - m);
      std::vector<double> acc(dim, 0.0);
      int64_t idx = 0;
      for (int64_t j = 0; j < n; ++j) {
        if (!keys[j]) continue;
        double p = std::exp(s[idx++] - m);
        den += p;
        for (int64_t c = 0; c < dim; ++c) acc[c] += p * keys[j][c];
      }
      for (int64_t c = 0; c < dim; ++c) EXPECT_NEAR(out[c], acc[c] / den, 2e-6) << n << " " << c;
      EXPECT_EQ(out[dim], -9.0f);
      // bf16 probabilities (reference kernel) stay close to the exact result.
      sink_attention_ref(q.data(), keys.data(), n, dim, scale, sink, true, out.data());
      for (int64_t c = 0; c < dim; ++c) EXPECT_NEAR(out[c], acc[c] / den, 1e-2);
    }
}
