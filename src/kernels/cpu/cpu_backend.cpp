// Fast CPU backend. Work is split over output rows across the pool; each thread decodes a
// weight row once (from its FP8/FP4/BF16 encoding) and reuses it for every activation row.
// Accumulation is fp32 (8 independent partial sums), unlike the ref backend's double.
#include <algorithm>
#include <vector>

#include "kernels/backend.h"
#include "kernels/kernels.h"

namespace deepinfer::kernels {

namespace {

float dot_f32(const float* a, const float* b, int64_t n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) acc[j] += a[i + j] * b[i + j];
  float tail = 0.0f;
  for (; i < n; ++i) tail += a[i] * b[i];
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7])) + tail;
}

// Weight codes without scale (e4m3 / e2m1 values) of row r.
void decode_codes(const WeightMatrix& w, int64_t r, float* out) {
  if (w.format == WeightFormat::FP8_BLOCK) {
    const uint8_t* src = w.data + r * w.cols;
    for (int64_t c = 0; c < w.cols; ++c) out[c] = e4m3_to_f32(src[c]);
  } else {
    const uint8_t* src = w.data + r * (w.cols / 2);
    for (int64_t c = 0; c < w.cols; c += 2) {
      out[c] = e2m1_to_f32(src[c / 2] & 0xf);
      out[c + 1] = e2m1_to_f32(src[c / 2] >> 4);
    }
  }
}

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(ThreadPool* pool) : pool_(pool) {}
  const char* name() const override { return "cpu"; }
  ThreadPool* pool() const override { return pool_; }

  void linear_f32(const float* x, int64_t M, const WeightMatrix& W, float* y) const override {
    const int64_t N = W.rows, K = W.cols;
    parallel_for(pool_, N, 4, [&](int64_t n0, int64_t n1, int) {
      std::vector<float> row(K);
      for (int64_t n = n0; n < n1; ++n) {
        weight_decode_row(W, n, row.data());
        for (int64_t m = 0; m < M; ++m) y[m * N + n] = dot_f32(x + m * K, row.data(), K);
      }
    });
  }

  void linear_act_quant(const float* x, int64_t M, const WeightMatrix& W, int64_t act_block, float* y) const override {
    if (!W.is_quantized()) return linear_f32(x, M, W, y);
    const int64_t N = W.rows, K = W.cols, nb = K / act_block;
    const bool fp4 = W.format == WeightFormat::FP4_BLOCK;
    const int64_t kblock = fp4 ? 32 : act_block;
    std::vector<float> xq(M * K), sx(M * nb), tmp(K);
    for (int64_t m = 0; m < M; ++m) {
      std::copy(x + m * K, x + (m + 1) * K, tmp.begin());
      act_quant_ref(tmp.data(), K, act_block, xq.data() + m * K, sx.data() + m * nb);
    }
    parallel_for(pool_, N, 4, [&](int64_t n0, int64_t n1, int) {
      std::vector<float> codes(K);
      for (int64_t n = n0; n < n1; ++n) {
        decode_codes(W, n, codes.data());
        for (int64_t m = 0; m < M; ++m) {
          float acc = 0.0f;
          for (int64_t k0 = 0; k0 < K; k0 += kblock) {
            float part = dot_f32(xq.data() + m * K + k0, codes.data() + k0, kblock);
            float s_w = fp4 ? e8m0_to_f32(W.scale[n * W.scale_cols + k0 / 32])
                            : e8m0_to_f32(W.scale[(n / W.block) * W.scale_cols + k0 / W.block]);
            acc += part * (sx[m * nb + k0 / act_block] * s_w);
          }
          y[m * N + n] = acc;
        }
      }
    });
  }

  void sink_attention(const float* q, const float* const* keys, int64_t n_keys, int64_t dim, float scale, float sink,
                      bool round_probs, float* out) const override {
    sink_attention_ref(q, keys, n_keys, dim, scale, sink, round_probs, out);
  }

 private:
  ThreadPool* pool_;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(ThreadPool* pool) { return std::make_unique<CpuBackend>(pool); }

}  // namespace deepinfer::kernels
