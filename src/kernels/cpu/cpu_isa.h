// Internal interface between the generic cpu backend driver (cpu_backend.cpp: threading,
// scratch, fallbacks) and the ISA-specific kernel files (cpu_kernels_avx2.cpp and the
// *_avx512.cpp files on x86-64, their table in cpu_kernels_avx512.cpp; cpu_kernels_neon.cpp,
// cpu_kernels_neon_bf16.cpp on aarch64), each compiled with its ISA flags.
//
// The ISA files see only plain structs and raw pointers: they must not instantiate C++
// library templates or call inline functions shared with generic code, because the linker
// could pick their ISA-compiled copy for a generic caller. Everything in them has internal
// linkage except the kernel table getters below and the entry points the AVX-512 files call
// in one another (avx512_kernels.h: names in cpu::avx512 that only those files use), and
// nothing runs at static-init time.
//
// Algorithms are written once, as templates over a vector-operations struct, and each ISA
// file instantiates them with its own struct: cpu_kernels_isa_impl.h (act-quant, swiglu, the
// hyper-connection mixes, the indexer's score combination; 8 or 16 floats), attention_isa_impl.h
// (sink attention's tiles), lane8_kernels_impl.h (over 8 floats: the AVX2 and NEON prefill
// microkernel, FP4 fp32 order, the indexer dots, dot_f64) and isa_common_impl.h (activation
// preparation, the FP8 order, the FP4 tables, the prefill tile loop). The structs are the only
// per-ISA layer: avx2_ops_impl.h (Vec8 over __m256), neon_ops_impl.h (Vec4, and Lane8 over two
// float32x4_t with AVX2's fused FMAs and reduction trees, so NEON gives AVX2's bits) and the
// AVX-512 Ops in cpu_kernels_avx512.cpp. Each ISA file includes the templates inside its own
// namespace with internal linkage, the way Highway instantiates per-target code: every copy is
// compiled with that file's flags and has a name no other file shares, so the rule above holds
// and the tests on either machine run the shared code. Those headers have no include guard
// (they are meant to be included once per ISA file, after its own includes). What stays per ISA
// is the innermost code: the weight decoders, the GEMV register blocking, the AVX-512 tiles
// (avx512_decoders.h, gemv_avx512.cpp, gemm_avx512.cpp) and the bf16 dot products.
#pragma once
#include <cstddef>
#include <cstdint>

#include "core/weight.h"

