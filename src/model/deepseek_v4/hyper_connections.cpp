#include "model/deepseek_v4/hyper_connections.h"

#include <algorithm>
#include <span>

#include "core/profile.h"
#include "kernels/kernels.h"
#include "kernels/light_ops.h"
#include "model/deepseek_v4/layer_ops.h"

namespace deepinfer::v4 {

// mix[rows, n_mix] = (x . fn^T) * rsqrt(mean(x^2) + eps): the reference scales after the product.
// Reference numerics take the product with double dots (the canonical fp32 GEMM): a last-bit
// change of a coefficient can flip a bf16 rounding of the collapsed stream, which the FP4
// QDQ of V4.1's compressed entries and index keys then turns into a visible difference.
static void hc_raw_mix(const float* X, int64_t rows, const HcWeights& w, int64_t width, float eps, const Numerics& num,
                       float* mix) {
  const int64_t n_mix = w.fn.rows;
  profile::Phase section;
  section.start(DI_PROFILE_SECTION("hc.mixer"));
  if (num.reference())
    num.backend->linear_f32_exact(X, rows, w.fn, mix);
  else
    num.backend->linear_f32(X, rows, w.fn, mix);
  section.start(DI_PROFILE_SECTION("hc.mixer_norm"));
  // Each row's sum of squares: serial_sums, kSerialSumLanes rows at a time.
  constexpr int64_t kLanes = kSerialSumLanes;
  auto blocks = [&](int64_t b0, int64_t b1) {
    for (int64_t t0 = b0 * kLanes; t0 < std::min(rows, b1 * kLanes); t0 += kLanes) {
      const int64_t nt = std::min(kLanes, rows - t0);
      double ss[kLanes];
      const float* x[kLanes];
      for (int64_t j = 0; j < nt; ++j) x[j] = X + (t0 + j) * width;
      serial_sums(x, nt, width, [](float v) { return v * v; }, ss);
      for (int64_t j = 0; j < nt; ++j) {
        const float r = rsqrt_f(float(ss[j] / double(width)) + eps);
        for (int64_t k = 0; k < n_mix; ++k) mix[(t0 + j) * n_mix + k] *= r;
      }
    }
  };
  // Captured by one reference, so the std::function of parallel_for stays off the heap.
  parallel_for(num.backend->pool(), (rows + kLanes - 1) / kLanes, 1,
               [&blocks](int64_t b0, int64_t b1, int) { blocks(b0, b1); });
}

void hc_site_mix(const float* X, int64_t rows, const HcWeights& w, int64_t hc, int64_t dim, const Config& cfg,
                 const Numerics& num, HcMix* out) {
  const int64_t n_mix = (2 + hc) * hc;
  ScratchArena::Scope scope(step_scratch());
  std::span<float> mixes = step_scratch().take<float>(rows * n_mix);
  hc_raw_mix(X, rows, w, hc * dim, float(cfg.norm_eps), num, mixes.data());
  const float eps = float(cfg.hc_eps);
  const float s0 = w.scale[0], s1 = w.scale[1], s2 = w.scale[2];
  DI_PROFILE("hc.sinkhorn");
  for_each_row(num, rows, [&](int64_t t) {
    const float* mix = &mixes[t * n_mix];
    HcMix& m = out[t];
    for (int64_t i = 0; i < hc; ++i) {
      m.pre[i] = sigmoid_f(mix[i] * s0 + w.base[i]) + eps;
      m.post[i] = 2.0f * sigmoid_f(mix[hc + i] * s1 + w.base[hc + i]);
    }
    for (int64_t k = 0; k < hc * hc; ++k) m.comb[k] = mix[2 * hc + k] * s2 + w.base[2 * hc + k];
    kernels::hc_sinkhorn_ref(m.comb, hc, cfg.hc_sinkhorn_iters, eps);
  });
}

void hc_head_pre(const float* X, int64_t rows, const HcWeights& w, int64_t hc, int64_t dim, const Config& cfg,
                 const Numerics& num, float* pre) {
  ScratchArena::Scope scope(step_scratch());
  std::span<float> mixes = step_scratch().take<float>(rows * hc);
  hc_raw_mix(X, rows, w, hc * dim, float(cfg.norm_eps), num, mixes.data());
  for (int64_t t = 0; t < rows; ++t)
    for (int64_t i = 0; i < hc; ++i)
      pre[t * hc + i] = sigmoid_f(mixes[t * hc + i] * w.scale[0] + w.base[i]) + float(cfg.hc_eps);
}

void hc_collapse(const float* X, const float* pre, int64_t hc, int64_t dim, const Numerics& num, float* out) {
  num.backend->hc_collapse(X, pre, hc, dim, num.reference(), out);
}

void hc_expand(const float* o, const float* R, const HcMix& mix, int64_t hc, int64_t dim,
               const Numerics& num, float* Y, int64_t j0, int64_t j1) {
  if (j1 < 0) j1 = dim;
  num.backend->hc_expand(o, R, mix.comb, mix.post, hc, dim, num.reference(), Y, j0, j1);
}

}  // namespace deepinfer::v4
