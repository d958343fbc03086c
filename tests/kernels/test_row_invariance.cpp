// Row invariance of the fast kernels: an output row is bit-identical whether its activation
// row is computed alone (the decode GEMV path) or among many rows (the GEMM path). Batch
// invariance of the engine and seeded sampling regardless of batch rest on this.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "kernels/backend.h"

using namespace deepinfer;
using namespace deepinfer::kernels;

TEST(RowInvariance, OneRowEqualsItsRowInABatch) {
  std::mt19937 rng(21);
  ThreadPool pool(2);
  auto be = make_cpu_backend(&pool);
  for (auto f : {WeightFormat::F32, WeightFormat::BF16, WeightFormat::FP8_BLOCK, WeightFormat::FP4_BLOCK})
    for (int64_t K : {128, 384, 1024})
      for (int64_t N : {1, 31, 257}) {
        std::vector<uint8_t> data, scale;
        WeightMatrix w;
        w.format = f;
        w.rows = N;
        w.cols = K;
        std::uniform_int_distribution<int> byte(0, 255), sc(118, 128);
        std::normal_distribution<float> nd(0.0f, 0.05f);
        if (f == WeightFormat::FP8_BLOCK) {
          data.resize(N * K);
          for (auto& b : data) {
            do b = uint8_t(byte(rng));
            while ((b & 0x7f) == 0x7f);
          }
          w.block = 128;
          w.scale_cols = (K + 127) / 128;
          scale.resize(((N + 127) / 128) * w.scale_cols);
        } else if (f == WeightFormat::FP4_BLOCK) {
          data.resize(N * K / 2);
          for (auto& b : data) b = uint8_t(byte(rng));
          w.block = 32;
          w.scale_cols = K / 32;
          scale.resize(N * w.scale_cols);
        } else if (f == WeightFormat::BF16) {
          data.resize(N * K * 2);
          for (int64_t i = 0; i < N * K; ++i) {
            uint16_t h = f32_to_bf16(nd(rng));
            std::memcpy(&data[2 * i], &h, 2);
          }
        } else {
          data.resize(N * K * 4);
          for (int64_t i = 0; i < N * K; ++i) {
            float v = nd(rng);
            std::memcpy(&data[4 * i], &v, 4);
          }
        }
        for (auto& s : scale) s = uint8_t(sc(rng));
        w.data = data.data();
        w.scale = scale.empty() ? nullptr : scale.data();
        for (bool bf16_x : {true, false})
          for (bool act_quant : {false, true}) {
            if (act_quant && !w.is_quantized()) continue;
            const int64_t M = 13;
            std::normal_distribution<float> xd(0.0f, 1.0f);
            std::vector<float> x(M * K), batch(M * N), one(N);
            for (auto& v : x) v = bf16_x ? round_bf16(xd(rng)) : xd(rng);
            auto run = [&](const float* xs, int64_t rows, float* y) {
              if (act_quant) be->linear_act_quant(xs, rows, w, 128, y);
              else be->linear_f32(xs, rows, w, y);
            };
            run(x.data(), M, batch.data());
            for (int64_t m = 0; m < M; ++m) {
              run(x.data() + m * K, 1, one.data());
              for (int64_t n = 0; n < N; ++n)
                ASSERT_EQ(f32_bits(one[n]), f32_bits(batch[m * N + n]))
                    << "format " << int(f) << " K " << K << " N " << N << " row " << m << " col " << n
                    << (act_quant ? " act-quant" : "") << (bf16_x ? " bf16 x" : " fp32 x");
            }
          }
      }
}
