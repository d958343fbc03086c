// Every cpu backend variant this machine supports (Scalar, AVX2, AVX-512; NEON, NEON + BF16
// on aarch64), forced one by one,
// against the scalar referee: awkward shapes and tails, both numerics paths (fp32 and
// bf16-exact activations), act-quant blocks of V4 and V4.1, special values, guard values
// after the outputs, thread counts 1/2/3; the vectorised act_quant bit for bit; linear_many
// against single calls.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "core/cpu_features.h"
#include "kernels/backend.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/kernels.h"

using namespace deepinfer;
using namespace deepinfer::kernels;

namespace {

std::vector<Isa> supported_isas() {
  std::vector<Isa> v;
  for (Isa isa : kAllIsas)
    if (isa_supported(isa)) v.push_back(isa);
  return v;
}

// fp32 lanes of an ISA's vector FMA (its fma_chains); its bf16 dot-product instruction's lanes
// (two products each: vdpbf16ps, a BFMLALT + BFMLALB pair).
int64_t fma_lanes(Isa isa) { return isa == Isa::Avx2 ? 8 : isa == Isa::Avx512 ? 16 : 4; }
int64_t bf16_dot_lanes(Isa isa) { return isa == Isa::Avx512 ? 16 : 4; }

struct Weight {
  std::vector<uint8_t> data, scale;
  WeightMatrix w;
};

// Random weight; FP8 block edge `block` (128 for V4, 32 for V4.1); scale bytes in [s_lo, s_hi].
Weight make_weight(WeightFormat f, int64_t rows, int64_t cols, std::mt19937& rng, int64_t block = 128,
                   int s_lo = 118, int s_hi = 128) {
  Weight o;
  o.w.format = f;
  o.w.rows = rows;
  o.w.cols = cols;
  std::uniform_int_distribution<int> byte(0, 255), sc(s_lo, s_hi);
  std::normal_distribution<float> nd(0.0f, 0.05f);
  if (f == WeightFormat::FP8_BLOCK) {
    o.data.resize(rows * cols);
    for (auto& b : o.data) {
      do b = uint8_t(byte(rng));
      while ((b & 0x7f) == 0x7f);
    }
    o.w.block = block;
    o.w.scale_cols = (cols + block - 1) / block;
    o.scale.resize(((rows + block - 1) / block) * o.w.scale_cols);
  } else if (f == WeightFormat::FP4_BLOCK) {
    o.data.resize(rows * cols / 2);
    for (auto& b : o.data) b = uint8_t(byte(rng));
    o.w.block = 32;
    o.w.scale_cols = cols / 32;
    o.scale.resize(rows * o.w.scale_cols);
  } else if (f == WeightFormat::BF16) {
    o.data.resize(rows * cols * 2);
    for (int64_t i = 0; i < rows * cols; ++i) {
      uint16_t h = f32_to_bf16(nd(rng));
      o.data[2 * i] = uint8_t(h);
      o.data[2 * i + 1] = uint8_t(h >> 8);
    }
  } else {
    o.data.resize(rows * cols * 4);
    for (int64_t i = 0; i < rows * cols; ++i) {
      float v = nd(rng);
      std::memcpy(&o.data[4 * i], &v, 4);
    }
  }
  for (auto& s : o.scale) s = uint8_t(sc(rng));
  o.w.data = o.data.data();
  o.w.scale = o.scale.empty() ? nullptr : o.scale.data();
  return o;
}

enum class XKind { Bf16, F32, Sparse };

std::vector<float> make_x(int64_t M, int64_t K, XKind kind, std::mt19937& rng) {
  std::normal_distribution<float> nd(0.0f, 2.0f);
  std::uniform_int_distribution<int> coin(0, 3);
  std::vector<float> x(M * K);
  for (auto& v : x) {
    v = nd(rng);
    if (kind == XKind::Bf16) v = round_bf16(v);
    if (kind == XKind::Sparse && coin(rng) != 0) v = 0.0f;
  }
  return x;
}

// Sum over k of |x * w| for every output: the scale of fp32 reassociation noise.
std::vector<double> magnitudes(const std::vector<float>& x, int64_t M, const WeightMatrix& W) {
  const int64_t N = W.rows, K = W.cols;
  std::vector<double> mag(M * N);
  std::vector<float> row(K);
  for (int64_t n = 0; n < N; ++n) {
    weight_decode_row(W, n, row.data());
    for (int64_t m = 0; m < M; ++m) {
      double s = 0;
      for (int64_t k = 0; k < K; ++k) s += std::abs(double(x[m * K + k]) * row[k]);
      mag[m * N + n] = s;
    }
  }
  return mag;
}

constexpr float kGuard = 1234.5f;
constexpr int kGuards = 7;

// Runs f(y) into a buffer with guard values after the M*N outputs; checks the guards.
template <class F>
std::vector<float> guarded(int64_t count, F&& f, const std::string& what) {
  std::vector<float> y(count + kGuards, kGuard);
  f(y.data());
  for (int g = 0; g < kGuards; ++g) EXPECT_EQ(y[count + g], kGuard) << what << ": guard " << g << " overwritten";
  y.resize(count);
  return y;
}

::testing::AssertionResult close(const std::vector<float>& got, const std::vector<float>& want,
                                 const std::vector<double>& mag, double rel) {
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(want[i])) {
      if (!std::isnan(got[i])) return ::testing::AssertionFailure() << "index " << i << ": want NaN, got " << got[i];
      continue;
    }
    if (!std::isfinite(got[i])) return ::testing::AssertionFailure() << "index " << i << ": got " << got[i];
    const double err = std::abs(double(got[i]) - double(want[i]));
    if (err > rel * mag[i] + 1e-30)
      return ::testing::AssertionFailure() << "index " << i << ": got " << got[i] << " want " << want[i] << " err "
                                           << err << " > " << rel << " * " << mag[i];
  }
  return ::testing::AssertionSuccess();
}

std::string label(Isa isa, WeightFormat f, int64_t M, int64_t N, int64_t K, int threads, const char* path) {
  static const char* names[] = {"F32", "BF16", "FP8", "FP4"};
  return std::string(isa_name(isa)) + " " + names[int(f)] + " " + path + " M=" + std::to_string(M) +
         " N=" + std::to_string(N) + " K=" + std::to_string(K) + " threads=" + std::to_string(threads);
}

// linear_f32 of every variant against linear_f32_ref.
void check_linear(const Backend& be, Isa isa, int threads, const Weight& o, int64_t M, XKind kind, std::mt19937& rng,
                  float x_scale = 1.0f) {
  const int64_t N = o.w.rows, K = o.w.cols;
  std::vector<float> x = make_x(M, K, kind, rng);
  for (auto& v : x) v *= x_scale;
  std::vector<float> want(M * N);
  linear_f32_ref(x.data(), M, o.w, want.data());
  const std::string what = label(isa, o.w.format, M, N, K, threads, kind == XKind::F32 ? "f32" : "bf16-x");
  const std::vector<float> got =
      guarded(M * N, [&](float* y) { be.linear_f32(x.data(), M, o.w, y); }, what);
  EXPECT_TRUE(close(got, want, magnitudes(x, M, o.w), 1e-5)) << what;
}

// linear_act_quant against linear_act_quant_ref; magnitudes from the act-quantised x.
void check_act_quant(const Backend& be, Isa isa, int threads, const Weight& o, int64_t M, int64_t ab,
                     std::mt19937& rng, float x_scale = 1.0f) {
  const int64_t N = o.w.rows, K = o.w.cols;
  std::vector<float> x = make_x(M, K, XKind::Bf16, rng);
  for (auto& v : x) v *= x_scale;
  std::vector<float> want(M * N), xq = x;
  linear_act_quant_ref(x.data(), M, o.w, ab, want.data());
  for (int64_t m = 0; m < M; ++m) act_quant_ref(xq.data() + m * K, K, ab);
  const std::string what = label(isa, o.w.format, M, N, K, threads, "act-quant") + " act_block=" + std::to_string(ab);
  const std::vector<float> got =
      guarded(M * N, [&](float* y) { be.linear_act_quant(x.data(), M, o.w, ab, y); }, what);
  EXPECT_TRUE(close(got, want, magnitudes(xq, M, o.w), 2e-5)) << what;
}

}  // namespace

TEST(CpuIsa, FeaturesAndDispatch) {
  EXPECT_FALSE(cpu_features_description().empty());
  EXPECT_TRUE(isa_supported(Isa::Scalar));
  EXPECT_TRUE(isa_supported(cpu_dispatch_isa()));
  ThreadPool pool(2);
  auto be = make_cpu_backend(&pool);
  EXPECT_STREQ(be->name(), "cpu");
  EXPECT_EQ(be->pool(), &pool);
  for (Isa isa : kAllIsas) {
    const std::string forced = std::string("cpu-") + isa_name(isa);  // --kernels cpu-avx2 etc.
    if (isa_supported(isa)) {
      EXPECT_NO_THROW(make_cpu_backend_isa(&pool, isa));
      EXPECT_NO_THROW(make_backend(forced, &pool));
    } else {
      EXPECT_THROW(make_cpu_backend_isa(&pool, isa), std::invalid_argument);
      EXPECT_THROW(make_backend(forced, &pool), std::invalid_argument);
    }
  }
  EXPECT_THROW(make_backend("cpu-sse", &pool), std::invalid_argument);
  EXPECT_FALSE(cpu_model_name().empty());
  std::printf("cpu features: %s; dispatch: %s\n", cpu_features_description().c_str(), isa_name(cpu_dispatch_isa()));
}

