// The lightning indexer's choice of keys (docs/model/attention.md §5.4): the k best scores of a query.
#pragma once
#include <cstdint>
#include <span>

#include "kernels/light_ops.h"

namespace deepinfer::v4 {

// The k <= n best of n scores into out, best first: larger score first, ties to the lower
// index (-0 and +0 equal). order and spare: n scratch slots each. The order of a partial sort
// with that comparator when no score is NaN (kernels::top_k_ref in kernels/light_ops.h, which
// also states what a NaN does).
inline void select_top_k(std::span<const float> score, int64_t k, std::span<int64_t> order, std::span<int64_t> spare,
                         int64_t* out) {
  kernels::top_k_ref(score.data(), int64_t(score.size()), k, order.data(), spare.data(), out);
}

}  // namespace deepinfer::v4
