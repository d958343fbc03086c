// Manifold-constrained hyper-connections (mHC, docs/model/hyper_connections.md).
// The residual is hc streams [hc, dim] per token. Each sublayer site computes
//   pre  [hc]      weights collapsing the streams into the sublayer input,
//   post [hc]      weights spreading the sublayer output back onto the streams,
//   comb [hc][hc]  doubly-stochastic stream mixing (Sinkhorn), contracted over its FIRST index.
// The mixer's norm and the coefficients are kernels::hc_mix_norm_ref and hc_coeffs_ref
// (kernels/light_ops.h, Sinkhorn included).
#pragma once
#include <cstdint>

#include "model/deepseek_v4/numerics.h"
#include "model/deepseek_v4/weights.h"

namespace deepinfer::v4 {

constexpr int64_t kMaxHc = 8;

struct HcMix {
  float pre[kMaxHc];
  float post[kMaxHc];
  float comb[kMaxHc * kMaxHc];  // comb[i * hc + j]
};

// Coefficients of one site for the streams X [rows, hc * dim] of a batch (one GEMM for all
// rows through the backend; fp32 product as the reference's F.linear on fp32 streams).
void hc_site_mix(const float* X, int64_t rows, const HcWeights& w, int64_t hc, int64_t dim, const Config& cfg,
                 const Numerics& num, HcMix* out);
// Coefficients of the final collapse (hc_head) for rows: pre only [rows, hc], no Sinkhorn.
void hc_head_pre(const float* X, int64_t rows, const HcWeights& w, int64_t hc, int64_t dim, const Config& cfg,
                 const Numerics& num, float* pre);

// out[dim] = bf16(sum_i pre[i] * X[i])
void hc_collapse(const float* X, const float* pre, int64_t hc, int64_t dim, const Numerics& num, float* out);
// Y[k] = bf16(post[k] * o + sum_i comb[i][k] * R[i])   (Y may not alias R); only columns
// [j0, j1) of every stream when given (j1 < 0: to dim).
void hc_expand(const float* o, const float* R, const HcMix& mix, int64_t hc, int64_t dim,
               const Numerics& num, float* Y, int64_t j0 = 0, int64_t j1 = -1);

}  // namespace deepinfer::v4
