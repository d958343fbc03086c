// FP4 weights in bf16 mode over a few activation rows (decode batches, a prefill's share of a
// routed expert): fp4_multirow_avx512.cpp, compiled with the AVX-512 files' ISA flags and
// called from its row dispatch only (after the dispatcher's CPU check). A plain function with
// external linkage under a name no other file defines: no templates or inline code are shared
// across the ISA boundary (the rule of cpu_isa.h).
#pragma once
#include <cstddef>
#include <cstdint>

#include "kernels/cpu/cpu_isa.h"

namespace deepinfer::kernels::cpu {

// The row counts fp4_multirow_avx512 takes.
constexpr int64_t kFp4MultiRowMinM = 3, kFp4MultiRowMaxM = 16;
// Scale bytes of the weight rows it multiplies in bf16 mode (avx512_decoders.h's kScaleLo /
// kScaleHi, which decide the same for the one-row GEMV and the tiles; asserted equal there).
constexpr int kFp4SafeScaleLo = 127 - 31, kFp4SafeScaleHi = 127 + 22;

// y rows [n0, n1) of an FP4 call in bf16 mode (c.use_bf16, x in FP4 lane order) with
// kFp4MultiRowMinM <= c.M <= kFp4MultiRowMaxM: every output has the bits of the one-row GEMV
// (avx512_decoders.h's arithmetic comment). Weight rows whose scales leave the exact range
// are handed to f32_row(c, n), which writes weight row n's outputs for every activation row in
// fp32 mode.
// scratch: fp4_multirow_scratch_avx512(c) bytes, 64-byte aligned, the calling thread's own.
void fp4_multirow_avx512(const LinearCall& c, int64_t n0, int64_t n1, void* scratch,
                         void (*f32_row)(const LinearCall&, int64_t));
size_t fp4_multirow_scratch_avx512(const LinearCall& c);

}  // namespace deepinfer::kernels::cpu
