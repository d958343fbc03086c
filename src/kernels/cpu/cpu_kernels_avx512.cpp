// AVX-512 kernels (F/BW/VL/DQ + BF16 + VBMI), compiled with those ISA flags and called only
// after the dispatcher's CPU check. See cpu_isa.h for the rules of these files (no templates or
// inline functions shared with generic or other-ISA files, no static initialisers that run
// code). This file holds the entry points: the kernel tables (avx512_kernels()) with the CPU
// checks that choose one (bf16_dot_is_two_fmas, dp_tiles_are_faster and the peak chains they
// time), the row dispatch of a linear call, and the algorithms both ISAs share,
// cpu_kernels_isa_impl.h's, instantiated over vectors of 16 ("shared algorithms"). The
// tuned loops are in the other AVX-512 files, all compiled with the same flags:
//   avx512_decoders.h        weight decoders, tables, helpers and the arithmetic every output
//                            runs (the bit contract), included by the files below
//   avx512_kernels.h         what those files export to this one (whole calls or row ranges)
//   gemv_avx512.cpp          decode (M <= 8): the fused decode + dot GEMV, the fp32-mode rows
//   gemm_avx512.cpp          prefill: tiles decoded once into L2, the microkernels
//   activations_avx512.cpp   activation prep, row orders, indexer dots, dot_f64
//   bf16_gemv_avx512.cpp     the BF16 GEMV (the output head)
//   fp4_multirow_avx512.cpp  FP4 in bf16 mode over 3-16 rows
//   avx512_common.h          the helpers those two share with the others (reduce4, ...)
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <time.h>

#include "kernels/cpu/avx512_decoders.h"
#include "kernels/cpu/avx512_kernels.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/fp4_multirow.h"

namespace deepinfer::kernels::cpu::avx512 {

namespace {

// ------------------------------------------------------------------------------ entry points

// Fused decode + dot up to 8 activation rows (decode batches, speculative verify chunks):
// each weight vector is decoded once for all rows. With weights prefetched into L2 this beats
// decoding a tile into L2 and running the microkernel (bench_kernels, cold weights, M = 6:
// FP8 7.0 -> 10.6 GB/s, FP4 5.5 -> 7.1, the BF16 head 16.6 -> 25.8; M = 3: 9.0 -> 15.9,
// 7.9 -> 12.4, 16.6 -> 27.8). Both paths give every row the same bits (RowInvariance).
constexpr int64_t kGemvMaxM = 8;

// FP4 in bf16 mode over kFp4MultiRowMinM..kFp4MultiRowMaxM rows: fp4_multirow_avx512.cpp, each
// code chunk decoded once for every row (the same bits); rows out of range come back to
// gemv_f32_row (gemv_avx512.cpp). It runs on vdpbf16ps, as the GEMV does, so where the FMA
// tiles are the faster ones (dp_tiles false) the calls above kGemvMaxM rows keep them.
bool fp4_multirow(const LinearCall& c, bool dp_tiles) {
  return c.W->format == WeightFormat::FP4_BLOCK && c.use_bf16 && c.M >= kFp4MultiRowMinM &&
         c.M <= (dp_tiles ? kFp4MultiRowMaxM : kGemvMaxM);
}

// Each path in its own file, for the call's whole row range: FP4 over a few rows, the GEMV
// (M <= kGemvMaxM; BF16 the head's own), else the tiles.
template <bool kDpTiles>
void rows(const LinearCall& c, int64_t n0, int64_t n1, void* scratch) {
  if (fp4_multirow(c, kDpTiles)) return fp4_multirow_avx512(c, n0, n1, scratch, gemv_f32_row);
  if (c.M <= kGemvMaxM) return gemv(c, n0, n1);
  gemm(c, n0, n1, scratch, kDpTiles);
}

// (Both kernel tables share it: enough for the tiles and for fp4_multirow_avx512.)
size_t scratch_bytes(const LinearCall& c) {
  const size_t tiles = c.M <= kGemvMaxM ? 0 : gemm_scratch(c);
  const size_t fp4 = fp4_multirow(c, true) ? fp4_multirow_scratch_avx512(c) : 0;
  return fp4 > tiles ? fp4 : tiles;
}

// ------------------------------------------------------------------------------ shared algorithms
// act-quant, swiglu, the hyper-connection mixes and the indexer's score combination are
// cpu_kernels_isa_impl.h's templates, instantiated here over vectors of 16 in this file's
// unnamed namespace (cpu_isa.h: no code shared with other files). A partial vector is a lane
// mask.

struct Ops {
  using F = __m512;
  using I = __m512i;
  using D = __m512d;
  static constexpr int64_t kLanes = 16;
  static constexpr bool kBf16 = true;

