// Incremental state over a long sequence on a checkpoint whose window wraps many times and
// whose ratio-128 layers hold several entries: whole prefill, odd-sized chunks and
// token-by-token decode agree, in both numerics.
#include <gtest/gtest.h>

#include <filesystem>
#include <random>

#include "golden.h"
#include "model/deepseek_v4/model.h"

using namespace deepinfer;
using namespace deepinfer::v4;

TEST(LongContext, ChunksAndDecodeMatchPrefillOver700Tokens) {
  const std::string dir = std::string(DI_GOLDEN_MODELS_DIR) + "/hf-v4-wide/model";
  ASSERT_TRUE(std::filesystem::exists(dir + "/model.safetensors")) << dir << " missing: run ./setup.sh";
  auto m = Model::load(dir);
  const Config& c = m->config();
  ASSERT_LE(c.window, 16);
  const int64_t V = c.vocab_size, S = 700;  // ratio-128 layers: 5 entries; window 8 wraps 87 times
  std::mt19937 rng(7);
  std::uniform_int_distribution<int32_t> tok(3, int32_t(V - 1));
  std::vector<int32_t> tokens(S);
  for (auto& t : tokens) t = tok(rng);
  tokens[0] = 0;
  ThreadPool pool(2);
  auto cpu = kernels::make_cpu_backend(&pool);
  for (auto mode : {NumericsMode::Float, NumericsMode::Reference}) {
    Numerics num;
    num.mode = mode;
    num.backend = cpu.get();
    auto run = [&](int64_t chunk) {
      auto st = m->new_sequence();
      std::vector<float> logits(S * V);
      for (int64_t i = 0; i < S; i += chunk) {
        const int64_t n = std::min(chunk, S - i);
        m->forward(tokens.data() + i, n, st, num, logits.data() + i * V);
      }
      EXPECT_EQ(st.layers[2].compressor.n_entries(), S / 128);
      return logits;
    };
    auto whole = run(S);
    for (int64_t chunk : {1, 13, 129}) {
      auto part = run(chunk);
      auto s = golden::compare(part, whole, V);
      for (size_t r = 0; r < s.rel.size(); ++r)
        ASSERT_LE(s.rel[r], 1e-4) << numerics_name(mode) << " chunk " << chunk << " row " << r;
    }
  }
}
