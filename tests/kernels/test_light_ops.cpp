// The light per-token ops (kernels/light_ops.h) against independent evaluations: long double
// formulas within a few ulps, exact cases whose result is known, the rounding and order points
// their contracts state (checks that fail if an op is reordered), awkward sizes (1, odd, tails
// past a radix byte) and the NaN / inf behaviour the contracts define.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "core/formats.h"
#include "kernels/light_ops.h"

using namespace deepinfer;
using namespace deepinfer::kernels;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// Distance in representable fp32 values (same sign assumed, or both near zero).
int64_t ulps(float a, float b) {
  int32_t ia, ib;
  std::memcpy(&ia, &a, 4);
  std::memcpy(&ib, &b, 4);
  if (ia < 0) ia = int32_t(0x80000000u) - ia;
  if (ib < 0) ib = int32_t(0x80000000u) - ib;
  return std::abs(int64_t(ia) - int64_t(ib));
}

bool same_bits(float a, float b) { return std::memcmp(&a, &b, 4) == 0; }

std::vector<float> normal(std::mt19937& rng, int64_t n, float sd = 1.0f) {
  std::normal_distribution<float> nd(0.0f, sd);
  std::vector<float> v(size_t(n), 0.0f);
  for (float& x : v) x = nd(rng);
  return v;
}

// The k best by repeated scans for the best unpicked (larger first, ties to the lower index,
// -0 == +0): an O(nk) selection that shares nothing with the radix or sort paths. NaN-free.
template <class T>
std::vector<int64_t> best_k_by_scans(const std::vector<T>& s, int64_t k) {
  std::vector<bool> used(s.size(), false);
  std::vector<int64_t> out;
  for (int64_t j = 0; j < k; ++j) {
    int64_t best = -1;
    for (int64_t i = 0; i < int64_t(s.size()); ++i)
      if (!used[size_t(i)] && (best < 0 || s[size_t(i)] > s[size_t(best)])) best = i;  // strict: lower index kept
    used[size_t(best)] = true;
    out.push_back(best);
  }
  return out;
}

}  // namespace

// --- elementwise transcendentals -------------------------------------------------------------

TEST(LightOps, TranscendentalsWithinAnUlpOfLongDouble) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> ud(-30.0f, 30.0f);
  for (int i = 0; i < 2000; ++i) {
    const float x = ud(rng);
    const long double lx = x;
    EXPECT_LE(ulps(exp_f(x), float(std::exp(lx))), 1) << x;
    EXPECT_LE(ulps(sigmoid_f(x), float(1.0L / (1.0L + std::exp(-lx)))), 1) << x;
    if (x <= 20.0f) {
      EXPECT_LE(ulps(softplus_f(x), float(std::log1p(std::exp(lx)))), 1) << x;
    }
    const float p = std::fabs(x) + 1e-3f;
    EXPECT_LE(ulps(rsqrt_f(p), float(1.0L / std::sqrt((long double)p))), 1) << p;
  }
}

TEST(LightOps, SoftplusReturnsItsInputAboveTwenty) {
  // PyTorch's threshold: above 20 the input itself, so no overflow of exp for large inputs.
  for (float x : {20.5f, 21.0f, 88.0f, 1e30f, kInf}) EXPECT_TRUE(same_bits(softplus_f(x), x)) << x;
  EXPECT_EQ(softplus_f(-kInf), 0.0f);
  EXPECT_GT(softplus_f(-80.0f), 0.0f);  // log1p keeps exp(-80) (1 + exp would round it away)
  EXPECT_TRUE(std::isnan(softplus_f(kNaN)));
  EXPECT_EQ(sigmoid_f(-kInf), 0.0f);
  EXPECT_EQ(sigmoid_f(kInf), 1.0f);
  EXPECT_EQ(rsqrt_f(0.0f), kInf);
  EXPECT_EQ(rsqrt_f(4.0f), 0.5f);
}

// --- RMSNorm ---------------------------------------------------------------------------------

TEST(LightOps, RmsNormMatchesLongDoubleFormula) {
  std::mt19937 rng(1);
  for (int64_t n : {1, 2, 3, 7, 64, 129, 1031}) {
    const std::vector<float> x = normal(rng, n, 3.0f), w = normal(rng, n);
    long double ss = 0;
    for (float v : x) ss += (long double)v * v;
    const long double r = 1.0L / std::sqrt(ss / n + 1e-6L);
    std::vector<float> y(static_cast<size_t>(n)), yu(static_cast<size_t>(n)), yb(static_cast<size_t>(n));
    rms_norm_ref(x.data(), w.data(), n, 1e-6f, false, y.data());
    rms_norm_ref(x.data(), nullptr, n, 1e-6f, false, yu.data());
    rms_norm_ref(x.data(), w.data(), n, 1e-6f, true, yb.data());
    for (int64_t i = 0; i < n; ++i) {
      EXPECT_LE(ulps(y[size_t(i)], float(w[size_t(i)] * (x[size_t(i)] * r))), 4) << "n " << n << " i " << i;
      EXPECT_LE(ulps(yu[size_t(i)], float(x[size_t(i)] * r)), 3) << "n " << n << " i " << i;
      // One bf16 rounding, of the fp32 result and nothing before it.
      EXPECT_TRUE(same_bits(yb[size_t(i)], round_bf16(y[size_t(i)]))) << "n " << n << " i " << i;
      // The weight multiplies the rounded fp32 product x * r (forward.md §3), never (w * x) * r.
      EXPECT_TRUE(same_bits(y[size_t(i)], w[size_t(i)] * yu[size_t(i)])) << "n " << n << " i " << i;
    }
    // In place equals out of place.
    std::vector<float> z = x;
    rms_norm_ref(z.data(), w.data(), n, 1e-6f, false, z.data());
    EXPECT_EQ(0, std::memcmp(z.data(), y.data(), size_t(n) * 4)) << "n " << n;
  }
}

TEST(LightOps, RmsNormExactCases) {
  // A constant power of two with eps 0: the mean is exact, r = 1 / |c|, y = w * sign(c).
  for (int64_t n : {1, 5, 33}) {
    std::vector<float> x(size_t(n), -0.25f), w(static_cast<size_t>(n)), y(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) w[size_t(i)] = float(i + 1) * 0.5f;
    rms_norm_ref(x.data(), w.data(), n, 0.0f, false, y.data());
    for (int64_t i = 0; i < n; ++i) EXPECT_EQ(y[size_t(i)], -w[size_t(i)]) << "n " << n;
  }
  // The squares are summed in double: 2^24 + 1 == 2^24 in fp32, so an fp32 accumulator would
  // lose all fifteen ones after the 4096^2 = 2^24; the mean is rounded to fp32 before eps.
  const int64_t n = 16;
  std::vector<float> x(size_t(n), 1.0f), y(static_cast<size_t>(n));
  x[0] = 4096.0f;
  rms_norm_ref(x.data(), nullptr, n, 1e-6f, false, y.data());
  const float r_double_sum = float(1.0 / std::sqrt(double(float((16777216.0 + 15.0) / 16.0) + 1e-6f)));
  const float r_fp32_sum = float(1.0 / std::sqrt(double(float(16777216.0 / 16.0) + 1e-6f)));
  ASSERT_NE(r_double_sum, r_fp32_sum);
  EXPECT_TRUE(same_bits(y[1], r_double_sum));
  EXPECT_TRUE(same_bits(y[0], 4096.0f * r_double_sum));
}

