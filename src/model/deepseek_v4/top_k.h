// The lightning indexer's choice of keys (docs/model/attention.md §5.4): the k best scores of a query.
#pragma once
#include <cstdint>
#include <span>

namespace deepinfer::v4 {

// The k <= n best of n scores into out, best first: larger score first, ties to the lower
// index (-0 and +0 equal). order and spare: n scratch slots each. The same indices, in the
// same order, as a partial sort with that comparator, for any scores (NaN included).
void select_top_k(std::span<const float> score, int64_t k, std::span<int64_t> order, std::span<int64_t> spare,
                  int64_t* out);

}  // namespace deepinfer::v4
