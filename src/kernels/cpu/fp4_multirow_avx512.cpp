// FP4 weights (e2m1 codes, a ue8m0 scale per 32 columns) in bf16 mode over 3-16 activation
// rows: a routed expert's rows in a batched decode step (1-4 a token of a 32-token batch) or in
// a prefill (~12 a token of 512). Compiled with the AVX-512 files' flags; see
// fp4_multirow.h for the interface and cpu_isa.h for the rules (internal linkage throughout).
//
// Arithmetic: each output runs the one-row GEMV's sequence, instruction for instruction
// (avx512_decoders.h, "arithmetic" and Fp4Dec): per lane, acc = 0; for each chunk of
// kFp4Chunk columns (x and codes in FP4 lane order, the bare e2m1 codes as bf16 words) part = 0,
// part = vdpbf16ps(part, x_v, code_v) for v = 0..3, acc = fma(part, 2^(s - 127) of the lane's
// scale block, acc) (a beyond-K block of the last chunk: 0, as prep_scales leaves it); then
// reduce4's lane sum. The rows whose scales leave [kFp4SafeScaleLo, kFp4SafeScaleHi] take the
// fp32 mode, as in the GEMV (f32_row). So rows computed here, by the one-row GEMV or by the
// dp tiles agree bit for bit, whatever M, the thread split or the blocking below (which only
// keeps acc in memory between K blocks, and changes no operation).
// (Scaling the code words instead, acc + part as the dp tiles do, saves the fma; here on Zen 4
// every cheap exact way to keep the zero codes at zero (masked add, saturating subtract, a
// second lookup and a min, clamp and sign) cost more issue slots than the fma, and vscalefps +
// add on the add ports was no faster either.)
//
// Loop (tile): two weight rows times a group of up to kMaxGroup activation rows, acc[MR][2] in
// registers. Per chunk both rows' 64 bytes of codes are decoded into eight registers (three
// shifts and four vpermw a row) and multiplied with the group's rows, the two weight rows of an
// activation row side by side so each x vector is loaded once for two vdpbf16ps (Zen 4 loads one
// zmm a cycle from L1 next to one vdpbf16ps: a load per dp ran at 0.6-0.7 of the dp rate), G
// chains interleaved (each four dependent vdpbf16ps). x is packed chunk by chunk first (its
// rows lie a multiple of 4 KiB apart: all in the same L1 sets) and taken in K blocks that stay
// in L1 (kXBlockBytes); weight rows go in blocks of kRowBlock whose accumulators wait in a
// stack buffer between K blocks, and are prefetched into L2 one row block ahead.
#if defined(__GNUC__) && !defined(__clang__)  // GCC's own intrinsic headers (_mm512_setzero_* and kin)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/avx512_common.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/fp4_multirow.h"

