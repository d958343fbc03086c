// The MTP module loads and runs: finite logits, and its own window state makes a one-shot
// pass over S positions equal to S single steps (the speculative-decoding use).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "golden.h"
#include "model/deepseek_v4/model.h"

using namespace deepinfer;
using namespace deepinfer::v4;

namespace {
// The backbone over the first S tokens into st: its final streams, the MTP module's inputs.
std::vector<float> backbone_streams(const Model& m, const std::vector<int32_t>& toks, int64_t S, SequenceState& st,
                                    const Numerics& num) {
  std::vector<float> streams;
  m.forward(toks.data(), S, st, num, nullptr, &streams);
  return streams;
}

Numerics numerics(NumericsMode mode) {
  Numerics num;
  num.mode = mode;
  return num;
}
}  // namespace

TEST(Mtp, RunsAndIsChunkInvariant) {
  auto m = Model::load(golden::dir("tiny-v4-c") + "/model");
  ASSERT_EQ(m->config().n_mtp_layers, 1);
  const int64_t V = m->config().vocab_size, hc = m->config().hc_mult, d = m->config().dim;
  auto toks = golden::sequence("tiny-v4-c", "seq40");
  const int64_t S = int64_t(toks.size()) - 1;
  for (auto mode : {NumericsMode::Reference, NumericsMode::Float}) {
    const Numerics num = numerics(mode);
    auto st = m->new_sequence();
    const std::vector<float> streams = backbone_streams(*m, toks, S, st, num);
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

// A draft after a pause catches the module up on many positions at once: it writes the keys of
// all rows but the last into its ring and runs the block on the last row alone. The ring and
// the last row's logits are those of the module run over every row.
TEST(Mtp, DraftCatchUpMatchesTheFullModule) {
  auto m = Model::load(golden::dir("tiny-v4-c") + "/model");
  const Config& c = m->config();
  const int64_t V = c.vocab_size, hc = c.hc_mult, d = c.dim;
  auto toks = golden::sequence("tiny-v4-c", "seq40");
  const int64_t S = int64_t(toks.size()) - 1;
  ASSERT_GT(S, c.window);  // the catch-up also overwrites ring slots
  for (auto mode : {NumericsMode::Reference, NumericsMode::Float}) {
    const Numerics num = numerics(mode);
    auto st = m->new_sequence();
    const std::vector<float> streams = backbone_streams(*m, toks, S, st, num);
    auto full = m->new_sequence(), draft = m->new_sequence();
    std::vector<float> all(S * V), last(V), out_streams(hc * d);
    m->forward_mtp(0, streams.data(), toks.data() + 1, S, 0, full, num, all.data());
    m->forward_mtp_draft(0, streams.data(), toks.data() + 1, S, 0, draft, num, last.data(), out_streams.data());
    EXPECT_EQ(0, std::memcmp(last.data(), all.data() + (S - 1) * V, size_t(V) * sizeof(float))) << numerics_name(mode);
    for (int64_t slot = 0; slot < c.window; ++slot)
      ASSERT_EQ(0, std::memcmp(full.mtp_layers[0].ring_row(slot), draft.mtp_layers[0].ring_row(slot),
                               size_t(c.head_dim) * sizeof(float)))
          << numerics_name(mode) << " ring slot " << slot;
  }
}