// F32 / BF16 weights: K tails around the vector widths, odd N, decode and prefill M.
TEST(CpuIsa, LinearPlainWeightsTails) {
  std::mt19937 rng(21);
  for (Isa isa : supported_isas())
    for (int threads : {1, 2, 3}) {
      ThreadPool pool(threads);
      auto be = make_cpu_backend_isa(&pool, isa);
      for (auto f : {WeightFormat::F32, WeightFormat::BF16})
        for (int64_t K : {1, 7, 15, 16, 17, 31, 33, 63, 65, 100, 130})
          for (int64_t M : {1, 2, 3, 5, 17})
            for (int64_t N : {1, 9, 31}) {
              Weight o = make_weight(f, N, K, rng);
              check_linear(*be, isa, threads, o, M, XKind::F32, rng);
              check_linear(*be, isa, threads, o, M, XKind::Bf16, rng);
            }
    }
}

TEST(CpuIsa, LinearAllFormatsDecodeAndPrefill) {
  std::mt19937 rng(22);
  for (Isa isa : supported_isas())
    for (int threads : {1, 2, 3}) {
      ThreadPool pool(threads);
      auto be = make_cpu_backend_isa(&pool, isa);
      for (auto f : {WeightFormat::F32, WeightFormat::BF16, WeightFormat::FP8_BLOCK, WeightFormat::FP4_BLOCK})
        for (int64_t M : {1, 2, 3, 4, 7, 8, 9, 17, 64})
          for (int64_t N : {1, 7, 33})
            for (int64_t K : {128, 384}) {
              Weight o = make_weight(f, N, K, rng);
              for (XKind kind : {XKind::F32, XKind::Bf16, XKind::Sparse}) check_linear(*be, isa, threads, o, M, kind, rng);
            }
    }
}

// FP8 with K not a multiple of the block or of the vector width (the float path takes any
// K), the V4.1 block of 32, and more rows than one scale block.
TEST(CpuIsa, LinearFp8BlocksAndTails) {
  std::mt19937 rng(23);
  for (Isa isa : supported_isas()) {
    ThreadPool pool(2);
    auto be = make_cpu_backend_isa(&pool, isa);
    for (int64_t block : {128, 32})
      for (int64_t K : {40, 72, 200, 256, 300})
        for (int64_t M : {1, 3, 9})
          for (int64_t N : {5, 45, 161}) {
            Weight o = make_weight(WeightFormat::FP8_BLOCK, N, K, rng, block);
            check_linear(*be, isa, 2, o, M, XKind::F32, rng);
            check_linear(*be, isa, 2, o, M, XKind::Bf16, rng);
          }
    for (int64_t K : {32, 96, 160, 416})
      for (int64_t M : {1, 2, 6})
        for (int64_t N : {3, 34}) {
          Weight o = make_weight(WeightFormat::FP4_BLOCK, N, K, rng);
          check_linear(*be, isa, 2, o, M, XKind::F32, rng);
          check_linear(*be, isa, 2, o, M, XKind::Bf16, rng);
        }
  }
}

// The act-quant GEMM: V4 (act block 128, FP8 B = 128 / FP4) and V4.1 (act block 32, FP8
// B = 32 / FP4), plus act blocks the SIMD path hands to Scalar (FP8 B = 128 with act block
// 256; FP4 with act block 16) and activations so large their scale leaves the exact range.
TEST(CpuIsa, LinearActQuant) {
  std::mt19937 rng(24);
  for (Isa isa : supported_isas())
    for (int threads : {1, 2, 3}) {
      ThreadPool pool(threads);
      auto be = make_cpu_backend_isa(&pool, isa);
      for (int64_t M : {1, 2, 3, 17, 64})
        for (int64_t N : {1, 31, 130})
          for (int64_t K : {128, 384}) {
            Weight fp8 = make_weight(WeightFormat::FP8_BLOCK, N, K, rng, 128);
            Weight fp8_32 = make_weight(WeightFormat::FP8_BLOCK, N, K, rng, 32);
            Weight fp4 = make_weight(WeightFormat::FP4_BLOCK, N, K, rng);
            check_act_quant(*be, isa, threads, fp8, M, 128, rng);
            check_act_quant(*be, isa, threads, fp8_32, M, 32, rng);
            check_act_quant(*be, isa, threads, fp4, M, 128, rng);
            check_act_quant(*be, isa, threads, fp4, M, 32, rng);
          }
    }
  for (Isa isa : supported_isas()) {
    ThreadPool pool(2);
    auto be = make_cpu_backend_isa(&pool, isa);
    for (int64_t M : {1, 9}) {
      Weight fp8 = make_weight(WeightFormat::FP8_BLOCK, 40, 512, rng, 128);
      Weight fp4 = make_weight(WeightFormat::FP4_BLOCK, 40, 512, rng);
      check_act_quant(*be, isa, 2, fp8, M, 256, rng);
      check_act_quant(*be, isa, 2, fp8, M, 64, rng);
      check_act_quant(*be, isa, 2, fp4, M, 16, rng);
      check_act_quant(*be, isa, 2, fp4, M, 64, rng);
      check_act_quant(*be, isa, 2, fp8, M, 128, rng, 1e30f);
      check_act_quant(*be, isa, 2, fp4, M, 128, rng, 1e-30f);
    }
  }
}

// Weight scales far from 1 (the prefill path then keeps fp32 tiles) but products inside the
// fp32 range (the referee accumulates in double and cannot overflow), zero weights.
TEST(CpuIsa, ExtremeScalesAndZeros) {
  std::mt19937 rng(25);
  for (Isa isa : supported_isas()) {
    ThreadPool pool(2);
    auto be = make_cpu_backend_isa(&pool, isa);
    for (auto [lo, hi] : {std::pair{1, 20}, std::pair{180, 227}, std::pair{60, 200}})
      for (int64_t M : {1, 12}) {
        Weight fp8 = make_weight(WeightFormat::FP8_BLOCK, 50, 256, rng, 128, lo, hi);
        Weight fp4 = make_weight(WeightFormat::FP4_BLOCK, 50, 256, rng, 32, lo, hi);
        check_linear(*be, isa, 2, fp8, M, XKind::Bf16, rng);
        check_linear(*be, isa, 2, fp4, M, XKind::Bf16, rng);
        check_act_quant(*be, isa, 2, fp8, M, 128, rng);
        check_act_quant(*be, isa, 2, fp4, M, 128, rng);
      }
    for (int64_t M : {1, 12}) {  // scales up to 2^125 (AVX2 hands bytes >= 247 to Scalar), small codes
      Weight big = make_weight(WeightFormat::FP8_BLOCK, 50, 256, rng, 128, 240, 252);
      for (auto& b : big.data) b &= 0x9f;  // exponent field <= 3: |code| < 2^-3
      check_linear(*be, isa, 2, big, M, XKind::Bf16, rng, 0x1p-110f);
      check_linear(*be, isa, 2, big, M, XKind::F32, rng, 0x1p-110f);
    }
    for (int64_t M : {1, 12}) {
      Weight z = make_weight(WeightFormat::FP8_BLOCK, 20, 256, rng);
      std::fill(z.data.begin(), z.data.end(), uint8_t(0x80));  // -0
      check_linear(*be, isa, 2, z, M, XKind::F32, rng);
      check_act_quant(*be, isa, 2, z, M, 128, rng);
    }
  }
}

// Every FP4 code under every scale byte decodes to the referee's weight bit for bit: row b of
// the weight has scale byte b (subnormal products at 0-3, inf at 252-254, NaN at 255) and
// column j code j % 16; a one-hot activation row reads one column, so each output is one
// weight (or NaN where the row holds an inf, as in the referee). Decode and prefill paths.
TEST(CpuIsa, Fp4EveryScaleByteAndCodeExact) {
  const int64_t N = 256, K = 64;
  Weight o;
  o.w.format = WeightFormat::FP4_BLOCK;
  o.w.rows = N;
  o.w.cols = K;
  o.w.scale_cols = K / 32;
  o.data.resize(N * K / 2);
  o.scale.resize(N * K / 32);
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t j = 0; j < K / 2; ++j) o.data[n * K / 2 + j] = uint8_t((2 * j) % 16 | ((2 * j + 1) % 16) << 4);
    for (int64_t b = 0; b < K / 32; ++b) o.scale[n * K / 32 + b] = uint8_t(n);
  }
  o.w.data = o.data.data();
  o.w.scale = o.scale.data();
  for (Isa isa : supported_isas()) {
    ThreadPool pool(2);
    auto be = make_cpu_backend_isa(&pool, isa);
    // Decode: one call per column; prefill: 16 rows reading 16 columns of distinct codes.
    for (int64_t call = 0; call < K + 1; ++call) {
      const int64_t M = call < K ? 1 : 16;
      std::vector<float> x(M * K, 0.0f);
      for (int64_t m = 0; m < M; ++m) x[m * K + (M == 1 ? call : (m * 5 + 3) % K)] = 1.0f;
      std::vector<float> want(M * N), got(M * N);
      linear_f32_ref(x.data(), M, o.w, want.data());
      be->linear_f32(x.data(), M, o.w, got.data());
      int64_t finite = 0;
      for (int64_t i = 0; i < M * N; ++i) {
        if (std::isnan(want[i])) {
          EXPECT_TRUE(std::isnan(got[i])) << isa_name(isa) << " M=" << M << " scale byte " << i % N;
          continue;
        }
        ++finite;
        EXPECT_EQ(std::bit_cast<uint32_t>(got[i]), std::bit_cast<uint32_t>(want[i]))
            << isa_name(isa) << " M=" << M << " scale byte " << i % N << ": got " << got[i] << " want " << want[i];
      }
      EXPECT_GT(finite, M * 240) << "most rows are finite";
    }
  }
}

