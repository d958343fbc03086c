#include "model/deepseek_v4/compressor.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <span>

#include "kernels/kernels.h"
#include "model/deepseek_v4/layer_ops.h"

namespace deepinfer::v4 {

void compressor_add_ape(const CompressorWeights& w, int64_t S, int64_t p0, float* sc) {
  const int64_t n = w.coff * w.width;
  for (int64_t t = 0; t < S; ++t) {
    const float* ape = w.ape.data() + ((p0 + t) % w.ratio) * n;
    for (int64_t c = 0; c < n; ++c) sc[t * n + c] += ape[c];
  }
}

// z[c] = sum_slots softmax_slot(score)[c] * kv[c]; slots with score -inf weigh nothing.
static void pool(std::span<const float* const> kv_rows, std::span<const float* const> sc_rows, int64_t width,
                 float* z) {
  const size_t n = kv_rows.size();
  ScratchArena::Scope scope(step_scratch());
  std::span<double> e = step_scratch().take<double>(int64_t(n));
  for (int64_t c = 0; c < width; ++c) {
    float m = -std::numeric_limits<float>::infinity();
    for (size_t s = 0; s < n; ++s) m = std::max(m, sc_rows[s][c]);
    double den = 0.0;
    for (size_t s = 0; s < n; ++s) {
      e[s] = sc_rows[s][c] == -std::numeric_limits<float>::infinity() ? 0.0 : std::exp(double(sc_rows[s][c]) - double(m));
      den += e[s];
    }
    double acc = 0.0;
    for (size_t s = 0; s < n; ++s) {
      const float weight = float(e[s] / den);
      acc += double(kv_rows[s][c] * weight);
    }
    z[c] = float(acc);
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
  pool(kv_rows, sc_rows, W, z);
  return true;
}

}  // namespace deepinfer::v4
