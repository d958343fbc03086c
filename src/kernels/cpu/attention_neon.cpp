// NEON sink attention (see attention_cpu.h): the AVX-512 kernel in vectors of 4, bit for bit
// the same results (its score sums emulated lane for lane), so aarch64 and x86 machines select
// the same keys. The algorithm and the score's summation order are attention_isa_impl.h's,
// instantiated in this file's own namespace over neon_ops_impl.h's vectors. No inline
// functions or templates shared with other files (cpu_isa.h explains why).
#include <arm_neon.h>
#include <math.h>

#include <cstdint>
#include <cstring>

#include "kernels/cpu/attention_cpu.h"

namespace deepinfer::kernels::cpu {

namespace {
namespace neon {

#define DI_ISA_INLINE inline __attribute__((always_inline))

#include "kernels/cpu/neon_ops_impl.h"
#include "kernels/cpu/attention_isa_impl.h"

// neon_ops_impl.h's vectors of 4 with the AVX-512 kernel's score sums, lane for lane (over
// Lane8: its 8-lane vectors as pairs of registers).
using AttnOps = Avx512OrderOps<Vec4, Lane8>;

}  // namespace neon
}  // namespace

void sink_attention_neon(const float* q, const float* const* keys, int64_t n_keys, int64_t dim, float scale,
                         float sink, bool round_probs, float* out) {
  neon::sink_attention_one<neon::AttnOps>(q, keys, n_keys, dim, scale, sink, round_probs, out);
}

void sink_attention_heads_neon(const float* q, int64_t n_heads, const float* const* keys, int64_t n_keys,
                               int64_t dim, float scale, const float* sinks, bool round_probs, float* out) {
  neon::sink_attention_heads<neon::AttnOps>(q, n_heads, keys, n_keys, dim, scale, sinks, round_probs, out);
}

}  // namespace deepinfer::kernels::cpu
