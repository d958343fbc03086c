// AVX2 sink attention (see attention_cpu.h): the AVX-512 kernel in vectors of 8, bit for bit
// the same results (its sums emulated lane for lane), so both machines select the same keys.
// The algorithm and the score's summation order are attention_isa_impl.h's, instantiated in
// this file's own namespace over avx2_ops_impl.h's vectors. Compiled with AVX2 flags; no
// inline functions or templates shared with other files (cpu_isa.h explains why).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>
#include <math.h>

#include <cstdint>
#include <cstring>

#include "kernels/cpu/attention_cpu.h"

namespace deepinfer::kernels::cpu {

namespace {
namespace avx2 {

#define DI_ISA_INLINE inline __attribute__((always_inline))

#include "kernels/cpu/avx2_ops_impl.h"
#include "kernels/cpu/attention_isa_impl.h"

// avx2_ops_impl.h's vectors with the AVX-512 kernel's score sums, lane for lane.
using AttnOps = Avx512OrderOps<Vec8, Vec8>;

}  // namespace avx2
}  // namespace

void sink_attention_avx2(const float* q, const float* const* keys, int64_t n_keys, int64_t dim, float scale,
                         float sink, bool round_probs, float* out) {
  avx2::sink_attention_one<avx2::AttnOps>(q, keys, n_keys, dim, scale, sink, round_probs, out);
}

void sink_attention_heads_avx2(const float* q, int64_t n_heads, const float* const* keys, int64_t n_keys,
                               int64_t dim, float scale, const float* sinks, bool round_probs, float* out) {
  avx2::sink_attention_heads<avx2::AttnOps>(q, n_heads, keys, n_keys, dim, scale, sinks, round_probs, out);
}

}  // namespace deepinfer::kernels::cpu