namespace deepinfer::kernels::cpu {

namespace {

#define MR_INLINE inline __attribute__((always_inline))

// e2m1 code (sign in bit 3) as bf16 bits.
constexpr uint16_t e2m1_word(int code) {
  constexpr uint16_t mag[8] = {0x0000, 0x3f00, 0x3f80, 0x3fc0, 0x4000, 0x4040, 0x4080, 0x40c0};
  return uint16_t(mag[code & 7] | ((code & 8) ? 0x8000 : 0));
}

struct alignas(64) Tables {
  uint16_t words[32];     // e2m1_word(i & 15): vpermw reads an index's low 5 bits, so bit 4 is free
  uint8_t to_dwords[64];  // vpshufb: every dword of 128-bit lane b <- byte b (zero-extended)
};

constexpr Tables make_tables() {
  Tables t{};
  for (int i = 0; i < 32; ++i) {
    t.words[i] = e2m1_word(i & 15);
  }
  for (int b = 0; b < 4; ++b)
    for (int j = 0; j < 16; ++j) {
      t.to_dwords[16 * b + j] = j % 4 == 0 ? uint8_t(b) : uint8_t(0x80);
    }
  return t;
}

constexpr Tables kTab = make_tables();

MR_INLINE __m512 dp(__m512 acc, __m512i a, __m512i b) { return _mm512_dpbf16_ps(acc, (__m512bh)a, (__m512bh)b); }
MR_INLINE void prefetch_l2(const void* p) { _mm_prefetch(static_cast<const char*>(p), _MM_HINT_T1); }

// Shared with the other AVX-512 kernel files (avx512_common.h): reduce4's lane-sum tree is the
// last step of the one-row sequence, so this file must use that one copy.
using avx512::load_i;
using avx512::mask16;
using avx512::mask64;
using avx512::reduce4;

// Whether every scale byte of a row keeps its products exact (avx512_decoders.h's
// Fp4Dec::safe, which decides the one-row GEMV's mode: the same rows must leave bf16 mode).
inline bool row_safe(const uint8_t* s, int64_t n) {
  return avx512::bytes_within(s, n, kFp4SafeScaleLo, kFp4SafeScaleHi);
}

struct Row {
  const uint8_t* p;  // codes of the row (K / 2 bytes)
  const uint8_t* s;  // its scale bytes (K / 32)
  int64_t n;         // its index (output column)
};

struct Ctx {
  const LinearCall* c;
  const uint16_t* x;  // x packed chunk by chunk: chunk ch of row m at (ch * M + m) * kFp4Chunk
  int64_t nfull;      // whole chunks of K; a partial one follows when K % kFp4Chunk != 0
  int64_t pf_codes;   // prefetch distances: one row block on
  int64_t pf_scales;
};

// Chains of (activation row, weight row) interleaved, by the group's rows.
constexpr int g_for(int MR) { return MR <= 4 ? 2 * MR : MR <= 6 ? 6 : 4; }

// Weight rows rows[0], rows[1] (rows[1] may repeat rows[0] when nvalid = 1; its outputs are
// dropped) times activation rows m0 .. m0 + MR over chunks [c0, c1), acc[MR][2] in registers.
// Per chunk both rows are decoded, then the (activation row, weight row) chains run G at a
// time, the two rows of one activation row side by side so that each x vector is loaded once
// for both (a zmm load a cycle is all L1 gives beside one vdpbf16ps: a load per product ran
// at 0.6-0.7 of the dp rate). A chain is four dependent vdpbf16ps; several must be in flight.
// first: acc starts at 0, else from spill; last: the sums go to y, else acc to spill (vector
// [r * M + m], the group's rows).
template <int MR, int G>
__attribute__((noinline)) void tile(const Ctx& t, const Row* rows, int nvalid, int m0, int64_t c0, int64_t c1,
                                    bool first, bool last, __m512* spill) {
  constexpr int RG = 2, P = MR * RG;
  const LinearCall& c = *t.c;
  const int64_t M = c.M;
  __m512 acc[MR][RG];
  _Pragma("GCC unroll 64") for (int m = 0; m < MR; ++m)
    _Pragma("GCC unroll 2") for (int r = 0; r < RG; ++r)
      acc[m][r] = first ? _mm512_setzero_ps() : _mm512_load_ps(reinterpret_cast<const float*>(spill + r * M + m0 + m));
  const __m512i table = load_i(kTab.words);
  const __m512i spread = load_i(kTab.to_dwords);
  const uint8_t* const p0 = rows[0].p;
  const uint8_t* const p1 = rows[1].p;
  const uint8_t* const s0 = rows[0].s;
  const uint8_t* const s1 = rows[1].s;
  // One row's chunk: its four code vectors and the scales 2^(s - 127) of the lanes' blocks.
  auto decode = [&](const uint8_t* p, const uint8_t* s, int64_t ch, bool tail, __m512i* w, __m512& sc)
                    __attribute__((always_inline)) {
    const uint8_t* pr = p + ch * (kFp4Chunk / 2);
    const uint8_t* sr = s + ch * (kFp4Chunk / 32);
    __m512i code, sb;
    if (!tail) {
      code = load_i(pr);
      int32_t s4;
      std::memcpy(&s4, sr, 4);
      sb = _mm512_set1_epi32(s4);
      prefetch_l2(pr + t.pf_codes);
      prefetch_l2(sr + t.pf_scales);
    } else {  // the partial last chunk of K (32, 64 or 96 columns; zero codes and scales beyond)
      const int64_t left = c.K - ch * kFp4Chunk;
      code = _mm512_maskz_loadu_epi8(mask64(left / 2), pr);
      sb = _mm512_broadcastd_epi32(_mm_maskz_loadu_epi8(mask16(left / 32), sr));
    }
    // Dwords 4b .. 4b + 3 (words 8b .. 8b + 7) of the chunk lie in scale block b; a safe byte
    // s in bits 23-30 is the float 2^(s - 127) (prep_scales' floats).
    sc = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_shuffle_epi8(sb, spread), 23));
    _Pragma("GCC unroll 4") for (int v = 0; v < 4; ++v)
      w[v] = _mm512_permutexvar_epi16(v == 0 ? code : _mm512_srli_epi16(code, 4 * v), table);
  };
  auto step = [&](int64_t ch, bool tail) __attribute__((always_inline)) {
    const uint16_t* xc = t.x + (ch * M + m0) * kFp4Chunk;
    __m512i w[RG][4];
    __m512 sc[RG];
    decode(p0, s0, ch, tail, w[0], sc[0]);
    decode(p1, s1, ch, tail, w[1], sc[1]);
    _Pragma("GCC unroll 64") for (int i0 = 0; i0 < P; i0 += G) {
      __m512 part[G];
      _Pragma("GCC unroll 4") for (int v = 0; v < 4; ++v)
        _Pragma("GCC unroll 64") for (int g = 0; g < G; ++g) {
          const int i = i0 + g, m = i / RG, q = i % RG;
          if (i < P) part[g] = dp(v == 0 ? _mm512_setzero_ps() : part[g], load_i(xc + m * kFp4Chunk + 32 * v), w[q][v]);
        }
      _Pragma("GCC unroll 64") for (int g = 0; g < G; ++g) {
        const int i = i0 + g, m = i / RG, q = i % RG;
        if (i < P) acc[m][q] = _mm512_fmadd_ps(part[g], sc[q], acc[m][q]);
      }
    }
  };
  const int64_t full_end = c1 < t.nfull ? c1 : t.nfull;
  for (int64_t ch = c0; ch < full_end; ++ch) step(ch, false);
  if (c1 > t.nfull) step(t.nfull, true);
  if (!last) {
    _Pragma("GCC unroll 64") for (int m = 0; m < MR; ++m)
      _Pragma("GCC unroll 2") for (int r = 0; r < RG; ++r)
        _mm512_store_ps(reinterpret_cast<float*>(spill + r * M + m0 + m), acc[m][r]);
    return;
  }
  const __m512 z = _mm512_setzero_ps();
  _Pragma("GCC unroll 64") for (int m = 0; m < MR; ++m) {
    alignas(16) float sums[4];
    _mm_store_ps(sums, reduce4(acc[m][0], acc[m][1], z, z));
    for (int r = 0; r < nvalid; ++r) c.y[(m0 + m) * c.N + rows[r].n] = sums[r];
  }
}