// NaN weight codes / NaN scales / NaN activations give NaN exactly where the referee does.
TEST(CpuIsa, NanPropagation) {
  std::mt19937 rng(26);
  for (Isa isa : supported_isas()) {
    ThreadPool pool(2);
    auto be = make_cpu_backend_isa(&pool, isa);
    for (int64_t M : {1, 2, 10}) {
      Weight fp8 = make_weight(WeightFormat::FP8_BLOCK, 260, 256, rng);
      fp8.data[5 * 256 + 17] = 0x7f;    // row 5
      fp8.data[77 * 256 + 255] = 0xff;  // row 77, last column
      fp8.scale[1 * 2 + 1] = 0xff;      // rows 128..255, columns 128..255
      Weight fp4 = make_weight(WeightFormat::FP4_BLOCK, 9, 128, rng);
      fp4.scale[3 * 4 + 2] = 0xff;  // row 3
      for (const Weight* o : {&fp8, &fp4}) {
        check_linear(*be, isa, 2, *o, M, XKind::F32, rng);
        check_linear(*be, isa, 2, *o, M, XKind::Bf16, rng);
        check_act_quant(*be, isa, 2, *o, M, 128, rng);
      }
      // a NaN activation poisons its own output row only
      Weight bf = make_weight(WeightFormat::BF16, 13, 100, rng);
      std::vector<float> x = make_x(M, 100, XKind::Bf16, rng), want(M * 13);
      x[(M - 1) * 100 + 42] = std::numeric_limits<float>::quiet_NaN();
      linear_f32_ref(x.data(), M, bf.w, want.data());
      std::vector<float> got(M * 13);
      be->linear_f32(x.data(), M, bf.w, got.data());
      for (int64_t i = 0; i < M * 13; ++i) EXPECT_EQ(std::isnan(got[i]), std::isnan(want[i])) << isa_name(isa) << " " << i;
    }
  }
}

// A BF16 matrix with a row_check memo: the first call fills it (1 in range, 2 not: a
// subnormal, a huge value, a NaN), and calls with the memo give the same bits as without
// one, for every M and thread count; rows marked 2 keep taking the fp32 arithmetic. Tiles
// (16, 37 rows) whose rows were all seen in range multiply the stored rows in place (AVX-512
// dp tiles: rows 48-95 here), the last partial group of rows is decoded.
TEST(CpuIsa, Bf16RowCheckMemoChangesNothing) {
  std::mt19937 rng(33);
  for (Isa isa : supported_isas())
    for (int64_t K : {96, 2048}) {
      const int64_t N = 101;
      Weight o = make_weight(WeightFormat::BF16, N, K, rng);
      auto set = [&](int64_t r, int64_t c, uint16_t bits) { std::memcpy(&o.data[2 * (r * K + c)], &bits, 2); };
      for (int64_t c = 0; c < K; ++c) set(3, c, 0);
      set(3, 5, 0x0001);  // a lone subnormal: bf16 dot products would flush it, fp32 keeps it
      set(17, K - 1, 0x7f00);  // 2^127: outside the exact range
      set(40, 0, 0x7fc1);      // NaN
      std::vector<uint8_t> memo(N, 0);
      for (int64_t M : {1, 2, 5, 16, 37}) {
        const std::vector<float> x = make_x(M, K, XKind::Bf16, rng);
        for (int threads : {1, 3}) {
          ThreadPool pool(threads);
          auto be = make_cpu_backend_isa(&pool, isa);
          std::vector<float> plain(M * N), with_memo(M * N);
          WeightMatrix w = o.w;
          be->linear_f32(x.data(), M, w, plain.data());
          w.row_check = memo.data();
          for (int pass = 0; pass < 2; ++pass) {
            be->linear_f32(x.data(), M, w, with_memo.data());
            ASSERT_EQ(0, std::memcmp(plain.data(), with_memo.data(), plain.size() * sizeof(float)))
                << isa_name(isa) << " K " << K << " M " << M << " threads " << threads << " pass " << pass;
          }
        }
      }
      if (isa == Isa::Avx512) {  // the AVX-512 decode path fills the memo
        for (int64_t r = 0; r < N; ++r)
          EXPECT_EQ(memo[r], (r == 3 || r == 17 || r == 40) ? 2 : 1) << "K " << K << " row " << r;
      }
    }
}

// The first index where a and b differ in bits, NaN against NaN aside (-1: none). A row whose
// products meet both a NaN code and inf - inf ends in a NaN whose sign depends on which of
// them the summation order met first (x86 keeps the first operand's NaN; inf - inf gives the
// negative default NaN): its bits say nothing, its NaN-ness does.
static int64_t first_bit_difference(const float* a, const float* b, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0 && !(std::isnan(a[i]) && std::isnan(b[i]))) return i;
  return -1;
}

// FP8 GEMV shortcuts change no bit: calls of 1, 2, 3, 5 and 8 rows (GEMV paths; at one and two
// rows AVX2 may put the block scales on x) give the same outputs as that row inside a nine-row
// call (the tiled path, never scaled), for x of ordinary, tiny (subnormal products), huge,
// infinite and zero values and scale bytes from the subnormal-weight range to 246 (AVX2 takes
// bytes up to 134: 125-134 are its large ones; above, the call goes to Scalar); and a
// row_check memo (filled on the first call: 2 for a row holding a NaN code, 1 otherwise)
// gives the same bits as no memo.
TEST(CpuIsa, Fp8ShortcutsChangeNothing) {
  std::mt19937 rng(41);
  const float inf = std::numeric_limits<float>::infinity();
  for (Isa isa : supported_isas()) {
    ThreadPool pool(2);
    auto be = make_cpu_backend_isa(&pool, isa);
    for (auto [lo, hi] : {std::pair{1, 12}, std::pair{110, 130}, std::pair{125, 134}, std::pair{200, 246}})
      for (int kind = 0; kind < 6; ++kind)
        for (int64_t K : {256, 200}) {
          const int64_t N = 260;
          Weight o = make_weight(WeightFormat::FP8_BLOCK, N, K, rng, 128, lo, hi);
          o.data[7 * K + 3] = 0x7f;  // a NaN code in row 7
          std::vector<float> x = make_x(1, K, XKind::F32, rng);
          if (kind == 1) x[5] = 0x1p-140f;                  // x * 2^(b-7) subnormal for small b
          if (kind == 2) x[K - 1] = 0x1p100f;               // overflows once scaled by large b
          if (kind == 3) x[9] = -inf;                       // stays inf either way
          if (kind == 4) std::fill(x.begin(), x.end(), 0.0f);
          if (kind == 5) for (auto& v : x) v *= 0x1p-120f;  // every value tiny
          std::vector<float> x9;
          for (int m = 0; m < 9; ++m) x9.insert(x9.end(), x.begin(), x.end());
          std::vector<float> nine(9 * N), many(8 * N), memo_out(N);
          be->linear_f32(x9.data(), 9, o.w, nine.data());
          const std::string what = std::string(isa_name(isa)) + " scales " + std::to_string(lo) + "-" +
                                   std::to_string(hi) + " x kind " + std::to_string(kind) + " K " + std::to_string(K);
          for (int64_t M : {8, 5, 3, 2, 1}) {
            be->linear_f32(x9.data(), M, o.w, many.data());
            for (int64_t m = 0; m < M; ++m)
              EXPECT_EQ(-1, first_bit_difference(nine.data(), many.data() + m * N, N)) << what << " M " << M << ", row " << m;
          }
          const std::vector<float> one(many.begin(), many.begin() + N);  // the one-row call's
          std::vector<uint8_t> memo(N, 0);
          WeightMatrix w = o.w;
          w.row_check = memo.data();
          for (int pass = 0; pass < 2; ++pass) {
            be->linear_f32(x.data(), 1, w, memo_out.data());
            EXPECT_EQ(0, std::memcmp(one.data(), memo_out.data(), N * sizeof(float))) << what << " pass " << pass;
          }
          EXPECT_TRUE(std::isnan(memo_out[7])) << what;
          if (isa == Isa::Avx2 && hi <= 134) {
            for (int64_t r = 0; r < N; ++r) EXPECT_EQ(memo[r], r == 7 ? 2 : 1) << what << " row " << r;
          }
        }
  }
}

