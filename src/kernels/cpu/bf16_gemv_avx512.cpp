// BF16 GEMV over 1-8 activation rows on AVX-512 (see bf16_gemv.h): above all the output head
// at decode (129280 x 4096 BF16, 1.06 GB read once a token, 69% of a token's bytes on the
// 2-layer release-shape model), and the same at the row counts of decode batches and
// speculative verify. Compiled with the AVX-512 files' ISA flags (the rule of
// cpu_isa.h: nothing here is shared with another file but the one entry point).
//
// Every output y[m, n] runs avx512_decoders.h's sequence (its "arithmetic" comment), so
// the bits are the generic GEMV's, the tiles' and the AVX-512 / NEON-BF16 referees':
//   fp32 mode: acc = 0; for each 32-column chunk j over [0, xs) (x in BF16 pair order, weights
//     zero beyond K): acc = fma(x_even_j, w_even_j, acc); acc = fma(x_odd_j, w_odd_j, acc),
//     the even columns being the low words moved up, the odd ones the high words masked;
//   bf16 mode: acc = vdpbf16ps(acc, xb_j, w_j) over the same chunks; where the driver made the
//     dot-product order x (xd: a CPU whose vdpbf16ps is slower than two FMAs) the two FMAs of
//     the instruction instead, odd column first (bf16_to_dp in avx512_decoders.h). Weight
//     rows with a value out of the exact range (NaN, inf, subnormal, beyond 2^+-40), or seen so
//     in W->row_check, take the fp32 mode; rows seen in range skip the check;
//   y = reduce4 lane sum of acc.
// How rows are grouped, split or prefetched changes no bit (tests/kernels/test_bf16_gemv.cpp
// checks every output against a scalar referee of that sequence, one-row and 9-row calls).
//
// Speed: the products are memory-bound at these row counts (Zen 4: one 512-bit FMA or
// vdpbf16ps a cycle and core, ~8 bytes of weights a cycle and core to keep up with the
// memory at 1 row), so what counts is how the weight stream is fetched:
//   - NRW weight rows side by side, each with its own accumulators (8 rows at M = 1 and 2, 4
//     from 3 rows: in L3 4 rows ran 1.3-1.8x faster than 2 at M = 3-8, as the x vectors are
//     loaded once for more weight rows);
//   - every weight line prefetched (T1: into L2) kPrefetchBytes ahead, rounded up to whole
//     row groups: the same spot of a later group, so each prefetch is a line no row of the
//     group reads now. The generic GEMV's 8 KiB from each row pointer is the next row's line
//     at the same spot for BF16 rows of 4096 columns, which the group is reading already: it
//     fetched 1 line in 4 ahead and left the rest to the hardware prefetcher.
// AMD EPYC Zen 4, 2 threads, cold (1.06 GB head, 2 MiB pages), alternated runs, medians:
// M = 1 fp32 mode 40.8 -> 53.2 GB/s, bf16 mode 39.8 -> 50.9 (a plain read: ~50-60); loaded
// machine, M = 2 / 3 / 4 / 8 bf16 mode 20.8 / 15.8 / 13.6 / 9.2 -> 26.9 / 24.4 / 20.4 /
// 14.9 GB/s, fp32 mode 17.5 / 13.2 / 12.2 / 7.0 -> 23.7 / 20.4 / 24.4 / 11.6. Tried and
// dropped: one row at a time (a single stream: as fast in fp32 mode, 0.83x in bf16 mode; its
// fp32 chain of dependent FMAs caps it near 32 GB/s a core, so little headroom), 2 and 4
// rows at M = 1 (0.82-0.94x), T0 prefetches (0.78x), an extra T0 prefetch 1 KiB ahead
// (0.82-0.87x), prefetching 64 / 192 / 256 KiB ahead (within 2%), S rows staggered over one
// window so a single stream feeds S accumulator chains (0.5-0.9x in a microbenchmark).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <cstdint>

#include "kernels/cpu/avx512_common.h"
#include "kernels/cpu/bf16_gemv.h"

