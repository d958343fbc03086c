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
  // Pieces of kernels::kRmsLanes rows, whose sums of squares run side by side.
  constexpr int64_t kLanes = kernels::kRmsLanes;
  auto blocks = [&](int64_t b0, int64_t b1) {
    const int64_t t0 = b0 * kLanes;
    kernels::hc_mix_norm_ref(X + t0 * width, std::min(rows, b1 * kLanes) - t0, width, eps, mix + t0 * n_mix, n_mix);
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
  DI_PROFILE("hc.sinkhorn");
  for_each_row(num, rows, [&](int64_t t) {
    HcMix& m = out[t];
    kernels::hc_coeffs_ref(&mixes[t * n_mix], w.base.data(), w.scale.data(), hc, float(cfg.hc_eps),
                           cfg.hc_sinkhorn_iters, m.pre, m.post, m.comb);
  });
}

void hc_head_pre(const float* X, int64_t rows, const HcWeights& w, int64_t hc, int64_t dim, const Config& cfg,
                 const Numerics& num, float* pre) {
  ScratchArena::Scope scope(step_scratch());
  std::span<float> mixes = step_scratch().take<float>(rows * hc);
  hc_raw_mix(X, rows, w, hc * dim, float(cfg.norm_eps), num, mixes.data());
  for (int64_t t = 0; t < rows; ++t)
    kernels::hc_coeffs_ref(&mixes[t * hc], w.base.data(), w.scale.data(), hc, float(cfg.hc_eps), 0, &pre[t * hc],
                           nullptr, nullptr);
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
