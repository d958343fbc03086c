#include <algorithm>

#include "core/formats.h"
#include "kernels/kernels.h"

namespace deepinfer::kernels {

void index_scores_ref(const float* q, const float* w, int64_t n_heads, int64_t dim, const float* const* keys,
                      int64_t n_keys, bool round, float* scores) {
  auto R = [round](float x) { return round ? round_bf16(x) : x; };
  for (int64_t s = 0; s < n_keys; ++s) {
    const float* k = keys[s];
    double total = 0.0;
    for (int64_t h = 0; h < n_heads; ++h) {
      const float* qh = q + h * dim;
      double d = 0.0;
      for (int64_t c = 0; c < dim; ++c) d += double(qh[c]) * double(k[c]);
      const float dot = std::max(R(float(d)), 0.0f);
      total += double(R(dot * w[h]));
    }
    scores[s] = R(float(total));
  }
}

}  // namespace deepinfer::kernels
