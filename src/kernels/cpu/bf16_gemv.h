// BF16 weights over 1-8 activation rows on AVX-512 (decode, decode batches, speculative
// verify: above all the output head, 129280 x 4096 BF16 read once a token):
// bf16_gemv_avx512.cpp, compiled with the AVX-512 files' ISA flags and called from the
// GEMV's row dispatch only (gemv_avx512.cpp, after the dispatcher's CPU check). A plain
// function with external linkage under a name no other file defines: no templates or inline
// code are shared across the ISA boundary (the rule of cpu_isa.h).
#pragma once
#include <cstdint>

#include "kernels/cpu/cpu_isa.h"

namespace deepinfer::kernels::cpu {

// y rows [n0, n1) of a BF16 call of 1 to 8 activation rows (prepared as for the generic GEMV:
// xf in BF16 pair order, see IsaKernels::bf16_pair_order; xb, and xd where the driver made
// it, in bf16 mode), every output with the bits of avx512_decoders.h's arithmetic (its
// "arithmetic" comment): fp32 mode, or bf16 mode with the weight rows out of the exact range
// in the fp32 mode (and recorded in W->row_check, whose rows seen in range skip the check).
void bf16_gemv_avx512(const LinearCall& c, int64_t n0, int64_t n1);

}  // namespace deepinfer::kernels::cpu
