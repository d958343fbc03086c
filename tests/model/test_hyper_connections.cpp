// Sinkhorn invariants and the comb contraction direction of mHC.
#include <gtest/gtest.h>

#include <random>

#include "kernels/light_ops.h"
#include "model/deepseek_v4/hyper_connections.h"

using namespace deepinfer::v4;

TEST(Sinkhorn, RowsAndColumnsSumToOne) {
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  for (int64_t n : {1, 2, 4, 8}) {
    float c[kMaxHc * kMaxHc];
    for (int64_t i = 0; i < n * n; ++i) c[i] = nd(rng);
    deepinfer::kernels::hc_sinkhorn_ref(c, n, 20, 1e-6f);
    for (int64_t i = 0; i < n; ++i) {
      double row = 0, col = 0;
      for (int64_t j = 0; j < n; ++j) {
        row += c[i * n + j];
        col += c[j * n + i];
        EXPECT_GT(c[i * n + j], 0.0f);
      }
      EXPECT_NEAR(col, 1.0, 1e-5);  // the last normalisation is over columns
      EXPECT_NEAR(row, 1.0, 1e-3);
    }
  }
}

TEST(HcExpand, ContractsCombOverSourceStream) {
  // comb[i][k] moves source stream i into destination k.
  HcMix mix{};
  const int64_t hc = 2, dim = 1;
  mix.post[0] = mix.post[1] = 0.0f;
  mix.comb[0 * hc + 1] = 1.0f;  // stream 0 -> 1
  mix.comb[1 * hc + 0] = 0.5f;  // stream 1 -> 0 (halved)
  const float R[2] = {2.0f, 8.0f}, o[1] = {0.0f};
  float Y[2];
  Numerics num;
  hc_expand(o, R, mix, hc, dim, num, Y);
  EXPECT_EQ(Y[0], 4.0f);
  EXPECT_EQ(Y[1], 2.0f);
}
