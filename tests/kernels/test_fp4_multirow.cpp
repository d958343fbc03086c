// FP4 products over 1-16 activation rows on AVX-512 (the multi-row kernel of
// fp4_multirow_avx512.cpp from 3 rows, the one- and two-row GEMV below) against a scalar
// referee of the AVX-512 kernels' exact operation sequence (avx512_decoders.h,
// "arithmetic"), bit for bit, and against one-row calls: awkward K (tails of 32, 64 and 96
// columns past the last whole 128-column chunk, K split into several blocks), odd N (a last
// weight row without a partner), scales at both edges of the exact range and just outside it
// (those rows take the fp32 mode), NaN / inf / subnormal-weight scales, zero and minus-zero
// codes, activations at 2^-40 and 2^40 and a row outside that range (fp32 mode for that row),
// act-quant rows; both bf16 tile kinds, one and three threads.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/cpu_features.h"
#include "core/formats.h"
#include "kernels/backend.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/kernels.h"

using namespace deepinfer;
using namespace deepinfer::kernels;

namespace {

struct Fp4Weight {
  std::vector<uint8_t> data, scale;
  WeightMatrix w;
  uint8_t code(int64_t n, int64_t k) const { return (data[n * (w.cols / 2) + k / 2] >> (4 * (k % 2))) & 0xf; }
  uint8_t scale_byte(int64_t n, int64_t k) const { return scale[n * w.scale_cols + k / 32]; }
};

// Rows by n % 8: 0 random scales in range; 1 the range's edge bytes 96 and 149 alternating;
// 2 half the codes +-0; 3 one block at 95 and 4 one at 150 (just outside: fp32 mode); 5 every
// code +-0; 6 a NaN scale (255); 7 scales 254 (inf products) and 0 (subnormal weights).
Fp4Weight make_fp4(int64_t N, int64_t K, std::mt19937& rng) {
  Fp4Weight o;
  o.w.format = WeightFormat::FP4_BLOCK;
  o.w.rows = N;
  o.w.cols = K;
  o.w.block = 32;
  o.w.scale_cols = K / 32;
  o.data.resize(N * K / 2);
  o.scale.resize(N * K / 32);
  std::uniform_int_distribution<int> byte(0, 255), safe(96, 149), coin(0, 1);
  for (int64_t n = 0; n < N; ++n) {
    const int kind = int(n % 8);
    for (int64_t j = 0; j < K / 2; ++j) {
      uint8_t b = uint8_t(byte(rng));
      if (kind == 2)
        for (int h = 0; h < 2; ++h)
          if (coin(rng)) b = uint8_t((b & ~(0x7 << (4 * h))));  // magnitude 0, either sign
      if (kind == 5) b &= 0x88;
      o.data[n * K / 2 + j] = b;
    }
    for (int64_t b = 0; b < K / 32; ++b) {
      uint8_t& s = o.scale[n * K / 32 + b];
      s = uint8_t(kind == 1 ? (b % 2 ? 149 : 96) : safe(rng));
      const bool last = b == K / 32 - 1;
      if (kind == 3 && last) s = 95;
      if (kind == 4 && b == 0) s = 150;
      if (kind == 6 && last) s = 255;
      if (kind == 7 && b == 0) s = 254;
      if (kind == 7 && last && K / 32 > 1) s = 0;
    }
  }
  o.w.data = o.data.data();
  o.w.scale = o.scale.data();
  return o;
}

// The fp32 lane sums of reduce4: per 128-bit lane (l0 + l2) + (l1 + l3), then (L0 + L2) + (L1 + L3).
float lane_sum(const float* a) {
  float s[4];
  for (int L = 0; L < 4; ++L) s[L] = (a[4 * L] + a[4 * L + 2]) + (a[4 * L + 1] + a[4 * L + 3]);
  return (s[0] + s[2]) + (s[1] + s[3]);
}

bool bf16_x_row(const float* x, int64_t K) {
  for (int64_t k = 0; k < K; ++k) {
    const float a = std::fabs(x[k]);
    if (round_bf16(x[k]) != x[k] || !(a == 0.0f || (a >= 0x1p-40f && a <= 0x1p40f))) return false;
  }
  return true;
}

bool safe_weight_row(const Fp4Weight& W, int64_t n) {
  for (int64_t b = 0; b < W.w.scale_cols; ++b)
    if (W.scale[n * W.w.scale_cols + b] < 96 || W.scale[n * W.w.scale_cols + b] > 149) return false;
  return true;
}

// One output as the AVX-512 kernels compute it. bf16 mode (x row exact bf16 in range, weight
// row's scales in range): per 128-column chunk, 16 lanes; lane i of vector v holds columns
// 8i + v (even word) and 8i + 4 + v (odd word) in FP4 lane order, and vdpbf16ps adds the odd
// product, then the even one, each rounded like an fma (checked at start-up by the backend);
// the chunk's part then enters acc through fma(part, 2^(s - 127) of block i / 4, acc) (0 past
// K). fp32 mode: lane i of vector j (j = 0..7) is column 8i + j, weight = code * scale in
// fp32, one fma per vector.
float referee(const Fp4Weight& W, const float* x, int64_t n, bool bf16_mode) {
  const int64_t K = W.w.cols, nch = (K + 127) / 128;
  auto xv = [&](int64_t k) { return k < K ? x[k] : 0.0f; };
  auto code = [&](int64_t k) { return k < K ? e2m1_to_f32(W.code(n, k)) : 0.0f; };
  float acc[16] = {};
  for (int64_t c = 0; c < nch; ++c) {
    const int64_t base = c * 128;
    if (bf16_mode) {
      float part[16] = {};
      for (int v = 0; v < 4; ++v)
        for (int i = 0; i < 16; ++i) {
          const int64_t odd = base + 8 * i + 4 + v, even = base + 8 * i + v;
          part[i] = std::fma(xv(odd), code(odd), part[i]);
          part[i] = std::fma(xv(even), code(even), part[i]);
        }
      for (int i = 0; i < 16; ++i) {
        const int64_t k = base + 32 * (i / 4);
        acc[i] = std::fma(part[i], k < K ? e8m0_to_f32(W.scale_byte(n, k)) : 0.0f, acc[i]);
      }
    } else {
      for (int j = 0; j < 8; ++j)
        for (int i = 0; i < 16; ++i) {
          const int64_t k = base + 8 * i + j;
          const float w = k < K ? code(k) * e8m0_to_f32(W.scale_byte(n, k)) : 0.0f;
          acc[i] = std::fma(xv(k), w, acc[i]);
        }
    }
  }
  return lane_sum(acc);
}

// Bits equal, or both NaN (a NaN's sign and payload follow operand order, not the contract).
bool same(float a, float b) { return std::memcmp(&a, &b, 4) == 0 || (std::isnan(a) && std::isnan(b)); }

// Activations: bf16 values of magnitude 2^-12 .. 2^12 with zeros; with `wide` (not for
// act-quant, whose scales would pass 2^31 and send the row to Scalar) row 2 also at the exact
// range's edges (2^-40, 2^40) and row 4 holding a value past 2^40 (that row: fp32 mode).
std::vector<float> make_x(int64_t M, int64_t K, bool wide, std::mt19937& rng) {
  std::uniform_real_distribution<float> e(-12.0f, 12.0f);
  std::uniform_int_distribution<int> coin(0, 7);
  std::vector<float> x(M * K);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t k = 0; k < K; ++k) {
      float v = round_bf16(std::exp2(e(rng)) * (coin(rng) < 4 ? 1.0f : -1.0f));
      if (coin(rng) == 0) v = 0.0f;
      if (wide && m == 2 && k % 3 == 0) v = (k % 2 ? 0x1p40f : -0x1p-40f);
      if (wide && m == 4 && k == K / 2) v = 0x1p41f;
      x[m * K + k] = v;
    }
  return x;
}

}  // namespace

