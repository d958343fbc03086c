// The cpu backend's sink attention (AVX-512, AVX2 and portable) against the scalar referee.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/backend.h"
#include "kernels/cpu/attention_cpu.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/kernels.h"

using namespace deepinfer;
using namespace deepinfer::kernels;

TEST(CpuAttention, MatchesReferenceOverAwkwardShapes) {
  std::mt19937 rng(9);
  ThreadPool pool(1);
  auto be = make_cpu_backend(&pool);
  for (int64_t n : {1, 2, 17, 64, 65, 129, 257})
    for (int64_t dim : {16, 48, 128, 512, 40})
      for (bool round_probs : {false, true}) {
        std::normal_distribution<float> nd(0.0f, 1.0f);
        std::vector<float> q(dim), kv(n * dim);
        for (auto& v : q) v = round_bf16(nd(rng));
        for (auto& v : kv) v = round_bf16(nd(rng));
        std::vector<const float*> keys(n);
        std::uniform_int_distribution<int> coin(0, 3);
        for (int64_t j = 0; j < n; ++j) keys[j] = (j > 0 && coin(rng) == 0) ? nullptr : &kv[j * dim];
        const float scale = 1.0f / std::sqrt(float(dim)), sink = 0.7f;
        std::vector<float> want(dim), fast(dim + 1, 5.0f), portable(dim + 1, 5.0f);
        sink_attention_ref(q.data(), keys.data(), n, dim, scale, sink, round_probs, want.data());
        be->sink_attention(q.data(), keys.data(), n, dim, scale, sink, round_probs, fast.data());
        cpu::sink_attention_fast(q.data(), keys.data(), n, dim, scale, sink, round_probs, portable.data());
        EXPECT_EQ(fast[dim], 5.0f);
        EXPECT_EQ(portable[dim], 5.0f);
        // fp32 accumulation vs double; with bf16 probabilities a 1-ulp exp difference may
        // round one probability to the neighbouring bf16 value (2^-8 relative).
        const double tol = round_probs ? 8e-3 : 2e-5;
        for (int64_t c = 0; c < dim; ++c) {
          ASSERT_TRUE(std::isfinite(fast[c]));
          EXPECT_NEAR(fast[c], want[c], tol * (1.0 + std::abs(want[c]))) << n << " " << dim << " " << c;
          EXPECT_NEAR(portable[c], want[c], tol * (1.0 + std::abs(want[c]))) << n << " " << dim << " " << c;
        }
      }
}

// Several heads over one key list (the model's attention has one KV head) give each head
// exactly what its own call gives, on every backend: null keys, tiles that end early, more
// heads than the fast kernel carries at once (16), dims it does not take (40: fallback).
TEST(CpuAttention, HeadsTogetherEqualHeadsAlone) {
  std::mt19937 rng(10);
  ThreadPool pool(1);
  auto cpu_be = make_cpu_backend(&pool);
  for (const Backend* be : std::vector<const Backend*>{cpu_be.get(), &ref_backend()})
    for (int64_t n : {1, 63, 64, 65, 200})
      for (int64_t dim : {16, 512, 40})
        for (int64_t H : {1, 3, 17})
          for (bool round_probs : {false, true}) {
            std::normal_distribution<float> nd(0.0f, 1.0f);
            std::vector<float> q(H * dim), kv(n * dim), sinks(H);
            for (auto& v : q) v = round_bf16(nd(rng));
            for (auto& v : kv) v = round_bf16(nd(rng));
            for (auto& v : sinks) v = nd(rng);
            std::vector<const float*> keys(n);
            std::uniform_int_distribution<int> coin(0, 3);
            for (int64_t j = 0; j < n; ++j) keys[j] = (j > 0 && coin(rng) == 0) ? nullptr : &kv[j * dim];
            const float scale = 1.0f / std::sqrt(float(dim));
            std::vector<float> alone(H * dim), together(H * dim + 1, 5.0f);
            for (int64_t h = 0; h < H; ++h)
              be->sink_attention(&q[h * dim], keys.data(), n, dim, scale, sinks[h], round_probs, &alone[h * dim]);
            be->sink_attention_heads(q.data(), H, keys.data(), n, dim, scale, sinks.data(), round_probs, together.data());
            EXPECT_EQ(together[H * dim], 5.0f);
            ASSERT_EQ(0, std::memcmp(alone.data(), together.data(), alone.size() * sizeof(float)))
                << be->name() << " n " << n << " dim " << dim << " heads " << H << " round " << round_probs;
          }
}

// The AVX2 kernel reproduces the AVX-512 one bit for bit (so a model attends to the same keys
// on either machine); checked where the CPU has both.
TEST(CpuAttention, Avx2EqualsAvx512) {
#if !defined(__x86_64__) && !defined(__i386__)
  GTEST_SKIP() << "x86 kernels";  // not compiled on this architecture
#else
  if (!isa_supported(Isa::Avx512) || !isa_supported(Isa::Avx2)) GTEST_SKIP() << "needs AVX-512 and AVX2";
  std::mt19937 rng(11);
  for (int64_t n : {1, 63, 64, 65, 300})
    for (int64_t dim : {16, 48, 128, 512})
      for (bool round_probs : {false, true}) {
        std::normal_distribution<float> nd(0.0f, 1.0f);
        const int64_t H = 5;
        std::vector<float> q(H * dim), kv(n * dim), sinks(H);
        for (auto& v : q) v = nd(rng) * 4.0f;
        for (auto& v : kv) v = nd(rng);
        for (auto& v : sinks) v = nd(rng);
        std::vector<const float*> keys(n);
        std::uniform_int_distribution<int> coin(0, 3);
        for (int64_t j = 0; j < n; ++j) keys[j] = (j > 0 && coin(rng) == 0) ? nullptr : &kv[j * dim];
        const float scale = 1.0f / std::sqrt(float(dim));
        std::vector<float> a(H * dim), b(H * dim);
        cpu::sink_attention_heads_avx2(q.data(), H, keys.data(), n, dim, scale, sinks.data(), round_probs, a.data());
        cpu::sink_attention_heads_avx512(q.data(), H, keys.data(), n, dim, scale, sinks.data(), round_probs, b.data());
        ASSERT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float))) << "n " << n << " dim " << dim;
      }
#endif
}