// Activation rows in groups of at most kMaxGroup (the accumulators of two weight rows, eight
// weight vectors and the chains in flight fill the registers), as even as whole rows allow;
// each group decodes the weights again (~16 vector ops a row and chunk, against 4 MR dp).
constexpr int kMaxGroup = 6;
constexpr int groups_of(int M) { return (M + kMaxGroup - 1) / kMaxGroup; }
constexpr int group_rows(int M, int i) { return M / groups_of(M) + (i < M % groups_of(M) ? 1 : 0); }
constexpr int group_start(int M, int i) { return i == 0 ? 0 : group_start(M, i - 1) + group_rows(M, i - 1); }

// Weight rows per row block (accumulators of a block wait in a stack buffer between K blocks)
// and the bytes of x (M rows of a K block, bf16) that stay in L1 beside the weight stream.
constexpr int64_t kRowBlock = 16;
constexpr int64_t kXBlockBytes = 16 * 1024;

template <int M, int I = 0>
MR_INLINE void tiles(const Ctx& t, const Row* rows, int nvalid, int64_t c0, int64_t c1, bool first, bool last,
                     __m512* spill) {
  if constexpr (I < groups_of(M)) {
    constexpr int MR = group_rows(M, I);
    tile<MR, g_for(MR)>(t, rows, nvalid, group_start(M, I), c0, c1, first, last, spill);
    tiles<M, I + 1>(t, rows, nvalid, c0, c1, first, last, spill);
  }
}

