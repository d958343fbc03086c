#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/kernels.h"

namespace deepinfer::kernels {

void act_quant_ref(float* x, int64_t n, int64_t block, float* q_out, float* s_out) {
  const float inv448 = 1.0f / 448.0f;  // the reference multiplies by this fp32 constant
  for (int64_t b0 = 0; b0 < n; b0 += block) {
    const int64_t b1 = std::min(n, b0 + block);
    float amax = 0.0f;
    for (int64_t i = b0; i < b1; ++i) amax = std::max(amax, std::fabs(x[i]));
    amax = std::max(amax, 1e-4f);
    const float s = pow2_ceil_scale(amax * inv448);
    for (int64_t i = b0; i < b1; ++i) {
      float v = std::clamp(x[i] / s, -448.0f, 448.0f);  // division by 2^k is exact
      float q = e4m3_round(v);
      if (q_out) q_out[i] = q;
      x[i] = round_bf16(q * s);
    }
    if (s_out) s_out[b0 / block] = s;
  }
}

void fp4_qdq_pow2_ref(float* x, int64_t n, int64_t block) {
  const float floor_amax = 6.0f * std::ldexp(1.0f, -126);
  const float inv6 = 1.0f / 6.0f;
  for (int64_t b0 = 0; b0 < n; b0 += block) {
    const int64_t b1 = std::min(n, b0 + block);
    float amax = 0.0f;
    for (int64_t i = b0; i < b1; ++i) amax = std::max(amax, std::fabs(x[i]));
    amax = std::max(amax, floor_amax);
    const float s = pow2_ceil_scale(amax * inv6);
    for (int64_t i = b0; i < b1; ++i) {
      float v = std::clamp(x[i] / s, -6.0f, 6.0f);
      x[i] = round_bf16(e2m1_round(v) * s);
    }
  }
}

void fp4_qdq_e4m3_ref(float* x, int64_t n, int64_t block) {
  const float floor_amax = 6.0f * std::ldexp(1.0f, -9);  // 6 * the smallest e4m3 subnormal
  for (int64_t b0 = 0; b0 < n; b0 += block) {
    const int64_t b1 = std::min(n, b0 + block);
    float amax = 0.0f;
    for (int64_t i = b0; i < b1; ++i) amax = std::max(amax, std::fabs(x[i]));
    amax = std::max(amax, floor_amax);
    const float s = e4m3_round(amax / 6.0f);  // an e4m3 scale: not a power of two
    for (int64_t i = b0; i < b1; ++i) {
      const float v = std::clamp(x[i] / s, -6.0f, 6.0f);
      x[i] = round_bf16(e2m1_round(v) * s);  // exact: at most 2 + 4 significant bits
    }
  }
}

void hadamard_ref(float* x, int64_t n) {
  // Butterflies in double: sums of n bf16 values are exact there, so the result is the
  // correctly rounded fp32 transform whatever the butterfly order.
  double buf[4096];
  double* h = buf;
  std::vector<double> big;
  if (n > 4096) {
    big.resize(n);
    h = big.data();
  }
  for (int64_t i = 0; i < n; ++i) h[i] = x[i];
  for (int64_t len = 1; len < n; len <<= 1)
    for (int64_t i = 0; i < n; i += 2 * len)
      for (int64_t j = i; j < i + len; ++j) {
        double a = h[j], b = h[j + len];
        h[j] = a + b;
        h[j + len] = a - b;
      }
  for (int64_t i = 0; i < n; ++i) x[i] = float(h[i]);
}

void hc_expand_ref(const float* o, const float* Rs, const float* comb, const float* post, int64_t hc, int64_t dim,
                   bool round_bf16, float* Y, int64_t j0, int64_t j1) {
  for (int64_t k = 0; k < hc; ++k)
    for (int64_t j = j0; j < j1; ++j) {
      double s = 0.0;
      for (int64_t i = 0; i < hc; ++i) s += double(comb[i * hc + k] * Rs[i * dim + j]);
      const float y = post[k] * o[j] + float(s);
      Y[k * dim + j] = round_bf16 ? deepinfer::round_bf16(y) : y;
    }
}

void hc_collapse_ref(const float* X, const float* pre, int64_t hc, int64_t dim, bool round_bf16, float* out) {
  for (int64_t j = 0; j < dim; ++j) {
    double s = 0.0;
    for (int64_t i = 0; i < hc; ++i) s += double(pre[i] * X[i * dim + j]);
    out[j] = round_bf16 ? deepinfer::round_bf16(float(s)) : float(s);
  }
}

void swiglu_ref(const float* g, const float* u, int64_t n, float limit, const float* weight, bool round_bf16,
                float* out) {
  for (int64_t i = 0; i < n; ++i) {
    float gv = g[i], uv = u[i];
    if (limit > 0.0f) {
      uv = std::clamp(uv, -limit, limit);
      gv = std::min(gv, limit);
    }
    const float silu = float(double(gv) / (1.0 + std::exp(-double(gv))));
    float h = silu * uv;
    if (weight) h = *weight * h;
    out[i] = round_bf16 ? deepinfer::round_bf16(h) : h;
  }
}

}  // namespace deepinfer::kernels
