// The light per-token ops of the forward pass: RMSNorm (and V4's per-head query norm), the
// RoPE angles and rotation, the mixer norm, coefficients and Sinkhorn mixing of
// hyper-connections, the indexer's top-k, the router's scores, choice and weights, the
// compressor's softmax pooling and Engram's gated update, plus the canonical elementwise
// transcendentals they use. Each is small next to the GEMMs and attention, so each has one
// scalar version only (ref/light_ops_ref.cpp): it is the referee and also what the model runs.
// No backend dispatches them; the model calls them directly.
//
// Numerics (docs/model/numerics.md §1.2): a transcendental is evaluated in double and rounded
// once to fp32; a reduction is a double sum taken in index order from 0.0 and rounded once.
// "R" below is the bf16 rounding (round to nearest even) when round_bf16 is set, else the
// identity. Every contract is bit-exact: no result depends on the ISA or the thread count.
#pragma once
#include <cmath>
#include <cstdint>

namespace deepinfer::kernels {

// Canonical transcendentals: evaluated in double, rounded once to fp32.
inline float exp_f(float x) { return float(std::exp(double(x))); }
inline float sigmoid_f(float x) { return float(1.0 / (1.0 + std::exp(-double(x)))); }
inline float rsqrt_f(float x) { return float(1.0 / std::sqrt(double(x))); }
// PyTorch's softplus returns its input above the threshold 20.
inline float softplus_f(float x) { return x > 20.0f ? x : float(std::log1p(std::exp(double(x)))); }

// RMSNorm of one row (docs/model/forward.md §3), n >= 1:
//   ss   = sum_i double(x[i] * x[i])          fp32 squares, double sum in index order
//   r    = rsqrt_f(float(ss / n) + eps)       the mean rounded to fp32, the fp32 sum with eps
//   y[i] = R(w[i] * (x[i] * r))               the input scaled first (fp32), then the weight
// w may be null (unweighted: y[i] = R(x[i] * r)). y may alias x (in place).
void rms_norm_ref(const float* x, const float* w, int64_t n, float eps, bool round_bf16, float* y);

// The per-head RMS of V4's queries (docs/model/attention.md §2), in place on `heads` rows of
// n >= 1 (head h: x[h * n, (h + 1) * n)), every step at a rounding point as the reference's
// bf16 tensor ops have it:
//   ss   = sum_i double(R(x[i] * x[i]))       the squares rounded, double sum in index order
//   mean = R(float(ss / n))
//   r    = R(rsqrt_f(R(mean + eps)))
//   x[i] = R(x[i] * r)
// Without round_bf16 it is rms_norm_ref(x, nullptr, n, eps, false, x) of every head, bit for bit.
void head_rms_norm_ref(float* x, int64_t heads, int64_t n, float eps, bool round_bf16);

// RoPE angles at position pos (docs/model/attention.md §1.3) for `half` frequencies:
// theta = float(pos) * inv_freq[i] (one fp32 product), cos_out[i] = float(cos(double(theta))),
// sin_out[i] = float(sin(double(theta))).
void rope_angles_ref(const float* inv_freq, int64_t half, int64_t pos, float* cos_out, float* sin_out);

// RoPE rotation of `half` interleaved pairs (docs/model/attention.md §1.3): for each i, with
// u = pairs[2i], v = pairs[2i + 1], c = cos_t[i], s = sin_t[i] (s = -sin_t[i] when inverse),
//   pairs[2i]     = R(u * c - v * s)
//   pairs[2i + 1] = R(u * s + v * c)
// each product and difference / sum in fp32, one rounding per component. A vector with
// rope_dim rotated dims passes pairs = x + (n - rope_dim), half = rope_dim / 2.
void rope_rotate_ref(float* pairs, int64_t half, const float* cos_t, const float* sin_t, bool inverse,
                     bool round_bf16);

// Sinkhorn normalisation of the mHC mixing matrix comb [n, n] in place
// (docs/model/hyper_connections.md §2), finite entries, n >= 1, iters >= 1:
//   1. each row i: comb[i][j] = float(exp(double(c_ij) - double(m_i)) / S_i) + eps, with m_i the
//      fp32 row max and S_i = sum_j exp(double(c_ij) - double(m_i)) in order (double);
//   2. each column j: divide every entry (fp32 division) by float(sum_i double(c_ij)) + eps;
//   3. iters - 1 times: the same for each row (dividing by its sum + eps), then each column.
// The last pass is over columns. iters 0 does what iters 1 does.
void hc_sinkhorn_ref(float* comb, int64_t n, int64_t iters, float eps);

// head_rms_norm_ref and hc_mix_norm_ref run the sums of kRmsLanes rows side by side (each its
// own in-order chain, so the bits are those of one row at a time): a caller splitting rows
// over threads keeps its pieces multiples of it.
constexpr int64_t kRmsLanes = 8;

// The mHC mixer's norm (docs/model/hyper_connections.md §1, §4): the raw mixes of `rows`
// rows, mix[t * n_mix, (t + 1) * n_mix) = x_t . fn^T, scaled in place by their row's
//   r_t = rsqrt_f(float(sum_i double(x[t][i] * x[t][i]) / width) + eps)
// (fp32 squares, double sum in index order, the mean rounded to fp32; rms_norm_ref's r),
// mix[t][k] = mix[t][k] * r_t in fp32. x: rows of width >= 1, stride width. No bf16 point.
void hc_mix_norm_ref(const float* x, int64_t rows, int64_t width, float eps, float* mix, int64_t n_mix);

// The mHC coefficients of one token from its normed mix (hyper_connections.md §1, §2, §4), all
// fp32, with s = scale[0..2], b = base:
//   pre[i]  = sigmoid_f(mix[i] * s[0] + b[i]) + eps                                  i < hc
//   post[i] = 2 * sigmoid_f(mix[hc + i] * s[1] + b[hc + i])                           i < hc
//   comb[k] = mix[2hc + k] * s[2] + b[2hc + k], k < hc * hc, then
//             hc_sinkhorn_ref(comb, hc, sinkhorn_iters, eps)
// A null post or comb is not computed; the final collapse (hc_head) passes both null, its mix
// and b holding hc values and s one. comb: room for hc * hc.
void hc_coeffs_ref(const float* mix, const float* base, const float* scale, int64_t hc, float eps,
                   int64_t sinkhorn_iters, float* pre, float* post, float* comb);

// The k best of n scores into out[0, k), best first (docs/model/attention.md §5.4,
// numerics.md §5): larger score first, ties to the lower index, -0 and +0 equal. k <= n;
// k <= 0 writes nothing. order and spare: n scratch slots each. The comparator is
//   a before b  <=>  score[a] != score[b] ? score[a] > score[b] : a < b
// Without a NaN (and n < 2^32): a radix selection on the scores' order-preserving bits, whose
// result is exactly that of std::partial_sort with the comparator (a total order there).
// With a NaN (the comparator is then no strict weak order: a NaN ties with everything):
// std::nth_element, then std::sort of the first k, with the comparator; the order is the
// standard library's, deterministic, k distinct indices in [0, n).
void top_k_ref(const float* score, int64_t n, int64_t k, int64_t* order, int64_t* spare, int64_t* out);

// The router's scores (docs/model/moe.md §1) of one token's n logits:
//   score[e] = std::sqrt(softplus_f(tempered ? logits[e] / temp : logits[e]))
// the division and the square root in fp32 (correctly rounded), softplus in double (above).
void router_scores_ref(const float* logits, int64_t n, bool tempered, float temp, float* score);

// The router's choice (moe.md §1, numerics.md §5): the k <= n experts of largest
// biased[e] = score[e] + bias[e] (fp32 sum), best first, ties to the lower id; the order of
// std::partial_sort with the comparator biased[a] != biased[b] ? biased[a] > biased[b] : a < b.
// Scratch: biased [n], order [n].
void router_select_ref(const float* score, const float* bias, int64_t n, int64_t k, float* biased, int32_t* order,
                       int32_t* experts);

// The routing weights of a token's k chosen experts (moe.md §1):
//   weights[j] = score[experts[j]], sum = sum_j double(score[experts[j]]) in order,
//   den = float(sum) + renorm_eps,
//   weights[j] = (renorm ? weights[j] / den : weights[j]) * route_scale   (fp32)
void router_weights_ref(const float* score, const int32_t* experts, int64_t k, bool renorm, float renorm_eps,
                        float route_scale, float* weights);

// The compressor's gated pooling of one entry (docs/model/attention.md §4.2): for each
// channel c < width, over the slots s < n_slots in order (kv[s], sc[s]: rows of >= width):
//   m    = fp32 max of the scores (from -inf; a NaN score is skipped by the max),
//   e_s  = sc[s][c] == -inf ? 0 : exp(double(sc[s][c]) - double(m)),  den = sum_s e_s (double),
//   z[c] = float(sum_s double(kv[s][c] * float(e_s / den)))   (fp32 products, double sum)
// A slot of score -inf weighs exactly 0. Each column needs one score above -inf (else
// 0 / 0: NaN); a NaN score or a +inf one makes the column NaN. e: n_slots scratch doubles.
void compressor_pool_ref(const float* const* kv, const float* const* sc, int64_t n_slots, int64_t width, double* e,
                         float* z);

// Engram's gated update of one stream h [d] (docs/model/v41.md §6.4), d >= 1, in place; returns
// the gate. With rms(v) = rsqrt_f(float(sum_j double(v[j] * v[j]) / d) + eps) (rms_norm_ref's r):
//   rho  = rms(h) * rms(key)                                  fp32, stream and key separately
//   dot  = float(sum_j double(h[j] * qk[j] * key[j])) * rho * float(1 / sqrt(double(d)))
//          (fp32 products left to right, double sum in index order, fp32 products after)
//   gate = sigmoid_f(copysign(float(sqrt(double(max(|dot|, 1e-6f)))), dot))
//   h[j] = R(h[j] + gate * value[j])                          fp32 product and sum
// dot = +-0 gives the gate sigmoid_f(+-float(sqrt(double(1e-6f)))) (the floor keeps the sign);
// a NaN dot a NaN gate and stream (std::max returns its first argument, |dot|).
float engram_update_ref(float* h, const float* key, const float* qk, const float* value, int64_t d, float eps,
                        bool round_bf16);

}  // namespace deepinfer::kernels
