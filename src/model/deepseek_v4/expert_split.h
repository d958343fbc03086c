// Which routed experts this process runs (expert parallel over a communicator).
#pragma once
#include <cstdint>
#include <vector>

#include "dist/communicator.h"

namespace deepinfer::v4 {

// Expert parallel: rank r of comm runs the routed experts [first[r], first[r + 1]) (contiguous
// slices, so its rows of the expert-sorted slot array are one block and a single allgatherv
// puts every rank's outputs in place). comm null or of size 1: one process runs them all.
// The output head is split the same way by vocabulary rows (head_first): rank r computes
// logits [head_first[r], head_first[r + 1]) of every row and an allgatherv completes them.
struct ExpertSplit {
  dist::Communicator* comm = nullptr;
  std::vector<int64_t> first;       // size() + 1 bounds of the routed experts
  std::vector<int64_t> head_first;  // size() + 1 bounds of the vocabulary
  bool active() const { return comm && comm->size() > 1; }
  bool owns(int64_t e) const { return !active() || (e >= first[size_t(comm->rank())] && e < first[size_t(comm->rank()) + 1]); }
};

// Contiguous slices of n_experts and of vocab over comm's ranks (the first n % size ranks
// get one more). Throws std::invalid_argument if there are more ranks than experts.
ExpertSplit split_experts(dist::Communicator* comm, int64_t n_experts, int64_t vocab = 0);

}  // namespace deepinfer::v4