namespace deepinfer::kernels::cpu {

namespace {

#define DI_INLINE inline __attribute__((always_inline))

// How far ahead the weights are prefetched, in bytes (rounded up to whole row groups).
constexpr int64_t kPrefetchBytes = 128 * 1024;

// Shared with the other AVX-512 kernel files (avx512_common.h).
using avx512::b16_out_of_range;
using avx512::mask32;
using avx512::finish_group;

// The products of a group: fp32 mode (xf, pair order), bf16 mode on vdpbf16ps (xb), or bf16
// mode as its two FMAs (xd, dot-product order: each 32 columns' odd ones, then even ones).
enum class Mode { kF32, kDp, kWide };

// MR activation rows times weight rows [n, n + NRW), every chunk's weight lines prefetched pf
// bytes on. Returns the rows (bit r) out of the exact range (CHECK, bf16 modes); their outputs
// are not valid.
template <int MR, int NRW, Mode MODE, bool CHECK>
uint32_t group(const LinearCall& c, int64_t n, int64_t pf) {
  const int64_t K = c.K, Kp = c.xs;
  const uint16_t* w0 = reinterpret_cast<const uint16_t*>(c.W->data) + n * K;
  __m512 acc[MR][NRW];
  for (int m = 0; m < MR; ++m)
    for (int r = 0; r < NRW; ++r) acc[m][r] = _mm512_setzero_ps();
  __mmask32 bad[NRW] = {};
  const __m512i hi = _mm512_set1_epi32(int(0xffff0000u));
  // Columns [k, k + 32) (nv of them within K; zero weights beyond, as far as the stride Kp).
  auto step = [&](int64_t k, int64_t nv) __attribute__((always_inline)) {
    __m512i w[NRW];
    for (int r = 0; r < NRW; ++r)
      w[r] = nv == 32 ? _mm512_loadu_si512(w0 + r * K + k) : _mm512_maskz_loadu_epi16(mask32(nv), w0 + r * K + k);
    if constexpr (CHECK)
      for (int r = 0; r < NRW; ++r) bad[r] |= b16_out_of_range(w[r]);
    if constexpr (MODE == Mode::kDp) {
      for (int m = 0; m < MR; ++m) {
        const __m512i xv = _mm512_loadu_si512(c.xb + m * Kp + k);
        for (int r = 0; r < NRW; ++r) acc[m][r] = _mm512_dpbf16_ps(acc[m][r], (__m512bh)xv, (__m512bh)w[r]);
      }
    } else {
      // The even columns (low words moved up) and the odd ones (high words masked); fp32 mode
      // takes the even ones first, the dot-product order the odd ones.
      constexpr bool odd_first = MODE == Mode::kWide;
      const float* x = MODE == Mode::kWide ? c.xd : c.xf;
      __m512 first[NRW], second[NRW];
      for (int r = 0; r < NRW; ++r) {
        const __m512 even = _mm512_castsi512_ps(_mm512_slli_epi32(w[r], 16));
        const __m512 odd = _mm512_castsi512_ps(_mm512_and_si512(w[r], hi));
        first[r] = odd_first ? odd : even;
        second[r] = odd_first ? even : odd;
      }
      for (int m = 0; m < MR; ++m) {
        const __m512 x0 = _mm512_loadu_ps(x + m * Kp + k);
        for (int r = 0; r < NRW; ++r) acc[m][r] = _mm512_fmadd_ps(x0, first[r], acc[m][r]);
      }
      for (int m = 0; m < MR; ++m) {
        const __m512 x1 = _mm512_loadu_ps(x + m * Kp + k + 16);
        for (int r = 0; r < NRW; ++r) acc[m][r] = _mm512_fmadd_ps(x1, second[r], acc[m][r]);
      }
    }
  };
  int64_t k = 0;
  for (; k + 32 <= K; k += 32) {
    for (int r = 0; r < NRW; ++r) _mm_prefetch(reinterpret_cast<const char*>(w0 + r * K + k) + pf, _MM_HINT_T1);
    step(k, 32);
  }
  for (; k < Kp; k += 32) step(k, K - k);
  return finish_group<MR, NRW>(acc, bad, c.y, c.N, n);
}

// Weight rows [n, n + R) in the call's mode; in bf16 mode rows out of range are redone in the
// fp32 mode, and the row_check memo (when the matrix has one) records what each row is.
template <int MR, int R, Mode MODE>
void rows_in_mode(const LinearCall& c, int64_t n, int64_t pf) {
  uint8_t* memo = c.W->row_check;
  if (memo) {
    bool seen_ok = true;
    for (int r = 0; r < R; ++r) seen_ok = seen_ok && __atomic_load_n(memo + n + r, __ATOMIC_RELAXED) == 1;
    if (seen_ok) {
      group<MR, R, MODE, false>(c, n, pf);
      return;
    }
  }
  const uint32_t bad = group<MR, R, MODE, true>(c, n, pf);
  for (int r = 0; r < R; ++r) {
    if (memo) __atomic_store_n(memo + n + r, uint8_t((bad >> r & 1) ? 2 : 1), __ATOMIC_RELAXED);
    if (bad >> r & 1) group<MR, 1, Mode::kF32, false>(c, n + r, pf);
  }
}

template <int MR, int R>
void rows_at(const LinearCall& c, int64_t n, int64_t pf) {
  if (!c.use_bf16) {
    group<MR, R, Mode::kF32, false>(c, n, pf);
  } else if (c.xd) {
    rows_in_mode<MR, R, Mode::kWide>(c, n, pf);
  } else {
    rows_in_mode<MR, R, Mode::kDp>(c, n, pf);
  }
}

// Weight rows [n0, n1) in groups of NRW (then single rows). Prefetches stop short of the
// matrix's end (a small matrix would read a good share of its size again past it).
template <int MR, int NRW>
void range(const LinearCall& c, int64_t n0, int64_t n1) {
  const int64_t row_bytes = c.K * int64_t(sizeof(uint16_t)), group_bytes = NRW * row_bytes;
  const int64_t pf = (kPrefetchBytes + group_bytes - 1) / group_bytes * group_bytes;
  const int64_t pf_rows = pf / row_bytes;
  int64_t n = n0;
  for (; n + NRW <= n1; n += NRW) rows_at<MR, NRW>(c, n, n + pf_rows + NRW <= c.N ? pf : 0);
  for (; n < n1; ++n) rows_at<MR, 1>(c, n, n + pf_rows + 1 <= c.N ? pf : 0);
}

}  // namespace

void bf16_gemv_avx512(const LinearCall& c, int64_t n0, int64_t n1) {
  switch (c.M) {
    case 1: return range<1, 8>(c, n0, n1);
    case 2: return range<2, 8>(c, n0, n1);
    case 3: return range<3, 4>(c, n0, n1);
    case 4: return range<4, 4>(c, n0, n1);
    case 5: return range<5, 4>(c, n0, n1);
    case 6: return range<6, 4>(c, n0, n1);
    case 7: return range<7, 4>(c, n0, n1);
    default: return range<8, 4>(c, n0, n1);
  }
}

}  // namespace deepinfer::kernels::cpu
