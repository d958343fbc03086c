// `bench --per-core`: how many bytes of weights one core consumes per second in each kind of
// decode product, with the weights coming from DRAM, against one core's share of a stated
// server's memory bandwidth (--server-bandwidth GB/s --server-cores N). A decode step is
// memory-bound on a many-core server only if every core's products keep up with its share.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "model/deepseek_v4/model.h"

namespace deepinfer::cli {

struct PerCoreRow {
  std::string kind;        // "routed experts (FP4)", "attention (FP8)", "head (BF16)", ...
  int64_t rows = 0;        // activation rows a product takes (a decode batch's rows per matrix)
  int64_t matrices = 0;    // distinct matrices cycled through
  double working_set = 0;  // their bytes (well above the last-level cache: read from DRAM)
  double bytes_per_s = 0;  // weight bytes consumed per second by one core (median of rounds)
};

// Runs the model's own matrices through a one-thread backend of kind `kernels` (cpu, ref,
// cpu-avx2, ...), the products as the model calls them in `numerics` (reference: the
// act-quant products of FP8 / FP4 weights). Each kind cycles through its matrices until at
// least `min_bytes` are read, `rounds` times.
std::vector<PerCoreRow> measure_per_core(const v4::Model& model, const std::string& kernels, bool reference,
                                         double min_bytes = 2e9, int rounds = 3);

}  // namespace deepinfer::cli
