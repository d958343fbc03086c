#include <cassert>
#include <vector>

#include "kernels/kernels.h"

namespace deepinfer::kernels {

void linear_f32_ref(const float* x, int64_t M, const WeightMatrix& W, float* y) {
  const int64_t N = W.rows, K = W.cols;
  std::vector<float> row(K);
  for (int64_t n = 0; n < N; ++n) {
    weight_decode_row(W, n, row.data());
    for (int64_t m = 0; m < M; ++m) {
      const float* xm = x + m * K;
      double acc = 0.0;
      for (int64_t k = 0; k < K; ++k) acc += double(xm[k]) * double(row[k]);
      y[m * N + n] = float(acc);
    }
  }
}

// Integer-valued code of an FP8/FP4 weight element without its scale.
static float weight_code(const WeightMatrix& w, int64_t r, int64_t c) {
  if (w.format == WeightFormat::FP8_BLOCK) return e4m3_to_f32(w.data[r * w.cols + c]);
  uint8_t byte = w.data[r * (w.cols / 2) + c / 2];
  return e2m1_to_f32((c & 1) ? (byte >> 4) : (byte & 0xf));
}

void linear_act_quant_ref(const float* x, int64_t M, const WeightMatrix& W, int64_t act_block, float* y,
                          BlockSum sum) {
  if (!W.is_quantized()) {
    linear_f32_ref(x, M, W, y);
    return;
  }
  const int64_t N = W.rows, K = W.cols;
  assert(K % act_block == 0);
  const bool fp4 = W.format == WeightFormat::FP4_BLOCK;
  // K-blocks of the weight scale: B for FP8 (act_block == B in every released config), 32 for FP4.
  const int64_t wblock = fp4 ? 32 : W.block;
  const int64_t kblock = fp4 ? 32 : act_block;
  std::vector<float> xq(M * K), sx(M * (K / act_block)), xtmp(K);
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t k = 0; k < K; ++k) xtmp[k] = x[m * K + k];
    act_quant_ref(xtmp.data(), K, act_block, xq.data() + m * K, sx.data() + m * (K / act_block));
  }
  std::vector<float> wrow(K);
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t k = 0; k < K; ++k) wrow[k] = weight_code(W, n, k);
    for (int64_t m = 0; m < M; ++m) {
      const float* xm = xq.data() + m * K;
      double acc = 0.0;
      float acc_f32 = 0.0f;
      for (int64_t k0 = 0; k0 < K; k0 += kblock) {
        double part = 0.0;  // exact: products of e4m3 and e4m3/e2m1 codes
        for (int64_t k = k0; k < k0 + kblock && k < K; ++k) part += double(xm[k]) * double(wrow[k]);
        double s_act = sx[m * (K / act_block) + k0 / act_block];
        double s_w = fp4 ? e8m0_to_f32(W.scale[n * W.scale_cols + k0 / wblock])
                         : e8m0_to_f32(W.scale[(n / W.block) * W.scale_cols + k0 / wblock]);
        if (sum == BlockSum::kF32)
          acc_f32 += float(part * s_act * s_w);
        else
          acc += part * s_act * s_w;
      }
      y[m * N + n] = sum == BlockSum::kF32 ? acc_f32 : float(acc);
    }
  }
}

}  // namespace deepinfer::kernels
