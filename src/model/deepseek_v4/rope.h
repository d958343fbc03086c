// Rotary embedding tables (docs/model/attention.md §1). A layer with ratio 0 uses
// rope_theta without YaRN; every other layer uses compress_rope_theta with YaRN, for its
// queries, window keys, compressed entries and indexer alike.
// Rotation acts on interleaved pairs (x[2i], x[2i+1]) of the LAST rope_dim dims of a vector.
#pragma once
#include <cstdint>
#include <vector>

#include "model/deepseek_v4/config.h"
#include "model/deepseek_v4/numerics.h"

namespace deepinfer::v4 {

struct RopeTable {
  std::vector<float> inv_freq;  // [rope_dim / 2]
  int64_t rope_dim = 0;
  // Set by make(), unique per process: apply() keeps the angles of the last table and
  // position per thread under this key (copies share it, and their values).
  uint64_t id = 0;

  static RopeTable make(const Config& cfg, bool compressed_layer);
  // Rotates the last rope_dim entries of x (length n) for position pos; inverse uses -sin.
  // The angles and the rotation are kernels::rope_angles_ref / rope_rotate_ref (light_ops.h).
  void apply(float* x, int64_t n, int64_t pos, bool inverse, const Numerics& num) const;
};

}  // namespace deepinfer::v4
