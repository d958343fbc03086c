// The backend interface: the heavy ops of the forward pass (the light ones, light_ops.h, and
// the QDQ / Hadamard ops of kernels.h are plain functions), implemented by
//   ref  - the plain scalar referee (kernels.h *_ref): double accumulation, one rounding,
//          the canonical numerics the goldens were made with; single-threaded, slow;
//   cpu  - the fast CPU kernels (AVX-512 / AVX2 / NEON / scalar chosen at run time, threaded
//          over the pool). Per op, either the referee's bits (index_scores, hc_expand,
//          hc_collapse), or within one unit in the last place, rarely (swiglu,
//          linear_f32_exact), or fp32 accumulation in another order, within fp32
//          reassociation's bound (the GEMMs, sink attention);
//   cuda - later, behind the same interface.
// Each op's shape contract and bit contract, and which ISA implements it, is in the op
// registry (ops.h); the shape contracts are those of kernels.h.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "core/thread_pool.h"
#include "core/weight.h"
#include "kernels/kernels.h"

namespace deepinfer::kernels {

// One product of a linear_many batch: act_block 0 is linear_f32, > 0 is linear_act_quant.
struct LinearJob {
  const float* x = nullptr;
  int64_t M = 0;
  const WeightMatrix* W = nullptr;
  int64_t act_block = 0;
  float* y = nullptr;
  BlockSum block_sum = BlockSum::kExact;  // act-quant jobs only
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual const char* name() const = 0;
  // Pool for the model's own parallel loops (attention heads, tokens); may be null.
  virtual ThreadPool* pool() const = 0;

  // y[M, W.rows] = x[M, W.cols] . W^T, exact decoded weights (see linear_f32_ref).
  virtual void linear_f32(const float* x, int64_t M, const WeightMatrix& W, float* y) const = 0;
  // The same product with every dot accumulated in double and rounded once (the products of
  // fp32 values are exact there), as linear_f32_ref: the canonical rule for the fp32 GEMMs
  // whose outputs later sit near rounding boundaries (the mHC mixer: its coefficients feed
  // bf16 roundings that FP4 QDQ amplifies). The ref backend is linear_f32_ref; the fast one
  // sums in another order in double (equal to the last fp32 bit except on rare exact ties).
  virtual void linear_f32_exact(const float* x, int64_t M, const WeightMatrix& W, float* y) const;
  // The reference's act-quant + block-scaled FP8/FP4 GEMM (see linear_act_quant_ref). The ref
  // backend combines the K blocks as `sum` says; the fast ones always sum them in fp32.
  virtual void linear_act_quant(const float* x, int64_t M, const WeightMatrix& W, int64_t act_block, float* y,
                                BlockSum sum = BlockSum::kExact) const = 0;
  // Independent products in one go (a MoE step's experts, projections of one input): each
  // y equals what its own call would give. The fast backend runs them in one parallel
  // region, so small matrices keep every core busy without a barrier per matrix.
  virtual void linear_many(const LinearJob* jobs, size_t n) const;
  // Lightning-indexer scores of one query token over n_keys keys (see index_scores_ref);
  // equal to the referee bit for bit, with round_bf16 (reference numerics) or without: the
  // fast backend's dots are the referee's in-order double sums, or exact fp32 sums where the
  // values make them so. Split over pool() by the caller's backend.
  virtual void index_scores(const float* q, const float* w, int64_t n_heads, int64_t dim, const float* const* keys,
                            int64_t n_keys, bool round_bf16, float* scores) const;
  // index_scores of n_q query tokens, query i over the first n_vis[i] keys of its key list
  // keys + i * keys_ld (keys_ld 0: one list for all), its q at q + i * n_heads * dim, its w at
  // w + i * n_heads, its scores at scores + i * ld: each row as index_scores' own call gives
  // it. The fast backend gives each query of a prefill chunk to one thread (one parallel
  // region instead of one per query).
  virtual void index_scores_many(const float* q, const float* w, int64_t n_q, int64_t n_heads, int64_t dim,
                                 const float* const* keys, int64_t keys_ld, const int64_t* n_vis, bool round_bf16,
                                 float* scores, int64_t ld) const;
  // One head of sink attention over a key list (see sink_attention_ref). The fast backend
  // accumulates in fp32 (cpu/attention_cpu.h): within fp32 reassociation of the referee.
  virtual void sink_attention(const float* q, const float* const* keys, int64_t n_keys, int64_t dim, float scale,
                              float sink, bool round_probs, float* out) const = 0;
  // n_heads heads over one shared key list (V4 attention has one KV head): q and out are
  // [n_heads, dim], sinks [n_heads]; each head's result is that of sink_attention. The fast
  // backend reads each tile of keys once for all the heads instead of once per head.
  virtual void sink_attention_heads(const float* q, int64_t n_heads, const float* const* keys, int64_t n_keys,
                                    int64_t dim, float scale, const float* sinks, bool round_probs, float* out) const;
  // hc_expand_ref (see kernels.h); the fast backend runs 16 columns at a time, same bits.
  virtual void hc_expand(const float* o, const float* Rs, const float* comb, const float* post, int64_t hc,
                         int64_t dim, bool round_bf16, float* Y, int64_t j0, int64_t j1) const;
  // hc_collapse_ref (see kernels.h); the fast backend runs 16 columns at a time, same bits.
  virtual void hc_collapse(const float* X, const float* pre, int64_t hc, int64_t dim, bool round_bf16,
                           float* out) const;
  // swiglu_ref over one row (see kernels.h). The fast backend computes exp in vectors: it
  // equals the referee except, rarely, by one unit in the last place.
  virtual void swiglu(const float* g, const float* u, int64_t n, float limit, const float* weight, bool round_bf16,
                      float* out) const;
  // The weights the caller's next products read (at most ThreadPool::kMaxHintRanges / 2):
  // a backend with idle threads pulls them into cache while the caller runs serial code in
  // between. Only a hint; results never depend on it. The base does nothing.
  virtual void prefetch_hint(const WeightMatrix* const* weights, int n) const;
  // Measures the multiply-adds per second the products' instruction (fp32 vector FMA) can
  // issue on every thread of pool() at once (best of a few ~20 ms rounds): the compute side
  // of a roofline. 0 when the backend has no such figure (the referee); the base returns 0.
  virtual double fma_peak_macs_per_s() const;
  // The same for the bf16 dot-product instruction (vdpbf16ps) of the kernels' bf16 mode, the
  // products whose activations are exact bf16 (reference numerics' act-quant products); 0
  // when the kernels have no such mode.
  virtual double bf16_dot_peak_macs_per_s() const;
};

// prefetch_hint through a pool: each matrix's codes and scales as ranges to prefetch.
void pool_prefetch_hint(ThreadPool* pool, const WeightMatrix* const* weights, int n);

const Backend& ref_backend();
// The fastest CPU kernels this machine supports; pool may be null (single thread).
std::unique_ptr<Backend> make_cpu_backend(ThreadPool* pool);
// "ref" or "cpu"; throws std::invalid_argument otherwise.
std::unique_ptr<Backend> make_backend(const std::string& name, ThreadPool* pool);

}  // namespace deepinfer::kernels
