// DeepSeek-V4.1's DSpark drafter against the official reference's forward_spec
// (../shared/golden/tiny-v41-a/reference/seqN.dspark.*): at one decode step p of each
// sequence, the draft logits of every block row (Markov bias included), the chained drafts
// and the confidences; the stage rings filled in one go or position by position agree.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>

#include "dspark_steps.h"
#include "golden.h"
#include "model/deepseek_v4/model.h"

using namespace deepinfer;
using namespace deepinfer::v4;

namespace {

const char* kSet = "tiny-v41-a";

const Model& v41_model() {
  static std::unique_ptr<Model> m = Model::load(golden::dir(kSet) + "/model");
  return *m;
}

struct DraftCase {
  std::vector<int32_t> tokens;  // positions 0 .. p, then the draft input y (pending)
  nlohmann::json meta;
};

// The reference's step: the prompt extended by its greedy continuation up to position p.
DraftCase draft_case(const std::string& seq) {
  DraftCase c;
  std::ifstream in(golden::dir(kSet) + "/reference/" + seq + ".dspark.json");
  c.meta = nlohmann::json::parse(in);
  const int64_t p = c.meta.at("p");
  c.tokens = golden::sequence(kSet, seq);
  const auto gen = golden::raw<int32_t>(golden::dir(kSet) + "/reference/" + seq + ".gen.i32");
  for (size_t g = 0; int64_t(c.tokens.size()) < p + 1; ++g) c.tokens.push_back(gen.at(g));
  c.tokens.resize(size_t(p + 1));
  return c;
}

using deepinfer::testing::draft_after;
using deepinfer::testing::Drafted;

}  // namespace

TEST(Dspark, CheckpointShipsTheDrafter) {
  const Model& m = v41_model();
  const Config& c = m.config();
  EXPECT_EQ(m.drafter(), Model::Drafter::kDspark);
  EXPECT_EQ(c.dspark_block_size, 3);
  EXPECT_EQ(c.dspark_target_layers, (std::vector<int64_t>{5, 6, 7}));
  EXPECT_EQ(m.draft_input_width(), 3 * c.dim);
  EXPECT_EQ(m.weights().dspark.stages.size(), 2u);
  EXPECT_EQ(m.weights().dspark.stages[0].ffn.experts.size(), 4u);
}

// Reference numerics against the official forward_spec: on the short sequences every draft row
// agrees to 1e-6 of the logit std (bit-identical when written), on seq300 within the spread of
// the backbone's own rows against the same code (README of the set); the drafts equal, the
// confidences to 1e-3.
TEST(Dspark, ReferenceDraftMatchesOfficialCode) {
  const Model& m = v41_model();
  const int64_t V = m.config().vocab_size;
  Numerics num;
  num.mode = NumericsMode::Reference;
  for (std::string seq : {"seq1", "seq7", "seq40", "seq300"}) {
    const DraftCase dc = draft_case(seq);
    ASSERT_EQ(dc.tokens.back(), dc.meta.at("input_token_at_p").get<int32_t>()) << seq;
    const Drafted d = draft_after(m, dc.tokens, num, int64_t(dc.tokens.size()));
    EXPECT_EQ(d.y, dc.meta.at("draft_input_y").get<int32_t>()) << seq;
    std::vector<int32_t> want_ids = dc.meta.at("draft_ids");
    std::vector<int32_t> got_ids{d.y};
    got_ids.insert(got_ids.end(), d.drafts.begin(), d.drafts.end());
    EXPECT_EQ(got_ids, want_ids) << seq;
    auto want = golden::raw<float>(golden::dir(kSet) + "/reference/" + seq + ".dspark.f32");
    ASSERT_EQ(d.trace.logits.size(), want.size()) << seq;
    auto s = golden::compare(d.trace.logits, want, V);
    std::vector<double> conf_want = dc.meta.at("confidence");
    for (size_t i = 0; i < s.rel.size(); ++i) {
      std::printf("%s row %zu: max|d|/std %.3g, confidence %.7g (reference %.7g)\n", seq.c_str(), i, s.rel[i],
                  d.trace.confidence[i], conf_want[i]);
      EXPECT_LE(s.rel[i], seq == "seq300" ? 3e-2 : 1e-6) << seq << " row " << i;
      EXPECT_TRUE(s.argmax_equal[i]) << seq << " row " << i;
      EXPECT_NEAR(d.trace.confidence[i], conf_want[i], 1e-3 * std::max(1.0, std::abs(conf_want[i]))) << seq;
    }
  }
}

// The rings filled from one prefill or caught up in pieces between drafts hold the same keys:
// the block's logits are bit-identical (both numerics).
TEST(Dspark, RingsCaughtUpInPiecesEqualOnePrefill) {
  const Model& m = v41_model();
  const DraftCase dc = draft_case("seq40");
  for (auto mode : {NumericsMode::Reference, NumericsMode::Float}) {
    Numerics num;
    num.mode = mode;
    const Drafted whole = draft_after(m, dc.tokens, num, int64_t(dc.tokens.size()));
    for (int64_t chunk : {1, 5}) {
      const Drafted part = draft_after(m, dc.tokens, num, chunk);
      EXPECT_EQ(part.drafts, whole.drafts) << numerics_name(mode) << " chunk " << chunk;
      EXPECT_EQ(part.trace.logits, whole.trace.logits) << numerics_name(mode) << " chunk " << chunk;
    }
  }
}
