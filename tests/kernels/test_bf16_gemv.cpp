// BF16 products over 1-8 activation rows on AVX-512 (bf16_gemv_avx512.cpp: the output head at
// decode, decode batches, speculative verify) against a scalar referee of the AVX-512 kernels'
// exact operation sequence (avx512_decoders.h, "arithmetic"), bit for bit, and against
// one-row calls and 9-row calls (the tiled path): K with tails (not a multiple of 32, of 64:
// the padding chunk up to the stride), N not a multiple of the row groups (the last rows one
// at a time), weight rows with NaN / inf / subnormal / out-of-range (2^-41, 2^41) / signed-zero
// values, which bf16 mode leaves to the fp32 mode, activations at 2^-40 and 2^40 and a row
// past 2^40 (the fp32 mode for that row: the call is split), fp32 activations (fp32 mode);
// with and without the row_check memo (first and second call), both kernel tables (bf16
// mode on vdpbf16ps, and on FMAs over the dot-product order x from 3 rows), one and three
// threads.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/formats.h"
#include "kernels/backend.h"
#include "kernels/cpu/cpu_backend.h"

using namespace deepinfer;
using namespace deepinfer::kernels;

namespace {

struct Bf16Weight {
  std::vector<uint16_t> data;
  std::vector<uint8_t> memo;
  WeightMatrix w;
  float at(int64_t n, int64_t k) const { return bf16_to_f32(data[n * w.cols + k]); }
};

uint16_t bits16(float f) { return f32_to_bf16(f); }

// Rows by n % 8: 0, 1 random normal values (2^-12 .. 2^4, both signs); 2 half the values +-0;
// 3 one NaN; 4 one +inf and one -inf; 5 a subnormal; 6 one value 2^41 and one 2^-41 (outside
// the exact range); 7 every value +-0. Rows 3-6 are the fp32 mode's in bf16 mode.
Bf16Weight make_bf16(int64_t N, int64_t K, std::mt19937& rng) {
  Bf16Weight o;
  o.w.format = WeightFormat::BF16;
  o.w.rows = N;
  o.w.cols = K;
  o.data.resize(N * K);
  std::uniform_real_distribution<float> e(-12.0f, 4.0f);
  std::uniform_int_distribution<int> coin(0, 1);
  std::uniform_int_distribution<int64_t> col(0, K - 1);
  for (int64_t n = 0; n < N; ++n) {
    const int kind = int(n % 8);
    for (int64_t k = 0; k < K; ++k) {
      float v = std::exp2(e(rng)) * (coin(rng) ? 1.0f : -1.0f);
      if ((kind == 2 && coin(rng)) || kind == 7) v = coin(rng) ? 0.0f : -0.0f;
      o.data[n * K + k] = bits16(v);
    }
    uint16_t* row = &o.data[n * K];
    if (kind == 3) row[col(rng)] = 0x7fc0;
    if (kind == 4) row[col(rng)] = 0x7f80, row[col(rng)] = 0xff80;
    if (kind == 5) row[col(rng)] = 0x0041;  // subnormal
    if (kind == 6) row[col(rng)] = bits16(0x1p41f), row[col(rng)] = bits16(-0x1p-41f);
  }
  o.w.data = reinterpret_cast<const uint8_t*>(o.data.data());
  return o;
}

bool in_range(float v) {
  const float a = std::fabs(v);
  return a == 0.0f || (a >= 0x1p-40f && a <= 0x1p40f);
}

bool bf16_x_row(const float* x, int64_t K) {
  for (int64_t k = 0; k < K; ++k)
    if (round_bf16(x[k]) != x[k] || !in_range(x[k])) return false;
  return true;
}

bool safe_weight_row(const Bf16Weight& W, int64_t n) {
  for (int64_t k = 0; k < W.w.cols; ++k)
    if (!in_range(W.at(n, k))) return false;
  return true;
}

// The fp32 lane sums of reduce4: per 128-bit lane (l0 + l2) + (l1 + l3), then (L0 + L2) + (L1 + L3).
float lane_sum(const float* a) {
  float s[4];
  for (int L = 0; L < 4; ++L) s[L] = (a[4 * L] + a[4 * L + 2]) + (a[4 * L + 1] + a[4 * L + 3]);
  return (s[0] + s[2]) + (s[1] + s[3]);
}

// One output as the AVX-512 kernels compute it: 16 lanes over 32-column chunks up to the
// activations' stride (K rounded up to 64, zeros beyond K); lane i holds columns 2i and 2i + 1
// of each chunk. fp32 mode (pair order): fma of the even column, then of the odd one. bf16
// mode: vdpbf16ps, which adds the odd column's product, then the even one's, each rounded
// like an fma (checked at start-up by the backend).
float referee(const Bf16Weight& W, const float* x, int64_t n, bool bf16_mode) {
  const int64_t K = W.w.cols, Kp = (K + 63) / 64 * 64;
  auto xv = [&](int64_t k) { return k < K ? x[k] : 0.0f; };
  auto wv = [&](int64_t k) { return k < K ? W.at(n, k) : 0.0f; };
  float acc[16] = {};
  for (int64_t c = 0; c < Kp; c += 32)
    for (int i = 0; i < 16; ++i) {
      const int64_t even = c + 2 * i, odd = even + 1;
      if (bf16_mode) {
        acc[i] = std::fma(xv(odd), wv(odd), acc[i]);
        acc[i] = std::fma(xv(even), wv(even), acc[i]);
      } else {
        acc[i] = std::fma(xv(even), wv(even), acc[i]);
        acc[i] = std::fma(xv(odd), wv(odd), acc[i]);
      }
    }
  return lane_sum(acc);
}

// Bits equal, or both NaN (a NaN's sign and payload follow operand order, not the contract).
bool same(float a, float b) { return std::memcmp(&a, &b, 4) == 0 || (std::isnan(a) && std::isnan(b)); }

// Activations of magnitude 2^-12 .. 2^12 with zeros: bf16 values (bf16 mode), or full fp32
// values (fp32 mode); `wide` (bf16) puts row 2 at the exact range's edges (2^-40, 2^40) and
// row 4 holds one value past 2^40 (the fp32 mode for that call: its rows must agree).
std::vector<float> make_x(int64_t M, int64_t K, bool bf16, bool wide, std::mt19937& rng) {
  std::uniform_real_distribution<float> e(-12.0f, 12.0f), mant(1.0f, 2.0f);
  std::uniform_int_distribution<int> coin(0, 7);
  std::vector<float> x(M * K);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t k = 0; k < K; ++k) {
      float v = std::exp2(std::floor(e(rng))) * mant(rng) * (coin(rng) < 4 ? 1.0f : -1.0f);
      if (bf16) v = round_bf16(v);
      if (coin(rng) == 0) v = 0.0f;
      if (wide && m == 2 && k % 3 == 0) v = (k % 2 ? 0x1p40f : -0x1p-40f);
      if (wide && m == 4 && k == K / 2) v = 0x1p41f;
      x[m * K + k] = v;
    }
  return x;
}

}  // namespace

