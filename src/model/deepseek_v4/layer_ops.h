// The two sublayers of a V4 block, each over a chunk of S tokens at positions p0 .. p0+S-1
// (a whole prompt, a prefill chunk, or one decode token) with the sequence's layer state.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <span>

#include "core/scratch_arena.h"
#include "core/thread_pool.h"

#include "model/deepseek_v4/expert_split.h"
#include "model/deepseek_v4/numerics.h"
#include "model/deepseek_v4/rope.h"
#include "model/deepseek_v4/state.h"
#include "model/deepseek_v4/weights.h"

namespace deepinfer::v4 {

class ExpertCache;  // expert_cache.h

// The calling thread's arena for the temporaries of a forward step: every sublayer takes its
// buffers from it inside a ScratchArena::Scope. It grows to the largest step it has seen, so a
// warm decode step allocates nothing; one per thread, so concurrent forwards never share one.
ScratchArena& step_scratch();

// y[M, W.rows] for a weight the reference runs through act-quant + block GEMM (FP8/FP4);
// plain weights and float numerics take the exact product. Output at a bf16 point.
void linear_quantized(const Config& cfg, const Numerics& num, const float* x, int64_t M,
                      const WeightMatrix& W, float* y);

// f(t) for every token row t < rows, rows split over the backend's pool (a few per piece;
// one step's rows run inline). f must touch only row t's data and no step scratch.
template <class F>
void for_each_row(const Numerics& num, int64_t rows, F&& f) {
  parallel_for(num.backend->pool(), rows, 8, [&f](int64_t t0, int64_t t1, int) {
    for (int64_t t = t0; t < t1; ++t) f(t);
  });
}

// The greedy choice of a drafter: the largest logit, ties to the lower id.
inline int32_t greedy_token(const float* logits, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i)
    if (logits[i] > logits[best]) best = i;
  return int32_t(best);
}

// One weight product y[M, W.rows] = x[M, W.cols] . W^T of a sublayer, with the arithmetic
// the reference gives it:
//   kQuantized  linear_quantized (act-quant block GEMM in reference numerics), bf16 output
//   kBf16       the reference's bf16 GEMMs: exact product, bf16 output
//   kFp32       the reference's fp32 GEMMs (compressor projections): exact product, fp32 output
//   kFp32Exact  kFp32 taken with double dots in reference numerics whatever the kernels
//               (Backend::linear_f32_exact): V4.1's pooled compressor inputs, whose last bits
//               decide bf16 roundings ahead of the FP4 QDQ of the compressed entries
struct LayerProduct {
  enum Kind { kQuantized, kBf16, kFp32, kFp32Exact };
  const float* x;
  int64_t M;
  const WeightMatrix* W;
  float* y;
  Kind kind = kQuantized;
};
// Independent products (a MoE step's experts, the projections of one input) in one backend
// call, so small decode matrices share one parallel region; each y is what its own call gives.
void run_products(const Config& cfg, const Numerics& num, const LayerProduct* products, size_t n);

// The weights the next products of the step read (null entries skipped): the backend may
// pull them into cache while the caller's serial code runs (see Backend::prefetch_hint).
void prefetch_next(const Numerics& num, std::initializer_list<const WeightMatrix*> weights);

// V4.1's shared attention runtime (docs/model/v41.md §2, the reference's SharedAttentionRuntime) for
// one sequence of a step: what an index source publishes for the later layers of the same
// step, per row of the sequence's chunk.
//   topk   [n, index_topk] the chosen compressed entries of the governing KV source,
//          ascending, n_topk[t] of them (the latest index source's choice)
//   cand   [n, candidate_topk_blocks] the candidate source's chosen blocks (of
//          candidate_block_size entries), ascending, n_cand[t] of them
struct SharedSelection {
  int64_t* topk = nullptr;
  int64_t* n_topk = nullptr;
  int64_t* cand = nullptr;
  int64_t* n_cand = nullptr;
};

// One sequence's share of a batched step: rows [row0, row0 + n) of the batch hold its tokens
// at positions p0 .. p0 + n - 1; state is that sequence's state of the current layer.
// V4.1: kv_source is the state of the layer whose compressed KV and index keys the current
// layer reads (itself at a KV source; null for a window-only layer), shared the sequence's
// runtime for the step.
struct Segment {
  int64_t row0 = 0, n = 0, p0 = 0;
  LayerState* state = nullptr;
  LayerState* kv_source = nullptr;
  SharedSelection* shared = nullptr;
  // A DSpark draft block (docs/model/mtp_dspark.md §2.4): every row sees the ring's valid slots and every row
  // of the block (not causal), and the block's keys are not written to the ring.
  bool dspark_block = false;
};

// The window keys of n rows x (kv_norm(wkv . x), RoPE at pos0 + t, FP8 QDQ) written into
// state's ring: a DSpark stage's keys of the verified positions, made from main_x.
void write_window_keys(const Config& cfg, const Numerics& num, const LayerWeights& L, const RopeTable& rope,
                       const float* x, int64_t n, int64_t pos0, LayerState& state);

// Attention sublayer (docs/model/attention.md): a [rows, dim] (normed collapsed stream) -> out [rows, dim].
// Row-wise work (projections, norms, RoPE) runs over the whole batch; compressors, indexer
// selection, key lists and ring updates run per segment. A row's result never depends on
// the other rows of the batch (batch invariance).
void attention_forward(const Config& cfg, const Numerics& num, const LayerWeights& L, const RopeTable& rope,
                       const float* a, int64_t rows, std::span<const Segment> segments, float* out);

// V4.1 (docs/model/v41.md §4-§5), one segment of a compressed layer: a KV source emits the
// entries its tokens complete (latent, index key, RoPE, FP4 QDQ) into its state; an index
// source scores the KV source's index keys and publishes its top-k (and, at the candidate
// source, the candidate blocks) into sg.shared. ckv / csc: the segment's rows of the
// compressor projections (fp32 for ratio > 1; ckv is the bf16 product for ratio 1); iq / iw:
// its rows of the indexer projections (modified).
void shared_attention_segment(const Config& cfg, const Numerics& num, const LayerWeights& L, const RopeTable& rope,
                              const Segment& sg, const float* ckv, const float* csc, std::span<float> iq,
                              std::span<float> iw);

// MoE sublayer (docs/model/moe.md): x [S, dim] -> out [S, dim]; tokens choose hash-routed experts.
// Every rank routes every token (x is replicated) and gets the same out: the combine sums a
// token's expert outputs in increasing expert id, then the shared expert, whatever the split.
// cache: where the routed experts stream from when the checkpoint exceeds its memory budget
// (null, or a layer it does not stream: the mapped weights); the same out either way.
void moe_forward(const Config& cfg, const Numerics& num, const LayerWeights& L, const ExpertSplit& split,
                 const float* x, const int32_t* tokens, int64_t S, float* out, ExpertCache* cache = nullptr);

}  // namespace deepinfer::v4