TEST(CpuIsa, Fp4MultiRowExact) {
  if (!isa_supported(Isa::Avx512)) GTEST_SKIP() << "needs AVX-512";
  std::mt19937 rng(77);
  int64_t checked = 0, bf16_outputs = 0, nan_outputs = 0;
  for (int64_t K : {160, 192, 224, 256, 1184}) {  // tails of 32, 64, 96, none; 1184: several K blocks
    const int64_t N = 37;
    const Fp4Weight W = make_fp4(N, K, rng);
    for (bool act_quant : {false, true}) {
      const std::vector<float> x = make_x(16, K, !act_quant, rng);
      // The values the kernels multiply: x itself, or its act-quantised copy (blocks of 32).
      std::vector<float> xr = x;
      if (act_quant)
        for (int64_t m = 0; m < 16; ++m) act_quant_ref(xr.data() + m * K, K, 32);
      for (bool dp_tiles : {true, false})
        for (int threads : {1, 3}) {
          ThreadPool pool(threads);
          auto be = make_cpu_backend_avx512_tiles(&pool, dp_tiles);
          auto call = [&](const float* xp, int64_t M, float* y) {
            if (act_quant)
              be->linear_act_quant(xp, M, W.w, 32, y);
            else
              be->linear_f32(xp, M, W.w, y);
          };
          std::vector<std::vector<float>> one(16, std::vector<float>(N));
          for (int64_t m = 0; m < 16; ++m) call(x.data() + m * K, 1, one[m].data());
          for (int64_t M = 1; M <= 16; ++M) {
            std::vector<float> y(M * N + 1, 777.0f);
            call(x.data(), M, y.data());
            const std::string what = "K " + std::to_string(K) + " M " + std::to_string(M) +
                                     (act_quant ? " act-quant" : " f32") + (dp_tiles ? " dp tiles" : " fma tiles") +
                                     " threads " + std::to_string(threads);
            ASSERT_EQ(y[M * N], 777.0f) << what << ": wrote past the outputs";
            for (int64_t m = 0; m < M; ++m)
              for (int64_t n = 0; n < N; ++n) {
                const bool bf16 = bf16_x_row(xr.data() + m * K, K) && safe_weight_row(W, n);
                const float want = referee(W, xr.data() + m * K, n, bf16);
                const float got = y[m * N + n];
                ASSERT_TRUE(same(got, want)) << what << " row " << m << " weight row " << n << (bf16 ? " bf16" : " fp32")
                                             << ": got " << got << " want " << want;
                ASSERT_TRUE(same(got, one[m][n])) << what << " row " << m << " weight row " << n
                                                  << ": one-row call " << one[m][n] << ", in the batch " << got;
                ++checked;
                bf16_outputs += bf16;
                nan_outputs += std::isnan(got);
              }
          }
        }
    }
  }
  // The mix the test is about: bf16 products (about half: four weight rows in eight leave the
  // range), fp32-mode rows and NaN rows.
  EXPECT_GT(bf16_outputs, checked / 3);
  EXPECT_GT(nan_outputs, 0);
  EXPECT_GT(checked - bf16_outputs, checked / 8);
}