// Calls of 2 to 8 activation rows (a speculative verify chunk, a few decoding sequences) run
// multi-row GEMV paths (AVX2: x copied interleaved, some rows in two passes; FP8 at two rows
// with the block scales put on x, a block of weight rows at a time): every output has the bits
// of its row computed alone, with K tails, rows crossing FP8 scale blocks, a NaN code, and the
// FP8 NaN memo filled by the multi-row call and then used by it.
TEST(CpuIsa, MultiRowGemvEqualsOneRowCalls) {
  std::mt19937 rng(42);
  for (Isa isa : supported_isas())
    for (int threads : {1, 3}) {
      ThreadPool pool(threads);
      auto be = make_cpu_backend_isa(&pool, isa);
      for (auto f : {WeightFormat::F32, WeightFormat::BF16, WeightFormat::FP8_BLOCK, WeightFormat::FP4_BLOCK})
        for (int64_t K : {96, 200, 256}) {
          if (f == WeightFormat::FP4_BLOCK && K % 32 != 0) continue;
          const int64_t N = 261;
          Weight o = make_weight(f, N, K, rng);
          if (f == WeightFormat::FP8_BLOCK) o.data[7 * K + K - 1] = 0xff;  // a NaN code in row 7's last column
          for (int64_t M = 2; M <= 8; ++M) {
            const std::vector<float> x = make_x(M, K, XKind::F32, rng);
            std::vector<float> many(M * N), one(N);
            be->linear_f32(x.data(), M, o.w, many.data());
            const std::string what = label(isa, f, M, N, K, threads, "multi-row");
            for (int64_t m = 0; m < M; ++m) {
              be->linear_f32(x.data() + m * K, 1, o.w, one.data());
              EXPECT_EQ(0, std::memcmp(one.data(), many.data() + m * N, N * sizeof(float))) << what << " row " << m;
            }
            if (f != WeightFormat::FP8_BLOCK) continue;
            EXPECT_TRUE(std::isnan(many[7]) && std::isnan(many[(M - 1) * N + 7])) << what;
            std::vector<uint8_t> memo(N, 0);
            WeightMatrix w = o.w;
            w.row_check = memo.data();
            std::vector<float> memo_out(M * N);
            for (int pass = 0; pass < 2; ++pass) {
              be->linear_f32(x.data(), M, w, memo_out.data());
              EXPECT_EQ(0, std::memcmp(many.data(), memo_out.data(), M * N * sizeof(float))) << what << " pass " << pass;
            }
            if (isa == Isa::Avx2) {  // every AVX2 FP8 GEMV keeps the memo
              for (int64_t r = 0; r < N; ++r) EXPECT_EQ(memo[r], r == 7 ? 2 : 1) << what << " row " << r;
            }
          }
        }
    }
}

// Output rows are split over threads; each output's arithmetic must not depend on the split.
TEST(CpuIsa, ThreadCountDoesNotChangeResults) {
  std::mt19937 rng(27);
  for (Isa isa : supported_isas())
    for (auto f : {WeightFormat::F32, WeightFormat::BF16, WeightFormat::FP8_BLOCK, WeightFormat::FP4_BLOCK})
      for (int64_t M : {1, 3, 20}) {
        Weight o = make_weight(f, 301, 256, rng);
        const std::vector<float> x = make_x(M, 256, XKind::Bf16, rng);
        std::vector<float> y1(M * 301), yn(M * 301);
        ThreadPool p1(1), p3(3);
        make_cpu_backend_isa(&p1, isa)->linear_f32(x.data(), M, o.w, y1.data());
        make_cpu_backend_isa(&p3, isa)->linear_f32(x.data(), M, o.w, yn.data());
        EXPECT_EQ(0, std::memcmp(y1.data(), yn.data(), y1.size() * sizeof(float))) << isa_name(isa) << " M=" << M;
      }
}

// The vectorised act_quant of each ISA is bit-identical to act_quant_ref (values, codes,
// scales), including zeros, subnormals, ties, the 448 edge, huge values, inf and NaN.
TEST(CpuIsa, ActQuantBitIdentical) {
  std::mt19937 rng(28);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::uniform_int_distribution<int> pick(0, 15), expo(-30, 30);
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  for (int64_t block : {16, 32, 64, 128})
    for (int trial = 0; trial < 200; ++trial) {
      const int64_t n = block * 4;
      std::vector<float> x(n);
      const int e = expo(rng);
      for (auto& v : x) {
        switch (pick(rng)) {
          case 0: v = 0.0f; break;
          case 1: v = -0.0f; break;
          case 2: v = std::ldexp(u(rng), -130); break;  // subnormal
          case 3: v = round_bf16(std::ldexp(float(int(u(rng) * 64)) + 0.5f, e - 6)); break;  // ties
          case 4: v = trial % 7 == 0 ? inf : 448.0f; break;
          case 5: v = trial % 11 == 0 ? nan : -448.0f; break;
          case 6: v = trial % 13 == 0 ? -inf : std::ldexp(u(rng), 100); break;
          default: v = std::ldexp(u(rng), e); break;
        }
        if (trial % 2) v = round_bf16(v);
      }
      std::vector<float> xr = x, qr(n), sr(n / block);
      act_quant_ref(xr.data(), n, block, qr.data(), sr.data());
      for (Isa isa : supported_isas()) {
        std::vector<float> xi = x, qi(n), si(n / block);
        cpu_act_quant(isa, xi.data(), n, block, qi.data(), si.data());
        ASSERT_EQ(0, std::memcmp(xr.data(), xi.data(), n * 4)) << isa_name(isa) << " values, block " << block;
        ASSERT_EQ(0, std::memcmp(qr.data(), qi.data(), n * 4)) << isa_name(isa) << " codes, block " << block;
        ASSERT_EQ(0, std::memcmp(sr.data(), si.data(), sr.size() * 4)) << isa_name(isa) << " scales, block " << block;
      }
    }
}

// Batch invariance (the model's BatchInvariance test relies on it): each output row is
// bit-identical whatever other rows share the call (decode M <= 4 vs prefill tiles, mixed
// bf16-exact / fp32 / huge activation rows) and whatever the thread split; weight rows with
// out-of-range scales or values take the fp32 arithmetic by themselves.
TEST(CpuIsa, BatchInvariance) {
  std::mt19937 rng(29);
  for (Isa isa : supported_isas())
    for (auto f : {WeightFormat::F32, WeightFormat::BF16, WeightFormat::FP8_BLOCK, WeightFormat::FP4_BLOCK}) {
      const int64_t N = 53, K = 384, M = 23;
      Weight o = make_weight(f, N, K, rng, f == WeightFormat::FP8_BLOCK ? 32 : 128);
      if (f == WeightFormat::FP8_BLOCK) o.scale[1 * o.w.scale_cols + 2] = 20;  // rows 32..52: tiny scale
      if (f == WeightFormat::FP4_BLOCK) o.scale[7 * o.w.scale_cols + 3] = 250;  // row 7: huge scale
      if (f == WeightFormat::BF16) o.data[2 * (11 * K + 5) + 1] = 0x00;         // row 11: a subnormal
      std::vector<float> x = make_x(M, K, XKind::Bf16, rng);
      for (int64_t m = 0; m < M; m += 3)  // every third row full fp32, one row huge
        for (int64_t k = 0; k < K; ++k) x[m * K + k] *= 1.0f + 1e-3f * float(k % 7);
      for (int64_t k = 0; k < K; ++k) x[4 * K + k] *= 1e30f;
      for (bool aq : {false, true}) {
        if (aq && !o.w.is_quantized()) continue;
        auto call = [&](const Backend& be, const float* xp, int64_t m, float* y) {
          if (aq)
            be.linear_act_quant(xp, m, o.w, 128, y);
          else
            be.linear_f32(xp, m, o.w, y);
        };
        ThreadPool p1(1), p3(3);
        auto b1 = make_cpu_backend_isa(&p1, isa), b3 = make_cpu_backend_isa(&p3, isa);
        std::vector<float> all(M * N), one(N), three(3 * N);
        call(*b3, x.data(), M, all.data());
        for (int64_t m = 0; m < M; ++m) {
          call(*b1, x.data() + m * K, 1, one.data());
          ASSERT_EQ(0, std::memcmp(one.data(), &all[m * N], N * sizeof(float)))
              << isa_name(isa) << " format " << int(f) << (aq ? " act-quant" : " f32") << " row " << m << " vs M=1";
        }
        for (int64_t m = 0; m + 3 <= M; m += 5) {
          call(*b3, x.data() + m * K, 3, three.data());
          ASSERT_EQ(0, std::memcmp(three.data(), &all[m * N], 3 * N * sizeof(float)))
              << isa_name(isa) << " format " << int(f) << (aq ? " act-quant" : " f32") << " rows " << m << "+3";
        }
      }
    }
}

