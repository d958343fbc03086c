// Between the two aarch64 kernel files: cpu_kernels_neon.cpp (Advanced SIMD only, compiled for
// the base architecture) and cpu_kernels_neon_bf16.cpp (compiled with the BF16 extension and
// called only after the dispatcher's HWCAP2_BF16 check). The bf16 file holds only the bf16-mode
// products; everything else of neon_bf16_kernels() (activation preparation, the fp32-mode
// products, act-quant, the indexer, the mixes, SwiGLU) is the plain file's, reached through the
// plain functions below. No templates or inline code cross the file boundary (cpu_isa.h).
#pragma once
#include <cstddef>
#include <cstdint>

#include "kernels/cpu/cpu_isa.h"

namespace deepinfer::kernels::cpu {

// neon_bf16_kernels() without its bf16-mode products: prep_float also writes xb and bf16_ok
// (as avx512_kernels() does), prep_act_quant writes xb, FP4 rows of xb go into FP4 lane order
// (kFp4Chunk), and rows() / scratch_bytes() are the fp32 mode's (the AVX-512 kernels' fp32
// arithmetic, x in xf in their orders): cpu_kernels_neon_bf16.cpp puts its own in front.
const IsaKernels& neon_bf16_base_kernels();

// That fp32 mode for weight rows [n0, n1) and every activation row of the call, scratch as
// neon_f32_scratch_bytes(c): where bf16 mode hands back a weight row outside its range.
void neon_bf16_f32_rows(const LinearCall& c, int64_t n0, int64_t n1, void* scratch);
size_t neon_f32_scratch_bytes(const LinearCall& c);

}  // namespace deepinfer::kernels::cpu