TEST(CpuIsa, Bf16GemvExact) {
  if (!isa_supported(Isa::Avx512)) GTEST_SKIP() << "needs AVX-512";
  std::mt19937 rng(4242);
  int64_t checked = 0, bf16_outputs = 0, nan_outputs = 0;
  // Tails of 1, 8 and 31 columns, 32 (a zero chunk up to the stride), none; 4096: the head.
  for (int64_t K : {33, 104, 159, 160, 256, 4096}) {
    const int64_t N = K == 4096 ? 45 : 37;
    Bf16Weight W = make_bf16(N, K, rng);
    for (int xkind = 0; xkind < 3; ++xkind) {  // bf16, bf16 with the range's edges, fp32
      const bool bf16_x = xkind < 2, wide = xkind == 1;
      const std::vector<float> x = make_x(9, K, bf16_x, wide, rng);
      for (bool memo : {false, true})
        for (bool dp_tiles : {true, false})
          for (int threads : {1, 3}) {
            ThreadPool pool(threads);
            auto be = make_cpu_backend_avx512_tiles(&pool, dp_tiles);
            W.memo.assign(size_t(N), 0);
            W.w.row_check = memo ? W.memo.data() : nullptr;
            std::vector<std::vector<float>> one(9, std::vector<float>(N));
            for (int64_t m = 0; m < 9; ++m) be->linear_f32(x.data() + m * K, 1, W.w, one[m].data());
            // 9 rows: the tiled path, every output the same bits.
            std::vector<float> nine(9 * N);
            be->linear_f32(x.data(), 9, W.w, nine.data());
            for (int pass = 0; pass < 2; ++pass)  // with the memo: unchecked rows the second time
              for (int64_t M = 1; M <= 8; ++M) {
                std::vector<float> y(M * N + 1, 777.0f);
                be->linear_f32(x.data(), M, W.w, y.data());
                const std::string what = "K " + std::to_string(K) + " M " + std::to_string(M) + " x kind " +
                                         std::to_string(xkind) + (memo ? " memo" : "") +
                                         (dp_tiles ? " dp tiles" : " fma tiles") + " threads " +
                                         std::to_string(threads) + " pass " + std::to_string(pass);
                ASSERT_EQ(y[M * N], 777.0f) << what << ": wrote past the outputs";
                int64_t bf16_rows = 0;  // a call whose rows disagree on the mode is split
                for (int64_t m = 0; m < M; ++m) bf16_rows += bf16_x_row(x.data() + m * K, K);
                const bool mixed = bf16_rows > 0 && bf16_rows < M;
                for (int64_t m = 0; m < M; ++m) {
                  const bool row_bf16 = bf16_x_row(x.data() + m * K, K);
                  for (int64_t n = 0; n < N; ++n) {
                    const bool bf16 = row_bf16 && safe_weight_row(W, n);
                    const float want = referee(W, x.data() + m * K, n, bf16);
                    const float got = y[m * N + n];
                    ASSERT_TRUE(same(got, want)) << what << " row " << m << " weight row " << n
                                                 << (bf16 ? " bf16" : " fp32") << ": got " << got << " want " << want
                                                 << (mixed ? " (mixed call)" : "");
                    ASSERT_TRUE(same(got, one[m][n])) << what << " row " << m << " weight row " << n
                                                      << ": one-row call " << one[m][n] << ", in the batch " << got;
                    ASSERT_TRUE(same(got, nine[m * N + n])) << what << " row " << m << " weight row " << n
                                                            << ": 9-row call " << nine[m * N + n] << ", here " << got;
                    ++checked;
                    bf16_outputs += bf16;
                    nan_outputs += std::isnan(got);
                  }
                }
              }
            if (memo && bf16_x) {  // the memo holds what the rows are: 1 in range, 2 not
              for (int64_t n = 0; n < N; ++n) {
                ASSERT_EQ(int(W.memo[size_t(n)]), safe_weight_row(W, n) ? 1 : 2) << "K " << K << " weight row " << n;
              }
            }
          }
    }
  }
  // The mix the test is about: bf16 products, fp32-mode rows and NaN outputs.
  EXPECT_GT(bf16_outputs, checked / 4);
  EXPECT_GT(nan_outputs, 0);
  EXPECT_GT(checked - bf16_outputs, checked / 4);
}
