// A weight matrix [rows = out_features, cols = in_features] kept in its checkpoint encoding.
// Kernels decode it on the fly; nothing ever expands a whole checkpoint to fp32.
//   F32 / BF16 : plain row-major values
//   FP8_BLOCK  : e4m3 codes [rows, cols] + ue8m0 scales [ceil(rows/B), ceil(cols/B)]
//   FP4_BLOCK  : e2m1 codes packed two per byte [rows, cols/2] (low nibble = even column)
//                + ue8m0 scales [rows, cols/32]
#pragma once
#include <cstdint>
#include <cstring>

#include "core/formats.h"

namespace deepinfer {

enum class WeightFormat { F32, BF16, FP8_BLOCK, FP4_BLOCK };

struct WeightMatrix {
  WeightFormat format = WeightFormat::F32;
  int64_t rows = 0;
  int64_t cols = 0;
  const uint8_t* data = nullptr;
  const uint8_t* scale = nullptr;  // FP8_BLOCK / FP4_BLOCK only
  int64_t block = 0;               // FP8_BLOCK: square block edge B; FP4_BLOCK: 32
  int64_t scale_cols = 0;          // row stride of the scale tensor
  // BF16 and FP8_BLOCK, optional, owned by whoever made the matrix (the model's weights): a
  // per-row memo of a check the fast kernels make, filled in on first use: 0 not checked yet,
  // 1 passed, 2 failed. BF16: every value is 0 or of magnitude within [2^-40, 2^40]; FP8: no
  // NaN code (0x7f / 0xff) in the row. Read and written with relaxed atomic builtins; threads
  // that race write the same value.
  uint8_t* row_check = nullptr;

  bool valid() const { return data != nullptr; }
  bool is_quantized() const { return format == WeightFormat::FP8_BLOCK || format == WeightFormat::FP4_BLOCK; }
};

// Bytes of the codes and of the scale tensor (FP8 / FP4 only) of a matrix.
inline int64_t weight_data_bytes(const WeightMatrix& w) {
  switch (w.format) {
    case WeightFormat::F32: return w.rows * w.cols * 4;
    case WeightFormat::BF16: return w.rows * w.cols * 2;
    case WeightFormat::FP8_BLOCK: return w.rows * w.cols;
    case WeightFormat::FP4_BLOCK: return w.rows * w.cols / 2;
  }
  return 0;
}
inline int64_t weight_scale_bytes(const WeightMatrix& w) {
  switch (w.format) {
    case WeightFormat::FP8_BLOCK: return w.block > 0 ? ((w.rows + w.block - 1) / w.block) * w.scale_cols : 0;
    case WeightFormat::FP4_BLOCK: return w.rows * w.scale_cols;
    default: return 0;
  }
}

// Exact fp32 value of one element (scale products are exact: few mantissa bits times 2^k).
inline float weight_at(const WeightMatrix& w, int64_t r, int64_t c) {
  switch (w.format) {
    case WeightFormat::F32: {
      float v;
      std::memcpy(&v, w.data + (r * w.cols + c) * 4, 4);
      return v;
    }
    case WeightFormat::BF16: {
      uint16_t h;
      std::memcpy(&h, w.data + (r * w.cols + c) * 2, 2);
      return bf16_to_f32(h);
    }
    case WeightFormat::FP8_BLOCK:
      return e4m3_to_f32(w.data[r * w.cols + c]) *
             e8m0_to_f32(w.scale[(r / w.block) * w.scale_cols + c / w.block]);
    case WeightFormat::FP4_BLOCK: {
      uint8_t byte = w.data[r * (w.cols / 2) + c / 2];
      uint8_t nib = (c & 1) ? (byte >> 4) : (byte & 0xf);
      return e2m1_to_f32(nib) * e8m0_to_f32(w.scale[r * w.scale_cols + c / 32]);
    }
  }
  return 0.0f;
}

// Rows [r0, r0 + n) as a matrix of their own. FP8 block scales need r0 on a block edge.
// Returns an invalid (data == nullptr) matrix when the slice cannot be expressed.
WeightMatrix weight_row_slice(const WeightMatrix& w, int64_t r0, int64_t n);

// Decode row r into out[cols] (exact fp32 values).
void weight_decode_row(const WeightMatrix& w, int64_t r, float* out);

}  // namespace deepinfer