// A long K (7168, V4's hidden size) makes the tiles take the activation rows in several
// blocks (about 384 KiB of bf16 rows each: 24 rows here), a remainder block included: every
// row still equals its own one-row product, bit for bit.
TEST(CpuIsa, TilesOverSeveralActivationBlocks) {
  std::mt19937 rng(31);
  for (Isa isa : supported_isas())
    for (auto f : {WeightFormat::BF16, WeightFormat::FP8_BLOCK, WeightFormat::FP4_BLOCK}) {
      const int64_t N = 13, K = 7168, M = 53;
      Weight o = make_weight(f, N, K, rng);
      const std::vector<float> x = make_x(M, K, XKind::Bf16, rng);
      for (bool aq : {false, true}) {
        if (aq && !o.w.is_quantized()) continue;
        ThreadPool pool(2);
        auto be = make_cpu_backend_isa(&pool, isa);
        auto call = [&](const float* xp, int64_t m, float* y) {
          if (aq)
            be->linear_act_quant(xp, m, o.w, 128, y);
          else
            be->linear_f32(xp, m, o.w, y);
        };
        std::vector<float> all(M * N), one(N);
        call(x.data(), M, all.data());
        for (int64_t m = 0; m < M; ++m) {
          call(x.data() + m * K, 1, one.data());
          ASSERT_EQ(0, std::memcmp(one.data(), &all[m * N], N * sizeof(float)))
              << isa_name(isa) << " format " << int(f) << (aq ? " act-quant" : " f32") << " row " << m;
        }
      }
    }
}

// linear_many (one parallel region for a batch of products, split by weight bytes) gives
// every product bit for bit what its own call gives: mixed formats and modes in one batch,
// odd row counts (shares that end inside a row group), M from 1 to 5 (a GEMM-sized job
// runs on its own), a job whose rows need the Scalar path, thread counts 1 and 3.
TEST(CpuIsa, LinearManyEqualsSingleCalls) {
  std::mt19937 rng(31);
  struct Spec {
    WeightFormat f;
    int64_t N, K, M;
    bool act_quant;
  };
  const std::vector<Spec> specs = {
      {WeightFormat::FP4_BLOCK, 37, 256, 1, true},  {WeightFormat::FP4_BLOCK, 64, 128, 1, true},
      {WeightFormat::FP8_BLOCK, 29, 384, 1, true},  {WeightFormat::BF16, 13, 96, 1, false},
      {WeightFormat::FP4_BLOCK, 70, 64, 2, false},  {WeightFormat::F32, 9, 40, 1, false},
      {WeightFormat::FP8_BLOCK, 130, 256, 5, false}, {WeightFormat::FP4_BLOCK, 1, 128, 3, true},
      {WeightFormat::FP8_BLOCK, 17, 128, 1, true},
  };
  for (Isa isa : supported_isas()) {
    std::vector<Weight> ws;
    std::vector<std::vector<float>> xs;
    for (const Spec& s : specs) {
      ws.push_back(make_weight(s.f, s.N, s.K, rng));
      xs.push_back(make_x(s.M, s.K, xs.size() % 2 ? XKind::F32 : XKind::Bf16, rng));
    }
    for (int64_t k = 0; k < specs[8].K; ++k) xs[8][k] *= 1e30f;  // act-quant scales past the exact range
    for (int threads : {1, 3}) {
      ThreadPool pool(threads);
      auto be = make_cpu_backend_isa(&pool, isa);
      std::vector<std::vector<float>> many(specs.size()), single(specs.size());
      std::vector<LinearJob> jobs;
      for (size_t i = 0; i < specs.size(); ++i) {
        const Spec& s = specs[i];
        many[i].assign(s.M * s.N, -1.0f);
        single[i].assign(s.M * s.N, -2.0f);
        jobs.push_back({xs[i].data(), s.M, &ws[i].w, s.act_quant ? 128 : 0, many[i].data()});
        if (s.act_quant)
          be->linear_act_quant(xs[i].data(), s.M, ws[i].w, 128, single[i].data());
        else
          be->linear_f32(xs[i].data(), s.M, ws[i].w, single[i].data());
      }
      be->linear_many(jobs.data(), jobs.size());
      for (size_t i = 0; i < specs.size(); ++i)
        ASSERT_EQ(0, std::memcmp(many[i].data(), single[i].data(), many[i].size() * sizeof(float)))
            << isa_name(isa) << " threads " << threads << " job " << i;
    }
  }
}

// Products too large for the GEMV region, many of comparable size (a prefill's routed
// experts): each runs whole on one thread. Still each job's own-call bits: FP4 / FP8 / BF16 /
// F32, act-quant and plain, 9-25 rows (the FP4 multi-row kernel and the tiles), a job with a
// NaN row and one with a huge row (their rows split by class inside the worker's call), one
// job over 1 / (4 x threads) of the total (run over the pool), small jobs beside them; 1, 2 and 3
// threads. The large jobs take one parallel region, not one or two each.
TEST(CpuIsa, LinearManyLargeJobsRunWhole) {
  std::mt19937 rng(43);
  const WeightFormat formats[] = {WeightFormat::FP4_BLOCK, WeightFormat::FP8_BLOCK, WeightFormat::BF16,
                                  WeightFormat::F32};
  for (Isa isa : supported_isas()) {
    struct J {
      Weight w;
      std::vector<float> x;
      int64_t M;
      bool act_quant;
    };
    std::vector<J> js;
    for (int i = 0; i < 14; ++i) {
      const WeightFormat f = formats[i % 4];
      const int64_t N = 24 + 8 * (i % 3), K = 256, M = 9 + (i * 5) % 17;
      const bool aq = f == WeightFormat::FP4_BLOCK || f == WeightFormat::FP8_BLOCK ? i % 3 != 2 : false;
      js.push_back({make_weight(f, N, K, rng), make_x(M, K, i % 2 ? XKind::F32 : XKind::Bf16, rng), M, aq});
    }
    js[0].x[2 * 256 + 7] = std::numeric_limits<float>::quiet_NaN();    // FP4 act-quant: one Scalar row
    for (int64_t k = 0; k < 256; ++k) js[4].x[3 * 256 + k] *= 1e30f;  // FP4 act-quant: one huge row
    js.push_back({make_weight(WeightFormat::FP8_BLOCK, 512, 256, rng), make_x(40, 256, XKind::Bf16, rng), 40, true});
    js.push_back({make_weight(WeightFormat::FP4_BLOCK, 40, 256, rng), make_x(1, 256, XKind::Bf16, rng), 1, true});
    js.push_back({make_weight(WeightFormat::FP8_BLOCK, 33, 256, rng), make_x(4, 256, XKind::Bf16, rng), 4, false});
    for (int threads : {1, 2, 3}) {
      ThreadPool pool(threads);
      auto be = make_cpu_backend_isa(&pool, isa);
      std::vector<std::vector<float>> many(js.size()), single(js.size());
      std::vector<LinearJob> jobs;
      for (size_t i = 0; i < js.size(); ++i) {
        const J& j = js[i];
        many[i].assign(j.M * j.w.w.rows, -1.0f);
        single[i].assign(j.M * j.w.w.rows, -2.0f);
        jobs.push_back({j.x.data(), j.M, &j.w.w, j.act_quant ? 128 : 0, many[i].data()});
        if (j.act_quant)
          be->linear_act_quant(j.x.data(), j.M, j.w.w, 128, single[i].data());
        else
          be->linear_f32(j.x.data(), j.M, j.w.w, single[i].data());
      }
      const uint64_t d0 = pool.dispatches();
      be->linear_many(jobs.data(), jobs.size());
      const uint64_t regions = pool.dispatches() - d0;
      for (size_t i = 0; i < js.size(); ++i) {
        ASSERT_EQ(0, std::memcmp(many[i].data(), single[i].data(), many[i].size() * sizeof(float)))
            << isa_name(isa) << " threads " << threads << " job " << i;
        if (i == 0) {
          EXPECT_TRUE(std::isnan(many[i][2 * js[i].w.w.rows])) << isa_name(isa);
        }
      }
      // Whole jobs: one region; the big job and the GEMV region: a few more. One call per
      // large job (the portable backend's linear_many: 17 here) would take 14 or more.
      if (threads > 1 && isa != Isa::Scalar) {
        EXPECT_LE(regions, 6u) << isa_name(isa) << " threads " << threads;
      }
    }
  }
}