  static DI_INLINE F zero() { return _mm512_setzero_ps(); }
  static DI_INLINE F set1(float f) { return _mm512_set1_ps(f); }
  static DI_INLINE F load(const float* p) { return _mm512_loadu_ps(p); }
  static DI_INLINE void store(float* p, F v) { _mm512_storeu_ps(p, v); }
  static DI_INLINE F add(F a, F b) { return _mm512_add_ps(a, b); }
  static DI_INLINE F sub(F a, F b) { return _mm512_sub_ps(a, b); }
  static DI_INLINE F mul(F a, F b) { return _mm512_mul_ps(a, b); }
  static DI_INLINE F fmadd(F a, F b, F c) { return _mm512_fmadd_ps(a, b, c); }
  static DI_INLINE F min(F a, F b) { return _mm512_min_ps(a, b); }
  static DI_INLINE F max(F a, F b) { return _mm512_max_ps(a, b); }
  static DI_INLINE F abs(F v) {
    return _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(v), _mm512_set1_epi32(0x7fffffff)));
  }
  static DI_INLINE float hmax(F v) { return _mm512_reduce_max_ps(v); }
  static DI_INLINE float first(F v) { return _mm512_cvtss_f32(v); }

  static DI_INLINE I bits(F v) { return _mm512_castps_si512(v); }
  static DI_INLINE F from_bits(I v) { return _mm512_castsi512_ps(v); }
  static DI_INLINE I set1_i(int v) { return _mm512_set1_epi32(v); }
  static DI_INLINE I and_i(I a, I b) { return _mm512_and_si512(a, b); }
  static DI_INLINE I or_i(I a, I b) { return _mm512_or_si512(a, b); }
  static DI_INLINE I andnot_i(I a, I b) { return _mm512_andnot_si512(a, b); }
  static DI_INLINE I add_i32(I a, I b) { return _mm512_add_epi32(a, b); }
  static DI_INLINE I max_i32(I a, I b) { return _mm512_max_epi32(a, b); }
  template <int N>
  static DI_INLINE I shr_i32(I v) { return _mm512_srli_epi32(v, N); }
  template <int N>
  static DI_INLINE I shl_i32(I v) { return _mm512_slli_epi32(v, N); }
  static DI_INLINE I where_nan(F h, I a, I b) {
    return _mm512_mask_mov_epi32(b, _mm512_cmp_ps_mask(h, h, _CMP_UNORD_Q), a);
  }
  static DI_INLINE void store_bf16_bits(uint16_t* p, I v) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm512_cvtepi32_epi16(_mm512_srli_epi32(v, 16)));
  }

  static DI_INLINE D zero_d() { return _mm512_setzero_pd(); }
  static DI_INLINE D set1_d(double v) { return _mm512_set1_pd(v); }
  static DI_INLINE D add_d(D a, D b) { return _mm512_add_pd(a, b); }
  static DI_INLINE D sub_d(D a, D b) { return _mm512_sub_pd(a, b); }
  static DI_INLINE D mul_d(D a, D b) { return _mm512_mul_pd(a, b); }
  static DI_INLINE D div_d(D a, D b) { return _mm512_div_pd(a, b); }
  static DI_INLINE D min_d(D a, D b) { return _mm512_min_pd(a, b); }
  static DI_INLINE D max_d(D a, D b) { return _mm512_max_pd(a, b); }
  static DI_INLINE D fmadd_d(D a, D b, D c) { return _mm512_fmadd_pd(a, b, c); }
  static DI_INLINE D fnmadd_d(D a, D b, D c) { return _mm512_fnmadd_pd(a, b, c); }
  static DI_INLINE D round_d(D v) { return _mm512_roundscale_pd(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  static DI_INLINE void store_d(double* p, D v) { _mm512_store_pd(p, v); }
  static DI_INLINE D times_pow2_d(D p, D n) { return _mm512_scalef_pd(p, n); }  // vscalefpd
  static DI_INLINE void widen(F v, D& lo, D& hi) {
    lo = _mm512_cvtps_pd(_mm512_castps512_ps256(v));
    hi = _mm512_cvtps_pd(_mm512_extractf32x8_ps(v, 1));
  }
  static DI_INLINE F narrow(D lo, D hi) {
    return _mm512_insertf32x8(_mm512_castps256_ps512(_mm512_cvtpd_ps(lo)), _mm512_cvtpd_ps(hi), 1);
  }

  using Part = __mmask16;  // the lanes in use
  template <class Body>
  static DI_INLINE void for_parts(int64_t n, Body&& body) {
    for (int64_t i = 0; i < n; i += 16) body(i, mask16(n - i));
  }
  static DI_INLINE F load_part(const float* p, Part m) { return _mm512_maskz_loadu_ps(m, p); }
  static DI_INLINE void store_part(float* p, Part m, F v) { _mm512_mask_storeu_ps(p, m, v); }
  static DI_INLINE F load_narrowed(const double* p, Part m) {
    return narrow(_mm512_maskz_loadu_pd(__mmask8(m), p), _mm512_maskz_loadu_pd(__mmask8(m >> 8), p + 8));
  }
};

#include "kernels/cpu/cpu_kernels_isa_impl.h"

// ------------------------------------------------------------------------------ peak chains

// IsaKernels::bf16_dot_chains: chain j starts at x0 + j / 1024 in every lane and adds
// 0.5 * 2^-10 twice a step (one vdpbf16ps: a pair of exact products).
double bf16_dot_chains(int64_t iters, float x0, int64_t* macs) {
  const __m512i half = _mm512_set1_epi16(0x3f00), tiny = _mm512_set1_epi16(0x3a80);  // bf16 0.5, 2^-10
  __m512 a[kFmaChains];
  for (int j = 0; j < kFmaChains; ++j) a[j] = _mm512_set1_ps(x0 + float(j) / 1024.0f);
  for (int64_t i = 0; i < iters; ++i)
    for (int j = 0; j < kFmaChains; ++j) a[j] = dp(a[j], half, tiny);
  double total = 0;
  alignas(64) float lanes[16];
  for (int j = 0; j < kFmaChains; ++j) {
    _mm512_store_ps(lanes, a[j]);
    for (int l = 0; l < 16; ++l) total += double(lanes[l]);
  }
  *macs = iters * kFmaChains * 32;
  return total;
}

// ------------------------------------------------------------------------------ kernel tables

constexpr IsaKernels kKernels = {
    .name = "avx512",
    .bf16 = true,
    .k_align = 64,
    .m_align = kMR,
    .gemv_max_m = kGemvMaxM,
    .act_align = 16,
    .fp8_max_scale = 255,
    .gemv_grain = 8,
    .plain_m1_rowwise = true,
    .gemm_grain = kNR,
    .prep_float = prep_float,
    .prep_act_quant = prep_act_quant<Ops>,
    .act_quant = act_quant<Ops>,
    .scratch_bytes = scratch_bytes,
    .rows = rows<false>,
    .index_dots = index_dots,
    .fp4_lane_order = fp4_lane_order,
    .bf16_pair_order = bf16_pair_order,
    .fp4_f32_order = fp4_f32_order,
    .bf16_dp_order = bf16_dp_order,
    .index_query_exact = index_query_exact,
    .index_dots_exact = index_dots_exact,
    .index_combine = index_combine<Ops>,
    .hc_expand = hc_expand<Ops>,
    .hc_collapse = hc_collapse<Ops>,
    .dot_f64 = dot_f64,
    .dot_f64_4 = dot_f64_4,
    .swiglu = swiglu<Ops>,
    .fma_chains = fma_chains<Ops>,
    .bf16_dot_chains = bf16_dot_chains,
};

// The same without bf16 mode (fp32 mode for every row), for a CPU whose vdpbf16ps does not
// round like two FMAs: the tiled products could not give the GEMV's bits in bf16 mode.
constexpr IsaKernels without_bf16(IsaKernels k) {
  k.bf16 = false;
  k.bf16_dp_order = nullptr;
  return k;
}
constexpr IsaKernels kKernelsNoBf16 = without_bf16(kKernels);

// bf16 mode's tiles on vdpbf16ps, and no xd: the GEMV of 3-8 rows runs vdpbf16ps too.
constexpr IsaKernels with_dp_tiles(IsaKernels k) {
  k.rows = rows<true>;
  k.bf16_dp_order = nullptr;
  return k;
}
constexpr IsaKernels kKernelsDpTiles = with_dp_tiles(kKernels);

// Thread CPU seconds of `f` (best of three runs: an interruption only adds time).
template <class F>
double best_cpu_seconds(F f) {
  double best = 1e30;
  for (int i = 0; i < 3; ++i) {
    timespec t0, t1;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t0);
    f();
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t1);
    const double seconds = double(t1.tv_sec - t0.tv_sec) + 1e-9 * double(t1.tv_nsec - t0.tv_nsec);
    best = seconds < best ? seconds : best;
  }
  return best;
}

