// AVX-512 prefill path (more than 8 activation rows): weight rows decoded once into an
// L2-resident tile, then multiplied with every activation row by register-blocked
// microkernels. Compiled with AVX-512 flags; the decoders and the arithmetic are
// avx512_decoders.h's, so every output has the bits of the GEMV's (RowInvariance); the
// exported entry points are avx512_kernels.h's, the rules cpu_isa.h's.
//
// Prefill decodes a tile of weight rows once into L2 and runs a 6 x 4 register-blocked fp32
// FMA microkernel over all activation rows, K in L1-sized blocks with the vector partial sums
// carried between blocks. In bf16 mode the tile is decoded to bf16 (straight from the codes,
// the block scale added to the exponent; FP4: the same for the vdpbf16ps tiles, the bare codes
// and each chunk's scales for the FMA tiles), then
// either multiplied with vdpbf16ps as it is, or widened into dot-product order with x alike
// and multiplied with FMAs, which give the instruction's bits (see bf16_to_dp). Which is
// faster depends on the CPU (dp_tiles_are_faster, measured once): on the Intel cores this was
// tuned on vdpbf16ps issued at half the rate of two FMAs (1.9 G/s against 7.5 G/s FMAs on one
// core); AMD Zen 4 issues one a cycle like an FMA, so it does twice the multiply-adds
// (bench_kernels, 1 thread, CPU time, act-quant FP8 2048 x 2048 M = 32: 3.9 -> 2.2 ms; FP4
// 1024 x 2048 M = 32: 2.0 -> 1.2 ms; M = 128 13.3 -> 7.6 and 7.5 -> 4.6 ms). The vdpbf16ps
// tiles run weight-stationary over all of K with every accumulator in registers (micro_dp,
// micro_parts_dp): four tile rows sit in L1 while x streams past; 1.15-1.3x over the 6 x 4
// kernel whose accumulators went through memory per K block (FP4: per chunk).
#include <type_traits>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <stdexcept>

#include "kernels/cpu/avx512_decoders.h"
#include "kernels/cpu/avx512_kernels.h"