template <int M>
void run(const LinearCall& c, int64_t n0, int64_t n1, void* scratch, void (*f32_row)(const LinearCall&, int64_t)) {
  if (n0 >= n1) return;
  constexpr int64_t RB = kRowBlock;
  static_assert(RB % 2 == 0, "weight rows go two at a time");
  const WeightMatrix& W = *c.W;
  const int64_t K = c.K, nb = K / 32;
  const int64_t nch = (K + kFp4Chunk - 1) / kFp4Chunk;
  // K blocks of at most max_ch chunks, as even as whole chunks allow.
  const int64_t max_ch = kXBlockBytes / (M * kFp4Chunk * 2) > 0 ? kXBlockBytes / (M * kFp4Chunk * 2) : 1;
  const int64_t nkb = (nch + max_ch - 1) / max_ch;
  const int64_t per = (nch + nkb - 1) / nkb;
  // x rows lie xs words apart, a multiple of 4 KiB for the experts' widths: the same L1 sets
  // for every row (12 rows in 8 ways: every load missed L1). Packed, a chunk's M rows are
  // consecutive lines.
  uint16_t* xp = static_cast<uint16_t*>(scratch);
  for (int64_t ch = 0; ch < nch; ++ch)
    for (int m = 0; m < M; ++m)
      for (int v = 0; v < 4; ++v)
        _mm512_store_si512(xp + (ch * M + m) * kFp4Chunk + 32 * v,
                           load_i(c.xb + m * c.xs + ch * kFp4Chunk + 32 * v));
  const Ctx t{&c, xp, K / kFp4Chunk, RB * (K / 2), RB * W.scale_cols};
  alignas(64) __m512 spill[RB * M];
  Row rows[RB + 1];
  int64_t fallback[RB];
  for (int64_t b0 = n0; b0 < n1; b0 += RB) {
    const int64_t b1 = b0 + RB < n1 ? b0 + RB : n1;
    int ns = 0, nf = 0;
    for (int64_t n = b0; n < b1; ++n) {
      const Row r{W.data + n * (K / 2), W.scale + n * W.scale_cols, n};
      if (row_safe(r.s, nb))
        rows[ns++] = r;
      else
        fallback[nf++] = n;
    }
    if (ns % 2) rows[ns] = rows[ns - 1];
    for (int64_t kb = 0; kb < nkb && ns > 0; ++kb) {
      const int64_t c0 = kb * per, c1 = c0 + per < nch ? c0 + per : nch;
      for (int g = 0; g < ns; g += 2)
        tiles<M>(t, rows + g, ns - g < 2 ? 1 : 2, c0, c1, kb == 0, kb == nkb - 1, spill + g * M);
    }
    for (int i = 0; i < nf; ++i) f32_row(c, fallback[i]);
  }
}

}  // namespace

size_t fp4_multirow_scratch_avx512(const LinearCall& c) {
  return size_t(c.M * ((c.K + kFp4Chunk - 1) / kFp4Chunk) * kFp4Chunk) * sizeof(uint16_t);
}

void fp4_multirow_avx512(const LinearCall& c, int64_t n0, int64_t n1, void* scratch,
                         void (*f32_row)(const LinearCall&, int64_t)) {
  switch (c.M) {
    case 3: return run<3>(c, n0, n1, scratch, f32_row);
    case 4: return run<4>(c, n0, n1, scratch, f32_row);
    case 5: return run<5>(c, n0, n1, scratch, f32_row);
    case 6: return run<6>(c, n0, n1, scratch, f32_row);
    case 7: return run<7>(c, n0, n1, scratch, f32_row);
    case 8: return run<8>(c, n0, n1, scratch, f32_row);
    case 9: return run<9>(c, n0, n1, scratch, f32_row);
    case 10: return run<10>(c, n0, n1, scratch, f32_row);
    case 11: return run<11>(c, n0, n1, scratch, f32_row);
    case 12: return run<12>(c, n0, n1, scratch, f32_row);
    case 13: return run<13>(c, n0, n1, scratch, f32_row);
    case 14: return run<14>(c, n0, n1, scratch, f32_row);
    case 15: return run<15>(c, n0, n1, scratch, f32_row);
    case 16: return run<16>(c, n0, n1, scratch, f32_row);
    default: break;
  }
}

}  // namespace deepinfer::kernels::cpu