// Whether vdpbf16ps does its 32 multiply-adds in clearly less time than two FMAs do (AMD Zen 4:
// one instruction a cycle, like an FMA, so twice the rate; some Intel cores: half an FMA's
// rate, the same multiply-adds), timed on ~1 ms of each (the chains the peaks are measured with).
bool dp_tiles_are_faster() {
  constexpr int64_t kSteps = int64_t(1) << 15;
  volatile double sink = 0;
  int64_t macs = 0;
  const double fma = best_cpu_seconds([&] { sink = sink + fma_chains<Ops>(kSteps, 1.0f, &macs); });
  const double dot = best_cpu_seconds([&] { sink = sink + bf16_dot_chains(kSteps, 1.0f, &macs); });
  // One vdpbf16ps stands for two FMAs: faster when it takes under 0.8 of their time.
  return dot < 0.8 * 2.0 * fma;
}

// Whether vdpbf16ps gives fma(even, fma(odd, acc)) on this CPU, over normal values of mixed
// magnitudes (a fixed pseudo-random set; 2048 lanes).
bool bf16_dot_is_two_fmas() {
  uint32_t state = 12345;
  auto next = [&state] {
    state = state * 1664525u + 1013904223u;
    return state;
  };
  // A normal fp32 with a random mantissa, sign and exponent in [2^-20, 2^20), as bf16 or not.
  auto value = [&](bool bf16) {
    uint32_t b = (next() & 0x807fffffu) | (uint32_t(127 - 20 + int(next() % 40)) << 23);
    if (bf16) b &= 0xffff0000u;
    return f32_of(b);
  };
  for (int round = 0; round < 128; ++round) {
    alignas(64) float acc[16], out[16];
    alignas(64) uint16_t a[32], b[32];
    for (int i = 0; i < 16; ++i) acc[i] = value(false);
    for (int i = 0; i < 32; ++i) {
      const float fa = value(true), fb = value(true);
      uint32_t ua, ub;
      std::memcpy(&ua, &fa, 4);
      std::memcpy(&ub, &fb, 4);
      a[i] = uint16_t(ua >> 16);
      b[i] = uint16_t(ub >> 16);
    }
    _mm512_store_ps(out, dp(_mm512_load_ps(acc), load_i(a), load_i(b)));
    for (int i = 0; i < 16; ++i) {
      auto f = [](uint16_t h) { return f32_of(uint32_t(h) << 16); };
      const float want = __builtin_fmaf(f(a[2 * i]), f(b[2 * i]), __builtin_fmaf(f(a[2 * i + 1]), f(b[2 * i + 1]), acc[i]));
      if (std::memcmp(&want, &out[i], 4) != 0) return false;
    }
  }
  return true;
}

}  // namespace

}  // namespace deepinfer::kernels::cpu::avx512

namespace deepinfer::kernels::cpu {

const IsaKernels& avx512_kernels() {
  static const bool two_fmas = avx512::bf16_dot_is_two_fmas();
  static const bool dp_tiles = two_fmas && avx512::dp_tiles_are_faster();
  return !two_fmas ? avx512::kKernelsNoBf16 : dp_tiles ? avx512::kKernelsDpTiles : avx512::kKernels;
}

const IsaKernels& avx512_kernels_with_tiles(bool dp_tiles) {
  static const bool two_fmas = avx512::bf16_dot_is_two_fmas();
  return !two_fmas ? avx512::kKernelsNoBf16 : dp_tiles ? avx512::kKernelsDpTiles : avx512::kKernels;
}

}  // namespace deepinfer::kernels::cpu