// Jobs of one batch that read the same activations (a MoE expert's w1 and w3, attention
// projections of one input) share their preparation: still each job's own-call bits, also
// when neighbours differ in act-quant mode, width, F32-ness (which changes the kernels) or
// FP4-ness (AVX-512 hands FP4 weights x in their lane order).
TEST(CpuIsa, LinearManySharedInputs) {
  std::mt19937 rng(37);
  for (Isa isa : supported_isas()) {
    const int64_t K = 256;
    const std::vector<float> x1 = make_x(1, K, XKind::Bf16, rng), x3 = make_x(3, K, XKind::Bf16, rng);
    std::vector<Weight> ws;
    for (auto f : {WeightFormat::FP4_BLOCK, WeightFormat::FP4_BLOCK, WeightFormat::FP8_BLOCK, WeightFormat::F32,
                   WeightFormat::BF16, WeightFormat::FP8_BLOCK})
      ws.push_back(make_weight(f, 41, K, rng));
    struct J {
      const std::vector<float>* x;
      int64_t M;
      size_t w;
      bool act_quant;
    };
    const std::vector<J> js = {{&x1, 1, 0, true},  {&x1, 1, 1, true},  {&x1, 1, 2, true},  {&x1, 1, 3, false},
                               {&x1, 1, 4, false}, {&x1, 1, 2, false}, {&x1, 1, 5, false}, {&x3, 3, 0, true},
                               {&x3, 3, 1, true},  {&x3, 3, 4, false}, {&x3, 3, 3, false}, {&x3, 3, 4, false},
                               {&x1, 1, 0, false}, {&x1, 1, 2, false}, {&x3, 3, 1, false}};
    ThreadPool pool(2);
    auto be = make_cpu_backend_isa(&pool, isa);
    std::vector<std::vector<float>> many(js.size()), single(js.size());
    std::vector<LinearJob> jobs;
    for (size_t i = 0; i < js.size(); ++i) {
      const J& j = js[i];
      const WeightMatrix& w = ws[j.w].w;
      many[i].assign(j.M * w.rows, -1.0f);
      single[i].assign(j.M * w.rows, -2.0f);
      jobs.push_back({j.x->data(), j.M, &w, j.act_quant ? 128 : 0, many[i].data()});
      if (j.act_quant)
        be->linear_act_quant(j.x->data(), j.M, w, 128, single[i].data());
      else
        be->linear_f32(j.x->data(), j.M, w, single[i].data());
    }
    be->linear_many(jobs.data(), jobs.size());
    for (size_t i = 0; i < js.size(); ++i)
      ASSERT_EQ(0, std::memcmp(many[i].data(), single[i].data(), many[i].size() * sizeof(float)))
          << isa_name(isa) << " job " << i;
  }
}

// A prefill chunk's indexer queries in one call: each query's scores as its own call gives
// them (bits, every key count from 0 to all), in one parallel region rather than one per
// query (the per-query path took ~18 here).
TEST(CpuIsa, IndexScoresManyOneRegion) {
  std::mt19937 rng(41);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const int64_t heads = 8, dim = 64, n_keys = 40, n_q = 20, ld = n_keys + 1;
  std::vector<float> q(n_q * heads * dim), w(n_q * heads), kmem(n_keys * dim);
  for (float& v : q) v = nd(rng);
  for (float& v : w) v = round_bf16(0.1f * nd(rng));
  for (float& v : kmem) v = nd(rng);
  std::vector<const float*> keys;
  for (int64_t s = 0; s < n_keys; ++s) keys.push_back(&kmem[s * dim]);
  std::vector<int64_t> n_vis(n_q);
  for (int64_t i = 0; i < n_q; ++i) n_vis[i] = i * n_keys / (n_q - 1);
  for (Isa isa : supported_isas()) {
    if (isa == Isa::Scalar) continue;
    ThreadPool pool(3);
    auto be = make_cpu_backend_isa(&pool, isa);
    std::vector<float> one(n_q * ld, -3.0f), many(n_q * ld, -3.0f);
    for (int64_t i = 0; i < n_q; ++i)
      be->index_scores(&q[i * heads * dim], &w[i * heads], heads, dim, keys.data(), n_vis[i], false, &one[i * ld]);
    const uint64_t d0 = pool.dispatches();
    be->index_scores_many(q.data(), w.data(), n_q, heads, dim, keys.data(), 0, n_vis.data(), false, many.data(), ld);
    EXPECT_EQ(pool.dispatches() - d0, 1u) << isa_name(isa);
    EXPECT_EQ(0, std::memcmp(one.data(), many.data(), one.size() * sizeof(float))) << isa_name(isa);
  }
}

// Lightning-indexer scores against the referee. Reference numerics (FP4-QDQ'd q and keys,
// bf16 rounding points): bit for bit, also where a key's exponent spread forces the in-order
// fallback and for dims that are not a multiple of the vector width. Float numerics (plain
// fp32 values): the same within double reassociation. 1 and 3 threads, 1 to 300 keys.
TEST(CpuIsa, IndexScoresMatchReferee) {
  std::mt19937 rng(37);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (Isa isa : supported_isas())
    for (int threads : {1, 3})
      for (auto [heads, dim, n_keys] : {std::tuple{64, 128, 300}, {3, 64, 17}, {1, 7, 1}, {5, 40, 65}}) {
        ThreadPool pool(threads);
        auto be = make_cpu_backend_isa(&pool, isa);
        for (bool round : {true, false}) {
          std::vector<float> q(size_t(heads) * size_t(dim)), w(static_cast<size_t>(heads)), kmem(size_t(n_keys) * size_t(dim));
          for (auto& v : q) v = nd(rng);
          for (auto& v : w) v = round_bf16(nd(rng) * 0.1f);
          for (auto& v : kmem) v = nd(rng);
          if (round) {
            for (int64_t h = 0; h < heads; ++h) {
              if (dim % 32 == 0) fp4_qdq_pow2_ref(&q[h * dim], dim, 32);
              else for (auto* v = &q[h * dim]; v < &q[(h + 1) * dim]; ++v) *v = round_bf16(std::ldexp(std::round(std::ldexp(*v, 1)), -1));
            }
            for (int64_t s = 0; s < n_keys; ++s) {
              if (dim % 32 == 0) fp4_qdq_pow2_ref(&kmem[s * dim], dim, 32);
              else for (auto* v = &kmem[s * dim]; v < &kmem[(s + 1) * dim]; ++v) *v = std::ldexp(std::round(std::ldexp(*v, 1)), -1);
            }
            if (n_keys > 3) {
              // Key 2: 2^60 + 1 - 2^60 in the first dims (every head's q is 1 there): in order
              // the 1 is lost, in another order it survives.
              for (int64_t h = 0; h < heads; ++h) q[h * dim] = q[h * dim + 1] = q[h * dim + 2] = 1.0f;
              kmem[2 * dim] = std::ldexp(1.0f, 60);
              kmem[2 * dim + 1] = 1.0f;
              kmem[2 * dim + 2] = -std::ldexp(1.0f, 60);
              kmem[3 * dim + 1] = 1.1f;  // key 3: more than 2 significant bits
            }
          }
          if (n_keys > 5) {  // key 4: a NaN (its score is NaN, same bits); key 5: -inf dots
            kmem[4 * dim + 1] = std::numeric_limits<float>::quiet_NaN();
            for (int64_t c = 0; c < dim; ++c) kmem[5 * dim + c] = c == 0 ? -std::numeric_limits<float>::infinity() : 0.0f;
            for (int64_t h = 0; h < heads; ++h) q[h * dim] = 1.0f;
          }
          std::vector<const float*> keys;
          for (int64_t s = 0; s < n_keys; ++s) keys.push_back(&kmem[s * dim]);
          std::vector<float> want(n_keys), got(n_keys, -7.0f);
          index_scores_ref(q.data(), w.data(), heads, dim, keys.data(), n_keys, round, want.data());
          be->index_scores(q.data(), w.data(), heads, dim, keys.data(), n_keys, round, got.data());
          // The dots run in the referee's order, so every score is its bits, rounded or not.
          for (int64_t s = 0; s < n_keys; ++s)
            ASSERT_EQ(0, std::memcmp(&want[s], &got[s], sizeof(float)))
                << isa_name(isa) << " threads " << threads << " dim " << dim << " key " << s << ": " << want[s]
                << " vs " << got[s] << (round ? " rounded" : "");
        }
      }
}