namespace deepinfer::kernels::cpu::avx512 {

namespace {

// Exact fp32 weights of row n, zero to Kp (the values the fp32 mode multiplies).
template <class D>
void decode_row_f32(const LinearCall& c, const D& d, int64_t n, float* dst, int64_t Kp) {
  const typename D::Row r = d.row(n);
  const int64_t K = c.K;
  // BF16 pair order and FP4 fp32 order spread a chunk's columns over all its vectors (zeros
  // beyond K): whole chunks.
  constexpr bool pairs = requires { D::F32_SPREAD; };
  for (int64_t k = 0; k < K; k += D::CH) {
    const int64_t nv = min64(D::CH, K - k);
    __m512 w[D::NF];
    d.f32(r, k, nv, w);
    for (int v = 0; v < D::NF; ++v)
      _mm512_mask_storeu_ps(dst + k + 16 * v, pairs ? __mmask16(0xffff) : mask16(nv - 16 * v), w[v]);
  }
  for (int64_t k = pairs ? round_up(K, D::CH) : K; k < Kp; ++k) dst[k] = 0.0f;
}

// Exact bf16 weights of row n, zero to Kp; false if the row is not safe (then the row is
// left for the fp32 mode).
template <class D>
bool decode_row_b16(const LinearCall& c, const D& d, int64_t n, uint16_t* dst, int64_t Kp) {
  typename D::Row r = d.row(n);
  if (!d.safe(r)) return false;
  const int64_t K = c.K;
  __mmask32 bad = 0;
  for (int64_t k = 0; k < K; k += D::CH) {
    const int64_t nv = min64(D::CH, K - k);
    __m512i w[D::NB > 0 ? D::NB : 1];
    d.b16(r, k, nv, w);
    for (int v = 0; v < D::NB; ++v) {
      if constexpr (D::CHECK) bad |= b16_out_of_range(w[v]);
      _mm512_mask_storeu_epi16(dst + k + 32 * v, mask32(nv - 32 * v), w[v]);
    }
  }
  for (int64_t k = K; k < Kp; ++k) dst[k] = 0;
  return bad == 0;
}

// Partial-sum decoders (FP4): the codes of row n in lane order, zero to Kp, and the scale
// vector of each of its Kp / CH chunks (as the GEMV uses them); false if the row is not safe.
template <class D>
bool decode_row_parts(const LinearCall& c, const D& d, int64_t n, uint16_t* dst, __m512* scales, int64_t Kp) {
  typename D::Row r = d.row(n);
  if (!d.safe(r)) return false;
  const int64_t K = c.K;
  d.prep_scales(r, static_cast<float*>(__builtin_alloca(size_t(D::scale_floats(K)) * sizeof(float))));
  for (int64_t k = 0; k < Kp; k += D::CH) {
    __m512i w[D::NB];
    if (k < K)
      d.b16_codes(r, k, min64(D::CH, K - k), w);
    else
      for (int v = 0; v < D::NB; ++v) w[v] = _mm512_setzero_si512();
    for (int v = 0; v < D::NB; ++v) _mm512_storeu_si512(dst + k + 32 * v, w[v]);
    scales[k / D::CH] = d.chunk_scales(r, k);
  }
  return true;
}

// FP4 rows for the vdpbf16ps tiles: each code times its block scale, in lane order, zero to
// Kp; false if the row is not safe. A safe row's scales keep every nonzero code * scale in
// the exact-product range (kScaleLo / kScaleHi), so adding the scale's exponent to the code's
// bf16 word (zeros left alone) is exact, and so is every dot product over these words: with x
// in that range too, the products and the sums never reach a subnormal or overflow, so each
// partial sum equals the unscaled one times its power of two, rounding for rounding. Hence
// acc + part (scaled words) has the bits of fma(part (codes), scale, acc), the sequence the
// GEMV runs, and the tile saves that multiply on the FMA ports.
bool decode_row_fp4_scaled(const LinearCall& c, const Fp4Dec& d, int64_t n, uint16_t* dst, int64_t Kp) {
  const Fp4Dec::Row r = d.row(n);
  if (!d.safe(r)) return false;
  const int64_t K = c.K;
  const __m512i blk8 = load_i(kT.idx_blk8), mag = _mm512_set1_epi16(0x7fff);
  for (int64_t k = 0; k < Kp; k += kFp4Chunk) {
    __m512i w[Fp4Dec::NB];
    if (k < K) {
      d.b16_codes(r, k, min64(kFp4Chunk, K - k), w);
      // Word j lies in block k / 32 + j / 8 of the row (blocks beyond K: zero codes).
      const int64_t nb = min64(4, (K - k) / 32);
      const __m128i sb = _mm_maskz_loadu_epi8(__mmask16((1u << nb) - 1), r.s + k / 32);
      const __m512i e = _mm512_slli_epi16(_mm512_sub_epi16(_mm512_cvtepu8_epi16(_mm256_castsi128_si256(sb)),
                                                           _mm512_set1_epi16(127)),
                                          7);
      const __m512i add = _mm512_permutexvar_epi16(blk8, e);
      for (int v = 0; v < Fp4Dec::NB; ++v)
        w[v] = _mm512_mask_add_epi16(w[v], _mm512_test_epi16_mask(w[v], mag), w[v], add);
    } else {
      for (int v = 0; v < Fp4Dec::NB; ++v) w[v] = _mm512_setzero_si512();
    }
    for (int v = 0; v < Fp4Dec::NB; ++v) _mm512_storeu_si512(dst + k + 32 * v, w[v]);
  }
  return true;
}

// The products of the FMA tile microkernels, one vector of columns at a time: fp32 FMAs (16
// columns: the fp32 mode's products, and bf16 mode's in dot-product order, see bf16_to_dp).
// The vdpbf16ps tiles (micro_dp, micro_parts_dp below) take kDotCols bf16 words a step, the
// bits of two of those FMAs.
struct FmaStep {
  using T = float;
  using V = __m512;
  static constexpr int64_t kCols = 16;
  static DI_INLINE V load(const T* p) { return _mm512_loadu_ps(p); }
  static DI_INLINE __m512 madd(__m512 acc, V x, V w) { return _mm512_fmadd_ps(x, w, acc); }
};
constexpr int64_t kDotCols = 32;

// acc[MR][NR] (vector partial sums, kept in memory between K blocks) += x[MR rows] . w[NR
// rows] over columns [k0, k1): the same per-lane sequence as one pass over K.
template <class S, int MR, int NR>
void micro(const typename S::T* x, int64_t xs, const typename S::T* w, int64_t ws, int64_t k0, int64_t k1,
           __m512* mem, bool first) {
  __m512 acc[MR][NR];
  for (int m = 0; m < MR; ++m)
    for (int r = 0; r < NR; ++r) acc[m][r] = first ? _mm512_setzero_ps() : _mm512_load_ps(mem + m * NR + r);
  for (int64_t k = k0; k < k1; k += S::kCols) {
    typename S::V xv[MR];
    for (int m = 0; m < MR; ++m) xv[m] = S::load(x + m * xs + k);
    for (int r = 0; r < NR; ++r) {
      const typename S::V wv = S::load(w + r * ws + k);
      for (int m = 0; m < MR; ++m) acc[m][r] = S::madd(acc[m][r], xv[m], wv);
    }
  }
  for (int m = 0; m < MR; ++m)
    for (int r = 0; r < NR; ++r) _mm512_store_ps(mem + m * NR + r, acc[m][r]);
}

// micro() for partial-sum decoders (FP4, kFp4Chunk columns a chunk) on codes and x in the
// GEMV's order: per chunk, part = its products from zero (= the GEMV's four bf16 dot
// products), then acc = fma(part, chunk scales, acc), the GEMV's sequence. sc: NR rows of
// per-chunk scale vectors, row stride nch.
// MR x NR partial sums fill the registers; the accumulators stay in mem (one load and store
// each per chunk, against 8 FMAs).
template <class S, int MR, int NR>
void micro_parts(const typename S::T* x, int64_t xs, const typename S::T* w, int64_t ws, const __m512* sc,
                 int64_t nch, int64_t k0, int64_t k1, __m512* mem, bool first) {
  if (first)
    for (int m = 0; m < MR; ++m)
      for (int r = 0; r < NR; ++r) mem[m * kNR + r] = _mm512_setzero_ps();
  for (int64_t k = k0; k < k1; k += kFp4Chunk) {
    __m512 part[MR][NR];
    for (int m = 0; m < MR; ++m)
      for (int r = 0; r < NR; ++r) part[m][r] = _mm512_setzero_ps();
    for (int64_t q = 0; q < kFp4Chunk; q += S::kCols) {
      typename S::V wv[NR];
      for (int r = 0; r < NR; ++r) wv[r] = S::load(w + r * ws + k + q);
      for (int m = 0; m < MR; ++m) {
        const typename S::V xv = S::load(x + m * xs + k + q);
        for (int r = 0; r < NR; ++r) part[m][r] = S::madd(part[m][r], xv, wv[r]);
      }
    }
    for (int r = 0; r < NR; ++r) {
      const __m512 s = sc[r * nch + k / kFp4Chunk];
      for (int m = 0; m < MR; ++m) mem[m * kNR + r] = _mm512_fmadd_ps(part[m][r], s, mem[m * kNR + r]);
    }
    // Keeps the accumulators in memory: the compiler otherwise carries them in registers
    // across chunks beside the 24 partial sums and spills both (FP4 M = 512: 185-196 ->
    // 188-212 GFLOP/s).
    asm volatile("" ::: "memory");
  }
}

// micro_parts() on vdpbf16ps with the accumulators in registers too: MR (<= 3) rows of x
// times four tile rows over all of K, then their sums straight to y. 3 x 4 partial sums and
// accumulators fill 24 registers, so no accumulator passes through memory per chunk (FP4
// 1024 x 2048, 1 thread: the 6 x 4 kernel with accumulators in memory ran at ~125 GFLOP/s
// against a 235 peak). w holds decode_row_fp4_scaled's words, so each chunk's partial sums
// come scaled and acc += part takes the place of micro_parts' fma with the chunk scales (the
// same bits, see there; 1 thread, hot, AMD Zen 5, FP4 M = 32 / 128: +10%).
template <int MR>
__attribute__((noinline)) void micro_parts_dp(const LinearCall& c, const uint16_t* x, const uint16_t* w, int64_t m0,
                                              int64_t n, int64_t n_rows) {
  const int64_t Kp = c.xs;
  __m512 acc[MR][kNR];
  for (int m = 0; m < MR; ++m)
    for (int r = 0; r < kNR; ++r) acc[m][r] = _mm512_setzero_ps();
  for (int64_t k = 0; k < Kp; k += kFp4Chunk) {
    __m512 part[MR][kNR];
    for (int m = 0; m < MR; ++m)
      for (int r = 0; r < kNR; ++r) part[m][r] = _mm512_setzero_ps();
    for (int64_t q = 0; q < kFp4Chunk; q += kDotCols) {
      __m512i wv[kNR];
      for (int r = 0; r < kNR; ++r) wv[r] = load_i(w + r * Kp + k + q);
      for (int m = 0; m < MR; ++m) {
        const __m512i xv = load_i(x + m * Kp + k + q);
        for (int r = 0; r < kNR; ++r) part[m][r] = dp(part[m][r], xv, wv[r]);
      }
    }
    for (int r = 0; r < kNR; ++r)
      for (int m = 0; m < MR; ++m) acc[m][r] = _mm512_add_ps(part[m][r], acc[m][r]);
  }
  for (int m = 0; m < MR; ++m)
    store_sums(c.y + (m0 + m) * c.N + n, reduce4(acc[m][0], acc[m][1], acc[m][2], acc[m][3]), n_rows);
}

// micro() on vdpbf16ps over all of K with the accumulators in registers: MR (<= 6) rows of x
// times four tile rows, then their sums straight to y.
template <int MR>
__attribute__((noinline)) void micro_dp(const LinearCall& c, const uint16_t* x, const uint16_t* w, int64_t m0,
                                        int64_t n, int64_t n_rows, const uint16_t* pf = nullptr) {
  const int64_t Kp = c.xs;
  __m512 acc[MR][kNR];
  for (int m = 0; m < MR; ++m)
    for (int r = 0; r < kNR; ++r) acc[m][r] = _mm512_setzero_ps();
  for (int64_t k = 0; k < Kp; k += kDotCols) {
    if (pf)
      for (int r = 0; r < kNR; ++r) prefetch_weights(pf + r * Kp + k);
    __m512i xv[MR];
    for (int m = 0; m < MR; ++m) xv[m] = load_i(x + m * Kp + k);
    for (int r = 0; r < kNR; ++r) {
      const __m512i wv = load_i(w + r * Kp + k);
      for (int m = 0; m < MR; ++m) acc[m][r] = dp(acc[m][r], xv[m], wv);
    }
  }
  for (int m = 0; m < MR; ++m)
    store_sums(c.y + (m0 + m) * c.N + n, reduce4(acc[m][0], acc[m][1], acc[m][2], acc[m][3]), n_rows);
}

// A tile times every row of x, weight-stationary: each group of four tile rows (16 KiB at
// K = 2048, in L1) runs over a block of activation rows: about 384 KiB of bf16 rows (a
// multiple of 6, at least 6), which stay in L2 beside the tile while every group runs over
// them (a prefill's 512 rows of 2048, 2 MiB, would otherwise stream from L3 once per
// group). f(rows [mb0, mb1), the group's first tile row r0); any blocking gives every output
// its own dot, so the same bits.
template <class F>
DI_INLINE void over_tile_groups(const LinearCall& c, int64_t rows_p, F f) {
  const int64_t Kp = c.xs, M = c.M;
  int64_t MB = int64_t(384) * 1024 / (Kp * 2) / 6 * 6;
  if (MB < 6) MB = 6;
  for (int64_t mb0 = 0; mb0 < M; mb0 += MB)
    for (int64_t r0 = 0; r0 < rows_p; r0 += kNR) f(mb0, min64(M, mb0 + MB), r0);
}

void tile_dp(const LinearCall& c, const uint16_t* tile, int64_t rows, int64_t rows_p, int64_t n_base,
             bool in_place = false) {
  const int64_t Kp = c.xs;
  over_tile_groups(c, rows_p, [&](int64_t mb0, int64_t mb1, int64_t r0) __attribute__((always_inline)) {
    const uint16_t* w = tile + r0 * Kp;
    const int64_t n = n_base + r0, n_rows = rows - r0;
    int64_t m0 = mb0;
    // Rows multiplied in place come from memory: the first pass over four of them fetches
    // the next four (into L2) while it works.
    const uint16_t* pf = in_place && mb0 == 0 && r0 + 2 * kNR <= rows_p ? w + kNR * Kp : nullptr;
    if (pf && mb1 - m0 >= 6) {
      micro_dp<6>(c, c.xb + m0 * Kp, w, m0, n, n_rows, pf);
      m0 += 6;
    }
    for (; m0 + 6 <= mb1; m0 += 6) micro_dp<6>(c, c.xb + m0 * Kp, w, m0, n, n_rows);
    switch (mb1 - m0) {
      case 5: micro_dp<5>(c, c.xb + m0 * Kp, w, m0, n, n_rows); break;
      case 4: micro_dp<4>(c, c.xb + m0 * Kp, w, m0, n, n_rows); break;
      case 3: micro_dp<3>(c, c.xb + m0 * Kp, w, m0, n, n_rows); break;
      case 2: micro_dp<2>(c, c.xb + m0 * Kp, w, m0, n, n_rows); break;
      case 1: micro_dp<1>(c, c.xb + m0 * Kp, w, m0, n, n_rows); break;
      default: break;
    }
  });
}

// The FP4 dp tile (decode_row_fp4_scaled's rows) over x three rows at a time.
void tile_parts_dp(const LinearCall& c, const uint16_t* tile, int64_t rows, int64_t rows_p, int64_t n_base) {
  const int64_t Kp = c.xs;
  over_tile_groups(c, rows_p, [&](int64_t mb0, int64_t mb1, int64_t r0) __attribute__((always_inline)) {
    const uint16_t* w = tile + r0 * Kp;
    const int64_t n = n_base + r0, n_rows = rows - r0;
    int64_t m0 = mb0;
    for (; m0 + 3 <= mb1; m0 += 3) micro_parts_dp<3>(c, c.xb + m0 * Kp, w, m0, n, n_rows);
    if (mb1 - m0 == 2) micro_parts_dp<2>(c, c.xb + m0 * Kp, w, m0, n, n_rows);
    if (mb1 - m0 == 1) micro_parts_dp<1>(c, c.xb + m0 * Kp, w, m0, n, n_rows);
  });
}

// Tile height: about 512 KiB of fp32 tile, a multiple of kNR, at most 48 rows.
constexpr int64_t kMaxTile = 48;
int64_t tile_rows(int64_t Kp) {
  int64_t nt = (int64_t(512) * 1024 / (Kp * 4)) / kNR * kNR;
  return nt < kNR ? kNR : nt > kMaxTile ? kMaxTile : nt;
}

// MR rows of x (MR <= kMR: the last, partial row group runs with its exact row count) times
// the tile (kParts: partial-sum tiles with their chunk scales sc), K in blocks of 1024
// columns (x block and accumulators stay in L1, weight rows stream from the L2-resident
// tile). Not inlined: inside its caller the compiler kept the partial-sum tiles' 24 partial
// sums worse (190 -> 133 GFLOP/s).
template <class S, bool kParts, int MR>
__attribute__((noinline)) void tile_group_k(const LinearCall& c, const typename S::T* xg, const typename S::T* tile,
                                           const __m512* sc, int64_t rows, int64_t rows_p, __m512* accs, int64_t m0,
                                           int64_t n_base) {
  constexpr int64_t kc = 1024;
  static_assert(kc % kFp4Chunk == 0, "chunks whole in a K block");
  const int64_t Kp = c.xs, nch = Kp / kFp4Chunk;
  for (int64_t k0 = 0; k0 < Kp; k0 += kc) {
    const int64_t k1 = min64(Kp, k0 + kc);
    for (int64_t r0 = 0; r0 < rows_p; r0 += kNR) {
      __m512* a = accs + (r0 / kNR) * kMR * kNR;
      if constexpr (kParts)
        micro_parts<S, MR, kNR>(xg, Kp, tile + r0 * Kp, Kp, sc + r0 * nch, nch, k0, k1, a, k0 == 0);
      else
        micro<S, MR, kNR>(xg, Kp, tile + r0 * Kp, Kp, k0, k1, a, k0 == 0);
    }
  }
  static_assert(kNR == 4, "reduce4 takes four weight rows");
  for (int64_t r0 = 0; r0 < rows_p; r0 += kNR) {
    const __m512* a = accs + (r0 / kNR) * kMR * kNR;
    for (int64_t m = 0; m < MR; ++m)
      store_sums(c.y + (m0 + m) * c.N + n_base + r0, reduce4(a[m * kNR], a[m * kNR + 1], a[m * kNR + 2], a[m * kNR + 3]),
                 rows - r0);
  }
}

template <class S, bool kParts>
void tile_group(const LinearCall& c, const typename S::T* xg, const typename S::T* tile, const __m512* sc,
                int64_t rows, int64_t rows_p, __m512* accs, int64_t m0, int64_t n_base) {
  static_assert(kMR == 6, "row-count dispatch below");
  switch (min64(kMR, c.M - m0)) {
    case 1: return tile_group_k<S, kParts, 1>(c, xg, tile, sc, rows, rows_p, accs, m0, n_base);
    case 2: return tile_group_k<S, kParts, 2>(c, xg, tile, sc, rows, rows_p, accs, m0, n_base);
    case 3: return tile_group_k<S, kParts, 3>(c, xg, tile, sc, rows, rows_p, accs, m0, n_base);
    case 4: return tile_group_k<S, kParts, 4>(c, xg, tile, sc, rows, rows_p, accs, m0, n_base);
    case 5: return tile_group_k<S, kParts, 5>(c, xg, tile, sc, rows, rows_p, accs, m0, n_base);
    default: return tile_group_k<S, kParts, 6>(c, xg, tile, sc, rows, rows_p, accs, m0, n_base);
  }
}

// kDpTiles: bf16 mode keeps the tile in bf16 and runs vdpbf16ps on it and xb (micro_b16);
// otherwise it widens both into dot-product order fp32 and runs FMAs (micro). Same bits;
// which is faster depends on the CPU (dp_tiles_are_faster).
// Whether BF16 weight rows [n, n + rows) can be the dp tile as stored: whole groups of four
// rows, no column padding (K a multiple of 32, so rows lie Kp words apart), and every row seen
// in range (row_check memo, set by the GEMV and by the tiles' decode below).
inline bool in_place_bf16_rows(const LinearCall& c, int64_t n, int64_t rows) {
  if (!c.W->row_check || rows % kNR != 0 || c.K != c.xs) return false;
  for (int64_t r = 0; r < rows; ++r)
    if (__atomic_load_n(c.W->row_check + n + r, __ATOMIC_RELAXED) != 1) return false;
  return true;
}

template <class D, bool kDpTiles>
void gemm_rows(const LinearCall& c, const D& d, int64_t n0, int64_t n1, void* scratch) {
  const int64_t Kp = c.xs, NT = tile_rows(Kp), M = c.M;
  float* tile = static_cast<float*>(scratch);
  __m512* accs = reinterpret_cast<__m512*>(tile + NT * Kp);
  const bool bf = c.use_bf16 && D::B16;
  if (bf && !kDpTiles && !c.xd) throw std::logic_error("avx512 gemm: bf16 mode without the dot-product order x");
  uint16_t* tileb = reinterpret_cast<uint16_t*>(tile);  // dp tiles: bf16 rows of Kp words
  constexpr bool parts = partial_sums<D>();
  // Partial-sum tiles keep each row's chunk scale vectors past the accumulators, then the row
  // of bf16 words each bf16-mode tile row is decoded into (see gemm_scratch).
  const int64_t nch = Kp / kFp4Chunk;
  __m512* scales = accs + (kMaxTile / kNR) * kMR * kNR;
  uint16_t* rowb = reinterpret_cast<uint16_t*>(scales + NT * nch);
  for (int64_t nt0 = n0; nt0 < n1; nt0 += NT) {
    const int64_t rows = min64(NT, n1 - nt0), rows_p = round_up(rows, kNR);
    if constexpr (kDpTiles && std::is_same_v<D, Bf16Dec>) {
      // BF16 rows already are the tile (the head: 129280 of them, 32 products per row at a
      // decode batch of 32): multiplied in place once every row was seen in range.
      if (bf && in_place_bf16_rows(c, nt0, rows)) {
        tile_dp(c, reinterpret_cast<const uint16_t*>(c.W->data) + nt0 * Kp, rows, rows, nt0, true);
        continue;
      }
    }
    uint64_t f32_rows = 0;  // bf16 mode: rows left for the fp32 mode
    if (bf) {
      // bf16 mode as FMAs (the driver's xd): each row decoded to bf16, then widened into
      // dot-product order fp32.
      for (int64_t r = 0; r < rows; ++r) {
        uint16_t* dst = kDpTiles ? tileb + r * Kp : rowb;
        bool ok;
        if constexpr (parts && kDpTiles)
          ok = decode_row_fp4_scaled(c, d, nt0 + r, dst, Kp);
        else if constexpr (parts)
          ok = decode_row_parts(c, d, nt0 + r, dst, scales + r * nch, Kp);
        else
          ok = decode_row_b16(c, d, nt0 + r, dst, Kp);
        if constexpr (std::is_same_v<D, Bf16Dec>)
          if (c.W->row_check) __atomic_store_n(c.W->row_check + nt0 + r, uint8_t(ok ? 1 : 2), __ATOMIC_RELAXED);
        if (ok) {
          if (!kDpTiles) row_to_dp(rowb, tile + r * Kp, Kp);
        } else {
          f32_rows |= uint64_t(1) << r;
          if (kDpTiles)
            std::memset(dst, 0, size_t(Kp) * sizeof(uint16_t));
          else
            std::memset(tile + r * Kp, 0, size_t(Kp) * sizeof(float));
          if constexpr (parts) std::memset(static_cast<void*>(scales + r * nch), 0, size_t(nch) * sizeof(__m512));
        }
      }
      if constexpr (parts)
        std::memset(static_cast<void*>(scales + rows * nch), 0, size_t((rows_p - rows) * nch) * sizeof(__m512));
    } else {
      for (int64_t r = 0; r < rows; ++r) decode_row_f32(c, d, nt0 + r, tile + r * Kp, Kp);
    }
    if (bf && kDpTiles) {
      std::memset(tileb + rows * Kp, 0, size_t(rows_p - rows) * Kp * sizeof(uint16_t));
      if constexpr (parts)
        tile_parts_dp(c, tileb, rows, rows_p, nt0);
      else
        tile_dp(c, tileb, rows, rows_p, nt0);
      for (int64_t r = 0; r < rows; ++r)
        if (f32_rows >> r & 1) gemv_f32_row(c, nt0 + r);
      continue;
    }
    std::memset(tile + rows * Kp, 0, size_t(rows_p - rows) * Kp * sizeof(float));
    const float* x = bf ? c.xd : c.xf;
    for (int64_t m0 = 0; m0 < M; m0 += kMR) {
      if (bf && parts)
        tile_group<FmaStep, true>(c, x + m0 * Kp, tile, scales, rows, rows_p, accs, m0, nt0);
      else
        tile_group<FmaStep, false>(c, x + m0 * Kp, tile, nullptr, rows, rows_p, accs, m0, nt0);
    }
    for (int64_t r = 0; r < rows; ++r)
      if (f32_rows >> r & 1) gemv_f32_row(c, nt0 + r);
  }
}

template <bool kDpTiles>
void gemm_for(const LinearCall& c, int64_t n0, int64_t n1, void* scratch) {
  switch (c.W->format) {
    case WeightFormat::F32: return gemm_rows<F32Dec, kDpTiles>(c, F32Dec(c), n0, n1, scratch);
    case WeightFormat::BF16: return gemm_rows<Bf16Dec, kDpTiles>(c, Bf16Dec(c), n0, n1, scratch);
    case WeightFormat::FP8_BLOCK: return gemm_rows<Fp8Dec, kDpTiles>(c, Fp8Dec(c), n0, n1, scratch);
    case WeightFormat::FP4_BLOCK: return gemm_rows<Fp4Dec, kDpTiles>(c, Fp4Dec(c), n0, n1, scratch);
  }
}

}  // namespace

void gemm(const LinearCall& c, int64_t n0, int64_t n1, void* scratch, bool dp_tiles) {
  if (dp_tiles) return gemm_for<true>(c, n0, n1, scratch);
  gemm_for<false>(c, n0, n1, scratch);
}

// The fp32 tile, the accumulators, then (partial-sum tiles) each row's chunk scale vectors
// and a row of bf16 words the tile rows are decoded through.
size_t gemm_scratch(const LinearCall& c) {
  const int64_t Kp = c.xs, NT = tile_rows(Kp);
  return size_t(NT * Kp) * sizeof(float) + size_t(kMaxTile / kNR) * kMR * kNR * 64 +
         size_t(NT * (Kp / kFp4Chunk + 1)) * 64 + size_t(Kp) * sizeof(uint16_t) + 64;
}

}  // namespace deepinfer::kernels::cpu::avx512
