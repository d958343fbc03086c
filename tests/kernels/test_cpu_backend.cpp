// The fast CPU backend against the scalar referee over awkward shapes and thread counts.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/backend.h"
#include "kernels/kernels.h"
#include "random_weight.h"

using namespace deepinfer;
using namespace deepinfer::kernels;

namespace {

using Owned = kernel_test::OwnedWeight;
using kernel_test::random_weight;

// |a - b| within fp32 reassociation noise of the sum of |terms|.
void expect_close(const std::vector<float>& a, const std::vector<float>& b, const std::vector<float>& mag, double rel,
                  const std::string& what) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_TRUE(std::isfinite(a[i])) << what << " " << i;
    ASSERT_LE(std::abs(double(a[i]) - b[i]), rel * mag[i] + 1e-30) << what << " index " << i;
  }
}

}  // namespace

// linear_f32_exact: double dots like linear_f32_ref, in another order, so equal to the last
// fp32 bit except where a double sum lies on a rounding tie; fp32 streams of the mHC mixer's
// width (K up to 4 * 2048), every format, odd widths (the scalar tail), several pools; a
// prefill's many rows (split by rows over the pool) give each row's one-row bits.
TEST(CpuBackend, LinearExactEqualsReferenceDoubleSums) {
  std::mt19937 rng(12);
  int64_t outputs = 0, differ = 0;
  for (int threads : {1, 2, 3})
    for (auto f : {WeightFormat::F32, WeightFormat::BF16, WeightFormat::FP8_BLOCK, WeightFormat::FP4_BLOCK})
      for (int64_t K : {32, 96, 1000, 1003, 1024, 8192})
        for (int64_t N : {1, 24})
        for (int64_t M : {int64_t(3), int64_t(53)}) {
          if (M > 3 && K > 1024 && f != WeightFormat::F32) continue;  // the row split is fp32 weights' only
          if (K % 32 != 0 && f != WeightFormat::F32) continue;  // the vector tails (8 and scalar): fp32
          ThreadPool pool(threads);
          auto be = make_cpu_backend(&pool);
          Owned o = random_weight(f, N, K, rng);
          std::normal_distribution<float> nd(0.0f, 1.0f);
          std::vector<float> x(M * K);
          for (auto& v : x) v = nd(rng);  // fp32, not bf16: the mixer's streams in float numerics
          std::vector<float> want(M * N), got(M * N + 1, 77.0f), base(M * N);
          linear_f32_ref(x.data(), M, o.w, want.data());
          be->linear_f32_exact(x.data(), M, o.w, got.data());
          ref_backend().linear_f32_exact(x.data(), M, o.w, base.data());
          EXPECT_EQ(got[M * N], 77.0f) << "guard overwritten";
          got.pop_back();
          EXPECT_EQ(base, want) << "the base implementation is the referee's arithmetic";
          std::vector<float> alone(N);
          for (int64_t m = 0; m < M; ++m) {
            be->linear_f32_exact(&x[m * K], 1, o.w, alone.data());
            EXPECT_TRUE(std::equal(alone.begin(), alone.end(), got.begin() + m * N)) << "row " << m << " of " << M;
          }
          for (size_t i = 0; i < want.size(); ++i) {
            ++outputs;
            if (got[i] == want[i]) continue;
            ++differ;
            EXPECT_EQ(std::nextafter(got[i], want[i]), want[i]) << "more than one ulp apart at " << i;
          }
        }
  EXPECT_LE(differ * 100, outputs) << differ << " of " << outputs << " outputs off by one ulp";
}

TEST(CpuBackend, LinearMatchesReferenceOverAwkwardShapes) {
  std::mt19937 rng(11);
  for (int threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    auto be = make_cpu_backend(&pool);
    for (auto f : {WeightFormat::F32, WeightFormat::BF16, WeightFormat::FP8_BLOCK, WeightFormat::FP4_BLOCK})
      for (int64_t M : {1, 2, 17})
        for (int64_t N : {1, 17, 31, 257})
          for (int64_t K : {128, 384}) {
            Owned o = random_weight(f, N, K, rng);
            std::normal_distribution<float> nd(0.0f, 2.0f);
            std::vector<float> x(M * K);
            for (auto& v : x) v = round_bf16(nd(rng));
            std::vector<float> want(M * N), got(M * N + 1, 123.0f), mag(M * N);
            for (int64_t m = 0; m < M; ++m)
              for (int64_t n = 0; n < N; ++n) {
                double s = 0;
                for (int64_t k = 0; k < K; ++k) s += std::abs(double(x[m * K + k]) * weight_at(o.w, n, k));
                mag[m * N + n] = float(s);
              }
            linear_f32_ref(x.data(), M, o.w, want.data());
            be->linear_f32(x.data(), M, o.w, got.data());
            EXPECT_EQ(got[M * N], 123.0f) << "guard overwritten";
            got.pop_back();
            expect_close(got, want, mag, 1e-5, "linear_f32");
            if (o.w.is_quantized()) {
              linear_act_quant_ref(x.data(), M, o.w, 128, want.data());
              be->linear_act_quant(x.data(), M, o.w, 128, got.data());
              expect_close(got, want, mag, 2e-5, "linear_act_quant");
            }
          }
  }
}