TEST(LightOps, RmsNormScaleBits) {
  // r = rsqrt_f(float(ss / n) + eps): the mean rounded to fp32, eps added in fp32, the
  // reciprocal square root in double rounded once. A row starting with 1 shows r itself.
  std::mt19937 rng(16);
  for (int rep = 0; rep < 300; ++rep) {
    const int64_t n = 1 + int64_t(rng() % 40);
    std::vector<float> x = normal(rng, n, 2.0f), y(static_cast<size_t>(n));
    x[0] = 1.0f;
    const float eps = rep % 2 ? 0.1f : 1e-6f;
    rms_norm_ref(x.data(), nullptr, n, eps, false, y.data());
    double ss = 0;
    for (float v : x) ss += double(v * v);
    const float mean = float(ss / double(n)), sum = mean + eps;
    EXPECT_TRUE(same_bits(y[0], float(1.0 / std::sqrt(double(sum))))) << "n " << n << " rep " << rep;
  }
}

TEST(LightOps, RmsNormNonFinite) {
  const float x[3] = {1.0f, kInf, 2.0f};
  float y[3];
  rms_norm_ref(x, nullptr, 3, 1e-6f, false, y);
  EXPECT_EQ(y[0], 0.0f);  // r = 0
  EXPECT_TRUE(std::isnan(y[1]));  // inf * 0
  const float z[2] = {1.0f, kNaN};
  rms_norm_ref(z, nullptr, 2, 1e-6f, true, y);
  EXPECT_TRUE(std::isnan(y[0]) && std::isnan(y[1]));
}

// --- per-head query norm -----------------------------------------------------------------------

namespace {

// attention.md §2 as the header states it, one head at a time with one plain chain (no lanes).
std::vector<float> head_norm_model(const std::vector<float>& x, int64_t heads, int64_t n, float eps, bool round) {
  auto R = [&](float v) { return round ? round_bf16(v) : v; };
  std::vector<float> y = x;
  for (int64_t h = 0; h < heads; ++h) {
    float* row = &y[size_t(h * n)];
    double ss = 0;
    for (int64_t i = 0; i < n; ++i) ss += double(R(row[i] * row[i]));
    const float mean = R(float(ss / double(n)));
    const float r = R(float(1.0 / std::sqrt(double(R(mean + eps)))));
    for (int64_t i = 0; i < n; ++i) row[i] = R(row[i] * r);
  }
  return y;
}

}  // namespace

TEST(LightOps, HeadRmsNormBitsAndLongDouble) {
  std::mt19937 rng(21);
  for (int64_t heads : {1, 3, 8, 9, 17})
    for (int64_t n : {1, 3, 64, 129}) {
      std::vector<float> x = normal(rng, heads * n, 2.0f);
      for (int64_t h = 0; h < heads; ++h)  // heads of different scales: a mixed-up head shows
        for (int64_t i = 0; i < n; ++i) x[size_t(h * n + i)] *= float(1 + h);
      for (bool round : {false, true}) {
        std::vector<float> y = x;
        head_rms_norm_ref(y.data(), heads, n, 1e-6f, round);
        const std::vector<float> want = head_norm_model(x, heads, n, 1e-6f, round);
        EXPECT_EQ(0, std::memcmp(y.data(), want.data(), y.size() * 4)) << heads << " " << n << " " << round;
        for (int64_t h = 0; h < heads; ++h) {
          long double ss = 0;
          for (int64_t i = 0; i < n; ++i) ss += (long double)x[size_t(h * n + i)] * x[size_t(h * n + i)];
          const long double r = 1.0L / std::sqrt(ss / n + 1e-6L);
          for (int64_t i = 0; i < n; ++i) {
            const float exact = float(x[size_t(h * n + i)] * r), got = y[size_t(h * n + i)];
            if (round) {  // five bf16 roundings on the way: a few 2^-8 relative
              EXPECT_NEAR(got, exact, 0.02f * std::fabs(exact) + 1e-30f) << heads << " " << n << " " << h << " " << i;
            } else {
              EXPECT_LE(ulps(got, exact), 3) << heads << " " << n << " " << h << " " << i;
            }
          }
        }
      }
      // Without rounding: rms_norm_ref of every head, unweighted, bit for bit.
      std::vector<float> y = x, z(x.size());
      head_rms_norm_ref(y.data(), heads, n, 1e-6f, false);
      for (int64_t h = 0; h < heads; ++h) rms_norm_ref(&x[size_t(h * n)], nullptr, n, 1e-6f, false, &z[size_t(h * n)]);
      EXPECT_EQ(0, std::memcmp(y.data(), z.data(), y.size() * 4)) << heads << " " << n;
    }
}

TEST(LightOps, HeadRmsNormRoundingPoints) {
  // The squares are rounded to bf16 before the sum. 1.002^2 = 1.004004 rounds up to 1 + 2^-7:
  // the head {1.002, 1.002, 1} (eps 0) has the mean R(3.015625 / 3) = 1 + 2^-7, so
  // r = R(rsqrt(1 + 2^-7)) = 255 / 256; fp32 squares would give R(3.008008 / 3) = 1 and r = 1.
  // The last entry, 1, shows r itself.
  float x[3] = {1.002f, 1.002f, 1.0f};
  ASSERT_EQ(round_bf16(1.002f * 1.002f), 1.0f + 0x1p-7f);
  ASSERT_EQ(round_bf16(float((double(1.002f * 1.002f) * 2 + 1) / 3)), 1.0f);
  head_rms_norm_ref(x, 1, 3, 0.0f, true);
  EXPECT_EQ(x[2], 255.0f / 256.0f);
  EXPECT_EQ(x[0], round_bf16(1.002f * (255.0f / 256.0f)));
  // A constant head of 2 with eps 0: mean 4, r 0.5, exactly 1 either way; heads stay apart.
  std::vector<float> c(9 * 5, 2.0f);
  for (int64_t i = 0; i < 5; ++i) c[size_t(4 * 5 + i)] = -0.5f;  // head 4: -1 everywhere
  for (bool round : {false, true}) {
    std::vector<float> y = c;
    head_rms_norm_ref(y.data(), 9, 5, 0.0f, round);
    for (int64_t h = 0; h < 9; ++h)
      for (int64_t i = 0; i < 5; ++i) EXPECT_EQ(y[size_t(h * 5 + i)], h == 4 ? -1.0f : 1.0f) << h << " " << round;
  }
  // A NaN or an inf makes its own head NaN (inf * 0 or NaN), never its neighbours (eight heads
  // share their sums' loop).
  std::vector<float> y(8 * 3, 1.0f);
  y[5 * 3 + 1] = kNaN;
  y[2 * 3] = kInf;
  head_rms_norm_ref(y.data(), 8, 3, 1e-6f, true);
  for (int64_t h = 0; h < 8; ++h)
    for (int64_t i = 0; i < 3; ++i) {
      const float v = y[size_t(h * 3 + i)];
      if (h == 5 || (h == 2 && i == 0)) {
        EXPECT_TRUE(std::isnan(v)) << h << " " << i;
      } else if (h == 2) {
        EXPECT_EQ(v, 0.0f) << i;  // r = 1 / sqrt(inf) = 0
      } else {
        EXPECT_EQ(v, 1.0f) << h << " " << i;  // mean 1, R(1 + 1e-6) = 1, r = 1
      }
    }
}

