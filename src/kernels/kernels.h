// The referees of the kernel layer's compute ops, with their shape contracts: the GEMMs,
// activation quantisation and QDQ, the Hadamard transform, sink attention, the indexer
// scores, hyper-connection expand / collapse and SwiGLU (the backends of backend.h run the
// GEMMs and the ops from sink attention on; the model calls the quantisation, QDQ and
// Hadamard ops here directly). The light per-token ops (RMSNorm, RoPE, the Sinkhorn mixing,
// top-k, the router's scores) are in light_ops.h.
// The op registry (ops.h) lists every op once: its referee here, its shape contract, its bit
// contract (bits, units in the last place or fp32 reassociation: how a fast backend's result
// may differ from the referee's) and which ISA implements it; test_op_registry.cpp checks each
// op on every ISA against these.
// `ref/` holds the plain scalar version of each op here; it defines the numerics (docs/model/
// formats.md, numerics.md §1.2): dot products accumulate in double and round once to fp32,
// transcendentals are evaluated in double and rounded once, so results do not depend on
// summation order.
#pragma once
#include <cstdint>

#include "core/weight.h"

namespace deepinfer::kernels {

// y[M, W.rows] = x[M, W.cols] . W^T with the exact decoded weights.
// The plain product: float numerics for every weight, and the reference's bf16 / fp32
// linears (inputs already bf16-valued there; the caller rounds the output).
void linear_f32_ref(const float* x, int64_t M, const WeightMatrix& W, float* y);

// How the K blocks of an act-quant GEMM combine (each block's dot of e4m3 / e2m1 codes is
// exact in double either way):
//   kExact  the whole sum in double, rounded once to fp32 (the V4 goldens' canonical rule);
//   kF32    each block's dot times its scales rounded to fp32, the blocks summed in an fp32
//           accumulator in K order (the V4.1 goldens: the kernel's per-block fp32 promotion).
enum class BlockSum { kExact, kF32 };

// The reference's FP8 / FP4 GEMM (docs/model/formats.md §5): each row of x is act-quantised to e4m3
// with one ue8m0 scale per act_block elements, then
//   FP8: y = sum_kb (sum_{k in kb} xq*wq) * sx[kb] * sW[n/B, kb]
//   FP4: y = sum_kb32 (sum xq*wq) * sx[kb32*32/act_block] * sW[n, kb32]
// the outer sum as `sum` says. W.cols must be a multiple of act_block (checked at model
// load). Output fp32 (caller rounds).
void linear_act_quant_ref(const float* x, int64_t M, const WeightMatrix& W, int64_t act_block, float* y,
                          BlockSum sum = BlockSum::kExact);

// act_quant per block in place (docs/model/formats.md §3): x <- bf16(e4m3(x / s) * s), s = ue8m0 ceil
// of max(amax, 1e-4) / 448. n must be a multiple of block.
// If q_out/s_out are given, also writes the e4m3 values (as fp32) and the per-block scales.
void act_quant_ref(float* x, int64_t n, int64_t block, float* q_out = nullptr, float* s_out = nullptr);

// FP4 QDQ with power-of-two scales (docs/model/formats.md §4.1) in place, blocks of `block`.
void fp4_qdq_pow2_ref(float* x, int64_t n, int64_t block);

// FP4 QDQ with e4m3 scales (docs/model/formats.md §4.2: V4.1 compressed KV) in place,
// blocks of `block` (16 in V4.1): s = e4m3(max(amax, 6 * 2^-9) / 6) (fp32 division, e4m3
// round-to-nearest-even), x <- bf16(e2m1(clamp(x / s, -6, 6)) * s) with x / s an fp32
// division. n must be a multiple of block.
void fp4_qdq_e4m3_ref(float* x, int64_t n, int64_t block);

// In-place unnormalised Walsh-Hadamard transform (Sylvester order), n a power of two.
void hadamard_ref(float* x, int64_t n);

// One head of sink attention over an explicit key list (docs/model/attention.md §6.3-§6.4).
// keys[j] points at a key/value vector of length dim, or is null (an invalid column).
// Columns are processed in tiles of 64 with an online softmax; when round_probs is set the
// unnormalised probabilities are rounded to bf16 for P.V (reference kernel), the
// denominator always sums the fp32 values; exp(sink - max) joins the denominator at the end.
// The first tile holding a valid key must not be preceded by an all-invalid tile.
void sink_attention_ref(const float* q, const float* const* keys, int64_t n_keys, int64_t dim,
                        float scale, float sink, bool round_probs, float* out);

// Lightning-indexer scores of one query token (docs/model/attention.md §5.3) against n_keys keys of length
// dim: q holds n_heads query heads [n_heads, dim], w their weights. With R the bf16 rounding
// when round_bf16 is set (reference numerics), else the identity:
//   score[s] = R(float(sum_h double(R(max(R(float(q_h . k_s)), 0) * w_h))))
// every dot q_h . k_s accumulated in double over c = 0..dim-1 in order, the head sum in
// double over h in order. Null keys are not allowed.
void index_scores_ref(const float* q, const float* w, int64_t n_heads, int64_t dim, const float* const* keys,
                      int64_t n_keys, bool round_bf16, float* scores);

// Hyper-connection expansion (docs/model/hyper_connections.md §3, hc_post) of one token, columns [j0, j1): for
// each stream k, Y[k * dim + j] = R(post[k] * o[j] + float(s)) with s = sum over i of
// double(comb[i * hc + k] * Rs[i * dim + j]) in order from 0.0 (fp32 products, a double sum),
// R the bf16 rounding when round_bf16.
void hc_expand_ref(const float* o, const float* Rs, const float* comb, const float* post, int64_t hc, int64_t dim,
                   bool round_bf16, float* Y, int64_t j0, int64_t j1);

// Hyper-connection collapse (docs/model/hyper_connections.md §3, hc_pre) of one token: out[j] = R(float(s)) with
// s = sum over i of double(pre[i] * X[i * dim + j]) in order from 0.0 (fp32 products).
void hc_collapse_ref(const float* X, const float* pre, int64_t hc, int64_t dim, bool round_bf16, float* out);

// The MoE SwiGLU of one row (docs/model/moe.md §2): with L = limit (no clamping when L <= 0),
// silu(x) = float(double(x) / (1 + exp(-double(x)))) and R the bf16 rounding when round_bf16:
//   out[i] = R(w * (silu(min(g[i], L)) * clamp(u[i], -L, L)))   (w * only when weight != null,
// w = *weight; the products in fp32, in that order). NaN passes through as std::min / clamp do.
void swiglu_ref(const float* g, const float* u, int64_t n, float limit, const float* weight, bool round_bf16,
                float* out);

}  // namespace deepinfer::kernels
