#include "model/deepseek_v4/hyper_connections.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/kernels.h"

namespace deepinfer::v4 {

// mix = (x . fn^T) * rsqrt(mean(x^2) + eps): the reference scales after the product.
static void hc_raw_mix(const float* X, const HcWeights& w, int64_t width, float eps, float* mix) {
  double ss = 0.0;
  for (int64_t i = 0; i < width; ++i) ss += double(X[i] * X[i]);
  const float r = rsqrt_f(float(ss / double(width)) + eps);
  const int64_t n_mix = w.fn.rows;
  std::vector<float> raw(n_mix);
  kernels::linear_f32_ref(X, 1, w.fn, raw.data());
  for (int64_t k = 0; k < n_mix; ++k) mix[k] = raw[k] * r;
}

void hc_sinkhorn(float* c, int64_t n, int64_t iters, float eps) {
  for (int64_t i = 0; i < n; ++i) {  // row softmax over the destination index
    float* row = c + i * n;
    float m = *std::max_element(row, row + n);
    double sum = 0.0;
    for (int64_t j = 0; j < n; ++j) sum += std::exp(double(row[j]) - double(m));
    for (int64_t j = 0; j < n; ++j) row[j] = float(std::exp(double(row[j]) - double(m)) / sum) + eps;
  }
  auto normalise_cols = [&] {
    for (int64_t j = 0; j < n; ++j) {
      double s = 0.0;
      for (int64_t i = 0; i < n; ++i) s += c[i * n + j];
      const float d = float(s) + eps;
      for (int64_t i = 0; i < n; ++i) c[i * n + j] /= d;
    }
  };
  auto normalise_rows = [&] {
    for (int64_t i = 0; i < n; ++i) {
      double s = 0.0;
      for (int64_t j = 0; j < n; ++j) s += c[i * n + j];
      const float d = float(s) + eps;
      for (int64_t j = 0; j < n; ++j) c[i * n + j] /= d;
    }
  };
  normalise_cols();
  for (int64_t it = 1; it < iters; ++it) {
    normalise_rows();
    normalise_cols();
  }
}

HcMix hc_site_mix(const float* X, const HcWeights& w, int64_t hc, int64_t dim, const Config& cfg) {
  float mix[(2 + kMaxHc) * kMaxHc];
  hc_raw_mix(X, w, hc * dim, float(cfg.norm_eps), mix);
  const float eps = float(cfg.hc_eps);
  const float s0 = w.scale[0], s1 = w.scale[1], s2 = w.scale[2];
  HcMix m;
  for (int64_t i = 0; i < hc; ++i) {
    m.pre[i] = sigmoid_f(mix[i] * s0 + w.base[i]) + eps;
    m.post[i] = 2.0f * sigmoid_f(mix[hc + i] * s1 + w.base[hc + i]);
  }
  for (int64_t k = 0; k < hc * hc; ++k) m.comb[k] = mix[2 * hc + k] * s2 + w.base[2 * hc + k];
  hc_sinkhorn(m.comb, hc, cfg.hc_sinkhorn_iters, eps);
  return m;
}

void hc_head_pre(const float* X, const HcWeights& w, int64_t hc, int64_t dim, const Config& cfg, float* pre) {
  float mix[kMaxHc];
  hc_raw_mix(X, w, hc * dim, float(cfg.norm_eps), mix);
  for (int64_t i = 0; i < hc; ++i) pre[i] = sigmoid_f(mix[i] * w.scale[0] + w.base[i]) + float(cfg.hc_eps);
}

void hc_collapse(const float* X, const float* pre, int64_t hc, int64_t dim, const Numerics& num, float* out) {
  for (int64_t j = 0; j < dim; ++j) {
    double s = 0.0;
    for (int64_t i = 0; i < hc; ++i) s += double(pre[i] * X[i * dim + j]);
    out[j] = num.bf16(float(s));
  }
}

void hc_expand(const float* o, const float* R, const HcMix& mix, int64_t hc, int64_t dim,
               const Numerics& num, float* Y) {
  for (int64_t k = 0; k < hc; ++k)
    for (int64_t j = 0; j < dim; ++j) {
      double s = 0.0;
      for (int64_t i = 0; i < hc; ++i) s += double(mix.comb[i * hc + k] * R[i * dim + j]);
      Y[k * dim + j] = num.bf16(mix.post[k] * o[j] + float(s));
    }
}

}  // namespace deepinfer::v4
