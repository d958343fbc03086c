// Fast sink attention for the cpu backend: the tile structure of sink_attention_ref
// (64-column tiles, running max, bf16 probabilities for P.V, fp32 denominator, sink added
// last), accumulated in fp32 instead of double. Same key list -> same result in prefill and
// decode wherever the ref kernel agrees with itself.
#pragma once
#include <cstdint>

namespace deepinfer::kernels::cpu {

// One ISA's sink attention, as the cpu backend calls it: registered per Isa next to its
// IsaKernels (isa_attention() in cpu_backend.cpp, isa_attention_table() in cpu_backend.h), so
// the backend never picks kernels by name. Dims that are not a multiple of dim_align go to
// sink_attention_fast (one head) and Backend::sink_attention_heads' loop over it (several).
struct AttentionKernels {
  const char* name;  // for logs and tests only; nothing dispatches on it
  void (*sink_attention)(const float* q, const float* const* keys, int64_t n_keys, int64_t dim, float scale,
                         float sink, bool round_probs, float* out);
  void (*sink_attention_heads)(const float* q, int64_t n_heads, const float* const* keys, int64_t n_keys,
                               int64_t dim, float scale, const float* sinks, bool round_probs, float* out);
  int64_t dim_align;  // the kernels take dim % dim_align == 0
};

// Portable version (any dim).
void sink_attention_fast(const float* q, const float* const* keys, int64_t n_keys, int64_t dim, float scale,
                         float sink, bool round_probs, float* out);
// AVX-512 version; dim must be a multiple of 16. Call only when the CPU has AVX-512F.
void sink_attention_avx512(const float* q, const float* const* keys, int64_t n_keys, int64_t dim, float scale,
                           float sink, bool round_probs, float* out);
// n_heads heads of sink_attention_avx512 over one key list, bit for bit the same per head:
// tile by tile, every head's pass over the tile before the next tile, so a tile of keys is
// read from memory once for all heads. dim as above.
void sink_attention_heads_avx512(const float* q, int64_t n_heads, const float* const* keys, int64_t n_keys,
                                 int64_t dim, float scale, const float* sinks, bool round_probs, float* out);

// The same two in vectors of 8, bit for bit the AVX-512 results (dim as above); call only
// when the CPU has AVX2 and FMA.
void sink_attention_avx2(const float* q, const float* const* keys, int64_t n_keys, int64_t dim, float scale,
                         float sink, bool round_probs, float* out);
void sink_attention_heads_avx2(const float* q, int64_t n_heads, const float* const* keys, int64_t n_keys,
                               int64_t dim, float scale, const float* sinks, bool round_probs, float* out);

// The same two in NEON vectors of 4 (aarch64), bit for bit the AVX-512 results (dim as above).
void sink_attention_neon(const float* q, const float* const* keys, int64_t n_keys, int64_t dim, float scale,
                         float sink, bool round_probs, float* out);
void sink_attention_heads_neon(const float* q, int64_t n_heads, const float* const* keys, int64_t n_keys,
                               int64_t dim, float scale, const float* sinks, bool round_probs, float* out);

}  // namespace deepinfer::kernels::cpu