// --- RoPE ------------------------------------------------------------------------------------

TEST(LightOps, RopeAnglesOfTheFp32Product) {
  for (int64_t half : {1, 3, 32, 257}) {
    std::vector<float> f(static_cast<size_t>(half)), c(static_cast<size_t>(half)), s(static_cast<size_t>(half));
    for (int64_t i = 0; i < half; ++i) f[size_t(i)] = float(std::pow(10000.0, -double(i) / double(half)));
    for (int64_t pos : {int64_t(0), int64_t(1), int64_t(4093), int64_t(1) << 20}) {
      rope_angles_ref(f.data(), half, pos, c.data(), s.data());
      for (int64_t i = 0; i < half; ++i) {
        const float theta = float(pos) * f[size_t(i)];  // one fp32 product (attention.md §1.3)
        EXPECT_LE(ulps(c[size_t(i)], float(std::cos((long double)theta))), 1) << half << " " << pos << " " << i;
        EXPECT_LE(ulps(s[size_t(i)], float(std::sin((long double)theta))), 1) << half << " " << pos << " " << i;
        if (pos == 0) {
          EXPECT_TRUE(c[size_t(i)] == 1.0f && same_bits(s[size_t(i)], 0.0f));
        }
      }
    }
  }
  // The position enters as fp32: 2^24 + 1 rounds to 2^24.
  const float f1[1] = {1e-3f};
  float c1[1], s1[1], c2[1], s2[1];
  rope_angles_ref(f1, 1, (int64_t(1) << 24) + 1, c1, s1);
  rope_angles_ref(f1, 1, int64_t(1) << 24, c2, s2);
  EXPECT_TRUE(same_bits(c1[0], c2[0]) && same_bits(s1[0], s2[0]));
}

TEST(LightOps, RopeRotationComponents) {
  std::mt19937 rng(4);
  std::uniform_real_distribution<float> ang(-3.2f, 3.2f);
  for (int64_t half : {1, 5, 32, 67}) {
    std::vector<float> c(static_cast<size_t>(half)), s(static_cast<size_t>(half));
    for (int64_t i = 0; i < half; ++i) {
      const float t = ang(rng);
      c[size_t(i)] = std::cos(t);
      s[size_t(i)] = std::sin(t);
    }
    const std::vector<float> x = normal(rng, 2 * half + 3, 2.0f);  // 3 sentinels past the pairs
    for (bool inverse : {false, true})
      for (bool round : {false, true}) {
        std::vector<float> y = x;
        rope_rotate_ref(y.data(), half, c.data(), s.data(), inverse, round);
        for (int64_t i = 0; i < half; ++i) {
          const float u = x[size_t(2 * i)], v = x[size_t(2 * i + 1)], ci = c[size_t(i)];
          const float si = inverse ? -s[size_t(i)] : s[size_t(i)];
          // Near the long double rotation (a cancellation may cost more than an ulp of the result).
          const long double a = (long double)u * ci - (long double)v * si, b = (long double)u * si + (long double)v * ci;
          const float tol = 4e-7f * (std::fabs(u) + std::fabs(v)) + (round ? 0.01f * float(std::fabs(a) + std::fabs(b)) : 0.0f);
          EXPECT_NEAR(y[size_t(2 * i)], float(a), tol) << half << " " << i;
          EXPECT_NEAR(y[size_t(2 * i + 1)], float(b), tol) << half << " " << i;
          // Bits: fp32 products and difference / sum, one rounding per component.
          const float pa = u * ci, pb = v * si, pc = u * si, pd = v * ci;
          const float ea = pa - pb, eb = pc + pd;
          EXPECT_TRUE(same_bits(y[size_t(2 * i)], round ? round_bf16(ea) : ea)) << half << " " << i;
          EXPECT_TRUE(same_bits(y[size_t(2 * i + 1)], round ? round_bf16(eb) : eb)) << half << " " << i;
        }
        for (int64_t j = 2 * half; j < 2 * half + 3; ++j) EXPECT_TRUE(same_bits(y[size_t(j)], x[size_t(j)]));
      }
  }
}

TEST(LightOps, RopeQuarterTurnAndInverse) {
  // cos 0, sin 1: (u, v) -> (-v, u) exactly; the inverse (v, -u).
  const float c[2] = {0.0f, 1.0f}, s[2] = {1.0f, 0.0f};
  float x[4] = {3.0f, -5.0f, 7.0f, 11.0f};
  rope_rotate_ref(x, 2, c, s, false, false);
  EXPECT_EQ(x[0], 5.0f);
  EXPECT_EQ(x[1], 3.0f);
  EXPECT_EQ(x[2], 7.0f);
  EXPECT_EQ(x[3], 11.0f);
  rope_rotate_ref(x, 2, c, s, true, false);
  EXPECT_EQ(x[0], 3.0f);
  EXPECT_EQ(x[1], -5.0f);
}

// --- Sinkhorn --------------------------------------------------------------------------------

namespace {

// hyper_connections.md §2 as the header states it, with V the entries' type and A the sums':
// <float, double> is the bit contract, <long double, long double> the precise value.
template <class V, class A>
std::vector<V> sinkhorn_model(const std::vector<float>& c0, int64_t n, int64_t iters, V eps) {
  std::vector<V> c(c0.begin(), c0.end());
  auto at = [&](int64_t i, int64_t j) -> V& { return c[size_t(i * n + j)]; };
  for (int64_t i = 0; i < n; ++i) {
    V m = at(i, 0);
    for (int64_t j = 1; j < n; ++j) m = std::max(m, at(i, j));
    A sum = 0;
    for (int64_t j = 0; j < n; ++j) sum += std::exp(A(at(i, j)) - A(m));
    for (int64_t j = 0; j < n; ++j) at(i, j) = V(std::exp(A(at(i, j)) - A(m)) / sum) + eps;
  }
  auto pass = [&](bool rows) {
    for (int64_t a = 0; a < n; ++a) {
      A sum = 0;
      for (int64_t b = 0; b < n; ++b) sum += A(rows ? at(a, b) : at(b, a));
      const V d = V(sum) + eps;
      for (int64_t b = 0; b < n; ++b) (rows ? at(a, b) : at(b, a)) /= d;
    }
  };
  pass(false);
  for (int64_t it = 1; it < iters; ++it) {
    pass(true);
    pass(false);
  }
  return c;
}

}  // namespace

