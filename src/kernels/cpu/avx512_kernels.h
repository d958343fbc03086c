// What the AVX-512 kernel files export to one another (included by *_avx512.cpp files only):
// whole calls or whole row ranges, the granularity at which a call may cross files (each hot
// loop and the templates it instantiates stay inside one file, inlined as they were). Plain
// functions with external linkage in namespace avx512, which no generic, AVX2 or NEON file
// uses; the kernel table (cpu_kernels_avx512.cpp) points at them.
#pragma once
#include <cstddef>
#include <cstdint>

#include "kernels/cpu/cpu_isa.h"

namespace deepinfer::kernels::cpu::avx512 {

// The tiles' register block: kMR activation rows times kNR weight rows (the kernel table's
// m_align and gemm_grain).
constexpr int kMR = 6, kNR = 4;

// ------------------------------------------------------------------ gemv_avx512.cpp (decode)

// y rows [n0, n1) of a call of 1 to 8 activation rows (any format: BF16 goes on to
// bf16_gemv_avx512), fused decode + dot.
void gemv(const LinearCall& c, int64_t n0, int64_t n1);
// The fp32-mode outputs of weight row n for every activation row (any M): the rows bf16 mode
// leaves (scales or values out of the exact range), from the tiles and fp4_multirow_avx512.
void gemv_f32_row(const LinearCall& c, int64_t n);

// ----------------------------------------------------------------- gemm_avx512.cpp (prefill)

// y rows [n0, n1) of a call of any M through tiles decoded once into L2: in bf16 mode on
// vdpbf16ps (dp_tiles) or as FMAs on the dot-product order (c.xd); scratch: gemm_scratch(c)
// bytes, 64-byte aligned, the calling thread's own.
void gemm(const LinearCall& c, int64_t n0, int64_t n1, void* scratch, bool dp_tiles);
size_t gemm_scratch(const LinearCall& c);

// ------------------------------------------------------- activations_avx512.cpp (IsaKernels)

void prep_float(const float* x, int64_t K, int64_t m0, int64_t m1, int64_t xs, float* xf, uint16_t* xb,
                uint8_t* bf16_ok);
void fp4_lane_order(uint16_t* xb, int64_t m0, int64_t m1, int64_t xs);
void bf16_dp_order(const uint16_t* xb, float* xd, int64_t m0, int64_t m1, int64_t xs);
void fp4_f32_order(float* xf, int64_t m0, int64_t m1, int64_t xs);
void bf16_pair_order(float* xf, int64_t m0, int64_t m1, int64_t xs);
void index_dots(const double* qT, int64_t n_heads, int64_t dim, const float* const* keys, int64_t n_keys,
                double* out);
void index_query_exact(const float* q, int64_t n_heads, int64_t dim, uint32_t* pairs, IndexQueryExact* info);
void index_dots_exact(const IndexQueryExact& q, int64_t n_heads, int64_t dim, const float* const* keys, int64_t n_keys,
                      double* out, uint8_t* exact);
double dot_f64(const float* a, const float* b, int64_t n);
void dot_f64_4(const float* a, const float* b, int64_t ldb, int64_t n, double* out);

}  // namespace deepinfer::kernels::cpu::avx512
