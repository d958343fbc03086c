#include "core/weight.h"

#include <cstring>

namespace deepinfer {

WeightMatrix weight_row_slice(const WeightMatrix& w, int64_t r0, int64_t n) {
  WeightMatrix s = w;
  s.rows = n;
  if (s.row_check) s.row_check += r0;
  switch (w.format) {
    case WeightFormat::F32: s.data = w.data + r0 * w.cols * 4; break;
    case WeightFormat::BF16: s.data = w.data + r0 * w.cols * 2; break;
    case WeightFormat::FP8_BLOCK:
      if (r0 % w.block != 0) return WeightMatrix{};
      s.data = w.data + r0 * w.cols;
      s.scale = w.scale + (r0 / w.block) * w.scale_cols;
      break;
    case WeightFormat::FP4_BLOCK:
      s.data = w.data + r0 * (w.cols / 2);
      s.scale = w.scale + r0 * w.scale_cols;
      break;
  }
  return s;
}

void weight_decode_row(const WeightMatrix& w, int64_t r, float* out) {
  switch (w.format) {
    // Checkpoint tensors need not be aligned to their element size (safetensors does not
    // promise it), so plain values are read with memcpy.
    case WeightFormat::F32:
      std::memcpy(out, w.data + r * w.cols * 4, size_t(w.cols) * 4);
      return;
    case WeightFormat::BF16: {
      const uint8_t* src = w.data + r * w.cols * 2;
      for (int64_t c = 0; c < w.cols; ++c) {
        uint16_t h;
        std::memcpy(&h, src + 2 * c, 2);
        out[c] = bf16_to_f32(h);
      }
      return;
    }
    case WeightFormat::FP8_BLOCK: {
      const uint8_t* src = w.data + r * w.cols;
      const uint8_t* srow = w.scale + (r / w.block) * w.scale_cols;
      for (int64_t c = 0; c < w.cols; ++c) out[c] = e4m3_to_f32(src[c]) * e8m0_to_f32(srow[c / w.block]);
      return;
    }
    case WeightFormat::FP4_BLOCK: {
      const uint8_t* src = w.data + r * (w.cols / 2);
      const uint8_t* srow = w.scale + r * w.scale_cols;
      for (int64_t c = 0; c < w.cols; c += 2) {
        uint8_t byte = src[c / 2];
        float s = e8m0_to_f32(srow[c / 32]);
        out[c] = e2m1_to_f32(byte & 0xf) * s;
        if (c + 1 < w.cols) out[c + 1] = e2m1_to_f32(byte >> 4) * s;
      }
      return;
    }
  }
}

}  // namespace deepinfer