TEST(LightOps, SinkhornBitsAndLongDouble) {
  std::mt19937 rng(6);
  for (int64_t n : {1, 2, 3, 4, 5, 8})
    for (int64_t iters : {1, 2, 7, 20})
      for (float sd : {0.5f, 4.0f}) {
        const std::vector<float> c0 = normal(rng, n * n, sd);
        std::vector<float> c = c0;
        hc_sinkhorn_ref(c.data(), n, iters, 1e-6f);
        const std::vector<float> bits = sinkhorn_model<float, double>(c0, n, iters, 1e-6f);
        const std::vector<long double> want = sinkhorn_model<long double, long double>(c0, n, iters, 1e-6L);
        EXPECT_EQ(0, std::memcmp(c.data(), bits.data(), c.size() * 4)) << "n " << n << " iters " << iters;
        for (int64_t i = 0; i < n * n; ++i) {
          EXPECT_NEAR(c[size_t(i)], double(want[size_t(i)]), 2e-6 * std::max(1.0, double(iters) / 4))
              << "n " << n << " iters " << iters << " i " << i;
          EXPECT_GT(c[size_t(i)], 0.0f);
        }
        // The last pass is over columns: each sums to s / (s + eps), s its sum before (1 when
        // eps is small next to s).
        for (int64_t j = 0; j < n; ++j) {
          double col = 0;
          for (int64_t i = 0; i < n; ++i) col += c[size_t(i * n + j)];
          EXPECT_NEAR(col, 1.0, 1e-3) << "n " << n << " iters " << iters;
          if (iters > 1) {
            EXPECT_NEAR(col, 1.0, 1e-5) << "n " << n << " iters " << iters;
          }
        }
      }
}

TEST(LightOps, SinkhornExactCases) {
  // n = 1: softmax 1, + eps, then / (1 + eps + eps) (fp32): the same each iteration.
  float one[1] = {-3.0f};
  hc_sinkhorn_ref(one, 1, 1, 0.25f);
  EXPECT_EQ(one[0], 1.25f / 1.5f);
  // iters 0 does what iters 1 does.
  std::mt19937 rng(8);
  const std::vector<float> c0 = normal(rng, 16);
  std::vector<float> a = c0, b = c0;
  hc_sinkhorn_ref(a.data(), 4, 0, 1e-6f);
  hc_sinkhorn_ref(b.data(), 4, 1, 1e-6f);
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), 64));
  // A constant matrix stays uniform: every entry the same value near 1/n.
  std::vector<float> u(25, 0.7f);
  hc_sinkhorn_ref(u.data(), 5, 20, 1e-6f);
  for (float v : u) {
    EXPECT_TRUE(same_bits(v, u[0]));
    EXPECT_NEAR(v, 0.2f, 1e-5f);
  }
}

// --- mHC mixer norm and coefficients -----------------------------------------------------------

TEST(LightOps, HcMixNormBitsAndLongDouble) {
  std::mt19937 rng(22);
  for (int64_t rows : {1, 7, 8, 9, 17})
    for (int64_t width : {1, 5, 96})
      for (int64_t n_mix : {1, 24}) {
        std::vector<float> x = normal(rng, rows * width, 1.5f);
        for (int64_t t = 0; t < rows; ++t)  // rows of different scales: a mixed-up row shows
          for (int64_t i = 0; i < width; ++i) x[size_t(t * width + i)] *= float(1 + t);
        const std::vector<float> mix0 = normal(rng, rows * n_mix, 3.0f);
        std::vector<float> mix = mix0;
        hc_mix_norm_ref(x.data(), rows, width, 1e-6f, mix.data(), n_mix);
        for (int64_t t = 0; t < rows; ++t) {
          double ss = 0;
          long double lss = 0;
          for (int64_t i = 0; i < width; ++i) {
            const float v = x[size_t(t * width + i)];
            ss += double(v * v);
            lss += (long double)v * v;
          }
          const float r = float(1.0 / std::sqrt(double(float(ss / double(width)) + 1e-6f)));
          const long double lr = 1.0L / std::sqrt(lss / width + 1e-6L);
          for (int64_t k = 0; k < n_mix; ++k) {
            const float m0 = mix0[size_t(t * n_mix + k)], got = mix[size_t(t * n_mix + k)];
            EXPECT_TRUE(same_bits(got, m0 * r)) << rows << " " << width << " " << t << " " << k;
            EXPECT_LE(ulps(got, float(m0 * lr)), 3) << rows << " " << width << " " << t << " " << k;
          }
        }
        // The scale is RMSNorm's r: a row's mix of 1 becomes rms_norm_ref's output at an entry 1.
        std::vector<float> row(x.begin(), x.begin() + width), y(static_cast<size_t>(width));
        row[0] = 1.0f;
        float one = 1.0f;
        hc_mix_norm_ref(row.data(), 1, width, 1e-6f, &one, 1);
        rms_norm_ref(row.data(), nullptr, width, 1e-6f, false, y.data());
        EXPECT_TRUE(same_bits(one, y[0])) << width;
      }
}

TEST(LightOps, HcMixNormExactCasesAndNonFinite) {
  // Rows of a constant 4 with eps 0: r = 1/4 exactly; a zero row with eps 1/4: r = 2.
  std::vector<float> x(9 * 3, 4.0f), mix(9 * 2, 3.0f);
  for (int64_t i = 0; i < 3; ++i) x[size_t(6 * 3 + i)] = 0.0f;
  x[size_t(2 * 3 + 1)] = kNaN;  // row 2: NaN, alone (nine rows: a full set of lanes and one)
  hc_mix_norm_ref(x.data(), 9, 3, 0.0f, mix.data(), 2);
  for (int64_t t = 0; t < 9; ++t)
    for (int64_t k = 0; k < 2; ++k) {
      const float v = mix[size_t(t * 2 + k)];
      if (t == 2) {
        EXPECT_TRUE(std::isnan(v));
      } else if (t == 6) {
        EXPECT_EQ(v, kInf);  // 3 * rsqrt(0)
      } else {
        EXPECT_EQ(v, 0.75f) << t;
      }
    }
  std::vector<float> zero(3, 0.0f), m(1, -1.5f);
  hc_mix_norm_ref(zero.data(), 1, 3, 0.25f, m.data(), 1);
  EXPECT_EQ(m[0], -3.0f);
}

