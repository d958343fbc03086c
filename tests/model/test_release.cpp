// The release registry (src/model/deepseek_v4/release.h): each kind of config runs with its
// release's rules, and the 0731/0813 refreshes keep every backbone rule of V4.
#include <gtest/gtest.h>

#include <string>

#include "model/deepseek_v4/config.h"
#include "model/deepseek_v4/release.h"

namespace deepinfer::v4 {
namespace {

std::string golden_config(const std::string& set) {
  return std::string(DI_GOLDEN_MODELS_DIR) + "/" + set + "/model/config.json";
}

TEST(Release, EachConfigRunsWithItsReleaseRules) {
  const Config v4 = load_config(std::string(DI_SHARED_DIR) + "/golden/tiny-v4-c/model/config.json");
  const Config refresh = load_config(golden_config("tiny-0731"));
  const Config v41 = load_config(golden_config("np-v41-mix"));
  EXPECT_EQ(&release_rules(v4), &v4_release());
  EXPECT_EQ(&release_rules(refresh), &v4_dspark_release());
  EXPECT_EQ(&release_rules(v41), &v41_release());
  // The DSpark stages are bound and run through a config with their own expert counts: it
  // keeps the release.
  EXPECT_EQ(&release_rules(refresh.dspark_stage_config()), &v4_dspark_release());
  // Config's helpers follow the rules.
  EXPECT_EQ(v4.act_block(), 128);
  EXPECT_EQ(v41.act_block(), 32);
  EXPECT_TRUE(refresh.dspark_taps_layer_output());
  EXPECT_FALSE(v41.dspark_taps_layer_output());
}

TEST(Release, RefreshesKeepTheV4Backbone) {
  const ReleaseRules &base = v4_release(), &r = v4_dspark_release();
  EXPECT_EQ(r.act_block, base.act_block);
  EXPECT_EQ(r.act_block_sum, base.act_block_sum);
  EXPECT_EQ(r.window_key_qdq.rope_dims, base.window_key_qdq.rope_dims);
  EXPECT_EQ(r.window_key_qdq.block, base.window_key_qdq.block);
  EXPECT_EQ(r.exact_pooled_projections, base.exact_pooled_projections);
  EXPECT_EQ(r.query_head_norm, base.query_head_norm);
  EXPECT_EQ(r.shared_attention_runtime, base.shared_attention_runtime);
  EXPECT_EQ(r.staggered_mhc, base.staggered_mhc);
  EXPECT_EQ(r.router_temperature, base.router_temperature);
  EXPECT_EQ(r.renorm_one_expert, base.renorm_one_expert);
  EXPECT_EQ(r.renorm_epsilon, base.renorm_epsilon);
  EXPECT_EQ(r.image_router_bias, base.image_router_bias);
  // What differs is the drafter.
  EXPECT_EQ(base.drafting, Drafting::kMtpModule);
  EXPECT_EQ(r.drafting, Drafting::kDspark);
  EXPECT_EQ(std::string(r.markov_embed), "markov_w1");
  EXPECT_EQ(std::string(r.markov_head), "markov_w2");
}

}  // namespace
}  // namespace deepinfer::v4
