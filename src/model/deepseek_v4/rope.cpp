#include "model/deepseek_v4/rope.h"

#include <algorithm>
#include <atomic>
#include <cmath>

#include "kernels/light_ops.h"

namespace deepinfer::v4 {

namespace {

std::atomic<uint64_t> g_next_table_id{1};

// The cos / sin of a table at a position, kept per thread: a decode step rotates every
// head's query, the window key and every head's output at the same position, and sin / cos
// in double cost more than the rotation (about 13k of them a token on the bench model). A
// few positions (slot pos % kSlots) so that a batch's sequences, each at its own position,
// do not evict each other's angles from one row to the next.
struct AngleCache {
  static constexpr int64_t kMaxHalf = 256;
  uint64_t table_id = 0;  // RopeTable::id of the cached angles; 0: none
  int64_t pos = -1;
  float c[kMaxHalf], s[kMaxHalf];
};
constexpr int64_t kSlots = 8;
thread_local AngleCache tl_angles[kSlots];

}  // namespace

RopeTable RopeTable::make(const Config& cfg, bool compressed_layer) {
  RopeTable t;
  t.id = g_next_table_id.fetch_add(1);
  t.rope_dim = cfg.rope_dim;
  const int64_t half = cfg.rope_dim / 2;
  const double base = compressed_layer ? cfg.compress_rope_theta : cfg.rope_theta;
  t.inv_freq.resize(half);
  // base^(2i/Dr) correctly rounded to fp32, then the fp32 reciprocal (matches torch on CPU).
  for (int64_t i = 0; i < half; ++i)
    t.inv_freq[i] = 1.0f / float(std::pow(base, double(2 * i) / double(cfg.rope_dim)));
  if (!compressed_layer || cfg.rope_original_seq_len <= 0) return t;

  const double dim = double(cfg.rope_dim);
  auto correction_dim = [&](double rotations) {
    return dim * std::log(double(cfg.rope_original_seq_len) / (rotations * 2.0 * M_PI)) / (2.0 * std::log(base));
  };
  double low = std::max(std::floor(correction_dim(cfg.beta_fast)), 0.0);
  double high = std::min(std::ceil(correction_dim(cfg.beta_slow)), dim - 1.0);
  float lo = float(low), hi = float(high);
  if (lo == hi) hi += 0.001f;
  const float factor = float(cfg.rope_factor);
  for (int64_t i = 0; i < half; ++i) {
    float ramp = std::clamp((float(i) - lo) / (hi - lo), 0.0f, 1.0f);
    float smooth = 1.0f - ramp;
    float f = t.inv_freq[i];
    t.inv_freq[i] = f / factor * (1.0f - smooth) + f * smooth;
  }
  return t;
}

void RopeTable::apply(float* x, int64_t n, int64_t pos, bool inverse, const Numerics& num) const {
  float* r = x + (n - rope_dim);
  const int64_t half = rope_dim / 2;
  if (id == 0 || half > AngleCache::kMaxHalf) {  // a table not made by make(), or too wide: no cache
    float c[AngleCache::kMaxHalf], s[AngleCache::kMaxHalf];
    for (int64_t i0 = 0; i0 < half; i0 += AngleCache::kMaxHalf) {  // the angles a block at a time
      const int64_t m = std::min(AngleCache::kMaxHalf, half - i0);
      kernels::rope_angles_ref(inv_freq.data() + i0, m, pos, c, s);
      kernels::rope_rotate_ref(r + 2 * i0, m, c, s, inverse, num.reference());
    }
    return;
  }
  AngleCache& a = tl_angles[uint64_t(pos) % kSlots];
  if (a.table_id != id || a.pos != pos) {
    kernels::rope_angles_ref(inv_freq.data(), half, pos, a.c, a.s);
    a.table_id = id;
    a.pos = pos;
  }
  kernels::rope_rotate_ref(r, half, a.c, a.s, inverse, num.reference());
}

}  // namespace deepinfer::v4