namespace {

// hyper_connections.md §1 in long double: the coefficients' precise values.
long double sigmoid_l(long double z) { return 1.0L / (1.0L + std::exp(-z)); }

}  // namespace

TEST(LightOps, HcCoeffsBitsAndLongDouble) {
  std::mt19937 rng(23);
  for (int64_t hc : {1, 2, 4, 7}) {
    const int64_t n_mix = (2 + hc) * hc;
    for (int rep = 0; rep < 20; ++rep) {
      const std::vector<float> mix = normal(rng, n_mix, 2.0f), base = normal(rng, n_mix), scale = normal(rng, 3, 1.5f);
      const float eps = rep % 2 ? 1e-6f : 0.125f;
      const int64_t iters = 1 + rep % 5;
      std::vector<float> pre(static_cast<size_t>(hc)), post(static_cast<size_t>(hc)), comb(size_t(hc * hc));
      hc_coeffs_ref(mix.data(), base.data(), scale.data(), hc, eps, iters, pre.data(), post.data(), comb.data());
      std::vector<float> logits(size_t(hc * hc));
      for (int64_t i = 0; i < hc; ++i) {
        const float zp = mix[size_t(i)] * scale[0] + base[size_t(i)];
        const float zq = mix[size_t(hc + i)] * scale[1] + base[size_t(hc + i)];
        // Bits: the fp32 logit, the sigmoid in double rounded once, then the fp32 eps / doubling.
        EXPECT_TRUE(same_bits(pre[size_t(i)], float(1.0 / (1.0 + std::exp(-double(zp)))) + eps)) << hc << " " << i;
        EXPECT_TRUE(same_bits(post[size_t(i)], 2.0f * float(1.0 / (1.0 + std::exp(-double(zq)))))) << hc << " " << i;
        EXPECT_LE(ulps(pre[size_t(i)], float(sigmoid_l(zp) + eps)), 1) << hc << " " << i;
        EXPECT_LE(ulps(post[size_t(i)], float(2 * sigmoid_l(zq))), 1) << hc << " " << i;
      }
      for (int64_t k = 0; k < hc * hc; ++k) logits[size_t(k)] = mix[size_t(2 * hc + k)] * scale[2] + base[size_t(2 * hc + k)];
      // comb: the fp32 logits through hc_sinkhorn_ref (with the same eps and iterations).
      hc_sinkhorn_ref(logits.data(), hc, iters, eps);
      EXPECT_EQ(0, std::memcmp(comb.data(), logits.data(), size_t(hc * hc) * 4)) << hc << " " << rep;
      // Pre only (the final collapse): the same pre from the first hc values alone.
      std::vector<float> head_pre(size_t(hc) + 1, -7.0f);
      const std::vector<float> head_mix(mix.begin(), mix.begin() + hc), head_base(base.begin(), base.begin() + hc);
      hc_coeffs_ref(head_mix.data(), head_base.data(), scale.data(), hc, eps, 0, head_pre.data(), nullptr, nullptr);
      EXPECT_EQ(0, std::memcmp(head_pre.data(), pre.data(), size_t(hc) * 4)) << hc;
      EXPECT_EQ(head_pre[size_t(hc)], -7.0f) << "wrote past hc";
    }
  }
}

TEST(LightOps, HcCoeffsSaturationAndOrder) {
  // Logits of -inf / +inf: pre eps / 1 + eps, post 0 / 2, exactly; a NaN logit stays NaN.
  const int64_t hc = 3;
  std::vector<float> mix((2 + hc) * hc, 0.0f), base((2 + hc) * hc, 0.0f);
  const float scale[3] = {1.0f, 1.0f, 1.0f};
  mix[0] = -kInf;
  mix[1] = kInf;
  mix[2] = kNaN;
  mix[3] = 200.0f;   // sigmoid 1 in fp32
  mix[4] = -200.0f;  // sigmoid ~1e-87: 0 in fp32
  float pre[3], post[3], comb[9];
  hc_coeffs_ref(mix.data(), base.data(), scale, hc, 0.25f, 3, pre, post, comb);
  EXPECT_EQ(pre[0], 0.25f);
  EXPECT_EQ(pre[1], 1.25f);
  EXPECT_TRUE(std::isnan(pre[2]));
  EXPECT_EQ(post[0], 2.0f);
  EXPECT_EQ(post[1], 0.0f);
  EXPECT_EQ(post[2], 1.0f);  // 2 * sigmoid(0)
  // Zero logits: a uniform comb (Sinkhorn of a constant matrix).
  for (float v : comb) EXPECT_TRUE(same_bits(v, comb[0]));
  EXPECT_NEAR(comb[0], 0.25, 0.01);  // eps 1/4 pulls the entries below 1 / 3
  // The scale multiplies the mix, then the base is added: mix 1, s 3, b 0.5 give sigmoid(3.5)
  // (not (mix + b) * s = 4.5), for pre and post alike.
  std::vector<float> m1((2 + 1) * 1, 1.0f), b1 = {0.5f, 0.5f, 0.0f};
  const float s1[3] = {3.0f, 3.0f, 1.0f};
  float p1, q1, c1;
  hc_coeffs_ref(m1.data(), b1.data(), s1, 1, 0.0f, 1, &p1, &q1, &c1);
  EXPECT_TRUE(same_bits(p1, float(1.0 / (1.0 + std::exp(-3.5)))));
  EXPECT_TRUE(same_bits(q1, 2.0f * float(1.0 / (1.0 + std::exp(-3.5)))));
  EXPECT_EQ(c1, 1.0f);  // hc 1: the softmax of one entry, then / (1 + 0)
}

// --- top-k -----------------------------------------------------------------------------------

namespace {

std::vector<int64_t> top_k(const std::vector<float>& s, int64_t k) {
  const int64_t n = int64_t(s.size());
  std::vector<int64_t> order(static_cast<size_t>(n)), spare(static_cast<size_t>(n)), out(size_t(std::max<int64_t>(k, 1)) + 1, -7);
  top_k_ref(s.data(), n, k, order.data(), spare.data(), out.data());
  EXPECT_EQ(out[size_t(std::max<int64_t>(k, 0))], -7) << "wrote past k";
  out.resize(size_t(std::max<int64_t>(k, 0)));
  return out;
}

}  // namespace

