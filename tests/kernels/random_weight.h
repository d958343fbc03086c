// Random weight matrices in every checkpoint encoding, owning their bytes, for kernel tests.
#pragma once
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "core/weight.h"

namespace kernel_test {

struct OwnedWeight {
  std::vector<uint8_t> data, scale;
  deepinfer::WeightMatrix w;
};

// FP8: random non-NaN e4m3 codes with block x block ue8m0 blocks (128: V4, 32: V4.1); FP4:
// random nibbles with per-32 scales; BF16 / F32: N(0, sd). Scale bytes are drawn from
// [scale_lo, scale_hi].
inline OwnedWeight random_weight(deepinfer::WeightFormat f, int64_t rows, int64_t cols, std::mt19937& rng,
                                 float sd = 0.05f, int scale_lo = 118, int scale_hi = 128, int64_t block = 128) {
  using deepinfer::WeightFormat;
  OwnedWeight o;
  o.w.format = f;
  o.w.rows = rows;
  o.w.cols = cols;
  std::uniform_int_distribution<int> byte(0, 255), sc(scale_lo, scale_hi);
  std::normal_distribution<float> nd(0.0f, sd);
  switch (f) {
    case WeightFormat::FP8_BLOCK:
      o.data.resize(rows * cols);
      for (auto& b : o.data) {
        do b = uint8_t(byte(rng));
        while ((b & 0x7f) == 0x7f);
      }
      o.w.block = block;
      o.w.scale_cols = (cols + block - 1) / block;
      o.scale.resize(((rows + block - 1) / block) * o.w.scale_cols);
      break;
    case WeightFormat::FP4_BLOCK:
      o.data.resize(rows * cols / 2);
      for (auto& b : o.data) b = uint8_t(byte(rng));
      o.w.block = 32;
      o.w.scale_cols = cols / 32;
      o.scale.resize(rows * o.w.scale_cols);
      break;
    case WeightFormat::BF16:
      o.data.resize(rows * cols * 2);
      for (int64_t i = 0; i < rows * cols; ++i) {
        uint16_t h = deepinfer::f32_to_bf16(nd(rng));
        std::memcpy(&o.data[2 * i], &h, 2);
      }
      break;
    case WeightFormat::F32:
      o.data.resize(rows * cols * 4);
      for (int64_t i = 0; i < rows * cols; ++i) {
        float v = nd(rng);
        std::memcpy(&o.data[4 * i], &v, 4);
      }
      break;
  }
  for (auto& s : o.scale) s = uint8_t(sc(rng));
  o.w.data = o.data.data();
  o.w.scale = o.scale.empty() ? nullptr : o.scale.data();
  return o;
}

}  // namespace kernel_test