// The indexer's exact fp32 dots (IsaKernels::index_dots_exact: bf16 dot products on AVX-512,
// FMAs on AVX2) against the in-order double dots: FP4-QDQ'd heads and keys take that path and
// give the same bits; keys whose sums could round in fp32 (2^24 + 1), reach subnormal
// products, or hold a value that is not finite, normal and of at most two significant bits
// are refused; the bound's edge is exact.
TEST(CpuIsa, IndexDotsExactWhereTheBoundAllows) {
  std::mt19937 rng(43);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const double dnan = std::numeric_limits<double>::quiet_NaN();
  for (Isa isa : supported_isas()) {
    if (isa == Isa::Scalar) continue;
    const cpu::IsaKernels& k = *isa_kernel_table(isa);
    if (!k.index_dots_exact) continue;
    for (auto [heads, dim, n_keys] : {std::tuple{64, 128, 41}, {3, 64, 9}, {17, 40, 13}, {80, 7, 5}, {1, 1, 1}}) {
      auto grid = [&](float* v, int64_t n) { fp4_qdq_pow2_ref(v, n, n % 32 == 0 ? 32 : n); };
      std::vector<float> q(size_t(heads * dim)), kmem(size_t(n_keys * dim));
      for (auto& v : q) v = nd(rng);
      for (auto& v : kmem) v = nd(rng);
      for (int64_t h = 0; h < heads; ++h) grid(&q[h * dim], dim);
      for (int64_t s = 0; s < n_keys; ++s) grid(&kmem[s * dim], dim);
      // Refused: key 1 not a bf16, key 2 a NaN, key 3 an infinity, key 4 a subnormal;
      // taken: key 5 all zeros.
      const int64_t planted = std::min<int64_t>(n_keys, 6);
      const float bad[] = {0.0f, 1.1f, std::numeric_limits<float>::quiet_NaN(),
                           std::numeric_limits<float>::infinity(), 1e-40f};
      for (int64_t s = 1; s < std::min<int64_t>(planted, 5); ++s) kmem[s * dim + dim / 2] = bad[s];
      if (planted == 6) std::fill_n(&kmem[5 * dim], dim, 0.0f);
      std::vector<double> qT(size_t(heads * dim));
      for (int64_t h = 0; h < heads; ++h)
        for (int64_t c = 0; c < dim; ++c) qT[c * heads + h] = q[h * dim + c];
      std::vector<uint32_t> pairs(size_t(cpu::index_query_exact_words(heads, dim)));
      cpu::IndexQueryExact info;
      k.index_query_exact(q.data(), heads, dim, pairs.data(), &info);
      ASSERT_TRUE(info.ok) << heads << "x" << dim;
      std::vector<const float*> keys;
      for (int64_t s = 0; s < n_keys; ++s) keys.push_back(&kmem[s * dim]);
      std::vector<double> want(size_t(n_keys * heads)), got(size_t(n_keys * heads), dnan);
      std::vector<uint8_t> exact(size_t(n_keys), 7);
      k.index_dots(qT.data(), heads, dim, keys.data(), n_keys, want.data());
      k.index_dots_exact(info, heads, dim, keys.data(), n_keys, got.data(), exact.data());
      for (int64_t s = 0; s < n_keys; ++s) {
        const bool refused = s >= 1 && s < planted && s <= 4;
        ASSERT_EQ(refused ? 0 : 1, exact[s]) << heads << "x" << dim << " key " << s;
        if (refused) continue;
        for (int64_t h = 0; h < heads; ++h)
          ASSERT_EQ(0, std::memcmp(&want[s * heads + h], &got[s * heads + h], sizeof(double)))
              << heads << "x" << dim << " key " << s << " head " << h << ": " << want[s * heads + h] << " vs "
              << got[s * heads + h];
      }
    }
    // The bound over two columns (22 - ceil(log2 2) = 21 bits of spans, each vector's span its
    // top exponent less its least one, plus one): q = (1, 1) spans 1, (2^a, 1) a + 1.
    struct Case {
      float q0, q1, k0, k1;
      bool taken;
    };
    const Case cases[] = {
        {1.0f, 1.0f, std::ldexp(1.0f, 24), 1.0f, false},     // 2^24 + 1 rounds in fp32
        {1.0f, 1.0f, std::ldexp(1.0f, 19), 1.0f, true},      // 2^19 + 1: inside the bound
        {1.0f, 1.0f, std::ldexp(1.0f, 20), 1.0f, false},     // 2^20 + 1: exact, but past it
        {std::ldexp(1.0f, -100), 0.0f, std::ldexp(1.0f, -30), 0.0f, false},  // 2^-130: subnormal
        {std::ldexp(1.0f, -60), 0.0f, std::ldexp(1.0f, -60), 0.0f, true},    // 2^-120
        {std::ldexp(1.0f, 100), 0.0f, std::ldexp(1.0f, 27), 0.0f, false},    // 2^127 * 2^3 bound
        {1.0f, 1.0f, 1.0078125f, 2.0f, false},               // 1 + 2^-7: three significant bits
        {1.0f, 1.0f, -1.5f, 3.0f, true},                      // two
        {std::ldexp(1.0f, -140), 0.0f, 1.0f, 0.0f, false},   // a subnormal
        {1.5f, -0.75f, -0.5f, 6.0f, true},
    };
    for (const Case& c : cases) {
      const float qv[2] = {c.q0, c.q1}, kv[2] = {c.k0, c.k1};
      const float* key = kv;
      std::vector<uint32_t> pairs(size_t(cpu::index_query_exact_words(1, 2)));
      cpu::IndexQueryExact info;
      k.index_query_exact(qv, 1, 2, pairs.data(), &info);
      const double qTv[2] = {c.q0, c.q1};
      double want = 0, got = dnan;
      uint8_t exact = 7;
      k.index_dots(qTv, 1, 2, &key, 1, &want);
      k.index_dots_exact(info, 1, 2, &key, 1, &got, &exact);
      ASSERT_EQ(c.taken ? 1 : 0, exact) << c.q0 << " " << c.q1 << " . " << c.k0 << " " << c.k1;
      if (c.taken) {
        EXPECT_EQ(want, got);
      }
    }
  }
}

// SwiGLU of every variant against swiglu_ref: odd lengths, with and without the limit and the
// routing weight, bf16 rounding on and off, values from tiny to huge and the special ones. The
// fast exp may differ from libm's in the last place, which moves a result by at most one unit
// of its last place (float or bf16) and only rarely; NaN, infinities and zeros match exactly.
TEST(CpuIsa, SwigluMatchesReferee) {
  std::mt19937 rng(41);
  std::normal_distribution<float> nd(0.0f, 4.0f);
  std::uniform_real_distribution<float> wide(-800.0f, 800.0f);
  const float specials[] = {0.0f, -0.0f, 1e-30f, -1e-30f, 1e-42f, 88.0f, -88.0f, 745.5f, -745.5f, 1e30f, -1e30f,
                            std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::quiet_NaN(), 10.0f, -10.0f, 9.999f, 10.001f};
  const float weight = 0.3125f;
  int64_t total = 0, differing = 0;
  for (Isa isa : supported_isas()) {
    ThreadPool pool(1);
    auto be = make_cpu_backend_isa(&pool, isa);
    for (int64_t n : {1, 7, 16, 17, 333, 4096})
      for (float limit : {10.0f, 0.0f})
        for (bool use_weight : {false, true})
          for (bool round : {false, true}) {
            std::vector<float> g(n), u(n), want(n), got(n);
            for (int64_t i = 0; i < n; ++i) {
              g[i] = i % 5 == 4 ? wide(rng) : nd(rng);
              u[i] = nd(rng);
              if (i % 37 == 3) g[i] = specials[(i / 37) % std::size(specials)];
              if (i % 41 == 5) u[i] = specials[(i / 41) % std::size(specials)];
            }
            const float* w = use_weight ? &weight : nullptr;
            swiglu_ref(g.data(), u.data(), n, limit, w, round, want.data());
            be->swiglu(g.data(), u.data(), n, limit, w, round, got.data());
            for (int64_t i = 0; i < n; ++i) {
              ++total;
              const std::string where = std::string(isa_name(isa)) + " n " + std::to_string(n) + " i " +
                                        std::to_string(i) + " g " + std::to_string(g[i]) + " u " + std::to_string(u[i]);
              if (std::isnan(want[i]) || std::isinf(want[i]) || want[i] == 0.0f) {
                ASSERT_EQ(std::isnan(got[i]), std::isnan(want[i])) << where;
                if (!std::isnan(want[i])) {
                  ASSERT_EQ(f32_bits(got[i]), f32_bits(want[i])) << where;
                }
                continue;
              }
              if (f32_bits(got[i]) == f32_bits(want[i])) continue;
              ++differing;
              const uint32_t step = round ? 0x10000u : 1u;  // one bf16 / float unit in the last place
              const int64_t d = int64_t(f32_bits(got[i])) - int64_t(f32_bits(want[i]));
              ASSERT_LE(std::abs(d), int64_t(step)) << where << " got " << got[i] << " want " << want[i];
            }
          }
  }
  EXPECT_LE(differing * 10000, total) << differing << " of " << total << " differ by one unit";
  std::printf("swiglu: %lld of %lld results differ from the referee by one unit\n", (long long)differing,
              (long long)total);
}

// swiglu is one algorithm on both vector ISAs (cpu_kernels_isa_impl.h; only the final 2^n
// scaling of exp is per ISA), so AVX2 and AVX-512 give the same bits: the tests on a machine
// with either one cover the shared code for both. Tails, specials, and g wide enough to take
// exp into overflow and gradual underflow.
TEST(CpuIsa, SwigluSameBitsOnBothVectorIsas) {
  if (!isa_supported(Isa::Avx512) || !isa_supported(Isa::Avx2)) GTEST_SKIP() << "needs AVX-512 and AVX2";
  std::mt19937 rng(47);
  std::normal_distribution<float> nd(0.0f, 4.0f);
  std::uniform_real_distribution<float> wide(-800.0f, 800.0f);
  const float specials[] = {0.0f, -0.0f, 1e-30f, -1e-30f, 1e-42f, 87.0f, -104.0f, 708.5f, -708.5f, 745.5f, -745.5f,
                            std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::quiet_NaN(), 7.0f, -7.0f};
  const float weight = 0.6875f;
  ThreadPool pool(1);
  auto avx2 = make_cpu_backend_isa(&pool, Isa::Avx2), avx512 = make_cpu_backend_isa(&pool, Isa::Avx512);
  for (int64_t n : {1, 5, 8, 9, 15, 16, 17, 31, 100, 2053})
    for (float limit : {7.0f, 0.0f})
      for (bool use_weight : {false, true})
        for (bool round : {false, true}) {
          std::vector<float> g(n), u(n), a(n + 1, 9.0f), b(n + 1, 9.0f);
          for (int64_t i = 0; i < n; ++i) {
            g[i] = i % 3 == 2 ? wide(rng) : nd(rng);
            u[i] = nd(rng);
            if (i % 11 == 4) g[i] = specials[(i / 11) % std::size(specials)];
            if (i % 13 == 6) u[i] = specials[(i / 13) % std::size(specials)];
          }
          const float* w = use_weight ? &weight : nullptr;
          avx2->swiglu(g.data(), u.data(), n, limit, w, round, a.data());
          avx512->swiglu(g.data(), u.data(), n, limit, w, round, b.data());
          ASSERT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float)))
              << "n " << n << " limit " << limit << (use_weight ? " weight" : "") << (round ? " bf16" : "");
        }
}

