// The MTP module loads and runs: finite logits, and its own window state makes a one-shot
// pass over S positions equal to S single steps (the speculative-decoding use).
#include <gtest/gtest.h>

#include <cmath>

#include "golden.h"
#include "model/deepseek_v4/model.h"

using namespace deepinfer;
using namespace deepinfer::v4;

TEST(Mtp, RunsAndIsChunkInvariant) {
  auto m = Model::load(golden::dir("tiny-v4-c") + "/model");
  ASSERT_EQ(m->config().n_mtp_layers, 1);
  const int64_t V = m->config().vocab_size, hc = m->config().hc_mult, d = m->config().dim;
  auto toks = golden::sequence("tiny-v4-c", "seq40");
  const int64_t S = int64_t(toks.size()) - 1;
  for (auto mode : {NumericsMode::Reference, NumericsMode::Float}) {
    Numerics num;
    num.mode = mode;
    auto st = m->new_sequence();
    std::vector<float> streams;
    m->forward(toks.data(), S, st, num, nullptr, &streams);
    ASSERT_EQ(int64_t(streams.size()), S * hc * d);
    std::vector<float> once(S * V), steps(S * V);
    m->forward_mtp(0, streams.data(), toks.data() + 1, S, 0, st, num, once.data());
    for (float v : once) ASSERT_TRUE(std::isfinite(v));
    auto st2 = m->new_sequence();
    for (int64_t t = 0; t < S; ++t)
      m->forward_mtp(0, streams.data() + t * hc * d, toks.data() + 1 + t, 1, t, st2, num, steps.data() + t * V);
    double maxd = 0, maxv = 0;
    for (int64_t i = 0; i < S * V; ++i) {
      maxd = std::max(maxd, double(std::abs(once[i] - steps[i])));
      maxv = std::max(maxv, double(std::abs(once[i])));
    }
    EXPECT_LE(maxd, 1e-4 * maxv) << numerics_name(mode);
    EXPECT_GT(maxv, 0.0);
  }
}
