// DeepSeek-V4-Flash-0731 / V4-Pro-0813: V4 with a DSpark drafter instead of the MTP module
// (docs/model/mtp_dspark.md §3). The backbone is V4's (release_v4.cpp); what differs:
//   * mtp.* holds DSpark stages: ordinary ratio-0 V4 blocks (per-site mHC, query head
//     norm, V4 window QDQ) with the backbone's MoE shape         docs/model/mtp_dspark.md §3.2, §3.4
//   * a tap is the bf16 stream mean AFTER its target layer (V4.1 taps the input)
//                                                                docs/model/mtp_dspark.md §3.3
//   * the last stage's own hc_head collapses the draft block     docs/model/mtp_dspark.md §3.4
//   * Markov tables markov_head.markov_w1 / markov_w2            docs/model/mtp_dspark.md §3.2
// Recognised by config.json's dspark_* keys (config.cpp, docs/model/config.md §1.2): the stage
// count is the trailing compress_ratios entries, num_nextn_predict_layers is ignored.
#include <string>

#include "core/log.h"
#include "model/deepseek_v4/config.h"
#include "model/deepseek_v4/release.h"

namespace deepinfer::v4 {

namespace {

void log_v4_dspark(const Config& c, const TensorStore&) {
  std::string layers;
  for (int64_t l : c.dspark_target_layers) {
    if (!layers.empty()) layers += ',';
    layers += std::to_string(l);
  }
  log_info("DeepSeek-V4 DSpark drafter (0731/0813 layout): %lld stages, blocks of %lld tokens, taps after layers %s",
           (long long)c.n_mtp_layers, (long long)c.dspark_block_size, layers.c_str());
}

}  // namespace

const ReleaseRules& v4_dspark_release() {
  static const ReleaseRules rules = [] {
    ReleaseRules r = v4_release();
    r.name = "DeepSeek-V4 (0731/0813 layout)";
    r.drafting = Drafting::kDspark;
    r.dspark_taps_layer_output = true;
    r.markov_embed = "markov_w1";
    r.markov_head = "markov_w2";
    r.log_load = log_v4_dspark;
    return r;
  }();
  return rules;
}

}  // namespace deepinfer::v4