// hc_expand and hc_collapse of every variant equal their referees bit for bit: stream counts
// 1 to 4, column ranges with tails, bf16 rounding on and off, signed zeros / NaN among the values.
TEST(CpuIsa, HcExpandMatchesReferee) {
  std::mt19937 rng(43);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (Isa isa : supported_isas()) {
    ThreadPool pool(1);
    auto be = make_cpu_backend_isa(&pool, isa);
    for (int64_t hc : {1, 2, 4})
      for (int64_t dim : {1, 16, 37, 2048})
        for (bool round : {false, true}) {
          std::vector<float> o(dim), Rs(hc * dim), comb(hc * hc), post(hc);
          for (auto& v : o) v = nd(rng);
          for (auto& v : Rs) v = round_bf16(nd(rng));
          for (auto& v : comb) v = std::abs(nd(rng)) * 0.5f;
          for (auto& v : post) v = 2.0f * std::abs(nd(rng));
          if (dim > 5) {
            o[1] = -0.0f;
            Rs[3] = std::numeric_limits<float>::quiet_NaN();
            for (int64_t i = 0; i < hc; ++i) Rs[i * dim + 1] = -0.0f;
          }
          for (auto [j0, j1] : {std::pair<int64_t, int64_t>{0, dim}, {dim / 3, dim - dim / 5}}) {
            std::vector<float> want(hc * dim, 9.0f), got(hc * dim, 9.0f);
            hc_expand_ref(o.data(), Rs.data(), comb.data(), post.data(), hc, dim, round, want.data(), j0, j1);
            be->hc_expand(o.data(), Rs.data(), comb.data(), post.data(), hc, dim, round, got.data(), j0, j1);
            ASSERT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * sizeof(float)))
                << isa_name(isa) << " hc " << hc << " dim " << dim << " j " << j0 << ".." << j1 << (round ? " bf16" : "");
          }
          // The collapse with post as the pre weights, same bits as hc_collapse_ref.
          std::vector<float> want(dim, 9.0f), got(dim + 1, 9.0f);
          hc_collapse_ref(Rs.data(), post.data(), hc, dim, round, want.data());
          be->hc_collapse(Rs.data(), post.data(), hc, dim, round, got.data());
          ASSERT_EQ(got[dim], 9.0f) << "wrote past the end";
          ASSERT_EQ(0, std::memcmp(want.data(), got.data(), size_t(dim) * sizeof(float)))
              << isa_name(isa) << " collapse hc " << hc << " dim " << dim << (round ? " bf16" : "");
        }
  }
}

// The FMA chains the arithmetic peak is measured with compute their recurrence (so the timed
// loop really issues those FMAs) and report the multiply-adds done; the backends' peak is a
// positive rate for the vector ISAs and 0 for the referee, which has no such figure.
TEST(CpuIsa, FmaChainsComputeTheirRecurrenceAndPeakIsMeasured) {
  ThreadPool pool(2);
  for (Isa isa : supported_isas()) {
    if (isa == Isa::Scalar) continue;
    const cpu::IsaKernels& k = *isa_kernel_table(isa);
    ASSERT_NE(k.fma_chains, nullptr) << isa_name(isa);
    const int64_t lanes = fma_lanes(isa);
    for (int64_t iters : {0, 1, 7, 1000}) {
      double want = 0;
      for (int j = 0; j < cpu::kFmaChains; ++j) {
        float x = 1.5f + float(j) / 1024.0f;
        for (int64_t i = 0; i < iters; ++i) x = std::fmaf(x, 0.99999994f, 0.25f);
        want += double(lanes) * double(x);
      }
      int64_t macs = -1;
      EXPECT_EQ(k.fma_chains(iters, 1.5f, &macs), want) << isa_name(isa) << " iters " << iters;
      EXPECT_EQ(macs, iters * cpu::kFmaChains * lanes) << isa_name(isa);
    }
    const double peak = make_cpu_backend_isa(&pool, isa)->fma_peak_macs_per_s();
    EXPECT_TRUE(std::isfinite(peak) && peak > 0.0) << isa_name(isa) << " " << peak;  // measured, not judged
    // The bf16 dot chains (AVX-512 / NEON with bf16 mode): each step adds two exact products.
    if (k.bf16) {
      ASSERT_NE(k.bf16_dot_chains, nullptr);
      const int64_t dot_lanes = bf16_dot_lanes(isa);
      for (int64_t iters : {0, 1, 7, 1000}) {
        double want = 0;
        for (int j = 0; j < cpu::kFmaChains; ++j) {
          float x = 1.5f + float(j) / 1024.0f;
          for (int64_t i = 0; i < iters; ++i) x = std::fmaf(0.5f, 0x1p-10f, std::fmaf(0.5f, 0x1p-10f, x));
          want += double(dot_lanes) * double(x);
        }
        int64_t macs = -1;
        EXPECT_EQ(k.bf16_dot_chains(iters, 1.5f, &macs), want) << isa_name(isa) << " iters " << iters;
        EXPECT_EQ(macs, iters * cpu::kFmaChains * 2 * dot_lanes) << isa_name(isa);
      }
      const double dot = make_cpu_backend_isa(&pool, isa)->bf16_dot_peak_macs_per_s();
      EXPECT_TRUE(std::isfinite(dot) && dot > 0.0) << dot;
    } else {
      EXPECT_EQ(make_cpu_backend_isa(&pool, isa)->bf16_dot_peak_macs_per_s(), 0.0) << isa_name(isa);
    }
  }
  EXPECT_EQ(make_backend("ref", &pool)->fma_peak_macs_per_s(), 0.0);
  EXPECT_EQ(make_backend("ref", &pool)->bf16_dot_peak_macs_per_s(), 0.0);
}

// AVX-512 bf16 mode runs its prefill tiles (and the GEMV of 3-8 rows) either on vdpbf16ps or
// on FMAs in dot-product order, whichever the CPU runs faster: both give every output the bits of the one-row call
// (batch invariance), over row counts with partial row groups, tails of K, and rows that
// leave bf16 mode (fp32 activations, a huge row, out-of-range weight scales).
TEST(CpuIsa, DpTilesEqualFmaTiles) {
  if (!isa_supported(Isa::Avx512)) GTEST_SKIP() << "needs AVX-512";
  std::mt19937 rng(53);
  ThreadPool p1(1), p3(3);
  auto dp = make_cpu_backend_avx512_tiles(&p3, true), fma = make_cpu_backend_avx512_tiles(&p3, false);
  auto one_row = make_cpu_backend_avx512_tiles(&p1, true);
  for (auto f : {WeightFormat::BF16, WeightFormat::FP8_BLOCK, WeightFormat::FP4_BLOCK})
    for (int64_t K : {384, 1088, 100})
      for (int64_t M : {3, 6, 8, 9, 16, 23, 32}) {  // GEMV (3-8: no widening with dp tiles) and tiles
        if (f == WeightFormat::FP4_BLOCK && K % 32) continue;  // FP4 rows hold whole 32-column blocks
        const int64_t N = 53;
        Weight o = make_weight(f, N, K, rng, f == WeightFormat::FP8_BLOCK ? 32 : 128);
        if (f == WeightFormat::FP8_BLOCK) o.scale[1 * o.w.scale_cols] = 20;  // rows 32..52: tiny scale
        if (f == WeightFormat::FP4_BLOCK) o.scale[7 * o.w.scale_cols] = 250;  // row 7: huge scale
        std::vector<float> x = make_x(M, K, XKind::Bf16, rng);
        for (int64_t m = 0; m < M; m += 4)  // every fourth row full fp32, one row huge
          for (int64_t k = 0; k < K; ++k) x[m * K + k] *= 1.0f + 1e-3f * float(k % 7);
        for (int64_t k = 0; k < K; ++k) x[(M - 2) * K + k] *= 1e30f;
        for (bool aq : {false, true}) {
          if (aq && (!o.w.is_quantized() || K % 128)) continue;
          auto call = [&](const Backend& be, const float* xp, int64_t m, float* y) {
            if (aq)
              be.linear_act_quant(xp, m, o.w, 128, y);
            else
              be.linear_f32(xp, m, o.w, y);
          };
          std::vector<float> a(M * N), b(M * N, -1.0f), one(N);
          call(*dp, x.data(), M, a.data());
          call(*fma, x.data(), M, b.data());
          const std::string what = "format " + std::to_string(int(f)) + " K " + std::to_string(K) + " M " +
                                   std::to_string(M) + (aq ? " act-quant" : " f32");
          ASSERT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float))) << what;
          for (int64_t m = 0; m < M; m += 7) {
            call(*one_row, x.data() + m * K, 1, one.data());
            ASSERT_EQ(0, std::memcmp(one.data(), &a[m * N], N * sizeof(float))) << what << " row " << m;
          }
        }
      }
}
