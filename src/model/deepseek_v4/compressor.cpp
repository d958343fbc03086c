#include "model/deepseek_v4/compressor.h"

#include <algorithm>
#include <span>

#include "kernels/light_ops.h"
#include "model/deepseek_v4/layer_ops.h"

namespace deepinfer::v4 {

void compressor_add_ape(const CompressorWeights& w, int64_t S, int64_t p0, float* sc) {
  const int64_t n = w.coff * w.width;
  for (int64_t t = 0; t < S; ++t) {
    const float* ape = w.ape.data() + ((p0 + t) % w.ratio) * n;
    for (int64_t c = 0; c < n; ++c) sc[t * n + c] += ape[c];
  }
}

bool compressor_push(CompressorState& st, const float* kvp, const float* sc, int64_t p, float* z) {
  const int64_t r = st.ratio, W = st.width, row_len = st.coff * W, R = st.n_pending_rows();
  std::copy(kvp, kvp + row_len, st.kv_row(p % R));
  std::copy(sc, sc + row_len, st.score_row(p % R));
  if ((p + 1) % r != 0) return false;

  ScratchArena& scratch = step_scratch();
  ScratchArena::Scope scope(scratch);
  // The pooled positions in order: coff 2, the previous group's (A halves) then this one's
  // (B halves); coff 1, this group's. A position before the sequence start maps to a row
  // that still holds its fresh kv = 0, score = -inf (R >= 2r), which weighs nothing.
  const int64_t n_slots = st.coff * r, first = p + 1 - n_slots;
  std::span<const float*> kv_rows = scratch.take<const float*>(n_slots), sc_rows = scratch.take<const float*>(n_slots);
  for (int64_t i = 0; i < n_slots; ++i) {
    const int64_t row = ((first + i) % R + R) % R, half = st.coff == 2 && i >= r ? W : 0;
    kv_rows[i] = st.kv_row(row) + half;
    sc_rows[i] = st.score_row(row) + half;
  }
  // z[c] = sum_slots softmax_slot(score)[c] * kv[c]; slots with score -inf weigh nothing.
  kernels::compressor_pool_ref(kv_rows.data(), sc_rows.data(), n_slots, W, scratch.take<double>(n_slots).data(), z);
  return true;
}

}  // namespace deepinfer::v4
