// The gated pooling compressor (docs/model/attention.md §4, §8), one token at a time.
// Token-by-token feeding with a fresh state is exactly what the reference's prefill computes,
// so prefill, chunked prefill and decode share this one state machine.
#pragma once
#include <cstdint>

#include "model/deepseek_v4/numerics.h"
#include "model/deepseek_v4/state.h"
#include "model/deepseek_v4/weights.h"

namespace deepinfer::v4 {

// Projections of a chunk's inputs a [S, dim] are fp32 GEMMs, kvp = a . wkv^T and
// sc = a . wgate^T [S, coff*width] (the attention batches them with its other products);
// then the scores of the tokens at positions p0 .. p0 + S - 1 take ape[p % ratio] (scores
// only, never kv).
void compressor_add_ape(const CompressorWeights& w, int64_t S, int64_t p0, float* sc);

// Feeds token p's projection rows. When p closes a group (p + 1 multiple of ratio) writes the
// pooled, not yet normalised entry z [width] and returns true (entry index p / ratio).
bool compressor_push(CompressorState& st, const float* kvp, const float* sc, int64_t p, float* z);

}  // namespace deepinfer::v4