TEST(LightOps, TopKEqualsRepeatedScans) {
  std::mt19937 rng(9);
  using Gen = float (*)(std::mt19937&);
  const Gen gens[] = {
      [](std::mt19937& r) { return std::normal_distribution<float>(0.0f, 1.0f)(r); },
      [](std::mt19937& r) { return float(int(r() % 5) - 2); },                       // many ties
      [](std::mt19937& r) { return -2.0f - std::ldexp(float(r() % 512), -22); },  // one binade, low bytes
      [](std::mt19937& r) {
        const float pick[] = {0.0f, -0.0f, 1e-45f, -1e-45f, 1e-39f, kInf, -kInf, 3.0f};
        return pick[r() % 8];
      },
  };
  // 257 and 65537 cross an index byte of the radix keys.
  for (int64_t n : {1, 2, 3, 9, 255, 257, 1001, 65537}) {
    for (const Gen g : gens) {
      std::vector<float> s(static_cast<size_t>(n));
      for (float& v : s) v = g(rng);
      std::vector<int64_t> ks = {1, std::min<int64_t>(n, 2), std::min<int64_t>(n, 31), std::min<int64_t>(n, 257)};
      if (n <= 1001) ks.insert(ks.end(), {(n + 1) / 2, n});  // the O(n k) scans stay short
      for (int64_t k : ks) ASSERT_EQ(top_k(s, k), best_k_by_scans(s, k)) << "n " << n << " k " << k;
    }
  }
}

