// The op registry's catalogue (ops.h): one OpSpec per Op, in Op order. Each contract is the
// one the code keeps (the comments of kernels.h, backend.h, cpu/cpu_isa.h, cpu/attention_cpu.h)
// and the kernel tests check; tests/kernels/test_op_registry.cpp checks every one on every ISA.
#include "kernels/ops.h"

#include <iterator>

#include "kernels/cpu/attention_cpu.h"
#include "kernels/cpu/cpu_isa.h"

namespace deepinfer::kernels {

namespace {

using cpu::AttentionKernels;
using cpu::IsaKernels;

// The linears: an ISA's GEMV / GEMM kernels behind the driver, else Isa::Scalar's fp32 loops.
Impl linear_impl(const IsaKernels* k, const AttentionKernels*) { return k && k->rows ? Impl::kIsa : Impl::kPortable; }
Impl act_quant_linear_impl(const IsaKernels* k, const AttentionKernels*) {
  return k && k->rows && k->prep_act_quant ? Impl::kIsa : Impl::kPortable;
}
Impl referee_only(const IsaKernels*, const AttentionKernels*) { return Impl::kReferee; }

constexpr uint8_t kNaN = kSpecialNaN, kInf = kSpecialInf, kSub = kSpecialSubnormal;

// The contracts, by family. Fields in order: bits, bound, bound_rounded, magnitude,
// max_differing, specials, weight_specials, nan_bits.
constexpr Contract bits_contract(uint8_t specials) {
  return {BitContract::kBits, 0, 0, Magnitude::kNone, 0, specials, 0, true};
}
// The GEMMs: fp32 accumulation against the referee's double, relative to sum |x * w|.
constexpr Contract kLinearF32{BitContract::kFp32Reassoc, 1e-5, 1e-5, Magnitude::kSumAbsTerms, 1.0, kNaN | kSub, kNaN,
                              false};
constexpr Contract kLinearActQuant{BitContract::kFp32Reassoc, 2e-5, 2e-5, Magnitude::kSumAbsTerms, 1.0, kNaN | kSub,
                                   kNaN, false};
constexpr Contract kLinearMany{BitContract::kFp32Reassoc, 2e-5, 2e-5, Magnitude::kSumAbsTerms, 1.0, 0, 0, false};
// Sink attention: a weighted mean of values, relative to 1 + |out|; bf16 probabilities 8e-3.
constexpr Contract kAttention{BitContract::kFp32Reassoc, 2e-5, 8e-3, Magnitude::kOnePlusAbs, 1.0, 0, 0, false};

constexpr const char* kLinearF32Basis =
    "fp32 accumulation (vector FMAs; bf16 dot products only where every product is exact) in the kernels' order "
    "against the referee's double sum rounded once (backend.h, cpu/cpu_backend.cpp): CpuIsa.LinearPlainWeightsTails "
    "/ LinearAllFormatsDecodeAndPrefill / NanPropagation. A NaN's sign and payload follow the summation order (a "
    "NaN code and an inf - inf in one dot), so only NaN-ness is kept";
constexpr const char* kLinearActQuantBasis =
    "the activations act-quantised bit for bit (IsaKernels::prep_act_quant = act_quant_ref), their products with "
    "the codes summed in fp32 and the K blocks combined in fp32 whatever BlockSum says (backend.h); the referee's "
    "blocks are exact in double: CpuIsa.LinearActQuant, NanPropagation. NaN weight codes and scale bytes give NaN "
    "where the referee does; a row holding a NaN activation (act-quant keeps it, with a finite act scale) goes to "
    "the portable kernels (prep_act_quant's max_scale is NaN), which carry it to NaN as the referee does: the "
    "vector kernels' modes need not (AVX-512's FP8 GEMV at one or two rows gave finite values)";
constexpr const char* kAttentionBasis =
    "the referee's tiles and online softmax accumulated in fp32 instead of double, exp in fp32 "
    "(cpu/attention_cpu.h); with bf16 probabilities one ulp of exp can move a probability to the neighbouring bf16 "
    "value (2^-8 relative): CpuAttention.MatchesReferenceOverAwkwardShapes. Isa::Scalar runs the referee (its "
    "bits)";

// A light op (light_ops.h): one scalar implementation, its referee, which the model calls itself
// whatever the backend (no ISA table has an entry for it), so its contract is bits; basis: what
// that implementation computes, and the tests that pin it (LightOps.*).
constexpr OpSpec light_op(Op op, const char* name, const char* referee, const char* call, const char* shapes,
                          uint8_t specials, const char* basis) {
  return {op, name, referee, call, shapes, bits_contract(specials), basis, "none (scalar only: the referee runs)",
          referee_only};
}

constexpr const char* kLinearCall = "Backend::linear_f32, Backend::linear_many (act_block 0)";
constexpr const char* kActQuantCall = "Backend::linear_act_quant, Backend::linear_many (act_block > 0)";
constexpr const char* kActQuantReferee = "linear_act_quant_ref (with the call's BlockSum)";

constexpr OpSpec kCatalogue[] = {
    {Op::linear_f32_w_f32, "linear_f32_w_f32", "linear_f32_ref", kLinearCall,
     "x [M, K], W F32 [N, K], y [M, N]; M, N, K >= 1, any K (vector and scalar tails); writes y only", kLinearF32,
     kLinearF32Basis, "IsaKernels::prep_float, rows", linear_impl},
    {Op::linear_f32_w_bf16, "linear_f32_w_bf16", "linear_f32_ref", kLinearCall,
     "x [M, K], W BF16 [N, K], y [M, N]; M, N, K >= 1, any K; bf16 mode for activation rows of exact bf16 values in "
     "[2^-40, 2^40] (per row), fp32 mode otherwise; writes y only",
     kLinearF32, kLinearF32Basis, "IsaKernels::prep_float, rows (bf16 mode: bf16_pair_order, bf16_dp_order)",
     linear_impl},
    {Op::linear_f32_w_fp8, "linear_f32_w_fp8", "linear_f32_ref", kLinearCall,
     "x [M, K], W FP8_BLOCK [N, K] with B x B ue8m0 scale blocks (B 128: V4, 32: V4.1), y [M, N]; any K; B not a "
     "multiple of 32, and scale bytes above IsaKernels::fp8_max_scale (AVX2, NEON: 134), go to the portable "
     "kernels; writes y only",
     kLinearF32, kLinearF32Basis, "IsaKernels::prep_float, rows (fp8_f32_order, call_setup where set)", linear_impl},
    {Op::linear_f32_w_fp4, "linear_f32_w_fp4", "linear_f32_ref", kLinearCall,
     "x [M, K], W FP4_BLOCK [N, K] with a ue8m0 scale per 32 columns, y [M, N]; K a multiple of 32; writes y only",
     kLinearF32, kLinearF32Basis, "IsaKernels::prep_float, rows (fp4_lane_order, fp4_f32_order where set)",
     linear_impl},
    {Op::linear_f32_exact, "linear_f32_exact", "linear_f32_ref", "Backend::linear_f32_exact (the mHC mixer)",
     "as linear_f32, any weight format (decoded per row), any K; writes y only",
     {BitContract::kUlp, 1.0, 1.0, Magnitude::kNone, 0.01, kNaN, kNaN, false},
     "every product exact in double, the dot summed in double in another order (vector lanes: IsaKernels::dot_f64 "
     "/ dot_f64_4) and rounded once to fp32, so equal to the referee except where the double sum lies next to an "
     "fp32 rounding boundary: one unit, rarely (backend.h; CpuBackend.LinearExactEqualsReferenceDoubleSums). Holds "
     "while the dot does not cancel by more than about 2^28 (sum |x * w| / |sum|): double reassociation moves a sum "
     "by ~2^-53 sum |x * w|. Isa::Scalar and ISAs without dot_f64 sum in the referee's order (its bits)",
     "IsaKernels::dot_f64, dot_f64_4",
     [](const IsaKernels* k, const AttentionKernels*) { return k && k->dot_f64 ? Impl::kIsa : Impl::kPortable; }},
    {Op::linear_act_quant_fp8, "linear_act_quant_fp8", kActQuantReferee, kActQuantCall,
     "x [M, K], W FP8_BLOCK [N, K] (block B), y [M, N], act_block dividing K; the vector kernels take act_block a "
     "multiple of IsaKernels::act_align dividing B and rows whose act scales stay within 2^31; other blocks and rows "
     "go to the portable kernels (the referee's indexing); writes y only. BF16 / F32 weights are linear_f32 (no "
     "quantisation)",
     kLinearActQuant, kLinearActQuantBasis, "IsaKernels::prep_act_quant, rows", act_quant_linear_impl},
    {Op::linear_act_quant_fp4, "linear_act_quant_fp4", kActQuantReferee, kActQuantCall,
     "x [M, K], W FP4_BLOCK [N, K], y [M, N], act_block dividing K, K a multiple of 32; the vector kernels take "
     "act_block a multiple of 32 (and of IsaKernels::act_align) and rows whose act scales stay within 2^31; others "
     "go to the portable kernels; writes y only",
     kLinearActQuant, kLinearActQuantBasis, "IsaKernels::prep_act_quant, rows", act_quant_linear_impl},
    {Op::linear_many, "linear_many", "linear_f32_ref / linear_act_quant_ref, job by job",
     "Backend::linear_many (a MoE step's experts, the projections of one input)",
     "any batch of LinearJob, each job as its linear op's contract; a job writes its own y only; every job's y also "
     "equals, bit for bit, the same backend's own call for it (backend.h)",
     kLinearMany,
     "each job runs its own call's arithmetic (the shared parallel region splits output rows only): "
     "CpuIsa.LinearManyEqualsSingleCalls / LinearManySharedInputs",
     "IsaKernels::rows (one parallel region over the jobs' weight bytes)", linear_impl},
    {Op::act_quant, "act_quant", "act_quant_ref",
     "act_quant_ref (the model's KV QDQ, every backend); inside linear_act_quant as IsaKernels::prep_act_quant; "
     "cpu_act_quant(isa) runs an ISA's",
     "x [n] in place, n a multiple of block; q_out [n] and s_out [n / block] optional; blocks that are not a "
     "multiple of IsaKernels::act_align go to the referee",
     bits_contract(kNaN | kInf | kSub),
     "cpu/cpu_isa.h: act_quant_ref's operations in vectors (amax, ue8m0 scale, e4m3 rounding, bf16 of the "
     "product), each exactly rounded as in the referee: CpuIsa.ActQuantBitIdentical",
     "IsaKernels::act_quant (prep_act_quant in the GEMMs)",
     [](const IsaKernels* k, const AttentionKernels*) { return k && k->act_quant ? Impl::kIsa : Impl::kReferee; }},
    {Op::fp4_qdq_pow2, "fp4_qdq_pow2", "fp4_qdq_pow2_ref",
     "fp4_qdq_pow2_ref (reference numerics' indexer and compressed-KV QDQ, every backend)",
     "x [n] in place, n a multiple of block (32 in V4)", bits_contract(0),
     "one implementation, the referee (Fp4Qdq.PowerOfTwoScaleAndTies)", "none", referee_only},
    {Op::fp4_qdq_e4m3, "fp4_qdq_e4m3", "fp4_qdq_e4m3_ref",
     "fp4_qdq_e4m3_ref (V4.1 compressed KV in reference numerics, every backend)",
     "x [n] in place, n a multiple of block (16 in V4.1)", bits_contract(0),
     "one implementation, the referee (Fp4Qdq.E4m3ScaleBlocksAndTies)", "none", referee_only},
    {Op::hadamard, "hadamard", "hadamard_ref", "hadamard_ref (the indexer's rotation, every backend)",
     "x [n] in place, n a power of two", bits_contract(0),
     "one implementation, the referee (Hadamard.MatchesSylvesterMatrix)", "none", referee_only},
    {Op::sink_attention, "sink_attention", "sink_attention_ref", "Backend::sink_attention",
     "q [dim], keys [n_keys] each dim floats or null, out [dim]; n_keys >= 1, the first tile holding a valid key "
     "not preceded by an all-invalid tile (kernels.h); dims a multiple of AttentionKernels::dim_align take the "
     "ISA's kernels, others sink_attention_fast; writes out only",
     kAttention, kAttentionBasis, "AttentionKernels::sink_attention",
     [](const IsaKernels* k, const AttentionKernels* a) {
       return a && a->sink_attention ? Impl::kIsa : k ? Impl::kPortable : Impl::kReferee;
     }},
    {Op::sink_attention_heads, "sink_attention_heads", "sink_attention_ref, head by head",
     "Backend::sink_attention_heads (V4 attention: one KV head for every query head)",
     "q and out [n_heads, dim], sinks [n_heads], one key list as sink_attention; each head's out also equals, bit "
     "for bit, the same backend's sink_attention for that head (backend.h)",
     kAttention,
     "as sink_attention; the heads share each tile's keys in the same per-head arithmetic "
     "(cpu/attention_isa_impl.h): CpuAttention.HeadsTogetherEqualHeadsAlone",
     "AttentionKernels::sink_attention_heads",
     [](const IsaKernels* k, const AttentionKernels* a) {
       return a && a->sink_attention_heads ? Impl::kIsa : k ? Impl::kPortable : Impl::kReferee;
     }},
    {Op::index_scores, "index_scores", "index_scores_ref",
     "Backend::index_scores (the lightning indexer), Backend::index_scores_many (a prefill chunk's queries, each "
     "over its prefix of the keys)",
     "q [n_heads, dim], w [n_heads], keys [n_keys] of dim floats (none null), scores [n_keys]; any dim; more than "
     "512 heads (kIndexCombineMaxHeads) combine in the portable loop; writes scores only",
     bits_contract(kNaN | kInf),
     "in both numerics: the dots are exact fp32 sums where the values allow (FP4-QDQ'd q and keys: "
     "IsaKernels::index_dots_exact) and in-order double sums otherwise (index_dots), the referee's values either "
     "way, combined in its order (index_combine): CpuIsa.IndexScoresMatchReferee",
     "IsaKernels::index_dots, index_query_exact, index_dots_exact, index_combine",
     [](const IsaKernels* k, const AttentionKernels*) { return k && k->index_dots ? Impl::kIsa : Impl::kReferee; }},
    {Op::hc_expand, "hc_expand", "hc_expand_ref", "Backend::hc_expand (hc_post)",
     "o [dim], Rs [hc, dim], comb [hc, hc], post [hc], Y [hc, dim]; hc >= 1, columns [j0, j1) of [0, dim), any "
     "dim; writes Y's columns [j0, j1) only",
     bits_contract(kNaN),
     "the referee's operations per column, columns in vector lanes (fp32 products, the double sum in the same "
     "order): cpu/cpu_isa.h, CpuIsa.HcExpandMatchesReferee",
     "IsaKernels::hc_expand",
     [](const IsaKernels* k, const AttentionKernels*) { return k && k->hc_expand ? Impl::kIsa : Impl::kReferee; }},
    {Op::hc_collapse, "hc_collapse", "hc_collapse_ref", "Backend::hc_collapse (hc_pre)",
     "X [hc, dim], pre [hc], out [dim]; hc >= 1, any dim; writes out only", bits_contract(kNaN),
     "as hc_expand: cpu/cpu_isa.h, CpuIsa.HcExpandMatchesReferee", "IsaKernels::hc_collapse",
     [](const IsaKernels* k, const AttentionKernels*) { return k && k->hc_collapse ? Impl::kIsa : Impl::kReferee; }},
    {Op::swiglu, "swiglu", "swiglu_ref", "Backend::swiglu (the MoE experts)",
     "g, u, out [n]; n >= 1, any n (vector tails); limit <= 0: no clamp; weight null or one float; writes out only",
     {BitContract::kUlp, 1.0, 1.0, Magnitude::kNone, 1e-4, kNaN | kInf | kSub, 0, false},
     "the referee's arithmetic with exp in double vectors (exp_pd, cpu/cpu_kernels_isa_impl.h: within a couple of "
     "double ulps of libm's), so a result moves by one unit of fp32 (bf16 when rounded) only where the double "
     "quotient lies next to a rounding boundary; NaN, infinities and zeros exact: CpuIsa.SwigluMatchesReferee. "
     "Isa::Scalar runs the referee (its bits)",
     "IsaKernels::swiglu",
     [](const IsaKernels* k, const AttentionKernels*) { return k && k->swiglu ? Impl::kIsa : Impl::kReferee; }},
    // The light per-token ops (light_ops.h), each called by the model itself, no backend between.
    light_op(Op::rms_norm, "rms_norm", "rms_norm_ref",
             "rms_norm_ref directly, no backend (model/deepseek_v4/numerics.h: rms_norm, every norm of the forward "
             "pass)",
             "x, y [n] (y may alias x), w [n] or null; n >= 1; R: bf16 rounding (reference numerics) or none; writes "
             "y only",
             kNaN | kInf | kSub,
             "fp32 squares summed in double in index order, the mean rounded to fp32, rsqrt_f of it + eps, then "
             "w * (x * r) in fp32: LightOps.RmsNormMatchesLongDoubleFormula / RmsNormExactCases / RmsNormScaleBits / "
             "RmsNormNonFinite"),
    light_op(Op::head_rms_norm, "head_rms_norm", "head_rms_norm_ref",
             "head_rms_norm_ref directly, no backend (model/deepseek_v4/attention.cpp: V4's per-head query norm)",
             "x [heads, n] in place; heads, n >= 1; writes x only",
             kNaN | kInf | kSub,
             "kRmsLanes heads' sums side by side, each its own in-order double chain (one head's bits); with R every "
             "step at the reference's bf16 points (the squares, the mean, mean + eps, its rsqrt, the product), "
             "without R rms_norm_ref's bits: LightOps.HeadRmsNormBitsAndLongDouble / HeadRmsNormRoundingPoints"),
    light_op(Op::rope_angles, "rope_angles", "rope_angles_ref",
             "rope_angles_ref directly, no backend (model/deepseek_v4/rope.cpp: RopeTable::apply, cached per thread "
             "and position)",
             "inv_freq, cos_out, sin_out [half]; half >= 1, any pos >= 0 (float(pos): exact below 2^24); writes "
             "cos_out and sin_out only",
             0,
             "theta = float(pos) * inv_freq[i] in fp32, cos / sin in double rounded once: "
             "LightOps.RopeAnglesOfTheFp32Product. The inverse frequencies are the model's finite constants"),
    light_op(Op::rope_rotate, "rope_rotate", "rope_rotate_ref",
             "rope_rotate_ref directly, no backend (model/deepseek_v4/rope.cpp: RopeTable::apply, forward and "
             "inverse)",
             "pairs [2 * half] in place (interleaved: the rotated tail of a vector), cos_t, sin_t [half]; half >= 1; "
             "inverse negates sin; writes pairs only",
             kNaN | kInf | kSub,
             "u * c - v * s and u * s + v * c, fp32 products and sums (the build keeps -ffp-contract=off: no fused "
             "multiply-add), one R per component: LightOps.RopeRotationComponents / RopeQuarterTurnAndInverse"),
    light_op(Op::hc_mix_norm, "hc_mix_norm", "hc_mix_norm_ref",
             "hc_mix_norm_ref directly, no backend (model/deepseek_v4/hyper_connections.cpp: the mixer's norm, rows "
             "split over threads in multiples of kRmsLanes)",
             "x [rows, width], mix [rows, n_mix] scaled in place; rows, width, n_mix >= 1; writes mix only",
             kNaN | kInf | kSub,
             "rms_norm_ref's r of each row of x (fp32 squares, double sum in index order, kRmsLanes rows' chains "
             "side by side), one fp32 product per mix: LightOps.HcMixNormBitsAndLongDouble / "
             "HcMixNormExactCasesAndNonFinite"),
    light_op(Op::hc_coeffs, "hc_coeffs", "hc_coeffs_ref",
             "hc_coeffs_ref directly, no backend (model/deepseek_v4/hyper_connections.cpp: each site's pre / post / "
             "comb, and hc_head's pre alone)",
             "mix, base [(2 + hc) * hc] (hc values when post and comb are null), scale [3] (or 1); pre [hc], post "
             "[hc] or null, comb [hc, hc] or null; hc >= 1; comb's entries finite (hc_sinkhorn); writes pre, post "
             "and comb only",
             kSub,
             "fp32 affine maps of the mix, sigmoid_f (double, rounded once) + eps or * 2, comb through "
             "hc_sinkhorn_ref: LightOps.HcCoeffsBitsAndLongDouble / HcCoeffsSaturationAndOrder"),
    light_op(Op::hc_sinkhorn, "hc_sinkhorn", "hc_sinkhorn_ref",
             "hc_sinkhorn_ref directly, no backend (model/deepseek_v4/hyper_connections.cpp: the mHC mixing "
             "matrix)",
             "comb [n, n] in place, finite entries; n >= 1, iters >= 1 (0 acts as 1), the last pass over columns; "
             "writes comb only",
             kSub,
             "the row softmax with exp in double over the row's double sum, then rows / columns divided by their "
             "double sums (index order) rounded to fp32, + eps: LightOps.SinkhornBitsAndLongDouble / "
             "SinkhornExactCases"),
    light_op(Op::top_k, "top_k", "top_k_ref",
             "top_k_ref directly, no backend (model/deepseek_v4/top_k.h: the indexer's choice of compressed entries)",
             "score [n], out [k] (int64 indices, best first); k <= n, k <= 0 writes nothing; order, spare: n scratch "
             "slots each; writes out[0, k) (and the scratch) only",
             kNaN | kInf | kSub,
             "without a NaN a radix selection whose result is exactly std::partial_sort's with the comparator (larger "
             "first, ties and -0 / +0 to the lower index); with a NaN std::nth_element then std::sort with it, the "
             "standard library's order: LightOps.TopKEqualsRepeatedScans / TopKZerosTieAndKZeroWritesNothing / "
             "TopKWithNaNIsTheComparatorSort"),
    light_op(Op::router_scores, "router_scores", "router_scores_ref",
             "router_scores_ref directly, no backend (model/deepseek_v4/moe.cpp: the router, per token)",
             "logits, score [n]; n >= 1; tempered: logits / temp first (fp32); writes score only", kNaN | kInf | kSub,
             "std::sqrt (fp32, correctly rounded) of softplus_f (double, rounded once; its input above 20): "
             "LightOps.RouterScoresSqrtSoftplus"),
    light_op(Op::router_select, "router_select", "router_select_ref",
             "router_select_ref directly, no backend (model/deepseek_v4/moe.cpp: the biased choice)",
             "score, bias [n], experts [k] (int32, best first), k <= n; biased, order [n] scratch; writes "
             "experts[0, k) (and the scratch) only. No NaN score or bias: the comparator needs a total order",
             kInf | kSub,
             "biased = score + bias in fp32, std::partial_sort with the comparator (larger first, ties to the lower "
             "id): LightOps.RouterSelectByBiasedScore"),
    light_op(Op::router_weights, "router_weights", "router_weights_ref",
             "router_weights_ref directly, no backend (model/deepseek_v4/moe.cpp: the chosen experts' weights)",
             "score [> every chosen id], experts, weights [k]; k >= 1; renorm: / (float(double sum) + renorm_eps), "
             "then * route_scale (fp32); writes weights only",
             kNaN | kInf | kSub,
             "the chosen scores' double sum in order, rounded once, + eps; an fp32 division and product: "
             "LightOps.RouterWeights"),
    light_op(Op::compressor_pool, "compressor_pool", "compressor_pool_ref",
             "compressor_pool_ref directly, no backend (model/deepseek_v4/compressor.cpp: one compressed entry)",
             "kv, sc [n_slots] rows of >= width floats, z [width]; n_slots >= 1; e: n_slots scratch doubles; a "
             "score -inf weighs 0, a NaN or +inf score (or every score -inf) makes its column NaN; writes z (and "
             "e) only",
             kNaN | kInf | kSub,
             "the column's fp32 max (NaN skipped), exp in double, the double sum, fp32 weights and products summed "
             "in double in slot order, rounded once: LightOps.CompressorPoolBitsAndLongDouble / "
             "CompressorPoolExactCasesAndNonFinite"),
    light_op(Op::engram_update, "engram_update", "engram_update_ref",
             "engram_update_ref directly, no backend (model/deepseek_v4/engram.cpp: each stream of V4.1's Engram)",
             "h [d] in place, key, qk, value [d]; d >= 1; returns the gate; writes h only",
             kNaN | kInf | kSub,
             "rms_norm_ref's r of the stream and of the key, the triple products' double sum in index order, fp32 "
             "products after, the signed square root (floor 1e-6) and sigmoid_f, then R(h + gate * value): "
             "LightOps.EngramUpdateBitsAndLongDouble / EngramUpdateExactCasesAndNonFinite"),
};

static_assert(std::size(kCatalogue) == size_t(Op::count), "one OpSpec per Op");

constexpr bool catalogue_in_op_order() {
  for (size_t i = 0; i < std::size(kCatalogue); ++i)
    if (kCatalogue[i].op != Op(i)) return false;
  return true;
}
static_assert(catalogue_in_op_order(), "kCatalogue[i] must describe Op(i)");

}  // namespace

std::span<const OpSpec> op_catalogue() { return kCatalogue; }

const OpSpec& op_spec(Op op) { return kCatalogue[size_t(op)]; }

Impl implementation(Op op, Isa isa) {
  if (!isa_supported(isa)) return Impl::kUnavailable;
  return op_spec(op).impl(isa_kernel_table(isa), isa_attention_table(isa));
}

const char* impl_name(Impl impl) {
  switch (impl) {
    case Impl::kUnavailable: return "unavailable";
    case Impl::kReferee: return "referee";
    case Impl::kPortable: return "portable";
    case Impl::kIsa: return "isa";
  }
  return "?";
}

const char* bit_contract_name(BitContract bits) {
  switch (bits) {
    case BitContract::kBits: return "bits";
    case BitContract::kUlp: return "ulp";
    case BitContract::kFp32Reassoc: return "fp32-reassoc";
  }
  return "?";
}

}  // namespace deepinfer::kernels
