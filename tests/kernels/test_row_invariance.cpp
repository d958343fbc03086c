// Row invariance of the fast kernels: an output row is bit-identical whether its activation
// row is computed alone (the decode GEMV path) or among many rows (the GEMM path). Batch
// invariance of the engine and seeded sampling regardless of batch rest on this.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "kernels/backend.h"
#include "random_weight.h"

using namespace deepinfer;
using namespace deepinfer::kernels;

TEST(RowInvariance, OneRowEqualsItsRowInABatch) {
  std::mt19937 rng(21);
  ThreadPool pool(2);
  auto be = make_cpu_backend(&pool);
  for (auto f : {WeightFormat::F32, WeightFormat::BF16, WeightFormat::FP8_BLOCK, WeightFormat::FP4_BLOCK})
    for (int64_t K : {96, 128, 160, 384, 1024})  // FP4: partial chunks of its lane order too
      for (int64_t N : {1, 31, 257}) {
        kernel_test::OwnedWeight o = kernel_test::random_weight(f, N, K, rng);
        const WeightMatrix& w = o.w;
        for (bool bf16_x : {true, false})
          for (bool act_quant : {false, true}) {
            if (act_quant && !w.is_quantized()) continue;
            const int64_t M = 13;
            std::normal_distribution<float> xd(0.0f, 1.0f);
            std::vector<float> x(M * K), batch(M * N), one(N);
            for (auto& v : x) v = bf16_x ? round_bf16(xd(rng)) : xd(rng);
            auto run = [&](const float* xs, int64_t rows, float* y) {
              if (act_quant) be->linear_act_quant(xs, rows, w, K % 128 == 0 ? 128 : 32, y);
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
            // Short batches (a speculative verify chunk, a few decoding sequences: 2..8 rows)
            // take the multi-row GEMV path where the ISA has one: still every row's own bits.
            for (int64_t Mb : {2, 3, 4, 5, 6, 7, 8}) {
              std::vector<float> part(Mb * N);
              run(x.data(), Mb, part.data());
              for (int64_t i = 0; i < Mb * N; ++i)
                ASSERT_EQ(f32_bits(part[i]), f32_bits(batch[i]))
                    << "format " << int(f) << " K " << K << " N " << N << " batch of " << Mb << " at " << i;
            }
          }
      }
}
