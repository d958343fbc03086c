// The gated pooling compressor (MODEL.md 7.4, 9.2; AUDIT O5-O7), one token at a time.
// Token-by-token feeding with a fresh state is exactly what the reference's prefill computes,
// so prefill, chunked prefill and decode share this one state machine.
#pragma once
#include <cstdint>

#include "model/deepseek_v4/numerics.h"
#include "model/deepseek_v4/state.h"
#include "model/deepseek_v4/weights.h"

namespace deepinfer::v4 {

// Projections of a chunk's inputs a [S, dim] (fp32 GEMMs): kvp, sc [S, coff*width];
// sc includes ape[p % ratio] (scores only, never kv).
void compressor_project(const CompressorWeights& w, const Numerics& num, const float* a, int64_t S, int64_t p0, float* kvp, float* sc);

// Feeds token p's projection rows. When p closes a group (p + 1 multiple of ratio) writes the
// pooled, not yet normalised entry z [width] and returns true (entry index p / ratio).
bool compressor_push(CompressorState& st, const float* kvp, const float* sc, int64_t p, float* z);

}  // namespace deepinfer::v4