namespace deepinfer::kernels::cpu {

// One linear call y[M, N] = x[M, K] . W^T after the activations were prepared.
struct LinearCall {
  const WeightMatrix* W = nullptr;
  int64_t M = 0, N = 0, K = 0;
  float* y = nullptr;
  // Prepared activation rows, natural column order, zero beyond K up to the stride xs and
  // zero rows from M up to m_rows: xf fp32 always (in pair order for BF16 weights where the
  // kernels have one, IsaKernels::bf16_pair_order, and in FP4 fp32 order for FP4 weights,
  // IsaKernels::fp4_f32_order); xb the same values as bf16 bits, valid
  // only when use_bf16, and in FP4 lane order for FP4 weights where the kernels have one
  // (IsaKernels::fp4_lane_order).
  const float* xf = nullptr;
  const uint16_t* xb = nullptr;
  // bf16 mode over 3+ rows (IsaKernels::bf16_dp_order): xb as fp32 in dot-product order, each
  // 32 words of xb as its 16 odd words, then its 16 even ones. Null otherwise.
  const float* xd = nullptr;
  int64_t xs = 0;
  int64_t m_rows = 0;
  // Every x value is exactly a bf16 and 0 or of magnitude in [2^-40, 2^40]: with weights
  // (times their scales) in the same range, bf16 products are exact fp32 values, never
  // subnormal, so bf16 dot products equal fp32 FMA on the same terms up to summation order.
  // Decided per activation row by the driver (a call's rows all agree), and the kernels
  // decide per weight row, so each output's arithmetic depends on its own two rows only.
  bool use_bf16 = false;
  // x_range: the smallest nonzero and the largest finite |x| over the call's M rows, as float
  // bits (x_abs_lo is the bits of +inf when no value is nonzero and finite), set by
  // IsaKernels::call_setup where the kernels use them; otherwise each thread finds them.
  bool x_range = false;
  uint32_t x_abs_lo = 0, x_abs_hi = 0;
};

// Exact-product range of use_bf16 (biased fp32 exponents of 2^-40 and 2^40).
constexpr uint32_t kBf16RangeLoBits = uint32_t(127 - 40) << 23;
constexpr uint32_t kBf16RangeHiBits = uint32_t(127 + 40) << 23;
// The most indexer heads IsaKernels::index_combine takes.
constexpr int64_t kIndexCombineMaxHeads = 512;

// One indexer query prepared for IsaKernels::index_dots_exact (by index_query_exact).
// A dot of q's head h with a key is exact in fp32, whatever the order its products are
// summed in, when every product and partial sum is a multiple of the products' granularity
// 2^G below 2^T with T - G <= 24 and 2^G normal: G is the sum of the two vectors' lowest set
// bits' exponents, T exceeds the sum of their top exponents by 2 + ceil(log2(dim)).
// Exponents here are biased fp32 exponents over a vector's nonzero values; the kernels take
// vectors whose values are finite, normal (or zero) and of at most two significant bits (FP4
// values times powers of two), whose lowest set bit is then at most one below the least
// exponent, and refuse any other.
struct IndexQueryExact {
  // The heads in vector lanes: AVX-512, [ceil(dim / 2), heads_pad] bf16 pairs (columns 2i,
  // 2i + 1 of head h in word h of row i); AVX2, [dim, heads_pad] fp32 bits. Zero padding.
  const uint32_t* data = nullptr;
  int64_t heads_pad = 0;            // n_heads rounded up to whole groups of the kernel's
  int vectors = 0;                  // head vectors a group of heads fills
  bool ok = false;                  // every head's values of the kind the kernels take
  bool any = false;                 // some value nonzero
  int span = 0;                     // max over heads of (top exponent - lowest set bit's)
  int e_max = 0, low_min = 0;       // top exponent and lowest set bit's over all heads
};
// Words IsaKernels::index_query_exact may write (either layout).
inline int64_t index_query_exact_words(int64_t n_heads, int64_t dim) { return dim * ((n_heads + 63) / 64 * 64); }
// The longest head index_query_exact prepares (longer: ok is false).
constexpr int64_t kIndexExactMaxDim = 512;

// Independent FMA chains of IsaKernels::fma_chains (latency 4 x 2 ports, and some to spare).
constexpr int kFmaChains = 12;

// Columns per chunk of the FP4 lane order: word j of the chunk's vector v (32 bf16 words
// each) is the chunk's column 4j + v.
constexpr int64_t kFp4Chunk = 128;

// 1 / k! for k = 0..13: the Taylor series of the vector exp (swiglu; exp_pd in
// cpu_kernels_isa_impl.h).
constexpr double kExpInvFact[14] = {1.0,
                                    1.0,
                                    0.5,
                                    1.0 / 6.0,
                                    1.0 / 24.0,
                                    1.0 / 120.0,
                                    1.0 / 720.0,
                                    1.0 / 5040.0,
                                    1.0 / 40320.0,
                                    1.0 / 362880.0,
                                    1.0 / 3628800.0,
                                    1.0 / 39916800.0,
                                    1.0 / 479001600.0,
                                    1.0 / 6227020800.0};

// act-quant scales at or below this keep x_qdq = q * s inside that range (q in [2^-9, 448]).
constexpr float kMaxActScale = 2147483648.0f;  // 2^31

struct IsaKernels {
  const char* name;
  bool bf16;            // has bf16 dot-product kernels (uses xb when use_bf16)
  int64_t k_align;      // prepared row stride xs is a multiple of this
  int64_t m_align;      // GEMM path: m_rows = M rounded up to this
  int64_t gemv_max_m;   // M at or below: fused decode + dot per weight row; above: decoded tiles
  int64_t act_align;    // act_block must be a multiple of this for prep_act_quant
  int fp8_max_scale;    // FP8 weights with a larger scale byte go to Scalar (AVX2: 134)
  int64_t gemv_grain;   // row grain for splitting N over threads
  bool plain_m1_rowwise;  // F32 / BF16 GEMV at M = 1 walks one weight row at a time (grain 1)
  int64_t gemm_grain;
  // Float path: rows [m0, m1) of x[., K] into xf (and xb, as bf16 bits) with zero padding to
  // xs; bf16_ok[m] = 1 when every value of row m qualifies for use_bf16, else 0.
  void (*prep_float)(const float* x, int64_t K, int64_t m0, int64_t m1, int64_t xs, float* xf, uint16_t* xb,
                     uint8_t* bf16_ok);
  // Act-quant path: rows [m0, m1) act-quantised (act_quant_ref semantics, bit for bit) with
  // blocks of `block` (a multiple of act_align dividing K); xf/xb receive x_qdq = q * s;
  // max_scale[m] = the largest block scale of row m (+inf possible), NaN when the row holds a
  // NaN or an infinity (the driver sends such rows to the portable kernels).
  void (*prep_act_quant)(const float* x, int64_t K, int64_t block, int64_t m0, int64_t m1, int64_t xs, float* xf,
                         uint16_t* xb, float* max_scale);
  // act_quant_ref's interface for one vector (block a multiple of act_align).
  void (*act_quant)(float* x, int64_t n, int64_t block, float* q_out, float* s_out);
  // Scratch bytes one thread needs for rows().
  size_t (*scratch_bytes)(const LinearCall& c);
  // y rows [n0, n1) (columns n of y) of the call; scratch is 64-byte aligned.
  void (*rows)(const LinearCall& c, int64_t n0, int64_t n1, void* scratch);
  // Every query head against every key, each dot summed in double over c = 0 .. dim - 1 in
  // order, as index_scores_ref does (a float product is exact in double, so an FMA step
  // equals its multiply-then-add): out[s * n_heads + h] = sum_c qT[c * n_heads + h] * keys[s][c],
  // qT the heads transposed [dim, n_heads] in double. The heads sit in vector lanes, so no
  // horizontal sums are needed and several keys run side by side.
  void (*index_dots)(const double* qT, int64_t n_heads, int64_t dim, const float* const* keys, int64_t n_keys,
                     double* out);
  // Null, or: the kernels multiply FP4 weights in bf16 mode in lane order (kFp4Chunk), so
  // the driver pads xs to a multiple of kFp4Chunk and rearranges rows [m0, m1) of xb with this.
  void (*fp4_lane_order)(uint16_t* xb, int64_t m0, int64_t m1, int64_t xs) = nullptr;
  // Null, or: the kernels multiply BF16 weights in fp32 mode in pair order (each 32 columns:
  // the 16 even ones, then the 16 odd ones, which a shift and a mask make of the bf16 words
  // without shuffles), so the driver rearranges rows [m0, m1) of xf (stride xs, a multiple
  // of 32) with this for BF16 weights.
  void (*bf16_pair_order)(float* xf, int64_t m0, int64_t m1, int64_t xs) = nullptr;
  // Null, or: the kernels multiply FP4 weights in fp32 mode in their FP4 fp32 order (AVX-512:
  // each kFp4Chunk columns as eight vectors, lane i of vector j = column 8i + j, one shift and
  // one lookup per vector; AVX2: each 16 columns as their even ones, then their odd ones), so
  // the driver rearranges rows [m0, m1) of xf (stride a multiple of kFp4Chunk) with this for
  // FP4 weights.
  void (*fp4_f32_order)(float* xf, int64_t m0, int64_t m1, int64_t xs) = nullptr;
  // Null, or: the kernels multiply FP8 weights in their FP8 fp32 order (AVX2: each 32 columns
  // as four vectors, vector j holding columns j, j + 4, ..., j + 28), so the driver rearranges
  // rows [m0, m1) of xf (stride a multiple of 32) with this for FP8 weights.
  void (*fp8_f32_order)(float* xf, int64_t m0, int64_t m1, int64_t xs) = nullptr;
  // Null, or: the tiled products of bf16 mode run as fp32 FMAs in dot-product order (a bf16
  // dot product instruction is two FMAs, the odd column's first, so the bits are the same;
  // FMAs issue on twice the ports), so the driver fills LinearCall::xd from rows [m0, m1) of
  // xb with this for calls of 3 or more rows in bf16 mode.
  void (*bf16_dp_order)(const uint16_t* xb, float* xd, int64_t m0, int64_t m1, int64_t xs) = nullptr;
  // Null, or: query q [n_heads, dim] as IndexQueryExact into data
  // (index_query_exact_words of them) and *info.
  void (*index_query_exact)(const float* q, int64_t n_heads, int64_t dim, uint32_t* data,
                            IndexQueryExact* info) = nullptr;
  // Null, or: for each key whose dots with every head of q are exact in fp32
  // (IndexQueryExact), those dots as index_dots writes them (an exact sum is the in-order
  // double sum too) and exact[s] = 1; otherwise exact[s] = 0 and the key's dots undefined.
  // The products run on bf16 dot-product instructions (AVX-512) or fp32 FMAs (AVX2).
  void (*index_dots_exact)(const IndexQueryExact& q, int64_t n_heads, int64_t dim, const float* const* keys,
                           int64_t n_keys, double* out, uint8_t* exact) = nullptr;
  // Null, or the indexer's scores from index_dots' output for n_keys keys, bit for bit as
  // index_scores_ref combines the dots (n_heads <= kIndexCombineMaxHeads).
  void (*index_combine)(const double* dots, const float* w, int64_t n_heads, int64_t n_keys, bool round,
                        float* scores) = nullptr;
  // Null, or hc_expand_ref bit for bit.
  void (*hc_expand)(const float* o, const float* Rs, const float* comb, const float* post, int64_t hc, int64_t dim,
                    bool round_bf16, float* Y, int64_t j0, int64_t j1) = nullptr;
  // Null, or hc_collapse_ref bit for bit.
  void (*hc_collapse)(const float* X, const float* pre, int64_t hc, int64_t dim, bool round_bf16,
                      float* out) = nullptr;
  // Null, or sum_i a[i] * b[i] in double over n floats (products exact in double), several
  // accumulators in vector lanes: linear_f32_exact's dot, up to double summation order.
  double (*dot_f64)(const float* a, const float* b, int64_t n) = nullptr;
  // Null, or dot_f64(a, b + r * ldb, n) into out[r] for r < 4, bit for bit: a is converted
  // once for the four rows, whose accumulator chains run side by side.
  void (*dot_f64_4)(const float* a, const float* b, int64_t ldb, int64_t n, double* out) = nullptr;
  // Null, or swiglu_ref with exp in vectors (within one unit in the last place of it).
  void (*swiglu)(const float* g, const float* u, int64_t n, float limit, const float* weight, bool round_bf16,
                 float* out) = nullptr;
  // Null, or: what the kernels compute once per call from its prepared rows, before the rows
  // are split over threads (AVX2: LinearCall's x range, for FP8 calls of one or two rows).
  void (*call_setup)(LinearCall& c) = nullptr;
  // kFmaChains chains x <- x * 0.99999994 + 0.25 of `iters` fp32 vector FMAs from x0 + j / 1024
  // (chain j, every lane); the lanes' final values summed in double; *macs = the
  // multiply-adds done. What the arithmetic peak is measured with (Backend::fma_peak_macs_per_s).
  double (*fma_chains)(int64_t iters, float x0, int64_t* macs) = nullptr;
  // Null, or the same with bf16 dot-product instructions (32 multiply-adds each): what the
  // bf16 mode's products can reach (Backend::bf16_dot_peak_macs_per_s).
  double (*bf16_dot_chains)(int64_t iters, float x0, int64_t* macs) = nullptr;
};

// Defined in the ISA files (each compiled on its own architecture only: x86-64 the AVX ones,
// aarch64 the NEON ones); call only after checking the CPU supports the ISA.
const IsaKernels& avx2_kernels();
const IsaKernels& avx512_kernels();
// neon_kernels() (cpu_kernels_neon.cpp): every output the bits of avx2_kernels()' (the same
// operation sequence in pairs of 4-lane vectors). neon_bf16_kernels() (its bf16 mode in
// cpu_kernels_neon_bf16.cpp, the rest in cpu_kernels_neon.cpp): the bits of avx512_kernels()'
// in both modes (bf16 mode: BFMLALT then BFMLALB per pair of columns, the two FMAs of
// vdpbf16ps; fp32 mode: 16 lanes as four registers).
const IsaKernels& neon_kernels();
const IsaKernels& neon_bf16_kernels();
// avx512_kernels() with bf16 mode's prefill tiles on vdpbf16ps (dp_tiles) or on FMAs in
// dot-product order, whichever this CPU runs faster being what avx512_kernels() picks; the
// same bits either way (for the tests and benchmarks of both).
const IsaKernels& avx512_kernels_with_tiles(bool dp_tiles);

}  // namespace deepinfer::kernels::cpu