TEST(LightOps, TopKZerosTieAndKZeroWritesNothing) {
  // -0 and +0 are equal: the lower index first whatever the sign.
  EXPECT_EQ(top_k({0.0f, -0.0f, 0.0f, -0.0f}, 4), (std::vector<int64_t>{0, 1, 2, 3}));
  EXPECT_EQ(top_k({-0.0f, 0.0f, -1.0f}, 2), (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(top_k({-kInf, 5.0f, kInf}, 3), (std::vector<int64_t>{2, 1, 0}));
  EXPECT_TRUE(top_k({1.0f, 2.0f}, 0).empty());  // and the sentinel after it stays
  EXPECT_EQ(top_k({4.0f}, 1), (std::vector<int64_t>{0}));
}

TEST(LightOps, TopKWithNaNIsTheComparatorSort) {
  std::mt19937 rng(10);
  for (int64_t n : {1, 6, 301}) {
    std::vector<float> s = normal(rng, n);
    s[size_t(n / 2)] = kNaN;
    if (n > 5) s[1] = kInf;
    for (int64_t k : {int64_t(1), (n + 1) / 2, n}) {
      // The contract's comparator path, spelt out.
      std::vector<int64_t> idx(static_cast<size_t>(n));
      std::iota(idx.begin(), idx.end(), int64_t(0));
      auto before = [&](int64_t x, int64_t y) { return s[size_t(x)] != s[size_t(y)] ? s[size_t(x)] > s[size_t(y)] : x < y; };
      if (k < n) std::nth_element(idx.begin(), idx.begin() + k, idx.end(), before);
      std::sort(idx.begin(), idx.begin() + k, before);
      idx.resize(static_cast<size_t>(k));
      const std::vector<int64_t> got = top_k(s, k);
      EXPECT_EQ(got, idx) << "n " << n << " k " << k;
      std::vector<int64_t> sorted = got;
      std::sort(sorted.begin(), sorted.end());
      EXPECT_TRUE(std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end());
      EXPECT_TRUE(sorted.front() >= 0 && sorted.back() < n);
    }
  }
}

// --- router ----------------------------------------------------------------------------------

TEST(LightOps, RouterScoresSqrtSoftplus) {
  std::mt19937 rng(12);
  for (int64_t n : {1, 7, 256}) {
    std::vector<float> logits = normal(rng, n, 6.0f), score(static_cast<size_t>(n)), tempered(static_cast<size_t>(n)), one(static_cast<size_t>(n));
    logits[0] = 25.0f;  // above softplus's threshold: sqrt of the logit itself
    router_scores_ref(logits.data(), n, false, 0.0f, score.data());
    router_scores_ref(logits.data(), n, true, 2.0f, tempered.data());
    router_scores_ref(logits.data(), n, true, 1.0f, one.data());
    for (int64_t e = 0; e < n; ++e) {
      const long double z = logits[size_t(e)];
      const long double sp = z > 20 ? z : std::log1p(std::exp(z));
      EXPECT_LE(ulps(score[size_t(e)], float(std::sqrt(sp))), 1) << e;
      // The fp32 square root of the rounded softplus, and the fp32 division by temp.
      EXPECT_TRUE(same_bits(score[size_t(e)], std::sqrt(softplus_f(logits[size_t(e)]))));
      EXPECT_TRUE(same_bits(tempered[size_t(e)], std::sqrt(softplus_f(logits[size_t(e)] / 2.0f))));
      EXPECT_TRUE(same_bits(one[size_t(e)], score[size_t(e)]));
    }
    EXPECT_EQ(score[0], std::sqrt(25.0f));
  }
  const float odd[3] = {-kInf, kInf, kNaN};
  float s[3];
  router_scores_ref(odd, 3, false, 0.0f, s);
  EXPECT_EQ(s[0], 0.0f);
  EXPECT_EQ(s[1], kInf);
  EXPECT_TRUE(std::isnan(s[2]));
}

TEST(LightOps, RouterSelectByBiasedScore) {
  std::mt19937 rng(13);
  for (int64_t n : {1, 3, 16, 257}) {
    for (int rep = 0; rep < 4; ++rep) {
      std::vector<float> score(static_cast<size_t>(n)), bias(static_cast<size_t>(n));
      for (int64_t e = 0; e < n; ++e) {  // coarse values: ties in score + bias are common
        score[size_t(e)] = float(rng() % 8) * 0.25f;
        bias[size_t(e)] = rep == 0 ? 0.0f : float(int(rng() % 5) - 2) * 0.25f;
      }
      std::vector<float> biased_want(static_cast<size_t>(n));
      for (int64_t e = 0; e < n; ++e) biased_want[size_t(e)] = score[size_t(e)] + bias[size_t(e)];
      for (int64_t k : {int64_t(1), std::min<int64_t>(n, 6), n}) {
        std::vector<float> biased(static_cast<size_t>(n));
        std::vector<int32_t> order(static_cast<size_t>(n)), experts(static_cast<size_t>(k) + 1, -7);
        router_select_ref(score.data(), bias.data(), n, k, biased.data(), order.data(), experts.data());
        const std::vector<int64_t> want = best_k_by_scans(biased_want, k);
        for (int64_t j = 0; j < k; ++j) EXPECT_EQ(experts[size_t(j)], want[size_t(j)]) << "n " << n << " k " << k;
        EXPECT_EQ(experts[size_t(k)], -7);
      }
    }
  }
  // The bias decides the choice: the best raw score loses to a biased one.
  const float score[3] = {1.0f, 0.5f, 0.75f}, bias[3] = {0.0f, 0.75f, -1.0f};
  float biased[3];
  int32_t order[3], experts[2];
  router_select_ref(score, bias, 3, 2, biased, order, experts);
  EXPECT_EQ(experts[0], 1);
  EXPECT_EQ(experts[1], 0);
}

TEST(LightOps, RouterWeights) {
  const float score[4] = {1.0f, 0x1p-24f, 0x1p-24f, 0.5f};
  const int32_t experts[3] = {0, 1, 2};
  float w[3];
  // The sum is a double: 1 + 2^-24 + 2^-24 (an fp32 accumulator would stay at 1).
  router_weights_ref(score, experts, 3, true, 0.0f, 1.5f, w);
  const float den = 1.0f + 0x1p-23f;
  EXPECT_TRUE(same_bits(w[0], (1.0f / den) * 1.5f));
  EXPECT_TRUE(same_bits(w[1], (0x1p-24f / den) * 1.5f));
  EXPECT_NE(w[0], 1.5f);
  // No renormalisation: the score times route_scale (fp32).
  router_weights_ref(score, experts, 3, false, 0.0f, 2.5f, w);
  EXPECT_EQ(w[0], 2.5f);
  EXPECT_EQ(w[1], 0x1p-24f * 2.5f);
  // One expert renormalised: s / s = 1 exactly, then the scale; the epsilon joins the rounded sum.
  const int32_t last[1] = {3};
  router_weights_ref(score, last, 1, true, 0.0f, 1.5f, w);
  EXPECT_EQ(w[0], 1.5f);
  router_weights_ref(score, last, 1, true, 0.25f, 1.0f, w);
  EXPECT_EQ(w[0], 0.5f / 0.75f);
  // All-zero scores with an epsilon: 0 / eps = 0 (V4.1's 1e-20 keeps it finite).
  const float zeros[2] = {0.0f, 0.0f};
  const int32_t both[2] = {0, 1};
  router_weights_ref(zeros, both, 2, true, 1e-20f, 1.5f, w);
  EXPECT_EQ(w[0], 0.0f);
  EXPECT_EQ(w[1], 0.0f);
  // Random: renormalised weights sum to route_scale.
  std::mt19937 rng(14);
  std::vector<float> s(64);
  for (float& v : s) v = std::uniform_real_distribution<float>(0.01f, 3.0f)(rng);
  const int32_t pick[6] = {5, 63, 0, 17, 18, 40};
  float ws[6];
  router_weights_ref(s.data(), pick, 6, true, 0.0f, 2.5f, ws);
  double total = 0;
  for (float v : ws) total += v;
  EXPECT_NEAR(total, 2.5, 1e-6);
}

// --- compressor pooling ----------------------------------------------------------------------

namespace {

std::vector<float> pool(const std::vector<std::vector<float>>& kv, const std::vector<std::vector<float>>& sc,
                        int64_t width) {
  std::vector<const float*> k, s;
  for (const auto& r : kv) k.push_back(r.data());
  for (const auto& r : sc) s.push_back(r.data());
  std::vector<double> e(kv.size());
  std::vector<float> z(static_cast<size_t>(width));
  compressor_pool_ref(k.data(), s.data(), int64_t(kv.size()), width, e.data(), z.data());
  return z;
}

}  // namespace

namespace {

// attention.md §4.2 as the header states it for channel c, V the weights' and products' type,
// A the sums': <float, double> is the bit contract, <long double, long double> the precise value.
template <class V, class A>
A pool_model(const std::vector<std::vector<float>>& kv, const std::vector<std::vector<float>>& sc, int64_t c) {
  V m = -std::numeric_limits<V>::infinity();
  for (const auto& row : sc) m = std::max(m, V(row[size_t(c)]));
  std::vector<A> e;
  A den = 0;
  for (const auto& row : sc) {
    e.push_back(row[size_t(c)] == -kInf ? A(0) : std::exp(A(row[size_t(c)]) - A(m)));
    den += e.back();
  }
  A acc = 0;
  for (size_t s = 0; s < kv.size(); ++s) acc += A(V(kv[s][size_t(c)]) * V(e[s] / den));
  return acc;
}

}  // namespace

TEST(LightOps, CompressorPoolBitsAndLongDouble) {
  std::mt19937 rng(15);
  for (int64_t slots : {1, 3, 8, 128})
    for (int64_t width : {1, 5, 64}) {
      std::vector<std::vector<float>> kv, sc;
      for (int64_t s = 0; s < slots; ++s) {
        kv.push_back(normal(rng, width, 2.0f));
        sc.push_back(normal(rng, width, 3.0f));
      }
      if (slots > 2)
        for (int64_t c = 0; c < width; c += 2) sc[1][size_t(c)] = -kInf;  // absent slots in every other column
      const std::vector<float> z = pool(kv, sc, width);
      for (int64_t c = 0; c < width; ++c) {
        EXPECT_TRUE(same_bits(z[size_t(c)], float(pool_model<float, double>(kv, sc, c))))
            << slots << " " << width << " " << c;
        long double mag = 0;  // sum of |weighted values|: the scale of the rounding errors
        for (int64_t s = 0; s < slots; ++s)
          if (sc[size_t(s)][size_t(c)] != -kInf) mag += std::fabs(kv[size_t(s)][size_t(c)]);
        EXPECT_NEAR(z[size_t(c)], double(pool_model<long double, long double>(kv, sc, c)), 1e-6 * double(mag))
            << slots << " " << width << " " << c;
      }
    }
}

TEST(LightOps, CompressorPoolExactCasesAndNonFinite) {
  // One slot: weight exactly 1, z = kv.
  EXPECT_EQ(pool({{3.5f, -2.0f}}, {{-7.0f, 40.0f}}, 2), (std::vector<float>{3.5f, -2.0f}));
  // Equal scores over four slots: weights 1/4 exactly, the mean.
  EXPECT_EQ(pool({{1.0f}, {2.0f}, {4.0f}, {9.0f}}, {{0.3f}, {0.3f}, {0.3f}, {0.3f}}, 1)[0], 4.0f);
  // A slot of score -inf weighs exactly nothing, whatever its (finite) value.
  EXPECT_EQ(pool({{1e30f}, {6.0f}}, {{-kInf}, {-5.0f}}, 1)[0], 6.0f);
  // Every slot -inf: 0 / 0.
  EXPECT_TRUE(std::isnan(pool({{1.0f}, {2.0f}}, {{-kInf}, {-kInf}}, 1)[0]));
  // A NaN score or a +inf one: the column is NaN; the other columns keep their values.
  const std::vector<float> z = pool({{1.0f, 1.0f, 1.0f}, {2.0f, 2.0f, 2.0f}}, {{kNaN, kInf, 0.0f}, {0.0f, 0.0f, 0.0f}}, 3);
  EXPECT_TRUE(std::isnan(z[0]));
  EXPECT_TRUE(std::isnan(z[1]));
  EXPECT_EQ(z[2], 1.5f);
}

// --- Engram ------------------------------------------------------------------------------------

namespace {

// v41.md §6.4 as the header states it: the gate's bits (fp32 products, double sums, the
// transcendentals in double rounded once), written without the op's helpers.
float engram_gate_model(const std::vector<float>& h, const std::vector<float>& key, const std::vector<float>& qk,
                        float eps) {
  const int64_t d = int64_t(h.size());
  auto r = [&](const std::vector<float>& v) {
    double ss = 0;
    for (float x : v) ss += double(x * x);
    return float(1.0 / std::sqrt(double(float(ss / double(d)) + eps)));
  };
  const float rho = r(h) * r(key);
  double acc = 0;
  for (int64_t j = 0; j < d; ++j) acc += double(h[size_t(j)] * qk[size_t(j)] * key[size_t(j)]);
  const float dot = float(acc) * rho * float(1.0 / std::sqrt(double(d)));
  const float mag = float(std::sqrt(double(std::fabs(dot) < 1e-6f ? 1e-6f : std::fabs(dot))));
  return float(1.0 / (1.0 + std::exp(-double(dot < 0 ? -mag : mag))));
}

// The precise gate in long double, and a bound on how far the fp32 products can move the dot
// (a few fp32 roundings of each |h qk key| term, normalised as the dot is): near the 1e-6
// floor the square root magnifies that error.
struct PreciseGate {
  long double gate, tol;
};
PreciseGate engram_gate_l(const std::vector<float>& h, const std::vector<float>& key, const std::vector<float>& qk,
                          long double eps) {
  const int64_t d = int64_t(h.size());
  long double hs = 0, ks = 0, acc = 0, mag_sum = 0;
  for (int64_t j = 0; j < d; ++j) {
    const long double t = (long double)h[size_t(j)] * qk[size_t(j)] * key[size_t(j)];
    hs += (long double)h[size_t(j)] * h[size_t(j)];
    ks += (long double)key[size_t(j)] * key[size_t(j)];
    acc += t;
    mag_sum += std::fabs(t);
  }
  const long double norm = 1 / std::sqrt(hs / d + eps) / std::sqrt(ks / d + eps) / std::sqrt((long double)d);
  const long double dot = acc * norm, floored = std::max(std::fabs(dot), 1e-6L), mag = std::sqrt(floored);
  const long double dot_err = 8 * 0x1p-24L * (mag_sum * norm + std::fabs(dot));
  return {sigmoid_l(dot < 0 ? -mag : mag), 4e-7L + 0.25L * dot_err / (2 * mag)};
}

}  // namespace

TEST(LightOps, EngramUpdateBitsAndLongDouble) {
  std::mt19937 rng(24);
  for (int64_t d : {1, 3, 64, 257})
    for (int rep = 0; rep < 8; ++rep) {
      const std::vector<float> h0 = normal(rng, d, 0.5f + float(rep)), key = normal(rng, d, 2.0f),
                               qk = normal(rng, d, 1.0f + 2.0f * float(rep)), value = normal(rng, d);
      const float eps = rep % 2 ? 1e-20f : 1e-6f;
      const float want_gate = engram_gate_model(h0, key, qk, eps);
      for (bool round : {false, true}) {
        std::vector<float> h = h0;
        const float gate = engram_update_ref(h.data(), key.data(), qk.data(), value.data(), d, eps, round);
        EXPECT_TRUE(same_bits(gate, want_gate)) << d << " " << rep;
        // The long double gate: within a few ulps, more where the dot's rounding is magnified.
        const PreciseGate precise = engram_gate_l(h0, key, qk, eps);
        EXPECT_NEAR(gate, double(precise.gate), double(precise.tol)) << d << " " << rep;
        for (int64_t j = 0; j < d; ++j) {
          const float v = h0[size_t(j)] + want_gate * value[size_t(j)];  // fp32 product and sum, one rounding
          EXPECT_TRUE(same_bits(h[size_t(j)], round ? round_bf16(v) : v)) << d << " " << rep << " " << j;
        }
      }
    }
}

TEST(LightOps, EngramUpdateExactCasesAndNonFinite) {
  // d 1, eps 0: rho = 1/2 * 1/4, dot = 2 * 9 * 4 / 8 = 9 exactly, gate sigmoid(3).
  float h[1] = {2.0f};
  const float key[1] = {4.0f}, qk[1] = {9.0f}, value[1] = {-1.0f};
  const float g3 = float(1.0 / (1.0 + std::exp(-3.0)));
  EXPECT_TRUE(same_bits(engram_update_ref(h, key, qk, value, 1, 0.0f, false), g3));
  EXPECT_TRUE(same_bits(h[0], 2.0f - g3));
  // The signed root: qk -9 gives dot -9 and the gate sigmoid(-3).
  h[0] = 2.0f;
  const float qk_neg[1] = {-9.0f};
  EXPECT_TRUE(same_bits(engram_update_ref(h, key, qk_neg, value, 1, 0.0f, true), float(1.0 / (1.0 + std::exp(3.0)))));
  EXPECT_TRUE(same_bits(h[0], round_bf16(2.0f + float(1.0 / (1.0 + std::exp(3.0))) * -1.0f)));
  // Below the floor: |dot| < 1e-6 takes sqrt(1e-6) with the dot's sign; a zero dot (qk 0) the
  // positive one.
  const float floor_mag = float(std::sqrt(double(1e-6f)));
  const float up = float(1.0 / (1.0 + std::exp(-double(floor_mag)))), down = float(1.0 / (1.0 + std::exp(double(floor_mag))));
  ASSERT_GT(up, 0.5f);
  ASSERT_LT(down, 0.5f);
  std::vector<float> hs(5, 1.0f), ks(5, 1.0f), vs(5, 0.0f), tiny(5, -1e-9f), zero(5, 0.0f);
  EXPECT_TRUE(same_bits(engram_update_ref(hs.data(), ks.data(), tiny.data(), vs.data(), 5, 0.0f, false), down));
  EXPECT_TRUE(same_bits(engram_update_ref(hs.data(), ks.data(), zero.data(), vs.data(), 5, 0.0f, false), up));
  for (float v : hs) EXPECT_EQ(v, 1.0f);  // value 0: the stream unchanged
  // A NaN in the stream: NaN gate, the whole stream NaN; a zero key with eps 0: rho inf, 0 * inf.
  std::vector<float> hn = {1.0f, kNaN, 2.0f};
  const std::vector<float> k3(3, 1.0f), q3(3, 1.0f), v3(3, 1.0f), k0(3, 0.0f);
  EXPECT_TRUE(std::isnan(engram_update_ref(hn.data(), k3.data(), q3.data(), v3.data(), 3, 1e-20f, true)));
  for (float v : hn) EXPECT_TRUE(std::isnan(v));
  std::vector<float> hz = {1.0f, 2.0f, 3.0f};
  EXPECT_TRUE(std::isnan(engram_update_ref(hz.data(), k0.data(), q3.data(), v3.data(), 3, 0.0f, false)));
}
